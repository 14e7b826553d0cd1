"""Left-to-right code models on a team's inference server: `--model URL#MODEL` names an OpenAI-compatible server
(vLLM, llama.cpp's server, llama-cpp-python's, Ollama) and a model on it (docs/server.md, "A server for a team").

The tool does its own side as it does for a model it runs: it plans the fill (the budget, the context cut to the
model's window), builds the family's FIM prompt (infill.models.fim: one layout for ids and for text), and the
syntax checks, retrieval, ranking, confidence and every output form stay infill.core's. The server samples: one
`/v1/completions` request per candidate (temperature 0 = greedy), with the token log-probabilities that score it,
stopping at the family's end tokens (the server's own end-of-generation tokens) and, for a one-line span, at the
line break. Retrieved lines are scored by the server with `echo` and `logprobs` where it returns the prompt's
log-probabilities (llama.cpp, vLLM), else not ranked.

The server's tokenizer plans the fill where it has an endpoint for it (llama.cpp's and vLLM's /tokenize,
llama-cpp-python's /extras/tokenize): the budget and the window are counted in the model's own tokens, and the
family is the one whose three FIM tokens the server knows as single tokens. A server without one (Ollama) gets
`TextPieces`, a local split into words, spaces and signs (about a token each), and the family from the model's
name or `;fim=FAMILY` after it.

Privacy: the text of the file leaves the machine. https is verified (the system's CA store); a plain http:// address
that is not this machine's loopback needs INFILL_ALLOW_HTTP=1 or --allow-http. The API key comes from
$INFILL_API_KEY or the file --api-key-file (or $INFILL_API_KEY_FILE) names, never from the command line, and is
never in an error, a log or an answer (`scrub`).

Faults: connect and read timeouts ($INFILL_REMOTE_TIMEOUT seconds, default 60, for the read), up to RETRIES retries
on 429 and 503 after the server's Retry-After (at most MAX_WAIT seconds), and RemoteError (exit 123, one line)
for a server that is down, too slow, or answers something that is not the JSON asked for.

Standard library only (http.client); importing this module imports neither torch nor anything heavy.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import re
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from infill.config import ModelSpec
from infill.errors import InputError, RemoteError
from infill.models.fim import FimFamily, family_named, family_of_model_name, fim_text, find_fim

if TYPE_CHECKING:
    from infill.models.registry import LoadedModel

KEY_ENV = "INFILL_API_KEY"
KEY_FILE_ENV = "INFILL_API_KEY_FILE"
HTTP_ENV = "INFILL_ALLOW_HTTP"
TIMEOUT_ENV = "INFILL_REMOTE_TIMEOUT"
CONNECT_TIMEOUT = 5.0  # seconds to open a connection
READ_TIMEOUT = 60.0  # seconds to wait for an answer (a long fill on a busy server)
RETRIES = 3  # further tries after a 429 or 503
MAX_WAIT = 30.0  # the longest Retry-After honoured
WINDOW = 4096  # tokens of prompt and fill, where the server does not say its model's context
CACHE = 512  # texts whose tokens the tokenizer keeps
SCHEMES = ("http://", "https://")


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
    split = urlsplit(url)
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
    """Whether `host` is this machine (localhost, 127.0.0.0/8, ::1)."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key(spec: ModelSpec) -> str | None:
    """The API key: $INFILL_API_KEY, else the first line of the file --api-key-file or $INFILL_API_KEY_FILE names;
    None when there is none. InputError (without the key) for a file that cannot be read."""
    if os.environ.get(KEY_ENV):
        return os.environ[KEY_ENV].strip()
    path = spec.api_key_file or os.environ.get(KEY_FILE_ENV)
    if not path:
        return None
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
    given = os.environ.get(TIMEOUT_ENV)
    if not given:
        return READ_TIMEOUT
    try:
        value = float(given)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InputError(f"${TIMEOUT_ENV} must be a number of seconds above 0, got {given!r}")
    return value


