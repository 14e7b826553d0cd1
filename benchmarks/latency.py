"""Latency of a single-line fill, three ways, measured in one run, to show what a warm model saves:

  cold    `infill fill FILE --span L:L --format json --daemon off`: a fresh process imports torch, loads the model
  daemon  the same command with `--daemon on` and a warm daemon: a fresh (light) process asks the daemon
  stdio   one request/response round trip to an `infill serve --stdio` process that already holds the model

Prints the median wall time of each and its ratio to cold; checks that all three give the same edits.

    python benchmarks/latency.py                      # the default model
    python benchmarks/latency.py --tiny               # a tiny random checkpoint (infill.models.tiny)
    python benchmarks/latency.py --model PATH --runs 9
    python benchmarks/latency.py --decoder '' --engines torch,onnx   # the default fill, engines side by side

The daemon runs in a private runtime directory and is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SOURCE = '''def mean(values):
    """Return the arithmetic mean of a non-empty list."""
    total = sum(values)
    return total / len(values)


def variance(values):
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / len(values)
'''
LINE = 3  # `total = sum(values)`: one line, filled whole
REPO = Path(__file__).resolve().parent.parent


def timed(command: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, timeout=900)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr.decode()}")
    return seconds, json.loads(done.stdout)


def edits(result: dict[str, Any]) -> list[tuple[int, int, str]]:
    return [(e["start_byte"], e["end_byte"], e["text"]) for e in result["edits"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default", help="model name or folder [default: the embedded model]")
    parser.add_argument("--tiny", action="store_true", help="build and use a tiny random checkpoint")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per mode (after one warm-up) [7]")
    parser.add_argument("--decoder", default="assd", help="'' = the tool's default (beam search)")
    parser.add_argument(
        "--no-syntax-check",
        action="store_true",
        help="no resampling on syntax errors (on with --tiny: a random model's lines never parse)",
    )
    parser.add_argument(
        "--engines", default="", help="comma-separated --engine values, each timed in every mode [the default only]"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="OMP_NUM_THREADS for every mode alike (torch's default: one per core)"
    )
    args = parser.parse_args()
    args.no_syntax_check = args.no_syntax_check or args.tiny

    with tempfile.TemporaryDirectory(prefix="infill-bench-") as scratch:
        work = Path(scratch)
        model = args.model
        if args.tiny:
            from infill.models.tiny import build_tiny_checkpoint

            model = str(build_tiny_checkpoint(work / "tiny"))
        source = work / "stats.py"
        source.write_text(SOURCE)
        runtime = work / "rt"
        runtime.mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "INFILL_NO_DAEMON", "PYTEST_CURRENT_TEST")}
        env |= {"INFILL_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(REPO)}
        if args.threads is not None:
            env["OMP_NUM_THREADS"] = str(args.threads)
        fill = [
            sys.executable,
            "-m",
            "infill",
            "fill",
            str(source),
            "--span",
            f"{LINE}:{LINE}",
            "--format",
            "json",
            "--model",
            model,
        ]
        fill += (["--decoder", args.decoder] if args.decoder else []) + (
            ["--no-syntax-check"] if args.no_syntax_check else []
        )

        engines = [e.strip() for e in args.engines.split(",") if e.strip()] or [""]
        modes = [(mode, engine) for engine in engines for mode in ("cold", "daemon", "stdio")]
        results: dict[tuple[str, str], list[float]] = {m: [] for m in modes}
        inside: dict[tuple[str, str], list[float]] = {m: [] for m in modes}  # the fill's own stats.seconds
        outputs: dict[tuple[str, str], dict[str, Any]] = {}
        stdio = StdioServer(env, model, source, args)
        try:
            # one warm-up each (starts the daemon, loads the model in both servers), then the modes take turns,
            # so a change in the machine's load hits all of them alike
            for i in range(args.runs + 1):
                for mode, engine in modes:
                    if mode == "stdio":
                        seconds, outputs[mode, engine] = stdio.fill(i, engine)
                    else:
                        flags = ["--daemon", "off" if mode == "cold" else "on"]
                        flags += ["--engine", engine] if engine else []
                        seconds, outputs[mode, engine] = timed([*fill, *flags], env)
                    if i:
                        results[mode, engine].append(seconds)
                        inside[mode, engine].append(outputs[mode, engine]["stats"]["seconds"])
        finally:
            stdio.close()
            subprocess.run(
                [sys.executable, "-m", "infill", "daemon", "stop"], env=env, cwd=REPO, capture_output=True, timeout=120
            )

    same = len({json.dumps(edits(out)) for out in outputs.values()}) == 1
    print(
        f"model: {model}   decoder: {args.decoder or 'default'}   runs per mode: {args.runs} (after one warm-up; "
        f"interleaved)   OMP_NUM_THREADS: {args.threads or 'default'}"
    )
    print(
        f"{'mode':<8} {'engine':<10} {'median ms':>10} {'min ms':>8} {'ratio to cold':>14} {'decode ms':>10} "
        f"{'other ms':>9}"
    )
    for (mode, engine), times in results.items():
        cold = statistics.median(results["cold", engine])
        median, decode = statistics.median(times), statistics.median(inside[mode, engine])
        print(
            f"{mode:<8} {engine or 'default':<10} {median * 1000:>10.1f} {min(times) * 1000:>8.1f} "
            f"{median / cold:>14.3f} {decode * 1000:>10.1f} {(median - decode) * 1000:>9.1f}"
        )
    print("decode = the fill's own stats.seconds (median); other = wall time around it")
    print(f"same edits in every mode: {same}")
    print(f"fill: {edits(next(iter(outputs.values())))}")


class StdioServer:
    """An `infill serve --stdio` process; fill() is one timed request/response round trip."""

    def __init__(self, env: dict[str, str], model: str, source: Path, args: argparse.Namespace) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "infill", "serve", "--stdio"],
            env=env,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.params = {
            "path": str(source),
            "span": f"{LINE}:{LINE}",
            "model": model,
            "syntax_check": not args.no_syntax_check,
        } | ({"decoder": args.decoder} if args.decoder else {})

    def fill(self, request_id: int, engine: str = "") -> tuple[float, dict[str, Any]]:
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None:  # never: both are pipes
            raise SystemExit("serve --stdio has no pipes")
        params = self.params | ({"engine": engine} if engine else {})
        start = time.perf_counter()
        stdin.write(json.dumps({"id": request_id, "method": "fill", "params": params}).encode() + b"\n")
        stdin.flush()
        reply: dict[str, Any] = json.loads(stdout.readline())
        seconds = time.perf_counter() - start
        if "error" in reply:
            raise SystemExit(f"serve --stdio: {reply['error']}")
        return seconds, reply

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


if __name__ == "__main__":
    main()
