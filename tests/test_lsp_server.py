"""`infill lsp` driven through a real client over stdio (JSON-RPC with Content-Length framing, in a subprocess):
initialize, document sync, inline completion, completion, code actions and the edits they apply, cancellation,
settings, shutdown/exit, and bad input answered with errors while the server keeps serving.

The server loads tests/fixtures_lsp.py as a plugin: a scripted model (a known fill, so what the server sends
can be compared with what `infill fill` writes in-process) and a model whose forward passes wait for the test.
"""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from fixtures_cli import fake_model
from fixtures_lsp import (
    GATED_MODEL,
    UNANSWERED,
    LspClient,
    ReplyError,
    applied,
    gated_model,
    inline_params,
    release,
    started,
    wait_until,
)
from fixtures_remote import free_port

from infill.api import fill_text
from infill.config import TOOL_DECODE, ModelSpec
from infill.lsp.fills import KEYS
from infill.spans import Span

pytest.importorskip("pygls")

URI = "file:///project/stats.py"
SOURCE = "def mean(values):\n    total = 0\n    \n    return total / len(values)\n"
INVALID_PARAMS, PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND = -32602, -32700, -32600, -32601
REQUEST_CANCELLED, REQUEST_FAILED, CONTENT_MODIFIED = -32800, -32803, -32801
SCRIPTED_MODEL = "scripted-lsp"


@pytest.fixture(scope="module")
def shared() -> Iterator[LspClient]:
    """One server for most tests of this file (starting one imports torch: seconds on a busy machine); each test
    names its settings and uses its own documents."""
    found = LspClient()
    try:
        found.initialize({"model": SCRIPTED_MODEL})
        yield found
    finally:
        assert found.close() == 0, found.stderr()


@pytest.fixture
def client(shared: LspClient, request: pytest.FixtureRequest) -> LspClient:
    """The shared server with the scripted model (fill: "total += 1") and every other setting back to its default
    (null: settings merge key by key); URI is opened fresh (at version 1) for each test."""
    shared.configure({**dict.fromkeys(KEYS), "model": SCRIPTED_MODEL})
    shared.open(URI, SOURCE)
    return shared


def text_of(client: LspClient, uri: str = URI) -> dict[str, Any]:
    result: dict[str, Any] = client.result("test/document", {"uri": uri})
    return result


def position(line: int, character: int) -> dict[str, int]:
    return {"line": line, "character": character}


def span_range(a: tuple[int, int], b: tuple[int, int]) -> dict[str, Any]:
    return {"start": position(*a), "end": position(*b)}


def in_process(text: str, span: Span, fill: str) -> str:
    """What `infill fill` writes into `span` with the same scripted model (its edit's text)."""
    with fake_model([fill], name="lsp-compare"):
        model = ModelSpec("lsp-compare")
        result = fill_text(text, [span], language="python", model=model, decode=TOOL_DECODE)
    return result.edits[0].text


# --- initialize -----------------------------------------------------------------------------------------------


def test_initialize_advertises_features_and_the_default_encoding(shared: LspClient) -> None:
    response = shared.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    assert response["error"]["code"] == INVALID_REQUEST  # once only; what it answered first:
    capabilities = shared.initialize_result["capabilities"]
    assert capabilities["positionEncoding"] == "utf-16"  # the client offered none
    assert capabilities["textDocumentSync"]["change"] == 2  # incremental
    assert "inlineCompletionProvider" in capabilities
    assert capabilities["completionProvider"] == {"resolveProvider": False}  # ALE (Vim) reads {} as none
    assert set(capabilities["codeActionProvider"]["codeActionKinds"]) == {"refactor.rewrite", "source"}
    commands = set(capabilities["executeCommandProvider"]["commands"])
    assert commands == {"infill.fillSelection", "infill.addDocstrings"}


# --- completions ----------------------------------------------------------------------------------------------


def test_inline_completion_on_a_blank_line_fills_the_whole_line(client: LspClient) -> None:
    result = client.inline(URI, 2, 4)["result"]
    start = SOURCE.index("    \n")
    expected = in_process(SOURCE, Span(start, start + 4, "cursor", 32, one_line=True), "total += 1")
    assert expected == "    total += 1"
    item = {"insertText": expected, "range": span_range((2, 0), (2, 4)), "confidence": None}  # no calibration
    assert result == {"items": [item]}


def test_inline_completion_after_text_fills_the_rest_of_the_line(client: LspClient) -> None:
    client.configure({"model": "scripted-rest"})  # fills "len(values)\n    print(total)"
    client.open(URI, "def mean(values):\n    n = \n    return n\n")
    result = client.inline(URI, 1, 8)["result"]
    item = {"insertText": "len(values)", "range": span_range((1, 8), (1, 8)), "confidence": None}
    assert result == {"items": [item]}
    # in the indentation of a line with text after the cursor there is no line to complete
    assert client.inline(URI, 2, 2)["result"] is None


def test_a_fill_that_starts_a_new_line_completes_nothing_on_this_one(client: LspClient) -> None:
    client.configure({"model": "scripted-newline"})  # fills "\n    return 0"
    client.open(URI, "def zero():\n    pass\n")
    assert client.inline(URI, 0, 11)["result"] is None


def test_completion_offers_the_same_fill_from_the_start_of_the_word(client: LspClient) -> None:
    client.configure({"model": "scripted-word"})  # fills "al / len(values)"
    client.open(URI, "def mean(values):\n    total = sum(values)\n    return tot\n")
    inline = client.inline(URI, 2, 14)["result"]
    item = {"insertText": "al / len(values)", "range": span_range((2, 14), (2, 14)), "confidence": None}
    assert inline == {"items": [item]}
    listed = client.result("textDocument/completion", {"textDocument": {"uri": URI}, "position": position(2, 14)})
    assert listed["isIncomplete"] is True
    (item,) = listed["items"]
    assert item["textEdit"] == {"newText": "total / len(values)", "range": span_range((2, 11), (2, 14))}
    assert item["label"] == "total / len(values)"
    # no filterText: Neovim's omnifunc (before 0.11) then replaces from the edit's start, not from its own
    # 'iskeyword' word start, which would drop the item where the two differ (`$el` in JavaScript)
    assert "filterText" not in item


def completion_item(client: LspClient, uri: str, line: int, character: int) -> dict[str, Any]:
    params = {"textDocument": {"uri": uri}, "position": position(line, character)}
    listed = client.result("textDocument/completion", params)
    (item,) = listed["items"]
    assert isinstance(item, dict)
    return item


def test_a_completion_item_is_one_line_of_a_block(client: LspClient) -> None:
    """Vim's complete() (Neovim's omnifunc) writes a line break as a NUL inside one line: the item is the block's
    first line, and the next line's request gets the rest from the typeahead cache."""
    client.configure({"model": "scripted-block"})
    client.open(URI, "def mean(values):\n    \n\nprint(mean([1.0]))\n")
    (inline,) = client.inline(URI, 1, 4)["result"]["items"]
    assert inline["insertText"] == "    total = sum(values)\n    return total / len(values)"  # ghost text: the block
    item = completion_item(client, URI, 1, 4)
    assert item["textEdit"] == {"newText": "total = sum(values)", "range": span_range((1, 4), (1, 4))}
    assert item["label"] == "total = sum(values)"
    calls = len(client.result("test/fills"))
    client.change(URI, 2, [{"range": span_range((1, 4), (1, 4)), "text": "total = sum(values)\n    "}])
    item = completion_item(client, URI, 2, 4)
    assert item["textEdit"] == {"newText": "return total / len(values)", "range": span_range((2, 4), (2, 4))}
    assert len(client.result("test/fills")) == calls  # the rest of the block, without a new fill


