"""Left-to-right code models from GGUF files, run by llama.cpp (the `llamacpp` extra: llama-cpp-python), for
`--model path/model.gguf` and Ollama's models (infill.models.ollama); docs/code-models.md.

llama.cpp only runs passes here: `LlamaEngine` is an infill.models.base.CausalEngine (token sequences in, next-token
logits out), and the model is the same infill.models.autoregressive.CausalFim the Hugging Face folders load as, so
the tool's own decoding runs on it unchanged: beam search, exact sampling, lookup speculation, the syntax checks,
retrieval ranking, the one-line stop, token healing, calibrated confidence.

How passes use llama.cpp's low-level API (one context, one unified KV cache shared by up to SLOTS sequences):
- a sequence is a slot (llama.cpp's seq_id) whose cache holds its tokens at positions 0..len-1; a pass over a
  sequence starts from the longest prefix any slot holds: a keystroke evaluates only the tokens after the first
  change, a verify pass only the drafts, and a rejected draft's cells are removed (llama_memory_seq_rm);
- several sequences go in one batch (beam search's hypotheses): each takes its parent's slot, or a free slot that
  shares the parent's cells (llama_memory_seq_cp: in a unified cache, a copy adds a sequence id to cells, it moves
  no data), and the batch asks for logits only at the rows it reads (llama_batch.logits).
- a pass goes to llama_decode in chunks of CHUNK tokens (a prompt in several), each chunk's cells kept as the
  slot's as soon as it is done; a long chunk runs with llama.cpp's abort callback set, so that Ctrl-C or a
  server's interrupt_passes (a superseded fill) stops it within a graph node: the unfinished chunk's cells are
  removed and the finished ones stay, so the next pass over the same prefix evaluates only the rest.
- llama.cpp's log goes to a buffer, not to stderr; its last error line is what a failed load reports.

Before llama.cpp sees a file, infill.models.gguf reads its header: a file that is not GGUF, is cut short, or claims
more memory than is free is refused before anything is allocated. A file of f32 weights gets an f32 KV cache and
no flash attention, so that its logits match eager PyTorch's on the same weights to 1e-5 (the tests compare them);
quantized files get llama.cpp's defaults (f16 cache).

Importing this module does not import llama_cpp or torch; `load_gguf` imports llama_cpp, and ModelError names the
extra when it is missing.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.config import ModelSpec
from infill.environment import data_dir
from infill.errors import InputError, ModelError
from infill.models.gguf import TOKEN_CONTROL, TOKEN_USER_DEFINED, GGUFHeader
from infill.models.tokenizer import PRE_TOKENIZERS, named_pre_tokenizer, pretoken_start, without_space_prefix

if TYPE_CHECKING:
    import torch

    from infill.models.registry import LoadedModel

SLOTS = 16  # sequences one context holds: the widest beam search (a rescue, 4 x the default width) fits
HEADROOM = 2048  # KV cells beyond the longest sequence, for the tails of the other slots
CHUNK = 128  # tokens per llama_decode (a longer pass goes in several): an interrupted prompt keeps the chunks done
TOKEN_UNUSED = 5  # tokenizer.ggml.token_type of padding rows ([PAD<i>])
F32 = 0  # ggml_type of f32 (a file of f32 weights: its KV cache too)
LONG_PASS = 16  # a chunk of this many tokens (a prompt's) runs where it can be stopped (LlamaEngine._interruptible)


def available() -> bool:
    """Whether the `llamacpp` extra is installed (without importing it)."""
    return importlib.util.find_spec("llama_cpp") is not None


def require() -> Any:
    """The llama_cpp module, its backend initialised once, its log captured; InputError (exit 2) naming the extra
    when it is not installed."""
    if not available():
        from infill.extras import install_hint

        raise InputError(f"GGUF models run on llama.cpp, which is not installed: {install_hint('llamacpp')}")
    import llama_cpp

    _Log.install(llama_cpp)
    return llama_cpp


class _Log:
    """llama.cpp's log lines, kept (the last few) instead of printed: a failed load reports the last error."""

    lines: list[str] = []
    _callback: Any = None  # the ctypes callback, kept alive for as long as llama.cpp may call it
    _lock = threading.Lock()

    @classmethod
    def install(cls, llama_cpp: Any) -> None:
        with cls._lock:
            if cls._callback is not None:
                return

            @llama_cpp.llama_log_callback
            def keep(level: int, text: bytes, user: Any) -> None:
                cls.lines = [*cls.lines[-40:], text.decode("utf-8", errors="replace")]

            cls._callback = keep
            llama_cpp.llama_log_set(keep, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()

    @classmethod
    def last_error(cls) -> str:
        """Why llama.cpp's last load failed, from its log: the reason it gave ("error loading model: ..."), else
        the last line that reads like an error ('' when none)."""
        lines = [x.strip() for x in "".join(cls.lines).splitlines() if x.strip()]
        for line in reversed(lines):
            if "error loading model: " in line:
                return line.split("error loading model: ", 1)[1]
        for line in reversed(lines):
            if any(w in line.lower() for w in ("error", "failed", "unknown", "invalid", "not supported")):
                return line
        return ""


class LlamaEngine:
    """infill.models.base.CausalEngine over a llama.cpp context (module docstring)."""

    def __init__(self, path: Path, header: GGUFHeader, *, threads: int, window: int) -> None:
        llama_cpp = require()
        self.lib = llama_cpp
        self.path = path
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = 0
        _Log.lines = []
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            reason = _Log.last_error() or "llama.cpp could not load it"
            raise ModelError(f"{path}: {reason}")
        self._model = model
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.window = window
        self.slots = SLOTS
        exact = all(t.ggml_type == F32 for t in header.tensors if len(t.shape) > 1)
        ctx = llama_cpp.llama_context_default_params()
        ctx.n_ctx = window + HEADROOM
        ctx.n_batch = ctx.n_ubatch = min(CHUNK, ctx.n_ctx)  # one chunk per llama_decode, computed at once
        ctx.n_seq_max = self.slots
        ctx.n_threads = ctx.n_threads_batch = threads
        ctx.kv_unified = True  # one cache for every slot: copying a slot shares its cells
        ctx.no_perf = True
        if exact:
            ctx.type_k = ctx.type_v = F32
            ctx.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        context = llama_cpp.llama_init_from_model(model, ctx)
        if not context:
            llama_cpp.llama_model_free(model)
            raise ModelError(f"{path}: {_Log.last_error() or 'llama.cpp could not create a context for it'}")
        self._ctx = context
        self._memory = llama_cpp.llama_get_memory(context)
        self._batch = llama_cpp.llama_batch_init(ctx.n_batch, 0, self.slots)
        self._chunk = int(ctx.n_batch)
        self._held: list[list[int]] = [[] for _ in range(self.slots)]  # the tokens each slot's cells hold
        self._lock = threading.Lock()  # one pass at a time (a daemon's threads share the model)
        abort = self._abort = threading.Event()  # set: the pass in flight stops (interrupt, Ctrl-C)
        self._flight = threading.Lock()  # guards _passing against interrupt()
        self._passing = False  # a pass is in flight (an interrupt then stops it)
        self._abort_callback = llama_cpp.ggml_abort_callback(lambda data: abort.is_set())  # kept alive with self
        self._no_abort = llama_cpp.ggml_abort_callback()  # NULL: no callback (a short pass calls none)
        self.threads = threads
        self._parameters = header.parameters
        _ENGINES.add(self)

    def close(self) -> None:
        lib = self.lib
        if getattr(self, "_ctx", None):
            lib.llama_batch_free(self._batch)
            lib.llama_free(self._ctx)
            lib.llama_model_free(self._model)
            self._ctx = self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def parameter_count(self) -> int:
        return self._parameters

    def forget(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self.lib.llama_memory_clear(self._memory, True)
        self._held = [[] for _ in range(self.slots)]

    def rows(self, seqs: Sequence[Sequence[int]], k: int) -> torch.Tensor:
        """float32 logits (B, k, V) of the last k rows of each sequence; up to SLOTS sequences per pass."""
        import torch

        lists = [[int(t) for t in s] for s in seqs]
        for s in lists:
            if len(s) < k or len(s) > self.window:
                raise ModelError(f"a pass over {len(s)} tokens: the context holds {self.window}")
        with self._lock:
            parts = [self._pass(lists[i : i + self.slots], k) for i in range(0, len(lists), self.slots)]
        return torch.from_numpy(parts[0] if len(parts) == 1 else _concat(parts))

    def _pass(self, seqs: list[list[int]], k: int) -> Any:
        """One pass for `seqs` (at most SLOTS; a llama_decode per chunk of CHUNK tokens); on a full cache, every
        slot is dropped and the sequences are evaluated one after another (each from the cells of the one before)."""
        plan = self._plan(seqs, k)
        code, logits = self._decode(seqs, plan, k)
        if code == 0:
            return logits
        if code != 1:  # 1: no room in the cache for the batch; anything else is llama.cpp failing
            raise ModelError(f"{self.path}: llama.cpp failed a pass (llama_decode returned {code})")
        mine = {slot for slot, _ in plan}
        others = [j for j in range(self.slots) if j not in mine and self._held[j]]
        if others:  # the room is held by other slots (another document's prompt, an older fill's beams): free it
            for j in others:
                self.lib.llama_memory_seq_rm(self._memory, j, -1, -1)
                self._held[j] = []
            return self._pass(seqs, k)  # the chunks done and the shared prefixes are kept
        self._clear()
        if len(seqs) == 1:
            raise ModelError(f"{self.path}: {len(seqs[0])} tokens do not fit in llama.cpp's context")
        import numpy as np

        return np.concatenate([self._pass([s], k) for s in seqs])

    def _plan(self, seqs: list[list[int]], k: int) -> list[tuple[int, int]]:
        """(slot, tokens reused) for each sequence, with the cache made ready: a sequence keeps the slot it shares
        the longest prefix with (the longest claim wins), or takes a free slot given that prefix's cells."""
        from infill.models.autoregressive import shared_prefix

        lib, memory, held = self.lib, self._memory, self._held
        best: list[tuple[int, int]] = []  # (source slot, shared tokens)
        for s in seqs:
            shares = [shared_prefix(h, s, len(s) - k) for h in held]
            slot = max(range(self.slots), key=lambda j: shares[j])
            best.append((slot, shares[slot]))
        keeps: dict[int, int] = {}  # slot -> the sequence that keeps it in place
        for b in sorted(range(len(seqs)), key=lambda b: -best[b][1]):
            slot, shared = best[b]
            if shared > 0 and slot not in keeps:
                keeps[slot] = b
        sources = {slot for slot, shared in best if shared > 0}
        free = [j for j in range(self.slots) if j not in sources]
        free.sort(key=lambda j: len(held[j]))  # empty slots first
        plan: list[tuple[int, int]] = []
        for b, (slot, shared) in enumerate(best):
            if keeps.get(slot) == b:
                plan.append((slot, shared))
                continue
            target = free.pop(0)
            lib.llama_memory_seq_rm(memory, target, -1, -1)
            if shared > 0:  # the prefix's cells gain this slot's id; nothing is copied
                lib.llama_memory_seq_cp(memory, slot, target, 0, shared)
            held[target] = seqs[b][:shared]
            plan.append((target, shared))
        for slot, b in keeps.items():  # after the copies, which read these cells
            lib.llama_memory_seq_rm(memory, slot, best[b][1], -1)
            held[slot] = seqs[b][: best[b][1]]
        return plan

    def interrupt(self) -> None:
        """Stop the pass in flight, if one is (from any thread): it raises infill.progress.Cancelled, keeping the
        cells of the chunks it finished (interrupt_passes)."""
        with self._flight:
            if self._passing:
                self._abort.set()

    def _decode(self, seqs: list[list[int]], plan: list[tuple[int, int]], k: int) -> tuple[int, Any]:
        """(0, the logits rows (B, k, V) float32), or (llama_decode's failure code, None): the new tokens go in
        chunks of CHUNK rows, and each slot holds its sequence up to the last row of the chunks done. An interrupt
        (or Ctrl-C) stops the pass: the unfinished chunk's cells are removed and it raises Cancelled (or goes on)."""
        import numpy as np

        from infill.progress import Cancelled

        rows = [
            (b, pos) for b, (s, (_, start)) in enumerate(zip(seqs, plan, strict=True)) for pos in range(start, len(s))
        ]
        out = np.empty((len(seqs), k, self.vocab_size), dtype=np.float32)
        with self._flight:
            self._abort.clear()
            self._passing = True
        try:
            for at in range(0, len(rows), self._chunk):
                if self._abort.is_set():  # interrupted between two chunks
                    raise Cancelled("the forward pass was interrupted")
                chunk = rows[at : at + self._chunk]
                code = self._decode_chunk(seqs, plan, k, chunk)
                if code == 2:  # aborted by the callback: interrupt()
                    raise Cancelled("the forward pass was interrupted")
                if code != 0:
                    return code, None
                ends: dict[int, int] = {}
                for i, (b, pos) in enumerate(chunk):
                    ends[b] = pos
                    row = pos - (len(seqs[b]) - k)
                    if row >= 0:
                        logits = self.lib.llama_get_logits_ith(self._ctx, i)
                        out[b, row] = np.ctypeslib.as_array(logits, shape=(self.vocab_size,))
                for b, pos in ends.items():
                    self._held[plan[b][0]] = seqs[b][: pos + 1]
        finally:
            with self._flight:
                self._passing = False
        return 0, out

    def _decode_chunk(self, seqs: list[list[int]], plan: list[tuple[int, int]], k: int, chunk: list[Any]) -> int:
        """llama_decode of one chunk's rows ((sequence, position) pairs); an aborted or interrupted one leaves no
        cells (each slot's past its held tokens are removed), and its exception goes on."""
        batch = self._batch
        for at, (b, pos) in enumerate(chunk):
            batch.token[at] = seqs[b][pos]
            batch.pos[at] = pos
            batch.n_seq_id[at] = 1
            batch.seq_id[at][0] = plan[b][0]
            batch.logits[at] = pos >= len(seqs[b]) - k  # logits only where they are read
        batch.n_tokens = len(chunk)
        code = 2  # what an exception out of the pass leaves: cells to remove
        try:
            code = (
                self._interruptible(batch) if len(chunk) >= LONG_PASS else int(self.lib.llama_decode(self._ctx, batch))
            )
        finally:
            if code == 2:
                for slot in {plan[b][0] for b, _ in chunk}:
                    self.lib.llama_memory_seq_rm(self._memory, slot, len(self._held[slot]), -1)
        return code

    def _interruptible(self, batch: Any) -> int:
        """llama_decode of a long batch (a prompt's chunk) on a worker thread with llama.cpp's abort callback set,
        so that this thread stays where a signal lands: Ctrl-C or SIGTERM raised here (KeyboardInterrupt,
        Terminated) stops llama.cpp's computation at its next node, as interrupt() does (it returns 2: aborted);
        the exception goes on once the worker has returned."""
        lib, done = self.lib, [-1]

        def run() -> None:
            done[0] = int(lib.llama_decode(self._ctx, batch))

        lib.llama_set_abort_callback(self._ctx, self._abort_callback, None)
        worker = threading.Thread(target=run, name="llama_decode", daemon=True)
        try:
            worker.start()
            while worker.is_alive():
                worker.join(0.1)
        except BaseException:
            self._abort.set()
            if worker.ident is not None:  # started (an interrupt may land inside start())
                worker.join()
            raise
        finally:
            lib.llama_set_abort_callback(self._ctx, self._no_abort, None)
        return done[0]


_ENGINES: weakref.WeakSet[LlamaEngine] = weakref.WeakSet()


def interrupt_passes() -> None:
    """Stop the pass every llama.cpp engine of the process is running, from any thread: it raises
    infill.progress.Cancelled, and the chunks it finished stay in the cache (a left-to-right model's next prompt
    shares most of its prefix). A server calls this when the fill that runs is no longer wanted, so that a new
    request does not wait for a long prompt pass to end (infill.models.onnx.interrupt_passes does the same for
    ONNX Runtime)."""
    for engine in list(_ENGINES):
        engine.interrupt()


def _concat(parts: list[Any]) -> Any:
    import numpy as np

    return np.concatenate(parts)


class GGUFTokenizer:
    """The Tokenizer protocol over a GGUF file's vocabulary, through llama.cpp's own tokenizer (so text is split as
    the model was trained to see it). User text never turns into special tokens; decode concatenates the tokens'
    bytes (special tokens as their text)."""

    def __init__(self, engine: LlamaEngine, header: GGUFHeader, ids: dict[str, int] | None = None) -> None:
        self.lib, self.vocab = engine.lib, engine.vocab
        self.tokens = header.tokens
        self.types = header.token_types
        self._ids = ids if ids is not None else {t: i for i, t in enumerate(self.tokens)}
        self._pieces: dict[int, bytes] = {}
        self._buffer = ctypes.create_string_buffer(256)
        model, pre = header.metadata.get("tokenizer.ggml.model"), header.metadata.get("tokenizer.ggml.pre")
        self._pre = str(pre) if model == "gpt2" and str(pre) in PRE_TOKENIZERS else None

    def encode(self, text: str) -> list[int]:
        """`text` as tokens where it follows other text (the suffix after <SUF>, the text between two spans):
        decode(encode(text)) == text. llama.cpp puts a space before the first word of any text it tokenizes when
        the vocabulary says so (tokenizer.ggml.add_space_prefix, sentencepiece's dummy prefix: Code Llama's),
        which a suffix never had in training; `encode_start` keeps it, for the text that starts a prompt."""
        if self._adds_space:
            found = without_space_prefix(self.encode_start, self.piece, text)
            if found is not None:
                return found
        return self.encode_start(text)

    @functools.cached_property
    def _adds_space(self) -> bool:
        return without_space_prefix(self.encode_start, self.piece, "") is not None

    def encode_start(self, text: str) -> list[int]:
        """`text` as llama.cpp tokenizes it on its own: at the start of a prompt (the FIM prefix after <PRE>), where
        a sentencepiece vocabulary puts its space before the first word, as the model was trained."""
        data = text.encode("utf-8")
        if not data:
            return []
        room = len(data) + 16
        while True:
            buf = (self.lib.llama_token * room)()
            n = int(self.lib.llama_tokenize(self.vocab, data, len(data), buf, room, False, False))
            if n >= 0:
                return list(buf[:n])
            room = -n

    def piece(self, token: int) -> bytes:
        """The bytes token `token` stands for (a special token's text)."""
        found = self._pieces.get(token)
        if found is None:
            n = int(self.lib.llama_token_to_piece(self.vocab, token, self._buffer, 256, 0, True))
            if n < 0:
                big = ctypes.create_string_buffer(-n)
                n = int(self.lib.llama_token_to_piece(self.vocab, token, big, -n, 0, True))
                found = big.raw[:n]
            else:
                found = self._buffer.raw[:n]
            self._pieces[token] = found
        return found

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.piece(int(t)) for t in ids).decode("utf-8", errors="replace")

    def token_bytes(self, token: int) -> bytes:
        """The bytes token `token` writes as text (b"" for control tokens and padding), for token healing."""
        return b"" if token in self._special else self.piece(token)

    @functools.cached_property
    def _special(self) -> set[int]:
        return self.special_ids()

    def pretoken_start(self, text: str) -> int | None:
        """Where the last pre-token of `text` starts (a string offset), under the vocabulary's pre-tokenizer
        (PRE_TOKENIZERS), for token healing; None for a vocabulary whose pre-tokenizer is not known here."""
        return pretoken_start(named_pre_tokenizer(self._pre), text) if self._pre else None

    def token_id(self, token: str) -> int | None:
        """The id of a single (special) token by its text in the vocabulary, or None."""
        return self._ids.get(token)

    def size(self) -> int:
        """One more than the last id that is not padding (`[PAD<i>]` rows)."""
        last = max((i for i, t in enumerate(self.types) if t != TOKEN_UNUSED), default=len(self.tokens) - 1)
        return last + 1 if self.types else len(self.tokens)

    def special_ids(self) -> set[int]:
        """Control tokens (start, end, FIM and chat markers) and padding rows: never text."""
        return {i for i, t in enumerate(self.types) if t in (TOKEN_CONTROL, TOKEN_UNUSED)}

    def lead_ids(self) -> list[int]:
        """The start token when the vocabulary asks for one before any text (Code Llama, DeepSeek-Coder)."""
        if not self.lib.llama_vocab_get_add_bos(self.vocab):
            return []
        bos = int(self.lib.llama_vocab_bos(self.vocab))
        return [bos] if bos >= 0 else []

    def end_ids(self) -> set[int]:
        """The vocabulary's own end tokens: end of text, end of turn, and every other special token llama.cpp ends
        a generation at (its metadata's or its own list's: FIM padding, file and repo separators, such as
        CodeGemma's <|file_separator|>)."""
        ends = {int(self.lib.llama_vocab_eos(self.vocab)), int(self.lib.llama_vocab_eot(self.vocab))}
        special = (i for i, t in enumerate(self.types) if t in (TOKEN_CONTROL, TOKEN_USER_DEFINED))
        ends |= {i for i in special if self.lib.llama_vocab_is_eog(self.vocab, i)}
        return {i for i in ends if i >= 0}

    def fim_ids(self) -> tuple[int, int, int] | None:
        """The FIM tokens llama.cpp finds (the file's tokenizer.ggml.fim_*_token_id, else the spellings it knows),
        or None when it finds not all three."""
        lib, vocab = self.lib, self.vocab
        ids = (
            int(lib.llama_vocab_fim_pre(vocab)),
            int(lib.llama_vocab_fim_suf(vocab)),
            int(lib.llama_vocab_fim_mid(vocab)),
        )
        return ids if min(ids) >= 0 else None


def calibration_file(path: Path, ollama: str | None) -> Path:
    """Where a GGUF model's calibrated confidence is read from (infill eval calibrate --out writes it): beside the
    file as <name>.calibration.json; for an Ollama model (whose store is Ollama's), under data_dir() by the
    digest of its GGUF blob."""
    if ollama is not None:
        return data_dir() / "calibration" / f"{path.name}.json"
    return path.with_name(f"{path.stem}.calibration.json")


def load_gguf(path: Path, provenance: str, ollama: str | None, spec: ModelSpec) -> LoadedModel:
    """A GGUF file as a left-to-right FIM model (kind "ar") on llama.cpp. The header is checked first (not GGUF,
    cut short, more than the free memory: ModelError before anything is allocated); a vocabulary with part of a
    family's FIM tokens is refused; llama.cpp's own refusal (an architecture it does not know) is one line."""
    from infill.hardware import decode_threads, free_memory
    from infill.models import gguf
    from infill.models.autoregressive import WINDOW, CausalFim
    from infill.models.fim import FimTokens, find_fim
    from infill.models.hf_folder import END_TOKEN_CANDIDATES
    from infill.models.registry import LoadedModel

    if spec.engine not in ("auto", "llamacpp"):
        raise ModelError(f"--engine {spec.engine} does not run GGUF files; {spec.name} runs on llama.cpp")
    if spec.device == "cuda":
        raise ModelError(f"{spec.name}: GGUF models run on the CPU here (llama.cpp's CPU build); use --device cpu")
    header = gguf.check_split(gguf.read_header(path), free_memory("cpu"))
    ids = {t: i for i, t in enumerate(header.tokens)}
    fim = find_fim(ids.get, f"the vocabulary of {path}")
    window = min(header.context_length or WINDOW, WINDOW)
    engine = LlamaEngine(path, header, threads=decode_threads(), window=window)
    tokenizer = GGUFTokenizer(engine, header, ids)
    if fim is None and (named := tokenizer.fim_ids()) is not None:  # spelled otherwise: the ids llama.cpp uses
        fim = FimTokens("gguf", *named)
    ends = tokenizer.end_ids()
    for text in (*END_TOKEN_CANDIDATES, *(fim.ends if fim is not None else ())):
        found = tokenizer.token_id(text)
        if found is not None:
            ends.add(found)
    eos = int(engine.lib.llama_vocab_eos(engine.vocab))
    model = CausalFim.over(engine, tokenizer, fim, ends, window, eos if eos >= 0 else None)
    info = {
        "path": str(path),
        "source": provenance,
        "provenance": provenance,
        "engine": "llama.cpp",
        "architecture": header.architecture,
        "fim": fim.family if fim is not None else None,
        "parameters": header.parameters,
        "file_bytes": header.file_size,
        "threads": engine.threads,
        "max_length": model.max_length,
        "calibration": str(calibration_file(path, ollama)),
    }
    if ollama is not None:
        info["ollama"] = ollama
    return LoadedModel(name=spec.name, kind="ar", model=model, tokenizer=tokenizer, info=info)
