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

The address, the API key, the HTTP client and its faults: infill.models.remote_http; loading a model from a
server: infill.models.remote_load.

Standard library only (http.client); importing this module imports neither torch nor anything heavy.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infill.errors import ContextExceeded, RemoteError
from infill.models.fim import FimFamily, fim_text
from infill.models.remote_http import REFUSED, Client, Target

if TYPE_CHECKING:
    pass

WINDOW = 4096  # tokens of prompt and fill, where the server does not say its model's context
# llama-cpp-python's server answers `echo` by sorting the whole vocabulary and detokenizing the prompt so far, in
# Python, for every prompt token (0.3.36: 31-56 s for one 4,000-token prompt of a 3,000-token vocabulary, and it
# runs one request at a time, so every later fill waits): lines are scored there only for prompts up to this long
EXTRAS_ECHO_TOKENS = 256
MIN_CONTEXT = 64  # tokens: a server saying less (n_ctx 1, say) serves no fill; budgets below it went negative
CACHE = 512  # texts whose tokens the tokenizer keeps
JOIN_LINES = 4  # line starts a text's tokens are looked for as kept head + line (ServerTokenizer._joined)
MAX_TOKEN_CHARS = 256  # longer than any token of a code model's vocabulary: more text means max_tokens was ignored
LOGPROB_ROUNDING = 1e-4  # a log-probability this far above 0 is a server's rounding, taken as 0
REVALIDATE = 10.0  # seconds a kept model trusts that its server still serves the model it loaded (`replaced`)