def test_a_completion_inside_a_blank_lines_indentation_replaces_the_blanks_after_the_cursor(
    client: LspClient,
) -> None:
    """The cursor at column 4 of a line of 8 blanks: the edit runs to the line's end, so a client that applies it
    (eglot: tests/test_emacs_eglot.py) is left the model's line with nothing trailing it. Vim's complete() (ALE,
    Neovim's omnifunc) ignores an edit's end and keeps the blanks after the cursor: docs/editors.md."""
    client.configure({"model": "scripted-block"})
    client.open(URI, "def mean(values):\n        \n\nprint(mean([1.0]))\n")
    item = completion_item(client, URI, 1, 4)
    assert item["textEdit"] == {"newText": "total = sum(values)", "range": span_range((1, 4), (1, 8))}
    line = "        "
    edited = line[:4] + item["textEdit"]["newText"] + line[8:]
    assert edited == "    total = sum(values)"


def test_a_javascript_word_includes_dollar(client: LspClient) -> None:
    """`$` is part of a JavaScript name, and of Emacs's symbol there: an edit from after it would not match the
    word eglot filters with (`$tot`), and the item would not be offered."""
    client.configure({"model": "scripted-word"})  # fills "al / len(values)"
    uri = "file:///project/stats.js"
    client.open(uri, "const $total = 1;\nconst x = $tot\n", language="javascript")
    item = completion_item(client, uri, 1, 14)
    assert item["textEdit"] == {"newText": "$total / len(values)", "range": span_range((1, 10), (1, 14))}
    client.open(URI, "total = 1\nx = $tot\n")  # not a name character in Python: the word starts after it
    assert completion_item(client, URI, 1, 8)["textEdit"]["range"] == span_range((1, 5), (1, 8))


def test_the_model_is_loaded_once_and_kept(client: LspClient) -> None:
    for _ in range(3):
        assert client.inline(URI, 2, 4)["result"] is not None
    assert client.result("test/loads")[SCRIPTED_MODEL] == 1


def test_selected_completion_item_is_continued(client: LspClient) -> None:
    client.open(URI, "def mean(values):\n    to\n")
    params = inline_params(URI, 1, 6)
    params["context"]["selectedCompletionInfo"] = {"range": span_range((1, 4), (1, 6)), "text": "total"}
    (item,) = client.result("textDocument/inlineCompletion", params)["items"]
    assert item["range"] == span_range((1, 4), (1, 6))
    assert item["insertText"] == "totaltotal += 1"  # the selected item, then the fill that follows it


# --- settings and the confidence threshold --------------------------------------------------------------------


@pytest.mark.parametrize(("model", "shown"), [("scripted-low", False), ("scripted-high", True)])
def test_fills_below_the_confidence_threshold_are_not_shown(client: LspClient, model: str, shown: bool) -> None:
    client.configure({"model": model, "threshold": 0.5})  # the fills' confidence: 0.3 (low), 0.7 (high)
    assert (client.inline(URI, 2, 4)["result"] is not None) is shown
    completion = client.result("textDocument/completion", {"textDocument": {"uri": URI}, "position": position(2, 4)})
    assert len(completion["items"]) == shown
    client.configure({"model": model, "threshold": 0.2})
    assert client.inline(URI, 2, 4)["result"] is not None


def test_bad_settings_are_ignored_with_a_message_and_the_rest_applies(client: LspClient) -> None:
    for bad, named in [
        ({"threshold": "high"}, '"threshold"'),
        ({"threshold": 2}, '"threshold"'),
        ({"tokens": 0}, '"tokens"'),
        ({"tokens": 1_000_000_000_000}, '"tokens"'),  # accepted, it failed every completion after it
        ({"decoder": "nonsense"}, "decoder"),
        ({"colour": "blue"}, "colour"),
        ({"fill": {"beam": 10_000}}, '"beam"'),
        ({"fill": "beam"}, '"fill"'),
        ({"lines": 0}, '"lines"'),
        ({"lines": True}, '"lines"'),
        ({"context": "yes"}, '"context"'),
        ({"prefetch": 1}, '"prefetch"'),
    ]:
        mark = client.mark()
        client.configure(bad)
        (message,) = client.wait_for_notification("window/showMessage", after=mark)
        assert named in message["params"]["message"] and "ignored" in message["params"]["message"], message
        assert message["params"]["type"] == 1, message
    assert client.inline(URI, 2, 4)["result"]["items"][0]["insertText"] == "    total += 1"  # nothing changed
    assert client.result("test/settings") == {"model": SCRIPTED_MODEL}
    mark = client.mark()
    client.configure({"threshold": "high", "model": "scripted-word"})  # the good key of a message applies
    client.wait_for_notification("window/showMessage", after=mark)
    assert client.result("test/settings") == {"model": "scripted-word"}
    assert "ignored" in client.stderr()  # logged too


def test_settings_merge_key_by_key(client: LspClient) -> None:
    """A later {"threshold": 0} must not switch the model back to the default. A key sent changes
    that key; null sets it back to its default; the keys of "fill" merge the same way."""
    client.configure({"model": "scripted-low", "threshold": 0.2})  # fills with confidence 0.3
    assert client.inline(URI, 2, 4)["result"] is not None
    client.configure({"threshold": 0.5})
    assert client.inline(URI, 2, 4)["result"] is None  # still scripted-low, now under the threshold
    client.configure({"threshold": None})
    assert client.result("test/settings") == {"model": "scripted-low"}
    client.configure({"fill": {"beam": 2}})
    client.notify("workspace/didChangeConfiguration", {"settings": {"fill": {"seed": 3}}})  # flat, not under infill
    assert client.result("test/settings") == {"model": "scripted-low", "fill": {"beam": 2, "seed": 3}}
    client.configure({"fill": {"beam": None}})
    assert client.result("test/settings")["fill"] == {"seed": 3}


def test_a_model_that_cannot_load_is_reported(client: LspClient) -> None:
    mark = client.mark()
    client.configure({"model": "/nonexistent/model"})
    (message,) = client.wait_for_notification("window/showMessage", after=mark)
    assert "cannot load model '/nonexistent/model'" in message["params"]["message"]
    response = client.inline(URI, 2, 4)
    assert response["error"]["code"] == REQUEST_FAILED
    assert "/nonexistent/model" in response["error"]["message"]


# --- document sync and positions ------------------------------------------------------------------------------


