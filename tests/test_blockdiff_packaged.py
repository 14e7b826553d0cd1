"""The packaged block-diffusion model (infill/weights/blockdiff): listed, selectable by name, and usable end to
end with `infill fill --model blockdiff --decoder s2d2` on a file."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from infill import api
from infill.cli import main
from infill.core.catalog import packaged_models
from infill.models.hf_folder import safetensors_parameters
from infill.models.loading import WEIGHTS_DIR, packaged_folder

SOURCE = "def mean(values):\n    total = 0\n    for value in values:\n        total += value\n    return total\n"


def test_packaged_blockdiff_is_listed_and_small() -> None:
    entries = {e.name: e for e in packaged_models()}
    assert {"default", "blockdiff"} <= set(entries)
    entry = entries["blockdiff"]
    assert entry.kind == "blockdiff" and entry.parameters is not None and entry.parameters > 1_000_000
    for f in (WEIGHTS_DIR / "blockdiff").iterdir():
        assert f.stat().st_size <= 40 * 1024 * 1024, f
    cfg = json.loads((WEIGHTS_DIR / "blockdiff" / "config.json").read_text())
    assert cfg["model_type"] == "sdar" and cfg["infill"]["provenance"]["steps"] > 100  # trained, not random


def test_listed_parameters_are_the_networks_not_the_files_beside_it(tmp_path: Path) -> None:
    """`infill models` PARAMS counts model.safetensors (or its shards), not the PTP adapter and SSMD head beside it."""
    folder = WEIGHTS_DIR / "blockdiff"
    side = {"ptp_adapter.safetensors", "ssmd_head.safetensors"}
    assert side <= {f.name for f in folder.iterdir()}  # the case this test is about
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "model.safetensors").symlink_to(folder / "model.safetensors")
    network = safetensors_parameters(alone)
    with_sides = tmp_path / "with_sides"
    with_sides.mkdir()
    for name in side:
        (with_sides / name).symlink_to(folder / name)
    sides = safetensors_parameters(with_sides)
    assert network and sides and sides > 100_000
    entry = {e.name: e for e in packaged_models()}["blockdiff"]
    assert entry.parameters == network
    (with_sides / "model-00001-of-00002.safetensors").symlink_to(folder / "model.safetensors")
    (with_sides / "model-00002-of-00002.safetensors").symlink_to(folder / "model.safetensors")
    assert safetensors_parameters(with_sides) == 2 * network  # shards count, files beside them do not


def test_packaged_names_resolve_and_paths_do_not() -> None:
    assert packaged_folder("blockdiff") == WEIGHTS_DIR / "blockdiff"
    for name in ("./blockdiff", "../blockdiff", "a/blockdiff", "no-such-model", ""):
        assert packaged_folder(name) is None


def test_fill_a_file_with_the_packaged_blockdiff_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "blockdiff").mkdir()  # a same-named folder in the working directory does not shadow the model
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    api.clear_model_cache()
    # one decode per run (no syntax resampling), so the stats describe exactly one 16-token fill
    common = ["--span", "4:4", "--model", "blockdiff", "--tokens", "16", "--daemon", "off", "--no-syntax-check"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = CliRunner().invoke(main, ["fill", str(p), *common, "--decoder", "s2d2", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    # the user sees no library warning (transformers renamed past_key_values to cache in 5.24)
    assert not [w for w in caught if issubclass(w.category, (DeprecationWarning, FutureWarning))], caught
    doc = json.loads(r.stdout)
    (edit,) = doc["edits"]
    assert (edit["start_line"], edit["end_line"]) == (4, 4)
    stats = doc["stats"]
    assert stats["decoder"] == "s2d2" and stats["model"] == "blockdiff"
    assert 1 <= stats["nfe"] and 1 <= stats["tokens"] <= 16
    assert p.read_text() == SOURCE  # --format json writes nothing
    # the written file changes line 4 only
    out = tmp_path / "out.py"
    r = CliRunner().invoke(main, ["fill", str(p), *common, "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    new = out.read_text().split("\n")
    old = SOURCE.split("\n")
    assert new[:3] == old[:3] and new[-2:] == old[-2:]


def test_a_substituted_decoder_is_reported_in_json_and_with_v(tmp_path: Path) -> None:
    """--decoder assd on a block-diffusion model runs the self-speculative decoder (s2d2): the JSON stats name
    both, -v says so on stderr, and a decoder the kind runs as named reports no substitution."""
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    api.clear_model_cache()
    common = ["fill", str(p), "--span", "4:4", "--model", "blockdiff", "--tokens", "8", "--daemon", "off"]
    runner = CliRunner()
    r = runner.invoke(main, [*common, "--no-syntax-check", "--decoder", "assd", "--format", "json", "-v"])
    assert r.exit_code == 0, r.stderr
    stats = json.loads(r.stdout)["stats"]
    assert stats["decoder"] == "s2d2"
    assert stats["substituted"] == {"asked": "assd", "ran": "s2d2"}
    assert "--decoder assd ran as --decoder s2d2" in r.stderr and "block-diffusion" in r.stderr
    quiet = runner.invoke(main, [*common, "--no-syntax-check", "--decoder", "assd", "--format", "json"])
    assert quiet.exit_code == 0 and "ran as" not in quiet.stderr  # a note: -v shows it, the JSON always says it
    named = runner.invoke(main, [*common, "--no-syntax-check", "--decoder", "s2d2", "--format", "json", "-v"])
    assert named.exit_code == 0, named.stderr
    assert json.loads(named.stdout)["stats"]["substituted"] is None and "ran as" not in named.stderr
