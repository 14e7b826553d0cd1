"""Several files at once (`infill fill --jobs N`, `infill docstrings --jobs N`): N worker processes, one thread
each, each loading the model once (on its first file; models are cached per process), and the results handed
back in the order of the files, so that the output is the one a serial run prints.

Workers are spawned (a fresh interpreter, not a fork of one that may hold torch's thread pools). A file's work is
done entirely in its worker, writes included, through the same functions a serial run calls. This module imports
neither torch nor Click.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from infill.errors import InfillError

T = TypeVar("T")
R = TypeVar("R")


class WorkerError(InfillError):
    """A worker process ended before it finished its files (killed, out of memory): exit 123."""


def in_order(
    work: Callable[[T], R],
    items: Sequence[T],
    jobs: int,
    *,
    setup: Callable[..., None] | None = None,
    setup_args: tuple[Any, ...] = (),
    done: Callable[[], None] | None = None,
) -> Iterator[R]:
    """`work(item)` for each item in min(jobs, len(items)) worker processes, yielded in the order of `items`
    (each as soon as it and those before it are finished). `work` and `setup` are module-level functions (they
    travel to the workers by name); `setup(*setup_args)` runs once in each worker before its first item.
    `done()` is called in this process as each item finishes, in any order (a progress bar)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    workers = max(1, min(jobs, len(items)))
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start, initargs=(setup, setup_args))
    try:
        futures = [pool.submit(work, item) for item in items]
        if done is not None:
            for future in futures:
                future.add_done_callback(lambda _: done())
        for future in futures:
            try:
                yield future.result()
            except BrokenProcessPool as exc:
                raise WorkerError(f"a worker process ended unexpectedly (killed?): {exc}") from None
    finally:  # also when the caller stops early: no work is left running
        pool.shutdown(wait=True, cancel_futures=True)


def _start(setup: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
    """A worker's start: one thread (unless $INFILL_THREADS says otherwise), then the caller's setup."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    if setup is not None:
        setup(*args)
