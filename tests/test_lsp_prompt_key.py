"""fills.prompt_key: two completions share it exactly when the model sees the same prompt, which is what lets
the server keep a superseded fill's prompt pass running for the request after it (typing on inside a word)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from infill.core import cache
from infill.lsp import fills
from infill.lsp.documents import Document
from infill.models.tokenizer import load_tokenizer

DEFAULT = Path(__file__).resolve().parent.parent / "infill" / "weights" / "default"
# a model on a server that can be told what a fill begins with (healed), and one that refused to be (not healed)
SERVER = SimpleNamespace(constrains="gbnf", max_length=4096)


@pytest.fixture
def loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default model's tokenizer, as if the model were loaded."""
    held = SimpleNamespace(tokenizer=load_tokenizer(DEFAULT), kind="remote", remote=SERVER)
    monkeypatch.setattr(cache.SHARED, "held", lambda spec: held)


def key(line: str, after: str = "\nprint(total)\n") -> object:
    text = "def mean(values):\n" + line + after
    document = Document("file:///m.py", "python", 1, text)
    target = fills.cursor_target(document, len("def mean(values):\n" + line))
    assert target is not None
    return fills.prompt_key(document, target, fills.Settings())


@pytest.mark.usefixtures("loaded")
def test_typing_on_inside_a_word_keeps_the_prompt() -> None:
    assert key("    total = sum(valu") == key("    total = sum(value") == key("    total = sum(values")
    assert key("    total = su") == key("    total = sum")  # the word after a space: the space is healed too


@pytest.mark.usefixtures("loaded")
def test_a_new_word_or_other_text_after_the_cursor_changes_it() -> None:
    assert key("    total = sum(values") != key("    total = sum(values)")
    assert key("    total = sum(") != key("    total = sum(v")
    assert key("    total = sum(valu") != key("    total = sum(valu", after="\nprint(mean)\n")


def test_unknown_while_the_model_is_not_loaded() -> None:
    document = Document("file:///m.py", "python", 1, "x = 1\ny = x\n")
    target = fills.cursor_target(document, len("x = 1\ny = x"))
    assert target is not None
    assert fills.prompt_key(document, target, fills.Settings(model=fills.ModelSpec(name="nothing-loaded"))) is None


@pytest.mark.usefixtures("loaded")
def test_a_lone_word_is_not_healed_so_each_keystroke_is_its_own_prompt() -> None:
    """A document that is one word with nothing after the cursor: the planner keeps the word in the prompt of a
    model without <bos> (healing would leave it nothing to read), so the key keeps it too and two words differ."""

    def lone(text: str) -> object:
        document = Document("file:///m.py", "python", 1, text)
        target = fills.cursor_target(document, len(text))
        assert target is not None
        return fills.prompt_key(document, target, fills.Settings())

    assert lone("valu") != lone("value")


@pytest.mark.usefixtures("loaded")
def test_a_model_that_is_not_healed_keeps_the_word_in_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that refused the grammar: the prompt keeps the word typed so far, so two words of one length
    are two prompts (a healed model's key is the same for both: the prompt stops before the word)."""
    assert key("    total = sum(valu") == key("    total = sum(vale")
    monkeypatch.setattr(SERVER, "constrains", None)
    assert key("    total = sum(valu") != key("    total = sum(vale")
    assert key("    total = sum(valu") != key("    total = sum(value")
