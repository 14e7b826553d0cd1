"""Progress on stderr, and silence for third-party libraries.

This is the only module that imports rich.progress, and it does so lazily: only when stderr is interactive and
progress was not turned off. Decoders report through a plain callback (`on_progress(event: dict)`), so nothing
else knows how progress is shown.

Events (dicts) sent by infill.api.fill_text:
  {"event": "load", "model": str}                        before a model is loaded
  {"event": "start", "spans": int, "tokens": int}        tokens = masked tokens of one candidate
  {"event": "candidate", "index": int, "of": int, "nfe": int}   nfe = forwards so far (all candidates)
  {"event": "step", "tokens": int, "base": int, "nfe": int}     tokens = cumulative over candidates; the
                                                          current candidate has done tokens - base (any-subset
                                                          and block-diffusion decoders alike)
  {"event": "score", "nfe": int}                         before each oracle pass that scores a line of the
                                                          user's code (retrieval)
  {"event": "done"}
and by `infill fill` (infill.core.fill.run_fill):
  {"event": "write", "path": str}                        just before the result is written to `path`
A callback that raises stops the work there, between two forward passes or before the write (how a server cancels
a request: cancel_check).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

Callback = Callable[[dict[str, Any]], None]


class Cancelled(Exception):
    """The work is no longer wanted (its client went away, or cancelled it): raised from a progress callback, so a
    fill stops between two forward passes, and before any write (infill.docstrings.run), so nothing is written."""


def cancel_check(cancelled: Callable[[], bool], why: str = "the client went away") -> Callback:
    """A progress callback (fill_text's on_progress) that raises Cancelled once `cancelled()` holds."""

    def on_progress(info: dict[str, Any]) -> None:
        if cancelled():
            raise Cancelled(why)

    return on_progress


def interrupt_passes() -> None:
    """Interrupt the work in flight where the engine can, from any thread (it raises Cancelled): ONNX Runtime's and
    llama.cpp's forward pass, a model server's answer awaited (those engines imported already). A server calls this
    when the fill that runs is no longer wanted (superseded, or its client gone)."""
    for name in ("infill.models.onnx", "infill.models.llamacpp", "infill.models.remote_http"):
        engines = sys.modules.get(name)
        if engines is not None:
            engines.interrupt_passes()


@contextmanager
def interrupted_when(gone: Callable[[], bool], every: float = 0.1) -> Iterator[None]:
    """While the block runs, interrupt_passes() once `gone()` holds (looked at every `every` seconds): a server's
    request whose client went away stops what it waits on, which the cancel check between passes cannot reach."""
    import threading

    done = threading.Event()

    def watch() -> None:
        while not done.wait(every):
            if gone():
                interrupt_passes()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()  # it interrupts nothing of the next request


def quiet_libraries() -> None:
    """No progress bars or log chatter from transformers / huggingface_hub / tokenizers, ever."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    import logging

    for name in ("transformers", "huggingface_hub", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)


def is_interactive(stream: TextIO | None = None) -> bool:
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


# A non-interactive stderr gets a progress line every PLAIN_EVERY seconds, once a fill of at least PLAIN_TOKENS
# tokens has taken that long: long runs never go silent, and a quick or small fill prints nothing at all
PLAIN_EVERY = 30.0
PLAIN_TOKENS = 512


@contextmanager
def progress(enabled: bool, description: str = "filling") -> Iterator[Callback | None]:
    """A callback showing progress on stderr, or None if disabled: a rich progress bar (spans, tokens, NFE,
    tokens/s) when stderr is a terminal; otherwise plain lines (no escape codes for pipes, editors and CI), so a
    long fill (a thousand spans) never runs in silence: see PLAIN_EVERY.
    """
    if not enabled:
        yield None
        return
    if not is_interactive():
        yield plain_lines(description)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=sys.stderr)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tokens  {task.fields[info]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=None, info="")
        state: dict[str, Any] = {"spans": 0, "started": time.perf_counter(), "nfe": 0}

        def on_event(event: dict[str, Any]) -> None:
            kind = event.get("event")
            if kind == "load":
                bar.update(task, description=f"loading {event.get('model', 'model')}")
            elif kind == "start":
                state.update(spans=event.get("spans", 0), started=time.perf_counter())
                bar.update(task, description=description, total=event.get("tokens") or None, completed=0)
            elif kind == "candidate":
                state["nfe"] = int(event.get("nfe", state["nfe"]))
                bar.update(task, description=f"{description} ({event['index']}/{event['of']})", completed=0)
            elif kind == "step":
                elapsed = max(time.perf_counter() - state["started"], 1e-9)
                tokens = int(event.get("tokens", 0))
                nfe = int(event.get("nfe", 0)) or state["nfe"]
                info = f"{state['spans']} span(s)  {tokens / elapsed:.1f} tok/s" + (f"  NFE {nfe}" if nfe else "")
                bar.update(task, completed=tokens - event.get("base", 0), info=info)

        yield on_event


def plain_lines(description: str, stream: TextIO | None = None) -> Callback:
    """The non-interactive progress callback: "infill: filling 1000 span(s): 1,320/32,000 tokens, 40 s"."""
    state: dict[str, Any] = {"started": time.monotonic(), "said": time.monotonic(), "spans": 0, "tokens": 0}

    def on_event(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            state.update(spans=event.get("spans", 0), tokens=event.get("tokens", 0))
        if kind != "step":
            return
        now = time.monotonic()
        if now - state["said"] < PLAIN_EVERY or state["tokens"] < PLAIN_TOKENS:
            return
        state["said"] = now
        done = int(event.get("tokens", 0)) - int(event.get("base", 0))
        line = (
            f"infill: {description} {state['spans']} span(s): {done:,}/{state['tokens']:,} tokens, "
            f"{now - state['started']:.0f} s"
        )
        print(line, file=stream if stream is not None else sys.stderr, flush=True)

    return on_event


Write = Callable[[str, bool], None]  # (text with its line breaks, to stderr?)


class FilesBar:
    """Progress over the files of one run (`infill fill` or `infill docstrings` over several files): `advance()`
    after each file, and `write(text, err)` for the run's output, which goes above the bar while it is shown
    (text written straight to the terminal would land on the bar's line), else to `fallback`."""

    def __init__(self, bar: Any, task: Any, fallback: Write) -> None:
        self.bar, self.task, self.fallback = bar, task, fallback

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)

    def write(self, text: str, err: bool) -> None:
        if self.bar is not None and is_interactive(sys.stderr if err else sys.stdout):
            self.bar.console.out(text, end="", highlight=False)
        else:
            self.fallback(text, err)


@contextmanager
def files_progress(enabled: bool, total: int, fallback: Write, description: str = "files") -> Iterator[FilesBar]:
    """One rich bar counting finished files on stderr (when asked for AND stderr is a terminal), whether the
    files are done here or by worker processes (`--jobs`)."""
    if not (enabled and is_interactive()):
        yield FilesBar(None, None, fallback)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
        yield FilesBar(bar, bar.add_task(description, total=total), fallback)
