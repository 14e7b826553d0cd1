"""Model folders on disk, and stock transformers decoders from a local folder without remote code: what the
loaders (infill.models.loading, infill.models.blockdiff, infill.models.autoregressive) and the catalog share.

- a folder's JSON files (read_json) and the parameter count in its safetensors headers;
- the tokenizer (HFTokenizer: user text never turns into special tokens);
- the checks made before any weight is read: the folder's tokenizer must fit the network's vocabulary, and the
  network must fit in memory (its parameter count, from the safetensors headers or else estimated from
  config.json, times the bytes per weight it is loaded with: 4 for fp32, 2 for bf16);
- the end-of-text tokens a folder names;
- loading the weights into a stock class picked by the caller.

Importing this module does not import torch.
"""

from __future__ import annotations

import functools
import json
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infill.errors import ModelError, one_line
from infill.models.tokenizer import without_space_prefix

END_TOKEN_CANDIDATES = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>")
_CONFIG_DROP = ("auto_map", "architectures", "model_type", "infill", "transformers_version")
BYTES_PER_PARAMETER = {"float32": 4, "bfloat16": 2}
MAX_HEADER = 100 << 20  # the safetensors format's own limit on its JSON header


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a model can use")


def read_json(path: Path) -> dict[str, Any]:
    """A model folder's JSON file (config.json, generation_config.json ...) as a dict; ModelError otherwise, and for
    NaN or Infinity anywhere in it (Python's JSON reads them; `layer_norm_eps: NaN` failed deep inside torch)."""
    if path.exists() and not path.is_file():  # a named pipe would block the read
        raise ModelError(f"cannot read {path}: not a regular file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except OSError as exc:  # its reason, without "[Errno 2] ..." repeating the path
        raise ModelError(f"cannot read {path}: {exc.strerror or one_line(str(exc))}") from exc
    except ValueError as exc:
        raise ModelError(f"cannot read {path}: {one_line(str(exc))}") from exc
    except RecursionError:
        raise ModelError(f"cannot read {path}: nested too deeply") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path} is not a JSON object")
    return data


def safetensors_parameters(folder: Path) -> int | None:
    """The network's parameter count, from the safetensors headers of its weight files (`model.safetensors` or the
    shards `model-*-of-*.safetensors`; any *.safetensors when the folder has neither): files beside the weights,
    such as a PTP adapter or an SSMD head, are not the network's. None without such files or when one is not a
    safetensors file."""
    files = sorted(folder.glob("model.safetensors")) + sorted(folder.glob("model-*-of-*.safetensors"))
    files = files or sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        if not f.is_file():  # a named pipe would block the read
            return None
        try:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > min(f.stat().st_size - 8, MAX_HEADER):  # not a safetensors file: never read n bytes
                    return None
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            return None
        if not isinstance(header, dict):
            return None
        for key, meta in header.items():
            if key == "__metadata__":
                continue
            shape = meta.get("shape", []) if isinstance(meta, dict) else []
            if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
                return None  # not a header safetensors wrote
            count = 1
            for dim in shape:
                count *= dim
            total += count
    return total