class ServerTokenizer:
    """The Tokenizer protocol (infill.models.base) through the server's tokenize and detokenize endpoints, in one
    of three dialects (`probe`: vLLM's, llama.cpp's and vLLM's together, llama-cpp-python's). Text the tool
    encoded decodes without a request (the texts are kept, CACHE of them); a slice of it (a prefix cut to the
    window) is detokenized by the server, up to the start of the line typed on where the text was joined by lines
    (`_joined`), once for the line."""

    def __init__(self, client: Client, dialect: str, model: str | None) -> None:
        self.client, self.dialect, self.model = client, dialect, model
        self._texts: OrderedDict[tuple[int, ...], str] = OrderedDict()
        self._ids: OrderedDict[str, list[int]] = OrderedDict()
        self._lock = threading.Lock()
        self.lead = self._raw_encode("")  # what the endpoint puts before any text (a BOS): not part of a text
        self.pre: str | None = None  # the vocabulary's pre-tokenizer (PRE_TOKENIZERS), from the model's FIM family
        self._split: Callable[[str], list[tuple[str, tuple[int, int]]]] | None = None  # `pre`'s, once needed
        self._pieces: dict[str, list[str]] = {}  # the pre-tokens of the last head `_joined` split off
        self._tails: OrderedDict[tuple[int, ...], str] = OrderedDict()  # the lines `_joined` ended texts with

    @classmethod
    def probe(cls, client: Client, model: str | None, vllm: bool = False) -> ServerTokenizer | None:
        """The server's tokenizer, or None when it has no endpoint for one. `vllm`: the server is vLLM, which
        before 0.6.5 refuses a field it does not know (llama.cpp's `content`), so it is sent only its own."""
        for dialect in ("vllm", "tokenize", "extras") if vllm else ("tokenize", "extras"):
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
            body = {"prompt": text, "add_special_tokens": False}
            if self.dialect == "tokenize":
                body.update({"content": text, "add_special": False})
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
        found = self._kept(text)
        if found is not None:
            return found
        ids = self._joined(text)
        if ids is None:
            ids = self._raw_encode(text) if text else []
            if self.lead and ids[: len(self.lead)] == self.lead:
                ids = ids[len(self.lead) :]
        self._keep(text, ids)
        return list(ids)

    def _kept(self, text: str) -> list[int] | None:
        with self._lock:
            found = self._ids.get(text)
            if found is not None:
                self._ids.move_to_end(text)
                return list(found)
        return None

    def _joined(self, text: str) -> list[int] | None:
        """The tokens of `text` from the kept tokens of its lines, without a request: typing on a line changes
        only the text after its start, so a prompt's prefix at each new word is the prefix at the last key up to
        that line (kept) and the line so far (kept by token healing's check, which tokenizes it at every key).
        Only where the pre-tokenizer (`pre`) splits `text` at that line start into exactly the pre-tokens of the
        two parts: byte-level BPE never merges across a pre-token, so the server's tokens are then the two parts'
        tokens joined. At most one request (the part not kept); None: tokenize `text` whole."""
        if self.pre is None:
            return None
        starts: list[int] = []
        at = len(text) - 1
        while len(starts) < JOIN_LINES and (at := text.rfind("\n", 0, at)) >= 0:
            starts.append(at + 1)
        for at in starts:
            head, tail = text[:at], text[at:]
            kept = self._kept(head) is not None or at == starts[0] and self._kept(tail) is not None
            if kept and self._splits(head, tail):
                ids = self.encode(head)
                ends = self.encode(tail)
                with self._lock:
                    self._tails[tuple(ends)] = tail
                    while len(self._tails) > JOIN_LINES:
                        self._tails.popitem(last=False)
                return ids + ends
        return None

    def _splits(self, head: str, tail: str) -> bool:
        """Whether the pre-tokenizer splits head + tail into the pre-tokens of head and then those of tail."""
        if self._split is None:
            from infill.models.tokenizer import named_pre_tokenizer

            assert self.pre is not None
            self._split = named_pre_tokenizer(self.pre).pre_tokenizer.pre_tokenize_str
        whole = [piece for piece, _ in self._split(head + tail)]
        with self._lock:
            first = self._pieces.get(head)
        if first is None:
            first = [piece for piece, _ in self._split(head)]
            with self._lock:
                self._pieces = {head: first}  # the head of the line being typed: the next key's again
        return whole == first + [piece for piece, _ in self._split(tail)]

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
            tails = list(self._tails.items())
        if found is not None:
            return found
        for tail, line in tails:  # the prefix cut to the window: the line's text is known, the rest kept by line
            if 0 < len(tail) < len(key) and key[-len(tail) :] == tail:
                return self.decode(list(key[: -len(tail)])) + line
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
        with self._lock:  # a fill decodes the same cut more than once (each sample, the next key's steady parts)
            self._texts[key] = text
            while len(self._texts) > CACHE:
                self._texts.popitem(last=False)
        return text

    def pretoken_start(self, text: str) -> int | None:
        """Where the last pre-token of `text` starts, under the pre-tokenizer of the model's family (`pre`), for
        token healing (infill.core.plan.heal_text checks the cut against the server's own tokens); None when the
        family's is not known (Code Llama's sentencepiece)."""
        from infill.models.tokenizer import named_pre_tokenizer, pretoken_start

        return pretoken_start(named_pre_tokenizer(self.pre), text) if self.pre else None

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


# How a server reads the sampling fields (`Sampling.fields`): "vllm" (vLLM, which lists its models as owned_by
# "vllm"), "llama.cpp" (llama-server, llama-cpp-python, Ollama and the rest) and "openai" (only the OpenAI API's
# own fields, for a server or gateway that refused the others)
DIALECTS = ("vllm", "llama.cpp", "openai")


