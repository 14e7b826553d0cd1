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