def check_changes(client: LspClient, size: Any) -> None:
    """Incremental changes around non-ASCII and astral characters, positions counted by `size`."""
    client.open(URI, "s = 'é😀x'\n\ny = 1\n")
    # replace the "x" after the emoji with "ü🐍", add a line at the end, then type on the blank line
    at = size("s = 'é😀")
    client.change(URI, 2, [{"range": span_range((0, at), (0, at + 1)), "text": "ü🐍"}])
    client.change(URI, 3, [{"range": span_range((3, 0), (3, 0)), "text": "z = 'Ω'\n"}])
    client.change(URI, 4, [{"range": span_range((1, 0), (1, 0)), "text": "    "}])
    assert text_of(client) == {"text": "s = 'é😀ü🐍'\n    \ny = 1\nz = 'Ω'\n", "version": 4, "broken": None}
    # a completion after the astral characters: its range is in the client's units
    end = size("s = 'é😀ü🐍'")
    client.change(URI, 5, [{"range": span_range((0, end), (0, end)), "text": "; "}])
    result = client.inline(URI, 0, end + 2)["result"]
    item = {"insertText": "total += 1", "range": span_range((0, end + 2), (0, end + 2)), "confidence": None}
    assert result["items"][0] == item


def test_incremental_changes_in_utf16(client: LspClient) -> None:
    check_changes(client, lambda s: len(s.encode("utf-16-le")) // 2)


def test_utf8_positions_when_the_client_offers_them() -> None:
    client = LspClient()
    try:
        assert (
            client.initialize({"model": SCRIPTED_MODEL}, encodings=["utf-8", "utf-16"])["capabilities"][
                "positionEncoding"
            ]
            == "utf-8"
        )
        check_changes(client, lambda s: len(s.encode("utf-8")))
    finally:
        assert client.close() == 0


def test_a_full_text_change_replaces_the_document(client: LspClient) -> None:
    client.change(URI, 2, [{"text": "x = 1\n"}])
    assert text_of(client) == {"text": "x = 1\n", "version": 2, "broken": None}


# --- code actions ---------------------------------------------------------------------------------------------


def code_actions(client: LspClient, a: tuple[int, int], b: tuple[int, int], uri: str = URI) -> list[dict[str, Any]]:
    params = {"textDocument": {"uri": uri}, "range": span_range(a, b), "context": {"diagnostics": []}}
    found: list[dict[str, Any]] = client.result("textDocument/codeAction", params) or []
    return found


def run_action(client: LspClient, action: dict[str, Any]) -> dict[str, Any]:
    """Execute the action's command (answered null once its fill started); the workspace/applyEdit the server
    sends when the fill is done."""
    before = len(client.server_requests)
    assert client.result("workspace/executeCommand", action["command"]) is None
    (request,) = client.wait_for_request("workspace/applyEdit", after=before)
    assert client.result("test/idle") == "idle"
    assert [r["method"] for r in client.server_requests[before:]] == [
        "window/workDoneProgress/create",
        "workspace/applyEdit",
    ]
    edit: dict[str, Any] = request["params"]["edit"]
    return edit


def test_fill_selection_applies_the_cli_fill_with_the_document_version(client: LspClient) -> None:
    client.open(URI, SOURCE, version=7)
    (fill,) = [a for a in code_actions(client, (1, 4), (1, 13)) if a["title"] == "Fill selection with infill"]
    edit = run_action(client, fill)
    start = SOURCE.index("total = 0")
    expected = in_process(SOURCE, Span(start, start + len("total = 0"), "selection", 32), "total += 1")
    (document_edit,) = edit["documentChanges"]
    assert document_edit["textDocument"] == {"uri": URI, "version": 7}
    assert document_edit["edits"] == [{"range": span_range((1, 4), (1, 13)), "newText": expected}]


def test_fill_selection_of_whole_lines_keeps_the_last_line_break(client: LspClient) -> None:
    """A line selection reaches the start of the next line, (1,0)-(2,0): the fill replaces the line and leaves
    its line break, as `infill fill --span 2` does; it joined the next line before."""
    (fill,) = [a for a in code_actions(client, (1, 0), (2, 0)) if a["title"] == "Fill selection with infill"]
    edit = run_action(client, fill)
    start = SOURCE.index("    total = 0")
    line = Span(start, start + len("    total = 0"), "selection", 32, one_line=True)
    (document_edit,) = edit["documentChanges"]
    assert document_edit["edits"] == [
        {"range": span_range((1, 0), (1, 13)), "newText": in_process(SOURCE, line, "total += 1")}
    ]


def test_an_action_on_a_changed_document_is_refused(client: LspClient) -> None:
    (fill,) = [a for a in code_actions(client, (1, 4), (1, 13)) if a["title"] == "Fill selection with infill"]
    client.change(URI, 2, [{"range": span_range((0, 0), (0, 0)), "text": "# changed\n"}])
    before = len(client.server_requests)
    response = client.request("workspace/executeCommand", fill["command"])
    assert response["error"]["code"] == CONTENT_MODIFIED
    assert client.server_requests[before:] == []


def fill_action(client: LspClient, uri: str = URI) -> dict[str, Any]:
    (fill,) = [a for a in code_actions(client, (1, 4), (1, 13), uri) if a["title"] == "Fill selection with infill"]
    return fill


def told(client: LspClient, mark: int) -> dict[str, Any]:
    """The one window/showMessage after `mark`, once the server is idle (params: type and message)."""
    assert client.result("test/idle") == "idle"
    settle(client)
    shown = [n["params"] for n in client.notifications[mark:] if n["method"] == "window/showMessage"]
    assert len(shown) == 1, shown
    return shown[0]


def progress_of(client: LspClient, mark: int) -> list[dict[str, Any]]:
    """The $/progress values after `mark`, once the server is idle; each carries the token the server created."""
    assert client.result("test/idle") == "idle"
    settle(client)
    created = {r["params"]["token"] for r in client.server_requests if r["method"] == "window/workDoneProgress/create"}
    sent = [n["params"] for n in client.notifications[mark:] if n["method"] == "$/progress"]
    assert all(p["token"] in created for p in sent), (sent, created)
    return [p["value"] for p in sent]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"applied": False, "failureReason": "read-only buffer"}, "read-only buffer"),
        (ReplyError(-32603, "Edits on `stats.py' require version 1, you have 2"), "require version 1"),  # eglot's
    ],
)
def test_an_edit_the_editor_refuses_is_shown(client: LspClient, gated: Path, answer: Any, why: str) -> None:
    """The request was answered when the fill started: the editor's refusal (a result or an error) is told. The
    fill waits on its first pass until the progress has begun: a fill done before the client's answer to
    window/workDoneProgress/create has none (neither begin nor end), which a loaded machine made of a quick one."""
    fill = fill_action(client)

    def refuse(message: dict[str, Any]) -> Any:
        if message["method"] != "workspace/applyEdit":
            return None
        if isinstance(answer, Exception):
            raise answer
        return answer

    client.on_request = refuse
    mark = client.mark()
    try:
        assert client.result("workspace/executeCommand", fill["command"]) is None
        client.wait_for_notification("$/progress", after=mark)  # begun, while pass 1 waits
        for number in range(1, 200):
            release(gated, number)
        # told once the editor's answer to workspace/applyEdit is in: the test's next requests can reach the
        # server before that answer (the client's reader thread sends it), so idle and settled are not enough
        client.wait_for_notification("window/showMessage", after=mark)
        message = told(client, mark)
    finally:
        client.on_request = applied
    assert message["type"] == 1  # Error
    assert message["message"].startswith("infill: fill selection: the editor did not apply the edit: ")
    assert why in message["message"]
    assert progress_of(client, mark)[-1] == {"kind": "end", "message": "done"}  # the fill's: done, the edit sent


