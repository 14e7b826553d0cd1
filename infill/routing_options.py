"""The settings of S2D2's routing policies (--routing): infill.decoding.routing runs the policies; their settings
are parsed here, at the bottom with the other settings (infill.config), so a bad --routing fails at the flag or
the server's request, before any model work."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from infill.errors import InputError

POLICIES = ("always", "never", "min-span", "score-static", "score-dynamic", "hysteresis", "ucb")


@dataclass(frozen=True)
class RoutingConfig:
    policy: str = "min-span"
    estimator: Literal["entropy", "margin"] = "entropy"  # how K^ is estimated
    min_span: int = 2  # tau_span for min-span
    beta: float = 1.0  # entropy estimator sharpness
    margin: float = 0.05  # tau_margin for the margin estimator
    c: float = 2.0  # cost of one verifier forward, in tokens
    tau_score: float = 0.0  # score threshold
    tau_on: float = 0.0  # hysteresis: switch verification on at s >= tau_on
    tau_off: float = -1.0  # hysteresis: switch it off at s < tau_off
    score: Literal["static", "dynamic"] = "dynamic"  # score variant for hysteresis and for ucb's context
    ucb_c: float = 1.0  # UCB exploration weight


# each number's domain: (lowest, highest), None = unbounded; every value is finite
_ROUTING_DOMAINS: dict[str, tuple[float | None, float | None]] = {
    "min_span": (1, None),
    "beta": (0, None),
    "margin": (0, 1),
    "c": (0, None),
    "ucb_c": (0, None),
    "tau_score": (None, None),
    "tau_on": (None, None),
    "tau_off": (None, None),
}
_ASCII_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
_ASCII_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _routing_number(key: str, kind: str, value: str) -> float:
    """A routing option's number: ASCII digits, finite, in its domain; InputError otherwise."""
    pattern = _ASCII_INTEGER if kind == "int" else _ASCII_FLOAT
    number = (int(value) if kind == "int" else float(value)) if pattern.fullmatch(value) else math.nan
    shown = value if len(value) <= 20 else f"{value[:17]}..."
    if not math.isfinite(number):
        raise InputError(f"routing option {key} needs a finite number in ASCII digits, got {shown!r}")
    low, high = _ROUTING_DOMAINS[key]
    if (low is not None and number < low) or (high is not None and number > high):
        bounds = f"at least {low:g}" if high is None else f"between {low:g} and {high:g}"
        raise InputError(f"routing option {key} must be {bounds}, got {shown!r}")
    return number


def parse_routing(spec: str) -> RoutingConfig:
    """'score-dynamic:estimator=margin,c=1.5' -> RoutingConfig. Raises InputError on unknown names, and on values
    that are no number, not finite or outside their domain (min_span >= 1; beta, c, ucb_c >= 0; margin in
    [0, 1])."""
    name, _, rest = spec.strip().partition(":")
    if name not in POLICIES:
        raise InputError(f"unknown routing policy {name[:40]!r}; choose one of {', '.join(POLICIES)}")
    cfg = RoutingConfig(policy=name)
    types = {f.name: str(f.type) for f in fields(RoutingConfig)}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in types or key == "policy":
            options = ", ".join(sorted(set(types) - {"policy"}))
            raise InputError(f"bad routing option {item[:40]!r}; options: {options}")
        value = value.strip()
        typed: Any = value
        if types[key] in ("int", "float"):
            typed = _routing_number(key, types[key], value)
        if key == "estimator" and typed not in ("entropy", "margin"):
            raise InputError(f"routing estimator must be entropy or margin, got {value[:40]!r}")
        if key == "score" and typed not in ("static", "dynamic"):
            raise InputError(f"routing score must be static or dynamic, got {value[:40]!r}")
        cfg = replace(cfg, **{key: typed})
    return cfg
