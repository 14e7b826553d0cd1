"""Frozen configuration objects, built once at the boundary (CLI, server, tests) and passed explicitly."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

DecoderName = Literal["assd", "sequential", "parallel", "beam", "confidence", "s2d2", "ssmd", "ptp"]
ModelKind = Literal["asarm", "blockdiff"]  # any-subset autoregressive (XLNet) or block diffusion
# The model kind each decoder runs (its function: infill.decoding.registry). Every other list of decoder names
# (the --decoder choices, the server's checks, the eval flags, the error messages) is derived from this table.
DECODER_KIND: dict[DecoderName, ModelKind] = {
    "assd": "asarm",
    "sequential": "asarm",
    "parallel": "asarm",
    "beam": "asarm",
    "confidence": "blockdiff",
    "s2d2": "blockdiff",
    "ssmd": "blockdiff",
    "ptp": "blockdiff",
}
# `--decoder` offers every decoder but beam search, which `--beam N` selects (with its width)
CHOOSABLE_DECODERS: tuple[DecoderName, ...] = tuple(d for d in get_args(DecoderName) if d != "beam")
DraftName = Literal["model", "ngram", "lookup"]
DeviceName = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class DecodeConfig:
    decoder: DecoderName = "assd"
    k: int = 10  # speculation width (ASSD) or chunk size (parallel); must be >= 2 for assd
    # "ngram" = Algorithm 2 of the ASSD paper (bigram draft from the visible context); "lookup" = copy what followed
    # the same tokens elsewhere in the text, verified in one pass (infill.decoding.lookup)
    draft: DraftName = "lookup"
    epsilon: float = 0.0  # LOSSY acceptance tolerance r < min(1, q/p + eps); 0 keeps sampling exact
    temperature: float = 1.0  # 0 means greedy (argmax) everywhere
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int = 0  # one torch.Generator is seeded with this
    beam: int = 4  # beam width of decoder "beam" (the most likely fill instead of a sample)
    # block diffusion (docs/blockdiff.md)
    block_size: int = 0  # block-diffusion block size; 0 = the model's own (from its config), 1 = plain AR
    threshold: float = 0.9  # confidence threshold tau for dynamic confidence decoding
    routing: str = "min-span"  # S2D2 routing policy name
    unmask_per_step: int = 0  # confidence decoding: 0 = dynamic (p > threshold, plus the argmax); n = static
    gamma: float = 1.0  # S2D2 tempering: accept w.p. min(1, (q/p)^gamma); 1 = exact ratio, < 1 LOSSY-lenient
    # SSMD (docs/ssmd.md, infill.decoding.ssmd; needs a model folder with ssmd_head.safetensors)
    ssmd_passes: int = 2  # K: causal-head passes per full forward (each verifies drafts up to one rejection)
    ssmd_window: int = 0  # drafted positions per full forward; 0 = a cosine schedule over the block


# What the tool does when the user names no decoder (`infill fill`, the server, the daemon, `infill eval`): beam
# search for the most likely fill, which writes the right line about twice as often as sampling or greedy with
# the shipped model (docs/decoding.md, "Defaults"). The library's DecodeConfig() keeps sampling with ASSD.
TOOL_DECODE = DecodeConfig(decoder="beam", temperature=0.0)
# `infill eval` measures what `infill fill` does by default; deterministic, so a measurement is one number
EVAL_DECODE = TOOL_DECODE


def choose_decoder(given: Mapping[str, Any]) -> dict[str, Any]:
    """The decode fields of a request in which the user may have left `decoder` and `beam` unset (None or
    absent), with the decoder chosen: `beam` N > 0 selects beam search of width N; `beam` 0 or a named
    decoder keeps that decoder (0 with none named: DecodeConfig's sampler); a temperature above 0 with neither
    samples with DecodeConfig's decoder; otherwise TOOL_DECODE's. Unset temperature is TOOL_DECODE's."""
    out = {k: v for k, v in given.items() if v is not None or k not in ("decoder", "beam", "temperature")}
    beam, decoder = out.pop("beam", None), out.pop("decoder", None)
    out.setdefault("temperature", TOOL_DECODE.temperature)
    if beam:
        return {**out, "decoder": "beam", "beam": beam}
    if decoder is None and beam is None:
        sampling = isinstance(out["temperature"], (int, float)) and out["temperature"] > 0
        decoder = DecodeConfig.decoder if sampling else TOOL_DECODE.decoder
    return {**out, "decoder": decoder or DecodeConfig.decoder}


@dataclass(frozen=True)
class ModelSpec:
    name: str = "default"  # packaged model name, a local folder path, or an HF repo id already in the local cache
    device: DeviceName = "auto"
    bf16: bool = True  # bf16 autocast on fp32 weights (CPU with AMX, or CUDA)
    revision: str | None = None  # HF cache revision, e.g. "code" or "nlp" for the ASSD checkpoints
    mask_token: str | None = None  # block-diffusion mask token override (e.g. "<|MASK|>"); None = from the folder


@dataclass(frozen=True)
class FillOptions:
    tokens: int | None = None  # token budget per span; None = the length policy (see api.py)
    candidates: int = 1  # -n: candidates ranked by log-likelihood
    max_resample: int = 4  # extra samples when a candidate adds syntax errors
    syntax_check: bool = True
    retrieve: bool = True  # also rank lines from the user's code as candidates for a one-line span
    context: tuple[str, ...] = ()  # texts of other files to take candidate lines from (--context)
    extra: dict[str, str] = field(default_factory=dict)
    # when no candidate passes the checks: False raises NoValidFillError (nothing is written); True returns the
    # most likely candidate with a warning (`--allow-syntax-errors`)
    allow_syntax_errors: bool = False


def decode_label(cfg: DecodeConfig) -> str:
    """How reports name a decoding setting: "beam 4", "assd k=10 T=1"."""
    if cfg.decoder == "beam":
        return f"beam {cfg.beam}"
    return f"{cfg.decoder} k={cfg.k} T={cfg.temperature:g}"


def decoders_for(kind: ModelKind) -> tuple[DecoderName, ...]:
    """The decoders that run a model of `kind`, in DecoderName's order."""
    return tuple(d for d in get_args(DecoderName) if DECODER_KIND[d] == kind)


if set(DECODER_KIND) != set(get_args(DecoderName)):  # pragma: no cover - a decoder added to one list only
    raise AssertionError("DECODER_KIND must name every DecoderName")


def check_decode(cfg: DecodeConfig) -> None:
    """InputError (exit 2) for settings no decoder can use: a non-finite or out-of-range number, a wrong type, an
    unknown draft, a seed torch cannot take. Checked before any model runs (fill_text)."""
    from infill.errors import InputError

    kinds: dict[str, tuple[tuple[type, ...], str]] = {
        "float": ((int, float), "a number"),
        "int": ((int,), "an integer"),
    }
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        expected, what = kinds.get(str(f.type), ((str,), "a string"))  # str and the Literal names
        if isinstance(value, bool) or not isinstance(value, expected):
            raise InputError(f"{f.name} must be {what}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{f.name} must be a finite number, got {value!r}")
    problems = [
        (cfg.temperature < 0, f"temperature must be >= 0, got {cfg.temperature}"),
        (not 0 < cfg.top_p <= 1, f"top_p must be in (0, 1], got {cfg.top_p}"),
        (cfg.top_k < 0, f"top_k must be >= 0, got {cfg.top_k}"),
        (cfg.k < 1, f"k must be >= 1, got {cfg.k}"),
        (cfg.epsilon < 0, f"epsilon must be >= 0, got {cfg.epsilon}"),
        (not 0 <= cfg.threshold <= 1, f"threshold must be in [0, 1], got {cfg.threshold}"),
        (cfg.gamma <= 0, f"gamma must be > 0, got {cfg.gamma}"),
        (cfg.block_size < 0, f"block_size must be >= 0, got {cfg.block_size}"),
        (cfg.unmask_per_step < 0, f"unmask_per_step must be >= 0, got {cfg.unmask_per_step}"),
        (cfg.beam < 1, f"beam must be >= 1, got {cfg.beam}"),
        (cfg.ssmd_passes < 1, f"ssmd_passes must be >= 1, got {cfg.ssmd_passes}"),
        (cfg.ssmd_window < 0, f"ssmd_window must be >= 0 (0 = cosine schedule), got {cfg.ssmd_window}"),
        (not -(2**63) <= cfg.seed <= 2**64 - 1, f"seed must fit in 64 bits, got {cfg.seed}"),
        (
            cfg.draft not in get_args(DraftName),
            f"draft must be one of {', '.join(get_args(DraftName))}, got {cfg.draft!r}",
        ),
    ]
    for bad, message in problems:
        if bad:
            raise InputError(message)
