"""The one goodness-of-fit test of the exactness tests: samples against an exact distribution by chi-square."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping

from scipy.stats import chisquare


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
    return float(chisquare(observed, expected).pvalue)


def mixture_power(
    joint: Mapping[Hashable, float], control: Mapping[Hashable, float], samples: int, eps: float, alpha: float = 1e-4
) -> float:
    """The probability that `pooled_p_value` of `samples` draws is below `alpha` when the draws come from the
    mixture (1 - eps) joint + eps control: a sampler a fraction `eps` of the way from the exact distribution to
    the negative control's (noncentral chi-square, the cells pooled as `pooled_p_value` pools them). How a test
    shows that its sample count is enough to catch a decoder that is only partly wrong."""
    from scipy.stats import chi2, ncx2

    cells = sorted(joint)  # type: ignore[type-var]
    kept = [[x] for x in cells if joint[x] * samples >= 5]
    pooled = [x for x in cells if joint[x] * samples < 5]
    groups = kept + ([pooled] if pooled else [])
    p0 = [sum(joint[x] for x in g) for g in groups]
    p1 = [sum(control.get(x, 0.0) for x in g) for g in groups]
    divergence = sum((b - a) ** 2 / a for a, b in zip(p0, p1, strict=True))
    df = len(groups) - 1
    return float(ncx2.sf(chi2.isf(alpha, df), df, samples * eps * eps * divergence))
