"""The calibrated confidence of a fill, end to end: computed from the fill's features with the calibration
shipped beside a model, shown in --format json, --stats and the server, and --min-confidence P writes nothing
(exit 4) below P: the file untouched, the editor filter echoing its input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_cli import fake_model

from infill.cli import main
from infill.core.calibration import CALIBRATION_FILE, Calibrator

SRC = "def inc(x):\n    pass\n"


def calibrated_folder(tmp_path: Path, decoder: str = "beam 4") -> Path:
    """A model folder whose calibration maps the fill's mean token log-probability to p = sigmoid(2 + x)."""
    folder = tmp_path / "model"
    folder.mkdir()
    Calibrator(("mean_logp",), (1.0,), 2.0, (0.0,), (1.0,), {"decoder": decoder}).save(folder / CALIBRATION_FILE)
    return folder


def fill(tmp_path: Path, *args: str, input: str | None = None) -> tuple[int, str, str, Path]:
    p = tmp_path / "a.py"
    p.write_text(SRC)
    target = "-" if input is not None else str(p)
    r = CliRunner().invoke(main, ["fill", target, "--span", "2:2", "--model", "fake-conf", *args], input=input)
    return r.exit_code, r.stdout, r.stderr, p


def test_confidence_in_json_and_stats(tmp_path: Path) -> None:
    with fake_model(["return x + 1"], name="fake-conf", folder=calibrated_folder(tmp_path)):
        code, out, _, _ = fill(tmp_path, "--format", "json")
        stats_code, _, err, _ = fill(tmp_path, "--stats")
    assert code == 0 and stats_code == 0
    doc = json.loads(out)
    assert 0.0 < doc["confidence"] < 1.0
    assert f"confidence={doc['confidence']:.2f}" in err


def test_min_confidence_writes_nothing_below_the_threshold(tmp_path: Path) -> None:
    with fake_model(["return x + 1"], name="fake-conf", folder=calibrated_folder(tmp_path)):
        code, out, _, _ = fill(tmp_path, "--format", "json")
        confidence = json.loads(out)["confidence"]
        low, _, err, p = fill(tmp_path, "--min-confidence", str(min(1.0, confidence + 0.01)))
        assert (low, p.read_text()) == (4, SRC), err
        assert err.count("\n") == 1 and "below" in err and "nothing was written" in err
        ok, _, _, q = fill(tmp_path, "--min-confidence", str(max(0.0, confidence - 0.01)))
        assert ok == 0 and q.read_text() != SRC
        low_json, out, _, _ = fill(tmp_path, "--min-confidence", "1", "--format", "json")
        doc = json.loads(out)
        assert low_json == 4 and doc["edits"] == [] and doc["error"]["code"] == "low_confidence"
        assert doc["confidence"] == confidence and doc["failed"][0]["text"] == "    return x + 1"
        echoed, out, err, _ = fill(tmp_path, "--min-confidence", "1", "--stdin-filename", "a.py", input=SRC)
        assert (echoed, out, err) == (4, SRC, "")  # the editor filter keeps the buffer


def test_min_confidence_needs_a_calibration(tmp_path: Path) -> None:
    """A model without a calibration (or with one for another decoder) cannot answer: exit 2, one line."""
    for folder in (None, calibrated_folder(tmp_path, decoder="assd k=10 T=1")):
        with fake_model(["return x + 1"], name="fake-conf", folder=folder):
            code, _, err, p = fill(tmp_path, "--min-confidence", "0.5")
            plain, out, _, _ = fill(tmp_path, "--format", "json")
        assert code == 2 and "no calibrated confidence" in err and p.read_text() == SRC
        assert plain == 0 and json.loads(out)["confidence"] is None


def test_the_server_reports_confidence_and_low_confidence(tmp_path: Path) -> None:
    from infill.server.dispatch import Dispatcher

    params = {"text": SRC, "filename": "a.py", "span": "2:2", "model": "fake-conf"}
    with fake_model(["return x + 1"], name="fake-conf", folder=calibrated_folder(tmp_path)):
        ok = json.loads(Dispatcher().handle_line(json.dumps({"id": 1, "method": "fill", "params": params}).encode()))
        low_params = {**params, "min_confidence": 1.0}
        request = json.dumps({"id": 2, "method": "fill", "params": low_params}).encode()
        low = json.loads(Dispatcher().handle_line(request))
    assert 0 < ok["confidence"] < 1  # a reply carries the --format json document
    assert (low["error"]["code"], low["error"]["exit_code"]) == ("low_confidence", 4)


@pytest.mark.parametrize("value", ["-0.1", "1.5", "nan"])
def test_min_confidence_range(tmp_path: Path, value: str) -> None:
    with fake_model(["return x + 1"], name="fake-conf"):
        code, _, err, _ = fill(tmp_path, "--min-confidence", value)
    assert code == 2 and err.count("\n") == 1
