"""The one acceptance routine (infill.decoding.speculative.accept) with hand-built probabilities: the rule, the
bonus row, point-mass drafts, the lossy settings, and each order of random numbers replayed draw by draw."""

from __future__ import annotations

import pytest
import torch

from infill.decoding.sampling import residual
from infill.decoding.speculative import Acceptance, Order, Proposal, accept
from infill.errors import DecodeError

torch.set_num_threads(1)
AS_TESTED = Acceptance(order="as-tested")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def dist(*ps: float) -> torch.Tensor:
    return torch.tensor(ps, dtype=torch.float64)


# --- the rule ------------------------------------------------------------------------------------------------


def test_rejects_at_3_and_resamples_from_the_residual() -> None:
    p = torch.tensor([[0.7, 0.1, 0.1, 0.1]] * 5, dtype=torch.float64)  # (k=5, V=4)
    q = p.clone()
    q[3] = torch.tensor([0.0, 0.5, 0.5, 0.0])  # the draft (token 0) is impossible under q at 3
    drafts = torch.zeros(5, dtype=torch.long)
    for seed in range(20):
        a, x = accept(Proposal(drafts, p, first_exact=True), q, AS_TESTED, gen(seed))
        assert a == 3  # q == p before 3: ratio 1, always accepted
        assert x in (1, 2)  # (q - p)+ = [0, .4, .4, 0]


def test_accepts_all_without_a_bonus_row_and_with_one() -> None:
    p = torch.softmax(torch.randn(4, 6, generator=gen(1), dtype=torch.float64), -1)
    drafts = torch.tensor([0, 1, 2, 3])
    assert accept(Proposal(drafts, p, first_exact=True), p.clone(), AS_TESTED, gen()) == (4, None)
    bonus = torch.cat([p, dist(0, 0, 0, 0, 0, 1)[None]])  # a fifth row: the bonus token is drawn from it
    assert accept(Proposal(drafts, p, first_exact=True, bonus=True), bonus, AS_TESTED, gen()) == (4, 5)


def test_first_draft_is_accepted_unconditionally_only_when_it_is_the_verifiers_own_sample() -> None:
    p = torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    drafts = torch.tensor([0, 0])
    assert accept(Proposal(drafts, p, first_exact=True), q, AS_TESTED, gen())[0] == 2  # Lemma 1: no test at 0
    assert accept(Proposal(drafts, p), q, AS_TESTED, gen()) == (0, 1)  # a bigram draft: tested


def test_epsilon_and_gamma_are_lossy_and_accept_more() -> None:
    p = torch.tensor([[0.5, 0.5]] * 3, dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5], [0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    drafts = torch.tensor([0, 0, 0])
    assert accept(Proposal(drafts, p, first_exact=True), q, AS_TESTED, gen())[0] == 1
    assert accept(Proposal(drafts, p, first_exact=True), q, Acceptance(epsilon=1.0), gen()) == (3, None)
    assert accept(Proposal(drafts, p), q, Acceptance(order="span-first", gamma=0.0), gen()) == (3, None)


@pytest.mark.parametrize("order", ["as-tested", "span-first"])
def test_acceptance_rate_is_min_1_q_over_p(order: Order) -> None:
    p = torch.tensor([[0.5, 0.5], [0.8, 0.2]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5], [0.2, 0.8]], dtype=torch.float64)  # ratio at token 0: 0.25
    g = gen(7)
    trials = 4000
    proposal = Proposal(torch.tensor([0, 0]), p, first_exact=True)
    accepted = sum(accept(proposal, q, Acceptance(order=order), g)[0] == 2 for _ in range(trials))
    assert abs(accepted / trials - 0.25) < 0.03


def test_a_point_mass_draft_is_accepted_with_q_and_corrected_from_q_without_it() -> None:
    q = dist(0.2, 0.5, 0.3)[None]  # (1, 3)
    g = gen(3)
    trials = 6000
    kept = torch.zeros(3)
    for _ in range(trials):
        a, x = accept(Proposal(torch.tensor([1])), q, AS_TESTED, g)
        kept[1 if a else x] += 1
        assert a or x in (0, 2)
    assert (kept / trials - q[0].float()).abs().sum() / 2 < 0.03  # speculative sampling: the token follows q


