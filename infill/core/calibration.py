"""Calibrated confidence: the probability that a fill is right, from what is known when it is written.

A `Calibrator` is a logistic model (Platt scaling over a few named features, standardised) fitted on held-out
data only, and saved as a small JSON file beside the model it was fitted for. Prediction is a dot product and
a sigmoid: no torch, no numpy, so it costs nothing on the fill path.

Also here: the measures a calibration is judged by, the expected calibration error (ECE: bins of predicted
probability, weighted mean |accuracy - confidence|), a reliability table, and precision at coverage (sort by
confidence, keep the top share).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from infill.errors import ModelError

FORMAT = "infill-calibration/1"
CALIBRATION_FILE = "calibration.json"  # beside a model's weights


def sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@dataclass(frozen=True)
class Calibrator:
    """p(right | features) = sigmoid(bias + sum_i weight_i * (x_i - mean_i) / scale_i)."""

    features: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    meta: dict[str, Any] = field(default_factory=dict)  # what it was fitted on, and its measured ECE

    def predict(self, values: Mapping[str, float]) -> float:
        """The calibrated probability for one fill; every feature in `self.features` must be given."""
        z = self.bias
        for name, w, m, s in zip(self.features, self.weights, self.mean, self.scale, strict=True):
            z += w * (float(values[name]) - m) / s
        return sigmoid(z)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    def save(self, path: str | Path) -> None:
        """Write calibration.json through the one writer (infill.patch.atomic_write: a regular file, never half
        written)."""
        from infill import patch

        patch.atomic_write(str(path), (json.dumps(self.to_json(), indent=1) + "\n").encode("utf-8"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Calibrator:
        if data.get("format") != FORMAT:
            raise ValueError(f"not an {FORMAT} file")
        n = len(data["features"])
        parts = [tuple(float(v) for v in data[key]) for key in ("weights", "mean", "scale")]
        if any(len(p) != n for p in parts) or any(s <= 0 or not math.isfinite(s) for s in parts[2]):
            raise ValueError("features, weights, mean and scale disagree")
        weights, mean, scale = parts
        features = tuple(str(f) for f in data["features"])
        return cls(features, weights, float(data["bias"]), mean, scale, dict(data.get("meta", {})))

    @classmethod
    def load(cls, path: str | Path) -> Calibrator:
        try:
            return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"{path}: unreadable calibration file ({exc})") from exc


def fit(
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    features: Sequence[str],
    *,
    l2: float = 1e-3,
    iterations: int = 50,
    meta: Mapping[str, Any] | None = None,
) -> Calibrator:
    """Logistic regression of `labels` on the standardised `features` of `rows`, by Newton's method with a
    small L2 penalty on the weights (not the bias), so that separable or constant features stay finite."""
    if len(rows) != len(labels) or not rows:
        raise ValueError("fit needs as many labels as rows, and at least one")
    d = len(features)
    xs = [[float(r[f]) for f in features] for r in rows]
    mean = [sum(x[i] for x in xs) / len(xs) for i in range(d)]
    scale = [math.sqrt(sum((x[i] - mean[i]) ** 2 for x in xs) / len(xs)) or 1.0 for i in range(d)]
    z = [[1.0] + [(x[i] - mean[i]) / scale[i] for i in range(d)] for x in xs]  # (n, d+1), bias first
    y = [1.0 if b else 0.0 for b in labels]
    beta = [0.0] * (d + 1)
    n = float(len(z))
    for _ in range(iterations):
        grad = [0.0] * (d + 1)
        hess = [[0.0] * (d + 1) for _ in range(d + 1)]
        for zi, yi in zip(z, y, strict=True):
            p = sigmoid(sum(b * v for b, v in zip(beta, zi, strict=True)))
            w = p * (1 - p)
            for a in range(d + 1):
                grad[a] += (p - yi) * zi[a] / n
                for c in range(a, d + 1):
                    hess[a][c] += w * zi[a] * zi[c] / n
        for a in range(d + 1):
            for c in range(a):
                hess[a][c] = hess[c][a]
            if a:
                grad[a] += l2 * beta[a]
                hess[a][a] += l2
        step = _solve(hess, grad)
        beta = [b - s for b, s in zip(beta, step, strict=True)]
        if max(abs(s) for s in step) < 1e-9:
            break
    return Calibrator(tuple(features), tuple(beta[1:]), beta[0], tuple(mean), tuple(scale), dict(meta or {}))


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """x with a @ x = b, by Gaussian elimination with partial pivoting (a is small and positive definite)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if abs(m[col][col]) < 1e-300:
            continue
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        if abs(m[r][r]) >= 1e-300:
            x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def calibration_of(folder: str | Path | None, name: str = CALIBRATION_FILE) -> Calibrator | None:
    """The calibration shipped in a model folder (CALIBRATION_FILE for fills; the docstring writer's has its own
    name), or None; read once per file version."""
    if folder is None:
        return None
    path = Path(folder) / name
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    return _load_cached(str(path), stamp)


@functools.lru_cache(maxsize=16)
def _load_cached(path: str, stamp: int) -> Calibrator:
    return Calibrator.load(path)


# ---- measures --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    count: int
    confidence: float  # mean predicted probability in the bin
    accuracy: float  # share right in the bin


def reliability(probs: Sequence[float], labels: Sequence[bool], bins: int = 10) -> list[Bin]:
    """Equal-width bins of predicted probability over [0, 1] (empty bins left out)."""
    out: list[Bin] = []
    for k in range(bins):
        low, high = k / bins, (k + 1) / bins
        idx = [i for i, p in enumerate(probs) if low <= p < high or (k == bins - 1 and p == 1.0)]
        if idx:
            conf = sum(probs[i] for i in idx) / len(idx)
            acc = sum(1.0 for i in idx if labels[i]) / len(idx)
            out.append(Bin(low, high, len(idx), conf, acc))
    return out


def expected_calibration_error(probs: Sequence[float], labels: Sequence[bool], bins: int = 10) -> float:
    """Sum over bins of (share of fills in the bin) * |accuracy - mean confidence|."""
    n = len(probs)
    return sum(b.count / n * abs(b.accuracy - b.confidence) for b in reliability(probs, labels, bins)) if n else 0.0


def precision_at_coverage(
    probs: Sequence[float], labels: Sequence[bool], coverages: Sequence[float] = (0.1, 0.2, 0.3, 0.5, 1.0)
) -> list[tuple[float, float, float]]:
    """(coverage, precision of the top `coverage` share by confidence, the confidence at that cut) per coverage."""
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    out = []
    for c in coverages:
        k = max(1, round(c * len(order)))
        top = order[:k]
        out.append((c, sum(1.0 for i in top if labels[i]) / k, probs[top[-1]]))
    return out


def at_threshold(probs: Sequence[float], labels: Sequence[bool], threshold: float) -> tuple[float, float]:
    """(coverage, precision) of the fills whose confidence is at least `threshold` (precision 0 if none)."""
    kept = [i for i, p in enumerate(probs) if p >= threshold]
    if not kept:
        return 0.0, 0.0
    return len(kept) / len(probs), sum(1.0 for i in kept if labels[i]) / len(kept)
