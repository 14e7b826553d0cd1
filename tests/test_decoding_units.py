"""Decoder units: acceptance with hand-built probabilities, transforms, Theorem 1, padding, errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from infill.config import DecodeConfig
from infill.decoding import decode, score
from infill.decoding.sampling import draw, probs, residual
from infill.errors import DecodeError
from infill.models.base import FillProblem
from infill.models.xlnet import XLNetAnySubset
from tests.fixtures_decode import tiny_xlnet

torch.set_num_threads(1)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_residual() -> None:
    q = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64)
    p = torch.tensor([0.5, 0.2, 0.3], dtype=torch.float64)
    assert torch.allclose(residual(q, p), torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
    assert torch.allclose(residual(q, q), q)  # degenerate: falls back to q


# --- sampling transforms --------------------------------------------------------------------------


def test_drafts_of_one_hot_rows_are_their_argmax_without_a_draw() -> None:
    greedy = probs(torch.tensor([[0.1, 3.0, -1.0], [2.0, 0.0, 1.0]]), temperature=0)
    g = torch.Generator().manual_seed(3)
    before = g.get_state()
    assert draw(greedy, g).tolist() == [1, 0]
    assert torch.equal(g.get_state(), before)  # a certain outcome draws nothing
    # a row that is not one-hot is drawn (the generator moves), and follows its distribution
    mixed = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]], dtype=torch.float64)
    draws = [draw(mixed, g) for _ in range(400)]
    assert not torch.equal(g.get_state(), before)
    assert all(int(d[0]) == 1 and int(d[1]) in (0, 2) for d in draws)
    share = sum(int(d[1]) == 0 for d in draws) / len(draws)
    assert 0.4 < share < 0.6


def test_probs_transforms() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2, 0.0]]))  # last is like a -inf <mask>
    assert probs(logits, temperature=0).tolist() == [[1.0, 0.0, 0.0, 0.0]]
    assert torch.allclose(probs(logits), torch.tensor([[0.5, 0.3, 0.2, 0.0]], dtype=torch.float64))
    assert torch.allclose(probs(logits, top_k=2), torch.tensor([[0.625, 0.375, 0, 0]], dtype=torch.float64))
    assert torch.allclose(probs(logits, top_p=0.6), torch.tensor([[0.625, 0.375, 0, 0]], dtype=torch.float64))
    assert torch.allclose(probs(logits, top_p=0.5), torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64))
    hot = probs(logits, temperature=0.5)
    assert hot[0, 0] > 0.5 and torch.isclose(hot.sum(), torch.tensor(1.0, dtype=torch.float64))


# --- decoders on a tiny random XLNet --------------------------------------------------------------

MASK = 9


@pytest.fixture(scope="module")
def model() -> XLNetAnySubset:
    return tiny_xlnet(10, n_layer=1, d_model=16, seed=11, init_scale=0.4, max_length=16)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    layout=st.lists(st.booleans(), min_size=2, max_size=12).filter(lambda m: 0 < sum(m) < len(m)),
    k=st.integers(2, 6),
    seed=st.integers(0, 2**16),
    greedy=st.booleans(),
)
def test_theorem1_nfe_at_most_tokens(
    model: XLNetAnySubset, layout: list[bool], k: int, seed: int, greedy: bool
) -> None:
    ids = torch.tensor([MASK if m else i % 9 for i, m in enumerate(layout)])
    masked = torch.tensor([i for i, m in enumerate(layout) if m])
    cfg = DecodeConfig(decoder="assd", k=k, draft="model", temperature=0.0 if greedy else 1.0)
    before = model.nfe
    tokens, stats = decode(model, FillProblem(ids, masked), cfg, gen(seed))
    assert stats.nfe <= masked.shape[0] == stats.tokens == tokens.shape[0]
    assert stats.nfe == model.nfe - before  # every forward is counted
    assert sum(stats.accepted) == masked.shape[0]
    assert not (tokens == MASK).any()


def test_greedy_assd_equals_greedy_sequential(model: XLNetAnySubset) -> None:
    ids = torch.tensor([1, MASK, MASK, MASK, 2, MASK, MASK, MASK, MASK, MASK, MASK, 3])
    masked = (ids == MASK).nonzero().squeeze(-1)
    problem = FillProblem(ids, masked)
    seq, _ = decode(model, problem, DecodeConfig(decoder="sequential", temperature=0), gen())
    for k in (2, 3, 5, 10):
        for draft in ("model", "ngram"):
            cfg = DecodeConfig(decoder="assd", k=k, temperature=0, draft=draft)
            out, _ = decode(model, problem, cfg, gen(k))
            assert out.tolist() == seq.tolist()


def test_on_step_reports_progress(model: XLNetAnySubset) -> None:
    ids = torch.tensor([1, MASK, MASK, MASK, MASK, MASK])
    seen: list[tuple[int, int]] = []
    decode(
        model,
        FillProblem(ids, torch.arange(1, 6)),
        DecodeConfig(k=3),
        gen(),
        lambda n, t: seen.append((n, t)),
    )
    assert seen[-1] == (5, 5)
    assert [n for n, _ in seen] == sorted(n for n, _ in seen)


def test_score_is_the_chain_rule_of_single_token_passes(model: XLNetAnySubset) -> None:
    ids = torch.tensor([1, MASK, MASK, 4, MASK, MASK])
    masked = torch.tensor([1, 2, 4, 5])
    tokens, _ = decode(model, FillProblem(ids, masked), DecodeConfig(), gen(3))
    logq = score(model, FillProblem(ids, masked), tokens)  # one oracle pass
    filled = ids.clone()
    for i, pos in enumerate(masked.tolist()):  # one draft pass per token, x_{<i} written in
        ref = torch.log_softmax(model.draft(filled, masked, i, masked[i : i + 1])[0], -1)[tokens[i]]
        assert torch.isclose(logq[i], ref, atol=1e-5)
        filled[pos] = tokens[i]


# --- variable-length spans: a pad ends its span ---------------------------------------------------


class Scripted:
    """A fake AnySubsetModel: at each position one token is certain (`script[pos]`), whatever the context."""

    vocab_size = 4  # 0, 1 regular; 2 pad; 3 mask
    mask_id = 3
    pad_id: int | None = 2
    bos_id = None
    max_length = 32

    def __init__(self, script: dict[int, int]) -> None:
        self.script = script
        self.forwards = 0

    def _logits(self, targets: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        out = torch.full((targets.shape[0], 4), -30.0)
        out[torch.arange(targets.shape[0]), torch.tensor([self.script[int(t)] for t in targets])] = 0.0
        out[:, 3] = float("-inf")
        return out

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._logits(targets)

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._logits(targets)


# prompt 0 and 5; span 0 = positions 1-4 (pad certain at 2), span 1 = positions 6-7
PAD_IDS = torch.tensor([0, 3, 3, 3, 3, 1, 3, 3])
PAD_MASKED = torch.tensor([1, 2, 3, 4, 6, 7])
SPAN_OF = torch.tensor([0, 0, 0, 0, 1, 1])
SCRIPT = {1: 0, 2: 2, 3: 1, 4: 1, 6: 1, 7: 0}


@pytest.mark.parametrize(
    "cfg, nfe",
    [
        (DecodeConfig(decoder="sequential"), 4),  # positions 3, 4 need no forward
        (
            DecodeConfig(decoder="assd", k=10, draft="model"),
            4,
        ),  # draft+verify [1..7] stops at the pad; then draft+verify 6, 7
        (DecodeConfig(decoder="assd", k=2, draft="model"), 4),
        (DecodeConfig(decoder="parallel", k=10), 1),
    ],
    ids=["sequential", "assd-k10", "assd-k2", "parallel"],
)
def test_a_pad_ends_its_span(cfg: DecodeConfig, nfe: int) -> None:
    model = Scripted(SCRIPT)
    tokens, stats = decode(model, FillProblem(PAD_IDS, PAD_MASKED, span_of=SPAN_OF), cfg, gen())
    assert tokens.tolist() == [0, 2, 2, 2, 1, 0]
    assert stats.nfe == model.forwards == nfe
    assert stats.tokens == 6


def test_pads_are_not_forced_without_span_of() -> None:
    tokens, _ = decode(Scripted(SCRIPT), FillProblem(PAD_IDS, PAD_MASKED), DecodeConfig(), gen())
    assert tokens.tolist() == [0, 2, 1, 1, 1, 0]


# --- input errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ids, masked, cfg, message",
    [
        ([1, MASK, MASK], [1, 2], DecodeConfig(decoder="assd", k=1, draft="model"), "k must be at least 2"),
        ([MASK, MASK, MASK], [0, 1, 2], DecodeConfig(), "no visible token"),
        ([1] + [MASK] * 16, list(range(1, 17)), DecodeConfig(), "maximum length"),
        ([1, MASK, MASK], [2, 1], DecodeConfig(), "ascending"),
        ([1, MASK, MASK], [1, 3], DecodeConfig(), "must lie in"),
        ([1, MASK, MASK], [1, 2], DecodeConfig(temperature=-1.0), "temperature"),
        ([1, MASK, MASK], [1, 2], DecodeConfig(top_p=0.0), "top-p"),
        ([1, MASK, MASK], [1, 2], DecodeConfig(decoder="parallel", k=0), "k >= 1"),
        ([1, MASK, MASK], [1, 2], DecodeConfig(decoder="confidence"), "not an any-subset decoder"),
        ([1, MASK, MASK], [1, 2], DecodeConfig(epsilon=-0.1), "epsilon"),
    ],
)
def test_input_errors(
    model: XLNetAnySubset, ids: list[int], masked: list[int], cfg: DecodeConfig, message: str
) -> None:
    with pytest.raises(DecodeError, match=message):
        decode(model, FillProblem(torch.tensor(ids), torch.tensor(masked)), cfg, gen())


def test_nothing_to_fill(model: XLNetAnySubset) -> None:
    for decoder in ("assd", "sequential", "parallel"):
        cfg = DecodeConfig(decoder=decoder)  # type: ignore[arg-type]
        tokens, stats = decode(model, FillProblem(torch.tensor([1, 2]), torch.zeros(0, dtype=torch.long)), cfg, gen())
        assert tokens.shape == (0,) and stats.nfe == 0


# --- stop tokens: a one-line span ends at its first line break after some text ----------------------


class _ScriptedModel:
    """An AnySubsetModel whose logits at position i put almost all mass on script[i] (context-free)."""

    def __init__(self, script: dict[int, int], vocab: int = 8, pad_id: int = 0) -> None:
        self.script, self.vocab_size, self.mask_id, self.pad_id, self.bos_id, self.max_length = (
            script,
            vocab,
            vocab - 1,
            pad_id,
            None,
            64,
        )
        self.nfe = 0

    def _logits(self, targets: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(targets.shape[0], self.vocab_size)
        for row, pos in enumerate(targets.tolist()):
            out[row, self.script[pos]] = 8.0
        out[:, self.mask_id] = float("-inf")
        self.nfe += 1
        return out

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._logits(targets)

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._logits(targets)


BLANK, BREAK, WORD = 4, 5, 6


@pytest.mark.parametrize(
    ("script", "expected", "passes"),
    [
        # text, then a line break: the span ends there, the rest is pad, no pass after the break
        ([WORD, WORD, BREAK, WORD, WORD, WORD], [WORD, WORD, BREAK, 0, 0, 0], 3),
        # leading blank and a line break before any text do not end it (first_line skips leading blank lines)
        ([BLANK, BREAK, WORD, BREAK, WORD, WORD], [BLANK, BREAK, WORD, BREAK, 0, 0], 4),
        # no line break: the whole budget
        ([WORD, BLANK, WORD, WORD, WORD, WORD], [WORD, BLANK, WORD, WORD, WORD, WORD], 6),
    ],
)
def test_stop_token_after_text_ends_the_span(script: list[int], expected: list[int], passes: int) -> None:
    ids = torch.tensor([1, *[7] * 6, 2])
    masked = torch.arange(1, 7)
    problem = FillProblem(
        ids,
        masked,
        span_of=torch.zeros(6, dtype=torch.long),
        stops=(frozenset({BREAK}),),
        blank=frozenset({BLANK, BREAK}),
    )
    model = _ScriptedModel({pos: tok for pos, tok in zip(range(1, 7), script, strict=True)})
    out, stats = decode(model, problem, DecodeConfig(decoder="sequential", temperature=0), gen())
    assert out.tolist() == expected and stats.nfe == passes
    for k in (2, 3, 6):
        fast, _ = decode(model, problem, DecodeConfig(decoder="assd", k=k, temperature=0), gen(k))
        assert fast.tolist() == expected
    par, _ = decode(model, problem, DecodeConfig(decoder="parallel", k=6, temperature=0), gen())
    assert par.tolist() == expected
    unstopped = FillProblem(ids, masked, span_of=problem.span_of)  # negative control: no stops, no cut
    full, _ = decode(model, unstopped, DecodeConfig(decoder="sequential", temperature=0), gen())
    assert full.tolist() == script


def test_score_of_a_prefix_is_the_full_scores_prefix() -> None:
    """infill.decoding.score(..., length): the oracle rows of a fill's first tokens alone, equal to the full pass's
    (position i sees only the tokens before it), so a fill that ends early is scored in a smaller pass."""
    import torch

    from infill.decoding import score
    from infill.models.base import FillProblem
    from tests.fixtures_decode import tiny_xlnet

    model = tiny_xlnet(8, n_layer=2, seed=3, init_scale=0.5)
    ids = torch.tensor([1, 2, 7, 7, 7, 7, 3])
    problem = FillProblem(ids, torch.tensor([2, 3, 4, 5]))
    tokens = torch.tensor([4, 0, 5, 6])
    full = score(model, problem, tokens)
    for length in (1, 2, 4):
        assert torch.allclose(score(model, problem, tokens, length), full[:length], atol=1e-5)
