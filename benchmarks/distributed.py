"""`infill train asarm` in one process and in N processes under torchrun, at the same global batch: training
throughput (positions per second over all processes) from the runs' own log lines.

Writes a small corpus of the first RECORDS records of the corpus's TRAINING split, then trains STEPS steps of the
given shape from scratch with one process and with `torchrun --standalone --nproc-per-node N`, alternating, one
thread per process. The first log window (start-up, first steps) is left out; prints the median over the rest and
over runs, and checks that both reach the same loss. With --device cuda the processes use one GPU each (NCCL).

    python benchmarks/distributed.py --corpus runs/corpus --tokenizer infill/weights/default/tokenizer.json \\
        --procs 2 --steps 12 --log-every 3 --runs 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def small_corpus(corpus: Path, out: Path, records: int) -> Path:
    """A corpus folder with the first `records` lines of `corpus`/train.jsonl (no held-out split: no eval)."""
    out.mkdir(parents=True)
    with (corpus / "train.jsonl").open(encoding="utf-8") as src, (out / "train.jsonl").open("w") as dst:
        for _, line in zip(range(records), src, strict=False):
            dst.write(line)
    (out / "heldout.jsonl").write_text("")
    (out / "manifest.json").write_text('{"totals": {"files": 0, "bytes": 0, "heldout_files": 0}, "packages": []}')
    return out


def train(procs: int, args: argparse.Namespace, corpus: Path, run_dir: Path) -> tuple[list[float], str]:
    """(positions/s of each log window after the first, the last loss) of one run."""
    command = [sys.executable, "-m", "infill"]
    if procs > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs)]
        command += ["-m", "infill"]
    command += ["train", "asarm", "--corpus", str(corpus), "--tokenizer", str(args.tokenizer), "--no-resume"]
    command += ["--run-dir", str(run_dir), "--steps", str(args.steps), "--log-every", str(args.log_every)]
    command += ["--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--eval-sequences", "0"]
    command += ["--layers", str(args.layers), "--d-model", str(args.d_model), "--heads", str(args.heads)]
    command += ["--d-inner", str(4 * args.d_model), "--threads", "1", "--device", args.device, "--no-bf16"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    output = done.stdout.decode(errors="replace")
    if done.returncode:
        raise SystemExit(f"{procs} process(es) failed:\n{output}")
    rates = [float(m.group(1)) for m in re.finditer(r" tok/s (\d+)", output)][1:]
    losses = re.findall(r"^step \d+ loss (\S+)", output, flags=re.M)
    return rates, losses[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path("runs/corpus"))
    ap.add_argument("--tokenizer", type=Path, default=Path("infill/weights/default/tokenizer.json"))
    ap.add_argument("--records", type=int, default=300)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--log-every", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16, help="global batch")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        corpus = small_corpus(args.corpus, Path(tmp) / "corpus", args.records)
        print(
            f"# {args.layers}x{args.d_model}, global batch {args.batch_size} x {args.seq_len}, {args.steps} steps; "
            f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        rates: dict[int, list[float]] = {1: [], args.procs: []}
        last: dict[int, str] = {}
        for i in range(args.runs):
            for procs in (1, args.procs) if i % 2 == 0 else (args.procs, 1):
                window, last[procs] = train(procs, args, corpus, Path(tmp) / f"run-{procs}-{i}")
                rates[procs] += window
                print(f"run {i + 1}, {procs} process(es): {' '.join(f'{r:.0f}' for r in window)} positions/s")
        assert last[1] == last[args.procs], f"last losses differ: {last}"
        one, many = statistics.median(rates[1]), statistics.median(rates[args.procs])
        print(f"# load after {os.getloadavg()[0]:.2f}; last loss {last[1]} in both")
        print(f"1 process      {one:8.0f} positions/s (median of {len(rates[1])} windows)")
        print(
            f"{args.procs} processes    {many:8.0f} positions/s (median of {len(rates[args.procs])} windows)  "
            f"{many / one:.2f}x"
        )


if __name__ == "__main__":
    main()
