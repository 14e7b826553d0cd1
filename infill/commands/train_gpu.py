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
@click.option("--smoke", is_flag=True, help="Rehearse on the CPU with tiny settings and a few steps (under a minute).")
@click.option("--minutes", type=FiniteFloatRange(0.5, 60), default=None, help="Wall-clock budget [default: 9].")
@click.option("--max-mb", type=FiniteFloatRange(1), default=None, help="Size budget of the AS-ARM's bf16 weights.")
@click.option("--tflops", type=FiniteFloatRange(1), default=None, help="Throughput the compute estimate assumes.")
@click.option("--no-blockdiff", is_flag=True, help="Train the AS-ARM alone.")
def gpu_job(
    out: Path | None,
    work: Path | None,
    carry: Path,
    smoke: bool,
    minutes: float | None,
    max_mb: float | None,
    tflops: float | None,
    no_blockdiff: bool,
) -> None:
    """Build a corpus here, train the AS-ARM and the block-diffusion model on this machine's GPU before a
    deadline, and write bf16 weights small enough to bring back (exit 1 when a stage failed)."""
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
        minutes=minutes,
        max_mb=max_mb,
        tflops=tflops,
        blockdiff=False if no_blockdiff else None,
    )
    sys.exit(run(plan))


@click.command("gpu-carry")
@path_option("--corpus", exists=True, file_okay=False, default=Path("runs/corpus"))
@click.option("--out", type=NonEmptyPath(path_type=Path, file_okay=False), default=CARRY)
def gpu_carry(corpus: Path, out: Path) -> None:
    """Write what `infill train gpu-job` takes along: the corpus's splits compressed, its manifest, and the
    evaluation problems it must not train on."""
    import json

    from infill.evaluation.humaneval import humaneval_problems
    from infill.training.gpu_data import carry_corpus

    click.echo(json.dumps(carry_corpus(corpus, out, humaneval_problems())))
