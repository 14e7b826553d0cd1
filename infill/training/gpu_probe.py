"""The GPU job's batch probe (infill.training.gpu_job): how many sequences one AS-ARM training step takes on the
lent GPU, measured there rather than assumed, and where a step's time goes.

A step of this small model costs about the same whether it trains 64 or 256 sequences when the GPU waits for
the Python that launches its kernels, and four times as much when the GPU's own work binds; which one holds on a
given GPU is measured, not guessed: a few steps at each batch of `Plan.batch_sizes` (the full model, the real
data, the optimizer), stopping at the first that runs out of memory or takes more than `Plan.memory_share` of
it. The job then trains at the smallest batch
whose positions per second are within `NEAR_BEST` of the best (a larger batch takes fewer steps for the same
data), with the learning rate scaled by the square root of the batch ratio and the warm-up kept in positions.
The probe's last batch is also profiled, and the table of its heaviest operators comes back in the job's logs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infill.training.gpu_plan import Plan, Report, Shape, say

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


def schedule_for(plan: Plan, batch: int) -> tuple[float, int]:
    """Learning rate and warm-up steps at `batch` sequences, from the plan's (`Plan.schedule`, given at
    `Plan.batch_size`): the rate grows with the square root of the batch ratio, the warm-up keeps its positions."""
    lr, warmup = plan.schedule()
    ratio = batch / plan.batch_size
    return lr * math.sqrt(ratio), max(1, round(warmup / ratio))


def choose(plan: Plan, measured: dict[int, float], limit: str = "") -> Choice:
    """The batch of `measured` (batch -> positions per second) to train at: the smallest within NEAR_BEST of
    the best; the plan's own batch when nothing was measured."""
    if not measured:
        lr, warmup = schedule_for(plan, plan.batch_size)
        return Choice(plan.batch_size, lr, warmup, {}, f"batch {plan.batch_size} (nothing measured{limit})")
    best = max(measured.values())
    batch = min(b for b, speed in measured.items() if speed >= NEAR_BEST * best)
    lr, warmup = schedule_for(plan, batch)
    speeds = ", ".join(f"{b}: {s:,.0f}" for b, s in sorted(measured.items()))
    note = f"batch {batch} x {plan.seq_len} (positions/s by batch {speeds}{limit}); lr {lr:.2e}, warm-up {warmup} steps"
    return Choice(batch, lr, warmup, measured, note)


def probe(plan: Plan, pack: Path, tokenizer_json: Path, shape: Shape, report: Report) -> Choice:
    """Time training steps of the AS-ARM of `shape` at each batch of `plan.batch_sizes` on `plan.device`; write
    the profile of the last batch measured to `plan.work/logs/profile.txt`. The GPU's memory is given back
    before the trainers start."""
    import gc

    import torch

    measured, limit = _measure(plan, pack, tokenizer_json, shape, report)
    gc.collect()
    if plan.device == "cuda":
        torch.cuda.empty_cache()
    choice = choose(plan, measured, limit)
    report.facts["batch probe"] = choice.note
    return choice


def _measure(
    plan: Plan, pack: Path, tokenizer_json: Path, shape: Shape, report: Report
) -> tuple[dict[int, float], str]:
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
    model = build_model(model_shape, plan.seq_len).to(device).train()
    opt = adamw(model, 1e-4, 0.01, (0.9, 0.98))
    sampler = LayoutSampler(token_strings(tok), line_break_ids(tok), np.random.default_rng(plan.seed))

    def step(batch: dict[str, Any]) -> None:
        count = int((batch["labels"] >= 0).sum())
        loss = target_nll(model, batch, cuda).sum() / max(count, 1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    measured: dict[int, float] = {}
    limit = ""
    last: list[dict[str, Any]] = []
    for size in plan.batch_sizes:
        batches = Batches(stream, sampler, plan.seq_len, size)
        data = [{k: v.to(device) for k, v in batches.next().items()} for _ in range(TIMED_STEPS + 1)]
        try:
            step(data[0])
            sync()
            t0 = time.perf_counter()
            for batch in data[1:]:
                step(batch)
            sync()
        except torch.OutOfMemoryError:
            limit = f"; {size}: out of memory"
            break
        speed = size * plan.seq_len * TIMED_STEPS / (time.perf_counter() - t0)
        if cuda:  # the trainer needs room beside the step (held-out batches; the other trainer with --job both)
            peak, total = torch.cuda.max_memory_allocated(), torch.cuda.get_device_properties(0).total_memory
            torch.cuda.reset_peak_memory_stats()
            if peak > plan.memory_share * total:
                limit = f"; {size}: {peak / 2**30:.0f} GiB, over {plan.memory_share:.0%} of the GPU's memory"
                break
        measured[size] = speed
        say(f"probe: batch {size}: {measured[size]:,.0f} positions/s")
        last = data[1:]
    if last:
        try:  # a summary for the next loan's work on the step; the job goes on without it
            _profile(step, last[:PROFILED_STEPS], cuda, plan.work / "logs" / "profile.txt")
        except Exception as exc:
            report.facts["profile"] = f"failed: {type(exc).__name__}: {exc}"
    return measured, limit


def _profile(step: Any, batches: list[dict[str, Any]], cuda: bool, out: Path) -> None:
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
