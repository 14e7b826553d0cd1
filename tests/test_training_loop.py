"""The one training loop (infill.training.loop) with a scripted task: when it steps, logs, evaluates and saves,
what stops it, and that a process other than rank 0 evaluates and writes nothing (the trainers' own two-process
runs are tests/test_training_distributed.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from infill.training.loop import Schedule, cosine_lr, finish, train_loop


@dataclass
class FakeWorld:
    """The parts of infill.training.distributed.World the loop uses, for one process of `size`."""

    main: bool = True
    barriers: int = 0

    def max(self, *values: float) -> list[float]:
        return list(values)

    def barrier(self) -> None:
        self.barriers += 1


class FakeOptimizer:
    def __init__(self) -> None:
        self.param_groups: list[dict[str, Any]] = [{"lr": 0.0}]


@dataclass
class Task:
    """Records what the loop asks of it; each step costs `step_seconds` of its training clock."""

    step_seconds: float = 1.0
    optimizer: FakeOptimizer = field(default_factory=FakeOptimizer)
    clock: float = 0.0
    events: list[tuple[str, int]] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)

    def seconds(self) -> float:
        return self.clock

    def lr(self, step: int) -> float:
        return 0.1 * step

    def step(self, step: int) -> None:
        self.rates.append(self.optimizer.param_groups[0]["lr"])
        self.clock += self.step_seconds
        self.events.append(("step", step))

    def log_step(self, step: int, lr: float) -> None:
        self.events.append(("log", step))

    def evaluate(self, step: int, final: bool) -> None:
        self.events.append(("final eval" if final else "eval", step))

    def save(self, step: int, final: bool) -> None:
        self.events.append(("final save" if final else "save", step))


def test_steps_log_evaluate_and_save_at_their_cadence() -> None:
    task, logged = Task(), []
    schedule = Schedule(steps=4, log_every=2, eval_every=3, save_every=2)
    outcome = train_loop(task, schedule, FakeWorld(), logged.append, start=0)  # type: ignore[arg-type]
    assert outcome.step == 4 and outcome.signal == 0
    assert task.events == [
        ("step", 1),
        ("step", 2), ("log", 2), ("save", 2),
        ("step", 3), ("eval", 3),
        ("step", 4), ("log", 4), ("save", 4),
        ("final eval", 4), ("final save", 4),
    ]  # fmt: skip
    assert task.rates == pytest.approx([0.1, 0.2, 0.3, 0.4])  # each step runs at its own learning rate
    assert logged == []  # the step limit is the plan, not news


def test_a_resumed_run_goes_on_from_its_step_and_a_finished_one_only_saves() -> None:
    task = Task()
    train_loop(task, Schedule(steps=5, log_every=10), FakeWorld(), print, start=3)  # type: ignore[arg-type]
    assert [e for e in task.events if e[0] == "step"] == [("step", 4), ("step", 5)]
    done = Task()
    train_loop(done, Schedule(steps=5, log_every=10), FakeWorld(), print, start=5)  # type: ignore[arg-type]
    assert done.events == [("final eval", 5), ("final save", 5)]


def test_the_time_limit_and_until_stop_the_run_and_say_so() -> None:
    task, logged = Task(step_seconds=10.0), []
    outcome = train_loop(task, Schedule(steps=None, log_every=100, time_limit=25.0), FakeWorld(), logged.append, 0)  # type: ignore[arg-type]
    assert outcome.step == 3 and logged == ["time limit reached after 3 steps"]  # 30 s >= 25 s after step 3
    late, logged = Task(), []
    outcome = train_loop(late, Schedule(steps=100, log_every=100, until=time.time() - 1), FakeWorld(), logged.append, 0)  # type: ignore[arg-type]
    assert outcome.step == 0 and logged == ["--until reached after 0 steps"]
    assert late.events == [("final eval", 0), ("final save", 0)]  # what was trained is saved


def test_a_process_other_than_rank_0_steps_but_neither_evaluates_nor_writes() -> None:
    task, world = Task(), FakeWorld(main=False)
    schedule = Schedule(steps=4, log_every=2, eval_every=2, save_every=1, save_minutes=1e-9)
    train_loop(task, schedule, world, print, start=0)  # type: ignore[arg-type]
    assert [kind for kind, _ in task.events] == ["step", "step", "log", "step", "step", "log"]
    written: list[str] = []
    finish(world, lambda: written.append("export"))  # type: ignore[arg-type]
    assert written == [] and world.barriers == 1
    finish(FakeWorld(), lambda: written.append("export"))  # type: ignore[arg-type]
    assert written == ["export"]


def test_the_schedule_warms_up_then_decays_to_a_tenth() -> None:
    assert cosine_lr(1.0, 10, 5, 0.0) == pytest.approx(0.5)  # half-way through the warm-up
    assert cosine_lr(1.0, 10, 10, 0.0) == pytest.approx(1.0)
    assert cosine_lr(1.0, 10, 20, 0.5) == pytest.approx(0.55)
    assert cosine_lr(1.0, 10, 30, 1.0) == pytest.approx(0.1) == cosine_lr(1.0, 10, 30, 2.0)
