"""ASSD versus sequential decoding on the same model and the same single-line tasks, in one run.

Tasks: HumanEval single-line tasks, and with --heldout CORPUS also lines of the corpus's held-out files. For
every task, each decoder (sequential, ASSD with model drafts at each k, ASSD with lookup drafts at each
lookup k) fills the same slot through
infill.api.fill_text with the same seed and budget; their order is rotated from task to task so that load
drift on a shared machine hits all of them alike. One untimed warm-up fill comes first. Syntax checking and
resampling are off so that each fill is exactly one decode.

Reported per decoder, as medians over tasks: tokens per forward pass (NFE), and the wall-time speedup over
sequential on the same task (t_sequential / t_decoder, for the whole fill call and for the decoder's own
time). Totals (sum of tokens / sum of NFE, sum of times) are printed next to them. Under greedy decoding (the
default, temperature 0) ASSD must reproduce the sequential fill; the "same" column counts how often it does.

    python benchmarks/assd_vs_sequential.py --model default --limit 100
    python benchmarks/assd_vs_sequential.py --model path/to/folder --temperature 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from infill.config import DecodeConfig, FillOptions, ModelSpec  # noqa: E402
from infill.evaluation.filling import FillOutcome, api_filler, raw_filler, token_counter  # noqa: E402
from infill.evaluation.humaneval import build_tasks, evenly_spaced, load_problems  # noqa: E402


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="model name or folder (default: the embedded model)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--engine", default="auto", choices=["auto", "torch", "onnx", "onnx-int8"])
    parser.add_argument("--limit", type=int, default=100, help="tasks, evenly spaced over the 1,033 (default 100)")
    parser.add_argument("--ks", default="5,10", help="ASSD speculation widths, model drafts (default 5,10)")
    parser.add_argument("--lookup-ks", default="4,8", help="longest lookup drafts (default 4,8; '' = none)")
    parser.add_argument("--heldout", type=Path, default=None, help="corpus folder: add held-out lines")
    parser.add_argument("--heldout-limit", type=int, default=100, help="held-out lines (default 100)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--oracle-length", action="store_true", help="budget = reference token length")
    parser.add_argument("--json", type=Path, default=None, help="write per-task measurements here")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0 = infill's default, 1)")
    parser.add_argument(
        "--raw", action="store_true", help="decode through the model alone (no fill_text post-processing)"
    )
    args = parser.parse_args(argv)

    from infill.core.kinds import load

    if args.threads > 0:
        import os

        os.environ["INFILL_THREADS"] = str(args.threads)
    loaded = load(ModelSpec(name=args.model, device=args.device, engine=args.engine))
    tasks: list[Any] = evenly_spaced(build_tasks(load_problems()), args.limit)
    if args.heldout is not None:
        from infill.evaluation import heldout

        count_tokens = token_counter(loaded)
        picked = heldout.sample_line_tasks(heldout.corpus_heldout_files(args.heldout), args.heldout_limit)
        room = int(loaded.model.max_length) - 64
        tasks += [replace(t, slot=heldout.crop_slot(t.slot, count_tokens, room)) for t in picked]
    ks = [int(k) for k in args.ks.split(",") if k.strip()]
    configs = {"sequential": DecodeConfig(decoder="sequential", temperature=args.temperature, seed=args.seed)}
    for k in ks:
        configs[f"assd k={k}"] = DecodeConfig(
            decoder="assd", k=k, draft="model", temperature=args.temperature, seed=args.seed
        )
    for k in [int(k) for k in args.lookup_ks.split(",") if k.strip()]:
        configs[f"lookup k={k}"] = DecodeConfig(
            decoder="assd", draft="lookup", k=k, temperature=args.temperature, seed=args.seed
        )
    options = FillOptions(candidates=1, max_resample=0, syntax_check=False, retrieve=False)
    fillers = {
        name: raw_filler(loaded, cfg) if args.raw else api_filler(loaded, cfg, options) for name, cfg in configs.items()
    }
    count = token_counter(loaded)
    names = list(configs)

    fillers["sequential"](tasks[0].slot, None)  # warm-up: lazy imports, allocator, thread pools
    runs: dict[str, list[FillOutcome]] = {name: [] for name in names}
    started = time.perf_counter()
    for i, task in enumerate(tasks):
        budget = count(task.slot.reference) if args.oracle_length else None
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            runs[name].append(fillers[name](task.slot, budget))
        print(f"\r{i + 1}/{len(tasks)} tasks", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    seq = runs["sequential"]
    rows = []
    for name in names:
        out = runs[name]
        ok = [i for i, o in enumerate(out) if o.error is None and o.nfe > 0 and seq[i].error is None]
        rows.append(
            {
                "decoder": name,
                "tasks": len(ok),
                "tokens_per_nfe_median": median([out[i].tokens / out[i].nfe for i in ok]),
                "tokens_per_nfe_total": ratio(sum(out[i].tokens for i in ok), sum(out[i].nfe for i in ok)),
                "nfe_total": sum(out[i].nfe for i in ok),
                "tokens_total": sum(out[i].tokens for i in ok),
                "speedup_min": min((ratio(seq[i].seconds, out[i].seconds) for i in ok), default=float("nan")),
                "speedup_median": median([ratio(seq[i].seconds, out[i].seconds) for i in ok]),
                "speedup_total": ratio(sum(seq[i].seconds for i in ok), sum(out[i].seconds for i in ok)),
                "decoder_speedup_median": median([ratio(seq[i].decode_seconds, out[i].decode_seconds) for i in ok]),
                "seconds_total": sum(out[i].seconds for i in ok),
                "same_as_sequential": sum(out[i].completion == seq[i].completion for i in ok) / len(ok) if ok else 0.0,
                "errors": sum(o.error is not None for o in out),
            }
        )

    print(
        f"model {args.model} ({loaded.info.get('engine', 'torch')} engine), {len(tasks)} single-line tasks, "
        f"T={args.temperature:g}, "
        f"{'oracle length' if args.oracle_length else 'length policy'}, {platform.machine()}, "
        f"{time.perf_counter() - started:.0f} s"
    )
    header = (
        f"{'decoder':<13} {'tok/NFE med':>11} {'tok/NFE tot':>11} {'NFE tot':>8} {'speedup med':>11} "
        f"{'speedup tot':>11} {'dec. med':>8} {'same':>6}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['decoder']:<13} {r['tokens_per_nfe_median']:>11.2f} {r['tokens_per_nfe_total']:>11.2f} "
            f"{r['nfe_total']:>8d} {r['speedup_median']:>10.2f}x {r['speedup_total']:>10.2f}x "
            f"{r['decoder_speedup_median']:>7.2f}x {r['same_as_sequential']:>6.0%}"
        )
    report = {
        "command": "python benchmarks/assd_vs_sequential.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "model": args.model,
        "tasks": [t.task_id for t in tasks],
        "configs": {name: asdict(cfg) for name, cfg in configs.items()},
        "summary": rows,
        "per_task": {name: [o.as_dict() for o in out] for name, out in runs.items()},
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