class HFTokenizer:
    """The Tokenizer protocol over a transformers tokenizer. User text never turns into special tokens."""

    def __init__(self, tok: Any) -> None:
        self.hf = tok

    def encode(self, text: str) -> list[int]:
        """`text` as tokens where it follows other text: without the space a sentencepiece tokenizer (Llama's,
        Code Llama's) puts before the first word of every text (infill.models.tokenizer.without_space_prefix)."""
        if self._adds_space:
            found = without_space_prefix(self.encode_start, self.token_bytes, text)
            if found is not None:
                return found
        return self.encode_start(text)

    def encode_start(self, text: str) -> list[int]:
        """`text` as the tokenizer encodes it on its own: at the start of a prompt (the FIM prefix)."""
        return list(self.hf.encode(text, add_special_tokens=False, split_special_tokens=True, verbose=False))

    @functools.cached_property
    def _adds_space(self) -> bool:
        return without_space_prefix(self.encode_start, self.token_bytes, "") is not None

    def decode(self, ids: list[int]) -> str:
        return str(self.hf.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    def pretoken_start(self, text: str) -> int | None:
        """Where the last pre-token of `text` starts, for a fast tokenizer (infill.models.tokenizer)."""
        from infill.models.tokenizer import pretoken_start

        backend = getattr(self.hf, "backend_tokenizer", None)
        return pretoken_start(backend, text) if backend is not None else None

    def token_bytes(self, i: int) -> bytes:
        """The bytes one token writes (b"" for special tokens): GPT-2's byte alphabet for byte-level BPE,
        sentencepiece's "▁" for a space and <0xNN> for a byte otherwise."""
        from infill.models.tokenizer import piece_bytes

        if i in self._specials:
            return b""
        piece = self.hf.convert_ids_to_tokens(int(i))
        return piece_bytes(piece, self._byte_level) if isinstance(piece, str) else b""

    @functools.cached_property
    def _byte_level(self) -> bool:
        backend = getattr(self.hf, "backend_tokenizer", None)
        return "ByteLevel" in type(getattr(backend, "decoder", None)).__name__

    @functools.cached_property
    def _specials(self) -> set[int]:
        return self.special_ids()

    def token_id(self, token: str) -> int | None:
        """The id of a single (special) token, or None when the vocabulary lacks it."""
        vocab = self.hf.get_vocab()
        return int(vocab[token]) if token in vocab else None

    def size(self) -> int:
        """One more than the largest id the tokenizer can produce."""
        return max(self.hf.get_vocab().values(), default=-1) + 1

    def special_ids(self) -> set[int]:
        """Ids of the tokens marked special (BOS, end, FIM and chat markers...): never text."""
        found = {int(i) for i in getattr(self.hf, "all_special_ids", [])}
        for i, added in getattr(self.hf, "added_tokens_decoder", {}).items():
            if getattr(added, "special", False):
                found.add(int(i))
        return found

    def lead_ids(self) -> list[int]:
        """The tokens the tokenizer puts before any text (a BOS for Llama-family tokenizers, none for Qwen's)."""
        return [int(i) for i in self.hf.encode("", add_special_tokens=True)]

    @property
    def chat_template(self) -> str | None:
        return getattr(self.hf, "chat_template", None)

    def chat_prompt(self, user: str) -> list[int]:
        text = self.hf.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
        return list(self.hf.encode(text, add_special_tokens=False))


def model_folder(path: str | Path) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"model folder not found: {folder}")
    return folder


def load_tokenizer(folder: Path) -> HFTokenizer:
    """The folder's tokenizer (tokenizer.json / tokenizer_config.json), read locally, without remote code."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if not (folder / "tokenizer.json").exists() and not (folder / "tokenizer_config.json").exists():
        raise ModelError(f"{folder} has no tokenizer.json")
    with quiet_transformers():
        try:
            tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
        except (ValueError, OSError, KeyError, TypeError, StrictDataclassError):
            # e.g. tokenizer_config names a remote-code class, or config.json is one the network's loader refuses
            # (and says why): the fast tokenizer file alone is enough
            tok_file = folder / "tokenizer.json"
            if not tok_file.exists():
                raise ModelError(f"{folder}: cannot load its tokenizer without remote code") from None
            tok = PreTrainedTokenizerFast(tokenizer_file=str(tok_file))
            tcfg = folder / "tokenizer_config.json"
            if tcfg.exists():
                template = read_json(tcfg).get("chat_template")
                if isinstance(template, str):
                    tok.chat_template = template
    if not tok.encode("x", add_special_tokens=False):  # tokenizer_config.json without the files it describes
        raise ModelError(f"{folder}: its tokenizer has no vocabulary (tokenizer.json is missing)")
    return HFTokenizer(tok)


def generation_config(folder: Path) -> dict[str, Any]:
    path = folder / "generation_config.json"
    return read_json(path) if path.exists() else {}


def check_vocabulary(folder: Path, raw: dict[str, Any], tokenizer: HFTokenizer) -> None:
    """ModelError when the tokenizer makes ids the network has no embedding for (config and tokenizer from
    different models). A vocabulary larger than the tokenizer is normal: its rows are padding."""
    vocab = raw.get("vocab_size")
    size = tokenizer.size()
    if isinstance(vocab, int) and size > vocab:
        raise ModelError(
            f"{folder}: the tokenizer has {size} tokens but config.json's vocab_size is {vocab}: "
            "the tokenizer and the weights belong to different models"
        )


def estimate_parameters(folder: Path, raw: dict[str, Any]) -> int | None:
    """The network's parameter count: from the safetensors headers when the folder has them, else from the shape
    in config.json (a decoder with gated feed-forward layers; None when the config does not say enough)."""
    exact = safetensors_parameters(folder)
    if exact:
        return exact
    hidden, layers, vocab = raw.get("hidden_size"), raw.get("num_hidden_layers"), raw.get("vocab_size")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, layers, vocab)):
        return None
    assert isinstance(hidden, int) and isinstance(layers, int) and isinstance(vocab, int)
    heads = int(raw.get("num_attention_heads") or 1)
    kv_heads = int(raw.get("num_key_value_heads") or heads)
    head_dim = int(raw.get("head_dim") or hidden // heads)
    inner = int(raw.get("intermediate_size") or 4 * hidden)
    attention = 2 * hidden * head_dim * (heads + kv_heads)
    feed_forward = (2 if str(raw.get("model_type")) == "starcoder2" else 3) * hidden * inner
    embeddings = vocab * hidden * (1 if raw.get("tie_word_embeddings", True) else 2)
    return layers * (attention + feed_forward) + embeddings


def check_memory(folder: Path, raw: dict[str, Any], device: str, dtype: str = "float32") -> None:
    """ModelError when the network's weights alone (in `dtype`) would not fit in the memory free on `device` (RAM,
    or the GPU's), estimated before any weight is read."""
    from infill.hardware import free_memory

    params = estimate_parameters(folder, raw)
    free = free_memory(device)
    if params is None or free is None:
        return
    need = params * BYTES_PER_PARAMETER[dtype]
    if need > free:
        where = "GPU memory" if device == "cuda" else "memory"
        raise ModelError(
            f"{folder}: its {params / 1e9:.1f}B parameters need about {need / 2**30:.1f} GiB of {where} "
            f"({dtype}), but {free / 2**30:.1f} GiB is free; close other programs or use a smaller model"
        )


