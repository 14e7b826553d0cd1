"""Speculative decoding with prompt-lookup drafts: code repeats itself, so copy, then verify exactly.

At decoded count n, the tokens just before the next masked position are looked up in the visible sequence
(the prompt on both sides of the gap, and the tokens decoded so far); where they occurred before, the tokens
that followed them there are the draft d_1..d_L (the longest match wins, the nearest on ties). The draft is
deterministic: p = one-hot(d_i). One verify pass with the drafts written in gives
q_i = q(. | prompt, x_{<n}, d_{<i}) at masked[n..n+L] (one more row than drafts: a bonus position). Left to right,
d_i is accepted with probability min(1, q_i(d_i) / p_i(d_i)) = q_i(d_i); at the first rejection a token is drawn
from (q_i - p_i)+ normalised, i.e. q_i without d_i; if all L are accepted the bonus token is drawn from
q_{L+1} itself. That is speculative sampling with a point-mass draft, so every token follows the model's
conditionals exactly (Theorem 2 of the ASSD paper's argument: each accepted-or-resampled token is distributed
as q given the tokens before it), and every pass yields at least one token.

Without a match there is nothing to verify: the step is a plain sequential step (one draft pass, one target,
which is exact). The draft length adapts: it doubles (up to cfg.k) after a fully accepted draft and falls to
what was accepted plus one after a rejection, so a run of bad guesses costs little.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from infill.config import AssdOptions, options_of
from infill.decoding.problem import LeftToRight, StepCallback
from infill.decoding.sampling import probs, residual, sample, uniform
from infill.decoding.stats import DecodeStats

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.models.base import AnySubsetModel, FillProblem

MIN_MATCH = 1  # tokens of context that must match before a continuation is copied
MAX_MATCH = 8


def lookup(tokens: list[int], visible: list[bool], pos: int, length: int) -> list[int]:
    """Up to `length` tokens that followed the longest earlier (or later) occurrence of tokens[pos-m:pos],
    m = MAX_MATCH .. MIN_MATCH, elsewhere in the visible sequence; [] if none. tokens[:pos] are all visible."""
    N = len(tokens)
    for m in range(min(MAX_MATCH, pos), MIN_MATCH - 1, -1):
        key = tokens[pos - m : pos]
        best: list[int] = []
        best_dist = N + 1
        for j in range(0, N - m):
            if j == pos - m or tokens[j : j + m] != key or not all(visible[j : j + m]):
                continue
            out = []
            for t in range(j + m, min(N, j + m + length)):
                if not visible[t]:
                    break
                out.append(tokens[t])
            if out and (len(out) > len(best) or (len(out) == len(best) and abs(j - pos) < best_dist)):
                best, best_dist = out, abs(j - pos)
        if best:
            return best
    return []


def lookup_decode(
    model: AnySubsetModel,
    problem: FillProblem,
    cfg: DecodeConfig,
    generator: torch.Generator,
    on_step: StepCallback | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Fill `problem.masked` with prompt-lookup drafts verified against the model (cfg.k = longest draft)."""
    import torch

    opts = options_of(AssdOptions, replace(cfg, draft="lookup"))
    stats = DecodeStats(decoder="lookup", extra={"k": opts.k, "drafted": 0, "rejections": 0, "sequential_steps": 0})
    if opts.epsilon > 0:
        stats.extra["lossy_epsilon"] = opts.epsilon  # accept if r < q(d) + epsilon: NOT exact
    run = LeftToRight.begin(model, problem, cfg, stats, on_step)
    ids, masked, M = run.ids, run.masked, run.total  # (N,), (M,)
    visible = torch.ones_like(ids, dtype=torch.bool)  # (N,)
    visible[masked] = False
    window = min(4, opts.k)
    n = 0
    while n < M:
        pos = int(masked[n])
        room = 0  # masked positions right after each other from n on: drafts are copied into a contiguous run
        while n + room < M and int(masked[n + room]) == pos + room and room < window:
            room += 1
        drafts = lookup(ids.tolist(), visible.tolist(), pos, room) if room > 1 else []
        drafts = drafts[: room - 1]  # keep a row for the bonus token
        if not drafts:  # a plain sequential step
            q = probs(model.draft(ids, masked, n, masked[n : n + 1]), cfg.temperature, cfg.top_k, cfg.top_p)
            stats.nfe += 1
            stats.extra["sequential_steps"] += 1
            ids[masked[n]] = int(sample(q, generator)[0])
            new_n = n + 1
        else:
            L = len(drafts)
            targets = masked[n : n + L + 1]  # (L+1,) the drafts' positions and the bonus position
            ids[targets[:L]] = torch.tensor(drafts)
            q = probs(model.verify(ids, masked, n, targets), cfg.temperature, cfg.top_k, cfg.top_p)  # (L+1, V)
            stats.nfe += 1
            stats.extra["drafted"] += L
            a = 0
            while a < L and uniform(generator) < float(q[a, drafts[a]]) + opts.epsilon:  # w.p. q(d) / p(d), p(d) = 1
                a += 1
            if a < L:  # resample from (q - p)+: q without the rejected draft
                point = torch.zeros_like(q[a])
                point[drafts[a]] = 1.0
                ids[targets[a]] = int(sample(residual(q[a], point)[None, :], generator)[0])
                stats.extra["rejections"] += 1
                window = max(2, a + 1)
            else:  # all accepted: the bonus token from q given every draft
                ids[targets[L]] = int(sample(q[L : L + 1], generator)[0])
                window = min(opts.k, 2 * window)
            new_n = n + a + 1
        n = run.settle(model, problem, n, new_n, visible)
    return run.result()
