"""`infill eval humaneval-single-line --decoder ptp / ssmd` end to end on a tiny random block-diffusion model with
a random PTP adapter and a random SSMD head beside it: the eval path loads them, decodes every task with the
named decoder (no task errors), executes the fills and writes a report that says which decoder ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from infill.cli import main
from infill.config import ModelSpec
from infill.models.blockdiff import load_folder
from infill.models.ptp import ADAPTER_FILE, PTPAdapter
from infill.models.ssmd import HEAD_FILE
from infill.models.tiny import tiny_blockdiff_checkpoint as tiny_checkpoint
from tests.fixtures_ssmd import folder_with_head

torch.set_num_threads(1)
LIMIT = 2


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(a folder with both a PTP adapter and an SSMD head, a bare folder with neither)."""
    from infill import api

    root = tmp_path_factory.mktemp("evalbd")
    full = folder_with_head(root / "full", seed=1)
    teacher = load_folder(full, ModelSpec(device="cpu", bf16=False)).model.model
    adapter = PTPAdapter.for_teacher(teacher, rank=4, slots=4)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for prm in adapter.parameters():  # random, not the zero start: the slots differ from the block draft
            prm.copy_(torch.randn(prm.shape, generator=gen) * 0.3)
    adapter.save(full / ADAPTER_FILE)
    bare = tiny_checkpoint(root / "bare", seed=1)
    api.clear_model_cache()
    yield full, bare
    api.clear_model_cache()


def run_eval(folder: Path, out: Path, decoder: str, *extra: str) -> tuple[Any, dict[str, Any]]:
    args = ["eval", "humaneval-single-line", "--model", str(folder), "--decoder", decoder, *extra]
    args += ["--limit", str(LIMIT), "--oracle-length", "--device", "cpu", "-q", "-o", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result, json.loads(out.read_text())


@pytest.mark.parametrize(("decoder", "extra"), [("ptp", ("--temperature", "1")), ("ssmd", ())])
def test_eval_runs_the_decoder_end_to_end(folders: Any, tmp_path: Path, decoder: str, extra: tuple[str, ...]) -> None:
    full, _ = folders
    result, report = run_eval(full, tmp_path / "report.json", decoder, *extra)
    assert report["decode"]["decoder"] == decoder and f"{decoder} k=" in result.output
    assert f"/{LIMIT} tasks" in result.output and report["subset"] == f"{LIMIT} evenly spaced"
    summary = report["summary"]
    assert summary["tasks"] == LIMIT and len(report["results"]) == LIMIT
    # every task was decoded and its program executed: no task ended in a decoding error
    assert sum(summary["statuses"].values()) == LIMIT and "error" not in summary["statuses"], report["results"]
    assert all(r["error"] is None and r["tokens"] > 0 and r["nfe"] > 0 for r in report["results"])
    if decoder == "ptp":
        assert summary["nfe"] <= summary["tokens"]  # PTP: passes never exceed tokens
    else:
        assert report["model_info"]["ssmd_head"] > 0
        assert summary["tokens"] > summary["nfe"]  # a full pass reveals at least two tokens (window >= 2, K = 2)


@pytest.mark.parametrize("decoder", ["ptp", "ssmd"])
def test_eval_without_adapter_or_head_scores_every_task_as_an_error(folders: Any, tmp_path: Path, decoder: str) -> None:
    """The negative control of the test above: a model without the decoder's file runs, but every task is an
    error naming what is missing."""
    _, bare = folders
    assert not (bare / ADAPTER_FILE).exists() and not (bare / HEAD_FILE).exists()
    _, report = run_eval(bare, tmp_path / "report.json", decoder)
    assert report["summary"]["statuses"] == {"error": LIMIT}
    needs = "PTP adapter" if decoder == "ptp" else "SSMD head"
    assert all(needs in str(r["error"]) for r in report["results"]), [r["error"] for r in report["results"]]


def test_raw_with_a_block_diffusion_model_is_one_line_not_a_crash(folders: Any, tmp_path: Path) -> None:
    """`--raw` (the model alone, without the fill core) is an any-subset evaluation: asked of a block-diffusion
    folder it is a usage error naming the model, exit 2 (it was an AttributeError, exit 123)."""
    _, bare = folders
    args = ["eval", "humaneval-single-line", "--model", str(bare), "--raw", "--limit", "1", "--device", "cpu", "-q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "--raw is for any-subset and left-to-right models" in result.output and "block-diffusion" in result.output
