"""Frozen configuration objects, built once at the boundary (CLI, server, tests) and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

DecoderName = Literal["assd", "sequential", "parallel", "confidence", "s2d2"]
DraftName = Literal["model", "ngram"]
DeviceName = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class DecodeConfig:
    decoder: DecoderName = "assd"
    k: int = 10  # speculation width (ASSD) or chunk size (parallel); must be >= 2 for assd
    draft: DraftName = "model"  # "ngram" = Algorithm 2 of the ASSD paper (bigram draft from the visible context)
    epsilon: float = 0.0  # LOSSY acceptance tolerance r < min(1, q/p + eps); 0 keeps sampling exact
    temperature: float = 1.0  # 0 means greedy (argmax) everywhere
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int = 0  # one torch.Generator is seeded with this
    # block diffusion (issue 5)
    block_size: int = 0  # block-diffusion block size; 0 = the model's own (from its config), 1 = plain AR
    threshold: float = 0.9  # confidence threshold tau for dynamic confidence decoding
    routing: str = "min-span"  # S2D2 routing policy name
    # appended by issue 5 (block diffusion)
    unmask_per_step: int = 0  # confidence decoding: 0 = dynamic (p > threshold, plus the argmax); n = static
    gamma: float = 1.0  # S2D2 tempering: accept w.p. min(1, (q/p)^gamma); 1 = exact ratio, < 1 LOSSY-lenient


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
    extra: dict[str, str] = field(default_factory=dict)
    # when no candidate passes the checks: False raises NoValidFillError (nothing is written); True returns the
    # most likely candidate with a warning (`--allow-syntax-errors`)
    allow_syntax_errors: bool = False
