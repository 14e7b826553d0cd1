"""Each S2D2 routing policy's decision on constructed inputs (Algorithm 4), and the K-hat estimators."""

from __future__ import annotations

import math

import pytest
import torch

from infill.decoding.routing import (
    UCB,
    RouteFeatures,
    RoutingConfig,
    alphas_entropy,
    alphas_margin,
    features,
    k_hat,
    make_router,
    parse_routing,
)
from infill.errors import InputError


def feat(span: int = 4, k: float = 2.0, n_hi: int = 0, progress: float = 0.0, entropy: float = 0.0) -> RouteFeatures:
    return RouteFeatures(span_len=span, k_hat=k, n_hi=n_hi, progress=progress, entropy=entropy)


def test_k_hat_is_sum_of_prefix_products() -> None:
    assert k_hat(torch.tensor([1.0, 1.0, 0.0, 1.0])) == 2.0
    assert k_hat(torch.tensor([0.5, 0.5])) == pytest.approx(0.75)


def test_entropy_and_margin_estimators() -> None:
    one_hot = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    uniform = torch.full((1, 4), 0.25, dtype=torch.float64)
    assert alphas_entropy(one_hot, 1.0).item() == pytest.approx(1.0)
    assert alphas_entropy(uniform, 1.0).item() == pytest.approx(math.exp(-1.0))
    assert alphas_entropy(uniform, 2.0).item() == pytest.approx(math.exp(-2.0))
    close = torch.tensor([[0.50, 0.46, 0.04, 0.0]], dtype=torch.float64)
    wide = torch.tensor([[0.50, 0.44, 0.06, 0.0]], dtype=torch.float64)
    assert alphas_margin(close, 0.05).item() == 0.0
    assert alphas_margin(wide, 0.05).item() == 1.0
    f = features(torch.cat([one_hot, one_hot, uniform]), n_hi=3, progress=0.25, rc=RoutingConfig())
    assert f.span_len == 3 and f.n_hi == 3 and f.progress == 0.25
    assert f.k_hat == pytest.approx(2 + math.exp(-1.0))
    assert f.entropy == pytest.approx(1 / 3)
    fm = features(torch.cat([one_hot, uniform, one_hot]), 0, 0.0, RoutingConfig(estimator="margin"))
    assert fm.k_hat == 1.0  # the uniform position stops the product


def test_always_never_min_span() -> None:
    assert make_router(parse_routing("always")).decide(feat(span=1))
    assert not make_router(parse_routing("never")).decide(feat(span=8))
    r = make_router(parse_routing("min-span"))  # default tau_span 2
    assert not r.decide(feat(span=1)) and r.decide(feat(span=2))
    r3 = make_router(parse_routing("min-span:min_span=3"))
    assert not r3.decide(feat(span=2)) and r3.decide(feat(span=3))


def test_score_thresholds_static_and_dynamic() -> None:
    static = make_router(parse_routing("score-static"))  # s = K - c, c = 2, tau 0
    assert static.decide(feat(k=3.0, n_hi=5)) and not static.decide(feat(k=1.5))
    dynamic = make_router(parse_routing("score-dynamic"))  # s = K - c * N_hi
    assert dynamic.decide(feat(k=3.0, n_hi=1))  # 3 - 2 = 1 >= 0
    assert not dynamic.decide(feat(k=3.0, n_hi=2))  # 3 - 4 < 0: confidence decoding would do as well
    assert dynamic.decide(feat(k=0.5, n_hi=0))
    strict = make_router(parse_routing("score-static:tau_score=1.5,c=1"))
    assert strict.decide(feat(k=2.5)) and not strict.decide(feat(k=2.4))


def test_hysteresis_switches_on_and_off_at_different_scores() -> None:
    r = make_router(parse_routing("hysteresis:score=static"))  # s = K - 2; on at s >= 0, off at s < -1
    decisions = [r.decide(feat(k=k)) for k in (1.5, 2.5, 1.5, 0.5, 1.5, 2.0)]
    # s:                                         -0.5  0.5  -0.5 -1.5 -0.5  0.0
    assert decisions == [False, True, True, False, False, True]


def test_ucb_tries_both_arms_then_exploits_per_context() -> None:
    r = make_router(parse_routing("ucb"))
    assert isinstance(r, UCB)
    f = feat(span=4, progress=0.1, entropy=0.05)
    assert r.decide(f) is True  # untried: verify first
    r.update(True, tokens=4, cost=2)  # reward 2
    assert r.decide(f) is False  # then skip
    r.update(False, tokens=1, cost=1)  # reward 1
    assert r.decide(f) is True  # equal counts: the better mean wins
    r.update(True, tokens=4, cost=2)
    other = feat(span=1, progress=0.9, entropy=0.5)  # another context starts from scratch
    assert UCB.context(other) != UCB.context(f)
    assert r.decide(other) is True
    r.update(True, tokens=0, cost=2)
    assert r.decide(other) is False
    r.update(False, tokens=1, cost=1)
    for _ in range(5):  # skipping pays here: exploitation keeps choosing it until exploration bonus grows
        if r.decide(other):
            r.update(True, tokens=0, cost=2)
        else:
            r.update(False, tokens=1, cost=1)
    assert r.n[UCB.context(other)][0] > r.n[UCB.context(other)][1]


def test_parse_routing_options_and_errors() -> None:
    rc = parse_routing("score-dynamic:estimator=margin,c=1.5,margin=0.1,beta=2")
    assert (rc.policy, rc.estimator, rc.c, rc.margin, rc.beta) == ("score-dynamic", "margin", 1.5, 0.1, 2.0)
    assert parse_routing("hysteresis:tau-on=1,tau-off=-2").tau_on == 1.0
    for bad in (
        "sometimes",
        "min-span:span=2",
        "min-span:min_span=two",
        "score-static:estimator=vibes",
        "ucb:c",
    ):
        with pytest.raises(InputError):
            parse_routing(bad)
