"""S2D2 routing (S2D2 paper, Algorithm 4): at each denoising step, is a verifier forward worth its cost?

Estimate the tokens a verification would accept on the first masked span C_t:
    K^ = sum_k prod_{i<=k} alpha_i
    entropy estimator: alpha_i = exp(-beta * H_i / log V)   (H_i: entropy of the draft at span position i)
    margin estimator:  alpha_i = 1[top1_i - top2_i >= tau_margin]
Score: static s = K^ - c;  dynamic s = K^ - c * N_hi  (N_hi: masked positions of the block with confidence
> tau, which confidence decoding would unmask anyway).

Policies (DecodeConfig.routing = "NAME" or "NAME:key=value,key=value", keys = RoutingConfig fields):
  always / never   verify at every step / never (never = plain confidence decoding)
  min-span         |C_t| >= min_span
  score-static     K^ - c >= tau_score
  score-dynamic    K^ - c * N_hi >= tau_score
  hysteresis       switch on when s >= tau_on, off when s < tau_off (s: the `score` variant, dynamic default)
  ucb              UCB1 contextual bandit over bins of (span length, block progress, mean entropy), arms
                   {skip, verify}, reward = tokens gained / forwards spent in the step
Defaults follow the authors' scripts: margin 0.05, beta 1, c 2, dynamic score, tau_on / tau_off 0 / -1.
Routers are small stateful objects made per decode call, so decoding stays a pure function of its inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from infill.errors import InputError
from infill.routing_options import POLICIES, RoutingConfig, parse_routing

__all__ = ["POLICIES", "RoutingConfig", "Router", "features", "make_router", "parse_routing", "score"]

if TYPE_CHECKING:
    import torch

# ---- estimators
# --------------------------------------------------------------------------------------------------


def normalized_entropy(pr: torch.Tensor) -> torch.Tensor:
    """(S, V) probabilities -> (S,) H_i / log V in [0, 1]."""
    import torch

    h = -(pr * torch.log(pr.clamp_min(1e-30))).sum(-1)  # (S,) nats
    return h / math.log(pr.shape[-1])


def alphas_entropy(pr: torch.Tensor, beta: float) -> torch.Tensor:
    """(S, V) draft probabilities -> (S,) alpha_i = exp(-beta * H_i / log V)."""
    import torch

    return torch.exp(-beta * normalized_entropy(pr))


def alphas_margin(pr: torch.Tensor, tau_margin: float) -> torch.Tensor:
    """(S, V) -> (S,) alpha_i = 1[top1 - top2 >= tau_margin]."""
    top2 = pr.topk(2, dim=-1).values  # (S, 2)
    return ((top2[:, 0] - top2[:, 1]) >= tau_margin).to(pr.dtype)


def k_hat(alphas: torch.Tensor) -> float:
    """K^ = sum_k prod_{i<=k} alpha_i: the expected accepted prefix if alpha_i were acceptance rates."""
    import torch

    return float(torch.cumprod(alphas, dim=0).sum())


@dataclass(frozen=True)
class RouteFeatures:
    span_len: int  # |C_t|
    k_hat: float  # K^ from the configured estimator
    n_hi: int  # masked positions of the block with confidence > tau
    progress: float  # fraction of the block's generated positions already decoded, in [0, 1]
    entropy: float  # mean normalised entropy H_i / log V over the span, in [0, 1]


def features(span_probs: torch.Tensor, n_hi: int, progress: float, rc: RoutingConfig) -> RouteFeatures:
    """span_probs (S, V): draft probabilities (untempered by greedy one-hots) on the first masked span."""
    import torch

    pr = span_probs.to(torch.float64)  # (S, V)
    alphas = alphas_entropy(pr, rc.beta) if rc.estimator == "entropy" else alphas_margin(pr, rc.margin)
    return RouteFeatures(
        span_len=int(pr.shape[0]),
        k_hat=k_hat(alphas),
        n_hi=n_hi,
        progress=progress,
        entropy=float(normalized_entropy(pr).mean()),
    )


def score(f: RouteFeatures, rc: RoutingConfig, variant: Literal["static", "dynamic"]) -> float:
    return f.k_hat - rc.c if variant == "static" else f.k_hat - rc.c * f.n_hi


# ---- policies
# ----------------------------------------------------------------------------------------------------


class Router(Protocol):
    def decide(self, f: RouteFeatures) -> bool:
        """True = run the verifier at this step."""
        ...

    def update(self, verified: bool, tokens: int, cost: int) -> None:
        """Feedback after the step: tokens unmasked and forwards spent (draft + verifier when verified)."""
        ...


class Constant:
    def __init__(self, verify: bool) -> None:
        self.verify = verify

    def decide(self, f: RouteFeatures) -> bool:
        return self.verify and f.span_len > 0

    def update(self, verified: bool, tokens: int, cost: int) -> None:
        return None


class MinSpan:
    def __init__(self, rc: RoutingConfig) -> None:
        self.rc = rc

    def decide(self, f: RouteFeatures) -> bool:
        return f.span_len >= self.rc.min_span

    def update(self, verified: bool, tokens: int, cost: int) -> None:
        return None


class ScoreThreshold:
    def __init__(self, rc: RoutingConfig, variant: Literal["static", "dynamic"]) -> None:
        self.rc, self.variant = rc, variant

    def decide(self, f: RouteFeatures) -> bool:
        return score(f, self.rc, self.variant) >= self.rc.tau_score

    def update(self, verified: bool, tokens: int, cost: int) -> None:
        return None


class Hysteresis:
    """Off until s >= tau_on, then on until s < tau_off (tau_off <= tau_on avoids flapping)."""

    def __init__(self, rc: RoutingConfig) -> None:
        self.rc, self.on = rc, False

    def decide(self, f: RouteFeatures) -> bool:
        s = score(f, self.rc, self.rc.score)
        self.on = s >= self.rc.tau_off if self.on else s >= self.rc.tau_on
        return self.on

    def update(self, verified: bool, tokens: int, cost: int) -> None:
        return None


Context = tuple[int, int, int]


class UCB:
    """UCB1 per context bin; arm 0 = skip (confidence step), arm 1 = verify. Untried arms go first, verify
    before skip."""

    def __init__(self, rc: RoutingConfig) -> None:
        self.rc = rc
        self.n: dict[Context, list[int]] = {}
        self.total: dict[Context, list[float]] = {}
        self.last: tuple[Context, int] | None = None

    @staticmethod
    def context(f: RouteFeatures) -> Context:
        span_bin = min(3, int(math.log2(max(f.span_len, 1))))  # 1 | 2-3 | 4-7 | 8+
        progress_bin = min(2, int(f.progress * 3))  # thirds of the block
        entropy_bin = 0 if f.entropy < 0.1 else 1 if f.entropy < 0.3 else 2
        return span_bin, progress_bin, entropy_bin

    def decide(self, f: RouteFeatures) -> bool:
        ctx = self.context(f)
        n = self.n.setdefault(ctx, [0, 0])
        tot = self.total.setdefault(ctx, [0.0, 0.0])
        if n[1] == 0:
            arm = 1
        elif n[0] == 0:
            arm = 0
        else:
            log_n = math.log(n[0] + n[1])
            ucb = [tot[a] / n[a] + self.rc.ucb_c * math.sqrt(2 * log_n / n[a]) for a in (0, 1)]
            arm = 1 if ucb[1] > ucb[0] else 0
        self.last = (ctx, arm)
        return arm == 1

    def update(self, verified: bool, tokens: int, cost: int) -> None:
        if self.last is None:
            return
        ctx, arm = self.last
        self.n[ctx][arm] += 1
        self.total[ctx][arm] += tokens / max(cost, 1)
        self.last = None


def make_router(rc: RoutingConfig) -> Router:
    if rc.policy == "always":
        return Constant(True)
    if rc.policy == "never":
        return Constant(False)
    if rc.policy == "min-span":
        return MinSpan(rc)
    if rc.policy == "score-static":
        return ScoreThreshold(rc, "static")
    if rc.policy == "score-dynamic":
        return ScoreThreshold(rc, "dynamic")
    if rc.policy == "hysteresis":
        return Hysteresis(rc)
    if rc.policy == "ucb":
        return UCB(rc)
    raise InputError(f"unknown routing policy {rc.policy!r}")
