"""Theorem 2 by enumeration (docs/decoding.md, "How exactness is tested").

A tiny random XLNet (5 tokens + <mask>) fills 3-4 masked positions. The exact joint over all 5^M
fillings comes from the chain rule with the oracle (verify) pass: writing a filling x into the masked
positions, one verify pass gives q(x_i | prompt, x_{<i}) for every i. Each exact decoder draws 4k samples
(1k on the layout whose joint is furthest from the product) at a fixed seed and a chi-square test compares the
counts with the joint. The mean-field `parallel` decoder must fail the same test, which shows the test has
power; and the draws catch, 99 times in 100, a decoder only a third of the way from the joint to the
mean-field product (test_layouts_have_power). Prompt-lookup drafts are held to the same standard against their
own negative control, the looked-up tokens copied without the acceptance test, and the product
(test_lookup_layouts_have_power).

The model is wrapped in `Memo` (memoized forwards; the model is deterministic, so a replay is what a fresh
forward returns); the decoders run for real on every sample.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

from infill.config import DecodeConfig
from infill.decoding import decode
from infill.decoding.sampling import probs
from infill.models.base import FillProblem
from tests.fixtures_decode import Memo, tiny_xlnet, unverified_draw, unverified_joint
from tests.fixtures_stats import mixture_power, pooled_p_value

torch.set_num_threads(1)

V_REAL = 5  # regular tokens 0..4; id 5 is <mask>
MASK = 5
# enough: a decoder a third of the way from the joint to the mean-field product fails with probability >= 0.99 on
# every layout (test_layouts_have_power); the mean-field product itself is then at p < 1e-160
SAMPLES = 4_000

# layout name -> per position: a prompt token id, or None for masked
LAYOUTS: dict[str, list[int | None]] = {
    "masks-at-both-ends": [None, 0, None, None, 1, None],  # M = 4: first and last position masked
    "empty-suffix": [2, 3, None, None, None],  # M = 3: the fill runs to the end of the sequence
    "masks-first": [None, None, 4, None],  # M = 3: two masks before the only prompt token
    "repeated-token": [4, None, None, 4, None],  # M = 3: a token twice, so the bigram draft has pairs to use
}
# the draws each layout's tests take: as many as its power needs (test_layouts_have_power); the joints of
# masks-first and repeated-token are so far from the product that 1k draws are plenty
LAYOUT_SAMPLES = {"masks-at-both-ends": SAMPLES, "empty-suffix": SAMPLES, "masks-first": 1_000, "repeated-token": 1_000}


@pytest.fixture(scope="module")
def model() -> Memo:
    return Memo(tiny_xlnet(V_REAL + 1, n_layer=2, d_model=16, seed=7, init_scale=0.3))


def problem_of(layout: list[int | None]) -> FillProblem:
    ids = torch.tensor([MASK if t is None else t for t in layout])
    masked = torch.tensor([i for i, t in enumerate(layout) if t is None])
    return FillProblem(ids=ids, masked=masked)


def exact_joint(model: Memo, problem: FillProblem, cfg: DecodeConfig) -> dict[tuple[int, ...], float]:
    """joint(x) = prod_i q_i(x_i), q the (transformed) oracle conditionals with x written in."""
    M = problem.masked.shape[0]
    joint = {}
    for x in itertools.product(range(V_REAL), repeat=M):
        ids = problem.ids.clone()
        ids[problem.masked] = torch.tensor(x)
        q = probs(model.verify(ids, problem.masked, 0, problem.masked), cfg.temperature, cfg.top_k, cfg.top_p)
        joint[x] = float(torch.prod(q[torch.arange(M), torch.tensor(x)]))
    total = sum(joint.values())
    assert abs(total - 1.0) < 1e-6, total  # the chain rule covers all V^M fillings
    return joint


def chi_square_p(model: Memo, layout: str, cfg: DecodeConfig, seed: int = 1234) -> float:
    problem = problem_of(LAYOUTS[layout])
    samples = LAYOUT_SAMPLES[layout]
    joint = exact_joint(model, problem, cfg)
    g = torch.Generator().manual_seed(seed)
    counts: Counter[tuple[int, ...]] = Counter()
    for _ in range(samples):
        tokens, _ = decode(model, problem, cfg, g)
        counts[tuple(tokens.tolist())] += 1
    support = {x for x, pr in joint.items() if pr > 0}
    assert set(counts) <= support  # never a <mask>, an out-of-vocabulary or a zero-probability (top-k/p) fill
    return pooled_p_value(counts, {x: joint[x] for x in support}, samples)


def draft_product(model: Memo, problem: FillProblem) -> dict[tuple[int, ...], float]:
    """The mean-field product of one pass of independent drafts, over all V^M fillings."""
    M = problem.masked.shape[0]
    p = probs(model.draft(problem.ids, problem.masked, 0, problem.masked), 1.0)  # (M, V) independent drafts
    fills = itertools.product(range(V_REAL), repeat=M)
    return {x: float(torch.prod(p[torch.arange(M), torch.tensor(x)])) for x in fills}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layouts_have_power(model: Memo, layout: str) -> None:
    """The total variation between the independent drafts' product and the exact joint, printed and kept well
    above zero: where they nearly agree, no sample count tells an exact decoder from a wrong one. And the
    layout's draws (LAYOUT_SAMPLES) are enough: a decoder whose fills are the joint's two times in three and
    the product's otherwise fails the chi-square test with probability >= 0.99."""
    problem = problem_of(LAYOUTS[layout])
    joint = exact_joint(model, problem, DecodeConfig())
    product = draft_product(model, problem)
    tv = 0.5 * sum(abs(pr - product[x]) for x, pr in joint.items())
    print(f"{layout}: total variation between draft product and joint = {tv:.3f}")
    assert tv >= 0.15
    samples = LAYOUT_SAMPLES[layout]
    power = mixture_power(joint, product, samples, eps=1 / 3)
    print(f"{layout}: {samples} samples catch a decoder 1/3 of the way to the product with probability {power:.4f}")
    assert power >= 0.99


