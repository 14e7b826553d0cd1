"""infill.api.fill_text with the scripted model: syntax resampling, candidates, regions, progress events."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from fixtures_cli import fake_model

from infill import api, progress
from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.errors import NoValidFillError
from infill.spans import Selection, Span, resolve

SRC = "def inc(x):\n    pass\n"


def fill(text: str, sels: list[Selection], language: str | None = "python", **kw: Any) -> api.FillResult:
    spans = resolve(text.encode(), sels, language)
    return api.fill_text(text, spans, language=language, model=ModelSpec("fake-api"), **kw)


def test_syntax_errors_are_resampled() -> None:
    resampled = 0
    with fake_model([[("return (x", 0.5), ("return x + 1", 0.5)]], name="fake-api"):
        for seed in range(12):
            r = fill(SRC, [Selection("span", "2:2")], decode=DecodeConfig(seed=seed))
            assert r.text == "def inc(x):\n    return x + 1\n", seed
            assert not r.warnings
            resampled += r.stats["samples"] > 1
    assert resampled > 0  # some seeds drew the broken candidate first


def test_python_that_only_cpython_rejects_is_resampled() -> None:
    """Tree-sitter accepts `if x:` with no body before a dedent; CPython's parser does not."""
    src = "def inc(x):\n    pass\n\n\ndef g():\n    return 1\n"
    with fake_model([[("if x:", 0.5), ("return x + 1", 0.5)]], name="fake-api"):
        for seed in range(8):
            r = fill(
                src, [Selection("span", "2:2")], decode=DecodeConfig(seed=seed), options=FillOptions(max_resample=12)
            )
            assert r.text == src.replace("pass", "return x + 1"), seed
    # input that does not compile already is checked with tree-sitter only: `if x:` is then accepted
    broken = src + "def h(:\n"
    with fake_model(["if x:"], name="fake-api"):
        r = fill(broken, [Selection("span", "2:2")])
    assert r.text == broken.replace("pass", "if x:") and not r.warnings


def test_no_valid_candidate_is_an_error() -> None:
    """A file that parsed is never handed back unparseable unless the caller opts in."""
    with fake_model([[("return (x", 0.8), ("return [x", 0.2)]], name="fake-api"):
        with pytest.raises(NoValidFillError) as info:
            fill(SRC, [Selection("span", "2:2")], options=FillOptions(max_resample=3))
    assert info.value.exit_code == 3 and "no valid fill in 4 sample(s)" in str(info.value)
    (failed,) = info.value.failed
    assert failed["label"] == "--span 2:2" and failed["text"] == "    return (x"


def test_no_valid_candidate_allowed_warns_and_uses_most_likely() -> None:
    with fake_model([[("return (x", 0.8), ("return [x", 0.2)]], name="fake-api"):
        r = fill(SRC, [Selection("span", "2:2")], options=FillOptions(max_resample=3, allow_syntax_errors=True))
    assert r.text == "def inc(x):\n    return (x\n"
    assert any("no valid candidate" in w for w in r.warnings)
    assert r.stats["samples"] == 4


BEAM_FILLS = [[("return (x", 0.5), ("return [x", 0.3), ("return x + 1", 0.2)]]  # the two likeliest break the syntax


def beam_fill(width: int, **options: Any) -> api.FillResult:
    return fill(
        SRC,
        [Selection("span", "2:2")],
        decode=DecodeConfig(decoder="beam", beam=width, temperature=0.0),
        options=FillOptions(retrieve=False, **options),
    )


def test_beam_search_is_rescued_by_a_wider_search_when_its_fills_all_break_the_syntax() -> None:
    with fake_model(BEAM_FILLS, name="fake-api"):
        with pytest.raises(NoValidFillError):  # width 2 finds only the two broken lines
            beam_fill(2, rescue_width=1)
        r = beam_fill(2)  # the default rescue: once more, 4x wider
    assert r.text == "def inc(x):\n    return x + 1\n" and not r.warnings
    assert r.stats["rescued"] >= 1


def test_a_rescue_runs_only_when_needed_and_never_returns_an_empty_fill() -> None:
    with fake_model(BEAM_FILLS, name="fake-api") as model:
        before = model.forwards
        plain = beam_fill(4, rescue_width=1)
        cost = model.forwards - before
        before = model.forwards
        r = beam_fill(4)  # width 4 already finds the valid line: no second search
        assert r.text == plain.text == "def inc(x):\n    return x + 1\n"
        assert r.stats["rescued"] == 0 and model.forwards - before == cost
    # only broken lines and an empty one: the rescue adds nothing that writes, so the fill still fails
    with fake_model([[("return (x", 0.6), ("", 0.3), ("return [x", 0.1)]], name="fake-api"):
        with pytest.raises(NoValidFillError):
            beam_fill(1, rescue_width=8)


