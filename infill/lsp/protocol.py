"""The language server's protocol: pygls's, with infill's document store, cancellation of running fills, the
session's order (initialize first, nothing after shutdown) and an error response for every request it cannot
read. infill.lsp.server is the server behind it (`Session`: what the protocol asks of it).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from lsprotocol import types as lsp
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcServerNotInitialized,
)
from pygls.protocol import LanguageServerProtocol, lsp_method


class Cancellable(Protocol):
    def cancel(self, why: str) -> None: ...


class Session(Protocol):
    """What the protocol asks of the server: the document store, the session's state and the running jobs."""

    initialized: bool
    exit_code: int
    jobs: Mapping[Any, Cancellable]

    def opened(self, params: lsp.DidOpenTextDocumentParams) -> None: ...

    def changed(self, params: lsp.DidChangeTextDocumentParams) -> None: ...

    def closed(self, params: lsp.DidCloseTextDocumentParams) -> None: ...


@dataclass
class Refused:
    """A request whose params do not fit its method's types: answered with this error and its id."""

    id: int | str
    error: lsp.ResponseError
    method: str


class InfillProtocol(LanguageServerProtocol):
    """pygls's protocol with infill's document store, cancellation of running fills, and an error response for
    every request it cannot read."""

    @property
    def session(self) -> Session:
        """The server behind the protocol (infill.lsp.server.InfillServer)."""
        return cast(Session, self._server)

    @lsp_method(lsp.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: lsp.DidOpenTextDocumentParams) -> None:
        self.session.opened(params)

    @lsp_method(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: lsp.DidChangeTextDocumentParams) -> None:
        self.session.changed(params)

    @lsp_method(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: lsp.DidCloseTextDocumentParams) -> None:
        self.session.closed(params)

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams) -> Generator[Any, Any, lsp.InitializeResult]:
        """pygls's initialize, once: a second one is refused (InvalidRequest) instead of resetting the session."""
        if self.session.initialized:
            raise JsonRpcInvalidRequest("the server is already initialized")
        self.session.initialized = True
        result: lsp.InitializeResult = yield from super().lsp_initialize(params)
        return result

    @lsp_method(lsp.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        """pygls's exit, remembering the exit code the specification asks for (0 after shutdown, else 1): its
        SystemExit does not get through pygls's loop."""
        self.session.exit_code = 0 if self._shutdown else 1
        yield from super().lsp_exit(*args)

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        job = self.session.jobs.get(msg_id)
        if job is not None:
            job.cancel("cancelled by the client")
        super()._handle_cancel_notification(msg_id)

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            request_id = data.get("id")
            if "method" not in data or isinstance(request_id, bool) or not isinstance(request_id, int | str):
                raise  # a notification (nobody to answer) or a response
            detail = _validation_detail(exc.__cause__)
            error = JsonRpcInvalidParams(f"invalid params for {data.get('method')}: {detail}")
            return Refused(request_id, error.to_response_error(), str(data.get("method")))

    def handle_message(self, message: Any) -> None:
        if not self._in_session(message):
            return
        if isinstance(message, Refused):
            self._send_response(message.id, error=message.error)
            return
        if not hasattr(message, "jsonrpc"):  # JSON, but not a JSON-RPC 2.0 message
            request_id = message.get("id") if isinstance(message, dict) else None
            if isinstance(request_id, bool) or not isinstance(request_id, int | str):
                request_id = None
            error = JsonRpcInvalidRequest('not a JSON-RPC 2.0 message (needs "jsonrpc": "2.0" and a "method")')
            self.send_error(request_id, error)
            return
        super().handle_message(message)

    def _in_session(self, message: Any) -> bool:
        """Whether a message comes between `initialize` and `shutdown`, as the specification wants: before
        initialize a request is answered ServerNotInitialized, after shutdown InvalidRequest, and a notification
        is dropped (exit excepted). Responses to the server's own requests always get through."""
        method = getattr(message, "method", None)
        if not isinstance(method, str) or method == lsp.EXIT or (method == lsp.INITIALIZE and not self._shutdown):
            return True
        if self.session.initialized and not self._shutdown:
            return True
        if hasattr(message, "id"):  # a request
            if self._shutdown:
                self.send_error(message.id, JsonRpcInvalidRequest(f"{method}: the server is shutting down"))
            else:
                self.send_error(message.id, JsonRpcServerNotInitialized(f"{method}: initialize comes first"))
        return False

    def send_error(self, request_id: int | str | None, error: JsonRpcException) -> None:
        """An error response; id None (null) when the request's id could not be read."""
        self._send_response(cast(Any, request_id), error=error.to_response_error())


def _validation_detail(cause: BaseException | None) -> str:
    """cattrs' validation error as one short line (which field, what was expected)."""
    if cause is None:
        return "they do not match the method's types"
    try:
        import cattrs

        if isinstance(cause, cattrs.BaseValidationError):
            return "; ".join(cattrs.transform_error(cause))[:500]
    except ImportError:  # pragma: no cover - cattrs comes with pygls
        pass
    return str(cause).splitlines()[0][:500]
