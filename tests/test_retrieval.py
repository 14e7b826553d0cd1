"""Candidate lines from the user's own code: the finder, and the model's ranking of them in infill.api."""

from __future__ import annotations

from infill import api
from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.retrieval import line_candidates, similarity
from infill.spans import Span
from tests.fixtures_cli import fake_model

SOURCE = """\
def f(values):
    total = 0
    for v in values:
        total += v
    return total


def g(values):
    total = 0
    for v in values:
{gap}
    return total
"""


def test_similarity() -> None:
    assert similarity("for v in values:", "    for v in values:") == 1.0
    assert 0 < similarity("for v in values:", "for w in values:") < 1
    assert similarity("", "x") == 0.0


def test_the_line_between_similar_neighbours_is_found_with_its_indentations() -> None:
    text = SOURCE.format(gap="")
    at = text.index("\n    return total\n", text.index("def g"))  # the emptied line starts (and ends) here
    before, after = text[:at], text[at:]
    found = line_candidates(before, after)
    assert found[0] == "        total += v"  # its own indentation first
    assert "    total += v" in found  # and the next line's
    assert all("return total" not in c and "for v in values" not in c for c in found)  # never a neighbour


def test_other_files_supply_lines_and_unrelated_text_supplies_none() -> None:
    before, after = "def h(xs):\n    acc = 1\n    for x in xs:\n", "\n    return acc\n"
    other = "def k(xs):\n    acc = 1\n    for x in xs:\n        acc *= x\n    return acc\n"
    assert line_candidates(before, after, [other])[0] == "        acc *= x"
    assert line_candidates(before, after, ["import os\nprint(os.name)\n"]) == []


def _fill(text: str, at: int, seed: int, retrieve: bool = True, temperature: float = 1.0) -> api.FillResult:
    return api.fill_text(
        text,
        [Span(at, at, "gap", one_line=True)],
        language="python",
        model=ModelSpec(name="fake-rank"),
        decode=DecodeConfig(temperature=temperature, seed=seed),
        options=FillOptions(retrieve=retrieve),
    )


def test_a_retrieved_line_wins_when_the_model_finds_it_more_likely() -> None:
    """The model puts 0.9 on the retrieved line; a sample that drew the 0.1 alternative loses to it. Without
    retrieval (negative control) the unlikely sample stays."""
    text = SOURCE.format(gap="")
    at = text.index("\n    return total\n", text.index("def g"))
    with fake_model([[("        total += v", 0.9), ("        pass", 0.1)]], name="fake-rank"):
        seed = next(s for s in range(200) if _fill(text, at, s, retrieve=False).edits[0].text.strip() == "pass")
        plain = _fill(text, at, seed, retrieve=False)
        ranked = _fill(text, at, seed)
    assert plain.edits[0].text.strip() == "pass" and plain.stats["retrieved"] == 0
    assert ranked.edits[0].text == "        total += v" and ranked.stats["retrieved"] >= 1
    assert ranked.edits[0].score > plain.edits[0].score  # ranked by the model's likelihood


def test_a_retrieved_line_the_model_dislikes_loses() -> None:
    text = SOURCE.format(gap="")
    at = text.index("\n    return total\n", text.index("def g"))
    with fake_model([[("        total -= 1", 0.95), ("        total += v", 0.05)]], name="fake-rank"):
        out = _fill(text, at, 0, temperature=0)
    assert out.edits[0].text == "        total -= 1" and out.stats["retrieved"] >= 1