@dataclass(frozen=True)
class Sampling:
    """How the server samples one completion: the tool's settings, and the server's own distribution otherwise.

    Only fields that change the sample are sent, each in the server's own dialect (`fields`): a greedy request
    (temperature 0) sends no truncation (the most likely token survives every one of them), and the server's
    defaults that would change the distribution are turned off where it has them (llama.cpp's top-k 40, min-p
    0.05 and llama-cpp-python's repeat penalty 1.1; vLLM's defaults from the model's generation_config.json).
    vLLM before 0.9 refuses `top_k: 0` (its "off" is -1, which later versions still take) and before 0.6.5 any
    field it does not know (llama.cpp's `repeat_penalty`)."""

    temperature: float
    top_k: int  # 0 = off
    top_p: float
    seed: int | None  # None at temperature 0

    def fields(self, dialect: str = "llama.cpp") -> dict[str, Any]:
        out: dict[str, Any] = {"temperature": self.temperature}
        if self.temperature > 0:
            out["top_p"] = self.top_p
            if dialect != "openai":
                out["top_k"] = self.top_k if self.top_k > 0 else -1 if dialect == "vllm" else 0
                out["min_p"] = 0.0
        if dialect == "vllm":
            out["repetition_penalty"] = 1.0
        elif dialect == "llama.cpp":
            out["repeat_penalty"] = 1.0
        if self.seed is not None:
            out["seed"] = self.seed
        return out


# How a server is told that a completion must begin with given text (token healing: `begins_with`): "gbnf" (llama.cpp's
# llama-server and llama-cpp-python's server: a GBNF `grammar`), "structured_outputs" (vLLM from 0.10.2: a regex in
# `structured_outputs`) and "guided_regex" (vLLM before 0.12, which dropped it). Ollama takes neither.
CONSTRAINTS = ("gbnf", "structured_outputs", "guided_regex")
_REGEX_SPECIAL = frozenset("\\.^$*+?()[]{}|/")
_GBNF_ESCAPES = {"\\": "\\\\", '"': '\\"', "\t": "\\t", "\r": "\\r", "\n": "\\n"}


def begins_with(text: str, how: str) -> dict[str, Any]:
    """The request's field that makes the completion begin with `text` and go on freely after it, in the server's
    way `how` (CONSTRAINTS). What follows the text is any character, so the rest of the completion is the
    model's own: with greedy decoding the whole is the most likely token consistent with the text at each step,
    the tool's greedy healing (infill.decoding.healing)."""
    if how == "gbnf":
        literal = "".join(
            _GBNF_ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 32 or ord(c) == 127 else c) for c in text
        )
        return {"grammar": f'root ::= "{literal}" rest\nrest ::= [^\\x00]*\n'}
    regex = "".join("\\" + c if c in _REGEX_SPECIAL else c for c in text) + r"[\s\S]*"
    return {"structured_outputs": {"regex": regex}} if how == "structured_outputs" else {"guided_regex": regex}


@dataclass
class Completion:
    """One sample from the server: its text (up to the end or the stop), the log-probabilities of the tokens that
    wrote that text, and why it ended ("stop" or "length")."""

    text: str
    logprobs: list[float]
    finish: str
    line_break: bool = True  # whether it may have stopped at a "\n" stop (vLLM's stop_reason says which stop did)

    @property
    def scored(self) -> bool:
        """Whether the server gave log-probabilities for the text: a server that ignores `logprobs` (older Ollama,
        some gateways) gives none, and the text is then unscored, not certain (infill.core.backends.Fill)."""
        return bool(self.logprobs) or not self.text


