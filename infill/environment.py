"""infill's own environment variables, declared once: each one's type and domain (the same Click types as the
options: finite, in range, bounded), and whether it can change what a daemon computes. Every reader goes through
`read`, and every command checks them all when it starts (`check`: infill.cli), so a junk value is one usage
error (exit 2) naming the variable, never silently ignored and never an internal error.

Click and the standard library only: `infill --help` imports this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import click

from infill.clitypes import MAX_SECONDS, SECONDS, THREADS, FiniteFloatRange
from infill.config import EngineName
from infill.errors import InputError


class AbsolutePath(click.ParamType):
    """A folder named from anywhere: an absolute path, `~/...` too (a relative one means another folder in every
    directory a command runs in, and the daemon runs in /). The value is the path with `~` expanded."""

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            value = os.path.expanduser(value)
            if not os.path.isabs(value):
                self.fail("is not an absolute path", param, ctx)
        return value


@dataclass(frozen=True)
class Variable:
    name: str
    type: click.ParamType | None  # None: any text (a folder, a list of plugins)
    help: str
    client_only: bool  # read only by the command that talks to a daemon: never restarts one (dispatch.identity)
    empty_is_unset: bool = True  # False: an empty value (an unset shell variable in `X=$Y`) is an error
    default: Any = None  # the value that unset means, where one value does (dispatch.identity compares by value)


VARIABLES: tuple[Variable, ...] = (
    Variable("INFILL_THREADS", THREADS, "CPU threads for decoding (as --threads)", client_only=False, default=1),
    Variable("INFILL_SERVER_PLUGINS", None, "module:function,... called with a server's dispatcher", False),
    Variable("INFILL_LSP_PLUGINS", None, "module:function,... called with `infill lsp`'s server", client_only=True),
    Variable("INFILL_KINDS", None, "modules, each with a model KIND, registered beside the built-in kinds", False),
    Variable("INFILL_NO_DAEMON", click.BOOL, "never use the per-user daemon", client_only=True),
    Variable(
        "INFILL_RUNTIME_DIR",
        AbsolutePath(),
        "where the per-user daemon's socket lives (an absolute folder)",
        True,
        False,
    ),
    Variable("INFILL_DAEMON_TIMEOUT", SECONDS, "seconds a client waits for the daemon's answer", client_only=True),
    Variable("INFILL_DAEMON_IDLE_TIMEOUT", SECONDS, "seconds a daemon a command starts waits idle", client_only=True),
    Variable("INFILL_DAEMON_DEBUG", click.BOOL, "say on stderr why the daemon was not used", client_only=True),
    Variable("INFILL_DEBUG", click.BOOL, "show the traceback of an error", client_only=True),
    Variable(
        "INFILL_ENGINE",
        click.Choice(get_args(EngineName)),
        "what runs the AS-ARM's cached pass where --engine is auto (docs/performance.md)",
        client_only=False,
        default="auto",
    ),
    Variable(
        "INFILL_REMOTE_TIMEOUT",
        FiniteFloatRange(0, MAX_SECONDS, min_open=True),
        "seconds to wait for a model server's answer",
        client_only=False,
    ),
    Variable("INFILL_ALLOW_HTTP", click.BOOL, "allow plain http to a model server off this machine", False),
    Variable(
        "INFILL_CACHE_DIR",
        AbsolutePath(),
        "where the ONNX engine keeps its exported graphs (an absolute folder; docs/performance.md)",
        client_only=False,  # the daemon exports and reads the graphs
    ),
    Variable(
        "INFILL_DATA_DIR",
        AbsolutePath(),
        "where the calibration of an Ollama model or a model server is kept (an absolute folder)",
        client_only=False,  # a calibration changes the confidence a daemon computes
    ),
    Variable(
        "INFILL_DIST_TIMEOUT",
        FiniteFloatRange(0, MAX_SECONDS, min_open=True),
        "seconds a training process waits for the others of a distributed run (docs/training.md)",
        client_only=True,  # read by training processes only, never by a daemon
        default=600.0,
    ),
)
BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}


def read(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The value of variable `name` in `env` (os.environ by default), converted and checked; None when it is unset
    or empty. InputError (exit 2) for a value outside its domain."""
    env = os.environ if env is None else env
    raw = env.get(name, "").strip()
    variable = BY_NAME[name]
    if not raw and name in env and not variable.empty_is_unset:
        raise InputError(f"environment variable {name} is empty; unset it, or give a value")
    if not raw or variable.type is None:
        return raw or None
    try:
        return variable.type.convert(raw, None, None)
    except click.BadParameter as exc:
        raise InputError(f"environment variable {name}={raw[:40]!r}: {exc.format_message()}") from None


def enabled(name: str, env: Mapping[str, str] | None = None) -> bool:
    """A boolean variable: set to 1, true, yes or on."""
    return bool(read(name, env))


def check(env: Mapping[str, str] | None = None) -> None:
    """InputError for the first of infill's variables that holds a value outside its domain."""
    for variable in VARIABLES:
        read(variable.name, env)


def normalized(name: str, value: str) -> Any:
    """What a value of variable `name` means, for comparing two environments: the converted value, None where it
    means what unset means (INFILL_THREADS=1), the text itself for a junk value or a variable infill does not
    declare."""
    variable = BY_NAME.get(name)
    if variable is None:
        return value
    try:
        meant = read(name, {name: value})
    except InputError:
        return value
    return None if meant == variable.default else meant


def restarts_daemon(name: str) -> bool:
    """Whether a daemon started under another value of `name` must be restarted: every variable of infill's (an
    unknown INFILL_* one too, to be safe) except those only a client reads."""
    variable = BY_NAME.get(name)
    return variable is None or not variable.client_only


def data_dir() -> Path:
    """Where infill keeps what it learns about models it does not own (the calibration of an Ollama model or of a
    model on a server): $INFILL_DATA_DIR, else $XDG_DATA_HOME/infill, else ~/.local/share/infill."""
    return _user_dir("INFILL_DATA_DIR", "XDG_DATA_HOME", Path(".local", "share"))


def cache_dir() -> Path:
    """Where infill keeps what it can make again (the ONNX engine's exported graphs): $INFILL_CACHE_DIR, else
    $XDG_CACHE_HOME/infill, else ~/.cache/infill."""
    return _user_dir("INFILL_CACHE_DIR", "XDG_CACHE_HOME", Path(".cache"))


def _user_dir(name: str, xdg_name: str, home_default: Path) -> Path:
    own: str | None = read(name)
    if own:
        return Path(own)
    xdg = os.environ.get(xdg_name)
    return (Path(xdg).expanduser() if xdg else Path.home() / home_default) / "infill"
