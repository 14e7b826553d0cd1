"""Exact any-subset sequential decoding: one forward pass per masked token, left to right (Eq. 4).

Each step drafts the single next position; with one target the draft mask equals the oracle mask, so every
token is drawn from q(x_n | prompt, x_{<n}) and the fill follows the model's joint by the chain rule.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from infill.decoding.problem import StepCallback, check_problem, ends_span, force_pads, pads_enabled
from infill.decoding.sampling import check_sampling, probs, sample
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
    check_problem(model, problem)
    check_sampling(cfg)
    start = time.perf_counter()
    stats = DecodeStats(decoder="sequential")
    ids = problem.ids.detach().to("cpu").clone()  # (N,)
    masked = problem.masked.detach().to("cpu")  # (M,)
    M = masked.shape[0]
    pads = pads_enabled(model, problem)
    n = 0
    while n < M:
        logits = model.draft(ids, masked, n, masked[n : n + 1])  # (1, V)
        stats.nfe += 1
        x = int(sample(probs(logits, cfg.temperature, cfg.top_k, cfg.top_p), generator)[0])
        ids[masked[n]] = x
        before = n
        n += 1
        if pads and ends_span(model, problem, ids, n - 1, x):
            n = force_pads(ids, model, problem, n - 1)
        stats.accepted.append(n - before)
        if on_step is not None:
            on_step(n, M)
    stats.tokens = M
    stats.seconds = time.perf_counter() - start
    return ids[masked], stats