def test_a_beam_search_whose_wider_search_fails_too_is_rescued_by_sampling() -> None:
    """The three likeliest lines break the syntax: width 1, then 3 (rescue_width 3) find only those; samples at
    RESCUE_TEMPERATURE then reach the valid fourth line for some seeds, and never write a broken one."""
    fills = [[("return (x", 0.36), ("return [x", 0.25), ("return {x", 0.2), ("return x + 1", 0.19)]]
    rescued = 0
    with fake_model(fills, name="fake-api"):
        for seed in range(8):
            try:
                r = fill(
                    SRC,
                    [Selection("span", "2:2")],
                    decode=DecodeConfig(decoder="beam", beam=1, temperature=0.0, seed=seed),
                    options=FillOptions(retrieve=False, rescue_width=3),
                )
            except NoValidFillError as exc:
                assert exc.exit_code == 3 and "no valid fill" in str(exc), seed
                continue
            assert r.text == "def inc(x):\n    return x + 1\n" and r.stats["rescued"] >= 1, seed
            assert r.stats["decoder"] == "beam"
            rescued += 1
    assert 2 <= rescued < 8  # the samples found it for some seeds, not all: they are drawn, not searched


def test_a_greedy_fill_the_checks_reject_is_rescued_by_sampling() -> None:
    """Greedy decoding (temperature 0, not beam search) writes one fill; when the checks reject it, up to
    2 x rescue_width samples at RESCUE_TEMPERATURE are drawn and the first that passes is written."""
    greedy = DecodeConfig(decoder="assd", temperature=0.0)
    with fake_model([[("return (x", 0.55), ("return x + 1", 0.45)]], name="fake-api"):
        with pytest.raises(NoValidFillError):  # no rescue: the one greedy line breaks the syntax
            fill(SRC, [Selection("span", "2:2")], decode=greedy, options=FillOptions(retrieve=False, rescue_width=1))
        for seed in range(4):
            r = fill(
                SRC,
                [Selection("span", "2:2")],
                decode=replace(greedy, seed=seed),
                options=FillOptions(retrieve=False),
            )
            assert r.text == "def inc(x):\n    return x + 1\n" and not r.warnings, seed
            assert r.stats["rescued"] == 1 and 2 < r.stats["samples"] <= 2 + 8, seed
    # a greedy fill that passes needs no rescue
    with fake_model([[("return x + 1", 0.6), ("return (x", 0.4)]], name="fake-api"):
        r = fill(SRC, [Selection("span", "2:2")], decode=greedy, options=FillOptions(retrieve=False))
    assert r.stats["rescued"] == 0 and r.stats["samples"] == 1


def test_broken_utf8_is_resampled() -> None:
    broken = b"caf\xc3"  # half of "\xc3\xa9" (é): decodes to U+FFFD
    with fake_model([[(broken, 0.5), ("ok", 0.5)]], name="fake-api"):
        for seed in range(6):
            r = fill("x = <F>\n", [Selection("marker", "<F>")], language=None, decode=DecodeConfig(seed=seed))
            assert r.text == "x = ok\n"


def test_syntax_check_off_and_plain_text() -> None:
    with fake_model(["return (x"], name="fake-api"):
        r = fill(SRC, [Selection("span", "2:2")], options=FillOptions(syntax_check=False))
        assert r.stats["samples"] == 1 and not r.warnings
        r = fill(SRC, [Selection("span", "2:2")], language=None)
        assert r.stats["samples"] == 1 and not r.warnings


def test_far_apart_spans_become_regions() -> None:
    middle = "".join(f"v{i} = {i}\n" for i in range(60))
    text = "a = <F>\n" + middle + "b = <F>\n"
    with fake_model(["1"], name="fake-api", max_length=96) as model:
        r = fill(text, [Selection("marker", "<F>")], language=None, options=FillOptions(tokens=4))
    assert r.text == text.replace("<F>", "1")
    assert r.stats["regions"] == 2
    assert model.forwards > 0
    assert [e.start_line for e in r.edits] == [1, 62]


def test_split_context_budget() -> None:
    assert api.split_context(100, 10, 10) == (10, 10)
    assert api.split_context(100, 500, 500) == (75, 25)
    assert api.split_context(100, 500, 5) == (95, 5)
    assert api.split_context(100, 5, 500) == (5, 95)


def test_token_budget_policy() -> None:
    span = Span(0, 4, "--span 1:1", default_tokens=32)
    assert api.token_budget(span, 40, "text", FillOptions(tokens=7), has_pad=True) == 7
    assert api.token_budget(span, 40, "text", FillOptions(), has_pad=True) == 50
    assert api.token_budget(span, 4, "text", FillOptions(), has_pad=True) == 12
    assert api.token_budget(span, 4, "text", FillOptions(), has_pad=False) == 4
    assert api.token_budget(span, 0, "  \n", FillOptions(), has_pad=True) == 32
    marker = Span(0, 6, "--marker <FILL>", default_tokens=32, placeholder=True)
    assert api.token_budget(marker, 3, "<FILL>", FillOptions(), has_pad=True) == 32