def test_a_fill_that_breaks_the_syntax_is_shown_and_changes_nothing(client: LspClient) -> None:
    client.configure({"model": "scripted-broken"})
    fill = fill_action(client)
    before, mark = len(client.server_requests), client.mark()
    assert client.result("workspace/executeCommand", fill["command"]) is None
    message = told(client, mark)
    assert message == {
        "type": 2,  # Warning
        "message": "infill: fill selection: no valid fill: every candidate breaks the syntax; nothing was changed",
    }
    assert [r["method"] for r in client.server_requests[before:]] == ["window/workDoneProgress/create"]


def test_a_fill_that_fails_is_shown(client: LspClient) -> None:
    before = client.mark()  # before the settings: their failed load can be told before configure returns
    client.configure({"model": "/nonexistent/model"})
    client.wait_for_notification("window/showMessage", after=before)  # the load's own message
    fill = fill_action(client)
    mark = client.mark()
    assert client.result("workspace/executeCommand", fill["command"]) is None
    message = told(client, mark)
    assert message["type"] == 1 and message["message"].startswith("infill: fill selection: ")
    assert "/nonexistent/model" in message["message"]


def test_a_slow_command_is_answered_when_its_fill_starts_and_shows_progress(client: LspClient, gated: Path) -> None:
    """Clients give up on a request after a while (eglot 10 s, Helix 20 s): the command is answered while its
    fill waits on its first forward pass, the progress begins, and the edit comes once the fill is done."""
    fill = fill_action(client)
    before, mark = len(client.server_requests), client.mark()
    request = client.start("workspace/executeCommand", fill["command"])
    wait_until(lambda: started(gated) == 1, "the first pass")
    assert client.wait(request) == {"jsonrpc": "2.0", "id": request, "result": None}  # pass 1 still waits
    (begin,) = client.wait_for_notification("$/progress", after=mark)
    assert begin["params"]["value"] == {"kind": "begin", "title": "infill: fill selection", "cancellable": True}
    assert client.server_requests[before:] == client.wait_for_request("window/workDoneProgress/create", after=before)
    for number in range(1, 200):
        release(gated, number)
    (edit,) = client.wait_for_request("workspace/applyEdit", after=before)
    (change,) = edit["params"]["edit"]["documentChanges"]
    assert change["textDocument"] == {"uri": URI, "version": 1}
    assert change["edits"][0]["newText"].startswith("x = 123")
    assert progress_of(client, mark) == [begin["params"]["value"], {"kind": "end", "message": "done"}]


@pytest.mark.parametrize("how", ["progress cancel", "document change", "document close"])
def test_a_command_stopped_meanwhile_sends_no_edit(client: LspClient, gated: Path, how: str) -> None:
    """The user's cancel (window/workDoneProgress/cancel), an edit of the document (its edit would be for an
    older text: told) or closing it stops the fill at its next forward pass; no workspace/applyEdit follows."""
    fill = fill_action(client)
    before, mark = len(client.server_requests), client.mark()
    assert client.result("workspace/executeCommand", fill["command"]) is None
    wait_until(lambda: started(gated) == 1, "the first pass")
    (begin,) = client.wait_for_notification("$/progress", after=mark)
    if how == "progress cancel":
        client.notify("window/workDoneProgress/cancel", {"token": begin["params"]["token"]})
    elif how == "document change":
        client.change(URI, 2, [{"range": span_range((0, 0), (0, 0)), "text": "# edited\n"}])
    else:
        client.notify("textDocument/didClose", {"textDocument": {"uri": URI}})
    settle(client)
    release(gated, 1)
    assert client.result("test/idle") == "idle"
    assert started(gated) == 1  # stopped after the pass that was running
    assert [r["method"] for r in client.server_requests[before:]] == ["window/workDoneProgress/create"]
    shown = [n["params"] for n in client.notifications[mark:] if n["method"] == "window/showMessage"]
    if how == "document change":
        why = "stats.py changed while it ran; nothing was changed: run the action again"
        assert shown == [{"type": 2, "message": f"infill: fill selection: {why}"}]  # a Warning
        assert progress_of(client, mark)[-1] == {"kind": "end", "message": why}
    else:
        assert shown == []  # the user's own doing
        assert progress_of(client, mark)[-1] == {"kind": "end", "message": "cancelled"}


def test_add_docstrings_stopped_by_a_change_writes_nothing(client: LspClient, gated: Path) -> None:
    """The docstring filler stops at its next forward pass too (it does not go on to the next docstring)."""
    client.open(URI, DOCUMENTED)
    (every,) = [a for a in code_actions(client, (2, 8), (2, 8)) if a["title"] == "Add 4 missing docstrings (infill)"]
    before, mark = len(client.server_requests), client.mark()
    assert client.result("workspace/executeCommand", every["command"]) is None
    wait_until(lambda: started(gated) == 1, "the first pass")
    client.change(URI, 2, [{"range": span_range((0, 0), (0, 0)), "text": "# edited\n"}])
    settle(client)
    release(gated, 1)
    message = told(client, mark)
    assert started(gated) == 1
    assert (
        message["message"]
        == "infill: add docstrings: stats.py changed while it ran; nothing was changed: run the action again"
    )
    assert [r["method"] for r in client.server_requests[before:]] == ["window/workDoneProgress/create"]


def test_add_docstrings_reports_which_docstring_it_is_writing(client: LspClient, gated: Path) -> None:
    """Add N missing docstrings can take minutes with a large model: its progress says which one is being
    written (a report as each starts; one written before the client's progress began is sent with the begin)."""
    client.open(URI, DOCUMENTED)
    (every,) = [a for a in code_actions(client, (2, 8), (2, 8)) if a["title"] == "Add 4 missing docstrings (infill)"]
    before, mark = len(client.server_requests), client.mark()
    assert client.result("workspace/executeCommand", every["command"]) is None
    wait_until(lambda: started(gated) == 1, "the first pass")
    client.wait_for_notification("$/progress", after=mark)
    for number in range(1, 2000):
        release(gated, number)
    client.wait_for_request("workspace/applyEdit", after=before)
    values = progress_of(client, mark)
    assert values[0]["kind"] == "begin" and values[-1] == {"kind": "end", "message": "done"}
    assert values[1:-1] == [
        {"kind": "report", "message": f"docstring {k} of 4", "percentage": 25 * (k - 1)} for k in range(1, 5)
    ]


def test_a_second_command_on_a_document_is_refused_while_the_first_runs(client: LspClient, gated: Path) -> None:
    """While a command runs on a document, another one on it is refused at once (RequestFailed: it would be for
    the text the first one's edit replaces); one on another document starts after it."""
    fill = fill_action(client)
    before = len(client.server_requests)
    assert client.result("workspace/executeCommand", fill["command"]) is None
    wait_until(lambda: started(gated) == 1, "the first pass")
    second = client.request("workspace/executeCommand", fill["command"])
    assert second["error"] == {
        "code": REQUEST_FAILED,
        "message": "stats.py: infill's fill selection is still running there; try again once it is done",
    }
    other = "file:///project/other.py"
    client.open(other, SOURCE)
    assert client.result("workspace/executeCommand", fill_action(client, other)["command"]) is None
    for number in range(1, 200):
        release(gated, number)
    edits = client.wait_for_request("workspace/applyEdit", count=2, after=before)
    assert {e["params"]["edit"]["documentChanges"][0]["textDocument"]["uri"] for e in edits} == {URI, other}
    client.notify("textDocument/didClose", {"textDocument": {"uri": other}})