class Client:
    """JSON over HTTP to one server: a kept-alive connection per thread, timeouts, the bounded retry, and errors
    that never hold the key. `waited` counts the seconds spent on requests (the server's share of a fill)."""

    def __init__(self, target: Target, key: str | None, timeout: float) -> None:
        self.target = target
        self._key = key
        self.timeout = timeout
        self._local = threading.local()
        self._context = ssl.create_default_context() if target.https else None  # verifies certificate and host
        self.waited = 0.0
        self.requests = 0

    def scrub(self, text: str) -> str:
        """`text` without the API key in it."""
        return text.replace(self._key, "***") if self._key else text

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            t = self.target
            if t.https:
                conn = http.client.HTTPSConnection(t.host, t.port, timeout=CONNECT_TIMEOUT, context=self._context)
            else:
                conn = http.client.HTTPConnection(t.host, t.port, timeout=CONNECT_TIMEOUT)
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def post(
        self, path: str, body: dict[str, Any], *, absent_ok: bool = False, refused_ok: bool = False
    ) -> dict[str, Any] | None:
        """The JSON object the server answers to POST `path` (relative to the server's root); None for a 404 or
        405 when `absent_ok` (an endpoint this server does not have), and for a 400, 422 or 500 when `refused_ok`
        (a field it does not take: llama.cpp's llama-server refuses `echo`)."""
        return self._request("POST", path, body, absent_ok, refused_ok)

    def get(self, path: str, *, absent_ok: bool = False) -> dict[str, Any] | None:
        return self._request("GET", path, None, absent_ok)

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None, absent_ok: bool, refused_ok: bool = False
    ) -> dict[str, Any] | None:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"Accept": "application/json", "User-Agent": "infill"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        where = self.target.base
        for attempt in range(RETRIES + 1):
            started = time.perf_counter()
            try:
                status, answer, retry_after = self._once(method, path, data, headers)
            finally:
                self.waited += time.perf_counter() - started
                self.requests += 1
            if status in (429, 503) and attempt < RETRIES:
                time.sleep(min(retry_after if retry_after is not None else 0.5 * 2**attempt, MAX_WAIT))
                continue
            break
        if (status in (404, 405) and absent_ok) or (status in (400, 422, 500) and refused_ok):
            return None
        if status in (401, 403):
            raise RemoteError(
                f"model server {where} refused the request (HTTP {status}): set the API key in ${KEY_ENV} or "
                "--api-key-file"
            )
        if status in (429, 503):
            raise RemoteError(f"model server {where} is busy (HTTP {status}) after {RETRIES + 1} tries")
        if status >= 400:
            raise RemoteError(f"model server {where} answered HTTP {status}{self._reason(answer)}")
        try:
            decoded = json.loads(answer.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise RemoteError(f"model server {where} answered malformed JSON to {path}") from None
        if not isinstance(decoded, dict):
            raise RemoteError(f"model server {where} answered malformed JSON to {path} (not an object)")
        return decoded

    def _reason(self, answer: bytes) -> str:
        """The server's own error message, short and on one line (without the key), or ''."""
        try:
            decoded = json.loads(answer.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return ""
        message = decoded.get("error", decoded.get("detail")) if isinstance(decoded, dict) else None
        if isinstance(message, dict):
            message = message.get("message")
        if not isinstance(message, str) or not message.strip():
            return ""
        text = " ".join(self.scrub(message).split())
        return f": {text[:200]}"

    def _once(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes, float | None]:
        """(status, body, Retry-After seconds or None) of one request; RemoteError when there is no answer. A kept
        connection the server closed meanwhile is opened again once."""
        where = self.target.base
        full = self.target.root + path
        for fresh in (False, True):
            conn = self._connection()
            try:
                conn.timeout = CONNECT_TIMEOUT
                if conn.sock is None:
                    conn.connect()
                conn.sock.settimeout(self.timeout)
                conn.request(method, full, body=data, headers=headers)
                response = conn.getresponse()
                body = response.read()
                retry = _retry_after(response.getheader("Retry-After"))
                if response.getheader("Connection", "").lower() == "close":
                    self._drop()
                return response.status, body, retry
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._drop()
                if fresh:
                    raise RemoteError(f"model server {where} closed the connection ({type(exc).__name__})") from None
            except TimeoutError:
                self._drop()
                raise RemoteError(f"model server {where} did not answer within {self.timeout:g} s") from None
            except ssl.SSLError as exc:
                self._drop()
                raise RemoteError(f"model server {where}: TLS failed ({self.scrub(exc.reason or str(exc))})") from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                reason = getattr(exc, "strerror", None) or type(exc).__name__
                raise RemoteError(f"model server {where} is not reachable ({self.scrub(str(reason))})") from None
        raise AssertionError("unreachable")  # pragma: no cover


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (its delta-seconds form; a date is not honoured), or None."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class ServerTokenizer:
    """The Tokenizer protocol (infill.models.base) through the server's tokenize and detokenize endpoints, in one
    of three dialects (`probe`). Text the tool encoded decodes without a request (the texts are kept, CACHE of
    them); a slice of it (a prefix cut to the window) is detokenized by the server."""

    def __init__(self, client: Client, dialect: str, model: str | None) -> None:
        self.client, self.dialect, self.model = client, dialect, model
        self._texts: OrderedDict[tuple[int, ...], str] = OrderedDict()
        self._ids: OrderedDict[str, list[int]] = OrderedDict()
        self._lock = threading.Lock()
        self.lead = self._raw_encode("")  # what the endpoint puts before any text (a BOS): not part of a text

    @classmethod
    def probe(cls, client: Client, model: str | None) -> ServerTokenizer | None:
        """The server's tokenizer, or None when it has no endpoint for one."""
        for dialect in ("tokenize", "extras"):
            try:
                tok = cls(client, dialect, model)
                tok.encode("a")
            except RemoteError:
                continue
            except _Absent:
                continue
            return tok
        return None

    def _raw_encode(self, text: str) -> list[int]:
        if self.dialect == "extras":  # llama-cpp-python
            answer = self.client.post("/extras/tokenize", {"input": text, "model": self.model}, absent_ok=True)
        else:  # llama.cpp's server (content) and vLLM (prompt) share the path
            body = {"content": text, "prompt": text, "add_special": False, "add_special_tokens": False}
            if self.model:
                body["model"] = self.model
            answer = self.client.post("/tokenize", body, absent_ok=True)
        if answer is None:
            raise _Absent()
        tokens = answer.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise RemoteError(f"model server {self.client.target.base} answered malformed JSON to tokenize")
        return tokens

    def encode(self, text: str) -> list[int]:
        with self._lock:
            found = self._ids.get(text)
            if found is not None:
                self._ids.move_to_end(text)
                return list(found)
        ids = self._raw_encode(text) if text else []
        if self.lead and ids[: len(self.lead)] == self.lead:
            ids = ids[len(self.lead) :]
        self._keep(text, ids)
        return list(ids)

    def _keep(self, text: str, ids: list[int]) -> None:
        with self._lock:
            self._ids[text] = ids
            self._texts[tuple(ids)] = text
            while len(self._ids) > CACHE:
                self._ids.popitem(last=False)
            while len(self._texts) > CACHE:
                self._texts.popitem(last=False)

    def decode(self, ids: list[int]) -> str:
        key = tuple(int(t) for t in ids)
        if not key:
            return ""
        with self._lock:
            found = self._texts.get(key)
        if found is not None:
            return found
        if self.dialect == "extras":
            answer = self.client.post("/extras/detokenize", {"tokens": list(key), "model": self.model})
        else:
            body: dict[str, Any] = {"tokens": list(key)}
            if self.model:
                body["model"] = self.model
            answer = self.client.post("/detokenize", body)
        text = (answer or {}).get("text", (answer or {}).get("content", (answer or {}).get("prompt")))
        if not isinstance(text, str):
            raise RemoteError(f"model server {self.client.target.base} answered malformed JSON to detokenize")
        return text

    def token_id(self, text: str) -> int | None:
        """The id of `text` when the server reads it as one token (a family's FIM token), else None."""
        ids = self.encode(text)
        return ids[0] if len(ids) == 1 else None


class _Absent(Exception):
    """The server has no such endpoint."""


class TextPieces:
    """The Tokenizer protocol without a server tokenizer: words, runs of spaces and single signs, about a token
    each in code (planning counts them; the server tokenizes the prompt itself). Exact round trip."""

    _PIECE = re.compile(r"\w+|[ \t]+|\n|[^\w\s]|\s", re.UNICODE)

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: list[str] = []
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        out = []
        with self._lock:
            for piece in self._PIECE.findall(text):
                found = self._ids.get(piece)
                if found is None:
                    found = self._ids[piece] = len(self._pieces)
                    self._pieces.append(piece)
                out.append(found)
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self._pieces[int(i)] for i in ids)


@dataclass(frozen=True)
class Sampling:
    """How the server samples one completion: the tool's settings, and the server's own distribution otherwise
    (top_k 0, min_p 0 and repeat penalty 1 turn llama.cpp's defaults off; servers ignore what they lack)."""

    temperature: float
    top_k: int  # 0 = off
    top_p: float
    seed: int | None  # None at temperature 0

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,  # 0: off (llama.cpp, vLLM)
            "min_p": 0.0,
            "repeat_penalty": 1.0,
        }
        if self.seed is not None:
            out["seed"] = self.seed
        return out


