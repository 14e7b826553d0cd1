"""One or two CPU threads for decoding, on an idle machine and with one core busy: the default's evidence.

Fills the same two one-line spans of a small file (the tool's default decoder) with the default model, with
torch's intra-op threads set to 1 and to 2, alternating, first with nothing else running and then with a
busy-loop process on one core. Prints the median fill time of each. Run it on an otherwise idle machine.

    python benchmarks/threads.py --runs 7
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

SOURCE = """\
def mean(values):
    total = 0
    for value in values:
        total += value
    return total / len(values)


def variance(values):
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / len(values)
"""


def _spin(stop: Any) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--model", default="default")
    args = ap.parse_args()

    import torch

    from infill.api import fill_text
    from infill.config import TOOL_DECODE, FillOptions, ModelSpec, decode_label
    from infill.spans import Selection, resolve

    data = SOURCE.encode()
    spans = resolve(data, [Selection("span", "4:4"), Selection("span", "9:9")], "python")
    spec = ModelSpec(name=args.model, device="cpu")

    def fill() -> float:
        t = time.perf_counter()
        fill_text(
            SOURCE,
            spans,
            language="python",
            model=spec,
            decode=TOOL_DECODE,  # what `infill fill` runs
            options=FillOptions(retrieve=False, allow_syntax_errors=True),  # timed, not judged
        )
        return time.perf_counter() - t

    fill()  # load the model, warm up
    results: dict[tuple[str, int], list[float]] = {}
    for load in ("idle", "one core busy"):
        stop = multiprocessing.Event()
        spinner = None
        if load != "idle":
            spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
            spinner.start()
            time.sleep(0.5)
        for _ in range(args.runs):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                results.setdefault((load, threads), []).append(fill())
        stop.set()
        if spinner is not None:
            spinner.join()
    print(f"model {args.model}, two one-line spans, {decode_label(TOOL_DECODE)}; median of {args.runs} fills")
    for (load, threads), times in results.items():
        print(
            f"{load:14s} {threads} thread(s): {statistics.median(times):7.3f} s  "
            f"(min {min(times):.3f}, max {max(times):.3f})"
        )


if __name__ == "__main__":
    main()
