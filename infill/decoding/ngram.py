"""The n-gram draft of ASSD (Algorithm 2 of the ASSD paper): a bigram model of the visible context.

p at each target is the distribution of the tokens that followed the previous position's token (its real
token, or this window's draft) in adjacent visible pairs; without a usable bigram it falls back to the visible
unigram, then to uniform. No forward pass, but Lemma 1 does not hold for it: its first draft is tested like the
others (infill.decoding.assd).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.decoding.sampling import sample, transform
from infill.decoding.speculative import Proposal

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.problem import LeftToRight
    from infill.models.base import AnySubsetModel


class BigramDraft:
    """infill.decoding.drafts.DraftSource: bigram drafts at the next k masked positions."""

    def __init__(self, model: AnySubsetModel, cfg: DecodeConfig, k: int) -> None:
        self.model, self.cfg, self.width = model, cfg, k

    def propose(self, run: LeftToRight, visible: torch.Tensor, n: int, generator: torch.Generator) -> Proposal:
        targets = run.masked[n : min(n + self.width, run.total)]  # (L,)
        model = self.model
        drafts, p = ngram_draft(run.ids, visible, targets, model.vocab_size, model.mask_id, self.cfg, generator)
        return Proposal(drafts, p)

    def verified(self, accepted: int, drafted: int) -> None:
        pass


def ngram_draft(
    ids: torch.Tensor,
    visible: torch.Tensor,
    targets: torch.Tensor,
    vocab_size: int,
    mask_id: int,
    cfg: DecodeConfig,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 2: bigram drafts from the visible context. Returns (drafts (k,) long, p (k, V) float64).

    ids (N,) long, visible (N,) bool (prompt + decoded), targets (k,) long positions. The drafts are drawn one
    position at a time (each row's sample conditions the next row)."""
    import torch

    pair_ok = visible[:-1] & visible[1:]  # (N-1,) adjacent visible pairs
    pair_prev, pair_next = ids[:-1][pair_ok], ids[1:][pair_ok]  # (P,), (P,)
    unigram = torch.bincount(ids[visible], minlength=vocab_size)[:vocab_size].double()  # (V,)
    unigram[mask_id] = 0.0
    cur = ids.clone()
    cur_visible = visible.clone()
    drafts = torch.empty(targets.shape[0], dtype=torch.long)
    rows = []
    for i, pos in enumerate(targets.tolist()):
        counts = unigram
        if pos > 0 and bool(cur_visible[pos - 1]):
            sel = pair_next[pair_prev == cur[pos - 1]]  # tokens that followed the previous token
            if sel.numel() > 0:
                counts = torch.bincount(sel, minlength=vocab_size)[:vocab_size].double()
                counts[mask_id] = 0.0
        if counts.sum() == 0:
            counts = torch.ones(vocab_size, dtype=torch.float64)
            counts[mask_id] = 0.0
        pr = transform(torch.log(counts)[None, :], cfg)  # (1, V)
        x = int(sample(pr, generator)[0])
        drafts[i] = x
        rows.append(pr[0])
        cur[pos] = x
        cur_visible[pos] = True
    return drafts, torch.stack(rows)  # (k,), (k, V)
