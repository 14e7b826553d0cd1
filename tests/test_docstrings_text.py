"""Cleaning model output into safe docstring text, and the neutral fallbacks."""

from __future__ import annotations

import pytest

from infill.docstrings import text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("returns the sum of a and b", "Return the sum of a and b."),
        ("Computes the mean. Then more text.", "Compute the mean."),
        ("This function applies the patch", "Apply the patch."),
        ("function to parse the header\nsecond line", "Parse the header."),
        ('  """Loads "config" files\\n"""', 'Load "config" files.'),
        ("pushes an item!", "Push an item."),
        ("- gets the value:", "Get the value."),
        ("Return the new value of the new value of the new value.", "Return the new value."),
        ("returns the current module to the current module", "Return the current module."),
    ],
)
def test_function_summaries_are_imperative_sentences(raw: str, expected: str) -> None:
    assert text.clean_summary(raw, name="f", is_function=True, limit=80) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   \n\n",
        '"""',
        "the value of x",
        "f(x) computes things",
        "42",
        "Blockblockblockblockblockblock",  # degenerate repetition
        "return the the the the the the the value",
        "return " + "x" * 50,
        "Return",
        "returns.",
    ],
)
def test_unusable_summaries_give_none(raw: str) -> None:
    assert text.clean_summary(raw, name="f", is_function=True, limit=80) is None


def test_class_summary_keeps_its_first_word_and_long_text_is_cut_at_a_word() -> None:
    assert text.clean_summary("the stack of items", name="S", is_function=False, limit=80) == "The stack of items."
    words = " ".join(f"word{i}" for i in range(40))
    long = text.clean_summary("return " + words, name="f", is_function=True, limit=40)
    assert long is not None and len(long) <= 40 and long.endswith("word4.")


def test_descriptions() -> None:
    assert text.clean_description("x (int): the input value", subject="x") == "The input value."
    assert text.clean_description("**kwargs: passed on", subject="**kwargs") == "Passed on."
    assert text.clean_description("a path\\to\\file", subject="p") == "A pathtofile."
    assert text.clean_description("'''", subject="p") is None
    assert text.clean_description("it (maybe", subject="p") == "It maybe."
    assert text.clean_description("data data data data data data", subject="p") is None
    assert text.clean_description("the number of items in the list", subject="p") == "The number of items in the list."
    assert text.clean_description("the module of the module of the", subject="p") == "The module."
    copied_code = ("Str | None = None.", "bool = False", "x == 1", "values[0] is kept", "call f() first")
    for code in (*copied_code, "Int.", "str", "N: int."):
        assert text.clean_description(code, subject="p") is None, code


def test_cut_repetition() -> None:
    assert text.cut_repetition("a b c a b c") == "a b c"
    assert text.cut_repetition("read the file and its name") == "read the file and its name"
    # the price of catching noun-phrase loops: a legitimate repeat is cut too
    assert text.cut_repetition("read the file and the file name") == "read the file"
    assert text.cut_repetition("the the the the") == ""
    assert text.cut_repetition("Return the item of the item of the item.") == "Return the item"
    assert text.cut_repetition("Return the model to the model.") == "Return the model"
    assert text.cut_repetition("Return the same from the same.") == "Return the same"
    assert text.cut_repetition("Convert a list to a tuple") == "Convert a list to a tuple"


def test_fallbacks_are_neutral_and_derived_from_names() -> None:
    assert text.fallback_summary("function", "get_user_name", returns=True) == "Get user name."
    assert text.fallback_summary("function", "user_name", returns=True) == "Return the user name."
    assert text.fallback_summary("method", "data", returns=False) == "Run data."
    assert text.fallback_summary("class", "HTTPServer", returns=False) == "Http server."
    assert text.fallback_summary("module", "stats", returns=False) == "Stats module."
    assert text.fallback_description("param", "*max_items") == "The max items."
