"""Frozen configuration objects, built once at the boundary (CLI, server, tests) and passed explicitly."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar

from infill.errors import DecodeError, InputError
from infill.routing_options import parse_routing

# Decoders and drafts are registered once, in DECODERS and DRAFTS below; every other list of their names (the
# --decoder and --draft choices and help, the server's checks, the error messages, the
# tables in docs/decoding.md, which a test holds against these) is derived from those two records.
DecoderName = str  # a key of DECODERS
DraftName = str  # a key of DRAFTS
# a model kind's name, a key of infill.core.kinds.KINDS: "asarm" (any-subset, XLNet), "blockdiff" (block
# diffusion), "ar" (a left-to-right code model with FIM tokens), "remote" (one on a model server), or a registered
# one; each kind's module there names the decoders and drafts it runs
ModelKind = str
# what a decoder's function takes: the any-subset run (infill.decoding.problem.LeftToRight) or a block-diffusion
# generation (infill.decoding.blockfill.Generation)
DecoderFamily = Literal["any-subset", "block"]
DeviceName = Literal["auto", "cpu", "cuda"]
# what runs the AS-ARM's cached pass: eager PyTorch, or ONNX Runtime on a graph exported from the same module
# (fp32, exact to 1e-5; or int8 weights, not exact); auto = onnx when the `onnx` extra is installed and the
# device is the CPU, else torch (infill.models.xlnet.resolve_engine, docs/performance.md); auto-int8 = auto, with
# onnx-int8 where auto would run onnx (the language server's default: the same suggestions, sooner); for a kind
# without int8 weights it is auto
EngineName = Literal["auto", "auto-int8", "torch", "onnx", "onnx-int8"]


T = TypeVar("T")
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # what torch.Generator.manual_seed accepts
MAX_GAMMA = 100.0  # S2D2 tempering: (q/p)^100 already rejects every draft the verifier does not all but repeat


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise DecodeError(message)


# ---- each decoder's options: its own small frozen dataclass, checked when it is built --------------------
# A field is named after the DecodeConfig field it is read from, and its default is DecodeConfig's default, so
# a default is declared once (here). `decoder_options(cfg)` builds the options of cfg.decoder: the boundary
# (check_decode: the CLI, the server, fill_text) and every decoder build them, so a bad value is one
# DecodeError (exit 2) with one message wherever it comes from.


@dataclass(frozen=True)
class Sampling:
    """What every sampler shares: the transform of the logits (the same for drafts and verifiers, so the
    exactness guarantee holds for the transformed joint) and the seed of the one torch.Generator."""

    temperature: float = 1.0  # 0 means greedy (argmax) everywhere
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int = 0

    def __post_init__(self) -> None:
        _need(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}")
        _need(self.top_k >= 0, f"top-k must be >= 0 (0 = off), got {self.top_k}")
        _need(0.0 < self.top_p <= 1.0, f"top-p must be in (0, 1], got {self.top_p}")
        _need(SEED_MIN <= self.seed <= SEED_MAX, f"seed must fit in 64 bits, got {self.seed}")


@dataclass(frozen=True)
class SequentialOptions:
    """Sequential decoding has no options of its own (Sampling only)."""


@dataclass(frozen=True)
class AssdOptions:
    k: int = 10  # speculation width: tokens drafted per step (the longest lookup draft)
    draft: DraftName = "lookup"  # where the drafts come from: a key of DRAFTS
    epsilon: float = 0.0  # LOSSY acceptance tolerance r < min(1, q/p + eps); 0 keeps sampling exact

    def __post_init__(self) -> None:
        _need(self.draft in DRAFTS, f"draft must be one of {', '.join(DRAFTS)}, got {self.draft!r}")
        least = DRAFTS[self.draft].min_k
        _need(self.k >= least, f"with the {self.draft} draft, k must be at least {least}, got {self.k}")
        _need(self.epsilon >= 0, f"epsilon must be >= 0, got {self.epsilon}")


@dataclass(frozen=True)
class ParallelOptions:
    k: int = AssdOptions.k  # chunk size: positions filled per pass

    def __post_init__(self) -> None:
        _need(self.k >= 1, f"parallel decoding needs a chunk size k >= 1, got {self.k}")


@dataclass(frozen=True)
class BeamOptions:
    beam: int = 4  # beam width (1 = greedy)

    def __post_init__(self) -> None:
        _need(self.beam >= 1, f"beam width must be at least 1, got {self.beam}")


@dataclass(frozen=True)
class BlockOptions:
    """Confidence decoding of a block-diffusion model (docs/blockdiff.md); the other block decoders add theirs."""

    block_size: int = 0  # 0 = the model's own (from its config), 1 = plain AR
    threshold: float = 0.9  # confidence threshold tau for dynamic confidence decoding
    unmask_per_step: int = 0  # 0 = dynamic (p > threshold, plus the argmax); n = static

    def __post_init__(self) -> None:
        _need(self.block_size >= 0, f"block size must be >= 1 (0 = the model's own), got {self.block_size}")
        _need(0.0 <= self.threshold <= 1.0, f"confidence threshold must be in [0, 1], got {self.threshold}")
        _need(self.unmask_per_step >= 0, f"unmask_per_step must be >= 0 (0 = dynamic), got {self.unmask_per_step}")


@dataclass(frozen=True)
class S2D2Options(BlockOptions):
    routing: str = "min-span"  # routing policy (infill.routing_options.parse_routing parses and checks it)
    gamma: float = 1.0  # tempering: accept w.p. min(1, (q/p)^gamma); 1 = exact ratio, < 1 LOSSY-lenient

    def __post_init__(self) -> None:
        super().__post_init__()
        _need(0 < self.gamma <= MAX_GAMMA, f"tempering gamma must be in (0, {MAX_GAMMA:g}], got {self.gamma}")
        parse_routing(self.routing)


@dataclass(frozen=True)
class SsmdOptions(BlockOptions):
    """SSMD (docs/ssmd.md, infill.decoding.ssmd; needs a model folder with ssmd_head.safetensors)."""

    ssmd_passes: int = 2  # K: causal-head passes per full forward (each verifies drafts up to one rejection)
    ssmd_window: int = 0  # drafted positions per full forward; 0 = a cosine schedule over the block

    def __post_init__(self) -> None:
        super().__post_init__()
        _need(self.ssmd_passes >= 1, f"SSMD needs ssmd_passes >= 1, got {self.ssmd_passes}")
        _need(self.ssmd_window >= 0, f"SSMD needs ssmd_window >= 0 (0 = cosine schedule), got {self.ssmd_window}")


@dataclass(frozen=True)
class PtpOptions:
    k: int = AssdOptions.k  # drafted slots per step (at most the adapter's trained slots)
    block_size: int = BlockOptions.block_size  # PTP runs the model autoregressively: 0 or 1

    def __post_init__(self) -> None:
        _need(self.k >= 1, f"ptp needs k >= 1 slots, got {self.k}")
        _need(self.block_size in (0, 1), f"ptp runs the model at block size 1 (autoregressive), not {self.block_size}")


# ---- the registry: each decoder and each draft, once ------------------------------------------------------
# Adding one is a file of its own plus one entry here and one beside its function in infill.decoding.registry
# (or infill.decoding.drafts for a draft); docs/contributing.md.


@dataclass(frozen=True)
class Decoder:
    """A registered decoder."""

    family: DecoderFamily  # what its function (infill.decoding.registry) takes
    options: type  # its options class: the DecodeConfig fields it reads, and their ranges
    summary: str  # what it gives, in a few words (--decoder's help; docs/decoding.md's table names it)
    flag: bool = True  # offered by --decoder (beam search is asked for with --beam N)


@dataclass(frozen=True)
class Draft:
    """A registered draft source of ASSD (infill.decoding.drafts.DraftSource)."""

    min_k: int  # the smallest -k it takes
    summary: str  # what it drafts, in a few words (--draft's help; docs/decoding.md's table names it)


DECODERS: dict[DecoderName, Decoder] = {
    "assd": Decoder(
        "any-subset",
        AssdOptions,
        "exact speculative sampling of drafts (--draft)",
    ),
    "sequential": Decoder("any-subset", SequentialOptions, "exact, one pass per token"),
    "parallel": Decoder("any-subset", ParallelOptions, "the mean-field baseline, not exact"),
    "beam": Decoder(
        "any-subset",
        BeamOptions,
        "the most likely fill the search finds",
        flag=False,
    ),
    "confidence": Decoder(
        "block",
        BlockOptions,
        "block diffusion, unmasking by confidence, not exact",
    ),
    "s2d2": Decoder(
        "block",
        S2D2Options,
        "block diffusion, self-speculative where its router verifies",
    ),
    "ssmd": Decoder(
        "block",
        SsmdOptions,
        "block diffusion with an SSMD head, exact per speculative step (not to one fixed joint)",
    ),
    "ptp": Decoder(
        "block",
        PtpOptions,
        "block diffusion with a PTP adapter, exact autoregressive sampling",
    ),
}
DRAFTS: dict[DraftName, Draft] = {
    "model": Draft(2, "the model itself, one draft pass"),
    "ngram": Draft(2, "a bigram of the visible text"),
    "lookup": Draft(1, "what followed the same tokens elsewhere in the text"),
}


@dataclass(frozen=True)
class DecodeConfig:
    """One decoding request as the boundary parses it (flags, server parameters, the daemon's JSON): the
    decoder's name and every decoder's fields, flat. A decoder reads only its own options, built from this by
    options_of(); the defaults are those of the option classes above."""

    decoder: DecoderName = "assd"
    k: int = AssdOptions.k
    draft: DraftName = AssdOptions.draft
    epsilon: float = AssdOptions.epsilon
    temperature: float = Sampling.temperature
    top_k: int = Sampling.top_k
    top_p: float = Sampling.top_p
    seed: int = Sampling.seed
    beam: int = BeamOptions.beam
    block_size: int = BlockOptions.block_size
    threshold: float = BlockOptions.threshold
    routing: str = S2D2Options.routing
    unmask_per_step: int = BlockOptions.unmask_per_step
    gamma: float = S2D2Options.gamma
    ssmd_passes: int = SsmdOptions.ssmd_passes
    ssmd_window: int = SsmdOptions.ssmd_window

    @property
    def sampling(self) -> Sampling:
        return options_of(Sampling, self)


def options_of(kind: type[T], cfg: DecodeConfig) -> T:
    """The options of class `kind` (Sampling or a decoder's) read from `cfg`; DecodeError when one is out of
    range."""
    return kind(**{f.name: getattr(cfg, f.name) for f in fields(kind)})  # type: ignore[arg-type]


def decoder_options(cfg: DecodeConfig) -> Any:
    """The options of cfg.decoder (its registered options class), checked."""
    return options_of(DECODERS[cfg.decoder].options, cfg)


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
    engine: EngineName = "auto"  # AS-ARM models: what runs the forward passes (see EngineName)
    api_key_file: str | None = None  # a model server's API key is read from this file (never a command-line value)
    allow_http: bool = False  # a model server at plain http:// on another machine (the text leaves unencrypted)


@dataclass(frozen=True)
class FillOptions:
    tokens: int | None = None  # token budget per span; None = the length policy (see core/pipeline.py)
    # tokens of the input the model sees at most, around the spans (None: the model's whole window); a shorter
    # window makes the first pass of a fill cheaper (the language server's default: infill.lsp.fills)
    max_context: int | None = None
    # tokens after the span a left-to-right model reads at most (None or 0: all that fits its window): its prompt
    # puts them after the prefix, so every change before the cursor makes it read them again (the language
    # server's default: infill.lsp.fills)
    max_suffix: int | None = None
    candidates: int = 1  # -n: candidates ranked by log-likelihood
    max_resample: int = 4  # extra samples when a candidate adds syntax errors
    syntax_check: bool = True
    retrieve: bool = True  # also rank lines from the user's code as candidates for a one-line span
    context: tuple[str, ...] = ()  # texts of other files to take candidate lines from (--context)
    extra: dict[str, str] = field(default_factory=dict)
    # when no candidate passes the checks: False raises NoValidFillError (nothing is written); True returns the
    # most likely candidate with a warning (`--allow-syntax-errors`)
    allow_syntax_errors: bool = False
    # beam search: when every fill it found that writes something is rejected, search again this many times wider
    # (1 = never)
    rescue_width: int = 4
    # static monitor (infill.core.monitor.LINT_RULES, comma-separated; "" or "none" = off): rank last the Python
    # fills that add a pyflakes message of these rules over the file with neutral text in the span. The default
    # is what measurably raised pass@1 (docs/confidence.md, "The static monitor")
    monitor: str = "binds"
    # write nothing (LowConfidenceError, exit 4) when the best fill's calibrated confidence is below this; 0 = off
    min_confidence: float = 0.0


def decode_label(cfg: DecodeConfig) -> str:
    """How reports name a decoding setting: "beam 4", "assd k=10 T=1"."""
    if cfg.decoder == "beam":
        return f"beam {cfg.beam}"
    return f"{cfg.decoder} k={cfg.k} T={cfg.temperature:g}"


def decoders_of(family: DecoderFamily) -> tuple[DecoderName, ...]:
    """The decoders whose function takes a run of `family`, in registration order (a kind that runs every one of
    them names them so: a new decoder of the family needs no other line)."""
    return tuple(name for name, entry in DECODERS.items() if entry.family == family)


def check_decode(cfg: DecodeConfig) -> None:
    """InputError (exit 2) for settings the request cannot use: a wrong type or a non-finite number in any field,
    an out-of-range sampling setting or option of the chosen decoder, or a value of another decoder's option that
    no decoder can use (`gamma` 0). Checked before any model runs (fill_text)."""

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
    if cfg.decoder not in DECODERS:
        raise InputError(f"decoder must be one of {', '.join(DECODERS)}, got {cfg.decoder!r}")
    try:
        options_of(Sampling, cfg)
        chosen = decoder_options(cfg)
    except DecodeError as error:
        raise InputError(error.message) from None
    read = {f.name for f in fields(chosen)}
    for name, readers in _READERS.items():
        value = getattr(cfg, name)
        if name not in read and value != getattr(DecodeConfig, name):
            refusal = _refusal_everywhere(readers, name, value)
            if refusal is not None:
                raise InputError(refusal)


# option name -> the option classes that read it (the registered decoders')
_OPTION_CLASSES = tuple(dict.fromkeys(entry.options for entry in DECODERS.values()))
_READERS: dict[str, tuple[type, ...]] = {
    f.name: tuple(k for k in _OPTION_CLASSES if f.name in {g.name for g in fields(k)})
    for kind in _OPTION_CLASSES
    for f in fields(kind)
}


def _refusal_everywhere(readers: tuple[type, ...], name: str, value: Any) -> str | None:
    """The first refusal's message when none of the option classes that read `name` accepts `value` (their other
    options at the defaults), else None: a value no decoder can use is a mistake even when the chosen decoder
    ignores it."""
    refusals: list[str] = []
    for kind in readers:
        try:
            kind(**{name: value})
            return None
        except DecodeError as error:
            refusals.append(error.message)
    return refusals[0]
