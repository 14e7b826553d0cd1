"""`infill lsp`: the language server, on pygls (JSON-RPC, framing, capabilities) with lsprotocol's types.

What runs where: messages are read and answered on pygls's asyncio loop; every fill (and the model load) runs
on one worker thread, one at a time, so the loop keeps reading while a fill runs. A fill checks between forward
passes whether it is still wanted (infill.server.handlers.cancel_check) and stops there when its request was
cancelled ($/cancelRequest), when a newer completion request came in (superseded: answered with no items), or
when its document changed (modified: no items). The model is loaded once, through the process's model cache
(infill.core.cache.SHARED), right after `initialized` and again when the settings name another model.

Documents are kept by infill.lsp.documents (incremental sync, positions in the negotiated encoding) rather than
pygls's workspace. A request the server cannot serve gets an LSP error (InvalidParams for a position past the
end or an unknown document, RequestFailed for a fill that cannot run), never a crash; a message that is not
JSON gets a ParseError response (id null), and one whose params do not fit the method's types an InvalidParams
response with its id. Messages are framed by infill.lsp.framing, which answers a badly framed one (ParseError) and
reads on; a request before `initialize` is answered ServerNotInitialized, one after `shutdown` InvalidRequest.
Documents over the size limit, with a lone UTF-16 surrogate, or out of step get no completions and one
window/showMessage saying why.

Prefetch: a change that looks typed (one edit of at most a line) starts, on the worker, the completion at the
cursor it leaves, as if the client had asked for it (a client that asks only when typing stops, after its own
delay, finds the fill under way, or done: its result waits in the typeahead cache). A request at that text and
cursor waits for it instead of starting another; the next change cancels it as it cancels a request's fill, and
its prompt pass is kept when the next fill's prompt is the same (typing on inside a word).

Commands (the code actions' infill.fillSelection and infill.addDocstrings): what is wrong up front (bad
arguments, a document changed since the action was offered, another command still running on the document) is
the request's error response; otherwise the request is answered (null) as soon as the fill is started, since
clients give up on a request after a while (eglot 10 s, Helix 20 s) and a large model on a CPU takes longer.
The fill runs in the background, shown as server-initiated work-done progress where the client declares
window.workDoneProgress (cancellable: window/workDoneProgress/cancel stops it); its edit is then sent with
workspace/applyEdit, and what went wrong meanwhile (no valid fill, the editor refused the edit, the document
changed, which stops the fill at its next forward pass) is shown with window/showMessage. A document closed,
shutdown or the user's cancel stops it silently.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from lsprotocol import types as lsp
from pygls.exceptions import (
    JsonRpcContentModified,
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcParseError,
    JsonRpcRequestCancelled,
)
from pygls.lsp.server import LanguageServer

import infill
from infill.errors import InfillError
from infill.lsp import fills
from infill.lsp.context import ContextRing
from infill.lsp.documents import ENCODINGS, Document, Encoding, PositionError, lone_surrogate
from infill.lsp.protocol import InfillProtocol
from infill.lsp.typeahead import Typeahead
from infill.progress import interrupt_passes
from infill.server.handlers import RequestCancelled, cancel_check

T = TypeVar("T")
Edits = list[tuple[int, int, str]]  # (start, end, new text): string offsets of a document
REQUEST_FAILED = -32803  # LSP's RequestFailed: the request was valid but could not be served
FILL_SELECTION = "infill.fillSelection"
ADD_DOCSTRINGS = "infill.addDocstrings"
CHANGED = "the document changed"  # why a job stopped when its document changed
logger = logging.getLogger("infill.lsp")


class RequestFailed(JsonRpcException):
    CODE = REQUEST_FAILED
    MESSAGE = "Request Failed"


_RUNNING = threading.Lock()  # guards Job.running: a job is interrupted only while its own pass may be in flight


PREFETCH_MOST = 120  # characters a change may insert and still be typing, not a paste
LEAVE_SECONDS = 1.0  # how long an ending server waits for the worker's cancelled fill to stop


@dataclass
class Prefetched:
    """A completion the server started on its own after a change (module docstring): for this text and cursor,
    with these settings."""

    text: str
    offset: int
    settings: fills.Settings
    task: asyncio.Future[None]


@dataclass
class Job:
    """One piece of work for the worker thread; `why` is set once it is no longer wanted."""

    uri: str
    completion: bool  # a completion (superseded by the next one) or a command (cancelled only by the client)
    why: str | None = None
    prompt: Any = None  # a completion's fills.prompt_key (None: not known)
    running: bool = False  # the worker is running it

    def cancel(self, why: str) -> None:
        """No longer wanted: the fill stops at its next cancel check (between two forward passes)."""
        if self.why is None:
            self.why = why

    def interrupt(self) -> None:
        """Stop the forward pass it is in, if it runs (interrupt_passes), so that the next request does not wait
        for a long pass (a prompt's: hundreds of milliseconds on ONNX Runtime, seconds for a GGUF code model) to
        end."""
        with _RUNNING:
            if self.running:
                interrupt_passes()

    def start(self) -> None:
        with _RUNNING:
            self.running = True

    def stop(self) -> None:
        with _RUNNING:
            self.running = False


class InfillServer(LanguageServer):
    """The language server: open documents, settings, and the worker thread that fills."""

    protocol: InfillProtocol

    def __init__(self, max_input_bytes: int, model: str | None = None) -> None:
        super().__init__(
            "infill",
            infill.__version__,
            protocol_cls=InfillProtocol,
            text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
        )
        self.max_input_bytes = max_input_bytes  # documents above this size get no fills (0: no limit)
        self.documents: dict[str, Document] = {}
        self.default_model = model  # `infill lsp --model`: the model while the client's settings name none
        self.settings = fills.Settings.parse(self.with_default({}))
        self.sent_settings: dict[str, Any] = {}  # what the client's settings say, merged key by key
        self.typeahead: dict[str, Typeahead] = {}  # by document
        self.ring = ContextRing()  # chunks of the open and recently changed documents
        self.jobs: dict[Any, Job] = {}  # by request id (a prefetch's: ("prefetch", uri))
        self.prefetched: dict[str, Prefetched] = {}  # by document: the last completion started on a change
        self.running: Job | None = None  # the job on the worker thread
        self.commands: dict[str, Command] = {}  # by document: the command running in the background
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="infill-fill")
        self.submitted: set[Future[Any]] = set()  # the worker's work not yet done (running or queued)
        self.told: set[str] = set()  # the documents (and languages) whose problem was told
        self.exit_code = 1  # until a shutdown request and the exit notification
        self.initialized = False

    def report_server_error(self, error: Exception, source: Any) -> None:
        """A message pygls could not read: a body that is not JSON (or not UTF-8) is answered with ParseError
        (id null, as JSON-RPC says); anything else is logged on stderr, never shown as a popup."""
        if isinstance(error, ValueError) and not isinstance(error, JsonRpcException):  # JSONDecodeError, Unicode
            detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
            self.protocol.send_error(None, JsonRpcParseError(f"not JSON: {detail}"))
            return
        logger.warning("%s", error)

    # --- messages to the user -------------------------------------------------------------------------------

    def tell(self, key: str | None, message: str, kind: lsp.MessageType = lsp.MessageType.Warning) -> None:
        """Show `message`, once per `key` (a document, until it is usable again; a language) when one is given,
        so typing does not repeat it; without a key (the answer to the user's new settings) every time."""
        if key is not None:
            if key in self.told:
                return
            self.told.add(key)
        self.window_show_message(lsp.ShowMessageParams(kind, f"infill: {message}"))

    # --- documents ------------------------------------------------------------------------------------------

    @property
    def encoding(self) -> Encoding:
        chosen = str(getattr(self.server_capabilities, "position_encoding", None) or "utf-16")
        return chosen if chosen in ENCODINGS else "utf-16"

    def opened(self, params: lsp.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        document = Document(item.uri, item.language_id, item.version, item.text)
        self.documents[item.uri] = document
        self.typeahead[item.uri] = Typeahead()
        self.told.discard(item.uri)  # a document opened anew: a problem it has is told anew
        self.remember_context(document, 0)
        if fills.language_of(document) is None and item.language_id not in ("plaintext", "text", ""):
            self.tell(
                f"language:{item.language_id}",
                f"{item.language_id!r} is not a language infill parses; it is filled as plain text, without a "
                "syntax check",
                lsp.MessageType.Info,
            )

    def changed(self, params: lsp.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        document = self.documents.get(uri)
        if document is None:
            logger.warning("didChange for %s, which is not open", uri)
            return
        for job in self.jobs.values():
            if job.uri == uri:  # a completion, or a command's fill: its edit would be for an older text
                job.cancel(CHANGED)
                if not job.completion:
                    job.interrupt()
        was_broken = document.broken is not None
        for change in params.content_changes:
            span = change.range if isinstance(change, lsp.TextDocumentContentChangePartial) else None
            start = None if span is None else (span.start.line, span.start.character)
            end = None if span is None else (span.end.line, span.end.character)
            try:
                document.change(params.text_document.version, change.text, start, end, self.encoding)
            except PositionError:
                continue  # the document is marked broken (its next request says so) until a full text comes
        if was_broken and document.broken is None:
            self.told.discard(uri)  # in step again (a full text came): falling out of step again is told again
        last = params.content_changes[-1] if params.content_changes else None
        if isinstance(last, lsp.TextDocumentContentChangePartial) and document.broken is None:
            usable = self.remember_context(document, last.range.start.line)
            if usable and len(params.content_changes) == 1:
                self.prefetch(document, last)

    def prefetch(self, document: Document, change: lsp.TextDocumentContentChangePartial) -> None:
        """Start the completion at the cursor a typed change leaves (module docstring), when the settings ask for
        it and the model is loaded (the caller knows the document can be filled)."""
        from infill.core import cache

        if not self.settings.prefetch or len(change.text) > PREFETCH_MOST or change.text.count("\n") > 1:
            return
        if cache.SHARED.held(self.settings.model) is None:
            return
        start = change.range.start  # where the edit began: the same line and character after it
        try:
            offset = document.offset(start.line, start.character, self.encoding) + len(change.text)
        except PositionError:
            return
        version, uri = document.version, document.uri

        async def warm() -> None:
            if self.documents.get(uri) is not document or document.version != version:
                return  # changed again before it started: that change started its own
            try:
                await self.complete(uri, self.position(document, offset), None, key=("prefetch", uri))
            except (JsonRpcException, RequestCancelled):
                pass  # the client's own request fills again and reports any problem
            except Exception:  # noqa: BLE001 - a fault of the server's own: logged, never a reply to anyone
                logger.exception("prefetch for %s failed", document_name(document))

        task = asyncio.ensure_future(warm())
        self.prefetched[uri] = Prefetched(document.text, offset, self.settings, task)

    def remember_context(self, document: Document, line: int) -> bool:
        """Keep the chunk of `document` around `line` for the completions of other documents (not of a document
        no fill would read); whether it was kept (the document can be filled)."""
        if self.unusable(document) is not None:
            return False
        self.ring.take(document.uri, document.text, document.lines.starts, line)
        return True

    def closed(self, params: lsp.DidCloseTextDocumentParams) -> None:
        for job in self.jobs.values():
            if job.uri == params.text_document.uri:
                job.cancel("the document was closed")
        self.documents.pop(params.text_document.uri, None)
        self.prefetched.pop(params.text_document.uri, None)
        self.typeahead.pop(params.text_document.uri, None)
        self.told.discard(params.text_document.uri)

    def document(self, uri: str) -> Document:
        document = self.documents.get(uri)
        if document is None:
            raise JsonRpcInvalidParams(f"unknown document {uri}: it was not opened (textDocument/didOpen)")
        return document

    def unusable(self, document: Document) -> str | None:
        """Why no fill can run on this document now, or None."""
        if document.broken is not None:
            return f"{document_name(document)} is out of step with the editor ({document.broken}); reopen it"
        at = lone_surrogate(document.text)
        if at is not None:
            line, _ = document.position(at, "utf-32")
            return f"{document_name(document)} holds an invalid UTF-16 character (a lone surrogate) on line {line + 1}"
        size = len(document.text.encode("utf-8"))
        if self.max_input_bytes and size > self.max_input_bytes:
            return (
                f"{document_name(document)} is {size:,} bytes, over the server's limit of {self.max_input_bytes:,} "
                "(--max-input-bytes); it gets no fills"
            )
        return None

    def offset(self, document: Document, position: lsp.Position) -> int:
        try:
            return document.offset(position.line, position.character, self.encoding)
        except PositionError as exc:
            raise JsonRpcInvalidParams(f"{document_name(document)}: {exc}") from None

    def position(self, document: Document, offset: int) -> lsp.Position:
        line, character = document.position(offset, self.encoding)
        return lsp.Position(line, character)

    def range(self, document: Document, start: int, end: int) -> lsp.Range:
        return lsp.Range(self.position(document, start), self.position(document, end))

    # --- the worker -----------------------------------------------------------------------------------------

    async def run(self, job: Job, work: Callable[[Callable[[dict[str, Any]], None]], T], key: Any = None) -> T:
        """Run `work(on_progress)` on the worker thread, as the job of `key` (the request's id by default);
        RequestCancelled when the job was cancelled (before it started or between two forward passes)."""
        key = self.protocol.msg_id if key is None else key
        if job.completion:
            for other in self.jobs.values():
                if other.completion:
                    other.cancel("superseded by a newer request")
            # the fill on the worker, if no longer wanted (superseded, cancelled by the client, its document
            # changed): its pass is cut short, unless it computes this request's own prompt (typing on inside a
            # word), which the new fill then starts from (the model's cache of it)
            running = self.running
            if running is not None and running.why is not None and (job.prompt is None or running.prompt != job.prompt):
                running.interrupt()
        if key is not None:
            self.jobs[key] = job
        check = cancel_check(lambda: job.why is not None, "cancelled")

        def task() -> T:
            job.start()
            self.running = job
            try:
                check({"event": "queued"})
                return work(check)
            finally:
                self.running = None
                job.stop()

        try:
            return await asyncio.wrap_future(self.submit(task))
        except asyncio.CancelledError:
            job.cancel("cancelled by the client")
            raise
        finally:
            if key is not None and self.jobs.get(key) is job:
                del self.jobs[key]

    def load_model(self) -> None:
        """Load the settings' model on the worker (the first completion then finds it warm); a failure is shown
        (by the message loop's thread: only it writes to the client)."""
        spec = self.settings.model
        loop = asyncio.get_running_loop()

        def load() -> None:
            from infill.api import load_model

            try:
                load_model(spec)
            except Exception as exc:  # noqa: BLE001 - an InfillError or not: shown to the user; the server goes on
                message = f"cannot load model {spec.name!r}: {exc}"
                loop.call_soon_threadsafe(self.tell, None, message, lsp.MessageType.Error)

        self.submit(load)

    def submit(self, work: Callable[[], T]) -> Future[T]:
        """Give `work` to the worker thread, counted in `submitted` until it is done."""
        future = self.worker.submit(work)
        self.submitted.add(future)
        future.add_done_callback(self.submitted.discard)
        return future

    def leave(self, code: int, line: str | None = None) -> None:
        """The session is over (exit, the end of the input, a signal): every fill is cancelled and the work
        queued for the worker dropped. Work that cannot be cut short, a model load above all, does not hold
        the process, as the interpreter's exit would (it joins the worker thread): after LEAVE_SECONDS the
        process ends at once with `code` (and `line` on stderr), as an editor that closes expects of its
        language servers (a fill that stops at its next forward pass is waited for)."""
        for job in list(self.jobs.values()):
            job.cancel("the server is exiting")
        running = self.running  # a fill (a load is no job: nothing stops it, so nothing waits for it)
        if running is not None:
            running.cancel("the server is exiting")
            running.interrupt()
        self.worker.shutdown(wait=False, cancel_futures=True)
        _, busy = concurrent.futures.wait(list(self.submitted), LEAVE_SECONDS if running is not None else 0)
        if not busy:
            return
        what = "a fill that did not stop in time" if running is not None else "a model load"
        logger.warning("exiting without waiting for the work in progress (%s) to end", what)
        if line is not None:
            print(line, file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)

    def with_default(self, sent: dict[str, Any]) -> dict[str, Any]:
        """The client's settings with `--model` as the model where they name none (neither `model` nor
        `fill.model`; null sets the model back to it)."""
        fill = sent.get("fill")
        if self.default_model is None or "model" in sent or (isinstance(fill, dict) and "model" in fill):
            return sent
        return {**sent, "model": self.default_model}

    def configure(self, given: object, load: bool = True) -> None:
        """Settings from the client, merged into those in force key by key (fills.merge): a key it does not send
        keeps its value; a key or value that is refused keeps the old one, and the user is told which and why
        (logged on stderr too). A new model is loaded unless `load` is False (`initialize`: `initialized` loads
        it, once)."""
        sent, problems = fills.merge(self.sent_settings, given)
        for problem in problems:
            logger.warning("settings: %s", problem)
        if problems:
            self.tell(None, f"settings not applied: {'; '.join(problems)}", lsp.MessageType.Error)
        settings = fills.Settings.parse(self.with_default(sent))  # merge kept only what parses
        self.sent_settings = sent
        reload = settings.model != self.settings.model
        if settings != self.settings:  # suggestions of other settings are not these settings' answers
            self.typeahead = {uri: Typeahead() for uri in self.typeahead}
        self.settings = settings
        if reload and load:
            self.load_model()

    # --- completions ----------------------------------------------------------------------------------------

    async def complete(
        self, uri: str, position: lsp.Position, selected: lsp.SelectedCompletionInfo | None, key: Any = None
    ) -> Any:
        """(snapshot, filled) for a completion at `position`, or None: nothing to show; `key` names a job that
        is not the request's (a prefetch)."""
        document = self.document(uri)
        offset = self.offset(document, position)
        why = self.unusable(document)
        if why is not None:
            self.tell(uri, why)
            return None
        self.told.discard(uri)  # usable again: a later problem is told again
        typeahead = self.typeahead.setdefault(uri, Typeahead())
        if selected is None:  # the rest of a suggestion shown before, when what was typed since begins it
            known = typeahead.answer(document.text, offset)
            version = document.version
            if known is None and key is None and await self.prefetch_done(document, offset):
                known = typeahead.answer(document.text, offset)  # the prefetch's answer
            if self.documents.get(uri) is not document or document.version != version:
                return None  # changed while it waited: `position` (so `offset`) is a place of the older text
            if known is not None:
                return (document, known) if known else None
        snapshot = Document(document.uri, document.language_id, document.version, document.text)
        prefix = ""
        if selected is not None:  # the completion menu's selected item is part of what the fill continues
            start, end = self.offset(document, selected.range.start), self.offset(document, selected.range.end)
            if not start <= offset <= end or end < start:
                return None
            prefix = selected.text
            snapshot.text = document.text[:start] + prefix + document.text[end:]
            offset = start + len(prefix)
        settings = self.settings
        target = fills.cursor_target(snapshot, offset, settings.lines)
        if target is None:
            return None
        context = self.ring.texts(uri) if settings.context else ()
        job = Job(uri, completion=True, prompt=fills.prompt_key(snapshot, target, settings))
        try:
            filled = await self.run(job, lambda check: fills.fill(snapshot, target, settings, check, context), key)
        except RequestCancelled:
            if job.why == "cancelled by the client":
                raise JsonRpcRequestCancelled() from None
            return None  # superseded, or the document changed: the client asks again
        except InfillError as exc:
            raise RequestFailed(str(exc)) from None
        if filled is not None and filled.stats.get("scored") is False:  # shown as without a calibration, said once
            from infill.core.ranking import UNSCORED

            why = f"{UNSCORED}; completions are shown whatever the threshold"
            self.tell(f"unscored:{settings.model.name}", why)
        filled = fills.shown(filled, snapshot, settings)
        if self.documents.get(uri) is not document or document.version != snapshot.version:
            return None  # never a suggestion for an older version of the document
        if selected is None and settings is self.settings:
            if filled is None:
                typeahead.nothing(document.text, offset)
            else:
                typeahead.remember(document.text, filled)
        if filled is None:
            return None
        if selected is not None:  # one item from the selected item's start: its text and the fill after it
            start = self.offset(document, selected.range.start)
            end = self.offset(document, selected.range.end)
            return document, fills.Filled(start, end, prefix + filled.text, filled.confidence)
        return document, filled

    async def prefetch_done(self, document: Document, offset: int) -> bool:
        """Wait for the prefetch under way at exactly this text and cursor (with the settings in force), if there
        is one; whether the document is still that text (its answer, if it had one, is then in the typeahead
        cache)."""
        started = self.prefetched.get(document.uri)
        if started is None or started.task.done() or started.offset != offset or started.settings is not self.settings:
            return False
        if started.text != document.text:
            return False
        version = document.version
        await asyncio.shield(started.task)  # a cancelled request leaves it running: its answer stays useful
        return self.documents.get(document.uri) is document and document.version == version

    # --- commands -------------------------------------------------------------------------------------------

    def versioned(self, uri: str, version: object) -> Document:
        """The document a command names, as it was when the command was offered (ContentModified otherwise)."""
        document = self.document(uri)
        if isinstance(version, int) and version != document.version:
            raise JsonRpcContentModified(f"{document_name(document)} changed since the action was offered; try again")
        why = self.unusable(document)
        if why is not None:
            raise RequestFailed(why)
        return document

    def start_command(
        self,
        snapshot: Document,
        what: str,
        work: Callable[[Callable[[dict[str, Any]], None]], T],
        edits_of: Callable[[T], Edits | str],
        describe: Callable[[dict[str, Any]], tuple[str, int] | None] | None = None,
    ) -> None:
        """Start a command's work (module docstring, "Commands") in the background and return: the request is
        answered at once. `what` names it to the user ("fill selection"); `edits_of` turns the work's result into
        edits (string offsets of `snapshot`) or says why there are none; `describe` turns the work's progress
        events (infill.progress) into the progress's reports (a message and a percentage), None for an event
        that changes nothing shown. RequestFailed, before anything starts, while another command runs on the
        same document."""
        uri = snapshot.uri
        running = self.commands.get(uri)
        if running is not None:
            raise RequestFailed(
                f"{document_name(snapshot)}: infill's {running.what} is still running there; try again once it is done"
            )
        job = Job(uri, completion=False)
        self.jobs[("command", uri)] = job  # a change, a close or shutdown from now on cancels it
        progress = Progress(self, f"infill: {what}", job)
        self.commands[uri] = Command(what, job, progress)

        def run(check: Callable[[dict[str, Any]], None]) -> Edits | str:
            def on_progress(event: dict[str, Any]) -> None:
                check(event)  # first: a cancelled command raises here, and reports nothing more
                shown = describe(event) if describe is not None else None
                if shown is not None:
                    progress.report(*shown)

            return edits_of(work(on_progress))

        asyncio.ensure_future(self.finish_command(snapshot, self.commands[uri], run))

    async def finish_command(
        self, snapshot: Document, command: Command, work: Callable[[Callable[[dict[str, Any]], None]], Edits | str]
    ) -> None:
        """Run a started command to its end: `work` on the worker (its edits, or why there are none), then its
        edit (workspace/applyEdit); what went wrong is shown (window/showMessage), except a stop the user asked for
        (the progress's cancel, the document closed, shutdown). The document is free for another command, and the
        progress ends, once the edit is sent: a client may never answer workspace/applyEdit (Vim's ALE does not)."""
        job, name = command.job, document_name(snapshot)
        problem: tuple[str, lsp.MessageType] | None = None
        edits: Edits | None = None
        try:
            found = await self.run(job, work, key=("command", snapshot.uri))
            if isinstance(found, str):
                problem = (found, lsp.MessageType.Warning)
            elif self.documents.get(snapshot.uri) is None:
                job.cancel("the document was closed")
            elif self.documents[snapshot.uri].version != snapshot.version:
                job.cancel(CHANGED)
            else:
                edits = found
        except RequestCancelled:
            pass  # job.why says why, below
        except InfillError as exc:
            problem = (str(exc), lsp.MessageType.Error)
        except Exception as exc:  # noqa: BLE001 - a fault of the server's own: shown, never lost in the background
            logger.exception("%s of %s failed", command.what, name)
            problem = (f"failed: {type(exc).__name__}: {exc}", lsp.MessageType.Error)
        finally:
            if self.commands.get(snapshot.uri) is command:
                del self.commands[snapshot.uri]
        if problem is None and edits is None and job.why == CHANGED:
            problem = (
                f"{name} changed while it ran; nothing was changed: run the action again",
                lsp.MessageType.Warning,
            )
        command.progress.end(problem[0] if problem else ("done" if edits is not None else "cancelled"))
        if edits is not None:
            try:
                await self.apply(snapshot, edits, command.progress.title)
            except RequestFailed as exc:
                problem = (str(exc), lsp.MessageType.Error)
            except JsonRpcException as exc:  # the client answered workspace/applyEdit with an error
                problem = (f"the editor did not apply the edit: {exc.message}", lsp.MessageType.Error)
        if problem is not None:
            self.tell(None, f"{command.what}: {problem[0]}", problem[1])

    async def apply(self, document: Document, edits: Edits, label: str) -> None:
        """Send `edits` (string offsets of the document as it is now) with workspace/applyEdit; RequestFailed when
        the editor did not apply them."""
        text_edits = [lsp.TextEdit(self.range(document, a, b), text) for a, b, text in edits]
        capabilities = self.client_capabilities.workspace
        versioned = bool(capabilities and capabilities.workspace_edit and capabilities.workspace_edit.document_changes)
        if versioned:
            identifier = lsp.OptionalVersionedTextDocumentIdentifier(uri=document.uri, version=document.version)
            edit = lsp.WorkspaceEdit(document_changes=[lsp.TextDocumentEdit(identifier, list(text_edits))])
        else:
            edit = lsp.WorkspaceEdit(changes={document.uri: text_edits})
        result = await self.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(edit, label=label))
        if not result.applied:
            raise RequestFailed(f"the editor did not apply the edit: {result.failure_reason or 'no reason given'}")


@dataclass
class Command:
    """A command under way in the background (InfillServer.start_command): what it is, its job, its progress."""

    what: str
    job: Job
    progress: Progress


class Progress:
    """Server-initiated work-done progress for one command: window/workDoneProgress/create, then one begin
    (cancellable: the client's window/workDoneProgress/cancel cancels the job) and one end; nothing where the
    client does not declare window.workDoneProgress or refuses the token."""

    count = 0

    def __init__(self, server: InfillServer, title: str, job: Job) -> None:
        self.server, self.title, self.job = server, title, job
        self.loop = asyncio.get_running_loop()
        self.last: tuple[str, int] | None = None  # the last report
        self.token: str | None = None  # once the client created it and it began
        self.over = False
        window = server.client_capabilities.window
        if window is not None and window.work_done_progress:
            Progress.count += 1
            asyncio.ensure_future(self.begin(f"infill-{os.getpid()}-{Progress.count}"))

    async def begin(self, token: str) -> None:
        progress = self.server.work_done_progress
        try:
            await progress.create_async(token)
        except JsonRpcException as exc:  # the client refused it: the command runs without progress
            logger.info("no progress for %s: %s", self.title, exc.message)
            return
        if self.over:  # done before the client answered: neither begin nor end (the spec allows an unused token)
            progress.tokens.pop(token, None)
            return
        self.token = token
        progress.tokens[token].add_done_callback(self.cancelled)
        progress.begin(token, lsp.WorkDoneProgressBegin(self.title, cancellable=True))
        if self.last is not None:
            self._report(*self.last)

    def cancelled(self, future: Future[Any]) -> None:
        """window/workDoneProgress/cancel for this token (pygls cancels the token's future)."""
        if future.cancelled() and not self.over:
            self.job.cancel("cancelled by the user")
            self.job.interrupt()

    def report(self, message: str, percentage: int) -> None:
        """A report of the progress made (from the worker thread: sent by the message loop's thread, which alone
        writes to the client); nothing before the client created the token or after the end."""
        self.loop.call_soon_threadsafe(self._report, message, percentage)

    def _report(self, message: str, percentage: int) -> None:
        self.last = (message, percentage)  # sent once it has begun, if the work reported before that
        if self.token is not None and not self.over:
            report = lsp.WorkDoneProgressReport(message=message, percentage=percentage)
            self.server.work_done_progress.report(self.token, report)

    def end(self, message: str) -> None:
        self.over = True
        if self.token is not None:
            progress = self.server.work_done_progress
            progress.end(self.token, lsp.WorkDoneProgressEnd(message=message))
            progress.tokens.pop(self.token, None)
            self.token = None


def document_name(document: Document) -> str:
    return document.uri.rsplit("/", 1)[-1] or document.uri
