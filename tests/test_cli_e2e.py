"""End to end on a tiny random XLNet checkpoint (infill.models.tiny): real tokenizer, decoders and CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from infill import api
from infill.cli import main

SOURCE = "def mean(values):\n    total = 0\n    for value in values:\n        total += value\n    return total\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infill.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model", max_length=128)


def fill(*args: str, input: str | None = None) -> tuple[int, str, str]:
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", *args], input=input)
    return r.exit_code, r.stdout, r.stderr


def test_json_edit_on_tiny_xlnet(tiny: Path, tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    code, out, err = fill(
        str(p),
        "--span",
        "4:4",
        "--model",
        str(tiny),
        "--tokens",
        "12",
        "--temperature",
        "1",  # sampling: ASSD (the default, beam search, is tested elsewhere)
        "--format",
        "json",
        "--no-syntax-check",
        "--max-resample",
        "0",  # one sample: a random model often splits a UTF-8 character, which would be resampled
        "--allow-syntax-errors",  # ... and then refused (exit 3) without this flag
    )
    assert code == 0, err
    doc = json.loads(out)
    (edit,) = doc["edits"]
    assert (edit["start_line"], edit["end_line"]) == (4, 4)
    assert SOURCE.encode()[edit["start_byte"] : edit["end_byte"]] == b"        total += value"
    assert edit["score"] < 0  # a random model is never certain
    stats = doc["stats"]
    assert stats["decoder"] == "assd" and stats["tokens"] == 12
    assert 1 <= stats["nfe"] <= stats["tokens"] + 1  # ASSD: forwards <= tokens (+1 scoring pass)
    assert p.read_text() == SOURCE


def test_filter_mode_keeps_everything_outside_the_span(tiny: Path) -> None:
    for decoder in ("assd", "sequential"):
        code, out, err = fill(
            "-",
            "--stdin-filename",
            "m.py",
            "--span",
            "2:3",
            "--model",
            str(tiny),
            "--decoder",
            decoder,
            "--tokens",
            "10",
            "--no-syntax-check",
            "--allow-syntax-errors",  # a random model's fill may split a UTF-8 character
            input=SOURCE,
        )
        assert code == 0, err
        lines = SOURCE.split("\n")
        assert out.startswith(lines[0] + "\n")
        assert out.endswith("\n" + "\n".join(lines[3:]))


def test_same_seed_same_fill(tiny: Path) -> None:
    args = ("-", "--span", "2:2", "--model", str(tiny), "--tokens", "8", "--format", "json")
    first = json.loads(fill(*args, input=SOURCE)[1])["edits"]
    again = json.loads(fill(*args, input=SOURCE)[1])["edits"]
    assert first == again


def test_corrupt_safetensors(tiny: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    (broken / "model.safetensors").write_bytes(b"\x00\x01 not a safetensors file")
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    code, out, err = fill(str(p), "--span", "2:2", "--model", str(broken))
    assert code == 123
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert p.read_text() == SOURCE
