"""Click parameter types shared by the commands (no torch: `infill --help` imports this)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import click

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
