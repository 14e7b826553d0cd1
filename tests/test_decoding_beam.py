"""Beam search against the exact joint by enumeration: a wide enough beam finds the most likely fill."""

from __future__ import annotations

import itertools

import pytest
import torch

from infill.config import DecodeConfig
from infill.decoding import decode, score
from infill.models.base import FillProblem
from tests.fixtures_decode import Memo, tiny_xlnet

torch.set_num_threads(1)

V_REAL, MASK = 5, 5


@pytest.fixture(scope="module")
def model() -> Memo:
    return Memo(tiny_xlnet(V_REAL + 1, n_layer=2, d_model=16, seed=5, init_scale=0.6))  # greedy misses on one layout


def joint_logprobs(model: Memo, problem: FillProblem) -> dict[tuple[int, ...], float]:
    """log joint(x) for every filling x, from one oracle pass each (chain rule)."""
    M = problem.masked.shape[0]
    return {x: float(score(model, problem, torch.tensor(x)).sum()) for x in itertools.product(range(V_REAL), repeat=M)}


LAYOUTS = [[None, 0, None, None, 1], [2, None, None, None], [None, None, 4, None, 3, None]]


def problem_of(layout: list[int | None]) -> FillProblem:
    ids = torch.tensor([MASK if t is None else t for t in layout])
    return FillProblem(ids, torch.tensor([i for i, t in enumerate(layout) if t is None]))


@pytest.mark.parametrize("layout", LAYOUTS, ids=["both-ends", "suffix-free", "masks-first"])
def test_a_full_width_beam_finds_the_joint_argmax(model: Memo, layout: list[int | None]) -> None:
    problem = problem_of(layout)
    M = problem.masked.shape[0]
    joint = joint_logprobs(model, problem)
    best = max(joint, key=lambda x: joint[x])
    tokens, stats = decode(model, problem, DecodeConfig(decoder="beam", beam=V_REAL ** (M - 1)), torch.Generator())
    assert tuple(tokens.tolist()) == best
    assert stats.extra["logprob"] == pytest.approx(joint[best], abs=1e-4)
    nbest = stats.extra["nbest"]
    assert [s for s, _ in nbest] == sorted((s for s, _ in nbest), reverse=True)  # best first
    for s, fill in nbest:  # every listed fill with its true joint log-probability
        assert s == pytest.approx(joint[tuple(fill)], abs=1e-4)


def test_width_one_is_greedy_and_a_wider_beam_can_beat_it(model: Memo) -> None:
    """Width 1 equals greedy sequential decoding; on some layout greedy misses the argmax and the beam does not
    (the negative control: the enumeration can tell a search from the exact argmax)."""
    beaten = 0
    for layout in LAYOUTS + [[None, None, None, 2], [1, None, None, None, None]]:
        problem = problem_of(layout)
        greedy, _ = decode(model, problem, DecodeConfig(decoder="sequential", temperature=0), torch.Generator())
        one, _ = decode(model, problem, DecodeConfig(decoder="beam", beam=1), torch.Generator())
        assert one.tolist() == greedy.tolist()
        joint = joint_logprobs(model, problem)
        best = max(joint, key=lambda x: joint[x])
        wide, _ = decode(model, problem, DecodeConfig(decoder="beam", beam=25), torch.Generator())
        assert joint[tuple(wide.tolist())] >= joint[tuple(greedy.tolist())] - 1e-9
        beaten += tuple(greedy.tolist()) != best and tuple(wide.tolist()) == best
    assert beaten >= 1


def test_a_pad_ends_a_beam_hypothesis() -> None:
    m = tiny_xlnet(V_REAL + 1, n_layer=1, d_model=16, seed=5, init_scale=0.6, pad_id=0)
    ids = torch.tensor([1, MASK, MASK, MASK, MASK, 2])
    problem = FillProblem(ids, torch.arange(1, 5), span_of=torch.zeros(4, dtype=torch.long))
    tokens, stats = decode(m, problem, DecodeConfig(decoder="beam", beam=3), torch.Generator())
    out = tokens.tolist()
    if 0 in out:  # everything after the first pad is pad
        assert set(out[out.index(0) :]) == {0}
    assert stats.nfe >= 1
    assert stats.accepted == []  # no token is final before the search ends (infill.decoding.stats)


