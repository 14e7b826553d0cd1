"""`infill eval calibrate`: fits on held-out reports only, judges on others, writes a calibration that
`infill fill` then reads, and refuses reports it cannot use with one line."""

from __future__ import annotations

import json
import random
from pathlib import Path

from click.testing import CliRunner

from infill.cli import main
from infill.core.calibration import Calibrator, sigmoid
from infill.evaluation.confidence import FEATURES


def report(path: Path, kind: str, n: int, seed: int) -> Path:
    """A report whose fills are right with probability sigmoid(2 * mean_logp + 1)."""
    rng = random.Random(seed)
    label = "exact" if kind == "heldout-exact" else "passed"
    results = []
    for i in range(n):
        features = {f: 0.0 for f in FEATURES} | {"mean_logp": rng.gauss(-1, 1), "tokens": float(rng.randint(3, 20))}
        right = rng.random() < sigmoid(2 * features["mean_logp"] + 1)
        task = f"f{i % 40}.py:{i}" if kind == "heldout-exact" else f"HumanEval/{i % 40}/L{i}"
        results.append({"task_id": task, "features": features, label: right, "refused": False, "error": None})
    decode = {"decoder": "beam", "beam": 4}
    path.write_text(json.dumps({"eval": kind, "decode": decode, "results": results}))
    return path


def test_fit_judge_and_write(tmp_path: Path) -> None:
    fit = report(tmp_path / "fit.json", "heldout-exact", 3000, 0)
    test = report(tmp_path / "test.json", "heldout-exact", 3000, 1)
    he = report(tmp_path / "he.json", "humaneval-single-line", 1000, 2)
    out = tmp_path / "calibration.json"
    r = CliRunner().invoke(
        main, ["eval", "calibrate", str(fit), "--test", str(test), "--test", str(he), "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    cal = Calibrator.load(out)
    assert cal.meta["decoder"] == "beam 4" and cal.meta["fitted_on"]["fills"] == 3000
    j = json.loads(CliRunner().invoke(main, ["eval", "calibrate", str(fit), "--test", str(test), "--json"]).stdout)[
        "judgements"
    ]
    assert j[1]["report"] == "test.json" and j[1]["ece"] < 0.05  # calibrated on fills it never saw
    assert "ECE" in r.output and "reliability" in r.output


def test_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    he = report(tmp_path / "he.json", "humaneval-single-line", 50, 0)
    r = CliRunner().invoke(main, ["eval", "calibrate", str(he)])
    assert r.exit_code == 2 and "heldout-exact reports only" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = CliRunner().invoke(main, ["eval", "calibrate", str(bad)])
    assert r.exit_code == 2 and "not an infill eval report" in r.stderr and r.stderr.count("\n") == 1
    # the same form as every other command's error (infill.commands.shell.error_report), not `infill eval: ...`
    assert r.stderr.startswith("error: "), r.stderr


def test_test_share_keeps_whole_files_out_of_the_fit(tmp_path: Path) -> None:
    fit = report(tmp_path / "fit.json", "heldout-exact", 2000, 3)
    r = CliRunner().invoke(main, ["eval", "calibrate", str(fit), "--test-share", "0.5", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    fitted, held = doc["judgements"]
    assert "fit part" in fitted["report"] and "test part" in held["report"]
    assert fitted["fills"] + held["fills"] == 2000 and doc["calibration"]["meta"]["fitted_on"]["fills"] < 2000
