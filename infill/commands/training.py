"""What the training commands (`infill train ...`) share: the flags several trainers take, each declared once
here with the trainer's own default. Click only: no torch."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from infill.clitypes import MAX_THREADS, POSITIVE, SEED, THREADS, FiniteFloatRange, IntRange, NonEmptyPath
from infill.errors import InputError

if TYPE_CHECKING:
    from infill.training.distributed import World

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

# `--until` of the trainers that stop at a wall-clock time (a GPU loan's deadline): AS-ARM, block diffusion
until_option = click.option("--until", "until", default=None, help="Stop at this UTC time (HH:MM or ISO 8601).")


def parse_until(value: str | None) -> float:
    """'05:25' (UTC today) or an ISO time -> unix time; None -> 0."""
    if not value:
        return 0.0
    try:
        if len(value) <= 5 and ":" in value:
            hh, mm = (int(x) for x in value.split(":"))
            now = datetime.now(timezone.utc)
            return now.replace(hour=hh, minute=mm, second=0, microsecond=0).timestamp()
        return datetime.fromisoformat(value).timestamp()
    except ValueError as exc:
        raise InputError(f"--until: cannot parse time {value!r} (use HH:MM in UTC or ISO 8601)") from exc


# `--time-limit` of the trainers that stop on a wall-clock budget (block diffusion, SSMD); `--minutes` is the same
# flag, the name the AS-ARM and PTP trainers use, so that every trainer takes either name
time_limit_option = click.option(
    "--time-limit",
    "--minutes",
    "time_limit",
    type=FiniteFloatRange(0),
    default=0.0,
    help="Stop after this many minutes (0 = none).",
)
BATCH_HELP = "per optimizer step over all processes (under torchrun each process takes its share)."
# `--bf16/--no-bf16` and `--device` of the trainers that run on CUDA too (AS-ARM, block diffusion)
bf16_option = click.option(
    "--bf16/--no-bf16",
    default=None,
    help="bf16 autocast over fp32 weights [default: on for CUDA and AMX / AVX512-BF16 CPUs, where it is fast].",
)
device_option = click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    help="Where to train (docs/training.md has the CUDA recipe).",
)


def batch_size_option(default: int, unit: str = "Examples") -> Callable[[F], F]:
    """`--batch-size` of a trainer that runs under torchrun: `default` `unit` per step over every process."""
    return click.option("--batch-size", type=POSITIVE, default=default, help=f"{unit} {BATCH_HELP}")


def fim_rate_option(default: float) -> Callable[[F], F]:
    """`--fim-rate`: the share of fill-in-the-middle training examples."""
    return click.option("--fim-rate", type=FiniteFloatRange(0, 1), default=default, help=FIM_HELP)


FIM_HELP = "Share of fill-in-the-middle examples."


def corpus_option(dest: str) -> Callable[[F], F]:
    """A corpus folder as `infill train corpus` writes it (train.jsonl, heldout.jsonl), required, passed as `dest`:
    `--corpus`, or `--data` as the block-diffusion trainer names its training text, so that either name works."""
    kind = NonEmptyPath(exists=True, file_okay=False)
    return click.option(
        "--corpus",
        "--data",
        dest,
        required=True,
        type=kind,
        help="Corpus folder (train.jsonl, heldout.jsonl), as built by `infill train corpus`.",
    )


def block_sizes_option(default: str, minimum: int, text: str, why: str = "") -> Callable[[F], F]:
    """`--block-sizes`: comma-separated block sizes ("4,8,16"), each at least `minimum` (`why` says why in the
    error), parsed into a tuple."""

    def parse(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, ...]:
        try:
            sizes = tuple(int(x) for x in value.split(",") if x.strip())
        except ValueError:
            raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
        if not sizes or min(sizes) < minimum:
            raise click.BadParameter(f"block sizes must be >= {minimum}{why}")
        return sizes

    return click.option("--block-sizes", default=default, callback=parse, help=text)


def path_option(*names: str, help: str | None = None, **kwargs: Any) -> Callable[[F], F]:  # noqa: A002
    """A path option: click.Path's own checks (exists, file_okay, dir_okay) from `kwargs`, the rest
    (default, required) passed on; a default is shown in --help."""
    checks = {k: kwargs.pop(k) for k in ("exists", "file_okay", "dir_okay") if k in kwargs}
    if "default" in kwargs:
        kwargs["show_default"] = True
    return click.option(*names, type=NonEmptyPath(path_type=Path, **checks), help=help, **kwargs)


def run_folder_option(text: str) -> Callable[[F], F]:
    """`--out`: the folder a trainer writes (required); `text` says what goes in it."""
    return click.option("--out", required=True, type=NonEmptyPath(file_okay=False), help=text)


def threads_option(default: int = 1, text: str = "torch CPU threads.") -> Callable[[F], F]:
    """`--threads`: torch's CPU threads for this process; a default of 0 allows 0 (torch's own choice)."""
    kind = THREADS if default else IntRange(0, MAX_THREADS)
    return click.option("--threads", type=kind, default=default, help=text)


def seed_option(default: int = 0) -> Callable[[F], F]:
    """`--seed`: the run's random seed."""
    return click.option("--seed", type=SEED, default=default)


def lr_option(default: float = 1e-3) -> Callable[[F], F]:
    """`--lr`: the peak learning rate."""
    return click.option("--lr", type=FiniteFloatRange(0, min_open=True), default=default)


def log_every_option(default: int) -> Callable[[F], F]:
    """`--log-every`: a progress line every N optimizer steps."""
    return click.option("--log-every", type=POSITIVE, default=default)


def under_torchrun(train: Callable[[World], T], header: str = "", device: str = "cpu") -> T | None:
    """Runs `train(world)` as this process's share of a torchrun job (or alone, a world of one), after printing
    `header` on stderr from the main process. Returns what `train` returned on the main process, None on the
    others (which print nothing)."""
    from infill.training.distributed import joined

    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"--device cuda: torch {torch.__version__} sees no CUDA device here")
    with joined(device) as world:
        if world.main and header:
            click.echo(header, err=True)
        result = train(world)
    return result if world.main else None