def end_token_ids(
    raw: dict[str, Any], gen: dict[str, Any], tokenizer: HFTokenizer, extra: tuple[str, ...] = ()
) -> set[int]:
    """Ids that end a generation: eos ids of config.json and generation_config.json, the tokenizer's eos token,
    and whichever of END_TOKEN_CANDIDATES and `extra` the tokenizer has."""
    end_ids: set[int] = set()
    for src in (raw.get("eos_token_id"), gen.get("eos_token_id")):
        if isinstance(src, int):
            end_ids.add(src)
        elif isinstance(src, list):
            end_ids.update(int(x) for x in src)
    if getattr(tokenizer.hf, "eos_token_id", None) is not None:
        end_ids.add(int(tokenizer.hf.eos_token_id))
    for tok in (*END_TOKEN_CANDIDATES, *extra):
        tid = tokenizer.token_id(tok)
        if tid is not None:
            end_ids.add(tid)
    return end_ids


def load_network(
    folder: Path,
    raw: dict[str, Any],
    class_name: str,
    device: str,
    attn_implementation: str = "sdpa",
    dtype: str = "float32",
) -> Any:
    """The folder's weights in the stock transformers class `class_name` (in `dtype`, eval mode, on `device`).
    `auto_map` and the folder's own modeling files are ignored: nothing from the folder is executed."""
    import torch
    import transformers
    from safetensors import SafetensorError

    cls = getattr(transformers, class_name)
    try:
        config = cls.config_class(**{k: v for k, v in raw.items() if k not in _CONFIG_DROP})
    except Exception as exc:  # ValueError, TypeError, huggingface_hub's StrictDataclassError (not a ValueError)
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise ModelError(f"{folder / 'config.json'}: {class_name} refuses it: {lines[-1] if lines else exc}") from exc
    try:
        with quiet_transformers():  # "a model of type sdar ..." is expected here: that is the point
            model, report = cls.from_pretrained(
                str(folder),
                config=config,
                dtype=getattr(torch, dtype),
                local_files_only=True,
                trust_remote_code=False,
                attn_implementation=attn_implementation,
                output_loading_info=True,
                ignore_mismatched_sizes=True,  # reported below, with the tensor's name and shapes
            )
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        raise ModelError(f"{folder}: cannot load weights into {class_name}: {exc}") from exc
    _check_loaded(folder, report)
    return model.to(device).eval()


def _check_loaded(folder: Path, report: dict[str, Any]) -> None:
    """ModelError for weights that the folder's files lack, or hold in another shape than config.json gives them.
    transformers fills either with random values, and only says so in a log that is silenced here: the model
    would fill with noise."""

    def more(n: int) -> str:
        return f" (and {n - 1} more)" if n > 1 else ""

    mismatched = sorted(report.get("mismatched_keys") or [], key=lambda entry: str(entry[0]))
    if mismatched:
        name, in_file, by_config = mismatched[0]
        raise ModelError(
            f"{folder}: the weights do not fit config.json: {name} is {list(in_file)} in the file but "
            f"{list(by_config)} by the config{more(len(mismatched))}"
        )
    missing = sorted(str(name) for name in report.get("missing_keys") or [])
    if missing:
        raise ModelError(
            f"{folder}: the weights lack {missing[0]}{more(len(missing))}: a file cut short or of another model"
        )


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' notices and progress bars for one call, restoring its settings afterwards."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def hf_cache_dir() -> Path:
    """The HF hub cache, resolved the way huggingface_hub does (without importing it)."""
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")  # the older name still counts
    if hub:
        return Path(hub).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"