@dataclass
class Completion:
    """One sample from the server: its text (up to the end or the stop), the log-probabilities of the tokens that
    wrote that text, and why it ended ("stop" or "length")."""

    text: str
    logprobs: list[float]
    finish: str


@dataclass
class RemoteFim:
    """A left-to-right FIM model on a server (module docstring): what infill.core.backends.Remote samples from."""

    client: Client
    target: Target
    model: str | None
    family: FimFamily
    spelled: tuple[str, str, str]  # the family's three tokens as the server's tokenizer spells them
    ends: tuple[str, ...]  # the family's end tokens' text (stop strings)
    banned: dict[str, float] = field(default_factory=dict)  # logit_bias: the FIM tokens are never written
    max_length: int = WINDOW
    scores_prompts: bool | None = None  # whether `echo` returns the prompt's log-probabilities (None: not known)
    nfe: int = 0  # completion requests

    def prompt(self, prefix: str, suffix: str) -> str:
        return fim_text(self.spelled, prefix, suffix)

    def _body(self, prompt: str, max_tokens: int, **more: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "n": 1, "stream": False, **more}
        if self.model:
            body["model"] = self.model
        if self.banned:
            body["logit_bias"] = self.banned
        return body

    def complete(self, prompt: str, max_tokens: int, sampling: Sampling, stop: list[str]) -> Completion:
        """One sample of the middle after `prompt`, with the log-probabilities of its tokens."""
        body = self._body(prompt, max_tokens, logprobs=1, stop=stop[:4] if stop else None, **sampling.fields())
        self.nfe += 1
        choice = self._choice(self.client.post("/v1/completions", body))
        text = choice.get("text")
        if not isinstance(text, str):
            raise self._malformed("a choice without text")
        return Completion(text, _kept_logprobs(choice.get("logprobs"), len(text)), str(choice.get("finish_reason")))

    def score_tail(self, prompt: str, tail: str, tail_tokens: int) -> list[float] | None:
        """The log-probabilities of the last `tail_tokens` tokens of prompt + tail (the tail's, counted in context)
        from one request with `echo`; None when the server does not return the prompt's (Ollama)."""
        if self.scores_prompts is False:
            return None
        body = self._body(prompt + tail, 1, echo=True, logprobs=1, **Sampling(0.0, 0, 1.0, None).fields())
        self.nfe += 1
        answer = self.client.post("/v1/completions", body, refused_ok=True)
        if answer is None:  # the server does not take `echo`
            self.scores_prompts = False
            return None
        choice = self._choice(answer)
        logprobs = choice.get("logprobs")
        values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
        usage = answer.get("usage") if isinstance(answer, dict) else None
        generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if not isinstance(generated, int):
            generated = 1
        if not isinstance(values, list) or len(values) < tail_tokens + generated + 1:
            self.scores_prompts = False
            return None
        self.scores_prompts = True
        picked = values[len(values) - generated - tail_tokens : len(values) - generated]
        if not all(isinstance(v, (int, float)) for v in picked):
            return None
        return [float(v) for v in picked]

    def _choice(self, answer: dict[str, Any] | None) -> dict[str, Any]:
        choices = (answer or {}).get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._malformed("no choices")
        return choices[0]

    def _malformed(self, what: str) -> RemoteError:
        return RemoteError(f"model server {self.target.base} answered malformed JSON to a completion ({what})")

    def parameter_count(self) -> int:
        return 0


