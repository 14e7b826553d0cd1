"""Scoring several fills of one problem in few passes (infill.decoding.score_many, XLNetKVCache.verify_many): the
same log-probabilities as one pass per fill, to 1e-5; and the cache a previous request leaves behind gives the
same fills as a fresh model."""

from __future__ import annotations

import pytest
import torch

from infill.config import DecodeConfig
from infill.decoding import decode, score, score_many
from infill.models.base import FillProblem
from infill.models.xlnet import XLNetAnySubset
from tests.fixtures_decode import tiny_xlnet

torch.set_num_threads(1)
V, MASK, PAD = 40, 39, 0


@pytest.fixture(scope="module")
def pair() -> tuple[XLNetAnySubset, XLNetAnySubset]:
    cached = tiny_xlnet(V, n_layer=2, d_model=32, n_head=4, seed=7, init_scale=0.3, pad_id=PAD, max_length=64)
    plain = XLNetAnySubset(cached.net, mask_id=MASK, pad_id=PAD, device="cpu", cache=False)
    return cached, plain


def problem_and_fills(seed: int, count: int) -> tuple[FillProblem, list[torch.Tensor], list[int]]:
    """A problem with 9 masked positions between prompt tokens, and `count` fills of it with the lengths scored
    (a fill's tokens and the pad after them, as retrieval scores a line)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, MASK, (24,), generator=g)
    masked = torch.arange(8, 17)
    ids[masked] = MASK
    fills, lengths = [], []
    for _ in range(count):
        n = int(torch.randint(1, 9, (), generator=g))
        tokens = torch.full((9,), PAD, dtype=torch.long)
        tokens[:n] = torch.randint(1, MASK, (n,), generator=g)
        fills.append(tokens)
        lengths.append(n + 1)
    return FillProblem(ids, masked), fills, lengths


@pytest.mark.parametrize("rows", [4, 24, 1000])  # a pass per fill (a fill's rows exceed 4), a few, one pass
def test_batched_scores_are_the_one_by_one_scores(pair: tuple[XLNetAnySubset, XLNetAnySubset], rows: int) -> None:
    cached, plain = pair
    problem, fills, lengths = problem_and_fills(rows, 7)
    passes: list[int] = []
    before = cached.nfe
    got = score_many(cached, problem, fills, lengths, lambda: passes.append(1), rows=rows)
    assert cached.nfe - before == len(passes)  # every pass is announced before it runs
    expected_passes = {4: 7, 1000: 1}.get(rows)
    if expected_passes is not None:
        assert len(passes) == expected_passes
    else:
        assert 1 < len(passes) < 7
    for tokens, m, batched in zip(fills, lengths, got, strict=True):
        assert batched.shape == (m,)
        for model in (cached, plain):  # the cache's own one-fill pass, and the full forward
            one = score(model, problem, tokens, m)
            assert (batched - one).abs().max() <= 1e-5


def test_a_model_without_batched_verify_scores_one_by_one(pair: tuple[XLNetAnySubset, XLNetAnySubset]) -> None:
    cached, _ = pair

    class OneByOne:
        """The model's draft and verify only: no verify_many."""

        def __getattr__(self, name: str) -> object:
            if name == "verify_many":
                raise AttributeError(name)
            return getattr(cached, name)

    problem, fills, lengths = problem_and_fills(3, 4)
    passes: list[int] = []
    got = score_many(OneByOne(), problem, fills, lengths, lambda: passes.append(1))  # type: ignore[arg-type]
    assert len(passes) == 4
    for tokens, m, each in zip(fills, lengths, got, strict=True):
        assert torch.equal(each, score(cached, problem, tokens, m))


def test_the_cache_a_previous_request_left_gives_a_fresh_models_fill() -> None:
    """A server's model keeps its cache between requests (the relative keys of a prompt of the same length, the
    buffers of the last problem): the next request's fill is that of a model that never filled anything."""
    used = tiny_xlnet(V, n_layer=2, d_model=32, n_head=4, seed=9, init_scale=0.3, pad_id=PAD, max_length=64)
    cfg = DecodeConfig(decoder="beam", beam=3)
    first, _, _ = problem_and_fills(1, 0)
    decode(used, first, cfg, torch.Generator().manual_seed(0))  # the request before
    second, fills, lengths = problem_and_fills(2, 3)  # the same length, another prompt: the next keystroke's
    score_many(used, second, fills, lengths)
    a, _ = decode(used, second, cfg, torch.Generator().manual_seed(0))
    fresh = tiny_xlnet(V, n_layer=2, d_model=32, n_head=4, seed=9, init_scale=0.3, pad_id=PAD, max_length=64)
    b, _ = decode(fresh, second, cfg, torch.Generator().manual_seed(0))
    assert a.tolist() == b.tolist()
