"""A left-to-right FIM model (infill.models.autoregressive.CausalFim) under the any-subset decoders: speculative
decoding with prompt-lookup drafts follows the model's joint exactly, checked by enumeration (docs/decoding.md,
"How exactness is tested"); greedy speculative output is greedy sequential output token for token; and the
prompt cache returns what a fresh forward returns.

The network is a tiny random Qwen2 over 5 tokens (0..4) plus an end token and the three FIM tokens, which the
model never writes. Fills are 3-4 tokens long, so the joint over all 5^M fills comes from the chain rule: one
verify pass with a fill written in gives q(x_i | prompt, x_{<i}) for every i.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
from fixtures_bd import tiny_causal_lm
from fixtures_decode import Memo, repeats_problems, unverified_draw, unverified_joint
from fixtures_stats import mixture_power
from test_decoding_exactness import PAD, exact_joint, padded_joint, pooled_p_value

from infill.config import DecodeConfig
from infill.decoding import decode
from infill.errors import DecodeError
from infill.models.autoregressive import CausalFim, shared_prefix
from infill.models.base import FillProblem
from infill.models.fim import FimTokens

torch.set_num_threads(1)

END, PRE, SUF, MID = 5, 6, 7, 8
VOCAB = 9
FIM = FimTokens("qwen", PRE, SUF, MID)
# a sampler a fifth of the way from the joint to the negative control's fills fails with probability >= 0.99 at
# 3k samples on every layout (test_the_controls_are_far_enough; at 1.5k some layouts would not); the control
# itself is then at p < 1e-100
SAMPLES = 3_000
# the lookup layouts' own draws: the fewest for that power here and in test_block_size_one's two views were
# 377-787 (before the gap), 499-631 (in the suffix), 1,481-1,738 (mid-fill), each asserted; a quarter to spare
LAYOUT_SAMPLES = {"match-before-gap": 1_200, "match-in-suffix": 1_200, "match-mid-fill": 2_200}
LOOKUP = DecodeConfig(decoder="assd", draft="lookup", k=4)
MASK = VOCAB  # CausalFim's mask id: an id no logit has

# per position: a token, or None for the span; the span is one contiguous run
LAYOUTS: dict[str, list[int | None]] = {
    "match-before-gap": [0, 1, 2, 3, 0, 1, None, None, None],  # drafts [2, 3] right away
    "match-mid-fill": [0, 1, 2, 3, None, None, None, None],  # a match appears once the fill starts "0 1"
    "match-in-suffix": [4, 1, None, None, None, 1, 3, 2],  # the copy comes from the text after the span
}


def fim_model(seed: int = 3, ends: tuple[int, ...] = ()) -> CausalFim:
    """Without end tokens every fill has exactly M tokens of 0..4 (END is banned with the FIM tokens)."""
    banned = {END, PRE, SUF, MID} - set(ends)
    return CausalFim(tiny_causal_lm("qwen2", seed=seed, vocab=VOCAB), fim=FIM, end_ids=ends, banned=banned)


@pytest.fixture(scope="module")
def model() -> Memo:
    return Memo(fim_model())


def problem_of(layout: list[int | None], span: bool = False) -> FillProblem:
    ids = torch.tensor([MASK if t is None else t for t in layout])
    masked = torch.tensor([i for i, t in enumerate(layout) if t is None])
    return FillProblem(ids, masked, torch.zeros(len(masked), dtype=torch.long) if span else None)


def draw_counts(model: object, problem: FillProblem, draw: object, samples: int = SAMPLES) -> Counter[tuple[int, ...]]:
    g = torch.Generator().manual_seed(99)
    return Counter(tuple(draw(model, problem, g)) for _ in range(samples))  # type: ignore[operator]


def lookup_draw(model: object, problem: FillProblem, g: torch.Generator) -> list[int]:
    tokens, _ = decode(model, problem, LOOKUP, g)  # type: ignore[arg-type]
    return [int(t) for t in tokens]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_lookup_speculation_matches_the_joint(model: Memo, layout: str) -> None:
    assert_lookup_matches_the_joint(model, layout)


def assert_lookup_matches_the_joint(model: Memo, layout: str) -> None:
    """Lookup speculation's fills against the exact joint, on a layout where drafts are proposed."""
    problem = problem_of(LAYOUTS[layout])
    drafted = 0

    def draw(m: object, p: FillProblem, g: torch.Generator) -> list[int]:
        nonlocal drafted
        tokens, stats = decode(m, p, LOOKUP, g)  # type: ignore[arg-type]
        drafted += stats.extra["drafted"]
        return [int(t) for t in tokens]

    samples = LAYOUT_SAMPLES[layout]
    counts = draw_counts(model, problem, draw, samples)
    joint = exact_joint(model, problem, LOOKUP)
    assert pooled_p_value(counts, joint, samples) > 1e-4
    assert drafted > samples // 20  # the lookup proposed drafts (else this tests only sequential steps)