def test_a_shape_mismatch_is_one_error() -> None:
    p = torch.full((2, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(DecodeError, match="2 drafts need 2 or 3 verifier rows"):
        accept(Proposal(torch.tensor([0, 1]), p), p[:1], AS_TESTED, gen())


def test_coupled_acceptance_prefix_correction_and_bonus() -> None:
    coupled = Acceptance(order="coupled")
    q = torch.stack([dist(0.0, 1.0, 0.0), dist(0.5, 0.0, 0.5), dist(1.0, 0.0, 0.0)])  # (3, V)
    u = torch.tensor([0.3, 0.7, 0.1], dtype=torch.float64)  # picks: 1, 2, 0
    assert accept(Proposal(torch.tensor([1, 2])), q, coupled, u=u) == (2, 0)  # both drafts, then the bonus
    assert accept(Proposal(torch.tensor([1, 0])), q, coupled, u=u) == (1, 2)  # corrected to the pick
    assert accept(Proposal(torch.tensor([0, 2])), q, coupled, u=u) == (0, 1)  # nothing after a wrong first
    assert accept(Proposal(torch.tensor([1, 2, 0])), q, coupled, u=u) == (3, None)  # no bonus row
    with pytest.raises(DecodeError):
        accept(Proposal(torch.tensor([1])), q, coupled, u=u)


# --- the order of the random numbers, replayed ---------------------------------------------------------------


def _case(seed: int, size: int = 5, vocab: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Peaky random p and q (size, vocab) and drafts sampled from p: rejections are common."""
    g = gen(1000 + seed)
    p = torch.softmax(3 * torch.randn(size, vocab, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(3 * torch.randn(size + 1, vocab, generator=g, dtype=torch.float64), -1)
    drafts = torch.multinomial(p, 1, generator=g).squeeze(-1)
    return p, q, drafts


def _replay(
    order: Order, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, g: torch.Generator, first_exact: bool
) -> tuple[int, int | None]:
    """The documented draws, written out: uniforms as tested or for the whole span first, then one multinomial."""
    size = int(drafts.numel())
    upfront = torch.rand(size, generator=g, dtype=torch.float64).tolist() if order == "span-first" else None
    for i in range(size):
        if i == 0 and first_exact:
            continue
        x = int(drafts[i])
        r = upfront[i] if upfront is not None else float(torch.rand((), generator=g, dtype=torch.float64))
        if not r < min(1.0, float(q[i, x] / p[i, x])):
            return i, int(torch.multinomial(residual(q[i], p[i]), 1, generator=g))
    if q.shape[0] > size:
        return size, int(torch.multinomial(q[size], 1, generator=g))
    return size, None


@pytest.mark.parametrize("order", ["as-tested", "span-first"])
@pytest.mark.parametrize("first_exact", [False, True])
@pytest.mark.parametrize("bonus", [False, True])
def test_each_order_draws_what_its_documentation_says(order: Order, first_exact: bool, bonus: bool) -> None:
    rejected_early = 0
    for seed in range(40):
        p, q, drafts = _case(seed)
        q = q if bonus else q[:-1]
        ours, theirs = gen(seed), gen(seed)
        got = accept(Proposal(drafts, p, first_exact=first_exact, bonus=bonus), q, Acceptance(order=order), ours)
        assert got == _replay(order, p, q, drafts, theirs, first_exact), seed
        assert torch.equal(ours.get_state(), theirs.get_state()), seed  # and nothing more is drawn
        rejected_early += got[0] < int(drafts.numel()) - 1
    assert rejected_early > 10  # the cases exercise rejections before the last draft


def test_the_orders_draw_differently_after_an_early_rejection() -> None:
    """Both orders are exact, but they consume the generator differently: after a rejection before the span's
    end, "span-first" has drawn the uniforms of the whole span, so what the same seed samples next differs."""
    differ = 0
    for seed in range(40):
        p, q, drafts = _case(seed)
        q = q[:-1]
        states = []
        for order in ("as-tested", "span-first"):
            g = gen(seed)
            a, _ = accept(Proposal(drafts, p), q, Acceptance(order=order), g)  # type: ignore[arg-type]
            states.append(g.get_state())
        if a < int(drafts.numel()) - 1:
            differ += not torch.equal(*states)
            assert not torch.equal(*states), seed
    assert differ > 10
