"""Exact any-subset sequential decoding: one forward pass per masked token, left to right (Eq. 4).

Each step drafts the single next position; with one target the draft mask equals the oracle mask, so every
token is drawn from q(x_n | prompt, x_{<n}) and the fill follows the model's joint by the chain rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.decoding.problem import LeftToRight, StepCallback, ends_span, force_pads
from infill.decoding.sampling import sample, transform
from infill.decoding.stats import DecodeStats

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.models.base import AnySubsetModel, FillProblem


def sequential(
    model: AnySubsetModel,
    problem: FillProblem,
    cfg: DecodeConfig,
    generator: torch.Generator,
    on_step: StepCallback | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Fill `problem.masked` one token per forward. Returns (tokens (M,) long, stats)."""
    run = LeftToRight.begin(model, problem, cfg, DecodeStats(decoder="sequential"), on_step)
    ids, masked, stats = run.ids, run.masked, run.stats
    n = 0
    while n < run.total:
        logits = model.draft(ids, masked, n, masked[n : n + 1])  # (1, V)
        stats.nfe += 1
        x = int(sample(transform(logits, cfg), generator)[0])
        ids[masked[n]] = x
        before = n
        n += 1
        if run.pads and ends_span(model, problem, ids, n - 1, x):
            n = force_pads(ids, model, problem, n - 1)
        n = run.advance(before, n)
    return run.result()
