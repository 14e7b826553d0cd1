"""The connection to a model server (infill.models.remote): its address (`URL#MODEL[;fim=FAMILY]`), the API key,
and an HTTP client with timeouts and retries.

Privacy: the text of the file leaves the machine. https is verified (the system's CA store); a plain http:// address
that is not this machine's loopback needs INFILL_ALLOW_HTTP=1 or --allow-http. The API key comes from
$INFILL_API_KEY or the file --api-key-file (or $INFILL_API_KEY_FILE) names, never from the command line, and is
never in an error, a log or an answer (`scrub`).

Faults: connect and read timeouts ($INFILL_REMOTE_TIMEOUT seconds, default 60, for the whole answer), up to
RETRIES retries on 429 and 503 after the server's Retry-After (at most MAX_WAIT seconds), and RemoteError (exit
123, one line) for a server that is down, too slow, or answers something that is not the JSON asked for.

A proxy: the one the environment names as curl and urllib pick it ($HTTPS_PROXY / $HTTP_PROXY and their lowercase
forms, $NO_PROXY bypassing it; `proxy_for`). https goes through an HTTP CONNECT tunnel (TLS verified against the
server's name, the API key inside the tunnel), plain http is sent to the proxy; an address of this machine never
goes through one. The proxy's credentials (in its URL) go only in Proxy-Authorization and are never printed.

Standard library only (http.client).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ipaddress
import json
import os
import re
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from infill.config import ModelSpec
from infill.errors import ContextExceeded, InputError, RemoteError
from infill.models.fim import family_named
from infill.progress import Cancelled

if TYPE_CHECKING:
    pass

KEY_ENV = "INFILL_API_KEY"
KEY_FILE_ENV = "INFILL_API_KEY_FILE"
HTTP_ENV = "INFILL_ALLOW_HTTP"
TIMEOUT_ENV = "INFILL_REMOTE_TIMEOUT"
CONNECT_TIMEOUT = 5.0  # seconds to open a connection
MAX_ANSWER_BYTES = 64 * 2**20  # an answer's body: a fill's JSON is kilobytes; a larger one is refused unread
CHUNK_BYTES = 64 * 1024
READ_TIMEOUT = 60.0  # seconds to wait for an answer (a long fill on a busy server)
RETRIES = 3  # further tries after a 429 or 503
# how servers refuse a request with a field they do not take (a validation error: 400, FastAPI's 422; llama-server
# answers `echo` with a 500)
REFUSED = frozenset({400, 422, 500})
MAX_WAIT = 30.0  # the longest Retry-After honoured
SCHEMES = ("http://", "https://")
# OpenSSL's verify codes for a certificate whose issuer the store does not hold: unable to get the issuer, self-signed
# (leaf or in the chain), unable to get the local issuer
UNKNOWN_ISSUER = frozenset({2, 18, 19, 20})


def is_remote(name: str) -> bool:
    """Whether a --model value names a server (http:// or https://)."""
    return name.lower().startswith(SCHEMES)


@dataclass(frozen=True)
class Target:
    """What `--model URL#MODEL[;fim=FAMILY]` names."""

    base: str  # the API's base URL, up to and with /v1
    model: str | None  # the model's name on the server (None: the only one it serves)
    family: str | None  # the FIM family, when given
    https: bool
    host: str
    port: int
    path: str  # the base URL's path, without a trailing slash (e.g. /v1)

    @property
    def origin(self) -> str:
        """The scheme and netloc of the base URL (what a request through a plain-http proxy names)."""
        return self.base[: len(self.base) - len(self.path)]

    @property
    def root(self) -> str:
        """The server's path without /v1 (where llama.cpp's and vLLM's /tokenize are)."""
        return self.path[: -len("/v1")] if self.path.endswith("/v1") else self.path


def parse(name: str) -> Target:
    """The server, model and family a --model URL names; InputError for one that cannot be used."""
    url, _, fragment = name.partition("#")
    model, _, params = fragment.partition(";")
    family = None
    for part in filter(None, params.split(";")):
        key, _, value = part.partition("=")
        if key != "fim" or family_named(value) is None:
            raise InputError(
                f"--model {url}#{fragment}: after the model's name only ;fim=FAMILY (qwen, starcoder, codellama, "
                "deepseek)"
            )
        family = value
    try:
        split = urlsplit(url)
    except ValueError as exc:  # an unclosed "[" of an IPv6 address
        raise InputError(f"--model {url}: not a valid URL ({exc})") from None
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise InputError(f"--model {url!r}: a URL holds no spaces or control characters")
    if split.username is not None or split.password is not None:
        raise InputError(
            f"--model: no credentials in the URL (it is on the command line): set ${KEY_ENV} or use --api-key-file"
        )
    if split.query:
        raise InputError("--model: the server's URL takes no query; name the model after #")
    if not split.hostname:
        raise InputError(f"--model {url}: no host in the URL")
    https = split.scheme.lower() == "https"
    try:
        port = split.port or (443 if https else 80)
    except ValueError:
        raise InputError(f"--model {url}: not a valid port") from None
    path = split.path.rstrip("/") or "/v1"
    base = f"{split.scheme.lower()}://{split.netloc}{path}"
    return Target(base, model or None, family, https, split.hostname, port, path)


def loopback(host: str) -> bool:
    """Whether `host` is this machine (localhost, 127.0.0.0/8, ::1, and 0.0.0.0 and ::, which a connection reaches as
    this machine: the address llama-server prints when it listens with --host 0.0.0.0), also IPv4-mapped."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy of the environment."""

    host: str
    port: int
    auth: str | None  # the Proxy-Authorization header's value, from the URL's credentials (never printed)

    @property
    def name(self) -> str:
        """The proxy's address for a message: without its credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Proxy-Authorization": self.auth} if self.auth else {}


def proxy_for(target: Target) -> Proxy | None:
    """The proxy the environment names for `target`, as curl and urllib pick it: $https_proxy for an https server,
    $http_proxy for a plain-http one (either case, the lowercase one first), none where $no_proxy names the host,
    a domain above it or `*`; and none for an address of this machine (the text would leave it, and through a
    plain-http one unencrypted). InputError for a proxy URL that cannot be used (the message holds no
    credentials)."""
    import urllib.request  # not at import: a fill without a server does not need it

    if loopback(target.host):
        return None
    scheme = "https" if target.https else "http"
    proxies = urllib.request.getproxies()
    value = proxies.get(scheme)
    if not value or urllib.request.proxy_bypass(target.host) or _bypassed(target.host, proxies.get("no", "")):
        return None
    variable = f"${scheme}_proxy" if f"{scheme}_proxy" in os.environ else f"${scheme.upper()}_PROXY"
    text = value.strip() if "://" in value else f"http://{value.strip()}"  # curl's and urllib's "host:port"
    try:
        split = urlsplit(text)
        port = split.port or 80
    except ValueError:
        raise InputError(f"{variable}: not a valid proxy URL") from None
    if split.scheme.lower() != "http":
        raise InputError(
            f"{variable}: a {split.scheme}:// proxy is not supported; give the proxy as http://HOST:PORT "
            "(https goes through it in a CONNECT tunnel)"
        )
    if not split.hostname:
        raise InputError(f"{variable}: no host in the proxy URL")
    auth = None
    if split.username is not None:
        pair = f"{unquote(split.username)}:{unquote(split.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return Proxy(split.hostname, port, auth)


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether $NO_PROXY names the IP address `host` as curl reads it and urllib does not: an IPv6 address in
    brackets or in another spelling (2001:db8::7, [2001:db8::7], 2001:db8:0:0::7), or a network (10.0.0.0/8,
    2001:db8::/32)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    for entry in no_proxy.split(","):
        try:
            if address in ipaddress.ip_network(entry.strip().strip("[]"), strict=False):
                return True
        except ValueError:
            continue
    return False


class _TunnelledConnection(http.client.HTTPSConnection):
    """An HTTPSConnection through a proxy's CONNECT tunnel that names an IPv6 server in brackets
    (`CONNECT [2001:db8::7]:443`, the authority form): Python before 3.13 writes it bare (2001:db8::7:443), which
    a proxy cannot split into host and port."""

    def _tunnel(self) -> None:
        host: str | None = getattr(self, "_tunnel_host", None)
        if host is None or ":" not in host or host.startswith("[") or hasattr(self, "_wrap_ipv6"):  # 3.13 does it
            super()._tunnel()  # type: ignore[misc]
            return
        self._tunnel_host = f"[{host}]"
        try:
            super()._tunnel()  # type: ignore[misc]
        finally:
            self._tunnel_host = host  # the name TLS is checked against, and the Host header's


@dataclass(frozen=True)
class ApiKey:
    value: str
    source: str  # where it came from, for the line of a server that refuses it (never the key itself)


def api_key(spec: ModelSpec) -> ApiKey | None:
    """The API key: the first line of the file --api-key-file names, else $INFILL_API_KEY, else the first line of
    the file $INFILL_API_KEY_FILE names (a flag given beats the environment, as everywhere); None when there is
    none. InputError (without the key) for a file that cannot be read."""
    if spec.api_key_file:
        return ApiKey(_key_file(spec.api_key_file), f"--api-key-file {spec.api_key_file}")
    if os.environ.get(KEY_ENV, "").strip():
        return ApiKey(os.environ[KEY_ENV].strip(), f"${KEY_ENV}")
    path = os.environ.get(KEY_FILE_ENV)
    return ApiKey(_key_file(path), f"${KEY_FILE_ENV} ({path})") if path else None


def _key_file(path: str) -> str:
    """The first line of the key file `path`; InputError (without the key) for one that cannot be read."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise InputError(f"cannot read the API key file: {reason}", path=path) from None
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise InputError("the API key file is empty", path=path)
    return key


def read_timeout() -> float:
    """Seconds to wait for an answer: $INFILL_REMOTE_TIMEOUT, else READ_TIMEOUT."""
    from infill import environment

    given = environment.read(TIMEOUT_ENV)  # finite, above 0; a junk value is an InputError naming the variable
    return READ_TIMEOUT if given is None else float(given)


class Client:
    """JSON over HTTP to one server: a kept-alive connection per thread, timeouts, the bounded retry, and errors
    that never hold the key. `waited` counts the seconds spent on requests (the server's share of a fill).

    `key` is asked for the API key at each request (`api_key` of the model's spec): a long-lived server (the
    daemon, `infill lsp`) keeps this client, and must send a rotated key file's new key, and for a relative
    --api-key-file the file of the directory the request runs in, as a new process would."""

    def __init__(self, target: Target, key: Callable[[], ApiKey | None], timeout: float) -> None:
        self.target = target
        self._key = key
        self._keys_sent: set[str] = set()
        self.timeout = timeout
        self._local = threading.local()
        self._context = ssl.create_default_context() if target.https else None  # verifies certificate and host
        self.proxy = proxy_for(target)
        self.waited = 0.0
        self.requests = 0
        # a request failed, or a kept connection was found closed, since the model was last checked: the server
        # may have restarted with another model (infill.models.remote.RemoteFim.replaced)
        self.suspect = False
        self._flights: dict[int, http.client.HTTPConnection] = {}  # the request in flight of each thread
        self._cut: set[int] = set()  # threads whose request `interrupt` cut
        self._flight_lock = threading.Lock()
        _CLIENTS.add(self)

    def interrupt(self) -> None:
        """Cut every request of this client in flight, from any thread: each raises Cancelled (its connection is
        closed; the next request opens another)."""
        with self._flight_lock:
            for ident, conn in self._flights.items():
                self._cut.add(ident)
                if conn.sock is not None:  # the plain socket's shutdown: TLS state is left to the reading thread
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(conn.sock, socket.SHUT_RDWR)

    def _was_cut(self) -> bool:
        with self._flight_lock:
            return threading.get_ident() in self._cut

    def scrub(self, text: str) -> str:
        """`text` without the API key in it."""
        for key in sorted(self._keys_sent, key=len, reverse=True):
            text = text.replace(key, "***")
        return text

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            t, proxy = self.target, self.proxy
            host, port = (proxy.host, proxy.port) if proxy is not None else (t.host, t.port)
            if t.https:
                # through a proxy: TLS inside the CONNECT tunnel, verified against the server's own name
                conn = _TunnelledConnection(host, port, timeout=CONNECT_TIMEOUT, context=self._context)
                if proxy is not None:
                    conn.set_tunnel(t.host, t.port, headers=proxy.headers)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT)
            self._local.conn = conn
        return conn

    def _open(self, conn: http.client.HTTPConnection) -> None:
        """Connect `conn`; through a proxy, a proxy that is down or refuses the tunnel is a RemoteError naming it
        (a TLS failure past the tunnel is the server's)."""
        if self.proxy is None:
            conn.connect()
            return
        try:
            conn.connect()
        except ssl.SSLError:
            raise
        except OSError as exc:
            self._drop()
            raise self._proxy_error(str(exc), getattr(exc, "strerror", None) or type(exc).__name__) from None

    def _proxy_error(self, text: str, reason: str) -> RemoteError:
        assert self.proxy is not None
        name, t = self.proxy.name, self.target
        refused = "Tunnel connection failed: "  # http.client's OSError for a CONNECT answered other than 200
        if not text.startswith(refused):
            return RemoteError(f"proxy {name} is not reachable ({self.scrub(reason)}); $NO_PROXY=HOST bypasses it")
        status = " ".join(text[len(refused) :].split())[:100]
        return RemoteError(f"proxy {name} refused the tunnel to {t.host}:{t.port} (HTTP {status}){self._hint(status)}")

    def _hint(self, status: str) -> str:
        """For a proxy's 407: where its credentials go."""
        if not status.startswith("407"):
            return ""
        if self.proxy is not None and self.proxy.auth:
            return ": it refused the credentials of the proxy's URL"
        return ": it wants credentials: http://USER:PASSWORD@HOST:PORT as the proxy's URL"

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def post(
        self, path: str, body: dict[str, Any], *, absent_ok: bool = False, refused_ok: Collection[int] = ()
    ) -> dict[str, Any] | None:
        """The JSON object the server answers to POST `path` (relative to the server's root); None for a 404 or
        405 when `absent_ok` (an endpoint this server does not have), and for a status in `refused_ok` (REFUSED: a
        field it does not take; llama.cpp's llama-server refuses `echo`)."""
        return self._request("POST", path, body, absent_ok, refused_ok)

    def get(self, path: str, *, absent_ok: bool = False) -> dict[str, Any] | None:
        return self._request("GET", path, None, absent_ok)

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None, absent_ok: bool, refused_ok: Collection[int] = ()
    ) -> dict[str, Any] | None:
        try:
            answer = self._answer(method, path, body, absent_ok, refused_ok)
        except RemoteError:
            self.suspect = True
            raise
        if answer is None and refused_ok:
            self.suspect = True
        return answer

    def _answer(
        self, method: str, path: str, body: dict[str, Any] | None, absent_ok: bool, refused_ok: Collection[int]
    ) -> dict[str, Any] | None:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"Accept": "application/json", "User-Agent": "infill"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        key = self._key()
        if key is not None:
            self._keys_sent.add(key.value)
            headers["Authorization"] = f"Bearer {key.value}"
        if self.proxy is not None and not self.target.https:  # sent to the proxy (for https: in the CONNECT)
            headers.update(self.proxy.headers)
        where = self.target.base
        for attempt in range(RETRIES + 1):
            started = time.perf_counter()
            try:
                status, answer, retry_after, location = self._once(method, path, data, headers)
            finally:
                self.waited += time.perf_counter() - started
                self.requests += 1
            if status in (429, 503) and attempt < RETRIES:
                time.sleep(min(retry_after if retry_after is not None else 0.5 * 2**attempt, MAX_WAIT))
                continue
            break
        if status == 407 and self.proxy is not None:  # a plain-http request the proxy refused
            raise RemoteError(f"proxy {self.proxy.name} refused the request to {where} (HTTP 407){self._hint('407')}")
        if status == 400 and "context" in self._reason(answer).lower():
            # a prompt longer than the model's context (llama-server: "exceeds the available context size"), not
            # a field the server refused (refused_ok): the same request in other words would be refused too
            hint = " (--max-context N sends at most N tokens of the file and fill)"
            message = f"model server {where} answered HTTP {status}{self._reason(answer)}{hint}"
            raise ContextExceeded(message, context=_context_of(answer, self._reason(answer)))
        if (status in (404, 405) and absent_ok) or status in refused_ok:
            return None
        if status in (401, 403):
            if key is None:
                raise RemoteError(
                    f"model server {where} refused the request (HTTP {status}): it wants an API key: set ${KEY_ENV} "
                    "or use --api-key-file"
                )
            raise RemoteError(f"model server {where} refused the API key of {key.source} (HTTP {status})")
        if status in (429, 503):
            # llama-server answers 503 "Loading model" while it starts: say so, the user then knows to wait
            raise RemoteError(
                f"model server {where} is busy (HTTP {status}{self._reason(answer)}) after {RETRIES + 1} tries"
            )
        if 300 <= status < 400:  # not followed: the file's text goes only where --model says (https, this host)
            to = f" to {self.scrub(location)[:200]}" if location else ""
            raise RemoteError(
                f"model server {where} answered HTTP {status}, a redirect{to}; give the address it names in --model"
            )
        if status >= 400:
            reason = self._reason(answer)
            hint = ""
            if status == 404 and reason.lower() in ("", ": not found"):  # no such path (vLLM names a wrong model)
                hint = f"; is {where} the API's base URL?"
            raise RemoteError(f"model server {where} answered HTTP {status}{reason}{hint}")
        try:
            decoded = json.loads(answer.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nested too deeply
            raise RemoteError(f"model server {where} answered malformed JSON to {path}") from None
        if not isinstance(decoded, dict):
            raise RemoteError(f"model server {where} answered malformed JSON to {path} (not an object)")
        return decoded

    def _reason(self, answer: bytes) -> str:
        """The server's own error message, short and on one line (without the key), or ''."""
        try:
            decoded = json.loads(answer.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return ""
        message = decoded.get("error", decoded.get("detail")) if isinstance(decoded, dict) else None
        if isinstance(message, dict):
            message = message.get("message")
        if not isinstance(message, str) or not message.strip():
            return ""
        text = " ".join(self.scrub(message).split())
        return f": {text[:200]}"

    def _body(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse, deadline: float) -> bytes:
        """The answer's body, read by the deadline (a server trickling it a byte at a time times out as one that
        never answers) and up to MAX_ANSWER_BYTES (more is refused unread)."""
        parts: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if conn.sock is not None:
                conn.sock.settimeout(left)
            part = response.read1(CHUNK_BYTES)
            if not part:
                if response.length:  # bytes its Content-Length announced never came (read1 does not say)
                    self._drop()
                    raise RemoteError(
                        f"model server {self.target.base} closed the connection in the middle of its answer"
                    )
                response.close()  # as read() does at the end: the kept connection takes the next request
                return b"".join(parts)
            size += len(part)
            if size > MAX_ANSWER_BYTES:
                self._drop()
                raise RemoteError(
                    f"model server {self.target.base} answered more than {MAX_ANSWER_BYTES // 2**20} MiB; refused"
                )
            parts.append(part)

    def _once(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes, float | None, str | None]:
        """(status, body, Retry-After seconds or None, Location or None) of one request; RemoteError when there is
        no answer; Cancelled when `interrupt` cut it."""
        ident = threading.get_ident()
        try:
            return self._exchange(method, path, data, headers)
        except RemoteError:
            if self._was_cut():
                self._drop()
                raise Cancelled("the request to the model server was interrupted") from None
            raise
        finally:
            with self._flight_lock:
                self._flights.pop(ident, None)
                self._cut.discard(ident)

    def _exchange(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes, float | None, str | None]:
        """`_once`'s request. A kept connection the server closed meanwhile is opened again once."""
        where = self.target.base
        full = self.target.root + path
        if self.proxy is not None and not self.target.https:  # a plain-http proxy takes the whole URL
            full = self.target.origin + full
        for fresh in (False, True):
            conn = self._connection()
            with self._flight_lock:
                self._flights[threading.get_ident()] = conn
            try:
                conn.timeout = CONNECT_TIMEOUT
                if conn.sock is None:
                    self._open(conn)
                if self._was_cut():  # cut while it connected
                    raise RemoteError(f"model server {where}: the request was interrupted")
                deadline = time.monotonic() + self.timeout
                conn.sock.settimeout(self.timeout)
                conn.request(method, full, body=data, headers=headers)
                response = conn.getresponse()
                body = self._body(conn, response, deadline)
                retry = _retry_after(response.getheader("Retry-After"))
                if response.getheader("Connection", "").lower() == "close":
                    self._drop()
                return response.status, body, retry, response.getheader("Location")
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._drop()
                self.suspect = True
                if fresh or self._was_cut():
                    raise RemoteError(f"model server {where} closed the connection ({type(exc).__name__})") from None
            except TimeoutError:
                self._drop()
                raise RemoteError(f"model server {where} did not answer within {self.timeout:g} s") from None
            except ssl.SSLCertVerificationError as exc:
                self._drop()
                own = exc.verify_code in UNKNOWN_ISSUER  # a team's own certificate authority, most often
                hint = "; for a certificate authority of your own, set SSL_CERT_FILE to its PEM file" if own else ""
                raise RemoteError(
                    f"model server {where}: its certificate is not trusted ({exc.verify_message}){hint}"
                ) from None
            except ssl.SSLError as exc:
                self._drop()
                raise RemoteError(f"model server {where}: TLS failed ({self.scrub(exc.reason or str(exc))})") from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                reason = getattr(exc, "strerror", None) or type(exc).__name__
                raise RemoteError(f"model server {where} is not reachable ({self.scrub(str(reason))})") from None
        raise AssertionError("unreachable")  # pragma: no cover


_CLIENTS: weakref.WeakSet[Client] = weakref.WeakSet()  # every client of the process (`interrupt_passes`)


def interrupt_passes() -> None:
    """Cut the request every model-server client of the process has in flight, from any thread: it raises
    infill.progress.Cancelled. A server calls this when the fill that runs is no longer wanted, so that a new
    request does not wait for the model server's answer to a superseded one (as infill.models.llamacpp's does for
    a pass)."""
    for client in list(_CLIENTS):
        client.interrupt()


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (its delta-seconds form; a date is not honoured), or None."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


# how servers say their context in the refusal of a longer prompt: llama-cpp-python and vLLM "This model's maximum
# context length is 512 tokens", llama-cpp-python "Requested tokens (600) exceed context window of 512"
_CONTEXT_SAID = re.compile(r"context (?:length|window|size)(?: is| of)? (\d+)", re.IGNORECASE)


def _context_of(answer: bytes, reason: str) -> int | None:
    """The context a server said its model has when it refused a longer prompt: llama-server's error object has
    it as `n_ctx`; the others say it in the message. None where it is not said."""
    try:
        decoded = json.loads(answer.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        decoded = None
    error = decoded.get("error") if isinstance(decoded, dict) else None
    n_ctx = error.get("n_ctx") if isinstance(error, dict) else None
    if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0:
        return n_ctx
    found = _CONTEXT_SAID.search(reason)
    return int(found.group(1)) if found else None
