"""The block-diffusion objective and its data (infill.training.blockdiff trains with them; infill.training.ssmd
cuts its examples the same way): the special tokens, documents from texts or a pack, fill-in-the-middle examples,
the per-block noise and the two-stream loss.

Training objective (BD3-LM / SDAR): the sequence is cut into blocks of B tokens. Each block gets its own mask
rate t ~ U(eps, 1]; its masked positions are predicted from the CLEAN previous blocks and the NOISY current
block. One forward handles all blocks with the 2N layout [x_t ; x_0]: noisy block b sees noisy block b
(bidirectional) and clean blocks < b; clean block b sees clean blocks <= b. Loss: cross-entropy on the
masked positions, weighted by 1/t.
"""

from __future__ import annotations

import json
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.models.blockdiff_folder import (
    END,
    FIM_MIDDLE,
    FIM_PREFIX,
    FIM_SUFFIX,
    MASK,
    SPECIALS,
)

if TYPE_CHECKING:
    import torch


@dataclass
@dataclass
class Specials:
    end: int
    mask: int
    fim_prefix: int
    fim_suffix: int
    fim_middle: int


def specials_of(tok: Any) -> Specials:
    ids = [tok.token_to_id(t) for t in (END, MASK, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)]
    if any(i is None for i in ids):
        raise ValueError("tokenizer lacks the block-diffusion special tokens")
    return Specials(*ids)


def with_specials(tok: Any) -> Any:
    """Add SPECIALS a tokenizer lacks (e.g. the AS-ARM's byte-level BPE); existing ids are unchanged."""
    from tokenizers import AddedToken

    missing = [t for t in SPECIALS if tok.token_to_id(t) is None]
    if missing:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
    return tok


def pack_documents(pack: Path, tok: Any) -> list[array[int]]:
    """The training documents of a pack written by `infill train pack` (its train stream cut at the <bos> that
    precedes each file), after checking that `tok` extends the tokenizer the pack was written with (its first
    ids spell the same tokens, as the block-diffusion tokenizer extends the AS-ARM's with its specials)."""
    import numpy as np

    from infill.errors import InputError
    from infill.training.streams import vocab_digest
    from infill.training.tokenizer import BOS_ID

    try:
        with np.load(pack) as data:
            meta = json.loads(str(data["meta"]))
            stream = data["train"]
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"{pack}: not a pack written by `infill train pack` ({exc})") from exc
    size = meta.get("vocab_size")
    if size is None:
        raise InputError(f"{pack}: written before packs recorded their vocabulary; pack the corpus again")
    if tok.get_vocab_size() < size or vocab_digest(tok, size) != meta.get("vocab_sha256"):
        raise InputError(f"{pack}: packed with another tokenizer than this model's; pack it with the model's")
    starts = [int(i) for i in np.flatnonzero(stream == BOS_ID)] + [len(stream)]
    return [array("i", stream[a + 1 : b].tolist()) for a, b in zip(starts, starts[1:], strict=False) if b - a > 2]


def fim_example(
    doc: Sequence[int],
    sp: Specials,
    seq_len: int,
    rng: random.Random,
    fim_rate: float,
    max_middle: int,
    *,
    loss_on: str = "middle",
    line_rate: float = 0.0,
    newlines: frozenset[int] = frozenset(),
) -> tuple[list[int], int]:
    """One training sequence of exactly `seq_len` tokens and the index where its response starts.

    FIM (PSM order, as at inference): <fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle <end>
    then <end> padding; the response (middle, end, padding) is what gets noised, or, with loss_on="all",
    every token after <fim_prefix> (prefix and suffix are then learned left to right too, as FIM-trained code
    models are). With probability `line_rate` the middle is 1-3 whole lines without the last line break (the
    text `--span N:M` replaces); `newlines` are the ids of line-break tokens. Plain: a window of the document,
    then <end> padding; everything after the first token is response."""
    body = seq_len - 4
    start = rng.randrange(max(1, len(doc) - body + 1))
    window = list(doc[start : start + body])
    if rng.random() < fim_rate and len(window) >= 3:
        cut = line_middle(window, rng, max_middle, newlines) if rng.random() < line_rate else None
        if cut is None:
            mid_len = rng.randint(1, max(1, min(max_middle, len(window) - 2)))
            mid_start = rng.randint(0, len(window) - mid_len)
            cut = (mid_start, mid_start + mid_len)
        pre, mid, suf = window[: cut[0]], window[cut[0] : cut[1]], window[cut[1] :]
        prompt = [sp.fim_prefix, *pre, sp.fim_suffix, *suf, sp.fim_middle]
        seq = prompt + mid + [sp.end]
        resp = len(prompt) if loss_on == "middle" else 1
    else:
        seq = window[: seq_len - 1] + [sp.end]
        resp = 1
    return seq + [sp.end] * (seq_len - len(seq)), resp