def _writes(x: tuple[int, ...], pad: int, blank: set[int]) -> bool:
    body = x[: x.index(pad)] if pad in x else x
    return any(t not in blank for t in body)


@pytest.mark.parametrize("seed", [0, 4, 9, 29])
def test_the_beam_returns_the_most_likely_fill_that_writes_something(seed: int) -> None:
    """With an end-of-fill pad, the most likely fill of these layouts is empty (the negative control: pad
    first, or only blank tokens); a full-width beam returns the most likely fill that writes a non-blank token,
    by enumeration of the joint (after a pad only pads; a fill's log-probability runs up to its pad), and lists
    the empty fills after the others."""
    pad, blank = 0, {1}
    m = Memo(tiny_xlnet(V_REAL + 1, n_layer=1, d_model=16, seed=seed, init_scale=0.6, pad_id=pad))
    ids = torch.tensor([2, MASK, MASK, MASK, 3])
    problem = FillProblem(ids, torch.arange(1, 4), span_of=torch.zeros(3, dtype=torch.long), blank=frozenset(blank))
    joint = {}
    for x in itertools.product(range(V_REAL), repeat=3):
        if pad in x and set(x[x.index(pad) :]) != {pad}:
            continue  # a pad ends the span
        end = x.index(pad) + 1 if pad in x else len(x)
        joint[x] = float(score(m, problem, torch.tensor(x))[:end].sum())
    most_likely = max(joint, key=lambda x: joint[x])
    assert not _writes(most_likely, pad, blank)  # the control: the plain argmax writes nothing
    best = max((x for x in joint if _writes(x, pad, blank)), key=lambda x: joint[x])
    tokens, stats = decode(m, problem, DecodeConfig(decoder="beam", beam=V_REAL**2), torch.Generator())
    assert tuple(tokens.tolist()) == best
    assert stats.extra["logprob"] == pytest.approx(joint[best], abs=1e-4)
    writes = [_writes(tuple(f), pad, blank) for _, f in stats.extra["nbest"]]
    assert writes == sorted(writes, reverse=True) and writes[0]  # writing fills first


@pytest.mark.parametrize("layout", LAYOUTS, ids=["both-ends", "suffix-free", "masks-first"])
def test_a_full_width_beam_with_accept_finds_the_most_likely_accepted_fill(
    model: Memo, layout: list[int | None]
) -> None:
    """`problem.accept` (the caller's syntax check): the search does not stop at a refused fill, and returns the
    joint's argmax among accepted fills; refused fills are listed after accepted ones. Negative control: the
    refused set holds the unconstrained argmax, so returning it would fail."""
    bare = problem_of(layout)
    M = bare.masked.shape[0]
    joint = joint_logprobs(model, bare)
    ranked = sorted(joint, key=lambda x: -joint[x])
    refused = set(ranked[:3])  # the three most likely fills
    asked: list[tuple[int, ...]] = []

    def accept(tokens: list[int]) -> bool:
        asked.append(tuple(tokens))
        return tuple(tokens) not in refused

    problem = FillProblem(bare.ids, bare.masked, accept=accept)
    tokens, stats = decode(model, problem, DecodeConfig(decoder="beam", beam=V_REAL ** (M - 1)), torch.Generator())
    assert tuple(tokens.tolist()) == ranked[3] != ranked[0]
    assert refused <= set(asked) and stats.extra["refused"] == 3
    listed = [tuple(f) for _, f in stats.extra["nbest"]]
    flags = [f in refused for f in listed]
    assert flags == sorted(flags) and any(flags)  # accepted fills first, then the refused ones
    assert len(asked) == len(set(asked))  # each finished fill is checked once
