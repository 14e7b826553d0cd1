"""The block-diffusion backend drives stock transformers classes correctly: cached block decoding equals a
full block-causal forward, the 2L verifier equals per-position causal forwards, masks are right for sdpa and
eager."""

from __future__ import annotations

import pytest
import torch

from infill.models.blockdiff import BlockDiffModel
from tests.fixtures_bd import MASK, V, tiny_backend

torch.set_num_threads(1)
TOL = 1e-5
CASES = [  # (architecture, attention implementation, right-shifted)
    ("qwen3", "sdpa", False),
    ("qwen3", "eager", False),
    ("qwen2", "sdpa", True),
    ("qwen2", "eager", True),
    ("llama", "sdpa", False),
]


def reference_logits(bk: BlockDiffModel, ids: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor):
    """One cache-free forward with a mask built here, independently of BlockDiffModel.attention_mask."""
    mask = allowed[None, None]
    if bk.attn_implementation == "eager":
        mask = torch.where(mask, 0.0, torch.finfo(torch.float32).min)
    with torch.no_grad():
        out = bk.model(input_ids=ids[None], position_ids=positions[None], attention_mask=mask, use_cache=False)
    return out.logits[0].float()


def clean_allowed(bk: BlockDiffModel, n: int, block: int) -> torch.Tensor:
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    return (k // block <= q // block) if bk.clean_attention == "block" else (k <= q)


def reference_block(bk: BlockDiffModel, seq: torch.Tensor, start: int, end: int, block: int) -> torch.Tensor:
    """Predictions for positions [start, end): committed prefix [0, start) clean, the block bidirectional."""
    allowed = torch.zeros(end, end, dtype=torch.bool)
    allowed[:start, :start] = clean_allowed(bk, start, block)
    allowed[start:end, :end] = True
    logits = reference_logits(bk, seq[:end], torch.arange(end), allowed)
    if bk.shifted:
        return logits[start - 1 : end - 1]
    return logits[start:end]


@pytest.mark.parametrize(("arch", "attn", "shifted"), CASES)
def test_cached_block_decoding_equals_full_forward(arch: str, attn: str, shifted: bool) -> None:
    bk = tiny_backend(arch, attn, shifted)
    gen = torch.Generator().manual_seed(1)
    seq = torch.randint(0, V - 2, (14,), generator=gen)
    block, prompt = 4, 6
    state = bk.new_state()
    p0 = (prompt // block) * block  # 4: one prompt block prefilled, the block [4, 8) holds the prompt's tail
    fused = bk.commit(state, seq[:p0], block, draft_ids=seq[p0 : p0 + block], kind="prefill")
    assert state.length == p0 and state.cache.get_seq_length() == p0
    start = p0
    while start < seq.numel():
        end = min(start + block, seq.numel())
        ref = reference_block(bk, seq, start, end, block)  # (L, V)
        assert fused is not None
        got_draft = bk.draft(state, seq[start:end])  # the standalone draft, after all the crops so far
        assert (fused - ref)[:, :MASK].abs().max() <= TOL
        assert (got_draft - ref)[:, :MASK].abs().max() <= TOL
        assert state.cache.get_seq_length() == start  # drafts leave the cache as it was
        nxt = min(end + block, seq.numel())
        fused = bk.commit(state, seq[start:end], block, draft_ids=seq[end:nxt] if end < nxt else None)
        start = end
    assert state.nfe == sum(state.counts.values())
    assert state.counts["prefill"] == 1


def test_block_causal_reference_is_one_full_forward() -> None:
    """For block-causal clean attention, all blocks' predictions come from ONE block-causal forward (no
    cache)."""
    bk = tiny_backend("qwen3", "sdpa")
    seq = torch.randint(0, V - 2, (12,), generator=torch.Generator().manual_seed(2))
    full = reference_logits(bk, seq, torch.arange(12), clean_allowed(bk, 12, 4))  # (12, V)
    state = bk.new_state()
    rows = [bk.commit(state, seq[0:4], 4, draft_ids=seq[4:8])]
    rows.append(bk.commit(state, seq[4:8], 4, draft_ids=seq[8:12]))
    got = torch.cat([r for r in rows if r is not None])  # predictions for positions 4..11
    assert (got - full[4:12])[:, :MASK].abs().max() <= TOL
    assert got[:, MASK].eq(float("-inf")).all()  # the mask token is never predicted


@pytest.mark.parametrize(("arch", "attn", "shifted"), CASES)
@pytest.mark.parametrize(("s", "n"), [(0, 4), (1, 3), (2, 1)])
def test_verifier_equals_per_position_causal_forwards(arch: str, attn: str, shifted: bool, s: int, n: int) -> None:
    bk = tiny_backend(arch, attn, shifted)
    seq = torch.randint(0, V - 2, (12,), generator=torch.Generator().manual_seed(3))
    c, block = 8, 4
    state = bk.new_state()
    bk.commit(state, seq[:c], block, kind="prefill")
    cur = seq[c : c + block].clone()  # block positions before s decoded, drafts in [s, s+n)
    q = bk.verify(state, cur, s, n)  # (n, V)
    assert q.shape == (n, V) and state.cache.get_seq_length() == c
    for r in range(n):
        pos = c + s + r  # absolute position being verified
        if shifted:
            length = pos  # inputs seq[:c] + cur[:s+r]; the last row predicts `pos`
            ids = torch.cat([seq[:c], cur[: s + r]])
            positions = torch.arange(length)
        else:
            length = pos + 1  # ... plus a mask token AT `pos`
            ids = torch.cat([seq[:c], cur[: s + r], torch.tensor([MASK])])
            positions = torch.arange(length)
        allowed = torch.zeros(length, length, dtype=torch.bool)
        allowed[:c, :c] = clean_allowed(bk, c, block)
        allowed[c:, :] = torch.tril(torch.ones(length, length, dtype=torch.bool))[c:, :]  # AR view
        ref = reference_logits(bk, ids, positions, allowed)[-1]
        assert (q[r] - ref)[:MASK].abs().max() <= TOL, (r, (q[r] - ref)[:MASK].abs().max())


def test_eager_needs_an_additive_mask() -> None:
    """eager + our float mask == sdpa + bool mask; a bool mask handed to eager is silently wrong."""
    sd, ea = tiny_backend("qwen3", "sdpa"), tiny_backend("qwen3", "eager")
    ea.model.load_state_dict(sd.model.state_dict())
    seq = torch.randint(0, V - 2, (8,), generator=torch.Generator().manual_seed(4))
    allowed = clean_allowed(sd, 8, 4)
    assert sd.attention_mask(allowed).dtype == torch.bool
    assert ea.attention_mask(allowed).dtype == torch.float32
    outs = []
    for bk, mask in (
        (sd, sd.attention_mask(allowed)),
        (ea, ea.attention_mask(allowed)),
        (ea, allowed[None, None]),
    ):
        with torch.no_grad():
            outs.append(bk.model(input_ids=seq[None], position_ids=torch.arange(8)[None], attention_mask=mask).logits)
    assert (outs[0] - outs[1]).abs().max() <= TOL
    assert (outs[2] - outs[1]).abs().max() > 1e-3


def test_shifted_single_position_draft_needs_no_forward() -> None:
    bk = tiny_backend("qwen2", "sdpa", shifted=True)
    seq = torch.randint(0, V - 2, (5,), generator=torch.Generator().manual_seed(5))
    state = bk.new_state()
    bk.commit(state, seq[:4], 1, kind="prefill")
    before = state.nfe
    p = bk.draft(state, torch.tensor([MASK]))
    q = bk.verify(state, torch.tensor([seq[4]]), 0, 1)
    assert state.nfe == before
    assert torch.equal(p, q)  # the AR prediction for the next position, from the commit's last row
