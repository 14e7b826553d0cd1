"""PTP drafter training (infill.training.ptp, `infill train ptp`) on a tiny random block-diffusion model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from infill.config import DecodeConfig, ModelSpec
from infill.decoding.blockfill import fill_middle
from infill.decoding.coupling import pick
from infill.models.blockdiff import load_folder
from infill.models.ptp import ADAPTER_FILE, load_adapter
from infill.training import ptp as tp
from tests.fixtures_train import tiny_block_model_and_corpus

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tiny_block_model_and_corpus(tmp_path_factory.mktemp("ptp"), "teacher")


def test_extracted_u_reproduces_the_targets_under_the_decoding_teacher(setup: tuple[Path, Path]) -> None:
    """The training pipeline's u, picked against the teacher's q as DECODING computes it (a commit fused with a
    mask row), gives back every target token: train-time and decode-time q are the same distribution."""
    from tokenizers import Tokenizer

    folder, corpus = setup
    loaded = load_folder(folder, ModelSpec(device="cpu", bf16=False))
    bk = loaded.model
    sp = tp.specials(Tokenizer.from_file(str(folder / "tokenizer.json")), bk.mask_id)
    cfg = tp.PTPTrainConfig(context=48, max_middle=8)
    docs = tp.load_docs(corpus, "train", Tokenizer.from_file(str(folder / "tokenizer.json")), 10**6)
    gen = torch.Generator().manual_seed(0)
    examples = tp.make_examples(bk.model, docs, sp, cfg, random.Random(0), gen, 4, teacher_share=0.5)
    batch = tp.teacher_pass(bk.model, examples, sp, gen)
    checked = 0
    for k, e in enumerate(examples):
        for pos in range(e.start, e.stop):
            state = bk.new_state()
            q = bk.commit(state, torch.tensor(e.ids[:pos]), 1, draft_ids=torch.tensor([bk.mask_id]))
            assert q is not None
            got = int(pick(batch.u[k, pos], torch.softmax(q[0].double(), -1)))
            assert got == e.ids[pos], (k, pos)
            checked += 1
    assert checked >= 8


def test_iteration_tokens_counts_one_decoding_iteration() -> None:
    v = 6
    targets = torch.tensor([[1, 2, 3, 4, 5, 1, -100, -100]])  # two groups of N = 4: the second runs past the end
    pred = torch.tensor([[0, 2, 3, 0, 0, 1, 0, 0]])  # group 1: drafts 2, 3 right, 0 wrong; group 2: 1 right
    logits = torch.nn.functional.one_hot(pred, v).float()  # (1, 8, V)
    got = tp.iteration_tokens(logits, targets, slots=4)
    assert got.tolist() == [[4.0, 2.0]]  # t_i + 2 drafts + correction; t_i + the end-capped draft (2 inside)


def test_train_command_resumes_and_writes_a_usable_adapter(setup: tuple[Path, Path], tmp_path: Path) -> None:
    from infill.cli import main

    folder, corpus = setup
    out = tmp_path / "run"
    common = ["train", "ptp", "--teacher", str(folder), "--corpus", str(corpus), "--out", str(out)]
    common += ["--batch-size", "2", "--splits", "2", "--slots", "3", "--rank", "2", "--eval-every", "2"]
    common += ["--save-every", "2", "--log-every", "1"]
    r = CliRunner().invoke(main, [*common, "--steps", "2"])
    assert r.exit_code == 0, r.output
    assert "held-out tokens/iteration" in r.stderr and (out / ADAPTER_FILE).is_file()
    r = CliRunner().invoke(main, [*common, "--steps", "4", "--resume"])
    assert r.exit_code == 0, r.output
    assert "resumed from" in r.stderr and "at step 2" in r.stderr and "4 steps" in r.stdout
    lines = [json.loads(x) for x in (out / "ptp_log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 2, 4] and all(x["ptp"] >= 1.0 for x in lines)
    loaded = load_folder(folder, ModelSpec(device="cpu", bf16=False))
    adapter = load_adapter(out / ADAPTER_FILE, loaded.model.model)
    assert adapter.cfg.slots == 3 and adapter.cfg.provenance["steps"] == 4
    assert float(adapter.u_embed.weight.abs().sum()) > 0  # trained: u reaches the slots
    (folder / ADAPTER_FILE).write_bytes((out / ADAPTER_FILE).read_bytes())
    text, st = fill_middle(loaded, "def add(a, b):\n", "\n", 6, DecodeConfig(decoder="ptp"), torch.Generator())
    assert isinstance(text, str) and st.extra["slots"] == 3
    (folder / ADAPTER_FILE).unlink()