def test_a_client_that_never_answers_the_edit_can_run_the_next_command(client: LspClient) -> None:
    """Vim's ALE applies the edit but never answers workspace/applyEdit: the document is free for the next
    command once the edit is sent, not held by the unanswered request."""
    client.on_request = lambda message: UNANSWERED if message["method"] == "workspace/applyEdit" else None
    try:
        fill = fill_action(client)
        before = len(client.server_requests)
        assert client.result("workspace/executeCommand", fill["command"]) is None
        client.wait_for_request("workspace/applyEdit", after=before)
        assert client.result("workspace/executeCommand", fill["command"]) is None  # not "still running"
        assert len(client.wait_for_request("workspace/applyEdit", count=2, after=before)) == 2
    finally:
        client.on_request = applied


def test_without_progress_support_and_shutdown_during_a_command(tmp_path: Path) -> None:
    """A client that declares no window.workDoneProgress (eglot 1.9) gets no progress, and the command is still
    answered at once with its edit after; shutdown during a command stops its fill at the next forward pass: no
    edit, no message, exit 0."""
    fresh = LspClient()
    try:
        fresh.initialize({"model": SCRIPTED_MODEL}, progress=False)
        fresh.open(URI, SOURCE)
        assert fresh.result("workspace/executeCommand", fill_action(fresh)["command"]) is None
        (edit,) = fresh.wait_for_request("workspace/applyEdit")
        assert edit["params"]["edit"]["documentChanges"][0]["edits"][0]["newText"] == "total += 1"
        fresh.open(URI, SOURCE, version=2)
        gate = tmp_path / "gate"
        gate.mkdir()
        fresh.result("test/gate", {"path": str(gate)})
        fresh.configure({"model": GATED_MODEL, "fill": {"decoder": "sequential"}})
        assert fresh.result("workspace/executeCommand", fill_action(fresh)["command"]) is None
        wait_until(lambda: started(gate) == 1, "the first pass")
        assert fresh.result("shutdown") is None
        release(gate, 1)
        fresh.notify("exit")
        assert fresh.process.wait(60) == 0
        assert started(gate) == 1  # no pass after the one that was running
    finally:
        fresh.close(shutdown=False)
    assert [r["method"] for r in fresh.server_requests] == ["workspace/applyEdit"]
    assert [n for n in fresh.notifications if n["method"] in ("window/showMessage", "$/progress")] == []


DOCUMENTED = (
    "class Stats:\n    def mean(self, values):\n        return sum(values) / len(values)\n\n\n"
    "def total(values):\n    return sum(values)\n"
)


@pytest.mark.parametrize("where", ["function", "file"])
def test_add_docstrings_inserts_what_the_docstring_filler_writes(client: LspClient, where: str) -> None:
    from fixtures_doc import FakeFiller

    from infill.docstrings.config import DocstringConfig
    from infill.docstrings.engine import process_source

    client.open(URI, DOCUMENTED)
    actions = code_actions(client, (2, 8), (2, 8))
    titles = [a["title"] for a in actions]
    assert "Add docstring to Stats.mean (infill)" in titles
    assert "Add 4 missing docstrings (infill)" in titles  # the module's, the class's and both functions'
    chosen = next(a for a in actions if (where == "function") == a["title"].startswith("Add docstring to"))
    (document_edit,) = run_action(client, chosen)["documentChanges"]
    new = apply_lsp_edits(DOCUMENTED, document_edit["edits"])
    ast.parse(new)  # CPython's verdict: the file still parses
    # the same insertions as the docstring filler makes in-process with the same fill in every slot
    at = DOCUMENTED.index("return sum(values) /") if where == "function" else None
    filler = FakeFiller(lambda key, qualname: "total += 1")
    expected = process_source(DOCUMENTED, "stats.py", DocstringConfig(), filler, at=at)
    assert [e.text for e in expected.edits] == [e["newText"] for e in document_edit["edits"]]
    assert new.count('"""') == (2 if where == "function" else 8)


def apply_lsp_edits(text: str, edits: list[dict[str, Any]]) -> str:
    """Apply LSP TextEdits (UTF-16 positions, ASCII text here) the way an editor does."""
    lines = text.splitlines(keepends=True)
    starts = [sum(len(line) for line in lines[:i]) for i in range(len(lines) + 1)]

    def offset(p: dict[str, int]) -> int:
        return starts[p["line"]] + p["character"]

    for edit in sorted(edits, key=lambda e: offset(e["range"]["start"]), reverse=True):
        a, b = offset(edit["range"]["start"]), offset(edit["range"]["end"])
        text = text[:a] + edit["newText"] + text[b:]
    return text


def test_no_docstring_actions_for_other_languages_or_a_file_that_does_not_parse(client: LspClient) -> None:
    client.open(URI, "def broken(:\n    pass\n")
    assert code_actions(client, (1, 4), (1, 4)) == []
    client.open("file:///project/notes.md", "# notes\n\ntext\n", language="markdown")
    (action,) = code_actions(client, (2, 0), (2, 2), uri="file:///project/notes.md")
    assert action["title"] == "Fill selection with infill"


def test_settings_that_switch_docstring_actions_off_are_told_once(client: LspClient, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.infill]\nmodle = "x"\n')
    uri = (tmp_path / "m.py").as_uri()
    mark = client.mark()
    client.open(uri, "def f(a):\n    return a\n")
    assert code_actions(client, (1, 4), (1, 4), uri=uri) == []
    assert code_actions(client, (0, 4), (0, 4), uri=uri) == []
    settle(client)
    (message,) = client.wait_for_notification("window/showMessage", after=mark)
    assert "pyproject.toml" in message["params"]["message"] and "'modle'" in message["params"]["message"]
    (tmp_path / "pyproject.toml").write_text("[tool.infill]\n")
    assert [a["title"] for a in code_actions(client, (1, 4), (1, 4), uri=uri)] == [
        "Add docstring to f (infill)",
        "Add 2 missing docstrings (infill)",  # the module and f
    ]
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


# --- cancellation ---------------------------------------------------------------------------------------------


@pytest.fixture
def gated(client: LspClient, tmp_path: Path) -> Iterator[Path]:
    """The gated model (sequential decoding: one forward pass per token) on the shared server; its gate."""
    with gated_model(client, tmp_path) as gate:
        yield gate


def settle(client: LspClient) -> None:
    """Return once the server has read every message sent before (it answers them in order)."""
    client.result("test/settings")


def test_cancel_request_stops_the_fill_between_forward_passes(client: LspClient, gated: Path) -> None:
    request = client.start("textDocument/inlineCompletion", inline_params(URI, 2, 4))
    wait_until(lambda: started(gated) == 1, "the first pass")
    release(gated, 1)
    wait_until(lambda: started(gated) == 2, "the second pass")
    client.notify("$/cancelRequest", {"id": request})
    settle(client)  # the cancel has been read
    release(gated, 2)
    assert client.wait(request)["error"]["code"] == REQUEST_CANCELLED
    assert client.result("test/idle") == "idle"  # the worker finished the cancelled fill
    assert started(gated) == 2  # the pass that was running finished; no other started