def _kept_logprobs(logprobs: Any, length: int) -> list[float]:
    """The log-probabilities of the tokens that wrote the first `length` characters of a completion (a stop
    string's token that starts after them is not kept); [] when the server sent none."""
    if not isinstance(logprobs, dict):
        return []
    tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list):
        return []
    out, at = [], 0
    for token, value in zip(tokens, values, strict=False):
        if at >= length and length > 0 or not isinstance(value, (int, float)):
            break
        out.append(float(value))
        at += len(token) if isinstance(token, str) else 0
    return out if length > 0 else []


def _models(client: Client) -> list[dict[str, Any]]:
    """The models the server lists ([] where it has no /v1/models); RemoteError for an answer without its list."""
    answer = client.get("/v1/models", absent_ok=True)
    if answer is None:
        return []
    data = answer.get("data")
    if not isinstance(data, list):
        raise RemoteError(f"model server {client.target.base} answered malformed JSON to /v1/models (no data)")
    return [m for m in data if isinstance(m, dict)]


def load_remote(spec: ModelSpec) -> LoadedModel:
    """The model `spec.name` names on its server, kind "remote" (module docstring). Checks what may leave the
    machine before anything is sent: InputError (exit 2) for plain http to another machine without the opt-in;
    RemoteError (exit 123) when the server does not answer."""
    from infill.models.llamacpp import data_dir
    from infill.models.registry import LoadedModel

    target = parse(spec.name)
    if not target.https and not loopback(target.host) and not (spec.allow_http or os.environ.get(HTTP_ENV) == "1"):
        raise InputError(
            f"--model {target.base}: plain http to another machine sends the file's text unencrypted; use https, or "
            f"opt in with --allow-http or {HTTP_ENV}=1"
        )
    if spec.revision is not None or spec.mask_token is not None:
        flag = "--revision" if spec.revision is not None else "--mask-token"
        raise InputError(f"{flag} applies to model folders; {target.base} is a model server")
    client = Client(target, api_key(spec), read_timeout())
    listed = _models(client)
    model = target.model
    if model is None:
        names = [str(m.get("id")) for m in listed if m.get("id")]
        if len(names) != 1:
            raise InputError(
                f"--model {target.base}: name the model after # ({', '.join(names) or 'the server lists none'})"
            )
        model = names[0]
    lengths = [m.get(k) for m in listed if m.get("id") == model for k in ("max_model_len", "n_ctx")]
    max_length = next((int(n) for n in lengths if isinstance(n, int) and n > 0), WINDOW)
    server_tok = ServerTokenizer.probe(client, model)
    tokenizer: ServerTokenizer | TextPieces = server_tok if server_tok is not None else TextPieces()
    family, spelled, banned = _family(target, model, server_tok)
    lead = len(server_tok.lead) if server_tok is not None else 0
    remote = RemoteFim(
        client,
        target,
        model,
        family,
        spelled,
        family.ends,
        banned,
        max_length=min(max_length, WINDOW) - 3 - lead,
    )
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{target.host}-{target.port}-{model}")
    info = {
        "source": f"model server {target.base}",
        "provenance": f"model server {target.base}",
        "engine": "remote",
        "server": target.base,
        "remote_model": model,
        "fim": family.name,
        "tokenizer": "server" if server_tok is not None else "text pieces",
        "max_length": remote.max_length,
        "calibration": str(data_dir() / "calibration" / f"remote-{safe}.json"),
    }
    return LoadedModel(name=spec.name, kind="remote", model=remote, tokenizer=tokenizer, info=info)


