"""The cached forward (xlnet_cache.py) gives the same logits as HF's full forward, to 1e-5."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from infill.config import DecodeConfig
from infill.decoding import decode
from infill.models.base import FillProblem
from infill.models.xlnet import XLNetAnySubset
from tests.fixtures_decode import OnePassPerHypothesis, tiny_xlnet

torch.set_num_threads(1)
V, MASK = 40, 39


@pytest.fixture(scope="module")
def pair() -> tuple[XLNetAnySubset, XLNetAnySubset]:
    cached = tiny_xlnet(V, n_layer=2, d_model=32, n_head=4, seed=4, init_scale=0.3, max_length=64)
    plain = XLNetAnySubset(cached.net, mask_id=MASK, device="cpu", cache=False)
    assert cached.cache is not None and plain.cache is None
    return cached, plain


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    finite = torch.isfinite(b)
    return bool(torch.equal(finite, torch.isfinite(a)) and (a - b)[finite].abs().max() <= tol)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    layout=st.lists(st.booleans(), min_size=2, max_size=24).filter(lambda m: 0 < sum(m) < len(m)),
    k=st.integers(1, 6),
    seed=st.integers(0, 1000),
)
def test_cached_draft_and_verify_match_the_full_forward(
    pair: tuple[XLNetAnySubset, XLNetAnySubset], layout: list[bool], k: int, seed: int
) -> None:
    cached, plain = pair
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, MASK, (len(layout),), generator=g)
    masked = torch.tensor([i for i, m in enumerate(layout) if m])
    ids[masked] = MASK
    for n in range(masked.shape[0]):  # walk a fill left to right, as a decoder does
        targets = masked[n : n + k]
        assert close(cached.draft(ids, masked, n, targets), plain.draft(ids, masked, n, targets))
        drafted = ids.clone()
        drafted[targets] = torch.randint(0, MASK, (targets.shape[0],), generator=g)
        assert close(cached.verify(drafted, masked, n, targets), plain.verify(drafted, masked, n, targets))
        ids[masked[n]] = int(torch.randint(0, MASK, (), generator=g))


def test_a_different_continuation_truncates_the_cache(pair: tuple[XLNetAnySubset, XLNetAnySubset]) -> None:
    cached, plain = pair
    ids = torch.tensor([1, MASK, MASK, MASK, MASK, 2, MASK, 3])
    masked = torch.tensor([1, 2, 3, 4, 6])
    a = ids.clone()
    a[masked[:4]] = torch.tensor([5, 6, 7, 8])
    cached.draft(a, masked, 4, masked[4:])
    b = ids.clone()
    b[masked[:3]] = torch.tensor([5, 9, 7])  # differs at rank 1: ranks >= 1 must be recomputed
    assert close(cached.draft(b, masked, 3, masked[3:]), plain.draft(b, masked, 3, masked[3:]))
    other = torch.tensor([4, MASK, 6, MASK])  # a new problem: new prefill
    before = cached.cache.prefills  # type: ignore[union-attr]
    om = torch.tensor([1, 3])
    assert close(cached.verify(other, om, 0, om), plain.verify(other, om, 0, om))
    assert cached.cache.prefills == before + 1  # type: ignore[union-attr]


def test_non_window_targets_fall_back_to_the_full_forward(
    pair: tuple[XLNetAnySubset, XLNetAnySubset],
) -> None:
    cached, plain = pair
    ids = torch.tensor([1, MASK, MASK, 2, MASK])
    masked = torch.tensor([1, 2, 4])
    targets = torch.tensor([2, 4])  # not masked[n:n+k] for n = 0
    assert close(cached.draft(ids, masked, 0, targets), plain.draft(ids, masked, 0, targets))


def test_same_fills_with_and_without_cache(pair: tuple[XLNetAnySubset, XLNetAnySubset]) -> None:
    cached, plain = pair
    ids = torch.tensor([1, MASK, MASK, MASK, 2, MASK, MASK, MASK, MASK, 3])
    problem = FillProblem(ids, (ids == MASK).nonzero().squeeze(-1))
    for cfg in (DecodeConfig(k=3, temperature=0), DecodeConfig(decoder="sequential", temperature=0)):
        a, sa = decode(cached, problem, cfg, torch.Generator().manual_seed(0))
        b, sb = decode(plain, problem, cfg, torch.Generator().manual_seed(0))
        assert a.tolist() == b.tolist() and sa.nfe == sb.nfe


def test_bf16_cached_is_close_to_bf16_full(pair: tuple[XLNetAnySubset, XLNetAnySubset]) -> None:
    cached, _ = pair
    c16 = XLNetAnySubset(cached.net, mask_id=MASK, device="cpu", bf16=True)
    p16 = XLNetAnySubset(cached.net, mask_id=MASK, device="cpu", bf16=True, cache=False)
    ids = torch.tensor([1, MASK, MASK, 2, MASK, 5])
    masked = torch.tensor([1, 2, 4])
    pa = torch.softmax(c16.verify(ids, masked, 0, masked), -1)
    pb = torch.softmax(p16.verify(ids, masked, 0, masked), -1)
    assert (pa - pb).abs().max() < 0.02


def test_accepted_drafts_are_committed_from_the_verify_pass(pair: tuple[XLNetAnySubset, XLNetAnySubset]) -> None:
    cached, plain = pair
    assert cached.cache is not None
    ids = torch.tensor([1, MASK, MASK, MASK, MASK, 2, MASK, MASK, 3])
    masked = torch.tensor([1, 2, 3, 4, 6, 7])
    cached.draft(ids, masked, 0, masked[:4])
    drafted = ids.clone()
    drafted[masked[:4]] = torch.tensor([5, 6, 7, 8])
    cached.verify(drafted, masked, 0, masked[:4])
    before = cached.cache.reused
    after = ids.clone()
    after[masked[:3]] = torch.tensor([5, 6, 9])  # two drafts accepted, the third resampled
    assert close(cached.draft(after, masked, 3, masked[3:]), plain.draft(after, masked, 3, masked[3:]))
    assert cached.cache.reused == before + 2


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    layout=st.lists(st.booleans(), min_size=3, max_size=20).filter(lambda m: 1 < sum(m) < len(m)),
    width=st.integers(1, 5),
    seed=st.integers(0, 1000),
)
def test_draft_many_is_each_sequences_draft(
    pair: tuple[XLNetAnySubset, XLNetAnySubset], layout: list[bool], width: int, seed: int
) -> None:
    """Beam search's batched pass: hypotheses of one problem that share a decoded prefix (or none), at different
    decoded counts, each against its own full forward; the cache still serves single passes afterwards."""
    cached, plain = pair
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, MASK, (len(layout),), generator=g)
    masked = torch.tensor([i for i, m in enumerate(layout) if m])
    M = masked.shape[0]
    shared = int(torch.randint(0, M, (), generator=g))  # decoded tokens every hypothesis shares
    hyps, ns = [], []
    for _ in range(width):
        ids = base.clone()
        ids[masked[shared:]] = torch.randint(0, MASK, (M - shared,), generator=g)
        n = int(torch.randint(shared, M, (), generator=g))
        ids[masked[n:]] = MASK
        hyps.append(ids)
        ns.append(n)
    before = cached.nfe
    got = cached.draft_many(hyps, masked, ns)  # (B, V)
    assert cached.nfe == before + 1
    for b, (ids, n) in enumerate(zip(hyps, ns, strict=True)):
        assert close(got[b : b + 1], plain.draft(ids, masked, n, masked[n : n + 1]))
    ids, n = hyps[-1], ns[-1]
    assert close(cached.draft(ids, masked, n, masked[n : n + 1]), plain.draft(ids, masked, n, masked[n : n + 1]))


def test_beam_search_takes_one_pass_per_step_and_finds_the_same(pair: tuple[XLNetAnySubset, XLNetAnySubset]) -> None:
    cached, plain = pair
    ids = torch.tensor([3, 7, 1, MASK, MASK, MASK, MASK, MASK, 2, 9, 4])
    problem = FillProblem(ids, torch.tensor([3, 4, 5, 6, 7]))
    beam = DecodeConfig(decoder="beam", beam=4, temperature=0)
    g = torch.Generator().manual_seed(0)
    batched, stats = decode(cached, problem, beam, g)
    single, reference = decode(OnePassPerHypothesis(cached), problem, beam, g)  # type: ignore[arg-type]
    assert batched.tolist() == single.tolist()
    assert [f for _, f in stats.extra["nbest"]] == [f for _, f in reference.extra["nbest"]]
    assert stats.nfe == 5 < reference.nfe  # one pass per position
    batched, stats = decode(plain, problem, beam, g)  # no cache: one full forward per hypothesis, counted so
    assert batched.tolist() == single.tolist() and stats.nfe == reference.nfe


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 1000), width=st.integers(2, 4))
def test_beam_steps_reuse_their_branch_rows_and_stay_exact(
    pair: tuple[XLNetAnySubset, XLNetAnySubset], seed: int, width: int
) -> None:
    """Beam search's passes step after step: each hypothesis extends a surviving one by a token (they part and
    meet again, as beams do), each pass against every hypothesis's full forward, and each pass computes one new
    row a hypothesis (the rows of earlier steps come from the branch store; rows all hypotheses come to share are
    committed from it, without a pass of their own)."""
    cached, plain = pair
    cache = cached.cache
    assert cache is not None
    g = torch.Generator().manual_seed(seed)
    layout = [False] * 3 + [True] * 8 + [False] * 3
    base = torch.randint(0, MASK, (len(layout),), generator=g)
    masked = torch.tensor([i for i, m in enumerate(layout) if m])
    base[masked] = MASK
    cached.draft(base, masked, 0, masked[:1])  # a new problem: the prompt's pass
    hyps = [base.clone() for _ in range(width)]
    for n in range(1, masked.shape[0]):
        parents = torch.randint(0, width, (width,), generator=g).tolist() if n % 3 else [0] * width
        hyps = [hyps[p].clone() for p in parents]
        for h in hyps:
            h[masked[n - 1]] = int(torch.randint(0, 3, (), generator=g))  # few tokens: paths meet again
        before = cache.branch_rows
        got = cached.draft_many(hyps, masked, [n] * width)
        assert cache.branch_rows - before <= width  # at most the newest row of each hypothesis
        for b, ids in enumerate(hyps):
            assert close(got[b : b + 1], plain.draft(ids, masked, n, masked[n : n + 1]))


def test_without_the_branch_store_every_step_computes_every_row(pair: tuple[XLNetAnySubset, XLNetAnySubset]) -> None:
    """The negative control of the test above: with the store emptied before each pass, the rows computed grow
    with the step (the same logits)."""
    cached, plain = pair
    cache = cached.cache
    assert cache is not None
    g = torch.Generator().manual_seed(3)
    base = torch.randint(0, MASK, (12,), generator=g)
    masked = torch.arange(2, 10)
    base[masked] = MASK
    cached.draft(base, masked, 0, masked[:1])
    hyps = [base.clone() for _ in range(3)]
    for b, h in enumerate(hyps):
        h[masked[:5]] = torch.tensor([b, 1, 2, 3, 4])  # parted at the first token: nothing shared
    counts = []
    for n in range(1, 6):
        cache._branch = {}
        before = cache.branch_rows
        got = cached.draft_many(hyps, masked, [n] * 3)
        counts.append(cache.branch_rows - before)
        for b, ids in enumerate(hyps):
            assert close(got[b : b + 1], plain.draft(ids, masked, n, masked[n : n + 1]))
    assert counts == [3, 6, 9, 12, 15]
