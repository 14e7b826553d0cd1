"""Click parameter types shared by the commands (no torch: `infill --help` imports this)."""

from __future__ import annotations

import math
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
