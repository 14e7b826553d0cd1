"""What decoders need from a model, and nothing more. Decoders never see XLNet or transformers details.

Shapes: N = sequence length, M = masked positions, k = targets in one call, V = vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


class BatchedDraft(Protocol):
    """A model that can run `draft` for several sequences in one pass (beam search's hypotheses): the left-to-right
    models (infill.models.autoregressive.CausalFim) on every engine, and the any-subset XLNet."""

    def draft_many(self, ids: Sequence[torch.Tensor], masked: torch.Tensor, ns: Sequence[int]) -> torch.Tensor:
        """Row b is `draft(ids[b], masked, ns[b], masked[ns[b] : ns[b] + 1])[0]`: the next position's logits of
        each sequence, (B, V) float32, from one forward pass (one nfe)."""
        ...


class CausalEngine(Protocol):
    """What runs a left-to-right network's passes (infill.models.autoregressive.TorchEngine and BlockOneEngine,
    infill.models.llamacpp.LlamaEngine): token sequences in, next-token logits out. The engine keeps the keys
    and values of the sequences it evaluated last, and a pass computes only from the first token each sequence
    does not share with them; it knows nothing of FIM prompts, masks or sampling (infill.models.autoregressive.
    CausalFim and the decoders do that)."""

    vocab_size: int  # the logits' width V (the network's vocabulary, padding rows included)

    def rows(self, seqs: Sequence[Sequence[int]], k: int) -> torch.Tensor:
        """float32 logits (B, k, V): row j of sequence b predicts the token after seqs[b][: len(seqs[b]) - k + 1 + j].
        One forward pass over all B sequences where the engine can batch them (beam search's hypotheses)."""
        ...

    def forget(self) -> None:
        """Drop every cached sequence (the next pass computes from the first token)."""
        ...

    def parameter_count(self) -> int: ...
