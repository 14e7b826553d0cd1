"""The one training loop every trainer runs (asarm, blockdiff, ptp, ssmd): the steps, the learning rate of each,
the deadlines (a step count, a training-time limit, --until, a stop signal), logging, evaluation and saving at
their cadence, and rank 0 alone evaluating and writing in a distributed run (infill.training.distributed).

What differs between the trainers is a `Task`: the model and its optimizer, how one step draws its batch and
takes its loss, what a log line says, what an evaluation measures and what a save writes. A trainer builds its
task (resuming it from its checkpoint), runs `train_loop(task, schedule, world, log)` and writes what is left
(an export, a head file) through `finish`.

Gradient accumulation over the processes of a run is `World.step` (the loss of one step is this rank's share of
the global batch's mean); a task calls it from `step`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from infill.training.distributed import World


@dataclass(frozen=True)
class Schedule:
    """When the loop stops, logs, evaluates and saves."""

    steps: int | None  # the last step; None: no step limit (a time limit ends the run)
    log_every: int
    eval_every: int = 0  # evaluate (rank 0) every this many steps; 0: only at the end
    save_every: int = 0  # save every this many steps; 0: never by count
    save_minutes: float = 0.0  # save every this many minutes of wall clock; 0: never by the clock
    time_limit: float = 0.0  # training seconds (Task.seconds, across resumes) after which to stop; 0: none
    until: float = 0.0  # unix time at which to stop; 0: none
    log_last: bool = False  # also log at the last step of the step limit
    signals: bool = False  # SIGTERM, SIGINT and SIGUSR1 stop the run after the current step (it saves first)


class Task(Protocol):
    """What differs between the trainers."""

    optimizer: torch.optim.Optimizer

    def seconds(self) -> float:
        """Training seconds so far, across resumes (the clock of the time limit)."""
        ...

    def lr(self, step: int) -> float:
        """The learning rate of `step` (1-based: the step about to run)."""
        ...

    def step(self, step: int) -> None:
        """One optimizer step over the global batch: this process's part of it, the loss, World.step."""
        ...

    def log_step(self, step: int, lr: float) -> None:
        """The log line of the steps since the last one."""
        ...

    def evaluate(self, step: int, final: bool) -> None:
        """Measure on held-out data (rank 0 only; `final` after the last step)."""
        ...

    def save(self, step: int, final: bool) -> None:
        """Write the checkpoint and what else the trainer keeps up to date (rank 0 only; `final` at the end)."""
        ...


def cosine_lr(lr: float, warmup: int, step: int, progress: float) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay to a tenth of `lr` as `progress` goes 0 -> 1."""
    return lr * min(1.0, step / max(warmup, 1)) * (0.5 * (1 + math.cos(math.pi * min(1.0, progress))) * 0.9 + 0.1)


def progress_of(step: int, steps: int, seconds: float, time_limit: float) -> float:
    """How far a run is through its budget: its steps, or its time limit when that is further along."""
    progress = step / steps
    return max(progress, seconds / time_limit) if time_limit else progress


@dataclass
class Outcome:
    """How the loop ended: the last step taken, and the signal that stopped it (0: none; -1: another process's)."""

    step: int
    signal: int = 0


def train_loop(task: Task, schedule: Schedule, world: World, log: Callable[[str], None], start: int) -> Outcome:
    """Run `task` from step `start` until a deadline; save at the cadence and once more at the end (rank 0), with
    a final evaluation before that save. Every process takes the same decisions: the clock and the stop
    requests are agreed on (World.max)."""
    stop: list[int] = []
    step, last_save = start, time.perf_counter()
    with _signals(stop, schedule.signals):
        while not (reason := _deadline(task, schedule, world, step, stop)):
            step += 1
            lr = task.lr(step)
            for group in task.optimizer.param_groups:
                group["lr"] = lr
            task.step(step)
            if step % schedule.log_every == 0 or (schedule.log_last and step == schedule.steps):
                task.log_step(step, lr)
            if schedule.eval_every and step % schedule.eval_every == 0 and world.main:
                task.evaluate(step, final=False)
            if schedule.save_every and step % schedule.save_every == 0 and world.main:
                task.save(step, final=False)
            if schedule.save_minutes and time.perf_counter() - last_save > schedule.save_minutes * 60:
                if world.main:
                    task.save(step, final=False)
                last_save = time.perf_counter()
    if reason not in ("steps", "signal"):
        log(f"{reason} reached after {step} steps")
    if world.main:
        task.evaluate(step, final=True)
        task.save(step, final=True)
    return Outcome(step, (stop[0] if stop else -1) if reason == "signal" else 0)


def restore(path: Path, parts: dict[str, Any], rng: random.Random, gen: torch.Generator) -> dict[str, Any]:
    """Resume from the checkpoint at `path`: each of `parts` (its key in the checkpoint -> a module or optimizer)
    loads its state, and the Python and torch generators theirs ("rng", "gen"). Returns the checkpoint, for what
    else the trainer kept in it."""
    from infill.training.checkpoints import read_checkpoint

    checkpoint = read_checkpoint(path)
    for key, part in parts.items():
        part.load_state_dict(checkpoint[key])
    rng.setstate(checkpoint["rng"])
    gen.set_state(checkpoint["gen"])
    return checkpoint


def finish(world: World, write: Callable[[], Any] | None = None) -> None:
    """After the loop: rank 0 writes what is left (`write`), and every process returns once it has."""
    if write is not None and world.main:
        write()
    world.barrier()


def _deadline(task: Task, schedule: Schedule, world: World, step: int, stop: list[int]) -> str:
    """Why the run stops before `step + 1`, or "" to go on."""
    if schedule.steps is not None and step >= schedule.steps:
        return "steps"
    if schedule.time_limit and world.max(task.seconds())[0] >= schedule.time_limit:
        return "time limit"
    if schedule.signals or schedule.until:
        late = float(bool(schedule.until) and time.time() >= schedule.until)
        signalled, late = world.max(float(bool(stop)), late)
        if signalled:
            return "signal"
        if late:
            return "--until"
    return ""


@contextmanager
def _signals(stop: list[int], enabled: bool) -> Iterator[None]:
    """While the loop runs, a stop signal asks it to stop after the current step (`stop` records it)."""
    if not enabled:
        yield
        return
    import signal

    def request_stop(signum: int, frame: Any) -> None:
        stop.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