def _family(
    target: Target, model: str, tok: ServerTokenizer | None
) -> tuple[FimFamily, tuple[str, str, str], dict[str, float]]:
    """The FIM family (given, else the one whose tokens the server's tokenizer knows, else the one the model's
    name says), its tokens as the server spells them, and the logit_bias that keeps them out of fills."""
    from infill.errors import ModelError

    given = family_named(target.family) if target.family else None
    if tok is not None:
        try:
            found = find_fim(tok.token_id, f"the tokenizer of {model!r} on {target.base}")
        except ModelError as exc:
            raise RemoteError(exc.message) from None
        if found is not None and (given is None or given.name == found.family):
            family = family_named(found.family)
            assert family is not None
            ids = found.ids
            spelled = tuple(
                next(s for s in spellings if tok.token_id(s) == i)
                for spellings, i in zip((family.prefix, family.suffix, family.middle), ids, strict=True)
            )
            return family, (spelled[0], spelled[1], spelled[2]), {str(i): -100.0 for i in ids}
    family = given or family_of_model_name(model)
    if family is None:
        raise InputError(
            f"--model {target.base}#{model}: cannot tell the model's fill-in-the-middle family (its server has no "
            "tokenizer endpoint, or does not know the tokens); add ;fim=FAMILY (qwen, starcoder, codellama, deepseek)"
        )
    return family, (family.prefix[-1], family.suffix[-1], family.middle[-1]), {}
