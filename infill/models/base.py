"""What decoders need from a model, and nothing more. Decoders never see XLNet or transformers details.

Shapes: N = sequence length, M = masked positions, k = targets in one call, V = vocabulary size.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
    ends:    per span, a test on the span's tokens so far (the last one just decoded) that ends the span after
             that token when true (a block of lines at its dedent); like `stops`, it keeps its answer for every
             longer fill. None for a span without one.
    accept:  beam search only: whether a finished fill (its M tokens, in decoding order) may be returned, e.g.
             whether the file still parses with it. The search goes on past fills it refuses and ranks them last.
             None accepts every fill. Samplers ignore it (rejecting samples would change their distribution).
    heal:    token healing: the text the first span's fill must begin with (the characters the prompt was backed
             up over, infill.decoding.healing), or None.
    """

    ids: torch.Tensor
    masked: torch.Tensor
    span_of: torch.Tensor | None = None
    stops: tuple[frozenset[int], ...] | None = None
    blank: frozenset[int] = frozenset()
    ends: tuple[Callable[[list[int]], bool] | None, ...] | None = None
    accept: Callable[[list[int]], bool] | None = None
    heal: Healing | None = None


class Pieces:
    """The bytes of every token id (b"" for tokens that write no text: pad, specials), indexed so that the
    tokens consistent with a text still to be written are found without a pass over the vocabulary."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self.pieces = tuple(pieces)
        self._sorted = sorted((p, i) for i, p in enumerate(self.pieces) if p)
        self._keys = [p for p, _ in self._sorted]
        self._ids: dict[bytes, list[int]] = {}
        for p, i in self._sorted:
            self._ids.setdefault(p, []).append(i)

    def consistent(self, rest: bytes) -> list[int]:
        """Ids whose bytes begin with `rest` (they write it and may go on) or are a non-empty beginning of it."""
        out = [i for k in range(1, len(rest)) for i in self._ids.get(rest[:k], ())]
        at = bisect.bisect_left(self._keys, rest)
        while at < len(self._keys) and self._keys[at].startswith(rest):
            out.append(self._sorted[at][1])
            at += 1
        return out

    def text(self, ids: Sequence[int]) -> bytes:
        return b"".join(self.pieces[i] if 0 <= i < len(self.pieces) else b"" for i in ids)


@dataclass(frozen=True)
class Healing:
    """Token healing's constraint (infill.decoding.healing): the fill's text must begin with `text` (bytes).
    `stepwise`: impose it step by step from the first try, without the exact rejection (an earlier draw of the
    same fill ran out of its tries: infill.core.backends.Totals.heal_stepwise)."""

    text: bytes
    pieces: Pieces
    _masks: dict[tuple[bytes, int], torch.Tensor] = field(default_factory=dict, compare=False, repr=False)
    stepwise: bool = False

    def rest(self, written: bytes) -> bytes | None:
        """What of `text` is still to be written after `written` (b"" once it is all written), or None when
        `written` has left it."""
        if written.startswith(self.text):
            return b""
        if self.text.startswith(written):
            return self.text[len(written) :]
        return None

    def mask(self, rest: bytes, vocab_size: int) -> torch.Tensor:
        """(V,) bool: the tokens consistent with `rest` (Pieces.consistent), cached."""
        import torch

        key = (rest, vocab_size)
        found = self._masks.get(key)
        if found is None:
            found = torch.zeros(vocab_size, dtype=torch.bool)
            ids = [i for i in self.pieces.consistent(rest) if i < vocab_size]
            found[ids] = True
            self._masks[key] = found
        return found


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


class BatchedVerify(Protocol):
    """A model that can run `verify` of several fills of one problem in one pass (the retrieved lines a fill
    ranks): the any-subset XLNet."""

    def verify_many(self, ids: Sequence[torch.Tensor], masked: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
        """Rows sum(lengths[:b]) .. sum(lengths[:b+1]) - 1 are `verify(ids[b], masked, 0, masked[:lengths[b]])`:
        (sum(lengths), V) float32, from one forward pass (one nfe)."""
        ...


class CausalEngine(Protocol):
    """What runs a left-to-right network's passes (infill.models.autoregressive.TorchEngine,
    infill.models.block_one.BlockOneEngine, infill.models.llamacpp.LlamaEngine): token sequences in, next-token
    logits out. The engine keeps the keys and values of the sequences it evaluated last, and a pass computes only
    from the first token each sequence does not share with them; it knows nothing of FIM prompts, masks or
    sampling (infill.models.autoregressive.CausalFim and the decoders do that)."""

    vocab_size: int  # the logits' width V (the network's vocabulary, padding rows included)

    def rows(self, seqs: Sequence[Sequence[int]], k: int) -> torch.Tensor:
        """float32 logits (B, k, V): row j of sequence b predicts the token after seqs[b][: len(seqs[b]) - k + 1 + j].
        One forward pass over all B sequences where the engine can batch them (beam search's hypotheses)."""
        ...

    def forget(self) -> None:
        """Drop every cached sequence (the next pass computes from the first token)."""
        ...

    def parameter_count(self) -> int: ...
