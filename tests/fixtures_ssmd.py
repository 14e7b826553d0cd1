"""Tiny models for the SSMD tests: a 5-token (+ mask) block-diffusion backend, random causal heads, and a
memoizing backend so that thousands of decodes replay forwards instead of recomputing them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from infill.models.blockdiff import BlockDiffModel, KVState
from infill.models.ssmd import HeadShape, SSMDHead, save_head
from tests.fixtures_bd import tiny_causal_lm

V_REAL = 5  # tokens 0..4
MASK = 5  # the mask token; vocabulary 6


def tiny_lm(seed: int = 0, vocab: int = V_REAL + 1) -> Any:
    """A random 2-layer stock Qwen3 (fp32, eval) with large weights, so its distributions are far from uniform."""
    return tiny_causal_lm(seed=seed, vocab=vocab, width=(16, 2, 1, 32), positions=64, scale=3.0)


def random_head(hidden: int = 16, seed: int = 0, scale: float = 1.0, max_block: int = 8) -> SSMDHead:
    """A head with a NONZERO output projection (p_C differs from p_NC), or zero-initialised if scale == 0."""
    torch.manual_seed(seed)
    head = SSMDHead(HeadShape(hidden=hidden, heads=2, intermediate=32, max_block=max_block))
    if scale:
        with torch.no_grad():
            head.out.weight.normal_(0.0, scale)
    return head.eval()


class MemoBackend(BlockDiffModel):
    """A BlockDiffModel whose commit / draft results are memoized on (committed tokens, inputs). A replay
    returns what a fresh forward returns (the model is deterministic) and keeps the state's bookkeeping
    (length, NFE, hidden states) as a real forward would; a miss recomputes on a fresh cache replayed from the
    committed tokens. The states' real caches are never used."""

    def __init__(self, model: Any, **kw: Any) -> None:
        super().__init__(model, **kw)
        self.memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def _replay(self, committed: tuple[int, ...], block_size: int) -> KVState:
        st = super().new_state()
        st.want_hidden = True
        if committed:
            BlockDiffModel.commit(self, st, torch.tensor(committed), block_size)
        return st

    def commit(
        self,
        state: KVState,
        ids: torch.Tensor,
        block_size: int,
        draft_ids: torch.Tensor | None = None,
        kind: Any = "commit",
    ) -> torch.Tensor | None:
        prev: tuple[int, ...] = getattr(state, "committed", ())
        drafts = None if draft_ids is None else tuple(draft_ids.tolist())
        key = ("commit", prev, tuple(ids.tolist()), drafts, block_size)
        if key not in self.memo:
            st = self._replay(prev, block_size)
            out = BlockDiffModel.commit(self, st, ids, block_size, draft_ids, kind)
            self.memo[key] = (out, st.hidden)
        out, hidden = self.memo[key]
        state.committed = prev + tuple(ids.tolist())  # type: ignore[attr-defined]
        state.length += int(ids.numel())
        state.nfe += 1
        state.counts[kind] += 1
        state.hidden = hidden
        return None if out is None else out.clone()

    def draft(self, state: KVState, block: torch.Tensor) -> torch.Tensor:
        prev: tuple[int, ...] = getattr(state, "committed", ())
        key = ("draft", prev, tuple(block.tolist()))
        if key not in self.memo:
            st = self._replay(prev, self.block_size)
            out = BlockDiffModel.draft(self, st, block)
            self.memo[key] = (out, st.hidden)
        out, hidden = self.memo[key]
        state.nfe += 1
        state.counts["draft"] += 1
        state.hidden = hidden
        return out.clone()


def tiny_backend(seed: int = 0, head: SSMDHead | None = None, memo: bool = True) -> BlockDiffModel:
    cls = MemoBackend if memo else BlockDiffModel
    bk = cls(tiny_lm(seed), mask_id=MASK, end_ids=(), block_size=4)
    bk.ssmd_head = head
    return bk


def folder_with_head(folder: Path, seed: int = 0, scale: float = 0.5) -> Path:
    """A tiny random SDAR-layout checkpoint (FIM tokens, 300-token BPE) with a random SSMD head beside it."""
    from infill.models.tiny import tiny_blockdiff_checkpoint as tiny_checkpoint

    path = tiny_checkpoint(folder, seed=seed)
    import json

    hidden = int(json.loads((path / "config.json").read_text())["hidden_size"])
    save_head(path / "ssmd_head.safetensors", random_head(hidden, seed, scale, max_block=16), {"random": True})
    return path