@dataclass
class RemoteFim:
    """A left-to-right FIM model on a server (module docstring): what infill.core.kinds.remote.Remote samples from."""

    client: Client
    target: Target
    model: str | None
    family: FimFamily
    spelled: tuple[str, str, str]  # the family's three tokens as the server's tokenizer spells them
    ends: tuple[str, ...]  # the family's end tokens' text (stop strings)
    banned: dict[str, float] = field(default_factory=dict)  # logit_bias: the FIM tokens are never written
    max_length: int = WINDOW
    reserve: int = 3  # tokens of the server's context that are not the fill's: the FIM tokens, the endpoint's BOS
    scores_prompts: bool | None = None  # whether `echo` returns the prompt's log-probabilities (None: not known)
    echo_tokens: int | None = None  # the longest prompt scored with `echo` (None: any; EXTRAS_ECHO_TOKENS)
    dialect: str = "llama.cpp"  # how the server reads the sampling fields (DIALECTS)
    constrains: str | None = None  # how the server is told what a completion begins with (CONSTRAINTS); None: not
    nfe: int = 0  # completion requests
    identity: tuple[Any, ...] = ()  # what the server said of the model when it was loaded (`replaced`)
    identify: Callable[[], tuple[Any, ...]] | None = None  # asks the server for it again
    checked: float = field(default_factory=time.monotonic)

    def replaced(self) -> bool:
        """Whether the server now serves another model under this name (restarted with other weights: other FIM
        tokens, another window), so that what was loaded from it is stale. Asked of the server at most every
        REVALIDATE seconds, and at once after a request to it failed or found its kept connection closed (what a
        restart looks like); a server that does not answer now is not taken as replaced (the fill says why)."""
        if self.identify is None:
            return False
        if not self.client.suspect and time.monotonic() - self.checked < REVALIDATE:
            return False
        try:
            now = self.identify()
        except RemoteError:
            return False
        self.client.suspect = False
        self.checked = time.monotonic()
        return now != self.identity

    def prompt(self, prefix: str, suffix: str) -> str:
        return fim_text(self.spelled, prefix, suffix)

    def _body(self, prompt: str, max_tokens: int, **more: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "n": 1, "stream": False, **more}
        if self.model:
            body["model"] = self.model
        if self.banned:
            body["logit_bias"] = self.banned
        return body

    def complete(
        self, prefix: str, suffix: str, max_tokens: int, sampling: Sampling, stop: list[str], begins: str = ""
    ) -> Completion:
        """One sample of the middle between `prefix` and `suffix`, with the log-probabilities of its tokens.
        `begins`: token healing's text (infill.core.plan.heal_text), cut off the end of the prefix, which the
        sample's text then begins with: the server is told so (`constrains`); one that cannot be is sent the
        prefix with the text back at its end instead, unhealed."""
        stop = stop[:4] if stop else []
        how = self.constrains
        if begins and how is not None and "\x00" not in begins:  # no token writes a NUL under a grammar
            healed = self._complete(self.prompt(prefix, suffix), max_tokens, sampling, stop, begins)
            if healed is not None:
                return healed
            self.constrains = None  # refused or ignored: not sent again
        try:
            found = self._complete(self.prompt(prefix + begins, suffix), max_tokens, sampling, stop, "")
        except RemoteError:
            if begins:  # it fails without the field too (down, restarting): the field was not what it refused
                self.constrains = how
            raise
        assert found is not None  # asked without `begins`: None is never answered
        return Completion(begins + found.text, found.logprobs, found.finish, found.line_break)

    def _complete(
        self, prompt: str, max_tokens: int, sampling: Sampling, stop: list[str], begins: str
    ) -> Completion | None:
        """`complete`'s request, told to begin with `begins` when it is not ""; None when the server did not
        take that (it refused the field, or answered a text that does not begin so: it ignored it)."""
        self.nfe += 1
        answer = self._sample(prompt, max_tokens, sampling, stop or None, begins)
        if answer is None:
            return None
        choice = self._choice(answer)
        text = choice.get("text")
        if not isinstance(text, str):
            raise self._malformed("a choice without text")
        if len(text) > max_tokens * MAX_TOKEN_CHARS:  # it ignored max_tokens: nothing of it reaches a file
            raise RemoteError(
                f"model server {self.target.base} answered {len(text):,} characters to a request for at most "
                f"{max_tokens} tokens"
            )
        if begins and not text.startswith(begins):  # a server that ignores a field it does not know
            return None
        try:
            kept = _kept_logprobs(choice.get("logprobs"), len(text))
        except ValueError as exc:
            raise self._malformed(str(exc)) from None
        # a server decodes a character it stopped inside of (the budget or an end token reached within its bytes)
        # as U+FFFD (llama.cpp's, vLLM's): never a file's text
        # vLLM says which stop ended it (None: the model's end token): where it says, a stop other than the line
        # break ended the text itself, which asking again without that stop cannot change
        line_break = "stop_reason" not in choice or choice["stop_reason"] == "\n"
        return Completion(text.rstrip("\ufffd"), kept, str(choice.get("finish_reason")), line_break)

    def _sample(
        self, prompt: str, max_tokens: int, sampling: Sampling, stop: list[str] | None, begins: str = ""
    ) -> dict[str, Any] | None:
        """The answer to one completion request, told to begin with `begins` when it is not "" (None when the
        server refused that). A server that refuses the request with fields beyond
        the OpenAI API's (a gateway or an old vLLM that takes no field it does not know) is asked again with only
        those; when that is answered, the model keeps to them."""
        path = "/v1/completions"
        with self._fitting():
            if begins and self.constrains is not None:
                told = begins_with(begins, self.constrains)
                body = self._body(prompt, max_tokens, logprobs=1, stop=stop, **sampling.fields(self.dialect), **told)
                # a 500 too: a server whose handler failed on the field (`complete` tells a server that is down)
                return self.client.post(path, body, refused_ok=REFUSED)
            if self.dialect != "openai":
                body = self._body(prompt, max_tokens, logprobs=1, stop=stop, **sampling.fields(self.dialect))
                answer = self.client.post(path, body, refused_ok=(400, 422))  # not a 500: a server's own fault
                if answer is not None:
                    return answer
            body = self._body(prompt, max_tokens, logprobs=1, stop=stop, **sampling.fields("openai"))
            answer = self.client.post(path, body)
        self.dialect = "openai"
        return answer or {}

    @contextlib.contextmanager
    def _fitting(self) -> Iterator[None]:
        """A server that does not say its model's context (llama-cpp-python; vLLM behind a gateway) was assumed to
        have WINDOW tokens, and refuses every prompt planned for more than it has: where its refusal says how many
        it has, the model is planned for that from now on, and the refusal says the fill may be planned again
        (ContextExceeded.adopted)."""
        try:
            yield
        except ContextExceeded as exc:
            told = exc.context
            if told is not None and MIN_CONTEXT <= told - self.reserve < self.max_length:
                self.max_length = told - self.reserve
                exc.adopted = True
            raise

    def score_tail(self, prompt: str, tail: str, tail_tokens: int) -> list[float] | None:
        """The log-probabilities of the last `tail_tokens` tokens of prompt + tail (the tail's, counted in context)
        from one request with `echo`; None when the server does not return the prompt's (Ollama)."""
        if self.scores_prompts is False:
            return None
        greedy = Sampling(0.0, 0, 1.0, None).fields(self.dialect)
        body = self._body(prompt + tail, 1, echo=True, logprobs=1, **greedy)
        self.nfe += 1
        with self._fitting():
            answer = self.client.post("/v1/completions", body, refused_ok=REFUSED)
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
    tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")  # OpenAI's completions (vLLM, ...)
    content = logprobs.get("content")
    if tokens is None and isinstance(content, list):  # llama-server: one {"token", "logprob", ...} per token
        entries = [e if isinstance(e, dict) else {} for e in content]
        tokens, values = [e.get("token") for e in entries], [e.get("logprob") for e in entries]
    if not isinstance(tokens, list) or not isinstance(values, list):
        return []
    out, at = [], 0
    for token, value in zip(tokens, values, strict=False):
        if at >= length and length > 0 or not isinstance(value, (int, float)) or isinstance(value, bool):
            break
        if not math.isfinite(value) or value > LOGPROB_ROUNDING:
            raise ValueError(f"a log-probability of {value!r}, which is not a finite number at most 0")
        out.append(min(float(value), 0.0))
        at += len(token) if isinstance(token, str) else 0
    return out if length > 0 else []
