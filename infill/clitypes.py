"""Click parameter types shared by the commands (no torch: `infill --help` imports this)."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

import click

from infill.config import SEED_MAX, SEED_MIN

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    D = TypeVar("D", bound=DataclassInstance)


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (a usage error, exit 2), which every comparison in a plain
    FloatRange lets through and which then failed deep inside decoding. Without bounds it is any finite number
    (FLOAT in the help, not an empty range)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if isinstance(number, float) and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str | None:
        return "FLOAT" if self.min is None and self.max is None else None

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()


# Work that one command may ask for grows with these: bounded like the server's limits (infill.options), since
# `--threads 100000` crashed torch and 2,000 threads took most of a minute to start
MAX_THREADS = 256
MAX_JOBS = 64  # --jobs: worker processes, each with its own model
MAX_SECONDS = 1e7  # timeouts: about 115 days; socket timeouts overflow far above

FINITE_FLOAT = FiniteFloatRange()
SEED = click.IntRange(SEED_MIN, SEED_MAX)
THREADS = click.IntRange(1, MAX_THREADS)
JOBS = click.IntRange(1, MAX_JOBS)
SECONDS = FiniteFloatRange(0, MAX_SECONDS)
POSITIVE = click.IntRange(1)


def settings_from_flags(kind: type[D], **computed: Any) -> D:
    """The settings dataclass `kind` from the running command's flags of the same names (a training command's
    --steps, --batch-size, ...), with `computed` (values derived from flags, or in other units) taking
    precedence; fields named by neither keep their defaults."""
    flags = click.get_current_context().params
    names = {f.name for f in fields(kind)}
    return kind(**{**{name: value for name, value in flags.items() if name in names}, **computed})
