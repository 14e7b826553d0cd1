"""`infill docstrings --jobs N` over several files: wall time with 1 and 2 worker processes, end to end.

Copies FILES held-out files of the corpus (hash order, FILE_MIN..FILE_MAX bytes) into a fresh folder for every
run and runs `infill docstrings FOLDER --jobs N --daemon off` on it as a user would (a new process: start-up,
model loads and workers included), alternating 1 and 2 jobs; prints the median wall time of each and checks that
both leave the same files and print the same output.

    python benchmarks/jobs.py --corpus runs/corpus --files 12 --runs 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def pick(corpus: Path, count: int, low: int, high: int) -> list[Path]:
    """The first `count` held-out Python files (by name, i.e. content hash) of `low`..`high` bytes."""
    files = sorted((corpus / "heldout").glob("*.py"))
    return [f for f in files if low <= f.stat().st_size <= high][:count]


def run(files: list[Path], jobs: int, model: str) -> tuple[float, int, str, dict[str, bytes]]:
    """(seconds, exit code, output, the files after) of one `infill docstrings` run on fresh copies."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "src"
        folder.mkdir()
        for f in files:
            shutil.copyfile(f, folder / f.name)
        env = {**os.environ, "INFILL_NO_DAEMON": "1"}
        args = [sys.executable, "-m", "infill", "docstrings", "src", "--jobs", str(jobs), "--model", model]
        t = time.perf_counter()
        done = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp)
        seconds = time.perf_counter() - t
        return seconds, done.returncode, done.stdout.decode(), {p.name: p.read_bytes() for p in folder.iterdir()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path("runs/corpus"))
    ap.add_argument("--files", type=int, default=12)
    ap.add_argument("--min-bytes", type=int, default=1500)
    ap.add_argument("--max-bytes", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model", default="default")
    args = ap.parse_args()

    files = pick(args.corpus, args.files, args.min_bytes, args.max_bytes)
    size = sum(f.stat().st_size for f in files)
    print(f"# {len(files)} held-out files, {size:,} bytes; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}")
    times: dict[int, list[float]] = {1: [], 2: []}
    reference: tuple[int, str, dict[str, bytes]] | None = None
    for i in range(args.runs):
        for jobs in (1, 2) if i % 2 == 0 else (2, 1):  # alternate which goes first
            seconds, code, output, after = run(files, jobs, args.model)
            if reference is None:
                reference = (code, output, after)
            assert (code, output, after) == reference, f"--jobs {jobs} differs from the first run"
            times[jobs].append(seconds)
            print(f"run {i + 1} --jobs {jobs}: {seconds:.1f} s (exit {code})", flush=True)
    assert reference is not None
    filled = sum(" filled" in line or "low-confidence" in line for line in reference[1].splitlines())
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"# {filled} docstrings written; load after {os.getloadavg()[0]:.2f}")
    print(f"--jobs 1  median {one:6.1f} s  (min {min(times[1]):.1f}, max {max(times[1]):.1f})")
    print(
        f"--jobs 2  median {two:6.1f} s  (min {min(times[2]):.1f}, max {max(times[2]):.1f})  speed-up {one / two:.2f}x"
    )


if __name__ == "__main__":
    main()