@pytest.mark.parametrize("layout", ["match-before-gap", "match-in-suffix"])
def test_drafts_accepted_without_verification_fail(model: Memo, layout: str) -> None:
    """Power: the same drafts taken without the test are visibly not the joint."""
    problem = problem_of(LAYOUTS[layout])
    counts = draw_counts(model, problem, unverified_draw)
    assert pooled_p_value(counts, exact_joint(model, problem, LOOKUP), SAMPLES) < 1e-6


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_controls_are_far_enough(model: Memo, layout: str) -> None:
    """The layout's draws (LAYOUT_SAMPLES) are enough: a sampler that takes the control's fills one time in five
    and the joint's otherwise fails the chi-square test with probability >= 0.99."""
    assert_control_is_far_enough(model, layout)


def assert_control_is_far_enough(model: Memo, layout: str) -> None:
    problem = problem_of(LAYOUTS[layout])
    joint, control = exact_joint(model, problem, LOOKUP), unverified_joint(model, problem)
    samples = LAYOUT_SAMPLES[layout]
    power = mixture_power(joint, control, samples, eps=1 / 5)
    print(f"{layout}: {samples} samples catch a sampler 1/5 of the way to the control with probability {power:.4f}")
    assert power >= 0.99


def test_lookup_with_an_end_token_matches_the_variable_length_joint() -> None:
    """With an end token, a sampled end ends the fill (the rest is padding, never asked of the model)."""
    padded = Memo(fim_model(seed=5, ends=(PAD,)))
    problem = problem_of([0, 1, 2, 3, 0, 1, None, None, None, None, 2], span=True)
    joint = padded_joint(padded, problem)
    assert 0.1 < sum(p for x, p in joint.items() if PAD in x) < 0.9  # early ends matter here
    counts = draw_counts(padded, problem, lookup_draw)
    assert set(counts) <= set(joint)
    assert pooled_p_value(counts, joint, SAMPLES) > 1e-4


def test_the_conditionals_are_the_networks_next_token_predictions_after_the_fim_prompt() -> None:
    """verify() row i is the network's prediction after PRE prefix SUF suffix MID x_0..x_{i-1}, read from a plain
    forward here; several end tokens share one probability (given to pad_id); FIM tokens (special or not: Code
    Llama's are ordinary vocabulary entries) and padding rows get none."""
    fim = CausalFim(tiny_causal_lm("qwen2", seed=1, vocab=12), fim=FIM, end_ids=(END, 10), text_vocab=11)
    ids, masked = torch.tensor([0, 1, 4, 3, MASK, 2]), torch.tensor([2, 3, 4])  # drafts 4, 3 written in
    got = fim.verify(ids, masked, 0, masked)  # (3, V)
    raw = fim.engine.model(input_ids=torch.tensor([[PRE, 0, 1, SUF, 2, MID, 4, 3]])).logits[0, -3:]  # (3, V)
    assert fim.pad_id == END
    assert torch.isinf(got[:, [PRE, SUF, MID, 10, 11]]).all()
    assert torch.allclose(got[:, END], torch.logsumexp(raw[:, [END, 10]], -1), atol=1e-5)
    assert torch.allclose(got[:, :5], raw[:, :5], atol=1e-5)
    assert torch.allclose(fim.draft(ids, masked, 1, masked[1:2]), got[1:2], atol=1e-5)


