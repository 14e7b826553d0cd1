"""The coupling core of PTP (infill.decoding.coupling): inverse-CDF pick, u extraction, coupled acceptance."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from infill.decoding.coupling import draw_u, extract_u, pick
from infill.decoding.sampling import probs
from infill.errors import DecodeError
from infill.models.ptp import u_bits

torch.set_num_threads(1)


def dist(*ps: float) -> torch.Tensor:
    return torch.tensor(ps, dtype=torch.float64)


@st.composite
def distributions(draw: st.DrawFn) -> torch.Tensor:
    """A (V,) distribution, V in 2..12, some entries exactly 0 (a mask token, top-k / top-p cuts), at least one
    positive; weights span many orders of magnitude so the float64 round-off at the interval ends is hit."""
    v = draw(st.integers(2, 12))
    exps = draw(st.lists(st.one_of(st.none(), st.integers(-30, 0)), min_size=v, max_size=v))
    w = torch.tensor([0.0 if e is None else 10.0**e for e in exps], dtype=torch.float64)
    if float(w.sum()) == 0:
        w[draw(st.integers(0, v - 1))] = 1.0
    return w / w.sum()


@settings(max_examples=150, deadline=None)
@given(q=distributions(), data=st.data())
def test_pick_of_extracted_u_is_the_token(q: torch.Tensor, data: st.DataObject) -> None:
    """Every token whose float64 interval [F_{t-1}, F_t) is not empty (a weight below 1e-16 of the running sum
    vanishes in float64: no u can ever pick it) comes back from pick(extract_u(t, q, noise), q)."""
    f = torch.cumsum(q, 0).tolist()
    support = [i for i in range(q.numel()) if f[i] > (f[i - 1] if i else 0.0)]
    t = data.draw(st.sampled_from(support))
    noise = data.draw(st.sampled_from([0.0, 0.5, 1.0 - 2**-53]) | st.floats(0.0, 1.0, exclude_max=True))
    u = extract_u(torch.tensor(t), q, torch.tensor(noise, dtype=torch.float64))
    assert 0.0 <= float(u) < 1.0
    assert int(pick(u, q)) == t


@settings(max_examples=150, deadline=None)
@given(q=distributions(), u=st.floats(0.0, 1.0, exclude_max=True))
def test_zero_probability_tokens_are_never_picked(q: torch.Tensor, u: float) -> None:
    t = int(pick(torch.tensor(u, dtype=torch.float64), q))
    assert float(q[t]) > 0


def test_pick_is_the_inverse_cdf_at_the_interval_ends() -> None:
    q = dist(0.25, 0.0, 0.5, 0.25, 0.0)  # F = .25 .25 .75 1 1
    cases = {0.0: 0, 0.2499: 0, 0.25: 2, 0.7499: 2, 0.75: 3, 0.99999: 3}
    for u, t in cases.items():
        assert int(pick(torch.tensor(u, dtype=torch.float64), q)) == t, u


def test_pick_clamps_to_the_last_positive_token_when_the_cdf_falls_short() -> None:
    q = dist(0.3, 0.3, 0.3, 0.0)  # sums to 0.9 (round-off taken to the extreme): u above 0.9 -> token 2
    assert int(pick(torch.tensor(0.95, dtype=torch.float64), q)) == 2
    with pytest.raises(DecodeError):
        pick(torch.tensor(0.5, dtype=torch.float64), dist(0.0, 0.0))


def test_pick_follows_q_and_is_batched() -> None:
    q = dist(0.1, 0.6, 0.0, 0.3)
    u = draw_u(200_000, torch.Generator().manual_seed(0))
    counts = torch.bincount(pick(u, q.expand(u.numel(), -1)), minlength=4).double() / u.numel()
    assert torch.allclose(counts, q, atol=0.005)
    assert float(counts[2]) == 0.0


def test_extracted_u_from_samples_is_uniform() -> None:
    """t ~ q, noise ~ U[0,1) -> u = extract_u(t, q, noise) ~ U[0,1): training sees the u's decoding draws."""
    g = torch.Generator().manual_seed(1)
    q = dist(0.05, 0.5, 0.15, 0.3)
    t = torch.multinomial(q, 100_000, replacement=True, generator=g)
    u = extract_u(t, q.expand(t.numel(), -1), torch.rand(t.numel(), generator=g, dtype=torch.float64))
    hist = torch.histc(u.float(), bins=10, min=0, max=1) / u.numel()
    assert torch.allclose(hist, torch.full((10,), 0.1), atol=0.006)
    assert bool((pick(u, q.expand(t.numel(), -1)) == t).all())


def test_u_bits_are_the_32_bit_integer_msb_first() -> None:
    m = 0b1011 << 28 | 5
    bits = u_bits(torch.tensor(m / 2**32, dtype=torch.float64))
    assert bits.shape == (32,)
    assert bits[:4].tolist() == [1.0, -1.0, 1.0, 1.0] and bits[-3:].tolist() == [1.0, -1.0, 1.0]
    u = draw_u(1000, torch.Generator().manual_seed(0))
    back = ((u_bits(u) > 0).long() * (2 ** torch.arange(31, -1, -1))).sum(-1)  # (1000,)
    assert torch.equal(back.double() / 2**32, u)  # draw_u's u are exact 32-bit fractions


def test_transform_is_applied_before_pick() -> None:
    """At temperature 0, pick is the argmax whatever u is; top-k removes tokens from the support."""
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5]])
    for u in (0.0, 0.4, 0.999):
        assert int(pick(torch.tensor([u], dtype=torch.float64), probs(logits, 0.0))[0]) == 1
    u = draw_u(5000, torch.Generator().manual_seed(2))
    topk = pick(u, probs(logits, 1.0, top_k=2).expand(u.numel(), -1))
    assert set(topk.tolist()) == {1, 2}