@pytest.mark.parametrize("how", ["newer request", "document change"])
def test_a_newer_request_or_a_change_stops_the_running_fill(client: LspClient, gated: Path, how: str) -> None:
    first = client.start("textDocument/inlineCompletion", inline_params(URI, 2, 4))
    wait_until(lambda: started(gated) == 1, "the first pass")
    if how == "newer request":
        client.open("file:///project/other.py", "x = 1\n\n")
        second = client.start("textDocument/inlineCompletion", inline_params("file:///project/other.py", 1, 0))
    else:
        client.change(URI, 2, [{"range": span_range((0, 0), (0, 0)), "text": "# edited\n"}])
    settle(client)
    release(gated, 1)
    assert client.wait(first)["result"] is None  # superseded: no items, no error
    if how == "newer request":
        # the newer fill runs next, from pass 2 on: the first stopped after its one pass
        wait_until(lambda: started(gated) == 2, "the newer fill's first pass")
        for number in range(2, 200):
            release(gated, number)
        assert client.wait(second)["result"]["items"][0]["insertText"].startswith("x = 123")
    else:
        assert client.result("test/idle") == "idle"  # the worker finished the stopped fill
        assert started(gated) == 1


# --- shutdown and exit ----------------------------------------------------------------------------------------


def test_exit_without_shutdown_exits_1_and_after_it_0() -> None:
    client = LspClient()
    client.initialize({"model": SCRIPTED_MODEL})
    assert client.close(shutdown=False) == 1
    # the shared server's fixture checks the other way round: shutdown, exit, 0


@pytest.mark.parametrize("how", ["shutdown and exit", "exit", "end of input"])
def test_an_editor_closing_during_the_model_load_ends_the_server_without_waiting_for_it(
    tmp_path: Path, how: str
) -> None:
    """The editor quits while the model still loads (seconds for a real one): the server ends then, with the exit
    code the session earned, and the load is left unfinished. The interpreter's exit joined the worker thread,
    so the process lived on until the load was over."""
    from fixtures_lsp import LOADING_MODEL, lsp_env

    client = LspClient(env=lsp_env(INFILL_TEST_GATE=str(tmp_path)))
    try:
        client.initialize({"model": LOADING_MODEL})
        wait_until(lambda: (tmp_path / "load-started").exists(), "the load to start")
        if how == "shutdown and exit":
            client.request("shutdown")
        if how != "end of input":
            client.notify("exit")
        assert client.process.stdin is not None
        client.process.stdin.close()
        code = client.process.wait()
        finished = (tmp_path / "load-finished").exists()
    finally:
        (tmp_path / "load-go").write_text("")
        client.close()
    assert not finished, "the server waited for the load"
    assert code == (0 if how == "shutdown and exit" else 1), client.stderr()
    assert "Traceback" not in client.stderr()


def test_sigterm_ends_the_server_while_the_client_keeps_its_end_open() -> None:
    """A process manager's SIGTERM, with the editor still connected: the server exits at once with 143 and one
    line. The read of stdin blocked in a thread the interpreter joined at exit, so the server ran on until the
    client closed its end."""
    import signal
    import subprocess

    client = LspClient()
    try:
        client.initialize({"model": SCRIPTED_MODEL})
        client.open(URI, SOURCE)
        assert client.request("textDocument/inlineCompletion", inline_params(URI, 2, 4)).get("result")
        client.process.send_signal(signal.SIGTERM)
        try:
            code = client.process.wait(30)  # stdin stays open
        except subprocess.TimeoutExpired:
            code = None
    finally:
        client.close()
    assert code == 143, client.stderr()
    assert "Traceback" not in client.stderr() and "terminated" in client.stderr()


def test_a_client_that_stops_reading_ends_the_server_with_one_line() -> None:
    """The client closes its end of the server's output (it crashed half-way, or stopped reading) and keeps
    writing: one line says so, the server exits 141 (stdout's reader went away) without waiting for the end of
    its input, and no answer that cannot be sent is a traceback."""
    import os
    import subprocess
    import sys

    from fixtures_lsp import REPO_ROOT, lsp_env

    read_end, write_end = os.pipe()
    server = subprocess.Popen(
        [sys.executable, "-m", "infill", "lsp"], stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.PIPE,
        env=lsp_env(), cwd=REPO_ROOT,
    )  # fmt: skip
    os.close(write_end)
    os.close(read_end)
    assert server.stdin is not None and server.stderr is not None
    try:
        for message in (
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}},
            {"jsonrpc": "2.0", "method": "initialized", "params": {}},
            {"jsonrpc": "2.0", "id": 2, "method": "test/document", "params": {"uri": URI}},
        ):
            body = json.dumps(message).encode()
            server.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            server.stdin.flush()
        try:
            code = server.wait(60)  # stdin stays open
        except subprocess.TimeoutExpired:
            code = None
        err = server.stderr.read().decode()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdin.close()
        server.stderr.close()
    assert code == 141, err
    assert err.count("the client closed its end") == 1 and "Traceback" not in err, err


# --- bad input ------------------------------------------------------------------------------------------------


def test_bad_messages_get_errors_and_the_server_keeps_serving(client: LspClient) -> None:
    client.send_raw(b"{this is not json")
    client.send_raw(b"\xff\xfe not utf-8")
    client.send_raw(json.dumps({"id": 90, "method": "textDocument/inlineCompletion"}).encode())  # no "jsonrpc"
    bad_type = inline_params(URI, 0, 0)
    bad_type["position"] = {"line": "two", "character": 0}
    answers = {
        "bad type": client.request("textDocument/inlineCompletion", bad_type),
        "past the end": client.inline(URI, 40, 0),
        "negative": client.request("textDocument/inlineCompletion", inline_params(URI, 0, -1)),
        "unknown uri": client.inline("file:///project/missing.py", 0, 0),
        "unknown method": client.request("infill/nonsense", {}),
        "bad command": client.request(
            "workspace/executeCommand", {"command": "infill.fillSelection", "arguments": [1]}
        ),
    }
    assert client.wait(90)["error"]["code"] == INVALID_REQUEST
    assert client.wait(None)["error"]["code"] == PARSE_ERROR
    assert answers["bad type"]["error"]["code"] == INVALID_PARAMS
    assert "line" in answers["bad type"]["error"]["message"]
    assert answers["past the end"]["error"] == {
        "code": INVALID_PARAMS,
        "message": "stats.py: line 40 is past the end of the document (5 lines)",
    }
    assert answers["negative"]["error"]["code"] == INVALID_PARAMS
    assert answers["unknown uri"]["error"]["code"] == INVALID_PARAMS
    assert answers["unknown method"]["error"]["code"] == METHOD_NOT_FOUND
    assert answers["bad command"]["error"]["code"] == INVALID_PARAMS
    # an offset between a \r and its \n is no position: its edit would start past the end of a line
    crlf = "file:///project/crlf.py"
    client.open(crlf, "def add(a, b):\r\n    return a + b\r\n")
    inside = client.request(
        "workspace/executeCommand", {"command": "infill.fillSelection", "arguments": [crlf, 15, 34, 1]}
    )
    assert inside["error"]["code"] == INVALID_PARAMS, inside
    # still serving
    assert client.inline(URI, 2, 4)["result"]["items"][0]["insertText"] == "    total += 1"


