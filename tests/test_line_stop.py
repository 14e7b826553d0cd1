"""One-line fills stop decoding at their line break: the rule that says when (infill.textops.line_done) agrees
with the cut the pipeline makes (one_line_cut), and every block-diffusion decoder that honours a stop rule
writes exactly the tokens it writes without one, up to and including the stop token."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
import torch

from infill.config import DecodeConfig
from infill.decoding import ptp
from infill.decoding.blockfill import text_stop
from infill.decoding.problem import Generation
from infill.decoding.registry import decoder_function
from infill.textops import line_done, one_line_cut
from tests.fixtures_bd import END, tiny_backend
from tests.fixtures_ssmd import random_head
from tests.test_ptp_decode import random_adapter

torch.set_num_threads(1)
PROMPT = torch.tensor([3, 7, 11, 5, 2, 9])


@pytest.mark.parametrize("at_line_start", [True, False])
def test_line_done_means_the_cut_is_decided(at_line_start: bool) -> None:
    """Once line_done holds for a text, it holds for every longer one and one_line_cut gives the same answer
    for all of them: decoding past that point cannot change what a one-line span gets. Before, it can."""
    rng = random.Random(0)
    changed_before = 0
    for _ in range(2000):
        fill = "".join(rng.choice(" \n\tab") for _ in range(rng.randint(0, 12)))
        done = [line_done(fill[:k], at_line_start) for k in range(len(fill) + 1)]
        assert done == sorted(done)  # monotone: False ... False True ... True
        first = done.index(True) if True in done else None
        if first is None:
            continue
        cut = one_line_cut(fill, at_line_start)
        assert all(one_line_cut(fill[:k], at_line_start) == cut for k in range(first, len(fill) + 1))
        changed_before += any(one_line_cut(fill[:k], at_line_start) != cut for k in range(first))
    assert changed_before > 100  # the rule is not trivially late: text before the stop still changes the cut


def test_line_done_cases() -> None:
    assert not line_done("    ", True) and not line_done("\n\n  ", True)  # blank lines before the text
    assert not line_done("\n  x = 1", True) and line_done("\n  x = 1\n", True)
    assert line_done("\n", False) and not line_done(" x", False)  # inside a line: the first break ends it
    assert one_line_cut("\n  x = 1\ny", True) == "  x = 1" and one_line_cut("x)\ny", False) == "x)"


class Tokens:
    """A tokenizer whose token i is the text TEXTS[i % len(TEXTS)] (text_stop only decodes)."""

    TEXTS = ("a", " ", "\n", "b(", "\n  ", ")", "x", "\t")

    def decode(self, ids: list[int]) -> str:
        return "".join(self.TEXTS[i % len(self.TEXTS)] for i in ids)


def test_text_stop_names_the_token_that_decides() -> None:
    stop = text_stop(Tokens(), lambda text: line_done(text, True))  # type: ignore[arg-type]
    assert stop([1, 2, 1]) is None  # blank, line break, blank: no text yet
    assert stop([1, 2, 0, 1, 4, 3]) == 4  # "a" then "\n  ": the break after text
    assert stop([1, 2, 0, 1, 4, 3, 2]) == 4  # the same answer for a longer prefix


def every_third(tokens: list[int]) -> int | None:
    """A stop rule on token ids (monotone, as StopRule asks): the first token divisible by 3 after the first."""
    return next((i for i, t in enumerate(tokens) if i >= 1 and t % 3 == 0), None)


CASES = {
    "confidence": DecodeConfig(decoder="confidence", block_size=4, temperature=1.0),
    "confidence-static": DecodeConfig(decoder="confidence", block_size=8, unmask_per_step=2, temperature=1.0),
    "confidence-greedy": DecodeConfig(decoder="confidence", block_size=4, temperature=0.0, threshold=0.3),
    "s2d2": DecodeConfig(decoder="s2d2", block_size=4, temperature=1.0, routing="always"),
    "ssmd": DecodeConfig(decoder="ssmd", block_size=4, temperature=1.0),
    "ptp": DecodeConfig(decoder="ptp", temperature=1.0),
}


@pytest.fixture(scope="module")
def backend():  # type: ignore[no-untyped-def]
    bk = tiny_backend("qwen3", seed=1)  # END is an end token
    bk.ssmd_head = random_head(hidden=32, seed=1, max_block=8)
    ptp.attach(bk, random_adapter(bk, slots=4))
    yield bk
    ptp.attach(bk, None)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_stop_rule_only_cuts_the_output(backend, name: str) -> None:  # type: ignore[no-untyped-def]
    """Same seed with and without the rule: the output with it is the output without it cut after the token
    the rule names in that output (kept), or the same output when the rule names none; it never costs more
    forwards. A negative control: a rule that names a later token gives a different, longer output."""
    cfg = CASES[name]
    run = decoder_function(cfg, "block")
    cut_short = 0
    for seed in range(12):
        ref, ref_stats = run(Generation(backend, PROMPT, 20, cfg, torch.Generator().manual_seed(seed)))
        out, stats = run(Generation(backend, PROMPT, 20, cfg, torch.Generator().manual_seed(seed), stop=every_third))
        at = every_third(ref.tolist())
        expected = ref.tolist() if at is None else ref.tolist()[: at + 1]
        assert out.tolist() == expected
        assert stats.nfe <= ref_stats.nfe
        if at is not None and at + 1 < ref.numel():
            cut_short += 1
            later = every_third(ref.tolist()[at + 1 :])
            assert later is None or out.tolist() != ref.tolist()[: at + 2 + later]  # a wrong cut is caught
    assert cut_short >= 6  # most runs really were cut by the rule


def test_a_stop_after_the_end_token_changes_nothing(backend) -> None:  # type: ignore[no-untyped-def]
    """The end token comes first: a rule is only asked about the tokens before it."""
    cfg = DecodeConfig(decoder="confidence", block_size=4, temperature=2.0)
    asked: list[list[int]] = []

    def never(tokens: list[int]) -> int | None:
        asked.append(tokens)
        return None

    run = decoder_function(cfg, "block")
    ended = 0
    for seed in range(8):
        ref, ref_stats = run(Generation(backend, PROMPT, 30, cfg, torch.Generator().manual_seed(seed)))
        out, _ = run(Generation(backend, PROMPT, 30, cfg, torch.Generator().manual_seed(seed), stop=never))
        assert out.tolist() == ref.tolist()
        ended += bool(ref_stats.extra["ended"])
    assert ended >= 2  # runs that met the end token were among them
    assert asked and all(END not in tokens for tokens in asked)


def test_one_line_fill_through_the_pipeline_decodes_less(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-line span filled by a FIM block-diffusion folder: the same file is written with and without the
    line stop (the pipeline keeps the first line either way), and decoding stops earlier with it."""
    from infill.config import FillOptions, ModelSpec
    from infill.core.pipeline import fill_text
    from infill.decoding import blockfill
    from infill.models.tiny import tiny_blockdiff_checkpoint
    from infill.spans import Span

    folder = tiny_blockdiff_checkpoint(tmp_path / "bd", seed=3)
    # the tiny random model writes few line breaks; it does at seeds 12, 17 (the whole line) and 22 (after the
    # indent, where token healing first draws the indentation's tokens)
    SEEDS = (0, 1, 12, 17, 22)  # noqa: N806
    text = "def f(a, b):\n    c = a + b\n    \n    return c\n"
    line3 = text.index("    \n")
    tokens: list[int] = []
    real = blockfill.run_decoder

    def counted(job: Generation):  # type: ignore[no-untyped-def]
        out, stats = real(job)
        tokens.append(stats.tokens)
        return out, stats

    monkeypatch.setattr(blockfill, "run_decoder", counted)
    results = {}
    # one sample, kept even with broken syntax: the tiny random model's text is not code
    ONE_SAMPLE = FillOptions(max_resample=0, allow_syntax_errors=True, retrieve=False)  # noqa: N806
    for stop in (True, False):
        if not stop:
            monkeypatch.setattr("infill.textops.line_done", lambda text, at_line_start: False)
        for column, seed in itertools.product((0, 4), SEEDS):  # the whole line; the rest after its indent
            span = Span(line3 + column, line3 + 4, "span", one_line=True)
            cfg = DecodeConfig(decoder="confidence", temperature=1.0, seed=seed, block_size=4)
            tokens.clear()
            res = fill_text(text, [span], model=ModelSpec(str(folder)), decode=cfg, options=ONE_SAMPLE)
            results[stop, column, seed] = (res.text, sum(tokens))
    shorter = 0
    for column, seed in itertools.product((0, 4), SEEDS):
        (with_stop, decoded), (without, decoded_all) = results[True, column, seed], results[False, column, seed]
        assert with_stop == without and decoded <= decoded_all
        shorter += decoded < decoded_all
    assert shorter >= 2


