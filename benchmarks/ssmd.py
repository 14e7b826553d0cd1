"""SSMD benchmark: AR (block size 1), static and dynamic confidence decoding, S2D2 and SSMD on the same infill
tasks in one run, at the block sizes of `--blocks`. For every decoder it reports:

- full passes (base-model forwards: prefill, drafts, verifications, cache commits) and tokens per full pass;
- passes counted the SSMD paper's way (a full pass = 1, each extra causal-head pass = 1/L, L = the base's
  layers + 1) and the plain way (every causal-head pass = 1); both equal the full passes for the decoders
  without a head;
- decode wall time (DecodeStats.seconds, summed over tasks) and speed versus AR;
- HumanEval single-line infilling pass@1 (`--humaneval N` tasks evenly spaced over the 1,033; programs run in
  subprocesses with a timeout, as `infill eval humaneval-single-line` does);
- exact match on single lines of the corpus's held-out split (`--heldout N` lines, needs `--corpus`).

Every fill goes through `infill.api.fill_text`, the path `infill fill` takes; the per-fill decoder stats are
collected by wrapping `infill.decoding.blockfill.fill_middle`.

    python benchmarks/ssmd.py --model blockdiff --corpus /work/runs/corpus   # the packaged model and its head
    python benchmarks/ssmd.py --random --humaneval 5 --heldout 0             # untrained model + head: mechanics

SSMD is exact per speculative step, not with respect to one fixed model's joint (docs/ssmd.md); the other
rows' exactness is as documented for them. A warm-up over a few tasks runs first and is not counted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rounds import block_jobs, rounds_note, run_rounds  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="blockdiff", help="block-diffusion model name or folder (with an SSMD head)")
    ap.add_argument("--random", action="store_true", help="use a random untrained model and head instead")
    ap.add_argument("--corpus", type=Path, help="corpus folder (its held-out split gives --heldout lines)")
    ap.add_argument("--humaneval", type=int, default=100, help="HumanEval single-line tasks (0 = skip)")
    ap.add_argument("--heldout", type=int, default=100, help="held-out lines (0 = skip)")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    ap.add_argument("--threshold", type=float, default=0.9, help="dynamic confidence threshold tau")
    ap.add_argument("--static-per-step", type=int, default=2, help="tokens per step for static decoding")
    ap.add_argument("--blocks", default="4,16", help="block sizes of the static, dynamic, S2D2 and SSMD rows")
    ap.add_argument("--routing", default="min-span", help="S2D2 routing policy")
    ap.add_argument("--causal-passes", type=int, default=2, help="SSMD: causal-head passes K per full pass")
    ap.add_argument("--window", type=int, default=0, help="SSMD: fixed window (0 = cosine schedule)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="rounds; seconds are the median over them")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write every row as JSON here")
    args = ap.parse_args()

    import torch

    import infill.decoding.blockfill as blockfill
    from infill.api import load_model
    from infill.config import DecodeConfig, FillOptions, ModelSpec
    from infill.evaluation import heldout, humaneval
    from infill.evaluation.filling import api_filler
    from infill.models.blockdiff_folder import ModelShape
    from infill.models.ssmd import HEAD_FILE, HeadShape, SSMDHead, save_head
    from infill.models.tiny import tiny_blockdiff_checkpoint

    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()
    if args.random:
        shape = ModelShape(hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, intermediate=768)
        texts = [f.read_text(encoding="utf-8") for f in sorted((ROOT / "infill").rglob("*.py"))]
        folder = tiny_blockdiff_checkpoint(Path(tmp.name) / "random", seed=args.seed, shape=shape, texts=texts)
        torch.manual_seed(args.seed)
        head = SSMDHead(HeadShape(hidden=shape.hidden))
        torch.nn.init.normal_(head.out.weight, std=0.02)
        save_head(folder / HEAD_FILE, head, {"random": True})
        name, what = str(folder), "a RANDOM untrained 4-layer Qwen3 model and SSMD head (mechanics only)"
    else:
        name, what = args.model, f"model {args.model}"
    loaded = load_model(ModelSpec(name=name, device="cpu", bf16=False))
    if loaded.kind != "blockdiff":
        sys.exit(f"{name} is not a block-diffusion model")
    if loaded.model.ssmd_head is None:
        sys.exit(f"{name} has no SSMD head ({HEAD_FILE}); train one with `infill train ssmd`")

    he_tasks = humaneval.evenly_spaced(humaneval.build_tasks(humaneval.load_problems()), args.humaneval or 1)
    he_tasks = he_tasks if args.humaneval else []
    ho_tasks: list[Any] = []
    if args.heldout:
        if args.corpus is None:
            sys.exit("--heldout needs --corpus (or pass --heldout 0)")
        ho_tasks = heldout.sample_line_tasks(heldout.corpus_heldout_files(args.corpus), args.heldout, args.seed)
    count = lambda text: len(loaded.tokenizer.encode(text))  # noqa: E731
    max_ctx = max(32, (loaded.model.max_positions or 512) - 64)  # config.max_position_embeddings

    def crop(slot: Any) -> Any:
        return heldout.crop_slot(slot, count, max_ctx)

    base = DecodeConfig(temperature=args.temperature, threshold=args.threshold, seed=args.seed)
    rows: list[tuple[str, DecodeConfig]] = [("AR", replace(base, decoder="confidence", block_size=1))]
    for b in [int(x) for x in args.blocks.split(",") if x]:
        per = args.static_per_step
        rows += [
            (f"static({per}/step)", replace(base, decoder="confidence", block_size=b, unmask_per_step=per)),
            (f"dynamic(tau={args.threshold})", replace(base, decoder="confidence", block_size=b)),
            (f"s2d2 {args.routing}", replace(base, decoder="s2d2", block_size=b, routing=args.routing)),
            (
                f"ssmd K={args.causal_passes} w={args.window or 'cos'}",
                replace(base, decoder="ssmd", block_size=b, ssmd_passes=args.causal_passes, ssmd_window=args.window),
            ),
        ]

    tally: dict[str, float] = {}
    real_fill_middle = blockfill.fill_middle

    def counted(*a: Any, **kw: Any) -> Any:
        text, stats = real_fill_middle(*a, **kw)
        ex = stats.extra
        for key, value in (
            ("full", stats.nfe),
            ("paper", ex.get("nfe_paper", stats.nfe)),
            ("plain", ex.get("nfe_plain", stats.nfe)),
            ("head", ex.get("head_passes", 0)),
            ("tokens", stats.tokens),
            ("seconds", stats.seconds),
        ):
            tally[key] = tally.get(key, 0.0) + float(value)
        return text, stats

    blockfill.fill_middle = counted  # type: ignore[assignment]  # fill_text imports it at call time

    def measure(cfg: DecodeConfig) -> dict[str, Any]:
        fill = api_filler(loaded, cfg, FillOptions())
        tally.clear()
        row: dict[str, Any] = {}
        if he_tasks:
            row["humaneval_pass_at_1"] = humaneval.run_single_line(he_tasks, fill)["summary"]["pass_at_1"]
        if ho_tasks:
            s = heldout.run_heldout_exact(ho_tasks, fill, crop=crop)["summary"]
            row.update(heldout_exact=s["exact_match"], heldout_exact_stripped=s["exact_match_stripped"])
        row.update({k: tally.get(k, 0.0) for k in ("full", "paper", "plain", "head", "tokens", "seconds")})
        return row

    warm = api_filler(loaded, rows[-1][1], FillOptions())
    for task in (he_tasks or [])[:3]:
        warm(task.slot, None)

    results = run_rounds(block_jobs(rows, measure), args.repeat)
    blockfill.fill_middle = real_fill_middle  # type: ignore[assignment]
    tmp.cleanup()

    ar = results[0]
    head_params = loaded.info.get("ssmd_head") or 0
    print(
        f"# SSMD benchmark: {what}, {loaded.info.get('parameters', 0) / 1e6:.1f}M parameters "
        f"+ SSMD head {head_params / 1e6:.2f}M"
    )
    print(
        f"# {len(he_tasks)} HumanEval single-line tasks + {len(ho_tasks)} held-out lines, through fill_text; "
        f"T={args.temperature}, torch threads {args.threads}"
    )
    head = f"{'decoder':22} {'B':>3} {'full':>6} {'paper':>8} {'plain':>6} {'tokens':>6} {'tok/full':>8}"
    head += f" {'seconds':>8} {'vs AR':>6} {'HE pass@1':>9} {'held-out EM':>11}"
    print(head)
    for r in results:
        he = f"{100 * r['humaneval_pass_at_1']:.1f}%" if "humaneval_pass_at_1" in r else "-"
        ho = f"{100 * r['heldout_exact']:.1f}%" if "heldout_exact" in r else "-"
        line = f"{r['decoder']:22} {r['block_size']:>3} {r['full']:>6.0f} {r['paper']:>8.1f} {r['plain']:>6.0f}"
        line += f" {r['tokens']:>6.0f} {r['tokens'] / max(r['full'], 1):>8.2f} {r['seconds']:>8.2f}"
        line += f" {ar['seconds'] / max(r['seconds'], 1e-9):>5.2f}x"
        print(f"{line} {he:>9} {ho:>11}")
    print("# full = base-model forwards; paper = full + extra causal-head passes / L; plain = full + head passes")
    print("# vs AR = AR seconds / seconds (decode wall time)")
    print(rounds_note(args.repeat))
    for r in results:
        if not r["repeats"]:
            print(f"# * {r['decoder']}: tokens or quality changed between rounds")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
