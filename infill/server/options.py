"""The `--daemon` and `--idle-timeout` options that `infill fill` and `infill docstrings` share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from infill.clitypes import SECONDS
from infill.server.client import DAEMON_MODES
from infill.server.lifecycle import DEFAULT_IDLE_TIMEOUT

F = TypeVar("F", bound=Callable[..., Any])


def daemon_options(function: F) -> F:
    """Adds `daemon: str` and `idle_timeout: float | None` parameters for infill.server.client.request()."""
    function = click.option(
        "--idle-timeout",
        type=SECONDS,
        default=None,
        metavar="SECONDS",
        help=f"A daemon this command starts exits after this long without a request "
        f"[default: $INFILL_DAEMON_IDLE_TIMEOUT, else {DEFAULT_IDLE_TIMEOUT:g}].",
    )(function)
    function = click.option(
        "--daemon",
        "daemon",
        type=click.Choice(DAEMON_MODES),
        default="auto",
        help="Use this user's background model server (auto: start it if needed; never in CI or with "
        "INFILL_NO_DAEMON=1). Any daemon failure falls back to working in-process, with the same output.",
    )(function)
    return function


def forward_docstrings(
    request: Mapping[str, Any], mode: str, idle_timeout: float | None, model: str | None = None, input_bytes: int = 0
) -> int | None:
    """`infill docstrings`' daemon path: run_docstrings(request) in the daemon, its output printed here. Returns
    its exit code, or None: run it in-process (daemon off, unavailable, or failing; the output is then the same
    as the daemon's would be). An input over the daemon's size limit (`input_bytes`: the files it would read)
    is never sent."""
    import sys

    from infill.server import client, protocol

    if input_bytes > protocol.DEFAULT_MAX_INPUT_BYTES:
        return None
    out = client.request("docstrings_command", dict(request), mode, model=model, idle_timeout=idle_timeout)
    if out is None or not isinstance(out.get("exit_code"), int):
        return None
    for stream, text in ((sys.stdout, out.get("stdout")), (sys.stderr, out.get("stderr"))):
        if isinstance(text, str) and text:
            stream.flush()
            stream.buffer.write(text.encode("utf-8", "surrogateescape"))  # the exact bytes the run wrote
            stream.buffer.flush()
    exit_code: int = out["exit_code"]
    return exit_code


def fill_command(request: Mapping[str, Any], mode: str, idle_timeout: float | None) -> dict[str, Any] | None:
    """`infill fill`'s daemon path: run_fill(request) in the daemon -> its output, or None (in-process).
    An input over the daemon's size limit is never sent (the daemon would refuse it: too_large)."""
    from infill.server import client, protocol
    from infill.server.dispatch import input_bytes

    if input_bytes("fill_command", request, protocol.DEFAULT_MAX_INPUT_BYTES) > protocol.DEFAULT_MAX_INPUT_BYTES:
        return None
    model = request.get("model")
    name = model.get("name") if isinstance(model, Mapping) else None
    out = client.request("fill_command", request, mode, model=name, idle_timeout=idle_timeout)
    if out is None or not (
        isinstance(out.get("exit_code"), int)
        and isinstance(out.get("stdout"), str)
        and isinstance(out.get("stderr"), list)
    ):
        return None  # not the shape run_fill returns (another version?): do it in-process
    return out
