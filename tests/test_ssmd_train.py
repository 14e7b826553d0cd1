"""SSMD head training (infill.training.ssmd, `infill train ssmd`) on a tiny random block-diffusion model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from infill.config import DecodeConfig, ModelSpec
from infill.decoding.blockfill import generate
from infill.models.blockdiff import load_folder
from infill.models.ssmd import HEAD_FILE, causal_logits, identity_gap, read_head
from tests.fixtures_train import tiny_block_model_and_corpus

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tiny_block_model_and_corpus(tmp_path_factory.mktemp("ssmd"), "base")


def test_train_command_resumes_and_writes_a_loadable_head(setup: tuple[Path, Path], tmp_path: Path) -> None:
    from infill.cli import main

    folder, corpus = setup
    out = tmp_path / "run"
    common = ["train", "ssmd", "--model", str(folder), "--data", str(corpus), "--out", str(out)]
    common += ["--batch-size", "2", "--seq-len", "32", "--block-sizes", "4,8", "--max-block", "8", "--heads", "2"]
    common += ["--intermediate", "16", "--eval-examples", "2", "--eval-every", "2", "--log-every", "1"]
    common += ["--lr", "1e-2"]
    r = CliRunner().invoke(main, [*common, "--steps", "2"])
    assert r.exit_code == 0, r.output
    assert "zero-init check gap 0.0" in r.stderr and (out / "checkpoint.pt").is_file()
    assert "2 steps, held-out causal CE" in r.stdout and (out / HEAD_FILE).is_file()
    r = CliRunner().invoke(main, [*common, "--steps", "4"])  # --resume is the default
    assert r.exit_code == 0, r.output
    assert "resumed" in r.stderr and "at step 2" in r.stderr and "4 steps" in r.stdout

    lines = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    train = [x for x in lines if "train_causal" in x]
    assert [x["step"] for x in train] == [1, 2, 3, 4]  # the second run went on from step 2, not from 0
    held = [x for x in lines if "heldout" in x]
    assert sorted({x["step"] for x in held}) == [2, 4] and held[-1].get("final") is True
    for x in held:
        assert set(x["heldout"]) == {"B4", "B8", "all"}
        ce = x["heldout"]["all"]
        assert ce["targets"] > 0 and ce["causal"] > 0 and ce["noncausal"] > 0
    # the base is frozen: the non-causal figure on the fixed held-out examples is the same at every evaluation
    assert len({round(x["heldout"]["all"]["noncausal"], 9) for x in held}) == 1
    assert held[-1]["heldout"]["all"]["causal"] != held[-1]["heldout"]["all"]["noncausal"]

    head, prov = read_head(out / HEAD_FILE)
    assert prov["steps"] == 4 and prov["heldout"] == held[-1]["heldout"]
    assert head.shape.max_block == 8 and head.shape.heads == 2
    assert float(head.out.weight.detach().abs().sum()) > 0  # trained: W_out left zero, p_C would still be p_NC

    # the normal loader: the head fits the base and passes the built-in zero-initialisation check
    (folder / HEAD_FILE).write_bytes((out / HEAD_FILE).read_bytes())
    try:
        loaded = load_folder(folder, ModelSpec(name=str(folder), device="cpu", bf16=False))
        attached = loaded.model.ssmd_head
        assert attached is not None
        inner = loaded.model.model
        embed, lm_head = inner.get_input_embeddings(), inner.get_output_embeddings()
        assert identity_gap(attached, lm_head, embed) == 0.0
        # ... and the trained head really changes the causal logits (a zeroed W_out would give gap 0 here)
        gen = torch.Generator().manual_seed(0)
        hidden = torch.randn(4, head.shape.hidden, generator=gen)
        tokens = torch.randint(0, int(embed.weight.shape[0]), (4,), generator=gen)
        with torch.no_grad():
            nc = lm_head(hidden).float()
        got = causal_logits(attached, embed, lm_head, tokens, hidden, torch.arange(4), nc)
        assert torch.equal(got[0], nc[0]) and float((got[1:] - nc[1:]).abs().max()) > 0
        prompt = torch.tensor(loaded.tokenizer.encode("def add(a, b):\n"))
        cfg = DecodeConfig(decoder="ssmd", temperature=0.0, block_size=4)
        ids, st = generate(loaded.model, prompt, 8, cfg, torch.Generator())
        assert 0 < st.tokens and ids.numel() <= 8 and st.extra["head_passes"] > 0
    finally:
        (folder / HEAD_FILE).unlink()


def test_the_initial_head_follows_the_seed(setup: tuple[Path, Path], tmp_path: Path) -> None:
    """Two runs with the same flags start from the same head whatever the process's own random state (the head's
    weights were drawn from torch's global generator, which a fresh process seeds at random)."""
    from infill.cli import main

    folder, corpus = setup
    common = ["train", "ssmd", "--model", str(folder), "--data", str(corpus), "--steps", "1", "--batch-size", "2"]
    common += ["--seq-len", "32", "--block-sizes", "4", "--max-block", "8", "--heads", "2", "--intermediate", "16"]
    common += ["--eval-examples", "2", "--lr", "1e-12"]
    heads = []
    for process_seed in (1, 2):
        torch.manual_seed(process_seed)
        r = CliRunner().invoke(main, [*common, "--out", str(tmp_path / str(process_seed))])
        assert r.exit_code == 0, r.output
        heads.append(read_head(tmp_path / str(process_seed) / HEAD_FILE)[0].state_dict())
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
