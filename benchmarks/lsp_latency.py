"""Latency of `infill lsp` inline completions, driven through the protocol as an editor drives it.

One server (`infill lsp`, INFILL_THREADS=1) holds the model; a client over stdio opens a real file of this
repository (infill/retrieval.py) and, for each run, types into one of its lines with an incremental didChange
and asks for the inline completion at the cursor. Two kinds of run, interleaved:

  blank   the line is emptied to its indentation (the user pressed Enter): the whole line is filled
  typing  the line is cut after half its text (the user is typing it): the rest of the line is filled

The time from sending the didChange to the inline completion's reply is measured; p50 and p95 are printed per
kind and overall, with how many replies carried an item. Then cancellation: a fill is started, cancelled with
$/cancelRequest after --cancel-after seconds, and the time until the worker is free again is measured, beside the
model's time per forward pass (measured on the same lines in this process): a cancelled fill should stop within
the pass it is in. A fill's first pass reads the whole context and is much slower than the later ones.

    python benchmarks/lsp_latency.py                          # the default model, 20 runs of each kind
    python benchmarks/lsp_latency.py --decoders beam,assd     # decoders interleaved run by run, one server
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the protocol client of the tests (tests/fixtures_lsp.py)

URI = "file:///bench/retrieval.py"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def line_range(line: int, start: int, end: int) -> dict[str, Any]:
    return {"start": {"line": line, "character": start}, "end": {"line": line, "character": end}}


def chosen_lines(lines: list[str], count: int) -> list[int]:
    """Code lines worth completing: indented, with a few words, not comments or docstrings."""
    found = [
        i
        for i, line in enumerate(lines)
        if line.startswith("    ") and len(line.strip()) > 12 and not line.strip().startswith(("#", '"', "'"))
    ]
    step = max(1, len(found) // count)
    return found[::step][:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default", help="model name or folder [default: the embedded model]")
    parser.add_argument("--runs", type=int, default=20, help="timed runs of each kind [20]")
    parser.add_argument(
        "--decoders", default="", help="comma-separated decoder settings, interleaved [the server's default]"
    )
    parser.add_argument("--cancels", type=int, default=5, help="cancellation runs per delay [5]")
    parser.add_argument(
        "--cancel-after", default="0.1,0.5", help="comma-separated seconds from the request to its cancel [0.1,0.5]"
    )
    args = parser.parse_args()

    from fixtures_lsp import LspClient, inline_params, lsp_env

    text = (REPO / "infill" / "retrieval.py").read_text(encoding="utf-8")
    lines = text.split("\n")
    targets = chosen_lines(lines, args.runs)
    decoders = [d for d in args.decoders.split(",") if d] or [""]
    client = LspClient(lsp_env(INFILL_THREADS="1"))
    version = 1
    try:
        client.initialize({"model": args.model})
        client.open(URI, text)
        client.result("test/idle")  # the model is loaded (initialized queued the load first)
        times = {(d, kind): [] for d in decoders for kind in ("blank", "typing")}
        shown = dict.fromkeys(times, 0)
        for run, decoder, kind in ((r, d, k) for r in range(args.runs) for d in decoders for k in ("blank", "typing")):
            client.configure({"model": args.model, **({"decoder": decoder} if decoder else {})})
            number = targets[run % len(targets)]
            line = lines[number]
            indent = len(line) - len(line.lstrip())
            keep = indent if kind == "blank" else indent + len(line.strip()) // 2
            version += 1
            started = time.perf_counter()
            client.change(URI, version, [{"range": line_range(number, keep, len(line)), "text": ""}])
            reply = client.inline(URI, number, keep)
            times[decoder, kind].append(time.perf_counter() - started)
            if "error" in reply:
                raise SystemExit(f"error from the server: {reply['error']}")
            shown[decoder, kind] += reply["result"] is not None
            version += 1  # put the line back (not timed)
            client.change(URI, version, [{"range": line_range(number, keep, keep), "text": line[keep:]}])
        print(f"model {args.model}, INFILL_THREADS=1, {args.runs} runs of each kind, decoders interleaved")
        for decoder in decoders:
            rows = [(kind, times[decoder, kind], shown[decoder, kind]) for kind in ("blank", "typing")]
            rows.append(("all", rows[0][1] + rows[1][1], rows[0][2] + rows[1][2]))
            for kind, values, count in rows:
                print(
                    f"{decoder or 'default':10} {kind:7} n={len(values):3}  "
                    f"p50 {1000 * statistics.median(values):6.0f} ms  p95 {1000 * percentile(values, 0.95):6.0f} ms"
                    f"  with an item: {count}/{len(values)}"
                )
        # without prefetch: the change before each request would start the same fill on its own, which a
        # $/cancelRequest leaves running (its answer stays useful), so the worker would be free only when
        # that fill ends, not when the cancelled one stops
        client.configure({"model": args.model, "prefetch": False})
        delays = [float(d) for d in args.cancel_after.split(",")]
        stops: dict[float, list[float]] = {d: [] for d in delays}
        for run, delay in ((r, d) for r in range(args.cancels) for d in delays):
            number = targets[run % len(targets)]
            line = lines[number]
            indent = len(line) - len(line.lstrip())
            version += 1
            client.change(URI, version, [{"range": line_range(number, indent, len(line)), "text": ""}])
            request = client.start("textDocument/inlineCompletion", inline_params(URI, number, indent))
            time.sleep(delay)
            cancelled = time.perf_counter()
            client.notify("$/cancelRequest", {"id": request})
            client.wait(request)
            client.result("test/idle")  # answered once the worker dropped the cancelled fill
            stops[delay].append(time.perf_counter() - cancelled)
            version += 1
            client.change(URI, version, [{"range": line_range(number, indent, indent), "text": line[indent:]}])
        first, later = pass_seconds(text, lines, targets, args.model)
        for delay, values in stops.items():
            print(
                f"cancel {delay:.2f} s into a fill  n={len(values):3}  cancel -> worker free: "
                f"p50 {1000 * statistics.median(values):.0f} ms, max {1000 * max(values):.0f} ms"
            )
        passes = f"first forward pass of a fill (the whole context): {1000 * first:.0f} ms"
        print(f"{passes}; later passes: {1000 * later:.0f} ms")
    finally:
        client.close()


def pass_seconds(text: str, lines: list[str], targets: list[int], model: str) -> tuple[float, float]:
    """(first, later): seconds of a fill's first forward pass (from its "start" progress event to its first
    "step") and of each later pass, medians over a few whole-line fills run in this process (one thread)."""
    os.environ.setdefault("INFILL_THREADS", "1")
    from infill.api import fill_text
    from infill.config import TOOL_DECODE, ModelSpec
    from infill.errors import NoValidFillError
    from infill.spans import Span

    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line.encode("utf-8")) + 1)
    firsts, laters = [], []
    for number in targets[:5]:
        stamps: list[tuple[str, float]] = []
        span = Span(starts[number], starts[number] + len(lines[number].encode("utf-8")), "line", 32, one_line=True)
        try:
            fill_text(
                text,
                [span],
                language="python",
                model=ModelSpec(model),
                decode=TOOL_DECODE,
                on_progress=lambda event, into=stamps: into.append((event["event"], time.perf_counter())),
            )
        except NoValidFillError:
            pass
        start = next(t for kind, t in stamps if kind == "start")
        steps = [t for kind, t in stamps if kind == "step"]
        firsts.append(steps[0] - start)
        laters += [b - a for a, b in zip(steps, steps[1:], strict=False)]
    return statistics.median(firsts), statistics.median(laters)


if __name__ == "__main__":
    main()
