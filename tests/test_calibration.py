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


def test_predict_is_the_documented_formula_on_hand_computed_values() -> None:
    """sigmoid(bias + sum_i w_i * (x_i - mean_i) / scale_i), checked against numbers worked out by hand, with
    scales far from 1 (the synthetic feature's scale is about 1, so a scale multiplied instead of divided passed
    every other test)."""
    calibrator = Calibrator(("a", "b"), (2.0, -1.0), 0.5, (1.0, 10.0), (4.0, 0.5))
    # z = 0.5 + 2 * (3 - 1) / 4 - 1 * (11 - 10) / 0.5 = 0.5 + 1 - 2 = -0.5
    assert calibrator.predict({"a": 3.0, "b": 11.0}) == pytest.approx(1 / (1 + math.exp(0.5)), abs=1e-15)
    assert calibrator.predict({"a": 1.0, "b": 10.0}) == pytest.approx(1 / (1 + math.exp(-0.5)), abs=1e-15)  # z = bias
    # z = 0.5 + 2 * (-7 - 1) / 4 - 1 * (10.25 - 10) / 0.5 = 0.5 - 4 - 0.5 = -4
    assert calibrator.predict({"a": -7.0, "b": 10.25}) == pytest.approx(1 / (1 + math.exp(4.0)), abs=1e-15)


def test_fit_standardises_with_the_mean_and_population_scale() -> None:
    """mean and scale are the features' mean and population standard deviation (hand-computed), and a feature in
    other units (x 1000) gives the same probabilities: the standardisation undoes it."""
    rows = [{"x": 1.0}, {"x": 3.0}, {"x": 5.0}, {"x": 7.0}]
    labels = [False, True, False, True]
    fitted = fit(rows, labels, ["x"])
    assert fitted.mean == (4.0,) and fitted.scale == pytest.approx((math.sqrt(5.0),))  # (9 + 1 + 1 + 9) / 4 = 5
    wide = fit([{"x": r["x"] * 1000} for r in rows], labels, ["x"])
    assert wide.scale == pytest.approx((1000 * math.sqrt(5.0),))
    for r in rows:
        assert wide.predict({"x": r["x"] * 1000}) == pytest.approx(fitted.predict(r), abs=1e-12)
