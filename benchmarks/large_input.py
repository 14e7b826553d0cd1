"""Time and peak memory of one small fill in a large file: the cost should follow the model's window around
the span, not the file's size.

Generates a Python file of --mb megabytes (many small functions), then fills one line in its middle with
--tokens tokens through `run_fill`, the function `infill fill` runs (read, resolve spans, fill_text, write in
place), in a fresh process per measurement. Prints wall seconds and the process's peak RSS
(resource.getrusage ru_maxrss) for that process, which includes the interpreter and imports (printed as
"baseline": the same process before the fill).

    python benchmarks/large_input.py --mb 10                 # a scripted fake model (tests/fixtures_cli.py)
    python benchmarks/large_input.py --mb 10 --model default # the embedded model (its real BPE tokenizer)

The fake model answers every span with a fixed text in its 256-token window, so what is measured is the
tool's work around the model: reading, span resolution, tokenizing the context, post-processing, syntax
checks and the write.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_file(path: Path, megabytes: float) -> int:
    """A valid Python file of about `megabytes` MB; returns its number of lines."""
    chunk = 'def function_{i}(values, scale={i}):\n    """Scale and sum."""\n    total = 0\n' + (
        "    for v in values:\n        total += v * scale\n    return total\n\n\n"
    )
    parts, size, i = [], 0, 0
    while size < megabytes * 1e6:
        text = chunk.format(i=i)
        parts.append(text)
        size += len(text)
        i += 1
    data = "".join(parts)
    path.write_text(data, encoding="utf-8")
    return data.count("\n")


def measure(path: Path, line: int, tokens: int, model: str) -> dict[str, float | str]:
    """Fill `line` of `path` in this process; seconds and peak RSS (MB)."""
    sys.path.insert(0, str(REPO / "tests"))
    from infill.commands.fill import FillRequest, run_fill
    from infill.config import DecodeConfig, FillOptions, ModelSpec
    from infill.spans import Selection

    def request(name: str) -> FillRequest:
        return FillRequest(
            file=str(path),
            selections=(Selection("span", f"{line}:{line}"),),
            model=ModelSpec(name=name),
            decode=DecodeConfig(temperature=0.0),
            options=FillOptions(tokens=tokens),
        )

    if model == "fake":
        from fixtures_cli import fake_model

        with fake_model(["total = 1"], name="fake-large", max_length=256):
            import torch  # noqa: F401 - imported before the baseline, as a loaded model would have

            baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            start = time.perf_counter()
            out = run_fill(request("fake-large"))
            seconds = time.perf_counter() - start
    else:
        from infill import api

        api.load_model(ModelSpec(name=model))  # loading the model is not what is measured
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        start = time.perf_counter()
        out = run_fill(request(model))
        seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak, 1),
        "baseline_rss_mb": round(baseline, 1),
        "exit_code": out["exit_code"],
        "stderr": " | ".join(out["stderr"])[:300],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=10.0, help="size of the generated file")
    parser.add_argument("--tokens", type=int, default=11, help="tokens to fill")
    parser.add_argument("--model", default="fake", help="fake (scripted, 256-token window) or a model name")
    parser.add_argument("--child", nargs=2, metavar=("PATH", "LINE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(Path(args.child[0]), int(args.child[1]), args.tokens, args.model)))
        return
    with tempfile.TemporaryDirectory(prefix="infill-large-") as tmp:
        path = Path(tmp) / "big.py"
        lines = make_file(path, args.mb)
        line = lines // 2 // 8 * 8 + 3  # a `total = 0` line in the middle
        size = path.stat().st_size
        cmd = [sys.executable, __file__, "--child", str(path), str(line), "--tokens", str(args.tokens)]
        cmd += ["--model", args.model]
        env = {**os.environ, "INFILL_NO_DAEMON": "1", "PYTHONPATH": str(REPO)}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            sys.exit(done.stderr)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"file: {size / 1e6:.1f} MB, {lines:,} lines; fill line {line} with {args.tokens} tokens; "
            f"model {args.model}"
        )
        print(json.dumps(result))


if __name__ == "__main__":
    main()