def line_middle(
    window: Sequence[int], rng: random.Random, max_middle: int, newlines: frozenset[int]
) -> tuple[int, int] | None:
    """(start, end) token offsets of 1-3 whole lines of `window` (from just after a line break up to the line
    break that ends the last of them, which stays in the suffix), at most `max_middle` tokens and not empty;
    None when the window has no such lines."""
    breaks = [i for i, t in enumerate(window) if t in newlines]
    if len(breaks) < 2:
        return None
    first = rng.randrange(len(breaks) - 1)
    lines = rng.randint(1, min(3, len(breaks) - 1 - first))
    start, end = breaks[first] + 1, breaks[first + lines]
    if end <= start or end - start > max_middle:
        return None
    return start, end


def two_stream_mask(length: int, block: int) -> torch.Tensor:
    """(2L, 2L) bool, True = may attend, for the input [x_t ; x_0] (both at positions 0..L-1):
    noisy row i sees noisy positions of its own block and clean positions of earlier blocks; clean row i sees
    clean positions of blocks <= its own (block-causal). Clean rows never see noisy tokens."""
    import torch

    b = torch.arange(length) // block  # (L,) block index of each position
    same = b[:, None] == b[None, :]  # (L, L)
    earlier = b[None, :] < b[:, None]
    upto = b[None, :] <= b[:, None]
    top = torch.cat([same, earlier], dim=1)  # noisy rows: (L, 2L)
    bottom = torch.cat([torch.zeros_like(same), upto], dim=1)  # clean rows: (L, 2L)
    return torch.cat([top, bottom], dim=0)  # (2L, 2L)


def noise(
    x0: torch.Tensor,
    resp: torch.Tensor,
    block: int,
    mask_id: int,
    min_t: float,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x0 (N, L), resp (N,) response starts -> (x_t (N, L), weight (N, L)): each block of each row draws
    t ~ U(min_t, 1]; response positions are masked with probability t; weight = 1/t at masked positions."""
    import torch

    n, length = x0.shape
    n_blocks = -(-length // block)
    t = min_t + (1 - min_t) * torch.rand(n, n_blocks, generator=gen)  # (N, nb)
    t_pos = t.repeat_interleave(block, dim=1)[:, :length]  # (N, L)
    in_resp = torch.arange(length)[None, :] >= resp[:, None]  # (N, L)
    masked = in_resp & (torch.rand(n, length, generator=gen) < t_pos)
    xt = torch.where(masked, torch.full_like(x0, mask_id), x0)
    return xt, masked.float() / t_pos


def block_diffusion_loss(
    model: Any,
    x0: torch.Tensor,
    xt: torch.Tensor,
    weight: torch.Tensor,
    block: int,
    n_resp: int,
) -> torch.Tensor:
    """Weighted cross-entropy of the noisy stream's predictions at masked positions, per response token."""
    import torch
    import torch.nn.functional as F

    n, length = x0.shape
    ids = torch.cat([xt, x0], dim=1)  # (N, 2L)
    positions = torch.arange(length, device=x0.device).repeat(2)[None].expand(n, -1)  # (N, 2L)
    mask = two_stream_mask(length, block).to(x0.device)[None, None]  # (1, 1, 2L, 2L)
    hidden = model.model(input_ids=ids, position_ids=positions, attention_mask=mask).last_hidden_state
    sel = weight > 0  # (N, L)
    logits = model.lm_head(hidden[:, :length][sel])  # (m, V)
    ce = F.cross_entropy(logits.float(), x0[sel], reduction="none")  # (m,)
    return (ce * weight[sel]).sum() / max(n_resp, 1)


def newline_ids(tok: Any) -> frozenset[int]:
    """Ids of the tokens that are exactly a line break (the project's BPE isolates every line break)."""
    return frozenset(i for text in ("\n", "\r\n", "\r") if (i := tok.token_to_id(_byte_level(text))) is not None)


def _byte_level(text: str) -> str:
    """`text` as a byte-level BPE spells it in its vocabulary (GPT-2 byte-to-unicode: newline is "Ċ")."""
    from tokenizers.pre_tokenizers import ByteLevel

    return "".join(piece for piece, _ in ByteLevel(add_prefix_space=False).pre_tokenize_str(text))