EXACT = [
    DecodeConfig(decoder="sequential"),
    DecodeConfig(decoder="assd", k=2, draft="model"),
    DecodeConfig(decoder="assd", k=3, draft="model"),
    DecodeConfig(decoder="assd", k=5, draft="model"),
]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("cfg", EXACT, ids=lambda c: c.decoder if c.decoder == "sequential" else f"assd-k{c.k}")
def test_exact_decoders_match_the_joint(model: Memo, layout: str, cfg: DecodeConfig) -> None:
    assert chi_square_p(model, layout, cfg) > 1e-4


def test_ngram_draft_is_exact(model: Memo) -> None:
    """Algorithm 2: the bigram draft changes the speed, never the distribution. On repeated-token a quarter of
    the drafts follow a visible pair (on masks-at-both-ends, its layout before, 3%), and 1k draws have power."""
    cfg = DecodeConfig(decoder="assd", k=3, draft="ngram")
    assert chi_square_p(model, "repeated-token", cfg) > 1e-4


def test_transformed_sampling_is_exact_for_the_transformed_joint(model: Memo) -> None:
    cfg = DecodeConfig(decoder="assd", k=3, draft="model", temperature=1.3, top_k=3, top_p=0.9)
    assert chi_square_p(model, "empty-suffix", cfg) > 1e-4


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_mean_field_parallel_fails(model: Memo, layout: str) -> None:
    """Power: sampling every position independently from one draft pass is visibly not the joint."""
    assert chi_square_p(model, layout, DecodeConfig(decoder="parallel", k=10)) < 1e-6


# --- variable length: a pad ends its span, and the rest of the span is pad without asking the model ---------
PAD = 0


def padded_joint(model: Memo, problem: FillProblem) -> dict[tuple[int, ...], float]:
    """joint(x) = prod_{i <= first pad} q_i(x_i), over fillings whose tokens after the first pad are all pad:
    the distribution `sequential` defines when a sampled pad ends its span."""
    M = problem.masked.shape[0]
    joint = {}
    for x in itertools.product(range(V_REAL), repeat=M):
        stop = x.index(PAD) + 1 if PAD in x else M
        if any(t != PAD for t in x[stop:]):
            continue
        ids = problem.ids.clone()
        ids[problem.masked] = torch.tensor(x)
        q = probs(model.verify(ids, problem.masked, 0, problem.masked), 1.0, 0, 1.0)
        joint[x] = float(torch.prod(q[torch.arange(stop), torch.tensor(x[:stop])]))
    assert abs(sum(joint.values()) - 1.0) < 1e-6
    return joint


@pytest.fixture(scope="module")
def padded() -> Memo:
    """The module's model with a pad token, one for the decoders below: they share its memoized forwards."""
    return Memo(tiny_xlnet(V_REAL + 1, n_layer=2, d_model=16, seed=7, init_scale=0.3, pad_id=PAD))


@pytest.mark.parametrize("cfg", EXACT[:3], ids=lambda c: c.decoder if c.decoder == "sequential" else f"assd-k{c.k}")
def test_variable_length_fills_match_the_joint(padded: Memo, cfg: DecodeConfig) -> None:
    layout = [1, None, None, None, None, 2]  # one span of 4 masked positions
    ids = torch.tensor([MASK if t is None else t for t in layout])
    masked = torch.tensor([i for i, t in enumerate(layout) if t is None])
    problem = FillProblem(ids=ids, masked=masked, span_of=torch.zeros(masked.shape[0], dtype=torch.long))
    joint = padded_joint(padded, problem)
    assert 0.1 < sum(p for x, p in joint.items() if PAD in x) < 0.9  # early ends matter in this layout
    g = torch.Generator().manual_seed(1234)
    counts: Counter[tuple[int, ...]] = Counter()
    for _ in range(SAMPLES):
        tokens, _ = decode(padded, problem, cfg, g)
        counts[tuple(tokens.tolist())] += 1
    assert set(counts) <= set(joint)  # nothing but pad ever follows a pad
    assert pooled_p_value(counts, joint, SAMPLES) > 1e-4


