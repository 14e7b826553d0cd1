"""infill.core.calibration: the logistic fit recovers a known relation, the ECE and the coverage measures are
right on hand-made cases, and a calibrator survives its JSON file."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from infill.core.calibration import (
    Calibrator,
    at_threshold,
    expected_calibration_error,
    fit,
    precision_at_coverage,
    reliability,
    sigmoid,
)
from infill.errors import ModelError


def _synthetic(n: int, seed: int) -> tuple[list[dict[str, float]], list[bool]]:
    """Labels drawn from a known logistic model p = sigmoid(2 x - 1) with a useless feature beside x."""
    rng = random.Random(seed)
    rows, labels = [], []
    for _ in range(n):
        x, noise = rng.gauss(0, 1), rng.gauss(5, 3)
        rows.append({"x": x, "noise": noise})
        labels.append(rng.random() < sigmoid(2 * x - 1))
    return rows, labels


def test_fit_recovers_a_known_logistic_model_and_is_calibrated() -> None:
    rows, labels = _synthetic(4000, 0)
    cal = fit(rows, labels, ["x", "noise"])
    x_weight = cal.weights[0] / cal.scale[0]  # back to the raw feature's units
    assert x_weight == pytest.approx(2.0, abs=0.25)
    assert abs(cal.weights[1]) < 0.15  # the useless feature gets (almost) nothing
    test_rows, test_labels = _synthetic(4000, 1)
    probs = [cal.predict(r) for r in test_rows]
    assert expected_calibration_error(probs, test_labels) < 0.03
    # negative control: a confidence that ignores the features is badly calibrated where x matters
    flat = [0.9] * len(test_labels)
    assert expected_calibration_error(flat, test_labels) > 0.3


def test_measures_on_hand_made_cases() -> None:
    probs = [0.95, 0.95, 0.15, 0.15, 0.15, 0.15]
    labels = [True, False, False, False, False, True]
    bins = reliability(probs, labels, bins=10)
    assert [(b.count, b.accuracy) for b in bins] == [(4, 0.25), (2, 0.5)]
    # 4/6 * |0.25 - 0.15| + 2/6 * |0.5 - 0.95|
    assert expected_calibration_error(probs, labels) == pytest.approx(4 / 6 * 0.1 + 2 / 6 * 0.45)
    assert precision_at_coverage(probs, labels, (1 / 3, 1.0)) == [(1 / 3, 0.5, 0.95), (1.0, 2 / 6, 0.15)]
    assert at_threshold(probs, labels, 0.5) == (pytest.approx(1 / 3), 0.5)
    assert at_threshold(probs, labels, 0.99) == (0.0, 0.0)


def test_constant_feature_and_separable_labels_stay_finite() -> None:
    rows = [{"c": 1.0, "x": float(i)} for i in range(20)]
    labels = [i >= 10 for i in range(20)]  # perfectly separable by x
    cal = fit(rows, labels, ["c", "x"])
    assert all(math.isfinite(w) for w in cal.weights) and math.isfinite(cal.bias)
    assert cal.predict({"c": 1.0, "x": 19.0}) > 0.9 > 0.1 > cal.predict({"c": 1.0, "x": 0.0})


def test_json_round_trip_and_bad_files(tmp_path: Path) -> None:
    rows, labels = _synthetic(300, 2)
    cal = fit(rows, labels, ["x", "noise"], meta={"fitted_on": "synthetic"})
    path = tmp_path / "calibration.json"
    cal.save(path)
    again = Calibrator.load(path)
    assert again == cal and again.predict(rows[0]) == cal.predict(rows[0])
    path.write_text('{"format": "something else"}')
    with pytest.raises(ModelError, match="calibration"):
        Calibrator.load(path)
    path.write_text("{not json")
    with pytest.raises(ModelError, match="calibration"):
        Calibrator.load(path)
