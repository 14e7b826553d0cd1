"""`infill models` lists packaged and HF-cache models with size, parameters and provenance, without torch."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from infill.cli import main
from infill.core.catalog import packaged_models


def fake_model(folder: Path, model_type: str, provenance: str | None = None) -> None:
    """A model folder with a hand-written safetensors file (2x3 + 4 = 10 parameters); no torch needed."""
    folder.mkdir(parents=True)
    cfg: dict[str, object] = {"model_type": model_type}
    if provenance:
        cfg["infill"] = {"provenance": provenance}
    (folder / "config.json").write_text(json.dumps(cfg))
    header = json.dumps(
        {
            "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
            "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]},
        }
    ).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(40))


def fake_cache(root: Path) -> Path:
    repo = root / "models--someone--assd-xlnet"
    fake_model(repo / "snapshots" / "abc123", "xlnet")
    (repo / "refs").mkdir()
    (repo / "refs" / "code").write_text("abc123")
    fake_model(root / "models--someone--sdar-tiny" / "snapshots" / "def456", "sdar")
    return root


def test_lists_cache_entries_as_json(tmp_path: Path) -> None:
    cache = fake_cache(tmp_path / "hub")
    out = CliRunner().invoke(main, ["models", "--json", "--cache-dir", str(cache)])
    assert out.exit_code == 0, out.output
    entries = [e for e in json.loads(out.output) if e["path"].startswith(str(cache))]
    by_name = {e["name"]: e for e in entries}
    assert by_name["someone/assd-xlnet"]["revision"] == "code"
    assert by_name["someone/assd-xlnet"]["kind"] == "asarm"
    assert by_name["someone/assd-xlnet"]["parameters"] == 10
    assert by_name["someone/sdar-tiny"]["kind"] == "blockdiff"
    assert "HF cache someone/sdar-tiny" in by_name["someone/sdar-tiny"]["provenance"]


def test_table_and_packaged(tmp_path: Path) -> None:
    fake_model(tmp_path / "weights" / "default", "xlnet", provenance="trained on the stdlib")
    (entry,) = packaged_models(tmp_path / "weights")
    assert (entry.name, entry.provenance, entry.parameters) == ("default", "trained on the stdlib", 10)
    out = CliRunner().invoke(main, ["models", "--cache-dir", str(fake_cache(tmp_path / "hub"))])
    assert out.exit_code == 0
    assert "someone/assd-xlnet" in out.output and "NAME" in out.output


def test_listing_does_not_import_torch(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from infill.cli import main\n"
        f"r = CliRunner().invoke(main, ['models', '--cache-dir', {str(tmp_path)!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent)


def test_provenance_records_become_one_short_line() -> None:
    from infill.core.catalog import provenance_line

    record = {
        "trainer": "infill train asarm",
        "steps": 2534,
        "tokens_seen": 10379264,
        "heldout": {"nll_per_token": 3.2311},
        "corpus": {"files": 10103},
    }
    assert provenance_line(record) == "infill train asarm, 2,534 steps, 10.4M tokens, held-out NLL 3.23"
    bd = {"objective": "block diffusion (BD3-LM / SDAR 2N layout), FIM formatting", "steps": 7, "date": "2026-11-23"}
    assert provenance_line(bd) == "block diffusion (BD3-LM / SDAR 2N layout), 7 steps, 2026-11-23"
    # a continued run counts the runs it started from: nested `init` records (AS-ARM) or `prior_*` (block diffusion)
    continued = {**record, "steps": 100, "tokens_seen": 600_000, "init": {"steps": 2534, "tokens_seen": 10379264}}
    assert provenance_line(continued) == "infill train asarm, 2,634 steps, 11.0M tokens, held-out NLL 3.23"
    bd_continued = {**bd, "tokens_seen": 4_000_000, "prior_steps": 93, "prior_tokens_seen": 1_000_000, "init": "a/b"}
    expected = "block diffusion (BD3-LM / SDAR 2N layout), 100 steps, 5.0M tokens, 2026-11-23"
    assert provenance_line(bd_continued) == expected
    assert provenance_line({"random": True, "seed": 0}) == "random weights (untrained)"
    assert provenance_line("packaged with infill") == "packaged with infill"
