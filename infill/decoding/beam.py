"""Beam search over the AS-ARM's left-to-right order (Eq. 4): the most likely fills, not samples.

Each hypothesis fills masked positions in decoding order; a step scores every live hypothesis's next position
with one draft pass (one target: the exact conditional q(x_n | prompt, x_{<n})), extends each by its
`width` best tokens, and keeps the `width` best extensions by total log-probability. A token that ends its span
(a pad, or a stop token after some text: `problem.ends_span`) pads the rest of the span at no cost, so a
hypothesis's score is the joint log-probability of the fill up to and including the token that ended it, the
same score `infill.api` ranks candidates by. Search stops when no live hypothesis can beat the best finished
one that writes something (log-probabilities only decrease).

A fill that writes nothing (a span ended by a pad before any token outside `problem.blank`) is often the most
likely one for a small model: the end-of-fill token is cheap to predict. A user who asks for a span to be
filled wants text, so a hypothesis that finishes empty takes no place in the beam, the search returns the most
likely fill that writes something into every span (an empty one only when none does), and empty fills are
listed after the others in the n-best list. Likewise a finished fill that `problem.accept` refuses (the caller's
syntax check) does not stop the search: it goes on until no live hypothesis can beat the best accepted fill,
and refused fills are listed after accepted ones.

With token healing (`problem.heal`, infill.decoding.healing) a token that departs from the text the fill must
begin with is never an extension, so the search ranks fills by p(fill | prompt, the fill begins with that text).

One pass per step: a model that drafts several sequences at once (infill.models.base.BatchedDraft: the
left-to-right code models on every engine, and the any-subset XLNet) scores every live hypothesis's next position
in one batched pass, so a fill of T tokens costs about T passes whatever the width (each hypothesis's keys and
values stay in the engine's cache, and a step computes one new row per hypothesis). Other models take one pass per
hypothesis, visited in lexicographic order of their tokens, so consecutive passes share the longest prefix and the
model's prompt cache recomputes only the rows that differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infill.config import BeamOptions, options_of
from infill.decoding.healing import allowed_logits
from infill.decoding.problem import LeftToRight, ends_span, force_pads, is_pad

if TYPE_CHECKING:
    import torch

    from infill.models.base import AnySubsetModel, FillProblem


def beam_search(run: LeftToRight) -> None:
    """The best fill that writes something found with beam width cfg.beam (>= 1; 1 = greedy), written into run.ids.
    stats.extra["nbest"] lists up to `width` finished fills as (log-probability, tokens): fills that write, best
    first, then empty ones. The search is deterministic: run.generator is not drawn from.

    `run`: as for infill.decoding.assd.assd; the best fill's sequence replaces run.ids (N,) long (its tokens at
    run.masked (M,) long); returns nothing. Each step extends every live beam by one position with model.draft of
    one target, (1, V) logits (with one target the draft is the oracle), one pass for all beams where the model
    has draft_many (module docstring); a fill's score is
    the sum of its tokens' untransformed log-probabilities. A finished fill that run.problem.accept refuses does
    not end the search."""
    import torch

    model, problem, stats = run.model, run.problem, run.stats
    width = options_of(BeamOptions, run.cfg).beam
    stats.extra["beam"] = width
    masked = run.masked  # (M,)
    M = run.total
    pads = run.pads
    live: list[tuple[float, torch.Tensor, int]] = [(0.0, run.ids.clone(), 0)]
    finished: list[tuple[float, torch.Tensor]] = []
    verdicts: dict[tuple[int, ...], bool] = {}
    healing = problem.heal

    def good(ids: torch.Tensor) -> bool:
        """A finished fill the search may stop at: it writes something and `problem.accept` takes it."""
        if not _writes(model, problem, ids):
            return False
        if problem.accept is None:
            return True
        key = tuple(ids[masked].tolist())
        if key not in verdicts:
            verdicts[key] = problem.accept(list(key))
        return verdicts[key]

    if M == 0:
        finished.append((0.0, live[0][1]))
        live = []
    batched = getattr(model, "draft_many", None)  # infill.models.base.BatchedDraft
    while live:
        extensions: list[tuple[float, torch.Tensor, int]] = []
        order = sorted(live, key=lambda h: h[1][masked[: h[2]]].tolist())
        for (score, ids, n), logits in zip(order, _next_logits(run, order, batched), strict=True):
            logq = torch.log_softmax(logits.double(), dim=-1)[None]  # (1, V)
            if healing is not None:  # token healing: only tokens that keep to the text the fill must begin with
                logq = allowed_logits(logq, healing, healing.pieces.text(ids[masked[:n]].tolist()))
            logq = logq[0]  # (V,) the model's log-probabilities, not renormalised: the score stays the joint's
            top = torch.topk(logq, min(width, int(torch.isfinite(logq).sum())))
            for lq, x in zip(top.values.tolist(), top.indices.tolist(), strict=True):
                nxt = ids.clone()
                nxt[masked[n]] = x
                m = n + 1
                if pads and ends_span(model, problem, nxt, n, x):
                    m = force_pads(nxt, model, problem, n)
                extensions.append((score + lq, nxt, m))
        extensions.sort(key=lambda h: -h[0])
        live, kept = [], 0
        for score, ids, n in extensions:  # the `width` best, not counting fills that finish empty
            if kept == width:
                break
            if n >= M:
                finished.append((score, ids))
                if not _writes(model, problem, ids):
                    continue
            else:
                live.append((score, ids, n))
            kept += 1
        best = max((s for s, f in finished if good(f)), default=float("-inf"))
        live = [h for h in live if h[0] > best]  # a longer fill only loses probability
    finished.sort(key=lambda h: (not _writes(model, problem, h[1]), not good(h[1]), -h[0]))
    score, run.ids = finished[0]  # stats.accepted stays empty: no token is final before the search ends
    stats.extra["logprob"] = score
    stats.extra["nbest"] = [(s, f[masked].tolist()) for s, f in finished[:width]]  # best first
    stats.extra["refused"] = sum(not ok for ok in verdicts.values())


def _next_logits(run: LeftToRight, live: list[tuple[float, torch.Tensor, int]], batched: Any) -> Iterator[torch.Tensor]:
    """The next position's logits (V,) of each live hypothesis (score, ids (N,), n): all from one pass when the
    model drafts several sequences at once (`batched`, its draft_many), else one draft pass each, yielded as it
    comes (a cancel then stops between passes)."""
    masked, stats, on_step = run.masked, run.stats, run.on_step
    if batched is not None and len(live) > 1:
        before = getattr(run.model, "nfe", None)  # the passes the model counts (one, or one each without a cache)
        rows = batched([ids for _, ids, _ in live], masked, [n for _, _, n in live])  # (B, V)
        after = getattr(run.model, "nfe", None)
        stats.nfe += after - before if isinstance(before, int) and isinstance(after, int) else 1
        if on_step is not None:
            on_step(max(h[2] for h in live), run.total)
        yield from rows
        return
    for _, ids, n in live:
        logits = run.model.draft(ids, masked, n, masked[n : n + 1])  # (1, V)
        stats.nfe += 1
        if on_step is not None:  # after every pass, not every step of `width` passes: a cancel stops sooner
            on_step(max(h[2] for h in live), run.total)
        yield logits[0]


def _writes(model: AnySubsetModel, problem: FillProblem, ids: torch.Tensor) -> bool:
    """Whether the finished fill `ids` holds, in every span, a token outside `problem.blank` before the span's
    first pad (with token healing, the first span must write more than the text it begins with)."""
    masked = problem.masked.tolist()
    spans = problem.span_of.tolist() if problem.span_of is not None else [0] * len(masked)
    wrote: dict[int, bool] = {}
    ended: set[int] = set()
    first: list[int] = []  # the first span's tokens before its pad
    for pos, span in zip(masked, spans, strict=True):
        token = int(ids[pos])
        wrote.setdefault(span, False)
        if span in ended or is_pad(model, token):
            ended.add(span)
            continue
        if span == spans[0]:
            first.append(token)
        if token not in problem.blank:
            wrote[span] = True
    if problem.heal is not None and masked:
        text = problem.heal.pieces.text(first)
        wrote[spans[0]] = bool(text[len(problem.heal.text) :].strip())
    return all(wrote.values())
