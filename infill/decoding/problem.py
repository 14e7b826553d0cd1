"""Checks and bookkeeping shared by the decoders: input validation and end-of-fill padding."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infill.config import Sampling, options_of
from infill.errors import DecodeError

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.stats import DecodeStats
    from infill.models.base import AnySubsetModel, FillProblem

# on_step(decoded, total): called after every iteration with the number of masked positions filled so far
StepCallback = Callable[[int, int], None]


def check_problem(model: AnySubsetModel, problem: FillProblem) -> None:
    """Raise DecodeError for a malformed problem: bad shapes, no visible token, longer than the model
    supports."""
    import torch

    ids, masked = problem.ids, problem.masked
    if ids.dim() != 1 or masked.dim() != 1:
        raise DecodeError(f"ids and masked must be 1-D, got {tuple(ids.shape)} and {tuple(masked.shape)}")
    N, M = ids.shape[0], masked.shape[0]
    if N > model.max_length:
        raise DecodeError(f"sequence of {N} tokens exceeds the model's maximum length {model.max_length}")
    if M == 0:
        return
    if int(masked.min()) < 0 or int(masked.max()) >= N:
        raise DecodeError(f"masked positions must lie in [0, {N}), got {masked.tolist()}")
    if M > 1 and not bool(torch.all(masked[1:] > masked[:-1])):
        raise DecodeError("masked positions must be strictly ascending (left-to-right decoding order, Eq. 4)")
    if M >= N:
        raise DecodeError(
            "no visible token: every position is masked, so attention would leak hidden tokens; "
            "add a BOS or some context"
        )
    if problem.span_of is not None and problem.span_of.shape != masked.shape:
        raise DecodeError(f"span_of has shape {tuple(problem.span_of.shape)}, expected {tuple(masked.shape)}")


def pads_enabled(model: AnySubsetModel, problem: FillProblem) -> bool:
    return problem.span_of is not None and model.pad_id is not None


def force_pads(ids: torch.Tensor, model: AnySubsetModel, problem: FillProblem, j: int) -> int:
    """The token at masked[j] ends its span (`ends_span`): write pad over the rest of the span; return the next
    undecoded index.

    Spans are contiguous in decoding order (positions ascend and a span is a range), so the rest of the span
    is masked[j + 1 : end) for the first end whose span differs.
    """
    assert problem.span_of is not None and model.pad_id is not None  # guarded by pads_enabled()
    span = int(problem.span_of[j])
    end = j + 1
    M = problem.masked.shape[0]
    while end < M and int(problem.span_of[end]) == span:
        end += 1
    ids[problem.masked[j + 1 : end]] = model.pad_id
    return end


def is_pad(model: AnySubsetModel, token: int) -> bool:
    return model.pad_id is not None and token == model.pad_id


def ends_span(model: AnySubsetModel, problem: FillProblem, ids: torch.Tensor, j: int, token: int) -> bool:
    """Whether `token` at masked[j] ends its span: a pad, or one of the span's stop tokens after some text
    (a token outside `problem.blank` earlier in the span; `ids` holds the decoded tokens)."""
    if is_pad(model, token):
        return True
    if problem.stops is None or problem.span_of is None:
        return False
    span = int(problem.span_of[j])
    if token not in problem.stops[span]:
        return False
    i = j - 1
    while i >= 0 and int(problem.span_of[i]) == span:
        if int(ids[problem.masked[i]]) not in problem.blank:
            return True
        i -= 1
    return False


def settle(model: AnySubsetModel, problem: FillProblem, ids: torch.Tensor, n: int, new_n: int, pads: bool) -> int:
    """After an iteration decoded masked[n:new_n] (accepted or resampled tokens): a token that ends its span
    stops the scan there and pads the rest of the span; later drafts are reset to <mask>. Returns the new n."""
    if pads:
        for j in range(n, new_n):
            if ends_span(model, problem, ids, j, int(ids[problem.masked[j]])):
                new_n = force_pads(ids, model, problem, j)
                break
    ids[problem.masked[new_n:]] = model.mask_id  # drafts after the stop
    return new_n


@dataclass
class LeftToRight:
    """The state every left-to-right any-subset decoder keeps: the sequence being filled, the decoding order,
    whether pads end spans, the stats and the clock. `begin` checks the inputs; `advance` records one
    iteration; `result` is what a decoder returns."""

    ids: torch.Tensor  # (N,): prompt, decoded tokens, <mask> elsewhere
    masked: torch.Tensor  # (M,) decoding order
    pads: bool
    stats: DecodeStats
    on_step: StepCallback | None
    start: float = field(default_factory=time.perf_counter)

    @classmethod
    def begin(
        cls,
        model: AnySubsetModel,
        problem: FillProblem,
        cfg: DecodeConfig,
        stats: DecodeStats,
        on_step: StepCallback | None,
    ) -> LeftToRight:
        check_problem(model, problem)
        options_of(Sampling, cfg)  # DecodeError for an out-of-range temperature, top-k or top-p
        ids = problem.ids.detach().to("cpu").clone()
        return cls(ids, problem.masked.detach().to("cpu"), pads_enabled(model, problem), stats, on_step)

    @property
    def total(self) -> int:
        return int(self.masked.shape[0])

    def advance(self, before: int, n: int) -> int:
        """Record an iteration that took the fill from `before` to `n` decoded positions; returns n."""
        self.stats.accepted.append(n - before)
        if self.on_step is not None:
            self.on_step(n, self.total)
        return n

    def settle(self, model: AnySubsetModel, problem: FillProblem, n: int, new_n: int, visible: torch.Tensor) -> int:
        """After a verified iteration decoded masked[n:new_n]: end spans at their pads (`settle`), show the
        decoded positions to the drafts (`visible`), and record the iteration. Returns the new n."""
        new_n = settle(model, problem, self.ids, n, new_n, self.pads)
        visible[self.masked[n:new_n]] = True
        return self.advance(n, new_n)

    def result(self) -> tuple[torch.Tensor, DecodeStats]:
        self.stats.tokens = self.total
        self.stats.seconds = time.perf_counter() - self.start
        return self.ids[self.masked], self.stats
