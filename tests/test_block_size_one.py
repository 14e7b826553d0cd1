"""A block-diffusion model at block size 1 as a left-to-right FIM model (infill.models.block_one.BlockOneFim):
its conditionals are the network's block-size-1 predictions after the FIM prompt, for position-aligned (a mask
token at the predicted position) and right-shifted (the row before it) models; whatever the cache held before,
a pass returns what a fresh one does; prompt-lookup speculation over it follows the exact joint (by enumeration,
with the negative control of drafts taken unverified); and through the CLI the tool's default decoder, beam
search, runs a FIM block-diffusion folder at block size 1 while --decoder s2d2 still runs its block decoder.

The networks are tiny random Qwen3 (position-aligned) and Qwen2 (right-shifted) decoders over 5 text tokens
(0..4), an end token, the three FIM tokens and the block-diffusion mask token.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from fixtures_bd import tiny_causal_lm
from fixtures_decode import Memo
from test_ar_exactness import (
    FIM,
    LAYOUTS,
    LOOKUP,
    MID,
    PRE,
    SAMPLES,
    SUF,
    assert_cache_is_fresh,
    assert_control_is_far_enough,
    assert_lookup_matches_the_joint,
    draw_counts,
    problem_of,
    unverified_draw,
)
from test_decoding_exactness import exact_joint, pooled_p_value

from infill.config import DecodeConfig
from infill.decoding import decode
from infill.models.block_one import BlockOneFim
from infill.models.blockdiff import BlockDiffModel

torch.set_num_threads(1)

END, BD_MASK = 5, 9  # FIM tokens 6, 7, 8 (test_ar_exactness)
VOCAB = 10
KINDS = {"aligned": ("qwen3", False), "shifted": ("qwen2", True)}


def view(kind: str, seed: int = 3, ends: tuple[int, ...] = ()) -> BlockOneFim:
    """Without end tokens every fill has exactly M tokens of 0..4."""
    arch, shifted = KINDS[kind]
    bd = BlockDiffModel(tiny_causal_lm(arch, seed=seed, vocab=VOCAB), mask_id=BD_MASK, shifted=shifted, end_ids=ends)
    banned = {END, BD_MASK} - set(ends)
    return BlockOneFim(bd, fim=FIM, end_ids=ends, banned=banned, text_vocab=VOCAB)


def reference(model: BlockOneFim, seq: list[int]) -> torch.Tensor:
    """(V,) the network's block-size-1 prediction of the position after `seq`, by one plain causal forward
    without a cache: with a mask token at that position (position-aligned), or from the last row (shifted)."""
    bd = model.bd
    inp = seq if bd.shifted else [*seq, BD_MASK]
    with torch.no_grad():
        return bd.model(input_ids=torch.tensor([inp]), position_ids=torch.arange(len(inp))[None]).logits[0, -1]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_conditionals_are_the_block_size_one_predictions_after_the_fim_prompt(kind: str) -> None:
    model = view(kind, seed=1)
    prefix, suffix, fill = [0, 1, 4], [2, 3], [4, 3, 1]
    layout: list[int | None] = [*prefix, None, None, None, *suffix]
    problem = problem_of(layout)
    ids = problem.ids.clone()
    ids[problem.masked] = torch.tensor(fill)
    got = model.verify(ids, problem.masked, 0, problem.masked)  # (3, V), one pass (two for k > 1)
    prompt = [PRE, *prefix, SUF, *suffix, MID]
    for i in range(3):
        want = reference(model, prompt + fill[:i])
        assert torch.allclose(got[i, :5], want[:5], atol=1e-4), i
        assert torch.isinf(got[i, 5:]).all()  # end (no end tokens here), FIM and mask tokens are never written
        step = model.draft(ids, problem.masked, i, problem.masked[i : i + 1])  # the one-position pass
        assert torch.allclose(step[0, :5], want[:5], atol=1e-4), i


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_cache_returns_what_a_fresh_pass_returns(kind: str) -> None:
    cached, fresh = view(kind, seed=2, ends=(END,)), view(kind, seed=2, ends=(END,))

    def forget() -> None:
        fresh.engine.forget()

    assert_cache_is_fresh(cached, fresh, forget, passes=40)


@pytest.fixture(scope="module", params=sorted(KINDS))
def memo(request: pytest.FixtureRequest) -> Memo:
    return Memo(view(request.param))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_lookup_speculation_matches_the_joint(memo: Memo, layout: str) -> None:
    assert_lookup_matches_the_joint(memo, layout)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_controls_are_far_enough(memo: Memo, layout: str) -> None:
    assert_control_is_far_enough(memo, layout)


def test_drafts_accepted_without_verification_fail(memo: Memo) -> None:
    """Power: the same drafts taken without the acceptance test are visibly not the joint."""
    problem = problem_of(LAYOUTS["match-before-gap"])
    counts = draw_counts(memo, problem, unverified_draw)
    assert pooled_p_value(counts, exact_joint(memo, problem, LOOKUP), SAMPLES) < 1e-6


def test_greedy_beam_one_and_sequential_write_the_same_fill() -> None:
    model = view("aligned", seed=11, ends=(END,))
    rng = random.Random(0)
    for _ in range(10):
        layout: list[int | None] = [rng.randrange(5) for _ in range(rng.randrange(1, 8))]
        layout += [None] * 8 + [rng.randrange(5) for _ in range(rng.randrange(0, 4))]
        problem = problem_of(layout, span=True)
        greedy, _ = decode(model, problem, DecodeConfig(decoder="sequential", temperature=0), torch.Generator())
        beam1, _ = decode(model, problem, DecodeConfig(decoder="beam", beam=1, temperature=0), torch.Generator())
        assert greedy.tolist() == beam1.tolist()


def test_the_tool_runs_a_fim_block_diffusion_folder_at_block_size_one(tmp_path: Path) -> None:
    """The packaged block-diffusion model as a user calls it: the default (beam search) runs at block size 1 and
    writes a line that compiles; --decoder sequential runs at block size 1 too, --decoder s2d2 the block
    decoder."""
    from click.testing import CliRunner

    from infill import api
    from infill.cli import main

    source = "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n"
    path = tmp_path / "m.py"
    path.write_text(source)
    api.clear_model_cache()
    common = ["fill", str(path), "--span", "3:3", "--model", "blockdiff", "--daemon", "off", "-o", "-", "--stats"]
    r = CliRunner().invoke(main, common)
    assert r.exit_code == 0, r.stderr
    assert "decoder=beam " in r.stderr
    compile(r.stdout, "m.py", "exec")
    assert r.stdout.splitlines()[:2] == source.splitlines()[:2] and r.stdout.splitlines()[2] != source.splitlines()[2]
    for decoder in ("sequential", "s2d2"):
        args = [*common, "--decoder", decoder, "--temperature", "0", "--allow-syntax-errors"]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.stderr
        assert f"decoder={decoder} " in r.stderr
    assert path.read_text() == source
