"""The GPU job's batch probe (infill.training.gpu_job): how many sequences one training step of each trainer
takes on the lent GPU, measured there rather than assumed, and where a step's time goes.

A step of these small models costs about the same whether it trains 64 or 256 sequences when the GPU waits for
the Python that launches its kernels, and four times as much when the GPU's own work binds; which one holds on a
given GPU is measured, not guessed: a few steps at each batch of `Plan.batch_sizes` (the full model, the real
data, the optimizer), stopping at the first that runs out of memory or takes more than the trainer's share of
it, or once `Plan.probe_s` seconds are spent. The job then trains at the smallest batch whose positions per
second are within `NEAR_BEST` of the best (a larger batch takes fewer steps for the same data), with the
learning rate scaled by the square root of the batch ratio and the warm-up kept in positions. The last batch
measured is also profiled, and the table of its heaviest operators comes back in the job's logs.

The AS-ARM trainer draws its batches in worker processes, so its probe times the steps on batches drawn
beforehand; the block-diffusion trainer draws each batch in its own process, so its probe times that too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from infill.training.gpu_plan import BD, Plan, Report, Shape, Trainer, say

NEAR_BEST = 0.9  # a smaller batch within this share of the best positions per second is chosen
TIMED_STEPS = 3  # after one untimed step (allocations, kernel selection)
PROFILED_STEPS = 2


@dataclass(frozen=True)
class Choice:
    batch_size: int
    lr: float
    warmup: int  # steps
    measured: dict[int, float]  # batch -> positions per second ("oom": absent)
    note: str


def schedule_for(trainer: Trainer, batch: int) -> tuple[float, int]:
    """Learning rate and warm-up steps at `batch` sequences, from the trainer's (given at its `batch_size`): the
    rate grows with the square root of the batch ratio, the warm-up keeps its positions."""
    ratio = batch / trainer.batch_size
    return trainer.lr * math.sqrt(ratio), max(1, round(trainer.warmup / ratio))


def choose(trainer: Trainer, measured: dict[int, float], limit: str = "") -> Choice:
    """The batch of `measured` (batch -> positions per second) to train at: the smallest within NEAR_BEST of
    the best; the trainer's own batch when nothing was measured."""
    if not measured:
        lr, warmup = schedule_for(trainer, trainer.batch_size)
        return Choice(trainer.batch_size, lr, warmup, {}, f"batch {trainer.batch_size} (nothing measured{limit})")
    best = max(measured.values())
    batch = min(b for b, speed in measured.items() if speed >= NEAR_BEST * best)
    lr, warmup = schedule_for(trainer, batch)
    speeds = ", ".join(f"{b}: {s:,.0f}" for b, s in sorted(measured.items()))
    note = (
        f"batch {batch} x {trainer.seq_len} (positions/s by batch {speeds}{limit}); lr {lr:.2e}, warm-up {warmup} steps"
    )
    return Choice(batch, lr, warmup, measured, note)


Step = Callable[[Any], None]  # one training step on what a batch maker made


def probe(plan: Plan, name: str, pack: Path, tokenizer_json: Path, shape: Shape | None, report: Report) -> Choice:
    """Time training steps of trainer `name` ("asarm", of `shape`; "blockdiff") at each batch of its
    `batch_sizes` on `plan.device`, and choose the batch to train at; the profile of the last batch measured goes
    to `plan.work/logs/profile-NAME.txt`. The GPU's memory is given back before the trainers start."""
    import gc

    import torch

    trainer = plan.trainer(name)
    if name == "asarm":
        assert shape is not None
        make, step = _asarm(plan, trainer, pack, tokenizer_json, shape)
    else:
        make, step = _blockdiff(plan, trainer, pack, tokenizer_json)
    measured, limit = _measure(plan, trainer, make, step, report)
    del make, step
    gc.collect()
    if plan.device == "cuda":
        torch.cuda.empty_cache()
    choice = choose(trainer, measured, limit)
    report.facts[f"batch probe, {name}"] = choice.note
    return choice


