"""Request line in, response line out: the method table and the model cache shared by every transport.

`Dispatcher.handle_line` never raises, whatever the bytes: a malformed line, an unknown method, a handler that
fails, or a result JSON cannot hold all become an error response, and the next request is served as if
nothing happened. Handlers are plain functions `(params, context) -> result dict`; tests and plugins
register their own.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import infill
from infill.core.cache import ModelCache
from infill.server import lifecycle, protocol
from infill.server.context import Handler, ServerContext
from infill.server.protocol import ProtocolError, Request

# what a transport builds a server from (infill.commands.serve, the daemon, tests)
__all__ = ["Dispatcher", "Handler", "ModelCache", "ServerContext", "identity", "input_bytes", "load_plugins"]


LOCK_FREE_METHODS = frozenset({"ping"})  # read nothing a running request could be changing


class Dispatcher:
    """The method table. Built-ins: ping, shutdown, models; fill and docstrings run what the CLI runs
    (infill.core)."""

    def __init__(
        self,
        methods: Mapping[str, Handler] | None = None,
        *,
        max_request_bytes: int = protocol.DEFAULT_MAX_REQUEST_BYTES,
        max_input_bytes: int = 0,
        context: ServerContext | None = None,
    ) -> None:
        from infill.server import handlers

        self.max_request_bytes = max_request_bytes
        self.max_input_bytes = max_input_bytes  # 0: no limit (see protocol.DEFAULT_MAX_INPUT_BYTES)
        self.context = context if context is not None else ServerContext()
        self.stop_requested = False
        self.identity = identity()  # the environment as the server started; requests may not change it
        self.outside = lifecycle.OutsideModules()  # what it imports from outside the package, as it imported it
        self.methods: dict[str, Handler] = {
            "ping": self._ping,
            "shutdown": self._shutdown,
            **handlers.METHODS,
        }
        if methods is not None:
            self.methods.update(methods)

    def is_lock_free(self, line: bytes) -> bool:
        """Whether a socket server may answer this line without waiting for the request in progress: a ping,
        so that a client can tell a busy daemon from a dead one."""
        if len(line) > 4096:
            return False
        try:
            return protocol.parse_request(line).method in LOCK_FREE_METHODS
        except ProtocolError:
            return False

    def register(self, name: str, handler: Handler) -> None:
        self.methods[name] = handler

    def handle_line(self, line: bytes) -> bytes:
        """One request line -> one response line; an empty line too gets one (invalid_request)."""
        if len(line.rstrip(b"\r\n")) > self.max_request_bytes:
            return self.too_large()
        try:
            request = protocol.parse_request(line)
        except ProtocolError as exc:
            return protocol.encode(protocol.error_response(exc.request_id, protocol.error_from_exception(exc)))
        return self.handle(request)

    def handle(self, request: Request) -> bytes:
        handler = self.methods.get(request.method)
        try:
            if handler is None:
                raise ProtocolError(protocol.UNKNOWN_METHOD, f"unknown method {request.method[:100]!r}")
            if self.max_input_bytes and request.method in SIZED_METHODS:
                size = input_bytes(request.method, request.params, self.max_input_bytes)
                if size > self.max_input_bytes:
                    raise ProtocolError(
                        protocol.TOO_LARGE,
                        f"the input is larger than this server's --max-input-bytes ({self.max_input_bytes:,}); "
                        "`infill fill` and `infill docstrings` do such work in their own process",
                    )
            result = handler(request.params, self.context)
            return protocol.encode(protocol.response(request.id, result))
        except (Exception, SystemExit) as exc:  # every failure becomes an error response; the server goes on
            return protocol.encode(protocol.error_response(request.id, protocol.error_from_exception(exc)))
        finally:
            self.outside.refresh()  # a module the request imported (a model kind), as it was when imported

    def too_large(self) -> bytes:
        message = f"request is longer than --max-request-bytes ({self.max_request_bytes} bytes)"
        return protocol.encode(protocol.error_response(None, protocol.error_object(protocol.TOO_LARGE, message)))

    def _ping(self, params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
        return self.identity | {
            "pong": True,
            "pid": os.getpid(),
            "transport": context.transport,
            "uptime": round(time.time() - context.started, 3),
            "outside": self.outside.refresh(),  # plugins' code, which code_stamp does not cover
            "idle_timeout": context.idle_timeout,
            "models": [{"name": m["name"], "device": m["device"]} for m in context.models.loaded()],
        }

    def _shutdown(self, params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
        self.stop_requested = True
        return {"shutdown": True}


SIZED_METHODS = frozenset({"fill", "fill_command", "docstrings", "docstrings_command"})  # methods that read an input


def input_bytes(method: str, params: Mapping[str, Any], limit: int = 0) -> int:
    """The size of what a request would work on: its text, or the file it names (relative to its "cwd"), or for
    a docstrings run the files under the folders it names. Counting stops once over `limit` (when given), and
    a folder of more than _MAX_FILES files counts as over it. Unreadable paths count 0: the handler reports them.
    """
    cwd = params.get("cwd")
    base = Path(cwd) if isinstance(cwd, str) else Path.cwd()
    total = 0
    for key in ("text", "stdin"):
        value = params.get(key)
        if isinstance(value, str):
            total += len(value.encode("utf-8", "surrogatepass"))
    paths = [params[k] for k in ("path", "file") if isinstance(params.get(k), str) and params[k] != "-"]
    listed = params.get("paths")
    if method == "docstrings_command" and isinstance(listed, list):
        paths += [p for p in listed if isinstance(p, str)]
    folders = method in ("docstrings", "docstrings_command")  # `infill docstrings PATH...` walks folders
    for raw in paths:
        path = Path(raw) if Path(raw).is_absolute() else base / raw
        total += _tree_bytes(path, limit - total if limit else 0, folders)
        if limit and total > limit:
            break
    return total


_MAX_FILES = 10_000  # files under the folders of one docstrings request


def _tree_bytes(path: Path, limit: int, folders: bool) -> int:
    """Bytes of a regular file, or (with `folders`) of the files under a folder, skipping hidden folders as
    `infill docstrings` does; stops past `limit` (when given) and after _MAX_FILES files."""
    try:
        if path.is_file():
            return path.stat().st_size
        if not folders or not path.is_dir():
            return 0
    except OSError:
        return 0
    total = files_seen = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            files_seen += 1
            if files_seen > _MAX_FILES:
                return max(total, limit + 1)
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:
                continue
            if limit and total > limit:
                return total
    return total


# environment variables that can change what a request computes: a daemon started under others is restarted
_ENV_PREFIXES = (
    "INFILL_",
    "HF_",
    "TRANSFORMERS_",
    "TORCH",
    "PYTORCH_",
    "CUDA_",
    "OMP_",
    "MKL_",
    "PYTHONHASHSEED",
)
_ENV_IGNORED_PARTS = ("VERBOSITY", "PROGRESS_BARS", "ADVISORY_WARNINGS", "TOKEN")  # logging noise, secrets
# the proxy a model server is reached through (infill.models.remote_http.proxy_for), in either case
_ENV_PROXY = frozenset({"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"})
# where models and what infill learns of them are found: Ollama's store (infill.models.ollama.store), llama.cpp's
# cache (infill.models.gguf_stores), the HF cache and infill's own folders under the XDG ones (infill.core.catalog,
# infill.environment), ~ behind all of them (LOCALAPPDATA: llama.cpp's cache on Windows)
_ENV_LOCATIONS = frozenset({"OLLAMA_MODELS", "LLAMA_CACHE", "HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "LOCALAPPDATA"})


def _relevant(key: str) -> bool:
    """Whether a daemon started under another value of `key` must restart: infill's own variables say so
    themselves (infill.environment: INFILL_DAEMON_DEBUG, say, is the client's business only)."""
    from infill import environment

    if key.startswith("INFILL_"):
        return environment.restarts_daemon(key)
    if key.upper() in _ENV_PROXY or key in _ENV_LOCATIONS:
        return True
    return key.startswith(_ENV_PREFIXES) and not any(p in key for p in _ENV_IGNORED_PARTS)


def identity(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a client compares before trusting a daemon: protocol, package version, which copy of the code, the
    state of its files (lifecycle.code_stamp: an edited or re-installed copy, replaced packaged models), the
    environment variables that can change a result, and the umask (a new file the daemon writes gets the mode
    the client's umask gives it)."""
    from infill import environment
    from infill.patch import umask

    env = os.environ if env is None else env
    # by meaning, not by text: INFILL_THREADS=1 is what no INFILL_THREADS means, and a daemon started under one
    # serves a client under the other
    meant = {k: environment.normalized(k, v) for k, v in env.items() if _relevant(k)}
    relevant = sorted((k, repr(v)) for k, v in meant.items() if v is not None)
    digest = hashlib.sha256(json.dumps(relevant).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return {
        "protocol": protocol.PROTOCOL_VERSION,
        "version": infill.__version__,
        "package": str(Path(infill.__file__).resolve().parent),
        "code": lifecycle.code_stamp(),
        "env": digest,
        "umask": f"{umask():03o}",
    }


def load_plugins(server: object, spec: str) -> None:
    """Call each "module:function" of a comma-separated list with the server: the Dispatcher of `infill serve`
    (INFILL_SERVER_PLUGINS) or the language server of `infill lsp` (INFILL_LSP_PLUGINS).

    This is how tests and extensions add methods or register models inside a server they do not own."""
    import importlib

    from infill.errors import InputError

    for item in filter(None, (part.strip() for part in spec.split(","))):
        module_name, _, attr = item.partition(":")
        if not attr:
            raise InputError(f"server plugin {item!r} must look like module:function")
        getattr(importlib.import_module(module_name), attr)(server)
