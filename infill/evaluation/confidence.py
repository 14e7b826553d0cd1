"""Fitting and judging a model's calibrated confidence from evaluation reports (`infill eval ... -o REPORT`).

Each per-task result of an `infill eval humaneval-single-line` or `heldout-exact` report carries the fill's
features (infill.api.fill_features) and whether it was right: `passed` (HumanEval: the program passed its
tests) or `exact` (held-out lines: the fill equals the line). A calibration is fitted on held-out reports only
(never on HumanEval) and judged on others: expected calibration error, a reliability table, precision at
coverage, and coverage and precision at a threshold.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infill.core.calibration import (
    Calibrator,
    at_threshold,
    expected_calibration_error,
    fit,
    precision_at_coverage,
    reliability,
)
from infill.errors import InputError

# the features a calibration is fitted on: what describes the fill itself. infill.api.fill_features also reports
# whether the static monitor ran and whether the rescue search was needed, but those describe the file more than
# the fill (held-out lines, cut from larger files, rarely compile on their own, so the monitor rarely runs there:
# 4% of held-out fills against 79% of HumanEval's), and a calibration fitted with them fell apart on HumanEval
# (ECE 0.131 against 0.074 without them)
FEATURES = ("mean_logp", "logp", "worst_logp", "margin", "beam_margin", "in_file", "tokens")


@dataclass(frozen=True)
class Labelled:
    """The fills of one report: features and whether each was right."""

    name: str  # the report's file name
    eval: str  # "humaneval-single-line" | "heldout-exact"
    decoder: str  # decode label, e.g. "beam 4"
    rows: list[dict[str, float]]
    labels: list[bool]
    files: list[str]  # the file (held-out) or problem (HumanEval) each fill comes from

    def split(self, share: float) -> tuple[Labelled, Labelled]:
        """(the rest, `share` of the files by a hash of their names): two parts with no file in common."""
        test = [zlib.crc32(f.encode()) % 1000 < share * 1000 for f in self.files]
        parts = []
        for keep in (False, True):
            idx = [i for i, t in enumerate(test) if t == keep]
            name = f"{self.name} ({'test' if keep else 'fit'} part, {len(idx)} fills)"
            parts.append(
                Labelled(
                    name,
                    self.eval,
                    self.decoder,
                    [self.rows[i] for i in idx],
                    [self.labels[i] for i in idx],
                    [self.files[i] for i in idx],
                )
            )
        return parts[0], parts[1]


def read_report(path: Path) -> Labelled:
    """The labelled fills of an evaluation report written with -o (fills the tool refused are left out: it
    writes nothing for them, so they have no confidence to judge)."""
    from infill.config import DecodeConfig, decode_label

    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        kind, results = report["eval"], report["results"]
        decode = DecodeConfig(**report["decode"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not an infill eval report ({exc})") from exc
    label = {"humaneval-single-line": "passed", "heldout-exact": "exact"}.get(kind)
    if label is None:
        raise InputError(f"{path}: a {kind!r} report has no right/wrong label")
    rows, labels, files = [], [], []
    for r in results:
        if r.get("features") is None or r.get("refused") or r.get("error"):
            continue
        missing = [f for f in FEATURES if f not in r["features"]]
        if missing:
            raise InputError(f"{path}: fills without {', '.join(missing)} (re-run it with this version of infill)")
        rows.append({f: float(r["features"][f]) for f in FEATURES})
        labels.append(bool(r[label]))
        files.append(str(r["task_id"]).rsplit(":" if kind == "heldout-exact" else "/", 1)[0])
    if not rows:
        raise InputError(f"{path}: no fill with features (reports from this version of infill eval have them)")
    return Labelled(path.name, kind, decode_label(decode), rows, labels, files)


def fit_reports(reports: Sequence[Labelled], meta: dict[str, Any]) -> Calibrator:
    """A calibration fitted on held-out reports of one decoder."""
    if any(r.eval != "heldout-exact" for r in reports):
        raise InputError("fit the calibration on heldout-exact reports only (HumanEval is for judging it)")
    decoders = {r.decoder for r in reports}
    if len(decoders) != 1:
        raise InputError(f"the reports use different decoders: {', '.join(sorted(decoders))}")
    rows = [row for r in reports for row in r.rows]
    labels = [label for r in reports for label in r.labels]
    fitted_on = {"reports": [r.name for r in reports], "fills": len(rows), "right": sum(labels)}
    return fit(rows, labels, FEATURES, meta={"decoder": decoders.pop(), "fitted_on": fitted_on, **meta})


def judge(calibrator: Calibrator, report: Labelled, threshold: float) -> dict[str, Any]:
    """How the calibration does on one report's fills."""
    probs = [calibrator.predict(row) for row in report.rows]
    coverage, precision = at_threshold(probs, report.labels, threshold)
    return {
        "report": report.name,
        "eval": report.eval,
        "fills": len(probs),
        "right": sum(report.labels),
        "ece": expected_calibration_error(probs, report.labels),
        "threshold": threshold,
        "coverage_at_threshold": coverage,
        "precision_at_threshold": precision,
        "precision_at_coverage": precision_at_coverage(probs, report.labels),
        "reliability": [b.__dict__ for b in reliability(probs, report.labels)],
        "mean_confidence": sum(probs) / len(probs),
    }


def render(judgement: dict[str, Any]) -> list[str]:
    """A judgement as text: the headline figures, precision at coverage and the reliability table."""
    j = judgement
    lines = [
        f"{j['report']} ({j['eval']}): {j['fills']} fills, {j['right']} right ({j['right'] / j['fills']:.1%}); "
        f"mean confidence {j['mean_confidence']:.3f}; ECE {j['ece']:.3f}",
        f"  at confidence >= {j['threshold']:g}: {j['coverage_at_threshold']:.1%} of fills, "
        f"{j['precision_at_threshold']:.1%} right",
        "  top share by confidence -> right: "
        + ", ".join(f"{c:.0%} -> {p:.1%} (conf >= {t:.2f})" for c, p, t in j["precision_at_coverage"]),
        "  reliability (confidence bin: fills, mean confidence, share right):",
    ]
    for b in j["reliability"]:
        lines.append(
            f"    [{b['low']:.1f}, {b['high']:.1f}): {b['count']:5d}  {b['confidence']:.3f}  {b['accuracy']:.3f}"
        )
    return lines
