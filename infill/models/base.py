"""What decoders need from a model, and nothing more. Decoders never see XLNet or transformers details.

Shapes: N = sequence length, M = masked positions, k = targets in one call, V = vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch


class Tokenizer(Protocol):
    """Exact text <-> ids round trip for the project's byte-level tokenizer (decode(encode(s)) == s)."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class FillProblem:
    """A sequence in which some positions are masked; the decoder fills them left to right (Eq. 4).

    ids:     (N,) long. Prompt tokens; `mask_id` at every masked position.
    masked:  (M,) long. Masked positions in ascending order = decoding order.
    span_of: (M,) long or None. Which span each masked position belongs to. When set together with the model's
             `pad_id`, decoding a pad ends that span: its remaining positions become pad without forward passes
             (variable-length fills). None disables this (the exactness tests use None).
    stops:   per span, more tokens that end it like a pad (the token itself stays) once the span holds a token
             outside `blank`: the line breaks of a one-line span, whose text is cut at its first line break after
             some text anyway. Decoding stays exact for the fill up to its end; what would follow is never sampled.
    blank:   whitespace-only tokens (see `stops`).
    accept:  beam search only: whether a finished fill (its M tokens, in decoding order) may be returned, e.g.
             whether the file still parses with it. The search goes on past fills it refuses and ranks them last.
             None accepts every fill. Samplers ignore it (rejecting samples would change their distribution).
    """

    ids: torch.Tensor
    masked: torch.Tensor
    span_of: torch.Tensor | None = None
    stops: tuple[frozenset[int], ...] | None = None
    blank: frozenset[int] = frozenset()
    accept: Callable[[list[int]], bool] | None = None


class AnySubsetModel(Protocol):
    """An any-subset autoregressive model (AS-ARM).

    Both methods take the current content `ids` (N,) long: decoded masked positions hold their tokens, undecoded
    ones hold `mask_id` (verify: drafts are written at the targets). `masked` (M,) long lists masked positions in
    decoding order; masked[:n] are decoded. `targets` (k,) long are positions, equal to masked[n:n+k].
    Both return float32 logits (k, V) with the `<mask>` logit already set to -inf, and count one forward pass.
    """

    vocab_size: int
    mask_id: int
    pad_id: int | None  # end-of-fill padding token for variable-length spans, if the model was trained with one
    bos_id: int | None
    max_length: int  # longest sequence the model was trained on / supports

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        """The draft density: p(x_i | prompt, masked[:n]) for each target i, independently of the other targets
        (each sees the prompt and the n decoded positions, not the other targets).

        ids (N,) long: the sequence (module docstring); masked (M,) long: the decoding order; n: how many of
        masked are decoded (0 <= n < M); targets (k,) long: the positions to predict, masked[n : n + k].
        Returns (k, V) float32 logits (untransformed; `<mask>` at -inf). With k = 1 it equals `verify`."""
        ...

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        """The oracle: q(x_i | prompt, masked[:n], the drafts at targets[:i]) for each target i, in one pass.

        ids (N,) long: the sequence with the drafts written at `targets`; masked, n as for `draft`; targets
        (k,) long: masked[n : n + k] (a draft source's drafts, plus the bonus row's position when it asks for
        one). Returns (k, V) float32 logits (untransformed; `<mask>` at -inf): row i is the model's conditional
        for targets[i] given everything decoded and the drafts before it."""
        ...