def test_progress_events_and_bar(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    events: list[dict[str, Any]] = []
    with fake_model(["return x + 1"], name="fake-api"):
        fill(SRC, [Selection("span", "2:2")], on_progress=events.append)
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["load", "start"] and kinds[-1] == "done" and "step" in kinds and "candidate" in kinds
    with progress.progress(False) as off:
        assert off is None
    with progress.progress(True) as cb:  # stderr is not a terminal under pytest: plain lines, none for a quick fill
        assert cb is not None
        for e in events:
            cb(e)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "is_interactive", lambda stream=None: True)
    with progress.progress(True) as cb:
        assert cb is not None
        for e in events:
            cb(e)


def test_a_tokenizer_that_splits_everywhere_heals_nothing() -> None:
    """One token per byte: a prompt may end anywhere, so the space before an in-line span stays in the prompt
    (token healing for BPE tokenizers: tests/test_token_healing.py)."""
    with fake_model(["42"], name="fake-api") as model:
        r = fill("x = <F>\n", [Selection("marker", "<F>")], language=None)
    assert r.text == "x = 42\n"
    assert bytes(i for i in model.last_prompt if i < 256) == b"x = "


def test_registered_models_are_not_cached_across_registrations() -> None:
    from fixtures_cli import ByteTokenizer, ScriptedModel

    from infill.models.registry import LoadedModel, register, unregister

    text = "x = <F>\n"
    try:
        for fill_with in ("1", "2"):
            model = ScriptedModel([[(fill_with, 1.0)]])
            register("fake-rereg", lambda spec, m=model: LoadedModel("fake-rereg", "asarm", m, ByteTokenizer()))
            spans = resolve(text.encode(), [Selection("marker", "<F>")])
            assert api.fill_text(text, spans, model=ModelSpec("fake-rereg")).text == f"x = {fill_with}\n"
    finally:
        unregister("fake-rereg")


def test_a_one_line_span_inside_a_line_gets_the_rest_of_that_line() -> None:
    """The language server's completion at the cursor: a one-line insertion after some text on the line. A
    fill that goes on to the next line is cut at its line break; one that starts with a line break is empty
    (a whole line instead keeps its first line of text: `--span N`)."""
    text = "def mean(values):\n    n = \n    return n\n"
    at = text.index(" \n") + 1
    span = Span(at, at, "cursor", 32, one_line=True)
    for fill_, expected in [("len(values)\n    print(n)", "len(values)"), ("\n    return 0", "")]:
        with fake_model([fill_], name="fake-api"):
            r = api.fill_text(text, [span], language=None, model=ModelSpec("fake-api"))
        assert r.edits[0].text == expected, fill_
    line = text.index("    n")
    whole = Span(line, text.index("\n", line), "--span 2", 32, one_line=True)
    with fake_model(["\n    n = len(values)"], name="fake-api"):
        r = api.fill_text(text, [whole], language=None, model=ModelSpec("fake-api"), options=FillOptions(tokens=32))
    assert r.edits[0].text == "    n = len(values)"


class Stop(Exception):
    pass


@pytest.mark.parametrize("decoder", ["sequential", "assd", "beam"])
def test_a_progress_callback_that_raises_stops_the_fill_between_forward_passes(decoder: str) -> None:
    """How a server cancels a running fill: its on_progress raises at the next event, and no forward pass
    starts after that. Events come after every pass (beam search: after each of a step's `width` passes; ASSD:
    after each iteration, a draft and a verify pass at most)."""
    seen: list[int] = []

    def stop_at_third_step(event: dict[str, Any]) -> None:
        if event["event"] == "step":
            seen.append(model.forwards)
            if len(seen) == 3:
                raise Stop

    with fake_model(["total = sum(values) / len(values)"], name="fake-api") as model:
        with pytest.raises(Stop):
            fill(SRC, [Selection("span", "2:2")], decode=DecodeConfig(decoder=decoder), on_progress=stop_at_third_step)
        assert seen[-1] == model.forwards  # nothing ran after the event that raised
        assert 3 <= model.forwards <= (6 if decoder == "assd" else 3)


def test_each_retrieved_line_is_scored_after_a_progress_event() -> None:
    """Lines from the user's code are scored one oracle pass each, after a progress event: a cancel check."""
    src = "def f(x):\n    y = x + 1\n    return y\n\n\ndef g(x):\n    pass\n    return y\n"
    at_first_score: list[int] = []

    def note(event: dict[str, Any]) -> None:
        if event["event"] == "score" and not at_first_score:
            at_first_score.append(model.forwards)

    def stop_at_score(event: dict[str, Any]) -> None:
        if event["event"] == "score":
            raise Stop

    with fake_model(["y = x + 2"], name="fake-api") as model:
        fill(src, [Selection("span", "7:7")], on_progress=note)
        assert at_first_score and model.forwards > at_first_score[0]  # lines were scored after the event
        before = model.forwards
        with pytest.raises(Stop):
            fill(src, [Selection("span", "7:7")], on_progress=stop_at_score)
        assert model.forwards - before == at_first_score[0]  # no line was scored once it raised
