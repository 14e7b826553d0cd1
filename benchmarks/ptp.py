"""PTP benchmark: AR (block size 1), PTP, the independent-slot baseline (the same adapter without u), S2D2 and
dynamic confidence decoding on the same infill tasks in one run. For every decoder it reports tokens, forward
passes, tokens per pass, tokens per iteration (PTP rows), decode wall time and quality:

- HumanEval single-line infilling pass@1 (`--humaneval N` tasks evenly spaced over the 1,033; programs run in
  subprocesses with a timeout, as `infill eval humaneval-single-line` does);
- exact match on single lines of the corpus's held-out split (`--heldout N` lines, needs `--corpus`).

Every fill goes through `infill.api.fill_text`, the path `infill fill` takes. The decoders' own statistics
(DecodeStats of every decode, resampling included) are collected by wrapping blockfill.run_decoder.

    python benchmarks/ptp.py --model blockdiff --corpus /work/runs/corpus        # the packaged model + adapter

AR, PTP and the independent baseline are exact samplers of the same distribution (PTP and its baseline even
give the same tokens for the same seed, by coupling), so their quality columns differ only by sampling noise
against AR's multinomial draws; S2D2 (min-span routing) and dynamic confidence decoding are other trade-offs.
PTP costs 2 forwards per iteration (an iteration yields >= 2 tokens), so it needs more than ~2 tokens per
iteration per AR-forward-equivalent to win wall time; fewer passes per token is reported either way.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rounds import rounds_note, run_rounds  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="blockdiff", help="block-diffusion model name or folder (with ptp_adapter)")
    ap.add_argument("--corpus", type=Path, help="corpus folder (its held-out split gives --heldout lines)")
    ap.add_argument("--humaneval", type=int, default=100, help="HumanEval single-line tasks (0 = skip)")
    ap.add_argument("--heldout", type=int, default=100, help="held-out lines (0 = skip)")
    ap.add_argument("--temperatures", default="1.0,0.0", help="comma-separated; 0 = greedy")
    ap.add_argument("--slots", type=int, default=8, help="PTP slots (k)")
    ap.add_argument("--s2d2-block", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="rounds; seconds are the median over them")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write every row as JSON here")
    args = ap.parse_args()

    import torch

    import infill.decoding.blockfill as blockfill
    from infill.api import load_model
    from infill.config import DecodeConfig, FillOptions, ModelSpec
    from infill.decoding import ptp
    from infill.decoding.stats import DecodeStats
    from infill.evaluation import heldout, humaneval
    from infill.evaluation.filling import api_filler

    torch.set_num_threads(args.threads)
    loaded = load_model(ModelSpec(name=args.model, device="cpu", bf16=False))
    if loaded.kind != "blockdiff":
        sys.exit(f"{args.model} is not a block-diffusion model")
    adapter = ptp.adapter_of(loaded.model)  # InputError when the model has no adapter
    records: list[DecodeStats] = []
    original = blockfill.run_decoder  # what fill_middle (the path of fill_text) calls for every decode

    def spy(*a: Any, **kw: Any) -> Any:
        tokens, stats = original(*a, **kw)
        records.append(stats)
        return tokens, stats

    blockfill.run_decoder = spy  # type: ignore[assignment]

    he_tasks = humaneval.evenly_spaced(humaneval.build_tasks(humaneval.load_problems()), args.humaneval or 1)
    he_tasks = he_tasks if args.humaneval else []
    ho_tasks: list[Any] = []
    if args.heldout:
        if args.corpus is None:
            sys.exit("--heldout needs --corpus (or pass --heldout 0)")
        ho_tasks = heldout.sample_line_tasks(heldout.corpus_heldout_files(args.corpus), args.heldout, args.seed)
    count = lambda text: len(loaded.tokenizer.encode(text))  # noqa: E731
    max_ctx = max(32, int(loaded.model.model.config.max_position_embeddings) - 64)

    def crop(slot: Any) -> Any:
        return heldout.crop_slot(slot, count, max_ctx)

    def measure(cfg: DecodeConfig, use_u: bool) -> dict[str, Any]:
        adapter.use_u = use_u
        records.clear()
        fill = api_filler(loaded, cfg, FillOptions())
        row: dict[str, Any] = {}
        if he_tasks:
            row["humaneval_pass_at_1"] = humaneval.run_single_line(he_tasks, fill)["summary"]["pass_at_1"]
        if ho_tasks:
            rep = heldout.run_heldout_exact(ho_tasks, fill, crop=crop)
            row["heldout_exact"] = rep["summary"]["exact_match"]
        adapter.use_u = True
        row["decodes"] = len(records)
        row["tokens"] = sum(s.tokens for s in records)
        row["nfe"] = sum(s.nfe for s in records)
        row["seconds"] = sum(s.seconds for s in records)
        row["iterations"] = sum(int(s.extra.get("iterations", 0)) for s in records)
        row["drafts_accepted"] = sum(sum(s.extra["drafts_accepted"]) for s in records) if cfg.decoder == "ptp" else None
        return row

    rows: list[tuple[str, DecodeConfig, bool]] = []
    for t in [float(x) for x in args.temperatures.split(",") if x]:
        base = DecodeConfig(temperature=t, seed=args.seed)
        rows += [
            ("AR (B=1)", replace(base, decoder="confidence", block_size=1), True),
            (f"PTP N={args.slots}", replace(base, decoder="ptp", k=args.slots), True),
            (f"independent N={args.slots}", replace(base, decoder="ptp", k=args.slots), False),
            (f"S2D2 min-span B={args.s2d2_block}", replace(base, decoder="s2d2", block_size=args.s2d2_block), True),
            ("dynamic conf B=4", replace(base, decoder="confidence", block_size=4), True),
            ("dynamic conf B=16", replace(base, decoder="confidence", block_size=16), True),
        ]
    warm = api_filler(loaded, rows[0][1], FillOptions())
    for task in (he_tasks or [])[:3]:
        warm(task.slot, None)

    def labelled(cfg: DecodeConfig, use_u: bool, **labels: Any) -> dict[str, Any]:
        return {**measure(cfg, use_u), **labels}

    jobs = [
        (f"{label} T={cfg.temperature}", partial(labelled, cfg, use_u, decoder=label, temperature=cfg.temperature))
        for label, cfg, use_u in rows
    ]
    results = run_rounds(jobs, args.repeat)
    blockfill.run_decoder = original  # type: ignore[assignment]

    prov = adapter.cfg.provenance or {}
    print(f"# PTP benchmark: model {args.model}, {loaded.info.get('parameters', 0) / 1e6:.1f}M parameters")
    print(
        f"# adapter: rank {adapter.cfg.rank}, {sum(p.numel() for p in adapter.parameters()) / 1e6:.2f}M parameters, "
        f"{prov.get('steps', '?')} training steps"
    )
    print(
        f"# {len(he_tasks)} HumanEval single-line tasks + {len(ho_tasks)} held-out lines, through fill_text; "
        f"torch threads {args.threads}"
    )
    head = f"{'decoder':24} {'T':>4} {'tokens':>6} {'passes':>6} {'tok/pass':>8} {'tok/iter':>8} {'seconds':>8}"
    head += f" {'vs AR':>6} {'HE pass@1':>9} {'held-out EM':>11}"
    print(head)
    ar = None
    for r in results:
        if r["decoder"].startswith("AR"):
            ar = r
        per_iter = f"{r['tokens'] / r['iterations']:.2f}" if r["iterations"] else "-"
        vs = f"{ar['seconds'] / r['seconds']:.2f}x" if ar and r["seconds"] else "-"
        he = f"{100 * r['humaneval_pass_at_1']:.1f}%" if "humaneval_pass_at_1" in r else "-"
        ho = f"{100 * r['heldout_exact']:.1f}%" if "heldout_exact" in r else "-"
        line = f"{r['decoder']:24} {r['temperature']:>4} {r['tokens']:>6} {r['nfe']:>6}"
        line += f" {r['tokens'] / max(r['nfe'], 1):>8.2f} {per_iter:>8} {r['seconds']:>8.2f} {vs:>6}"
        print(f"{line} {he:>9} {ho:>11}")
    print("# passes = every forward (prefill, drafts, verifies, commits); tok/iter = tokens per PTP iteration")
    print("# vs AR = AR seconds / seconds at the same temperature (decode time only, programs not counted)")
    print(rounds_note(args.repeat))
    for r in results:
        if not r["repeats"]:
            print(f"# * {r['decoder']}: tokens or quality changed between rounds")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