def test_a_character_past_the_end_of_a_line_means_its_end(client: LspClient) -> None:
    assert client.inline(URI, 2, 99)["result"]["items"][0]["range"] == span_range((2, 0), (2, 4))


def test_a_huge_document_gets_a_message_and_no_fills(client: LspClient) -> None:
    huge = "x = 1\n" * 200_000 + "\n"  # 1.2 MB, over the default limit of 1 MiB
    mark = client.mark()
    client.open("file:///project/huge.py", huge)
    assert client.inline("file:///project/huge.py", 200_000, 0)["result"] is None
    (message,) = client.wait_for_notification("window/showMessage", after=mark)
    assert "over the server's limit" in message["params"]["message"]
    # typing on: no new message for every keystroke
    client.change("file:///project/huge.py", 2, [{"range": span_range((200_000, 0), (200_000, 0)), "text": "x"}])
    assert client.inline("file:///project/huge.py", 200_000, 1)["result"] is None
    settle(client)
    assert len(client.wait_for_notification("window/showMessage", after=mark)) == 1  # told once
    assert client.inline(URI, 2, 4)["result"] is not None
    client.notify("textDocument/didClose", {"textDocument": {"uri": "file:///project/huge.py"}})


def test_lone_surrogates_and_a_change_inside_a_character_are_refused(client: LspClient) -> None:
    uri = "file:///project/odd.py"
    mark = client.mark()
    body = {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": "x = '\ud800'\n\n"}}
    client.send_raw(b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": ' + _ascii_json(body) + b"}")
    assert client.inline(uri, 1, 0)["result"] is None
    (message,) = client.wait_for_notification("window/showMessage", after=mark)
    assert "lone surrogate" in message["params"]["message"]
    # the client sends the whole text again: usable; then a change that splits the emoji: out of step
    client.change(uri, 2, [{"text": "s = '😀'\n\n"}])
    assert client.inline(uri, 1, 0)["result"] is not None
    client.change(uri, 3, [{"range": span_range((0, 6), (0, 6)), "text": "x"}])
    assert text_of(client, uri)["broken"] is not None
    assert client.inline(uri, 1, 0)["result"] is None
    messages = client.wait_for_notification("window/showMessage", 2, after=mark)
    assert "out of step" in messages[-1]["params"]["message"]
    client.change(uri, 4, [{"text": "s = '😀'\n\n"}])
    # in step again (without a completion in between); out of step again: told again (it was told only once)
    client.change(uri, 5, [{"range": span_range((0, 6), (0, 6)), "text": "x"}])
    assert client.inline(uri, 1, 0)["result"] is None
    messages = client.wait_for_notification("window/showMessage", 3, after=mark)
    assert "out of step" in messages[-1]["params"]["message"]
    client.change(uri, 6, [{"text": "s = 1\n\n"}])
    assert client.inline(uri, 1, 0)["result"] is not None


def _ascii_json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True).encode("ascii")


def test_unknown_languages_are_filled_as_plain_text_with_a_message(client: LspClient) -> None:
    told = "'restructuredtext' is not a language infill parses"
    client.open("file:///project/notes.txt", "Shopping list\n\nmilk\n", language="restructuredtext")
    settle(client)  # the open has been handled: what it told came before this answer
    # once per language and server: counted over the shared server's session, not after a mark (a test before this
    # one, or this one run again, may have opened such a document first)
    messages = [n for n in client.notifications if told in json.dumps(n.get("params"))]
    assert len(messages) == 1 and messages[0]["method"] == "window/showMessage", messages
    assert client.inline("file:///project/notes.txt", 1, 0)["result"]["items"][0]["insertText"] == "total += 1"


def test_stdio_and_tcp_together_are_a_usage_error() -> None:
    from click.testing import CliRunner

    from infill.cli import main

    result = CliRunner().invoke(main, ["lsp", "--stdio", "--tcp", "2087"])
    assert result.exit_code == 2
    assert "not both" in result.output


def start_tcp_server() -> tuple[subprocess.Popen[bytes], int]:
    """`infill lsp --tcp PORT` on a free port, listening, and (port) once it has let a port probe go: the probe
    connects, sends nothing and leaves (a half-close), and the server's close of its end is the cue that the
    server took the probe's leaving, and did not end on it (its exit would close that end too: the next client
    finds out)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "infill", "lsp", "--tcp", str(port)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while True:
        try:
            probe = socket.create_connection(("127.0.0.1", port), timeout=120)
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline and server.poll() is None, "the server did not listen"
            time.sleep(0.1)
    with probe:
        probe.shutdown(socket.SHUT_WR)
        assert probe.recv(1) == b""
    return server, port


def tcp_ask(connection: socket.socket, reader: BinaryIO, request_id: int, method: str, params: Any) -> Any:
    """Send one request on a TCP session and read the message that comes back."""
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    connection.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(body), body.encode()))
    length = 0
    while (header := reader.readline()) not in (b"\r\n", b""):
        if header.lower().startswith(b"content-length:"):
            length = int(header.split(b":")[1])
    return json.loads(reader.read(length))


def end_tcp_session(server: subprocess.Popen[bytes], connection: socket.socket, reader: BinaryIO) -> tuple[int, bytes]:
    """`shutdown` answered, then SIGTERM while the client is still connected (sent after it left, the signal would
    race the server's own exit: a client that talked ends the session as the end of stdin does); (exit code,
    stderr)."""
    assert tcp_ask(connection, reader, 2, "shutdown", {}) == {"jsonrpc": "2.0", "id": 2, "result": None}
    server.terminate()
    code = server.wait(60)
    reader.close()
    assert server.stderr is not None
    return code, server.stderr.read()


def stop_tcp_server(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.kill()
        server.wait(30)
    if server.stderr is not None:
        server.stderr.close()


def test_tcp_serves_on_loopback() -> None:
    """`infill lsp --tcp PORT`: the same server on 127.0.0.1, for clients that connect instead of spawning, one at a
    time: a port probe does not end it, and a second client does not take the first one's answers."""
    import contextlib

    server, port = start_tcp_server()  # a port probe came and went
    try:
        assert server.poll() is None, "a client that left without a word ended the server"
        connection = socket.create_connection(("127.0.0.1", port), timeout=120)
        with connection:
            reader = connection.makefile("rb")
            answer = tcp_ask(connection, reader, 1, "initialize", {"capabilities": {}})
            assert answer["id"] == 1 and "inlineCompletionProvider" in answer["result"]["capabilities"]
            # a second client while the first is connected is refused, and the first keeps its answers
            with socket.create_connection(("127.0.0.1", port), timeout=120) as second:
                body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "shutdown"}).encode()
                with contextlib.suppress(OSError):
                    second.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                try:
                    refused = second.recv(1) == b""
                except ConnectionResetError:  # closed with our request unread
                    refused = True
                assert refused
            # SIGTERM ends it while the client is connected (once asyncio logged and swallowed it when it landed
            # inside one of the loop's callbacks)
            code, err = end_tcp_session(server, connection, reader)
        # its exit code and line after the refusal's warning; never a traceback, never running on
        assert code == 143 and err.endswith(b"\ninfill: terminated\n") and b"Traceback" not in err, (code, err)
    finally:
        stop_tcp_server(server)


