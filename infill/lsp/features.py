"""What the language server does for a client (infill.lsp.server holds its state and the protocol): the
lifecycle requests, completions (inline and the menu's), code actions and the two commands they offer, each a
function registered on the server by `build`; `serve` runs it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from infill import environment
from infill.config import ModelSpec
from infill.errors import InfillError
from infill.lsp import fills
from infill.lsp.documents import LINE_BREAK, Document
from infill.lsp.server import ADD_DOCSTRINGS, FILL_SELECTION, Edits, InfillServer, RequestFailed, document_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from infill.docstrings.outcome import FileResult


def build(max_input_bytes: int, model: str | None = None) -> InfillServer:
    """The language server with its features registered; `model`: `infill lsp --model`."""
    server = InfillServer(max_input_bytes, model)
    server.feature(lsp.INITIALIZE)(initialize)
    server.feature(lsp.INITIALIZED)(initialized)
    server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)(did_change_configuration)
    server.feature(lsp.SHUTDOWN)(shutdown)
    server.feature(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, lsp.InlineCompletionOptions())(inline_completion)
    # not an empty object: Vim's ALE takes `"completionProvider": {}` for no completion support
    server.feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(resolve_provider=False))(completion)
    server.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.RefactorRewrite, lsp.CodeActionKind.Source]),
    )(code_action)
    server.command(FILL_SELECTION)(fill_selection)
    server.command(ADD_DOCSTRINGS)(add_docstrings)
    return server


def initialize(ls: InfillServer, params: lsp.InitializeParams) -> None:
    ls.configure(params.initialization_options, load=False)  # `initialized` loads the model, once


def initialized(ls: InfillServer, params: lsp.InitializedParams) -> None:
    ls.load_model()


def did_change_configuration(ls: InfillServer, params: lsp.DidChangeConfigurationParams) -> None:
    if params.settings is not None:
        ls.configure(params.settings)


def shutdown(ls: InfillServer, params: None) -> None:
    for job in ls.jobs.values():
        job.cancel("the server is shutting down")


async def inline_completion(ls: InfillServer, params: lsp.InlineCompletionParams) -> dict[str, Any] | None:
    """An InlineCompletionList of one item: insertText replaces range (the whole line on a blank line, else
    nothing: an insertion at the cursor), and `confidence`, the calibrated probability that it is right
    (null for a model without a calibration), beside the protocol's fields for a client that dims or
    filters (unknown fields are ignored by other clients)."""
    found = await ls.complete(params.text_document.uri, params.position, params.context.selected_completion_info)
    if found is None:
        return None
    document, filled = found
    item = lsp.InlineCompletionItem(filled.text, range=ls.range(document, filled.start, filled.end))
    return {"items": [{**ls.protocol._converter.unstructure(item), "confidence": filled.confidence}]}


async def completion(ls: InfillServer, params: lsp.CompletionParams) -> lsp.CompletionList | None:
    """The fill as one item of one line (a block's first line: Vim's complete() cannot insert a line break, it
    writes a NUL; the rest comes from the typeahead cache when asked on the next line), its edit from the start of
    the word being typed. No filterText: clients then filter by the label, which starts with that word, and
    Neovim's omnifunc before 0.11 takes the edit's start as the word's instead of its own 'iskeyword' one."""
    found = await ls.complete(params.text_document.uri, params.position, None)
    if found is None:
        return lsp.CompletionList(is_incomplete=True, items=[])
    document, filled = found
    start, text = filled.start, _first_line(filled.text)
    word = _keyword_start(document.text, ls.offset(document, params.position), fills.language_of(document))
    if word < start:  # from the start of the word being typed: menus filter and replace from there
        text, start = document.text[word:start] + text, word
    elif start < word and text.startswith(document.text[start:word]):
        text, start = text[word - start :], word
    if not text.strip() or document.text[start : filled.end] == text:  # a line break first, or nothing new
        return lsp.CompletionList(is_incomplete=True, items=[])
    label = text.strip()
    confidence = "" if filled.confidence is None else f" ({filled.confidence:.0%})"
    item = lsp.CompletionItem(
        label=label if len(label) <= 80 else label[:77] + "...",
        kind=lsp.CompletionItemKind.Text,
        detail=f"infill{confidence}",
        data={"confidence": filled.confidence},
        sort_text="0",
        insert_text_format=lsp.InsertTextFormat.PlainText,
        text_edit=lsp.TextEdit(ls.range(document, start, filled.end), text),
    )
    return lsp.CompletionList(is_incomplete=True, items=[item])


