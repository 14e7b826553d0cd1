"""What a decoder is handed, and the checks and bookkeeping the decoders share: one any-subset decode
(LeftToRight: input validation, end-of-fill padding, progress) and one block-diffusion decode (Generation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infill.errors import DecodeError

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.stats import DecodeStats
    from infill.models.base import AnySubsetModel, FillProblem
    from infill.models.blockdiff_model import BlockDiffModel

# on_step(decoded, total): called after every iteration with the number of masked positions filled so far
StepCallback = Callable[[int, int], None]
# a block-diffusion decoder's on_step({"tokens": decoded, "nfe": passes, "block": index}), after every step
BlockCallback = Callable[[dict[str, Any]], None]
# stop(tokens): given the first tokens of the output, all decoded, the index of the token after which the
# generation ends (that token is kept), or None; it must keep its answer for every longer prefix
StopRule = Callable[[list[int]], "int | None"]


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
    """Whether `token` at masked[j] ends its span: a pad, the span's `ends` test on its tokens so far, or one of
    the span's stop tokens after some text (a token outside `problem.blank` earlier in the span; `ids` holds the
    decoded tokens, `token` at masked[j] included)."""
    if is_pad(model, token):
        return True
    if problem.span_of is None:
        return False
    span = int(problem.span_of[j])
    end = problem.ends[span] if problem.ends is not None else None
    if end is not None:
        i = j
        while i > 0 and int(problem.span_of[i - 1]) == span:
            i -= 1
        return end([int(ids[p]) for p in problem.masked[i : j + 1].tolist()])
    if problem.stops is None:
        return False
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
    """One any-subset decode, as every decoder of that kind sees it: the model, the problem, the settings and the
    one generator, the sequence being filled, the decoding order, whether pads end spans, the stats and the clock.
    infill.decoding.decode builds it (after checking the inputs) and hands it to the decoder, which writes its
    tokens into `ids`; `advance` records one iteration; `result` is what decode returns."""

    model: AnySubsetModel
    problem: FillProblem
    cfg: DecodeConfig
    generator: torch.Generator
    ids: torch.Tensor  # (N,): prompt, decoded tokens, <mask> elsewhere
    masked: torch.Tensor  # (M,) decoding order
    pads: bool
    stats: DecodeStats
    on_step: StepCallback | None
    start: float = field(default_factory=time.perf_counter)

    @property
    def total(self) -> int:
        return int(self.masked.shape[0])

    def advance(self, before: int, n: int) -> int:
        """Record an iteration that took the fill from `before` to `n` decoded positions; returns n."""
        self.stats.accepted.append(n - before)
        if self.on_step is not None:
            self.on_step(n, self.total)
        return n

    def settle(self, n: int, new_n: int, visible: torch.Tensor) -> int:
        """After an iteration decoded masked[n:new_n]: end spans at their pads (`settle`), show the decoded
        positions to the drafts (`visible`), and record the iteration. Returns the new n."""
        new_n = settle(self.model, self.problem, self.ids, n, new_n, self.pads)
        visible[self.masked[n:new_n]] = True
        return self.advance(n, new_n)

    def result(self) -> tuple[torch.Tensor, DecodeStats]:
        """(tokens (M,) long in decoding order, stats)."""
        self.stats.tokens = self.total
        self.stats.seconds = time.perf_counter() - self.start
        return self.ids[self.masked], self.stats


@dataclass(frozen=True)
class Generation:
    """One block-diffusion decode, as every decoder of that kind is handed it (infill.decoding.blockfill builds
    it): write at most `max_tokens` tokens after `prompt` (P,) long with `model`, drawing from `generator`; the
    generation also ends after the token `stop` names (a one-line fill at its line break), which the output keeps.
    Built only for a prompt the model can take: DecodeError otherwise."""

    model: BlockDiffModel
    prompt: torch.Tensor
    max_tokens: int
    cfg: DecodeConfig
    generator: torch.Generator
    on_step: BlockCallback | None = None
    stop: StopRule | None = None

    def __post_init__(self) -> None:
        n_prompt = int(self.prompt.numel())
        if n_prompt == 0:
            raise DecodeError("block-diffusion decoding needs at least one prompt token")
        if bool((self.prompt == self.model.mask_id).any()):
            raise DecodeError("the prompt contains the mask token")
        if self.max_tokens < 0:
            raise DecodeError(f"max_tokens must be >= 0, got {self.max_tokens}")
        limit = self.model.max_positions or n_prompt + self.max_tokens
        if n_prompt + self.max_tokens > limit:
            raise DecodeError(
                f"prompt ({n_prompt} tokens) + max_tokens ({self.max_tokens}) exceeds the model's {limit}"
            )
