"""S2D2 benchmark: AR (block size 1), static and dynamic confidence decoding at B = 4, 8, 16, 32, and S2D2
with each routing policy, on the same infill tasks in one run. For every decoder it reports NFE, decode time,
speedup versus AR (and versus dynamic confidence at S2D2's block size), and quality:

- HumanEval single-line infilling pass@1 (`--humaneval N` tasks evenly spaced over the 1,033; programs run
  in subprocesses with a timeout, as `infill eval humaneval-single-line` does);
- exact match on single lines of the corpus's held-out split (`--heldout N` lines, needs `--corpus`).

Every fill goes through `infill.api.fill_text`, the path `infill fill` takes (length policy, post-processing).

    python benchmarks/s2d2.py --model blockdiff --corpus /work/runs/corpus    # the packaged BD model
    python benchmarks/s2d2.py --random                                        # an untrained model: mechanics

Times are the decoders' own wall time (DecodeStats.seconds, summed over tasks), not program execution; a
warm-up pass over a few tasks runs first and is not counted. Paper reference (SDAR-1.7B, S2D2 paper): up to
4.7x faster than AR and 1.57x faster than dynamic confidence decoding, with up to +4.5 points accuracy.
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
    ap.add_argument("--model", default="blockdiff", help="block-diffusion model name or folder")
    ap.add_argument("--random", action="store_true", help="use a random untrained 4-layer model instead")
    ap.add_argument("--corpus", type=Path, help="corpus folder (its held-out split gives --heldout lines)")
    ap.add_argument("--humaneval", type=int, default=100, help="HumanEval single-line tasks (0 = skip)")
    ap.add_argument("--heldout", type=int, default=100, help="held-out lines (0 = skip)")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    ap.add_argument("--threshold", type=float, default=0.9, help="dynamic confidence threshold tau")
    ap.add_argument("--static-per-step", type=int, default=2, help="tokens per step for static decoding")
    ap.add_argument("--s2d2-block", type=int, default=16, help="block size for the S2D2 rows")
    ap.add_argument("--blocks", default="4,8,16,32", help="block sizes of the confidence rows")
    ap.add_argument("--routings", default="min-span,score-static,score-dynamic,hysteresis,ucb,always")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="rounds; seconds are the median over them")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write every row as JSON here")
    args = ap.parse_args()

    import torch

    from infill.api import load_model
    from infill.config import DecodeConfig, FillOptions, ModelSpec
    from infill.evaluation import heldout, humaneval
    from infill.evaluation.filling import api_filler
    from infill.models.blockdiff_folder import ModelShape
    from infill.models.tiny import tiny_blockdiff_checkpoint as tiny_checkpoint

    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()
    if args.random:
        shape = ModelShape(hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, intermediate=768)
        texts = [f.read_text(encoding="utf-8") for f in sorted((ROOT / "infill").rglob("*.py"))]
        name = str(tiny_checkpoint(Path(tmp.name) / "random", seed=args.seed, shape=shape, texts=texts))
        what = "a RANDOM untrained 4-layer Qwen3 model (mechanics only)"
    else:
        name, what = args.model, f"model {args.model}"
    loaded = load_model(ModelSpec(name=name, device="cpu", bf16=False))
    if loaded.kind != "blockdiff":
        sys.exit(f"{name} is not a block-diffusion model")

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
    blocks = [int(b) for b in args.blocks.split(",") if b]
    for b in blocks:
        rows.append(
            (
                f"static({args.static_per_step}/step)",
                replace(base, decoder="confidence", block_size=b, unmask_per_step=args.static_per_step),
            )
        )
    for b in blocks:
        rows.append((f"dynamic(tau={args.threshold})", replace(base, decoder="confidence", block_size=b)))
    for policy in [p for p in args.routings.split(",") if p]:
        rows.append((f"s2d2 {policy}", replace(base, decoder="s2d2", block_size=args.s2d2_block, routing=policy)))

    def measure(cfg: DecodeConfig) -> dict[str, Any]:
        fill = api_filler(loaded, cfg, FillOptions())
        row: dict[str, Any] = {}
        nfe = tokens = 0
        seconds = 0.0
        if he_tasks:
            rep = humaneval.run_single_line(he_tasks, fill)
            s = rep["summary"]
            row["humaneval_pass_at_1"] = s["pass_at_1"]
            nfe += sum(r["nfe"] for r in rep["results"])
            tokens += sum(r["tokens"] for r in rep["results"])
            seconds += sum(r["decode_seconds"] for r in rep["results"])
        if ho_tasks:
            rep = heldout.run_heldout_exact(ho_tasks, fill, crop=crop)
            row["heldout_exact"] = rep["summary"]["exact_match"]
            row["heldout_exact_stripped"] = rep["summary"]["exact_match_stripped"]
            nfe += sum(r["nfe"] for r in rep["results"])
            tokens += sum(r["tokens"] for r in rep["results"])
            seconds += sum(r["decode_seconds"] for r in rep["results"])
        row.update(nfe=nfe, tokens=tokens, seconds=seconds)
        return row

    warm = api_filler(loaded, rows[0][1], FillOptions())
    for task in (he_tasks or [])[:3]:
        warm(task.slot, None)

    results = run_rounds(block_jobs(rows, measure), args.repeat)
    tmp.cleanup()

    ar = results[0]
    dyn = next((r for r in results if r["decoder"].startswith("dynamic") and r["block_size"] == args.s2d2_block), None)
    print(f"# S2D2 benchmark: {what}, {loaded.info.get('parameters', 0) / 1e6:.1f}M parameters")
    print(
        f"# {len(he_tasks)} HumanEval single-line tasks + {len(ho_tasks)} held-out lines, through fill_text; "
        f"T={args.temperature}, torch threads {args.threads}"
    )
    head = f"{'decoder':26} {'B':>3} {'NFE':>6} {'tokens':>6} {'tok/NFE':>7} {'seconds':>8} {'vs AR':>6}"
    head += f" {'vs dyn':>6} {'HE pass@1':>9} {'held-out EM':>11}"
    print(head)
    for r in results:
        vs_dyn = f"{dyn['seconds'] / r['seconds']:.2f}x" if dyn and r["decoder"].startswith("s2d2") else "-"
        he = f"{100 * r['humaneval_pass_at_1']:.1f}%" if "humaneval_pass_at_1" in r else "-"
        ho = f"{100 * r['heldout_exact']:.1f}%" if "heldout_exact" in r else "-"
        line = f"{r['decoder']:26} {r['block_size']:>3} {r['nfe']:>6} {r['tokens']:>6}"
        line += f" {r['tokens'] / max(r['nfe'], 1):>7.2f} {r['seconds']:>8.2f} {ar['seconds'] / r['seconds']:>5.2f}x"
        print(f"{line} {vs_dyn:>6} {he:>9} {ho:>11}")
    print("# vs AR = AR seconds / seconds; vs dyn = dynamic confidence (same B as S2D2) seconds / seconds")
    print(rounds_note(args.repeat))
    for r in results:
        if not r["repeats"]:
            print(f"# * {r['decoder']}: tokens or quality changed between rounds")
    print("# paper (SDAR-1.7B): S2D2 up to 4.7x vs AR, 1.57x vs dynamic confidence, up to +4.5 points accuracy")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
