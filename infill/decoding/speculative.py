"""Speculative sampling in one place: a draft proposes tokens with their draft probabilities (a `Proposal`), a
verifier gives its own probabilities q at the same positions, and `accept` decides for every sampler that
verifies drafts: ASSD with each of its drafts (infill.decoding.assd), S2D2, SSMD and PTP.

The rule. Left to right, draft i is accepted with probability min(1, (q_i(d_i) / p_i(d_i))^gamma + epsilon). At
the first rejection a token is drawn from (q_i - p_i)+ normalised (the correction) and the scan stops. When every
draft is accepted and the verifier gave one row more than there are drafts, that row gives a bonus token drawn
from q itself. With gamma = 1 and epsilon = 0 every token it returns follows the verifier exactly (speculative
sampling: ASSD's Theorem 2); gamma < 1 (S2D2's --gamma) and epsilon > 0 (ASSD's --epsilon) accept more and are
lossy. A draft whose probabilities are point masses (lookup, PTP: `Proposal.p` is None) is accepted with
probability q_i(d_i), and its correction is drawn from q_i without d_i.

Where the random numbers come from (`Acceptance.order`), which fixes what a given seed samples:

- "as-tested" (ASSD and its drafts): one uniform per tested draft, drawn as it is tested (none for a first draft
  that is the verifier's own sample, `Proposal.first_exact`: Lemma 1), then one multinomial draw for the
  correction or the bonus. A rejection at draft i has drawn i + 1 uniforms (i without a test at 0).
- "span-first" (S2D2, SSMD): a uniform for every draft of the span, drawn before any test (one torch.rand(S)),
  then one multinomial draw for the correction. A rejection at draft i has drawn all S uniforms.
- "coupled" (PTP): nothing is drawn here. The uniforms u were fixed before decoding, one per position, and draft i
  is accepted iff it equals the inverse-CDF sample pick(u_i, q_i) (infill.decoding.coupling); the first position
  not accepted takes pick(u_i, q_i). For a point-mass draft that is the same rule: pick(u_i, q_i) == d_i has
  probability q_i(d_i), and given that it fails, pick(u_i, q_i) follows q_i without d_i.

The orders give different fills for the same seed (both are exact), so each sampler keeps the one its seeded
outputs were made with; tests/test_speculative.py replays each order draw by draw.

Shapes: L = drafts, V = vocabulary size; q has L rows, or L + 1 with the bonus row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from infill.decoding.sampling import draw, residual, sample, uniform
from infill.errors import DecodeError

if TYPE_CHECKING:
    import torch

Order = Literal["as-tested", "span-first", "coupled"]


@dataclass(frozen=True)
class Proposal:
    """What a draft source proposes: tokens for the next positions, the probabilities they were drawn from, and
    how the verification treats them.

    tokens:      (L,) long, the drafts, in order.
    p:           (L, V) float64 draft probabilities (after the same sampling transform as the verifier's), or
                 None for point masses at `tokens` (deterministic drafts: prompt lookup, PTP's slots).
    first_exact: tokens[0] is a sample of the verifier's own distribution at that position (ASSD's model draft:
                 Lemma 1), so it is accepted without a test or a draw.
    bonus:       the verifier is asked for one row more than there are drafts: a bonus token when all are
                 accepted.
    passes:      forward passes the draft cost (counted in the decoder's stats).
    """

    tokens: torch.Tensor
    p: torch.Tensor | None = None
    first_exact: bool = False
    bonus: bool = False
    passes: int = 0

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @classmethod
    def sampled(
        cls, p: torch.Tensor, generator: torch.Generator, *, first_exact: bool = False, passes: int = 0
    ) -> Proposal:
        """Drafts drawn from `p` (L, V), one multinomial draw for all rows (each row independently; none when every
        row is one-hot: `draw`)."""
        return cls(draw(p, generator), p, first_exact=first_exact, passes=passes)


@dataclass(frozen=True)
class Acceptance:
    """How a sampler tests drafts: the order of its random numbers (module docstring) and its lossy settings."""

    order: Order = "as-tested"
    epsilon: float = 0.0  # LOSSY when > 0: added to the acceptance ratio
    gamma: float = 1.0  # LOSSY when < 1: the acceptance ratio is raised to this power


def accept(
    proposal: Proposal,
    q: torch.Tensor,
    rule: Acceptance,
    generator: torch.Generator | None = None,
    u: torch.Tensor | None = None,
) -> tuple[int, int | None]:
    """Test `proposal` against the verifier's probabilities q (L or L + 1, V) float64 (module docstring).

    `generator` draws the random numbers ("as-tested", "span-first"); "coupled" reads the uniforms `u` (L or
    L + 1,) float64 instead, one per row of q. Returns (a, token): the first `a` drafts are accepted; `token` is
    the correction at position a after a rejection, the bonus token when all L were accepted and q has a row
    more, else None.
    """
    if rule.order == "coupled":
        if u is None:
            raise DecodeError("coupled acceptance needs the uniforms u")
        return _coupled(proposal.tokens, u, q)
    if generator is None:
        raise DecodeError(f"{rule.order} acceptance needs a generator")
    import torch

    drafts = proposal.tokens.tolist()
    size = len(drafts)
    if q.shape[0] not in (size, size + 1):
        raise DecodeError(f"accept: {size} drafts need {size} or {size + 1} verifier rows, got {q.shape[0]}")
    drawn = torch.rand(size, generator=generator, dtype=torch.float64) if rule.order == "span-first" else None
    p = proposal.p
    for i, x in enumerate(drafts):
        if i == 0 and proposal.first_exact:
            continue
        p_x = 1.0 if p is None else float(p[i, x])
        ratio = (float(q[i, x]) if p is None else float(q[i, x] / p[i, x])) if p_x > 0 else 1.0
        if rule.gamma != 1.0 and ratio < 1.0:  # a ratio of 1 or more accepts whatever gamma (and would overflow)
            ratio = ratio**rule.gamma
        r = float(drawn[i]) if drawn is not None else uniform(generator)
        if not r < min(1.0, ratio + rule.epsilon):
            draft_row = p[i] if p is not None else torch.zeros_like(q[i]).index_fill_(0, torch.tensor([x]), 1.0)
            return i, int(sample(residual(q[i], draft_row)[None, :], generator)[0])
    if q.shape[0] > size:
        return size, int(sample(q[size : size + 1], generator)[0])
    return size, None


def _coupled(drafts: torch.Tensor, u: torch.Tensor, q: torch.Tensor) -> tuple[int, int | None]:
    """The "coupled" order: drafts[:a] is the longest prefix with drafts[k] == pick(u[k], q[k]); then the pick at
    the first position not accepted (a correction, or the bonus when every draft matched and q has a row more),
    or None when a == len(u)."""
    from infill.decoding.coupling import pick

    d, m = int(drafts.numel()), int(u.numel())
    if q.shape[0] != m or m not in (d, d + 1):
        raise DecodeError(f"coupled accept: {d} drafts need {d} or {d + 1} rows of u and q, got {m} and {q.shape[0]}")
    picks = pick(u, q).tolist()  # (M,)
    guess = drafts.tolist()
    a = 0
    while a < d and guess[a] == picks[a]:
        a += 1
    return a, (picks[a] if a < m else None)
