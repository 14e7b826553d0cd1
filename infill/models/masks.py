"""Attention masks of the any-subset autoregressive model (AS-ARM), shared by training and inference.

Training and inference must build *identical* masks (docs/decoding.md: "Keep the inference masks identical to the
training masks"), so both import this module and nothing else builds a `perm_mask`.

Conventions (HF `XLNetLMHeadModel`):
  perm_mask[b, i, j] = 1  ->  position i may NOT attend to position j (the content stream always sees itself);
  target_mapping[b, t, j] = 1  ->  query t predicts position j.

A problem is described per position by
  masked[b, j]  True where position j is masked (to be predicted), False for the prompt;
  rank[b, j]    decoding rank of a masked position (0, 1, ... in ascending position order, Eq. 4); ignored for
                the prompt.
Row i may see masked position j iff rank[j] < limit[i], where
  prompt rows:                      limit = 0       (the prompt never sees masked positions, even decoded ones)
  masked rows, oracle/verify/train: limit = rank[i] (permuted causal)
  masked rows, draft with n decoded: limit = min(rank[i], n)  (targets see the prompt + decoded tokens only)
Prompt positions are visible to every row (the prompt block is bidirectional).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def ranks(masked: torch.Tensor) -> torch.Tensor:
    """Left-to-right decoding rank of every masked position; -1 at prompt positions.

    masked: (B, N) bool  ->  (B, N) long
    """
    import torch

    r = torch.cumsum(masked.long(), dim=-1) - 1  # (B, N)
    return torch.where(masked, r, torch.full_like(r, -1))


def blocked(masked: torch.Tensor, n_decoded: int | None = None) -> torch.Tensor:
    """(B, N, N) bool, True where row i may NOT see position j.

    masked: (B, N) bool. With `n_decoded=None` this is the oracle / verify / training mask. With an integer it is
    the draft mask: rows of masked positions of rank >= n_decoded see only the prompt and ranks < n_decoded.
    """
    import torch

    r = ranks(masked)  # (B, N)
    limit = torch.where(masked, r, torch.zeros_like(r))  # (B, N): prompt rows see no masked position
    if n_decoded is not None:
        limit = torch.clamp(limit, max=n_decoded)
    # blocked[b, i, j] = masked[b, j] and rank[b, j] >= limit[b, i]
    return masked[:, None, :] & (r[:, None, :] >= limit[:, :, None])  # (B, N, N)


def perm_mask(masked: torch.Tensor, n_decoded: int | None = None) -> torch.Tensor:
    """HF XLNet's permuted-causal `perm_mask` (B, N, N) float; 1 = may not attend (see `blocked`)."""
    return blocked(masked, n_decoded).float()


def target_mapping(positions: torch.Tensor, seq_len: int) -> torch.Tensor:
    """One-hot `target_mapping` (B, T, N) float for target positions (B, T) long; rows with position -1 are zero."""
    import torch

    valid = positions >= 0  # (B, T)
    tm = torch.zeros(*positions.shape, seq_len, dtype=torch.float32, device=positions.device)  # (B, T, N)
    idx = positions.clamp(min=0).unsqueeze(-1)  # (B, T, 1)
    tm.scatter_(-1, idx, valid.unsqueeze(-1).float())
    return tm
