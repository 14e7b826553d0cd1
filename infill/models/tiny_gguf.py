"""GGUF files written from the left-to-right model folders of infill.models.tiny, for tests and benchmarks:
llama.cpp runs the same weights that transformers runs from the folder, so the two can be compared.

`gguf_from_folder` converts a Qwen2, Llama or StarCoder2 folder (config.json, model.safetensors, tokenizer.json
with a byte-level BPE) the way llama.cpp's convert_hf_to_gguf.py does: llama.cpp's tensor names, the Llama query
and key rows permuted to llama.cpp's rotary layout, the vocabulary with each token's type (special tokens as
control tokens, so the family's FIM tokens are found by their text), the merges, the end and start tokens, and
`[PAD<i>]` tokens up to the network's vocabulary size. Weights are f32 (exact comparisons) or Q8_0 (what users
run; 1-D tensors stay f32).

Needs the `gguf` package (in the `llamacpp` and `dev` extras).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# model_type -> (GGUF architecture, the tokenizer's pre-tokenizer name llama.cpp knows)
ARCHITECTURES = {"qwen2": ("qwen2", "qwen2"), "llama": ("llama", "default"), "starcoder2": ("starcoder2", "default")}
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


def tiny_gguf(path: str | Path, family: str = "qwen", *, qtype: str = "f32", **kwargs: Any) -> Path:
    """A RANDOM model of infill.models.tiny.tiny_ar_checkpoint (the same `family`, seed and shape arguments),
    written as one GGUF file at `path`; its folder is kept beside it as `<path>.folder`."""
    from infill.models.tiny import tiny_ar_checkpoint

    path = Path(path)
    folder = tiny_ar_checkpoint(path.with_name(path.name + ".folder"), family, **kwargs)
    return gguf_from_folder(folder, path, qtype=qtype)


@dataclass(frozen=True)
class Vocabulary:
    """A byte-level BPE vocabulary as GGUF stores it: tokens by id, their types (TOKEN_*), the merges ("a b"),
    the start and end ids, and whether a start token goes before any text."""

    tokens: list[str]
    types: list[int]
    merges: list[str]
    eos: int | None = None
    bos: int | None = None
    adds_bos: bool = False
    pre: str = "default"  # the pre-tokenizer llama.cpp applies (its name for the regex)
    model: str = "gpt2"  # "llama": a sentencepiece vocabulary (scores instead of merges, <0xNN> byte tokens)
    scores: list[float] | None = None  # a sentencepiece vocabulary's piece scores (higher merges first)
    unk: int | None = None
    special: dict[str, int] | None = None  # other special ids as tokenizer.ggml.<key>_token_id (fim_pre, fim_sep ...)


def gguf_from_folder(folder: str | Path, path: str | Path, *, qtype: str = "f32", name: str | None = None) -> Path:
    """Write the left-to-right model folder `folder` as the GGUF file `path` (module docstring); `qtype` is
    "f32" or "q8_0"."""
    from safetensors.numpy import load_file

    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    return write_gguf(path, cfg, weights, folder_vocabulary(folder, cfg), qtype=qtype, name=name or folder.name)


def write_gguf(
    path: str | Path,
    cfg: dict[str, Any],
    weights: Mapping[str, Any],
    vocab: Vocabulary,
    *,
    qtype: str = "f32",
    name: str,
) -> Path:
    """Write a transformers causal LM (`cfg`: its config as a dict; `weights`: its state dict as numpy arrays) and
    `vocab` as the GGUF file `path` (module docstring)."""
    import gguf
    import numpy as np

    path = Path(path)
    model_type = cfg["model_type"]
    if model_type not in ARCHITECTURES:
        raise ValueError(f"cannot write a {model_type} model as GGUF (known: {', '.join(ARCHITECTURES)})")
    arch, pre = ARCHITECTURES[model_type]
    hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    rope = cfg.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta") or cfg.get("rope_theta") or 10000.0)

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(int(cfg.get("max_position_embeddings") or 4096))
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(int(cfg["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(theta)
    if model_type == "starcoder2":
        writer.add_layer_norm_eps(float(cfg.get("norm_epsilon") or 1e-5))
    else:
        writer.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps") or 1e-6))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == "q8_0" else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model(vocab.model)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    if vocab.model == "gpt2":
        writer.add_tokenizer_pre(vocab.pre if vocab.pre != "default" else pre)
        writer.add_token_merges(vocab.merges)
    if vocab.scores is not None:
        writer.add_token_scores(vocab.scores)
    if vocab.unk is not None:
        writer.add_unk_token_id(vocab.unk)
    if vocab.eos is not None:
        writer.add_eos_token_id(vocab.eos)
    if vocab.bos is not None:
        writer.add_bos_token_id(vocab.bos)
    writer.add_add_bos_token(vocab.adds_bos)
    for key, token in (vocab.special or {}).items():
        writer.add_uint32(f"tokenizer.ggml.{key}_token_id", token)

    for hf_name, gguf_name in _tensor_names(layers, weights):
        data = np.ascontiguousarray(weights[hf_name], dtype=np.float32)
        if model_type == "llama" and hf_name.endswith("q_proj.weight"):
            data = _permute(data, heads)
        elif model_type == "llama" and hf_name.endswith("k_proj.weight"):
            data = _permute(data, kv_heads)
        if qtype == "q8_0" and data.ndim == 2 and data.shape[-1] % 32 == 0:
            kind = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(gguf_name, gguf.quants.quantize(data, kind), raw_dtype=kind)
        else:
            writer.add_tensor(gguf_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _permute(w: Any, n_head: int) -> Any:
    """Query / key rows of a Llama layer from transformers' rotary layout (halves) to llama.cpp's (pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tensor_names(layers: int, weights: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(transformers name, llama.cpp name) of every tensor the folder holds."""
    per_layer = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "mlp.c_fc": "ffn_up",  # StarCoder2
        "mlp.c_proj": "ffn_down",
    }
    out = [("model.embed_tokens.weight", "token_embd.weight")]
    for i in range(layers):
        for hf, name in per_layer.items():
            for suffix in ("weight", "bias"):
                key = f"model.layers.{i}.{hf}.{suffix}"
                if key in weights:
                    out.append((key, f"blk.{i}.{name}.{suffix}"))
    for suffix in ("weight", "bias"):
        if f"model.norm.{suffix}" in weights:
            out.append((f"model.norm.{suffix}", f"output_norm.{suffix}"))
    if "lm_head.weight" in weights:  # tied embeddings have none: llama.cpp reads token_embd then
        out.append(("lm_head.weight", "output.weight"))
    missing = set(weights) - {hf for hf, _ in out}
    if missing:
        raise ValueError(f"tensors without a GGUF name: {sorted(missing)[:4]}")
    return out


def folder_vocabulary(folder: Path, cfg: dict[str, Any]) -> Vocabulary:
    """The byte-level BPE of a folder's tokenizer.json as GGUF stores it: tokens by id (padded with `[PAD<i>]` to
    the network's vocabulary), special tokens as control tokens, the merges, the start and end tokens."""
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab: dict[str, int] = dict(data["model"]["vocab"])
    special: set[int] = set()
    added: set[int] = set()
    for token in data.get("added_tokens", []):
        vocab[token["content"]] = token["id"]
        (special if token.get("special") else added).add(token["id"])
    size = int(cfg["vocab_size"])
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [TOKEN_UNUSED] * size
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = TOKEN_CONTROL if i in special else TOKEN_USER_DEFINED if i in added else TOKEN_NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    tcfg_path = folder / "tokenizer_config.json"
    tcfg = json.loads(tcfg_path.read_text()) if tcfg_path.exists() else {}
    eos, bos = cfg.get("eos_token_id"), cfg.get("bos_token_id")
    return Vocabulary(
        tokens,
        types,
        merges,
        eos if isinstance(eos, int) else None,
        bos if isinstance(bos, int) else None,
        adds_bos=data.get("post_processor") is not None and "bos_token" in tcfg,
    )


class RandomQwen2(Mapping[str, Any]):
    """The state dict of a RANDOM Qwen2 network of config `cfg` (tied embeddings), each tensor drawn from
    N(0, 0.02) when it is read (norms are ones), so that writing a 1.5B shape as Q8_0 never holds it in f32."""

    def __init__(self, cfg: dict[str, Any], seed: int = 0) -> None:
        hidden, inner, heads = int(cfg["hidden_size"]), int(cfg["intermediate_size"]), int(cfg["num_attention_heads"])
        kv = int(cfg["num_key_value_heads"]) * (hidden // heads)
        self.seed = seed
        self.shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (int(cfg["vocab_size"]), hidden)}
        for i in range(int(cfg["num_hidden_layers"])):
            at = f"model.layers.{i}."
            self.shapes.update(
                {
                    at + "input_layernorm.weight": (hidden,),
                    at + "self_attn.q_proj.weight": (hidden, hidden),
                    at + "self_attn.q_proj.bias": (hidden,),
                    at + "self_attn.k_proj.weight": (kv, hidden),
                    at + "self_attn.k_proj.bias": (kv,),
                    at + "self_attn.v_proj.weight": (kv, hidden),
                    at + "self_attn.v_proj.bias": (kv,),
                    at + "self_attn.o_proj.weight": (hidden, hidden),
                    at + "post_attention_layernorm.weight": (hidden,),
                    at + "mlp.gate_proj.weight": (inner, hidden),
                    at + "mlp.up_proj.weight": (inner, hidden),
                    at + "mlp.down_proj.weight": (hidden, inner),
                }
            )
        self.shapes["model.norm.weight"] = (hidden,)

    def __getitem__(self, name: str) -> Any:
        import numpy as np

        shape = self.shapes[name]
        if name.endswith("norm.weight"):
            return np.ones(shape, dtype=np.float32)
        rng = np.random.default_rng([self.seed, list(self.shapes).index(name)])
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)


def random_qwen_gguf(path: str | Path, shape: dict[str, Any], texts: list[str], *, qtype: str = "q8_0") -> Path:
    """A RANDOM Qwen2.5-Coder-like model of transformers config `shape` (e.g. infill.models.tiny.QWEN_CODER_05B_SHAPE)
    as a GGUF file, for benchmarks: a byte-level BPE of 8,192 tokens trained on `texts` with Qwen's special tokens,
    padded to the shape's vocabulary, and random weights (RandomQwen2) in `qtype`. The tokenizer is kept beside the
    file as <path>.tokenizer/."""
    from infill.models.tiny import AR_FAMILIES
    from infill.models.tokenizer import train_byte_bpe

    path = Path(path)
    folder = path.with_name(path.name + ".tokenizer")
    folder.mkdir(parents=True, exist_ok=True)
    specials = AR_FAMILIES["qwen"][1]
    tok = train_byte_bpe(texts, 8192, specials)
    tok.save(str(folder / "tokenizer.json"))
    eos = int(tok.token_to_id("<|endoftext|>"))
    cfg = {"model_type": "qwen2", "rms_norm_eps": 1e-6, "rope_theta": 1e6, "eos_token_id": eos, **shape}
    return write_gguf(path, cfg, RandomQwen2(cfg), folder_vocabulary(folder, cfg), qtype=qtype, name=path.stem)
