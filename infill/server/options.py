"""The `--daemon` and `--idle-timeout` options that `infill fill` and `infill docstrings` share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from infill.server.client import DAEMON_MODES
from infill.server.lifecycle import DEFAULT_IDLE_TIMEOUT

F = TypeVar("F", bound=Callable[..., Any])


def daemon_options(function: F) -> F:
    """Adds `daemon: str` and `idle_timeout: float` parameters for infill.server.client.request()."""
    function = click.option(
        "--idle-timeout",
        type=click.FloatRange(min=0),
        default=DEFAULT_IDLE_TIMEOUT,
        show_default=True,
        metavar="SECONDS",
        help="An auto-started daemon exits after this long without a request.",
    )(function)
    function = click.option(
        "--daemon",
        "daemon",
        type=click.Choice(DAEMON_MODES),
        default="auto",
        show_default=True,
        help="Use this user's background model server (auto: start it if needed; never in CI or with "
        "INFILL_NO_DAEMON=1). Any daemon failure falls back to working in-process, with the same output.",
    )(function)
    return function