def test_a_client_right_after_a_port_probe_is_served() -> None:
    """A port probe, then at once the real client (a script's `nc -z` before the editor connects), both before the
    server runs again (a loaded machine: SIGSTOP stands in for it). The probe has left, but its end of input is
    not read yet when the client arrives: the client was refused as a second one, and the editor got nothing."""
    import os
    import signal

    server, port = start_tcp_server()
    try:
        os.kill(server.pid, signal.SIGSTOP)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=120).close()  # the probe: in and out
            connection = socket.create_connection(("127.0.0.1", port), timeout=120)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        with connection:
            reader = connection.makefile("rb")
            answer = tcp_ask(connection, reader, 1, "initialize", {"capabilities": {}})
            assert answer["id"] == 1 and "inlineCompletionProvider" in answer["result"]["capabilities"], answer
            code, err = end_tcp_session(server, connection, reader)
        assert code == 143 and err == b"infill: terminated\n", (code, err)  # no client was refused
    finally:
        stop_tcp_server(server)


def test_sigterm_inside_an_event_loop_callback_ends_the_loop() -> None:
    """The event loop takes SIGTERM (run_until_terminated): a signal that lands while one of its callbacks runs
    cancels the server and raises Terminated after the loop, where a handler raising inside the callback was
    logged by asyncio and swallowed. The control: a plain asyncio.run with such a handler keeps running."""
    import asyncio
    import os
    import signal

    from infill.errors import Terminated
    from infill.lsp.framing import run_until_terminated

    def raise_terminated(signum: int, frame: object) -> None:
        raise Terminated()

    async def server(ran: list[str]) -> None:
        loop = asyncio.get_running_loop()
        loop.call_soon(os.kill, os.getpid(), signal.SIGTERM)  # delivered while that callback runs
        await asyncio.sleep(0.5)
        ran.append("went on")

    before = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        ran: list[str] = []
        with pytest.raises(Terminated):
            run_until_terminated(server(ran))
        assert ran == []
        control: list[str] = []
        asyncio.run(server(control))  # the handler's Terminated is logged inside the callback, and the loop goes on
        assert control == ["went on"]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_model_in_the_initialization_options_is_loaded_once() -> None:
    """`initialize` applied the settings and loaded their model, and `initialized` loaded it again: a model that
    cannot load was reported twice (and one that can was loaded twice before the first suggestion)."""
    client = LspClient()
    try:
        options = {"model": "/nonexistent/model"}
        client.request("initialize", {"processId": None, "capabilities": {}, "initializationOptions": options})
        client.notify("initialized", {})
        client.wait_for_notification("window/showMessage")
        # every load runs on the worker: once it has done what it was given before this request, a second load
        # has failed (a missing folder) and told the client, before this answer
        assert client.result("test/idle") == "idle"
        client.request("shutdown")
        told = [n for n in client.notifications if "cannot load model" in json.dumps(n)]
        assert len(told) == 1, told
    finally:
        client.close(shutdown=False)


def test_a_request_is_answered_against_the_text_it_was_sent_for(client: LspClient) -> None:
    """A completion request and the change the client sent after it, arriving in one read: the change was
    applied before the request's handler began, so a request that was valid when sent got InvalidParams (its
    line was gone) or a fill of text it never saw. Messages are now taken in order: the change cancels it."""
    uri = "file:///project/order.py"
    text = "import os\n\ndef main():\n    path = os.path.join('a', 'b')\n    print(os.path.exi"
    client.open(uri, text)
    frames = b""
    for message in (
        {"jsonrpc": "2.0", "id": 9001, "method": "textDocument/inlineCompletion", "params": inline_params(uri, 4, 21)},
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {
                "textDocument": {"uri": uri, "version": 2},
                "contentChanges": [{"range": span_range((3, 33), (4, 21)), "text": ""}],
            },
        },
    ):
        body = json.dumps(message).encode()
        frames += b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    client.send_raw_frames(frames)
    answer = client.wait(9001)
    assert "error" not in answer and answer["result"] is None, answer


@pytest.mark.parametrize(
    ("body", "answer_id", "code"),
    [
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "shutdown"}', None, -32600),
        (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "shutdown"}', None, -32600),
        (b'{"jsonrpc": "2.0", "id": true, "method": "shutdown"}', None, -32600),
        (b'{"jsonrpc": "2.0", "id": 71}', 71, -32600),
        (b'{"jsonrpc": "2.0", "id": 72, "method": "textDocument/foo"}', 72, -32601),
    ],
)
def test_every_request_gets_an_answer(client: LspClient, body: bytes, answer_id: Any, code: int) -> None:
    """An id that is not a string, an integer or null, or an id with no method, got no answer at all, and an
    unknown method without params got InvalidParams (about a missing argument) instead of MethodNotFound."""
    client.send_raw(body)
    answer = client.wait(answer_id)
    assert answer["error"]["code"] == code, answer
    assert client.inline(URI, 2, 4)["result"] is not None  # and the server goes on


def test_the_model_flag_is_the_model_until_the_settings_name_another() -> None:
    """`infill lsp --model NAME` (what an editor's command line can say, a GGUF file for instance) fills while the
    client's settings name no model; `model` or `fill.model` replaces it, and null goes back to it."""
    client = LspClient(args=("--model", "scripted-rest"))  # fills "len(values)\n    print(total)"
    try:
        client.initialize({"threshold": 0})
        client.open(URI, "def mean(values):\n    n = \n    return n\n")

        def shown() -> str:
            return str(client.inline(URI, 1, 8)["result"]["items"][0]["insertText"])

        assert shown() == "len(values)"
        client.configure({"model": "scripted-word"})  # fills "al / len(values)"
        assert shown() == "al / len(values)"
        client.configure({"model": None})
        assert shown() == "len(values)"
        client.configure({"fill": {"model": "scripted-word"}})
        assert shown() == "al / len(values)"
    finally:
        assert client.close() == 0, client.stderr()


def test_a_model_flag_that_names_nothing_is_a_usage_error() -> None:
    client = LspClient(args=("--model", ""))
    assert client.close(shutdown=False) == 2
    assert "--model" in client.stderr() and len(client.stderr().strip().splitlines()) == 1, client.stderr()


@pytest.mark.parametrize("fill", [True, False])
def test_an_exit_that_cannot_wait_says_what_it_left(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fill: bool
) -> None:
    """The session ends while the worker is busy: the warning names what it does not wait for, a fill that did not
    stop in time or a model load (it said "a model load" for both)."""
    import threading

    from infill.lsp import server as lsp_server
    from infill.lsp.features import build

    ls = build(1 << 20)
    release_worker = threading.Event()
    busy = ls.submit(release_worker.wait)
    if fill:
        ls.running = lsp_server.Job("file:///a.py", completion=True)
    monkeypatch.setattr(lsp_server, "LEAVE_SECONDS", 0.05)

    def exit_now(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(lsp_server.os, "_exit", exit_now)
    try:
        with caplog.at_level("WARNING", logger="infill.lsp"), pytest.raises(SystemExit):
            ls.leave(0)
    finally:
        release_worker.set()
        busy.result(10)
    what = "a fill that did not stop in time" if fill else "a model load"
    assert f"exiting without waiting for the work in progress ({what}) to end" in caplog.text
