"""What the training commands (`infill train ...`) share: the flags several trainers take, each declared once
here with the trainer's own default. Click only: no torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from infill.clitypes import POSITIVE, FiniteFloatRange

F = TypeVar("F", bound=Callable[..., Any])

# `--time-limit` of the trainers that stop on a wall-clock budget (block diffusion, SSMD)
time_limit_option = click.option(
    "--time-limit", type=FiniteFloatRange(0), default=0.0, help="Stop after this many minutes (0 = none)."
)
BATCH_HELP = "per optimizer step over all processes (under torchrun each process takes its share)."


def batch_size_option(default: int, unit: str = "Examples") -> Callable[[F], F]:
    """`--batch-size` of a trainer that runs under torchrun: `default` `unit` per step over every process."""
    return click.option("--batch-size", type=POSITIVE, default=default, help=f"{unit} {BATCH_HELP}")


def fim_rate_option(default: float) -> Callable[[F], F]:
    """`--fim-rate`: the share of fill-in-the-middle training examples."""
    return click.option("--fim-rate", type=FiniteFloatRange(0, 1), default=default, help=FIM_HELP)


FIM_HELP = "Share of fill-in-the-middle examples."


def corpus_option(name: str) -> Callable[[F], F]:
    """A corpus folder as `infill train corpus` writes it (train.jsonl, heldout.jsonl), required."""
    kind = click.Path(exists=True, file_okay=False)
    return click.option(
        name,
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
