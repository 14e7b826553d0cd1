"""Training on several processes or machines with torchrun: the one module of the trainers that knows about
torch.distributed (docs/training.md, "Several GPUs and machines").

`infill train asarm | block-diffusion | ptp | ssmd` run unchanged under `torchrun`; each takes a `World`:

- `joined(device)` reads what torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK). Without it the world is one process
  and nothing here touches torch.distributed: training is exactly what it was. With it, the process group
  starts (gloo on CPU, NCCL on CUDA) with a timeout ($INFILL_DIST_TIMEOUT seconds), so a rank that dies or stops
  answering ends the run with one clear error instead of a hang.
- The batch is global: a command's --batch-size is the batch of one optimizer step over all processes. Every
  rank draws the same global batch from the same seeded generators and trains on its slice of it (`part`); the
  loss is this rank's share of the loss averaged over the global batch (`share`), and DistributedDataParallel
  (`data_parallel`) averages the gradients. So N processes with B/N examples each take the optimizer steps one
  process with B takes, to float rounding, the learning-rate schedule needs no change, and a checkpoint written
  with one world size resumes with another.
- Rank 0 alone writes logs, checkpoints and exports (`main`); `barrier` lets the others wait for it.
- What can differ between processes is agreed on once per step: the training clock (`max`: the slowest rank's),
  a stop request (`any`: a signal, --until) and the logged loss (`sum`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from infill.errors import InfillError, InputError, one_line

if TYPE_CHECKING:
    import torch

T = TypeVar("T")

TIMEOUT_ENV = "INFILL_DIST_TIMEOUT"  # default 600 s (infill.environment): longer than rank 0's held-out
# evaluation and checkpoint, while the others wait


class DistributedError(InfillError):
    """A process of a distributed run failed or stopped answering: this one cannot go on (exit 123)."""


@dataclass(frozen=True)
class World:
    """This process's place in the run: rank (0 .. size-1), size (processes over all machines), local rank (its
    GPU on this machine). `World()` is a run of one process."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: str = "cpu"  # where the collectives' tensors live: "cuda" with NCCL

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, device: str = "cpu") -> World:
        """The world torchrun describes in the environment; one process when it is not set."""
        env = os.environ if environ is None else environ
        try:
            size, rank = int(env.get("WORLD_SIZE", "1")), int(env.get("RANK", "0"))
            local = int(env.get("LOCAL_RANK", "0"))
        except ValueError as exc:
            raise InputError(f"WORLD_SIZE, RANK and LOCAL_RANK must be integers ({exc})") from None
        if size < 1 or not 0 <= rank < size or local < 0:
            raise InputError(f"RANK {rank} is not a rank of WORLD_SIZE {size}")
        return cls(rank, size, local, device)

    @property
    def main(self) -> bool:
        """Whether this process writes logs, checkpoints and exports (rank 0)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def logger(self, log: Callable[[str], None]) -> Callable[[str], None]:
        """`log` on rank 0; on the other processes a log that drops its lines."""
        return log if self.main else _drop

    def check_batch(self, batch: int, flag: str = "--batch-size") -> int:
        """The per-process share of the global batch `batch`; InputError when it does not split evenly."""
        if batch % self.size:
            raise InputError(
                f"{flag} {batch} is the global batch of one step; it does not split evenly over "
                f"{self.size} processes (give a multiple of {self.size})"
            )
        return batch // self.size

    def part(self, batch: int) -> slice:
        """This rank's examples of a global batch of `batch`: the whole batch in a run of one process."""
        share = self.check_batch(batch)
        return slice(self.rank * share, (self.rank + 1) * share)

    def share(self, mean: torch.Tensor, count: float, total: float) -> torch.Tensor:
        """This rank's share of the global batch's loss: `mean` is its loss averaged over its `count` targets,
        `total` the targets of the whole global batch. DistributedDataParallel averages the gradients of the
        shares over the processes, which is the gradient of the loss averaged over all `total` targets.
        `mean` itself in a run of one process."""
        if not self.distributed:
            return mean
        return mean * (count * self.size / max(total, 1))

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        module: torch.nn.Module,
        loss: tuple[torch.Tensor, float, float],
        clip: float = 1.0,
    ) -> None:
        """One optimizer step on this rank's share of the global batch's loss (`share` of `loss`: its mean over
        this rank's targets, their count, the global batch's), with the gradients of `module`'s parameters clipped
        to norm `clip` first."""
        import torch

        optimizer.zero_grad(set_to_none=True)
        self.share(*loss).backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
        optimizer.step()

    def average(self, count: float, *means: float) -> tuple[float, tuple[float, ...]]:
        """(total count, means over all processes) of `means` averaged over this rank's `count` items (for the
        logs); `(count, means)` unchanged in a run of one process."""
        if not self.distributed:
            return count, means
        total, *sums = self.sum(count, *(mean * count for mean in means))
        return total, tuple(s / total if total else 0.0 for s in sums)

    def data_parallel(self, module: torch.nn.Module, loss: Callable[..., T]) -> Callable[..., T]:
        """`loss` (a function of the batch that runs `module`, the trained parameters) computed through
        DistributedDataParallel, which averages the gradients over the processes during backward; `loss` itself
        in a run of one process. Parameters may get no gradient in a step (XLNet's segment parameters never do,
        a PTP adapter's u embedding does not when no slot group of this rank has u): find_unused_parameters."""
        if not self.distributed:
            return loss
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.local_rank] if self.device == "cuda" else None
        return DistributedDataParallel(_loss_module(module, loss), device_ids=ids, find_unused_parameters=True)

    def max(self, *values: float) -> tuple[float, ...]:
        """The largest of each value over the processes (the slowest rank's clock)."""
        return self._reduce(values, "max")

    def sum(self, *values: float) -> tuple[float, ...]:
        """The sum of each value over the processes."""
        return self._reduce(values, "sum")

    def any(self, flag: bool) -> bool:
        """Whether any process raised `flag` (a stop request)."""
        return bool(self.max(float(flag))[0])

    def same(self, value: float, what: str) -> None:
        """DistributedError unless every process holds the same `value` (e.g. the step of the checkpoint it
        resumed from: a run directory that not every machine sees would start them from different states)."""
        if not self.distributed:
            return
        high, low = self.max(float(value), -float(value))
        if high != -low:
            raise DistributedError(
                f"the processes disagree on {what} ({-low:g} to {high:g}): give every process the same flags, "
                "and a run directory on a filesystem that every machine sees"
            )

    def barrier(self) -> None:
        """Wait until every process gets here (e.g. for rank 0's files)."""
        if self.distributed:
            import torch.distributed as dist

            _collective(self, dist.barrier)

    def _reduce(self, values: tuple[float, ...], op: str) -> tuple[float, ...]:
        if not self.distributed:
            return values
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        _collective(self, lambda: dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM))
        return tuple(float(v) for v in tensor.cpu())


