"""Sampling by coupling: the model-agnostic core of Parallel Token Prediction (PTP).

A token is sampled by inverse CDF: t = pick(u, q) = min{ j : F_j > u } with F the cumulative distribution of q
in token-index order and u ~ U[0, 1). Fix one uniform u_k per absolute position k before decoding; then the
output of autoregressive decoding is a deterministic function of the u's, and a drafter that is told the u's
can guess several DEPENDENT tokens at once. A draft d_k is accepted iff d_k == pick(u_k, q_k), q_k being the
verifier's distribution given the accepted tokens before k. Every accepted token is then the verifier's own
inverse-CDF sample for these u's, whatever the drafter did: the output is exactly the autoregressive one (the
drafter changes speed only). No ratio test and no draft probabilities are needed.

`q` must be the distribution AFTER the sampling transform (temperature, top-k, top-p: infill.decoding.sampling
.probs), the same on every side: when u is drawn, when it is extracted for training, when drafts are checked.

Shapes: V = vocabulary size; leading dimensions (...) broadcast between u and q.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.errors import DecodeError

if TYPE_CHECKING:
    import torch

U_SCALE = 2**32  # u = m / 2**32 with m a 32-bit integer, exact in float64 (the drafter reads m's bits)


def pick(u: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Inverse CDF. u (...) in [0, 1), q (..., V) probabilities -> (...) long token ids.

    The cumulative sum is float64 and the search is `searchsorted(F, u, right=True)` (the first j with F_j > u),
    so a token with q_j == 0 (the mask token, tokens cut by top-k / top-p) is never picked: its F_j equals
    F_{j-1} <= u. When round-off leaves F_{V-1} < 1 and u lands above it, the last token with q > 0 is taken."""
    import torch

    qd = q if q.dtype == torch.float64 else q.to(torch.float64)
    f = torch.cumsum(qd, dim=-1)  # (..., V)
    ud = (u if u.dtype == torch.float64 else u.to(torch.float64))[..., None]  # (..., 1)
    idx = torch.searchsorted(f, ud.expand(*f.shape[:-1], 1).contiguous(), right=True).squeeze(-1)  # (...)
    v = qd.shape[-1]
    if not bool((idx >= v).any()):
        return idx
    positive = qd > 0  # (..., V) only when u fell above F_{V-1} somewhere (round-off, or no mass at all)
    if not bool(positive.any(dim=-1).all()):
        raise DecodeError("pick: a distribution with no positive probability")
    last = v - 1 - torch.flip(positive, dims=[-1]).to(torch.int64).argmax(dim=-1)  # (...) last token with q > 0
    return torch.where(idx >= v, last, idx)


def extract_u(t: torch.Tensor, q: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The uniform that makes `pick` return t: u = F_{t-1} + noise * q(t), computed from the same float64
    cumulative sum as `pick`, and kept strictly below F_t so that pick(extract_u(t, q, noise), q) == t for every
    noise in [0, 1) and every t with q(t) > 0. t (...) long, q (..., V), noise (...) in [0, 1) -> u (...) float64.

    With noise ~ U[0, 1) and t ~ q, u is exactly U[0, 1) (the posterior of the sampling uniform given t), so u's
    extracted from teacher samples are distributed as at decoding time. A token with q(t) == 0 gets u = F_{t-1}
    (pick then returns the next token with q > 0): that only happens on training text the teacher could not
    sample, and the drafter is trained towards t regardless."""
    import torch

    qd = q.to(torch.float64)
    f = torch.cumsum(qd, dim=-1)  # (..., V)
    hi = f.gather(-1, t[..., None]).squeeze(-1)  # (...) F_t
    # F_{t-1} as the same cumsum holds it: pick compares u against exactly these values
    lo = torch.cat([torch.zeros_like(f[..., :1]), f[..., :-1]], dim=-1).gather(-1, t[..., None]).squeeze(-1)
    u = lo + noise.to(torch.float64) * (hi - lo)
    below = torch.nextafter(hi, torch.zeros_like(hi))  # the largest float64 < F_t
    # F_t of the last token can round above 1; u stays in [0, 1) like any uniform
    below = below.clamp(max=1.0 - 2.0**-53)
    return torch.where(hi > lo, torch.minimum(u, below).clamp(min=0.0), lo)


def draw_u(n: int, generator: torch.Generator) -> torch.Tensor:
    """n uniforms u = m / 2**32 from 32-bit integers m (exact in float64) -> (n,) float64."""
    import torch

    m = torch.randint(0, U_SCALE, (n,), generator=generator, dtype=torch.int64)  # (n,)
    return m.to(torch.float64) / U_SCALE
