"""Sentences from the names and the code alone, the facts they are built from, and the ROUGE-L they are measured by."""

from __future__ import annotations

import textwrap

import pytest

from infill.core.calibration import Calibrator
from infill.docstrings import confidence, facts, names, similarity
from infill.docstrings.skeleton import Param, Skeleton, Slot


def facts_of(source: str, skeleton: Skeleton, line: int, owner: str | None = None) -> facts.Facts:
    return facts.python_facts(facts.parse_python(textwrap.dedent(source)), skeleton, line, owner)


@pytest.mark.parametrize(
    ("kind", "name", "owner", "objects", "returns", "expected"),
    [
        ("method", "push", "Stack", ("item",), False, "Push `item` onto the stack."),
        ("method", "pop", "Stack", (), True, "Pop from the stack."),
        ("method", "is_empty", "Stack", (), True, "Return whether the stack is empty."),
        ("function", "is_mask", None, ("key",), True, "Return whether `key` is mask."),
        ("function", "read_config", None, ("path",), True, "Read the config."),
        ("method", "to_json", "Config", (), True, "Return the config as json."),
        ("method", "from_uri", "Path", ("uri",), True, "Return the path from uri."),
        ("function", "chars_to_html", None, ("chars",), True, "Convert the chars to html."),
        ("method", "acquire", "Lock", (), True, "Acquire the lock."),  # `timeout=None` is an option, not an object
        ("method", "do_stop", "Daemon", (), False, "Stop the daemon."),  # a command handler
        ("method", "wait_stream", "Event", ("stream",), False, "Wait for the stream."),
        ("function", "get_all_supported_ratios", None, (), True, "Get all supported ratios."),
        ("function", "user_name", None, (), True, "Return the user name."),
        ("function", "main", None, (), False, "Run main."),
        ("function", "return_value", None, (), False, "Run return value."),  # never "Return" without a value
    ],
)
def test_names_only_summaries(
    kind: str, name: str, owner: str | None, objects: tuple[str, ...], returns: bool, expected: str
) -> None:
    known = facts.Facts(kind=kind, name=name, owner=owner, params=objects, objects=objects, returns_value=returns)
    assert names.summary(known) == expected


def test_facts_from_the_code() -> None:
    source = """\
        def load(path, strict=False):
            if not path:
                raise ValueError("no path")
            if strict:
                raise KeyError(path)
            data = read(path)
            return data.strip()
        """
    skeleton = Skeleton("function", "load", params=[Param("path"), Param("strict", default="False")])
    known = facts_of(source, skeleton, 1)
    assert known.returns_value is True and known.returned == frozenset({"data", "strip"})
    assert known.objects == ("path",) and known.params == ("path", "strict")
    assert known.conditions == {"ValueError": "not path", "KeyError": "strict"}
    assert names.description(Slot("raises", "ValueError"), known) == "If `not path`."
    stub = facts_of("def area(self):\n    raise NotImplementedError\n", Skeleton("function", "area"), 1)
    assert stub.stub and stub.returns_value is None  # an interface: what it returns is not known here
    typed = facts_of("def area(self) -> float:\n    ...\n", Skeleton("function", "area", returns="float"), 1)
    assert typed.stub and typed.returns_value is True
    procedure = facts_of("def log(x):\n    print(x)\n    return\n", Skeleton("function", "log"), 1)
    assert procedure.returns_value is False
    generator = facts_of("def each(xs):\n    yield from xs\n", Skeleton("function", "each", yields=""), 1)
    assert generator.generator and generator.returns_value is True
    assert facts.parse_python("print 'python 2'\n") is None  # CPython cannot parse it: the skeleton's facts only


def test_rouge_l() -> None:
    assert similarity.rouge_l("Push the item onto the stack.", "Push the item onto the stack") == 1.0
    assert similarity.rouge_l("Return the sum.", "Open a file.") == 0.0
    assert similarity.rouge_l("", "Open a file.") == 0.0
    # LCS "the sum of" (3 words): precision 3/4, recall 3/6, F1 = 0.6
    assert similarity.rouge_l("Return the sum of.", "Compute the sum of two numbers.") == pytest.approx(0.6)
    assert similarity.words("read_config(HTTPServer)") == ["read", "config", "http", "server"]
    assert similarity.first_sentence('"""Return x. More.\n\n    Args: ..."""') == "Return x."
    assert similarity.first_sentence('r"""\n    Polynomial division in ``K[X]``.\n    """') == (
        "Polynomial division in ``K[X]``."
    )


def test_the_shipped_calibration_loads_and_gives_a_probability() -> None:
    calibrator = confidence.calibrator_for("default")
    assert isinstance(calibrator, Calibrator) and calibrator.features == confidence.FEATURES
    row = {"summary_logprob": -1.0, "mean_logprob": -1.0, "agreement": 0.5, "words": 5.0, "refused": 0.0}
    assert 0.0 < calibrator.predict(row) < 1.0
    assert 0.0 < confidence.threshold(calibrator, None) <= 1.0
    assert confidence.threshold(calibrator, 0.25) == 0.25 and confidence.threshold(None, None) == 0.5
