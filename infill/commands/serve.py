"""`infill serve`: keep models loaded and answer JSON-lines requests (editors, the per-user daemon)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from infill import environment
from infill.clitypes import SECONDS, IntRange, NonEmptyPath
from infill.errors import ExitCode
from infill.server import protocol

PROTOCOL_HELP = """Keep models in memory and answer requests, one JSON object per line.

\b
Request:  {"id": 1, "method": "fill", "params": {...}}
Response: {"id": 1, ...}  (fill: what `infill fill --format json` prints)
      or  {"id": 1, "error": {"code": "input_error", "message": "...", "exit_code": 2}}

\b
Methods: fill, docstrings, models, ping, shutdown. Requests are served in order, one at a time; a malformed
line, an unknown method, a bad span or an oversized request gets an error response and the server keeps
running. With --socket, inputs over --max-input-bytes are refused (too_large), so no client waits long.
Models stay loaded, keyed by model and device.

\b
--stdio          for an editor plugin that owns the process (Neovim and VS Code: docs/server.md)
--socket PATH    a Unix socket daemon (mode 0600); `infill fill --daemon auto` starts one per user by itself
"""


@click.command(help=PROTOCOL_HELP)
@click.option("--stdio", "use_stdio", is_flag=True, help="Serve on stdin/stdout.")
@click.option(
    "--socket",
    "socket_path",
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Serve on a Unix domain socket at PATH.",
)
@click.option(
    "--max-request-bytes",
    type=IntRange(min=1),
    default=protocol.DEFAULT_MAX_REQUEST_BYTES,
    help="Longer request lines get a too_large error.",
)
@click.option(
    "--max-input-bytes",
    type=IntRange(min=0),
    default=None,
    help=f"Refuse (too_large) fills and docstrings runs on a larger input: text, file, or files "
    f"[default: {protocol.DEFAULT_MAX_INPUT_BYTES} with --socket, since its clients wait for each other; "
    "0 (no limit) with --stdio].",
)
@click.option(
    "--idle-timeout",
    type=SECONDS,
    default=0.0,
    metavar="SECONDS",
    help="With --socket: exit after this long without a request (0 = never).",
)
def serve(
    use_stdio: bool,
    socket_path: Path | None,
    max_request_bytes: int,
    max_input_bytes: int | None,
    idle_timeout: float,
) -> None:
    from infill.server.dispatch import Dispatcher, ServerContext, load_plugins

    if use_stdio == (socket_path is not None):
        raise click.UsageError("give exactly one of --stdio or --socket PATH")
    context = ServerContext(transport="stdio" if use_stdio else "socket", idle_timeout=idle_timeout)
    if max_input_bytes is None:
        max_input_bytes = 0 if use_stdio else protocol.DEFAULT_MAX_INPUT_BYTES
    dispatcher = Dispatcher(max_request_bytes=max_request_bytes, max_input_bytes=max_input_bytes, context=context)
    os.environ["INFILL_NO_DAEMON"] = "1"  # the commands a server runs must never call a daemon themselves
    from infill.models import onnx

    onnx.Background.enabled = True  # the first fill does not wait for the ONNX export
    plugins = environment.read("INFILL_SERVER_PLUGINS")
    if plugins:
        load_plugins(dispatcher, plugins)
    if use_stdio:
        from infill.server.stdio import serve_stdio

        serve_stdio(dispatcher)
        return
    from infill.server.daemon import SocketInUse, serve_socket
    from infill.server.lifecycle import DaemonUnavailable

    assert socket_path is not None  # checked above (mutually exclusive flags)
    try:
        serve_socket(dispatcher, socket_path, idle_timeout)
    except (SocketInUse, DaemonUnavailable) as exc:
        raise UnusableSocket(str(exc)) from None


class UnusableSocket(click.ClickException):
    """A --socket path this server cannot take (a file that is no socket, one another server answers on): an input
    error, exit 2."""

    exit_code = ExitCode.USAGE