def test_greedy_speculation_is_greedy_decoding_token_for_token() -> None:
    """Temperature 0: lookup drafts, sequential decoding and beam search of width 1 write the same fill, for
    random texts full of repeats (so drafts are proposed, accepted and rejected)."""
    model = fim_model(seed=11, ends=(END,))
    greedy = DecodeConfig(decoder="sequential", temperature=0)
    spec = DecodeConfig(decoder="assd", draft="lookup", k=6, temperature=0)
    beam1 = DecodeConfig(decoder="beam", beam=1, temperature=0)
    drafted = rejected = 0
    for problem in repeats_problems(MASK):
        g = torch.Generator().manual_seed(0)
        want, _ = decode(model, problem, greedy, g)
        got, stats = decode(model, problem, spec, g)
        best, _ = decode(model, problem, beam1, g)
        assert got.tolist() == want.tolist() == best.tolist()
        drafted += stats.extra["drafted"]
        rejected += stats.extra["rejections"]
    assert drafted > 50 and rejected > 0


def test_the_prompt_cache_returns_what_a_fresh_forward_returns() -> None:
    cached, fresh = fim_model(seed=2, ends=(END,)), fim_model(seed=2, ends=(END,))

    def forget() -> None:
        fresh.engine.forget()

    assert_cache_is_fresh(cached, fresh, forget)


def assert_cache_is_fresh(cached: CausalFim, fresh: CausalFim, forget: Callable[[], None], passes: int = 60) -> None:
    """Calls in the orders beam search and lookup make them (shared prefixes, rejected drafts, a new problem)
    against a twin whose cache is cleared (`forget`) before every pass."""
    rng = random.Random(1)
    for _ in range(passes):
        layout: list[int | None] = [rng.randrange(5) for _ in range(rng.randrange(1, 6))]
        layout += [None] * 6 + [rng.randrange(5) for _ in range(rng.randrange(0, 4))]
        problem = problem_of(layout)
        ids = problem.ids.clone()
        ids[problem.masked] = torch.tensor([rng.randrange(5) for _ in range(6)])
        n = rng.randrange(0, 6)
        k = rng.randrange(1, 7 - n)
        targets = problem.masked[n : n + k]
        forget()
        want = fresh.verify(ids, problem.masked, n, targets)
        got = cached.verify(ids, problem.masked, n, targets)
        assert torch.allclose(got, want, atol=1e-4)


def test_calls_outside_left_to_right_are_decode_errors() -> None:
    model = fim_model()
    ids = torch.tensor([0, MASK, 1, MASK, 2])
    with pytest.raises(DecodeError, match="one contiguous span"):
        model.verify(ids, torch.tensor([1, 3]), 0, torch.tensor([1]))
    ids = torch.tensor([0, MASK, MASK, 2])
    with pytest.raises(DecodeError, match="one position per pass"):
        model.draft(ids, torch.tensor([1, 2]), 0, torch.tensor([1, 2]))
    with pytest.raises(DecodeError, match="in order"):
        model.verify(ids, torch.tensor([1, 2]), 0, torch.tensor([2]))


class CountedTokens(list[int]):
    """A token list that counts the tokens read one at a time (a Python comparison each)."""

    reads = 0

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int):
            CountedTokens.reads += 1
        return super().__getitem__(index)


def test_shared_prefix_is_the_common_prefix_without_a_python_step_per_token() -> None:
    """The cache's plan compares a prompt of thousands of tokens with each slot's at every keystroke: the common
    prefix is found by comparing slices, not token by token in Python (which took a sixth of an editor fill's time
    on a small GGUF model), and is the same length as the plain scan's, for lists, tuples and limits."""
    rng = random.Random(5)

    def plain(a: list[int], b: list[int], limit: int) -> int:
        n = 0
        while n < min(len(a), len(b), limit) and a[n] == b[n]:
            n += 1
        return n

    for _ in range(500):
        a = [rng.randrange(3) for _ in range(rng.randrange(0, 40))]
        b = a[: rng.randrange(0, len(a) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(0, 10))]
        limit = rng.randrange(-1, 45)
        assert shared_prefix(a, b, limit) == plain(a, b, limit)
        assert shared_prefix(tuple(a), b, limit) == plain(a, b, limit)
    prompt = [rng.randrange(1000) for _ in range(4000)]
    typed = CountedTokens(prompt[:3000] + [1001] + prompt[3000:])
    CountedTokens.reads = 0
    assert shared_prefix(CountedTokens(prompt), typed, 4000) == 3000
    assert shared_prefix(prompt, CountedTokens(prompt), 3999) == 3999
    assert CountedTokens.reads == 0
