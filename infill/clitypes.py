"""Click parameter types shared by the commands (no torch: `infill --help` imports this)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

import click

from infill.config import SEED_MAX, SEED_MIN

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    D = TypeVar("D", bound=DataclassInstance)


# numbers as a user types them: ASCII digits only (Python's int() and float() also read '٣' and '３' as 3, and
# '1_0' as 10), an optional sign, and for a float a fraction and an exponent (nan and inf are refused as not finite)
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
_FLOAT = re.compile(
    r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*|\s*[+-]?(?:nan|inf|infinity)\s*", re.I
)


def shown(value: str, limit: int = 40) -> str:
    """A user's value in a message: quoted, and cut to `limit` characters (a 5,000-digit number stays one short
    line)."""
    return repr(value if len(value) <= limit else f"{value[: limit - 3]}...")


class IntRange(click.IntRange):
    """click.IntRange of numbers written in ASCII digits."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _INTEGER.fullmatch(value):
            self.fail(f"{shown(value)} is not a whole number (ASCII digits).", param, ctx)
        return super().convert(value, param, ctx)


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (a usage error, exit 2), which every comparison in a plain
    FloatRange lets through and which then failed deep inside decoding, and numbers not written in ASCII digits.
    Without bounds it is any finite number (FLOAT in the help, not an empty range)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _FLOAT.fullmatch(value):
            self.fail(f"{shown(value)} is not a number (ASCII digits).", param, ctx)
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


class NonEmptyPath(click.Path):
    """click.Path that refuses an empty value: what an unset shell variable gives (`-o "$OUT"`), which a plain
    click.Path passes on as is and pathlib reads as the current folder."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value == "":
            self.fail("is empty (an unset variable?); give a path", param, ctx)
        return super().convert(value, param, ctx)


class Text(click.ParamType):
    """Text a user gives (a marker, a name, a file name that labels stdin): not empty, and valid UTF-8. A shell
    passes any bytes; Python holds those that are no UTF-8 as lone surrogates, from which no text can be encoded."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        if value == "":
            self.fail("is empty (an unset variable?)", param, ctx)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            self.fail(f"is not valid UTF-8 (byte {exc.start + 1} of the argument)", param, ctx)
        return value


SEED = IntRange(SEED_MIN, SEED_MAX)
THREADS = IntRange(1, MAX_THREADS)
JOBS = IntRange(1, MAX_JOBS)
SECONDS = FiniteFloatRange(0, MAX_SECONDS)
POSITIVE = IntRange(1)
PATH = NonEmptyPath(readable=False)  # only not empty: the command says itself what is wrong with a file
TEXT = Text()


def settings_from_flags(kind: type[D], **computed: Any) -> D:
    """The settings dataclass `kind` from the running command's flags of the same names (a training command's
    --steps, --batch-size, ...), with `computed` (values derived from flags, or in other units) taking
    precedence; fields named by neither keep their defaults."""
    flags = click.get_current_context().params
    names = {f.name for f in fields(kind)}
    return kind(**{**{name: value for name, value in flags.items() if name in names}, **computed})


def value_option(name: str, kind: click.ParamType, default: Any, help: str) -> Callable[[Any], Any]:
    """A flag that takes one value of `kind` (a range, a choice) with its default and help, declared in one line
    (the flags of the trainers and `infill calibrate`, each its own)."""
    return click.option(name, type=kind, default=default, help=help)
