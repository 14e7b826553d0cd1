"""`infill train gpu-job`: the whole training run of a GPU loan in one command (infill.training.gpu_job), and
`infill train gpu-carry`: what it takes along. `scripts/gpu_job.sh` runs the first where the project is not
installed. Attached to the `train` group by infill/commands/train.py."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from infill.clitypes import FiniteFloatRange, NonEmptyPath
from infill.commands.training import path_option

CARRY = Path("gpu")


@click.command("gpu-job")
@click.option(
    "--out",
    type=NonEmptyPath(path_type=Path, file_okay=False),
    default=None,
    help="Where what comes back is written [default: $OUT, else gpu/out].",
)
@click.option("--work", type=NonEmptyPath(path_type=Path, file_okay=False), default=None, help="Scratch folder.")
@path_option("--carry", file_okay=False, default=CARRY, help="The folder `infill train gpu-carry` wrote.")
@click.option("--smoke", is_flag=True, help="Rehearse on the CPU with tiny settings and a few steps (about a minute).")
@click.option("--minutes", type=FiniteFloatRange(0.5, 60), default=None, help="Wall-clock budget [default: 9].")
@click.option("--max-mb", type=FiniteFloatRange(1), default=None, help="Size budget of the AS-ARM's bf16 weights.")
@click.option("--tflops", type=FiniteFloatRange(1), default=None, help="Throughput the compute estimate assumes.")
@click.option(
    "--job",
    type=click.Choice(["asarm", "blockdiff", "both"]),
    default="asarm",
    show_default=True,
    help="Which model to train: the AS-ARM alone, the block-diffusion model alone, or both side by side.",
)
@click.option(
    "--from-scratch",
    is_flag=True,
    help="A fresh AS-ARM of the shape the compute estimate picks, instead of continuing the shipped one.",
)
def gpu_job(
    out: Path | None,
    work: Path | None,
    carry: Path,
    smoke: bool,
    minutes: float | None,
    max_mb: float | None,
    tflops: float | None,
    job: str,
    from_scratch: bool,
) -> None:
    """Build a corpus here, continue the shipped AS-ARM (or train the block-diffusion model, or both) on this
    machine's GPU before a deadline, and write bf16 weights small enough to bring back (exit 1 when a stage
    failed)."""
    import os
    import tempfile

    from infill.training.gpu_job import plan_for, run

    out = out or Path(os.environ.get("OUT") or "gpu/out")
    work = work or Path(tempfile.mkdtemp(prefix="infill-gpu-job-"))
    plan = plan_for(
        out,
        work,
        carry,
        smoke,
        from_scratch,
        minutes=minutes,
        max_mb=max_mb,
        tflops=tflops,
        job=job,
    )
    sys.exit(run(plan))


@click.command("gpu-carry")
@path_option("--corpus", exists=True, file_okay=False, default=Path("runs/corpus"))
@click.option("--out", type=NonEmptyPath(path_type=Path, file_okay=False), default=CARRY)
def gpu_carry(corpus: Path, out: Path) -> None:
    """Write what `infill train gpu-job` takes along: the corpus's held-out split, its manifest, the evaluation
    problems it must not train on, and as many training files of the packages the lent machine must leave out
    as fit beside the tracked tree in one call (64 MiB, less a 2 MiB margin); says what a call would carry."""
    import json

    from infill.evaluation.humaneval import humaneval_problems
    from infill.training.gpu_data import carry_corpus, folder_bytes

    tracked = tracked_bytes(Path(__file__).resolve().parents[2], untracked=True)
    budget = None if tracked is None else (CALL_MIB - MARGIN_MIB) * 2**20 - tracked
    written = carry_corpus(corpus, out, humaneval_problems(), budget)
    if tracked is not None:
        travels = (tracked + folder_bytes(out)) / 2**20
        written["call_mib"] = round(travels, 1)
        if travels > CALL_MIB:
            click.echo(f"infill: warning: a call would carry {travels:.1f} MiB (limit {CALL_MIB})", err=True)
    click.echo(json.dumps(written))


CALL_MIB = 64  # what one call to a lent GPU machine carries: the tracked tree and the carry folder
MARGIN_MIB = 2  # left free for the tree's growth until the loan (run gpu-carry again before each loan)


def tracked_bytes(root: Path, untracked: bool = False) -> int | None:
    """Bytes of the files git tracks under `root`, and with `untracked` of the files it neither tracks nor
    ignores (a call carries those too); None: not a git checkout."""
    import subprocess

    extra = ["--cached", "--others", "--exclude-standard"] if untracked else []
    try:
        listed = subprocess.run(["git", "ls-files", "-z", *extra], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    paths = [root / p for p in listed.decode("utf-8", "replace").split("\0") if p]
    return sum(p.stat().st_size for p in paths if p.is_file())
