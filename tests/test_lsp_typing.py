"""The language server while the user types: typeahead, multi-line suggestions, context from other
documents, superseded requests, and the bad input of the issue's list (a position inside a surrogate pair or past
the document, a 5 MB document, a burst of 500 changes, ill-typed settings: tests/test_lsp_server.py). Pure parts
are tested directly; the rest through a real server over stdio (tests/fixtures_lsp.py: scripted and gated
models)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures_lsp import GATED_MODEL, LspClient, gated_model, inline_params, release, started, wait_until

from infill.lsp.context import CHUNK_LINES, CHUNKS, ContextRing
from infill.lsp.documents import Document
from infill.lsp.fills import KEYS, Filled, cursor_target, empty_body
from infill.lsp.typeahead import Typeahead
from infill.textops import block_cut, block_done

pytest.importorskip("pygls")

URI = "file:///project/typing.py"
SOURCE = "def mean(values):\n    total = 0\n    \n    return total / len(values)\n"
INVALID_PARAMS = -32602


def span_range(a: tuple[int, int], b: tuple[int, int]) -> dict[str, Any]:
    return {"start": {"line": a[0], "character": a[1]}, "end": {"line": b[0], "character": b[1]}}


def insert(line: int, character: int, text: str) -> dict[str, Any]:
    return {"range": span_range((line, character), (line, character)), "text": text}


# --- typeahead, without a server ----------------------------------------------------------------------------------


def test_typeahead_answers_the_rest_while_the_typing_agrees() -> None:
    cache = Typeahead()
    text = "x = 1\n    \ny = 2\n"
    cache.remember(text, Filled(6, 10, "    total += 1", 0.8))  # a whole-line suggestion on the blank line
    typed = "x = 1\n    tot\ny = 2\n"
    hit = cache.answer(typed, 13)
    assert isinstance(hit, Filled) and (hit.start, hit.end, hit.text, hit.confidence) == (13, 13, "al += 1", 0.8)
    assert cache.answer("x = 1\n    tox\ny = 2\n", 13) is None  # typed something else: ask the model
    assert cache.answer("x = 1\n    total += 1\ny = 2\n", 20) is None  # typed it all: nothing left
    assert cache.answer("z = 1\n    tot\ny = 2\n", 13) is None  # the text before it changed
    assert cache.answer("x = 1\n    tot\ny = 3\n", 13) is None  # the text after it changed
    cache.nothing(text, 3)
    assert cache.answer(text, 3) is False  # the model had nothing here, for exactly this text
    assert cache.answer(text + "#", 3) is None


# --- multi-line targets and block ends ----------------------------------------------------------------------------


def test_a_blank_line_after_an_opener_with_an_empty_body_is_a_block() -> None:
    assert empty_body("def f(x):\n    \n\nx = 1\n", 10, 14)
    assert empty_body("class A:  # a comment\n    \n", 22, 26)
    assert empty_body("int f() {\n    \n}\n", 10, 14)
    assert not empty_body("if x:\n    a\n    \n", 12, 16)  # the body has a line already
    assert not empty_body("x = 1\n    \n", 6, 10)  # no opener
    assert not empty_body("\n    \n", 1, 5)
    document = Document("file:///a.py", "python", 1, "def f(x):\n    \n\nx = 1\n")
    block = cursor_target(document, 14, lines=4)
    one = cursor_target(document, 14, lines=1)
    assert block is not None and one is not None
    assert (block.span.block_lines, block.span.one_line) == (4, False)
    assert (one.span.block_lines, one.span.one_line) == (0, True)


def test_a_block_ends_at_its_dedent_or_after_its_lines() -> None:
    prefix = "def f(values):\n"
    fill = "    total = 0\n    for v in values:\n        total += v\n    return total\nprint(f([1]))\n"
    assert block_cut(fill, prefix, 6) == "    total = 0\n    for v in values:\n        total += v\n    return total"
    assert block_cut(fill, prefix, 2) == "    total = 0\n    for v in values:"
    assert block_cut("\n\n    pass\n", prefix, 6) == "    pass\n"  # leading blank lines dropped
    assert not block_done("    total = 0\n    for v in values:\n", prefix, 6)
    assert block_done("    total = 0\n    return total\npr", prefix, 6)  # a dedented line began
    assert block_done("    a = 1\n    b = 2\n", prefix, 2)  # two lines complete
    assert not block_done("    a = 1\n    b = 2", prefix, 2)  # the second may still go on
    # a Python body (--function): the definition's indentation is given, and there is no line limit
    body = '    """Doc."""\n    a = 1\n    b = 2\n\n\ndef g():\n    pass\n'
    assert block_cut(body, '    """Doc."""\n', 0, indent=0) == '    """Doc."""\n    a = 1\n    b = 2\n\n'
    assert not block_done("    a = 1\n    b = 2\n    c = 3\n", "", 0, indent=0)
    assert block_done("    a = 1\ndef", "", 0, indent=0)


# --- the context ring ---------------------------------------------------------------------------------------------


def test_the_context_ring_is_bounded_and_keeps_other_documents() -> None:
    ring = ContextRing()
    big = "".join(f"line_{i} = {i}\n" for i in range(10_000))
    starts = Document("file:///big.py", "python", 1, big).lines.starts
    ring.take("file:///big.py", big, starts, 5000)
    (chunk,) = ring.texts("file:///other.py")
    assert chunk.startswith("line_4968 = ") and chunk.count("\n") == CHUNK_LINES
    ring.take("file:///big.py", big, starts, 5010)  # overlaps: replaces the chunk
    assert len(ring.texts("file:///other.py")) == 1
    assert ring.texts("file:///big.py") == ()  # a document's own lines are context already
    for line in range(0, 100 * CHUNK_LINES, CHUNK_LINES):
        ring.take("file:///big.py", big, starts, line)
    assert len(ring.texts("file:///other.py")) == CHUNKS


# --- through the server -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared() -> Iterator[LspClient]:
    found = LspClient()
    try:
        found.initialize({"model": "scripted-lsp"})
        yield found
    finally:
        assert found.close() == 0, found.stderr()


@pytest.fixture
def client(shared: LspClient) -> LspClient:
    shared.configure({**dict.fromkeys(KEYS), "model": "scripted-lsp"})
    shared.open(URI, SOURCE)
    return shared


def fills(client: LspClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = client.result("test/fills")
    return found


def test_typing_what_the_suggestion_says_keeps_it_without_a_model_call(client: LspClient) -> None:
    (item,) = client.inline(URI, 2, 4)["result"]["items"]
    assert item["insertText"] == "    total += 1"
    calls = len(fills(client))
    for version, (character, key) in enumerate(zip(range(4, 9), "total", strict=True), start=2):
        client.change(URI, version, [insert(2, character, key)])
        (item,) = client.inline(URI, 2, character + 1)["result"]["items"]
        assert item["insertText"] == "total += 1"[character - 3 :]
        assert item["range"] == span_range((2, character + 1), (2, character + 1))
    assert len(fills(client)) == calls  # every answer came from the suggestion shown
    client.change(URI, 7, [insert(2, 9, "x")])  # "totalx": not what it said
    client.inline(URI, 2, 10)
    assert len(fills(client)) == calls + 1


def test_a_repeated_request_that_found_nothing_is_not_filled_again(client: LspClient) -> None:
    client.configure({"model": "scripted-low", "threshold": 0.5})  # confidence 0.3: not shown
    assert client.inline(URI, 2, 4)["result"] is None
    calls = len(fills(client))
    assert client.inline(URI, 2, 4)["result"] is None
    assert len(fills(client)) == calls
    client.configure({"threshold": 0.2})  # other settings: asked again
    assert client.inline(URI, 2, 4)["result"] is not None
    assert len(fills(client)) == calls + 1


def test_a_multi_line_suggestion_ends_at_the_dedent(client: LspClient) -> None:
    client.configure({"model": "scripted-block"})
    client.open(URI, "def mean(values):\n    \n\nprint(mean([1.0]))\n")
    (item,) = client.inline(URI, 1, 4)["result"]["items"]
    assert item["insertText"] == "    total = sum(values)\n    return total / len(values)"
    assert item["range"] == span_range((1, 0), (1, 4))
    assert fills(client)[-1]["block_lines"] == 6
    client.configure({"lines": 1})  # one line everywhere
    (item,) = client.inline(URI, 1, 4)["result"]["items"]
    assert item["insertText"] == "    total = sum(values)"
    client.configure({"lines": 2, "tokens": 100})  # the scripted model writes a token per byte
    (item,) = client.inline(URI, 1, 4)["result"]["items"]
    assert item["insertText"] == "    total = sum(values)\n    return total / len(values)"
    assert fills(client)[-1]["block_lines"] == 2


def test_other_open_documents_are_context(client: LspClient) -> None:
    other = "file:///project/helpers.py"
    client.open(other, "def helper(values):\n    return sorted(values)\n")
    client.inline(URI, 2, 4)
    assert any("return sorted(values)" in text for text in fills(client)[-1]["context"])
    client.change(other, 2, [insert(1, 4, "# changed\n    ")])
    client.inline(URI, 1, 13)  # the end of `    total = 0`
    assert any("# changed" in text for text in fills(client)[-1]["context"])
    client.configure({"context": False})
    client.inline(URI, 1, 12)
    assert fills(client)[-1]["context"] == []
    client.notify("textDocument/didClose", {"textDocument": {"uri": other}})


# --- bad input ----------------------------------------------------------------------------------------------------


def test_positions_inside_a_character_or_past_the_document_are_errors(client: LspClient) -> None:
    client.open(URI, "s = '😀'\n\n")
    inside = client.inline(URI, 0, 6)  # between the two UTF-16 units of the emoji
    assert inside["error"]["code"] == INVALID_PARAMS and "inside a character" in inside["error"]["message"]
    past = client.inline(URI, 9, 0)
    assert past["error"]["code"] == INVALID_PARAMS and "past the end" in past["error"]["message"]
    assert client.inline(URI, 1, 0)["result"] is not None  # still serving


def test_a_5_mb_document_is_refused_and_the_server_keeps_up(client: LspClient) -> None:
    uri = "file:///project/five.py"
    huge = "x = 1\n" * 900_000  # 5.4 MB
    mark = client.mark()
    client.open(uri, huge)
    for version in range(2, 12):  # typing in it
        client.change(uri, version, [insert(900_000, version - 2, "y")])
    assert client.inline(uri, 900_000, 10)["result"] is None
    (message,) = client.wait_for_notification("window/showMessage", after=mark)
    assert "over the server's limit" in message["params"]["message"]
    assert client.result("test/document", {"uri": uri})["text"].endswith("x = 1\n" + "y" * 10)
    assert client.inline(URI, 2, 4)["result"] is not None  # other documents are served
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def test_a_burst_of_changes_never_gets_a_suggestion_for_an_older_version(client: LspClient, tmp_path: Path) -> None:
    """A fill under way when 500 changes arrive answers nothing; requests between the changes are answered for
    the text they were made in (typeahead) or not at all; the last one is answered for the last version."""
    gate = tmp_path / "gate"
    gate.mkdir()
    client.result("test/gate", {"path": str(gate)})
    client.configure({"model": GATED_MODEL, "fill": {"decoder": "sequential"}})
    try:
        first = client.start("textDocument/inlineCompletion", inline_params(URI, 2, 4))
        wait_until(lambda: started(gate) == 1, "the first pass")
        requests = []
        for version in range(2, 502):  # a comment line above, one more each time
            client.change(URI, version, [insert(0, 0, f"# {version}\n")])
            requests.append(client.start("textDocument/inlineCompletion", inline_params(URI, version + 1, 4)))
        release(gate, 1)
        assert client.wait(first)["result"] is None  # its document changed under it
        for number in range(2, 200):
            release(gate, number)
        answers = [client.wait(r) for r in requests]
        assert all("error" not in a for a in answers)
        assert all(a["result"] is None for a in answers[:-1])  # each superseded by the next
        (item,) = answers[-1]["result"]["items"]
        assert item["range"] == span_range((502, 0), (502, 4))  # the blank line of the last version
        assert client.result("test/document", {"uri": URI})["version"] == 501
    finally:
        for number in range(1, 400):
            release(gate, number)
        assert client.result("test/idle") == "idle"


# --- prefetch: a typed change starts the completion before it is asked for ----------------------------------------


def test_a_typed_change_is_filled_before_the_request_and_the_request_takes_that_fill(client: LspClient) -> None:
    client.inline(URI, 1, 13)  # the model is loaded
    calls = len(fills(client))  # before the change: its fill may be done by the time a later count is answered
    client.change(URI, 2, [insert(2, 4, "t")])
    assert client.result("test/idle") == "idle"
    assert len(fills(client)) == calls + 1  # filled on the change alone
    calls = len(fills(client))
    prefetched = client.inline(URI, 2, 5)["result"]
    assert len(fills(client)) == calls  # the request's answer is that fill
    client.configure({"prefetch": False})  # the negative control: the same typing, filled only when asked
    client.open(URI, SOURCE)
    client.change(URI, 2, [insert(2, 4, "t")])
    assert client.result("test/idle") == "idle"
    assert len(fills(client)) == calls
    assert client.inline(URI, 2, 5)["result"] == prefetched  # the same answer
    assert len(fills(client)) == calls + 1


def test_a_paste_or_a_change_of_several_lines_is_not_prefetched(client: LspClient) -> None:
    client.inline(URI, 1, 13)
    calls = len(fills(client))
    client.change(URI, 2, [insert(2, 4, "x = 1  # " + "pasted " * 30)])
    client.change(URI, 3, [insert(1, 13, "\n    a = 1\n    b = 2")])
    client.change(URI, 4, [insert(1, 13, "\n"), insert(2, 0, "    ")])  # two edits in one message
    assert client.result("test/idle") == "idle"
    assert len(fills(client)) == calls


@pytest.fixture
def typed_x(client: LspClient, tmp_path: Path) -> Iterator[Path]:
    """The gated model; `x` typed on the blank line, and its prefetch in its first pass (held at the gate)."""
    with gated_model(client, tmp_path, passes=400) as gate:
        client.inline(URI, 0, 0)  # loads the model (a blank position: no fill)
        client.change(URI, 2, [insert(2, 4, "x")])
        wait_until(lambda: started(gate) == 1, "the prefetch's first pass")
        yield gate


def test_a_request_while_its_prefetch_runs_waits_for_it_instead_of_filling_again(
    client: LspClient, typed_x: Path
) -> None:
    calls = len(fills(client)) - 1  # the prefetch's fill has begun
    request = client.start("textDocument/inlineCompletion", inline_params(URI, 2, 5))
    for number in range(1, 200):
        release(typed_x, number)
    (item,) = client.wait(request)["result"]["items"]
    assert item["insertText"].startswith("x = 1234")  # the gated model's line, after the x typed
    assert len(fills(client)) == calls + 1  # one fill answered both (a fill of its own would make it two)


def test_a_request_that_waited_for_a_prefetch_is_not_filled_after_the_document_changed(
    client: LspClient, typed_x: Path
) -> None:
    request = client.start("textDocument/inlineCompletion", inline_params(URI, 2, 5))  # waits for the prefetch
    client.result("test/document", {"uri": URI})  # the request has been read
    calls = len(fills(client))
    client.change(URI, 3, [{"range": span_range((0, 0), (0, 0)), "text": "import os\n"}])  # a line above
    for number in range(1, 400):
        release(typed_x, number)
    # line 2, character 5 was a place of version 2; in version 3 it is inside `def mean(values):`
    assert client.wait(request)["result"] is None
    assert client.result("test/idle") == "idle"
    stale = len("def mean(values):\n    total = 0\n    x")  # line 2, character 5 of version 2
    assert stale not in [call["start"] for call in fills(client)[calls:]]  # no fill there in version 3