# --- prompt-lookup drafts (infill.decoding.lookup) --------------------------------------------------------

LOOKUP_LAYOUTS: dict[str, list[int | None]] = {
    "match-before-gap": [0, 1, 2, 3, 0, 1, None, None, None],  # drafts [2, 3] from the start
    "match-mid-fill": [0, 1, 2, 3, None, None, None, None],  # a match appears once the fill starts "0 1"
}
# the draws each lookup layout takes: as many as its power needs (test_lookup_layouts_have_power): a decoder a third
# of the way from the joint to the mean-field product, or to the negative control (the looked-up tokens copied
# without the acceptance test), fails with probability >= 0.99. The product is the nearer one here (0.17 and 0.28
# away in total variation, the control > 0.9), and it is the one that counts: a correction drawn from q instead of
# the residual is caught on match-mid-fill from ~1.5k draws, which the control alone (power at 1k) would not demand
LOOKUP_SAMPLES = {"match-before-gap": 5_500, "match-mid-fill": 3_500}
CONTROL_SAMPLES = 1_000  # the negative control is > 0.9 away: it fails at p < 1e-6 long before this


def _lookup_problem(name: str) -> FillProblem:
    layout = LOOKUP_LAYOUTS[name]
    ids = torch.tensor([MASK if t is None else t for t in layout])
    return FillProblem(ids=ids, masked=torch.tensor([i for i, t in enumerate(layout) if t is None]))


def _chi_square_of(model: Memo, problem: FillProblem, cfg: DecodeConfig, draw: object, samples: int) -> float:
    joint = exact_joint(model, problem, cfg)
    g = torch.Generator().manual_seed(99)
    counts: Counter[tuple[int, ...]] = Counter(tuple(draw(problem, g)) for _ in range(samples))  # type: ignore[operator]
    return pooled_p_value(counts, joint, samples)


@pytest.mark.parametrize("layout", sorted(LOOKUP_LAYOUTS))
def test_lookup_drafts_are_exact_and_fire(model: Memo, layout: str) -> None:
    from infill.decoding import decode

    cfg = DecodeConfig(decoder="assd", draft="lookup", k=4)
    problem = _lookup_problem(layout)
    drafted, most = 0, 0

    def draw(p: FillProblem, g: torch.Generator) -> list[int]:
        nonlocal drafted, most
        tokens, stats = decode(model, p, cfg, g)
        drafted += stats.extra["drafted"]
        most = max([most, *stats.accepted])
        return tokens.tolist()

    assert _chi_square_of(model, problem, cfg, draw, LOOKUP_SAMPLES[layout]) > 1e-4
    assert drafted > 100  # the lookup really proposed drafts (else this only tests sequential steps)
    assert most == 3  # two accepted drafts and the bonus token from the verify pass's extra row, in one pass


@pytest.mark.parametrize("layout", sorted(LOOKUP_LAYOUTS))
def test_lookup_layouts_have_power(model: Memo, layout: str) -> None:
    """The layout's draws (LOOKUP_SAMPLES) catch a decoder whose fills are the joint's two times in three and
    the independent drafts' product's, or the negative control's, otherwise with probability >= 0.99."""
    problem = _lookup_problem(layout)
    joint = exact_joint(model, problem, DecodeConfig(decoder="assd", draft="lookup", k=4))
    samples = LOOKUP_SAMPLES[layout]
    for name, control in (
        ("the product", draft_product(model, problem)),
        ("the control", unverified_joint(model, problem)),
    ):
        power = mixture_power(joint, control, samples, eps=1 / 3)
        print(f"{layout}: {samples} samples catch a decoder 1/3 of the way to {name} with probability {power:.4f}")
        assert power >= 0.99


@pytest.mark.parametrize("layout", sorted(LOOKUP_LAYOUTS))
def test_lookup_drafts_accepted_without_verification_fail(model: Memo, layout: str) -> None:
    """Negative control: copying the looked-up tokens without the acceptance test is visibly not the joint, and
    its draws are the distribution test_lookup_layouts_have_power enumerates for it."""
    problem = _lookup_problem(layout)
    samples = CONTROL_SAMPLES
    g = torch.Generator().manual_seed(99)
    counts = Counter(tuple(unverified_draw(model, problem, g)) for _ in range(samples))
    joint = exact_joint(model, problem, DecodeConfig(decoder="assd", draft="lookup", k=4))
    assert pooled_p_value(counts, joint, samples) < 1e-6
    control = {x: pr for x, pr in unverified_joint(model, problem).items() if pr > 0}
    assert set(counts) <= set(control)
    # match-before-gap copies the whole fill: one cell, nothing for a chi-square test to compare
    assert len(control) == 1 or pooled_p_value(counts, control, samples) > 1e-4
