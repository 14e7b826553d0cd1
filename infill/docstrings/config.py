"""Settings of `infill docstrings`: one frozen DocstringConfig, built from pyproject.toml and the flags.

pyproject.toml:

    [tool.infill]
    model = "default"              # shared with `infill fill`

    [tool.infill.docstrings]
    style = "google"               # google | numpy | sphinx | auto
    min-confidence = -3.5          # mean token log-probability; below it a docstring is left missing
    min-probability = 0.5          # write the model's sentences only at this calibrated probability (0 to 1)
    ignore-private = true          # _name (and everything inside a private class)
    ignore-magic = true            # __eq__ and friends
    ignore-init-method = true      # __init__ (its arguments go to the class docstring)
    ignore-nested-functions = true
    ignore-nested-classes = false
    ignore-overloads = true        # @overload stubs (the implementation gets the docstring)
    ignore-property-decorators = false  # @property getters; setters and deleters are always skipped
    ignore-module = false
    ignore-regex = ["^test_"]      # names (or dotted qualnames) to skip
    line-length = 88               # where descriptions wrap
    respect-gitignore = true       # walking a folder, skip what git ignores there (as ruff does)

Keys may use dashes or underscores.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from infill.config import SEED_MAX, SEED_MIN
from infill.errors import InputError

StyleName = Literal["google", "numpy", "sphinx", "auto"]
STYLES: tuple[str, ...] = ("google", "numpy", "sphinx", "auto")
MIN_LINE_LENGTH = 20  # narrower descriptions cannot be wrapped sensibly (--line-length, line-length)


@dataclass(frozen=True)
class DocstringConfig:
    style: StyleName = "google"
    model: str = "default"
    min_confidence: float | None = None  # None = write every docstring, reporting low-confidence ones
    # the model's sentences are written only when their calibrated probability of being right is at least this;
    # None = the threshold stored with the model's calibration (infill.docstrings.confidence)
    min_probability: float | None = None
    low_confidence: float = -4.0  # below this mean log-prob a written docstring is reported as low confidence
    ignore_private: bool = True
    ignore_magic: bool = True
    ignore_init_method: bool = True
    ignore_nested_functions: bool = True
    ignore_nested_classes: bool = False
    ignore_overloads: bool = True
    ignore_property_decorators: bool = False
    ignore_module: bool = False
    ignore_regex: tuple[str, ...] = ()
    line_length: int = 88
    seed: int = 0
    temperature: float = 0.0  # 0 = greedy: the most likely text, the same on every machine
    summary_tokens: int = 20  # token budget of the summary slot (a pad ends a slot early)
    description_tokens: int = 12  # token budget of each parameter / returns / raises description
    respect_gitignore: bool = True  # walking a named folder, skip what git ignores there (infill.gitignore)

    def __post_init__(self) -> None:
        if not self.model:
            raise InputError("model must name a model (it is empty)")
        if self.style not in STYLES:
            raise InputError(f"unknown docstring style {self.style!r}; choose one of {', '.join(STYLES)}")
        for pattern in self.ignore_regex:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InputError(f"invalid --ignore-regex {pattern!r}: {exc}") from None
        if self.min_probability is not None and not 0.0 <= self.min_probability <= 1.0:
            raise InputError(f"min-probability must be between 0 and 1, got {self.min_probability}")
        for name in ("min_confidence", "min_probability", "low_confidence", "temperature"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):  # what the flags refuse, the file may not hold
                raise InputError(f"{name.replace('_', '-')} must be a finite number, got {value}")
        if self.temperature < 0:
            raise InputError(f"temperature must be at least 0, got {self.temperature}")
        if self.summary_tokens < 1 or self.description_tokens < 1:
            raise InputError("summary-tokens and description-tokens must be at least 1")
        if self.line_length < MIN_LINE_LENGTH:
            raise InputError(f"line-length must be at least {MIN_LINE_LENGTH}, got {self.line_length}")
        if not SEED_MIN <= self.seed <= SEED_MAX:
            raise InputError(f"seed must fit in 64 bits, got {self.seed}")


_BOOL_KEYS = {f.name for f in fields(DocstringConfig) if f.type in ("bool",)}


def _toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib.loads(text)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` (a file or folder), or None."""
    try:
        folder = start.resolve()
    except (RuntimeError, OSError):  # a symlink loop: searched from where it stands; the run reports the file
        folder = start.absolute()
    if not folder.is_dir():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file():
            return path
    return None


