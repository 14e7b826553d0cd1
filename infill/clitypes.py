"""Click parameter types shared by the commands (no torch: `infill --help` imports this)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    D = TypeVar("D", bound=DataclassInstance)

SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # what torch.Generator.manual_seed accepts


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (a usage error, exit 2), which every comparison in a plain
    FloatRange lets through and which then failed deep inside decoding."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if isinstance(number, float) and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


FINITE_FLOAT = FiniteFloatRange()
SEED = click.IntRange(SEED_MIN, SEED_MAX)


def block_sizes(minimum: int, why: str = "") -> Callable[[click.Context, click.Parameter, str], tuple[int, ...]]:
    """A Click callback parsing comma-separated block sizes ("4,8,16"), each at least `minimum` (`why` says why
    in the error)."""

    def parse(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, ...]:
        try:
            sizes = tuple(int(x) for x in value.split(",") if x.strip())
        except ValueError:
            raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
        if not sizes or min(sizes) < minimum:
            raise click.BadParameter(f"block sizes must be >= {minimum}{why}")
        return sizes

    return parse


def settings_from_flags(kind: type[D], **computed: Any) -> D:
    """The settings dataclass `kind` from the running command's flags of the same names (a training command's
    --steps, --batch-size, ...), with `computed` (values derived from flags, or in other units) taking
    precedence; fields named by neither keep their defaults."""
    flags = click.get_current_context().params
    names = {f.name for f in fields(kind)}
    return kind(**{**{name: value for name, value in flags.items() if name in names}, **computed})


# `--time-limit` of the trainers that stop on a wall-clock budget (block diffusion, SSMD)
time_limit_option = click.option(
    "--time-limit",
    type=FiniteFloatRange(0),
    default=0.0,
    show_default=True,
    help="Stop after this many minutes (0 = none).",
)
