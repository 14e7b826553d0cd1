"""Which decoding settings write the right line most often? Every candidate default on the same tasks, one run.

Tasks: HumanEval single-line tasks (evenly spaced) and lines of the corpus's held-out files, each line emptied
and filled through infill.api.fill_text exactly as `infill fill --span N:N` fills it (and, for the settings
given with --marker-too, as a `<FILL>` line with `--marker`). Settings are interleaved task by task so that
machine load hits them alike. For each: HumanEval pass@1 (the program runs with its tests; verdicts are cached
per distinct completion), exact line on both sets, and the median seconds per fill.

    python benchmarks/defaults.py --humaneval 150 --heldout 150 --corpus runs/corpus
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from infill.config import DecodeConfig, FillOptions, ModelSpec  # noqa: E402
from infill.evaluation.filling import api_filler  # noqa: E402

# name -> (decode config, fill options)
SETTINGS: dict[str, tuple[DecodeConfig, FillOptions]] = {
    "greedy": (DecodeConfig(temperature=0.0), FillOptions(retrieve=False)),
    "greedy+retrieve": (DecodeConfig(temperature=0.0), FillOptions(retrieve=True)),
    "sample T=1": (DecodeConfig(temperature=1.0), FillOptions(retrieve=False)),
    "sample T=0.7": (DecodeConfig(temperature=0.7), FillOptions(retrieve=False)),
    "-n 4 T=1 ranked": (DecodeConfig(temperature=1.0), FillOptions(candidates=4, retrieve=False)),
    "-n 8 T=0.7 ranked": (DecodeConfig(temperature=0.7), FillOptions(candidates=8, retrieve=False)),
    "beam 4": (DecodeConfig(decoder="beam", beam=4), FillOptions(retrieve=False)),
    "beam 4+retrieve": (DecodeConfig(decoder="beam", beam=4), FillOptions(retrieve=True)),
    "beam 4+retrieve norescue": (DecodeConfig(decoder="beam", beam=4), FillOptions(retrieve=True, rescue_width=1)),
    "beam 8": (DecodeConfig(decoder="beam", beam=8), FillOptions(retrieve=False)),
    "beam 8+retrieve": (DecodeConfig(decoder="beam", beam=8), FillOptions(retrieve=True)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--humaneval", type=int, default=150, help="HumanEval tasks, evenly spaced (0 = none)")
    ap.add_argument("--heldout", type=int, default=150, help="held-out lines (needs --corpus; 0 = none)")
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names from the table")
    ap.add_argument("--marker-too", default="greedy", help="settings also run in the --marker form")
    ap.add_argument("--json", type=Path, default=None, help="write per-task results here")
    args = ap.parse_args()

    from infill.core.kinds import load
    from infill.evaluation import heldout, humaneval
    from infill.evaluation.execute import run_program
    from infill.evaluation.filling import token_counter

    loaded = load(ModelSpec(name=args.model, device="cpu"))
    tasks: list[tuple[str, Any]] = []
    if args.humaneval:
        chosen = humaneval.evenly_spaced(humaneval.build_tasks(humaneval.load_problems()), args.humaneval)
        tasks += [("humaneval", t) for t in chosen]
    if args.heldout and args.corpus is not None:
        count = token_counter(loaded)
        room = int(loaded.model.max_length) - 64
        lines = heldout.sample_line_tasks(heldout.corpus_heldout_files(args.corpus), args.heldout)
        tasks += [("heldout", replace(t, slot=heldout.crop_slot(t.slot, count, room))) for t in lines]
    names = [n.strip() for n in args.settings.split(",") if n.strip()]
    runs: list[tuple[str, str]] = [(n, "span") for n in names]
    runs += [(n.strip(), "marker") for n in args.marker_too.split(",") if n.strip() in names]
    fillers = {(n, form): api_filler(loaded, *SETTINGS[n], form=form) for n, form in runs}
    verdicts: dict[tuple[str, str], bool] = {}
    results: dict[tuple[str, str], list[dict[str, Any]]] = {run: [] for run in runs}
    started = time.perf_counter()
    for i, (kind, task) in enumerate(tasks):
        for j in range(len(runs)):
            run = runs[(i + j) % len(runs)]
            out = fillers[run](task.slot, None)
            exact = out.error is None and out.completion == task.slot.reference
            passed = None
            if kind == "humaneval":
                key = (task.task_id, out.completion)
                if key not in verdicts:
                    verdicts[key] = exact or (
                        out.error is None and run_program(task.program(out.completion)).status == "passed"
                    )
                passed = verdicts[key]
            results[run].append(
                {
                    "kind": kind,
                    "task": task.task_id,
                    "completion": out.completion,
                    "exact": exact,
                    "passed": passed,
                    "seconds": out.seconds,
                    "nfe": out.nfe,
                }
            )
        print(f"\r{i + 1}/{len(tasks)} tasks", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    def share(rows: list[dict[str, Any]], kind: str, key: str) -> str:
        sel = [r[key] for r in rows if r["kind"] == kind]
        return f"{sum(sel) / len(sel):6.1%} ({sum(sel)}/{len(sel)})" if sel else "-"

    print(
        f"model {args.model}: {sum(k == 'humaneval' for k, _ in tasks)} HumanEval single-line tasks, "
        f"{sum(k == 'heldout' for k, _ in tasks)} held-out lines; {time.perf_counter() - started:.0f} s"
    )
    print(f"{'setting':24s} {'form':6s} {'HE pass@1':>16s} {'HE exact':>16s} {'held-out exact':>16s} {'s/fill':>7s}")
    for run, rows in results.items():
        he_pass, he_exact = share(rows, "humaneval", "passed"), share(rows, "humaneval", "exact")
        print(
            f"{run[0]:24s} {run[1]:6s} {he_pass:>16s} {he_exact:>16s} "
            f"{share(rows, 'heldout', 'exact'):>16s} {statistics.median(r['seconds'] for r in rows):7.2f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({f"{n}|{f}": r for (n, f), r in results.items()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
