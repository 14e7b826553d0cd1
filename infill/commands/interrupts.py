"""Ctrl-C (SIGINT) and SIGTERM in the `infill` process: raised as exceptions (KeyboardInterrupt, Terminated) so
that cleanup runs, but held back while they would cut something in half.

The process entry point (infill.__main__) installs the handlers before anything else is imported, and holds
signals until the command line is loaded: a signal that lands while Python imports the CLI waits, then is raised
where the command can answer it (the editor filter reads its input first, so Ctrl-C at any moment gives the
buffer back: infill.commands.fill). `held()` holds them around what must not be cut (reading the filter's input,
writing its output). Standard library only: this module is imported before Click.

Without `install()` (a test calling the CLI in-process) nothing is held: SIGINT raises KeyboardInterrupt as Python
does by default, and `sigterm_raises()` makes SIGTERM raise Terminated while a command runs.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _State:
    installed = False  # install() ran: the handlers are this module's
    startup = False  # the hold from install() until release()
    holds = 0  # open held() blocks, plus one for the startup hold
    pending: int | None = None  # the first signal that arrived while held


_state = _State()


def _raise(signum: int) -> NoReturn:
    if signum == signal.SIGTERM:
        from infill.errors import Terminated

        raise Terminated()
    raise KeyboardInterrupt


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state.holds:
        if _state.pending is None:
            _state.pending = signum
        return
    _raise(signum)


def install() -> None:
    """Take over SIGINT and SIGTERM for this process, holding them until `release()`. A signal the parent set to be
    ignored stays ignored (nohup, a background job)."""
    if threading.current_thread() is not threading.main_thread():
        return
    # the hold first: a signal can arrive the moment its handler is in place, before the next handler is
    _state.installed = _state.startup = True
    _state.holds += 1
    for signum in _SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _handler)


def installed() -> bool:
    return _state.installed


def _unhold(deliver: bool) -> None:
    _state.holds -= 1
    if _state.holds == 0 and _state.pending is not None:
        signum, _state.pending = _state.pending, None
        if deliver:
            _raise(signum)


def release() -> None:
    """End the startup hold (later calls do nothing): a signal that arrived during it is raised here."""
    if _state.startup:
        _state.startup = False
        _unhold(deliver=True)


@contextmanager
def held(deliver: bool = True) -> Iterator[None]:
    """Hold signals while the block runs. When it ends, the first signal that arrived is raised (`deliver`), or
    dropped (what the block did was the last thing the command does: the complete output of the editor filter).
    A no-op before `install()`: there Python's own handlers raise at once."""
    _state.holds += 1
    try:
        yield
    except BaseException:
        _unhold(deliver=False)  # an exception is on its way already; the signal would only replace it
        raise
    _unhold(deliver)


def forget_answered_interrupts() -> None:
    """Clear CPython's "KeyboardInterrupt went unhandled" mark before the program exits. Under `python -m`, the
    interpreter sets that mark whenever a KeyboardInterrupt leaves code run by `exec()` of a string (dataclasses and
    typing build methods that way, so Ctrl-C during imports often lands there), keeps it after the command caught
    the exception and answered, and at exit kills the process with SIGINT instead of the exit code the command
    chose (the editor filter's buffer came back, then exit -2 instead of 130). Each `exec()` of a string resets the
    mark when it starts, and an unhandled KeyboardInterrupt at the top level still sets it after this."""
    exec("")


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    _raise(signal.SIGTERM)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises Terminated while a command runs, as SIGINT raises KeyboardInterrupt, so cleanup runs on both:
    the writer removes its temporary file, the editor filter echoes its input. Only where nobody else handles
    SIGTERM (install() did, or a server or a trainer installs its own handler inside the command)."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main_thread else None
    if previous != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