def code_action(ls: InfillServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
    document = ls.document(params.text_document.uri)
    start, end = ls.offset(document, params.range.start), ls.offset(document, params.range.end)
    if ls.unusable(document) is not None or end < start:
        return None
    wanted = params.context.only
    actions = []

    def offered(kind: str) -> bool:
        return not wanted or any(kind == w or kind.startswith(f"{w}.") for w in wanted)

    uri, version = document.uri, document.version
    if end > start and offered(lsp.CodeActionKind.RefactorRewrite):
        command = lsp.Command("Fill selection with infill", FILL_SELECTION, arguments=[uri, start, end, version])
        actions.append(lsp.CodeAction(command.title, kind=lsp.CodeActionKind.RefactorRewrite, command=command))
    try:
        here = fills.docstrings(document, document.byte_offset(start), check_only=True)
        whole = fills.docstrings(document, None, check_only=True)
    except InfillError as exc:  # not a language with docstrings, the file does not parse now, or bad settings
        if (exc.path or "").endswith("pyproject.toml"):  # the user's settings: said once, not a silent lack
            ls.tell(f"settings:{exc.path}", f"no docstring actions: {exc}")
        return actions or None
    if here.outcomes and offered(lsp.CodeActionKind.RefactorRewrite):
        title = f"Add docstring to {here.outcomes[0].name} (infill)"
        command = lsp.Command(title, ADD_DOCSTRINGS, arguments=[uri, start, version])
        actions.append(lsp.CodeAction(title, kind=lsp.CodeActionKind.RefactorRewrite, command=command))
    missing = len(whole.outcomes)
    if missing and offered(lsp.CodeActionKind.Source):
        title = f"Add {missing} missing docstring{'s' * (missing != 1)} (infill)"
        command = lsp.Command(title, ADD_DOCSTRINGS, arguments=[uri, None, version])
        actions.append(lsp.CodeAction(title, kind=lsp.CodeActionKind.Source, command=command))
    return actions or None


async def fill_selection(ls: InfillServer, *args: Any) -> None:
    """[uri, start, end, version]: fill the text between two offsets of the document at that version; answered
    once the fill has started (InfillServer.start_command)."""
    if len(args) != 4 or not isinstance(args[0], str) or not _offsets(args[1:3]):
        raise JsonRpcInvalidParams(f"{FILL_SELECTION} takes [uri, start offset, end offset, version]")
    document = ls.versioned(args[0], args[3])
    start, end = args[1], args[2]
    if not start <= end <= len(document.text) or any(_inside_crlf(document.text, at) for at in (start, end)):
        raise JsonRpcInvalidParams(f"{FILL_SELECTION}: {start}..{end} is not a range of {document_name(document)}")
    snapshot = Document(document.uri, document.language_id, document.version, document.text)
    target = fills.selection_target(snapshot, start, end)
    settings = ls.settings

    def edits(filled: fills.Filled | None) -> Edits | str:
        if filled is None:
            return "no valid fill: every candidate breaks the syntax; nothing was changed"
        return [(filled.start, filled.end, filled.text)]

    ls.start_command(snapshot, "fill selection", lambda check: fills.fill(snapshot, target, settings, check), edits)


async def add_docstrings(ls: InfillServer, *args: Any) -> None:
    """[uri, offset or null, version]: the docstring of the function or class around the offset, or every
    missing docstring of the document at that version; answered once the fill has started."""
    if len(args) != 3 or not isinstance(args[0], str) or not (args[1] is None or _offsets(args[1:2])):
        raise JsonRpcInvalidParams(f"{ADD_DOCSTRINGS} takes [uri, offset or null, version]")
    document = ls.versioned(args[0], args[2])
    if args[1] is not None and args[1] > len(document.text):
        raise JsonRpcInvalidParams(f"{ADD_DOCSTRINGS}: offset {args[1]} is past the end of {document_name(document)}")
    snapshot = Document(document.uri, document.language_id, document.version, document.text)
    at = None if args[1] is None else snapshot.byte_offset(args[1])
    name = ls.settings.model.name
    model = None if name == ModelSpec.name else name  # a model the user chose for this server wins
    try:
        missing = fills.docstrings(snapshot, at, check_only=True).outcomes
    except InfillError as exc:  # not a language with docstrings, or the file does not parse
        raise RequestFailed(str(exc)) from None
    if not missing:
        raise RequestFailed("no docstring is missing there")
    data = snapshot.text.encode("utf-8")

    def edits(result: FileResult) -> Edits | str:
        if not result.edits:
            return "no docstring was written: nothing was changed"
        return [(_chars(data, e.start_byte), _chars(data, e.end_byte), e.text) for e in result.edits]

    started = 0

    def describe(event: dict[str, Any]) -> tuple[str, int] | None:
        nonlocal started
        if event.get("event") != "start" or len(missing) < 2:  # one fill of each docstring, each "start" once
            return None
        started = min(started + 1, len(missing))
        return f"docstring {started} of {len(missing)}", 100 * (started - 1) // len(missing)

    def work(check: Callable[[dict[str, Any]], None]) -> FileResult:
        return fills.docstrings(snapshot, at, check, model=model)

    ls.start_command(snapshot, "add docstrings", work, edits, describe)


_DOLLAR_IDENTIFIERS = frozenset({"javascript", "typescript", "tsx"})  # `$` is part of a name there (`$el`)


def _keyword_start(text: str, offset: int, language: str | None = None) -> int:
    """Where the word before `offset` starts (letters, digits, underscore; `$` too in JavaScript and TypeScript,
    as Emacs's modes and the languages count it): completion menus filter and replace from there."""
    extra = "$" if language in _DOLLAR_IDENTIFIERS else ""
    start = offset
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_" or text[start - 1] in extra):
        start -= 1
    return start


def _first_line(text: str) -> str:
    """`text` up to its first line break (LSP's: "\\n", "\\r\\n" or "\\r")."""
    return LINE_BREAK.split(text, maxsplit=1)[0]


def _inside_crlf(text: str, at: int) -> bool:
    """Whether offset `at` falls between the \r and the \n of a line break (no position of the editor's)."""
    return 0 < at < len(text) and text[at - 1] == "\r" and text[at] == "\n"


def _offsets(values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


def _chars(data: bytes, byte_offset: int) -> int:
    """The string offset of a UTF-8 byte offset of `data`."""
    return len(data[:byte_offset].decode("utf-8"))


def serve(max_input_bytes: int, tcp_port: int | None = None, model: str | None = None) -> None:
    """Run the server on stdin/stdout (responses on a private copy of stdout), or on 127.0.0.1:`tcp_port`."""
    import os

    from infill.server.dispatch import load_plugins
    from infill.server.stdio import protocol_stdout

    logging.basicConfig(level=logging.WARNING, format="infill lsp: %(levelname)s: %(message)s")
    logging.getLogger("pygls").setLevel(logging.CRITICAL)  # every error a client sees is in its response
    os.environ["INFILL_NO_DAEMON"] = "1"  # fills run here, never through the per-user daemon
    server = build(max_input_bytes, model)
    plugins = environment.read("INFILL_LSP_PLUGINS")
    if plugins:
        load_plugins(server, plugins)
    import sys

    from infill.errors import ExitCode, Terminated, signal_report
    from infill.lsp import framing

    try:
        if tcp_port is not None:
            framing.serve_tcp(server, "127.0.0.1", tcp_port)
        else:
            with protocol_stdout() as writer:
                framing.serve_stdio(server, sys.stdin.buffer, writer)
    except (KeyboardInterrupt, Terminated) as exc:
        line, code = signal_report(exc)
        server.leave(code, line)
        raise
    except BrokenPipeError:
        server.leave(ExitCode.BROKEN_PIPE)
        raise
    if tcp_port is not None:
        server.leave(0)
        return
    server.leave(server.exit_code)
    sys.exit(server.exit_code)
