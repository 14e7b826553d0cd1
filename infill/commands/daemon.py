"""`infill daemon status|start|stop`: the per-user background server behind `infill fill --daemon auto`."""

from __future__ import annotations

import json
import sys

import click

from infill.clitypes import SECONDS
from infill.errors import ExitCode
from infill.server import lifecycle


@click.group()
def daemon() -> None:
    """Inspect, start or stop this user's background model server.

    `infill fill` and `infill docstrings` use it by default (--daemon auto) and start it when needed; it exits
    after --idle-timeout seconds without a request. Its socket lives in $INFILL_RUNTIME_DIR, else
    $XDG_RUNTIME_DIR/infill, else /tmp/infill-<uid> (a directory only you can enter).
    """


@daemon.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def status(fmt: str) -> None:
    """Show the running daemon. Exit 0 if one runs, 1 if none does."""
    from infill.server import client

    try:
        info = client.status()
    except lifecycle.DaemonUnavailable as exc:
        raise DaemonFolderError(str(exc)) from None
    problem = client.blocked() if info is None else None  # why none can start, if something is in its way
    if fmt == "json":
        none = {"running": False, **({"problem": problem} if problem else {})}
        click.echo(json.dumps(info if info is not None else none, indent=2))
    elif info is None:
        click.echo("no daemon running" + (f": {problem}" if problem else ""))
    else:
        models = ", ".join(f"{m['name']} ({m['device']})" for m in info.get("models", [])) or "none loaded"
        idle = info.get("idle_timeout") or 0
        click.echo(f"running: pid {info.get('pid')}, infill {info.get('version')} (protocol {info.get('protocol')})")
        click.echo(f"socket:  {info['socket']}")
        click.echo(f"uptime:  {info.get('uptime', 0):.0f} s; idle timeout {'never' if not idle else f'{idle:g} s'}")
        click.echo(f"models:  {models}")
        if info.get("differences") == ["env"]:
            click.echo("note:    it was started under other environment variables that can change a result; the next")
            click.echo("         request restarts it")
        elif info.get("differences") == ["code"]:
            click.echo("note:    this installation's files (code, packaged models, packages installed beside it, or")
            click.echo("         plugin modules) changed since it started; the next request restarts it")
        elif not info.get("compatible"):
            click.echo("note:    it runs other code than this infill; the next request restarts it")
    sys.exit(0 if info is not None else 1)


@daemon.command()
@click.option(
    "--idle-timeout",
    type=SECONDS,
    default=lifecycle.DEFAULT_IDLE_TIMEOUT,
    metavar="SECONDS",
    help="Exit after this long without a request (0 = never).",
)
def start(idle_timeout: float) -> None:
    """Start the daemon now (if it is not running), so the first fill does not wait for it."""
    from infill.server import client

    try:
        conn = client.connect_daemon(lifecycle.runtime_paths(), spawn=True, idle_timeout=idle_timeout)
    except lifecycle.DaemonUnavailable as exc:  # its folder cannot be used: the user's setting
        raise DaemonFolderError(f"could not start the daemon: {exc}") from None
    except OSError as exc:
        raise DaemonFailed(f"could not start the daemon: {exc}") from None
    if conn is None:  # pragma: no cover - spawn=True either connects or raises
        raise DaemonFailed("could not start the daemon")
    conn.close()
    click.echo(f"running: pid {conn.ping.get('pid')}")


@daemon.command()
def stop() -> None:
    """Stop the daemon (it finishes the request in progress first, if it can within a few seconds)."""
    from infill.server import client

    try:
        stopped = client.stop()
    except lifecycle.DaemonUnavailable as exc:
        raise DaemonFolderError(str(exc)) from None
    except OSError as exc:
        raise DaemonFailed(str(exc)) from None
    click.echo("stopped" if stopped else "no daemon running")


class DaemonFolderError(click.ClickException):
    """The daemon's folder cannot be used ($INFILL_RUNTIME_DIR: a file, another user's folder): exit 2. Never 1,
    which `status` keeps for "none runs"."""

    exit_code = ExitCode.USAGE


class DaemonFailed(click.ClickException):
    """The daemon could not be started or stopped: exit 123."""

    exit_code = ExitCode.INTERNAL
