"""S2D2 acceptance and residual resampling, with hand-built probabilities."""

from __future__ import annotations

import pytest
import torch

from infill.decoding.s2d2 import accept_prefix, first_masked_span
from infill.decoding.sampling import residual

torch.set_num_threads(1)


def dist(*ps: float) -> torch.Tensor:
    return torch.tensor(ps, dtype=torch.float64)


def test_identical_densities_accept_everything() -> None:
    p = torch.stack([dist(0.5, 0.5, 0, 0), dist(0.1, 0.2, 0.3, 0.4), dist(0, 0, 0, 1)])  # (3, 4)
    drafts = torch.tensor([1, 0, 3])
    for seed in range(20):
        assert accept_prefix(p, p.clone(), drafts, torch.Generator().manual_seed(seed)) == (3, None)


def test_rejects_at_third_accepts_first_two() -> None:
    p = torch.stack([dist(1, 0, 0, 0), dist(0, 1, 0, 0), dist(0, 0, 1, 0)])
    q = torch.stack([dist(1, 0, 0, 0), dist(0, 1, 0, 0), dist(0.25, 0, 0, 0.75)])  # q(draft 2) = 0
    for seed in range(20):
        accepted, fix = accept_prefix(p, q, torch.tensor([0, 1, 2]), torch.Generator().manual_seed(seed))
        assert accepted == 2
        assert fix in (0, 3)  # (q - p)+ puts mass only on 0 and 3


def test_residual_is_positive_part_normalised() -> None:
    q, p = dist(0.2, 0.5, 0.3), dist(0.6, 0.3, 0.1)
    r = residual(q, p)
    assert torch.allclose(r, dist(0.0, 0.5, 0.5))
    assert torch.allclose(residual(p, p), p)  # no mass in (q - p)+: falls back to q


def test_one_position_output_follows_q_and_accept_rate_is_overlap() -> None:
    """Speculative sampling: the kept token is distributed as q, accepted with probability sum min(p, q)."""
    p, q = dist(0.6, 0.3, 0.1), dist(0.2, 0.5, 0.3)
    gen = torch.Generator().manual_seed(0)
    n = 6000
    drafts = torch.multinomial(p, n, replacement=True, generator=gen)
    counts = torch.zeros(3)
    accepted_total = 0
    for x in drafts.tolist():
        accepted, fix = accept_prefix(p[None], q[None], torch.tensor([x]), gen)
        accepted_total += accepted
        counts[x if accepted else fix] += 1
    assert abs(accepted_total / n - 0.6) < 0.03  # sum min(p, q) = 0.2 + 0.3 + 0.1
    assert (counts / n - q.float()).abs().sum() / 2 < 0.03  # total variation to q


def test_greedy_one_hots_accept_iff_argmax_agrees() -> None:
    a, b = dist(0, 1, 0), dist(0, 0, 1)
    gen = torch.Generator().manual_seed(0)
    assert accept_prefix(a[None], a[None], torch.tensor([1]), gen) == (1, None)
    assert accept_prefix(a[None], b[None], torch.tensor([1]), gen) == (0, 2)


def test_tempering_gamma_zero_accepts_anything() -> None:
    """gamma < 1 is lenient (lossy); gamma = 0 accepts even a draft the verifier gives probability 0."""
    p, q = dist(1, 0, 0), dist(0, 1, 0)
    assert accept_prefix(p[None], q[None], torch.tensor([0]), torch.Generator().manual_seed(0), gamma=0.0) == (
        1,
        None,
    )
    p2, q2 = dist(0.5, 0.5, 0), dist(0.25, 0.75, 0)  # ratio 0.5 at token 0
    rates = []
    for gamma in (1.0, 0.25):
        gen = torch.Generator().manual_seed(1)
        rates.append(sum(accept_prefix(p2[None], q2[None], torch.tensor([0]), gen, gamma)[0] for _ in range(2000)))
    assert abs(rates[0] / 2000 - 0.5) < 0.04
    assert abs(rates[1] / 2000 - 0.5**0.25) < 0.04


@pytest.mark.parametrize(
    ("masked", "span"),
    [
        ([0, 0, 0, 0], (0, 0)),
        ([1, 1, 1, 1], (0, 4)),
        ([0, 1, 1, 0, 1], (1, 2)),
        ([0, 0, 0, 1], (3, 1)),
    ],
)
def test_first_masked_span(masked: list[int], span: tuple[int, int]) -> None:
    assert first_masked_span(torch.tensor(masked, dtype=torch.bool)) == span
