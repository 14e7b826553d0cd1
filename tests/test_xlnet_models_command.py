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


def test_broken_cache_entries_never_break_or_hang_the_listing(tmp_path: Path) -> None:
    """One odd entry in someone's HF cache made the whole listing an internal error (exit 123), or hung it (a
    named pipe where a file should be). Now each is left out, or listed without what could not be read; the
    good entry is listed and the command exits 0. Run in a child process with a timeout: the defect was a hang."""
    import os

    cache = fake_cache(tmp_path / "hub")
    odd = cache / "models--odd--meta" / "snapshots" / "a1"  # an "infill" section that is not an object
    fake_model(odd, "xlnet")
    (odd / "config.json").write_text(json.dumps({"model_type": "xlnet", "infill": "x"}))
    for name, shape in (("shape-text", ["x"]), ("shape-null", None)):  # safetensors headers it never wrote
        folder = cache / f"models--odd--{name}" / "snapshots" / "a1"
        fake_model(folder, "xlnet")
        header = json.dumps({"w": {"dtype": "F32", "shape": shape}}).encode()
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    deep = cache / "models--odd--deep" / "snapshots" / "a1"
    fake_model(deep, "xlnet")
    (deep / "config.json").write_text('{"model_type": "xlnet", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    lineage = '{"steps": 1, "init": ' * 500 + '{"steps": 1}' + "}" * 500  # 501 runs, each continuing the last
    long = cache / "models--odd--lineage" / "snapshots" / "a1"
    fake_model(long, "xlnet")
    (long / "config.json").write_text('{"model_type": "xlnet", "infill": {"provenance": ' + lineage + "}}")
    for where in ("config.json", "model.safetensors"):  # named pipes where files should be
        folder = cache / f"models--odd--fifo-{where.split('.')[0]}" / "snapshots" / "a1"
        fake_model(folder, "xlnet")
        (folder / where).unlink()
        os.mkfifo(folder / where)
    (cache / "models--someone--assd-xlnet" / "refs" / "pipe").unlink(missing_ok=True)
    os.mkfifo(cache / "models--someone--assd-xlnet" / "refs" / "pipe")
    argv = [sys.executable, "-m", "infill", "models", "--json", "--cache-dir", str(cache)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    by_name = {e["name"]: e for e in json.loads(done.stdout)}
    assert by_name["someone/assd-xlnet"]["parameters"] == 10
    assert by_name["odd/meta"]["kind"] == "asarm"
    assert by_name["odd/shape-text"]["parameters"] is None and by_name["odd/shape-null"]["parameters"] is None
    assert "501 steps" in by_name["odd/lineage"]["provenance"]
    assert by_name["odd/fifo-model"]["parameters"] is None
    assert "odd/deep" not in by_name and "odd/fifo-config" not in by_name
