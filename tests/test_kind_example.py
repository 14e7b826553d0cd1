"""A model kind from outside infill, in this one file: its backend, the decoders it runs, how its folders are
recognised and loaded, as one Kind object (infill.core.kinds; docs/contributing.md, "A model kind"). Named in
INFILL_KINDS, `infill fill --model FOLDER` fills through it with no other change to the tool.

The kind, "scripted", is a folder whose config.json says `"model_type": "scripted-fill"` and holds the text the
model writes (`fill`): an any-subset model (tests/fixtures_cli.py's ScriptedModel) behind the any-subset backend,
which runs ASSD as sequential sampling (it has no draft pass), a swap the fill reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fixtures_cli import ByteTokenizer, ScriptedModel

from infill import api
from infill.cli import main
from infill.config import DecodeConfig, ModelSpec
from infill.core import kinds
from infill.core.backends import Kind
from infill.core.kinds.asarm import AnySubset
from infill.errors import ExitCode
from infill.models.registry import LoadedModel

ROOT = Path(__file__).resolve().parent.parent
MODEL_TYPE = "scripted-fill"
SOURCE = 'def double(x):\n    """Twice x."""\n    return 0\n'
FILL = "return x * 2"


class ScriptedBackend(AnySubset):
    """The any-subset backend; ASSD (the library's default) runs as sequential sampling."""

    def prepare(self, cfg: DecodeConfig, loaded: LoadedModel) -> tuple[LoadedModel, DecodeConfig]:
        return loaded, replace(cfg, decoder="sequential") if cfg.decoder == "assd" else cfg


def is_scripted(cfg: dict[str, Any], folder: Path | None) -> bool:
    return cfg.get("model_type") == MODEL_TYPE


def load_folder(folder: Path, spec: ModelSpec, cfg: dict[str, Any], provenance: str) -> LoadedModel:
    model = ScriptedModel([[(str(cfg["fill"]), 1.0)]])
    return LoadedModel(spec.name, "scripted", model, ByteTokenizer(), {"path": str(folder), "source": provenance})


KIND = Kind(
    name="scripted",
    label="a scripted (test)",
    decoders=("sequential", "beam"),
    backend=ScriptedBackend(),
    detect=is_scripted,
    load=load_folder,
    model_types=(MODEL_TYPE,),
)


def scripted_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "scripted-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": MODEL_TYPE, "fill": FILL}), encoding="utf-8")
    return folder


@pytest.fixture
def registered() -> Iterator[None]:
    kinds.register(KIND)
    api.clear_model_cache()
    try:
        yield
    finally:
        kinds.unregister(KIND.name)
        api.clear_model_cache()


def test_a_kind_named_in_infill_kinds_fills_through_the_cli(tmp_path: Path) -> None:
    """The real command in its own process: the kind comes in through INFILL_KINDS alone."""
    folder, source = scripted_folder(tmp_path), tmp_path / "a.py"
    source.write_text(SOURCE, encoding="utf-8")
    env = {**os.environ, "INFILL_KINDS": "test_kind_example", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    argv = [sys.executable, "-m", "infill", "fill", str(source), "--span", "3", "--model", str(folder)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert source.read_text(encoding="utf-8") == SOURCE.replace("return 0", FILL)


def test_the_registry_recognises_the_kind_and_its_swap_is_reported(tmp_path: Path, registered: None) -> None:
    folder, source = scripted_folder(tmp_path), tmp_path / "a.py"
    source.write_text(SOURCE, encoding="utf-8")
    assert kinds.folder_kind({"model_type": MODEL_TYPE}, folder) == "scripted"
    args = ["fill", str(source), "--span", "3", "--model", str(folder), "--format", "json"]
    result = CliRunner().invoke(main, [*args, "--decoder", "assd", "--temperature", "1"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)["stats"]
    assert stats["substituted"] == {"asked": "assd", "ran": "sequential"} and stats["decoder"] == "sequential"
    assert json.loads(result.stdout)["edits"][0]["text"] == f"    {FILL}"


def test_a_decoder_the_kind_does_not_run_is_refused_once_with_its_name(tmp_path: Path, registered: None) -> None:
    source = tmp_path / "a.py"
    source.write_text(SOURCE, encoding="utf-8")
    args = ["fill", str(source), "--span", "3", "--model", str(scripted_folder(tmp_path)), "--decoder", "parallel"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == ExitCode.USAGE
    assert "is a scripted (test) model; use one of: sequential, beam" in result.stderr
    assert source.read_text(encoding="utf-8") == SOURCE
