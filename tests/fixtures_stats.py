"""The one goodness-of-fit test of the exactness tests: samples against an exact distribution by chi-square."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping

# scipy.special's chi-square distributions, not scipy.stats's: the same functions (scipy.stats calls these), and
# importing scipy.stats (~3 s) at collection was the largest import of the test suite after torch
from scipy.special import chdtrc, chdtri, chndtr


def pooled_p_value(
    counts: Counter[Hashable] | Mapping[Hashable, int], joint: Mapping[Hashable, float], samples: int | None = None
) -> float:
    """Chi-square p-value of the `samples` draws `counts` (default: all of them) against the probabilities
    `joint`, over the cells of `joint` in sorted order; the cells expecting fewer than 5 draws are pooled into one."""
    samples = sum(counts.values()) if samples is None else samples
    observed, expected, pooled_o, pooled_e = [], [], 0.0, 0.0
    for x in sorted(joint):  # type: ignore[type-var]
        if joint[x] * samples >= 5:
            observed.append(counts.get(x, 0))
            expected.append(joint[x] * samples)
        else:
            pooled_o += counts.get(x, 0)
            pooled_e += joint[x] * samples
    if pooled_e > 0:
        observed.append(pooled_o)
        expected.append(pooled_e)
    # the draws and the probabilities must account for the same total (scipy.stats.chisquare's check: sqrt(eps))
    total_o, total_e = sum(observed), sum(expected)
    assert abs(total_o - total_e) <= 2**-26 * min(total_o, total_e), (total_o, total_e)
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True))
    return float(chdtrc(len(observed) - 1, statistic))


def mixture_power(
    joint: Mapping[Hashable, float], control: Mapping[Hashable, float], samples: int, eps: float, alpha: float = 1e-4
) -> float:
    """The probability that `pooled_p_value` of `samples` draws is below `alpha` when the draws come from the
    mixture (1 - eps) joint + eps control: a sampler a fraction `eps` of the way from the exact distribution to
    the negative control's (noncentral chi-square, the cells pooled as `pooled_p_value` pools them). How a test
    shows that its sample count is enough to catch a decoder that is only partly wrong."""
    cells = sorted(joint)  # type: ignore[type-var]
    kept = [[x] for x in cells if joint[x] * samples >= 5]
    pooled = [x for x in cells if joint[x] * samples < 5]
    groups = kept + ([pooled] if pooled else [])
    p0 = [sum(joint[x] for x in g) for g in groups]
    p1 = [sum(control.get(x, 0.0) for x in g) for g in groups]
    divergence = sum((b - a) ** 2 / a for a, b in zip(p0, p1, strict=True))
    df = len(groups) - 1
    return 1.0 - float(chndtr(chdtri(df, alpha), df, samples * eps * eps * divergence))