def test_a_stop_token_with_text_before_its_line_break_keeps_that_text() -> None:
    """Code-model tokenizers (Qwen2's pre-tokenizer, cl100k-style) merge `):\n` into one token: a one-line fill
    that ends with it keeps the token, so the line keeps its `):` (the one-line cut drops what follows the
    break). A pad still ends the fill without itself."""
    from infill.core.tokens import cut_at_pad

    PAD, BLANK, COLON_BREAK, X = 0, 1, 2, 3  # noqa: N806
    texts = {BLANK: "  ", COLON_BREAK: "):\n", X: "if f(x"}
    logq = [-0.5, -1.0, -2.0, -3.0]
    stops, blank = frozenset({COLON_BREAK}), frozenset({BLANK})
    kept, before_end, score, worst = cut_at_pad([X, COLON_BREAK, X, X], logq, PAD, stops, blank)
    assert kept == [X, COLON_BREAK] and before_end == 1 and score == -1.5 and worst == -1.0
    assert one_line_cut("".join(texts[t] for t in kept), True) == "if f(x):"
    # a leading line break is no stop (no text before it), and a pad ends the fill without itself
    kept, before_end, score, _ = cut_at_pad([BLANK, COLON_BREAK, X, PAD], logq, PAD, stops, blank)
    assert kept == [BLANK, COLON_BREAK, X] and before_end == 3 and score == -6.5


def test_the_line_break_table_is_never_another_tokenizers() -> None:
    """The table is kept per tokenizer by id: a tokenizer that takes a freed one's id (models loaded and dropped
    by a daemon, or one test after another) gets its own table, not the freed one's."""
    import gc

    from infill.core import tokens

    class Letters:
        def __init__(self, text: str) -> None:
            self.text = text

        def decode(self, ids: list[int]) -> str:
            return "".join(self.text[i] for i in ids)

    first = Letters("a\nb ")
    assert tokens.token_sets(first, 4) == (frozenset({1}), frozenset({1, 3}))
    stale = tokens._TOKEN_SETS[(id(first), 4)]
    del first
    gc.collect()
    second = Letters("ab\n\n")
    tokens._TOKEN_SETS[(id(second), 4)] = stale  # as if `second` had taken the freed one's id
    assert tokens.token_sets(second, 4) == (frozenset({2, 3}), frozenset({2, 3}))