TOOL_KEYS = ("model", "docstrings")  # what [tool.infill] may hold: the model, and the docstrings section


def read_pyproject(path: Path) -> dict[str, Any]:
    """The `[tool.infill]` settings that concern docstrings, as DocstringConfig field names -> values."""
    try:
        data = _toml_loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"cannot read configuration: {exc}", path=str(path)) from None
    except RecursionError:  # tomllib recurses once per level of nesting
        raise InputError("cannot read configuration: nested too deeply", path=str(path)) from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise InputError("[tool] must be a table", path=str(path))
    tool = tool.get("infill", {})
    if not isinstance(tool, dict):
        raise InputError("[tool.infill] must be a table", path=str(path))
    unknown = sorted(set(tool) - set(TOOL_KEYS))
    if unknown:  # a misspelt key, or a section infill does not read, would be ignored without a word
        raise InputError(
            f"unknown [tool.infill] key {unknown[0]!r} (infill reads {', '.join(TOOL_KEYS)})", path=str(path)
        )
    settings: dict[str, Any] = {}
    if "model" in tool:
        settings["model"] = tool["model"]
    section = tool.get("docstrings", {})
    if not isinstance(section, dict):
        raise InputError("[tool.infill.docstrings] must be a table", path=str(path))
    settings.update(section)
    return _normalize(settings, str(path))


def _normalize(settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    known = {f.name: f for f in fields(DocstringConfig)}
    out: dict[str, Any] = {}
    for key, value in settings.items():
        name = key.replace("-", "_")
        if name not in known:
            raise InputError(f"unknown [tool.infill.docstrings] key {key!r}", path=where)
        if name == "ignore_regex":
            if isinstance(value, str):
                value = (value,)
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise InputError("ignore-regex must be a string or a list of strings", path=where)
            value = tuple(value)
        elif name in _BOOL_KEYS and not isinstance(value, bool):
            raise InputError(f"{key} must be true or false", path=where)
        elif name == "min_probability" and not _number(value):
            raise InputError(f"{key} must be a number between 0 and 1 (a calibrated probability, e.g. 0.5)", path=where)
        elif name in ("min_confidence", "low_confidence") and not _number(value):
            raise InputError(f"{key} must be a finite number (a mean token log-probability, e.g. -3.5)", path=where)
        elif known[name].type == "float" and not _number(value):
            raise InputError(f"{key} must be a finite number", path=where)
        elif known[name].type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError(f"{key} must be a whole number", path=where)
        elif known[name].type in ("str", "StyleName") and not isinstance(value, str):
            raise InputError(f"{key} must be a string", path=where)
        out[name] = value
    return out


def _number(value: object) -> bool:
    """A finite TOML number (nan and inf are TOML floats too)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def build_config(pyproject: Path | None, overrides: Mapping[str, Any]) -> DocstringConfig:
    """pyproject settings, then command-line `overrides` (None values are ignored), validated once."""
    base = DocstringConfig()
    settings = read_pyproject(pyproject) if pyproject is not None else {}
    if pyproject is not None:
        try:  # a value out of range in the file is reported with the file, not as if a flag had given it
            replace(base, **settings)
        except InputError as exc:
            raise InputError(exc.message, path=str(pyproject)) from None
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "ignore_regex":
            value = tuple(settings.get("ignore_regex", ())) + tuple(value)
        settings[key] = value
    return replace(base, **settings)