def _drop(line: str) -> None:
    """The log of the processes other than rank 0."""


def _loss_module(module: torch.nn.Module, loss: Callable[..., Any]) -> torch.nn.Module:
    """`module` (the trained parameters) in a module whose forward is the trainer's loss function, for
    DistributedDataParallel (it hooks its gradient exchange into the forward it wraps)."""
    import torch

    class Loss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.trained = module

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return loss(*args, **kwargs)

    return Loss()


def timeout_seconds(environ: Mapping[str, str] | None = None) -> float:
    """How long a process waits for the others in one collective before the run fails ($INFILL_DIST_TIMEOUT;
    InputError for a value that is not a positive number of seconds)."""
    from infill import environment

    value = environment.read(TIMEOUT_ENV, environ)
    return float(environment.BY_NAME[TIMEOUT_ENV].default if value is None else value)


_TRANSPORT = (
    "gloo",
    "nccl",
    "connection closed",
    "connection reset",
    "timed out",
    "timeout",  # gloo: "Application timeout caused pair closure"
    "pair closure",
    "broken pipe",
    "process group",
)


def _lost(exc: BaseException) -> bool:
    """Whether `exc` says another process of the run is gone (closed connection, collective timeout)."""
    import torch.distributed as dist

    return isinstance(exc, dist.DistError) or (
        isinstance(exc, RuntimeError) and any(s in str(exc).lower() for s in _TRANSPORT)
    )


def _failure(world: World, exc: BaseException) -> DistributedError:
    detail = re.sub(r"^\[[^\]]*\]\s*", "", one_line(str(exc))).split(". ")[0]  # gloo: "[file.cc:537] What. Hints."
    return DistributedError(
        f"rank {world.rank} of {world.size}: another process of the run crashed, was killed or did not answer "
        f"within {timeout_seconds():g} s (${TIMEOUT_ENV}): {detail}; run the same command again to resume from "
        "the last checkpoint"
    )


def _collective(world: World, call: Callable[[], Any]) -> None:
    try:
        call()
    except Exception as exc:
        if _lost(exc):
            raise _failure(world, exc) from exc
        raise


@contextmanager
def joined(device: str = "cpu") -> Iterator[World]:
    """The world of this process, with its process group started (and ended at exit) when torchrun started
    several. A lost process, seen in a collective or in the gradient exchange of backward, becomes one
    DistributedError."""
    world = World.from_env(device=device)
    if not world.distributed:
        yield world
        return
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    timeout = timeout_seconds()
    if device == "cuda":
        torch.cuda.set_device(world.local_rank)
    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    try:
        dist.init_process_group("nccl" if device == "cuda" else "gloo", timeout=timedelta(seconds=timeout))
    except (RuntimeError, ValueError) as exc:
        raise DistributedError(
            f"rank {world.rank}: cannot join the process group at {where} ({one_line(str(exc))})"
        ) from exc
    failed = False
    try:
        yield world
    except Exception as exc:
        failed = True
        if _lost(exc) and not isinstance(exc, InfillError):
            raise _failure(world, exc) from exc
        raise
    finally:
        if not failed:
            _leave(dist)


def _leave(dist: Any) -> None:
    """End the process group on a run that went well: free what still holds gloo's work (the DDP wrapper and its
    reducer, in reference cycles) while the interpreter is whole, wait until every process is done talking, then
    destroy the group. Destroyed with work in flight, or left to the interpreter's teardown, gloo's threads can
    end a finished run with 'terminate called without an active exception' (SIGABRT, seen on a loaded machine)."""
    import gc

    gc.collect()
    with contextlib.suppress(RuntimeError):  # a peer already gone: nothing left to wait for
        dist.barrier()
    dist.destroy_process_group()