def _asarm(
    plan: Plan, trainer: Trainer, pack: Path, tokenizer_json: Path, shape: Shape
) -> tuple[Callable[[int], Any], Step]:
    """A fresh AS-ARM of `shape` and its optimizer; batches drawn ahead on the device (the trainer's workers
    draw them while the GPU trains)."""
    import numpy as np
    import torch

    from infill.training.layouts import Batches, LayoutSampler, line_break_ids, token_strings
    from infill.training.objective import ModelShape, build_model, target_nll
    from infill.training.optimizer import adamw
    from infill.training.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer_json)
    stream = np.load(pack)["train"]
    device = torch.device(plan.device)
    cuda = device.type == "cuda"
    model_shape = ModelShape(d_model=shape.d_model, n_layer=shape.layers, n_head=shape.heads, d_inner=shape.d_inner)
    model = build_model(model_shape, trainer.seq_len).to(device).train()
    opt = adamw(model, 1e-4, 0.01, (0.9, 0.98))
    sampler = LayoutSampler(token_strings(tok), line_break_ids(tok), np.random.default_rng(plan.seed))

    def make(size: int) -> Any:
        batch = Batches(stream, sampler, trainer.seq_len, size).next()
        return {k: v.to(device) for k, v in batch.items()}

    def step(batch: dict[str, Any]) -> None:
        count = int((batch["labels"] >= 0).sum())
        loss = target_nll(model, batch, cuda).sum() / max(count, 1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return make, step


def _blockdiff(plan: Plan, trainer: Trainer, pack: Path, tokenizer_json: Path) -> tuple[Callable[[int], Any], Step]:
    """The block-diffusion trainer's own task (the model the job trains, from the shipped folder; a fresh tiny
    one in the rehearsal) and its step, which draws its batch."""
    from infill.models.blockdiff_folder import ModelShape
    from infill.training.blockdiff import BlockDiffTask, TrainConfig
    from infill.training.distributed import World
    from infill.training.gpu_data import WEIGHTS

    cfg = TrainConfig(
        seq_len=trainer.seq_len, block_sizes=BD.block_sizes, loss_on=BD.loss_on, line_rate=BD.line_rate,
        fim_rate=BD.fim_rate, max_middle=BD.max_middle, device=plan.device, bf16=plan.device == "cuda",
        seed=plan.seed,
    )  # fmt: skip
    small = dict(BD.smoke_shape)
    shape = ModelShape(
        hidden=small["hidden"], layers=small["layers"], heads=small["heads"], kv_heads=small["kv_heads"],
        head_dim=small["hidden"] // small["heads"], intermediate=3 * small["hidden"], max_length=512,
    )  # fmt: skip
    init = None if plan.smoke else WEIGHTS / "blockdiff"
    task = BlockDiffTask.build(
        [], plan.work / "blockdiff-probe", cfg, pack, shape, tokenizer_json, 8192, init, World(), lambda _: None
    )
    task.resume(None)

    def step(size: int) -> None:
        task.cfg = replace(cfg, batch_size=size)
        task.step(task.done + 1)

    return (lambda size: size), step


def _measure(
    plan: Plan, trainer: Trainer, make: Callable[[int], Any], step: Step, report: Report
) -> tuple[dict[int, float], str]:
    import torch

    cuda = plan.device == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    measured: dict[int, float] = {}
    limit = ""
    last: list[Any] = []
    started = time.perf_counter()
    for size in trainer.batch_sizes:
        if measured and time.perf_counter() - started > plan.probe_s:
            limit = f"; {size}: not measured, the probe's {plan.probe_s:.0f}s were spent"
            break
        try:
            data = [make(size) for _ in range(TIMED_STEPS + 1)]
            step(data[0])
            sync()
            t0 = time.perf_counter()
            for batch in data[1:]:
                step(batch)
            sync()
        except torch.OutOfMemoryError:
            limit = f"; {size}: out of memory"
            break
        speed = size * trainer.seq_len * TIMED_STEPS / (time.perf_counter() - t0)
        if cuda:  # the trainer needs room beside the step (held-out batches; the other trainer with --job both)
            peak, total = torch.cuda.max_memory_allocated(), torch.cuda.get_device_properties(0).total_memory
            torch.cuda.reset_peak_memory_stats()
            if peak > trainer.memory_share * total:
                limit = f"; {size}: {peak / 2**30:.0f} GiB, over {trainer.memory_share:.0%} of the GPU's memory"
                break
        measured[size] = speed
        say(f"probe, {trainer.name}: batch {size}: {measured[size]:,.0f} positions/s")
        last = data[1:]
    if last:
        try:  # a summary for the next loan's work on the step; the job goes on without it
            _profile(step, last[:PROFILED_STEPS], cuda, plan.work / "logs" / f"profile-{trainer.name}.txt")
        except Exception as exc:
            report.facts[f"profile, {trainer.name}"] = f"failed: {type(exc).__name__}: {exc}"
    return measured, limit


def _profile(step: Step, batches: list[Any], cuda: bool, out: Path) -> None:
    """The operators of a few steps, heaviest first (on a GPU: by their time on the device)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for batch in batches:
            step(batch)
        if cuda:
            import torch

            torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_device_time_total" if cuda else "self_cpu_time_total", row_limit=40)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"{len(batches)} training steps\n{table}\n", encoding="utf-8")
