"""The server's work methods: thin adapters onto the same functions the CLI commands run in-process.

Nothing here renders or writes files: a request carries the text, the response carries what
`infill fill --format json` prints. Heavy modules are imported inside the handlers, on the first request.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from infill.models import registry
from infill.server import protocol
from infill.server.dispatch import ServerContext
from infill.server.protocol import ProtocolError

# where the CLI keeps its pure request -> result functions ("module:function"); see fill() below
FILL_FUNCTION = "infill.commands.fill:run_request"
DOCSTRINGS_FUNCTION = "infill.commands.docstrings:run_request"


def _resolve(target: str, method: str) -> Callable[..., dict[str, Any]]:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
        function = getattr(module, attr)
    except (ImportError, AttributeError):
        raise ProtocolError(
            protocol.UNKNOWN_METHOD, f"method {method!r} is not available in this build"
        ) from None
    if not callable(function):
        raise ProtocolError(protocol.UNKNOWN_METHOD, f"method {method!r} is not available in this build")
    return function


def models(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    """The models this server holds in memory, and the names registered in its process."""
    return {"loaded": context.models.loaded(), "registered": registry.registered()}


def fill(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    return _resolve(FILL_FUNCTION, "fill")(params, models=context.models.get)


def docstrings(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    return _resolve(DOCSTRINGS_FUNCTION, "docstrings")(params, models=context.models.get)
