"""Decoder names -> decoder functions, imported on first use (importing this module does not import torch).

Which model kind a decoder runs is infill.config.DECODER_KIND; this table says where its function lives.
Any-subset decoders take (model, problem, cfg, generator, on_step); block-diffusion decoders take
(model, prompt, max_tokens, cfg, generator, on_step=...). See docs/decoding.md and docs/blockdiff.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from infill.config import DECODER_KIND, DecodeConfig, DecoderName, ModelKind, decoders_for
from infill.errors import DecodeError

FUNCTIONS: dict[DecoderName, str] = {
    "assd": "infill.decoding.assd:assd",
    "sequential": "infill.decoding.sequential:sequential",
    "parallel": "infill.decoding.parallel:parallel",
    "beam": "infill.decoding.beam:beam_search",
    "confidence": "infill.decoding.confidence:generate",
    "s2d2": "infill.decoding.s2d2:decode",
    "ssmd": "infill.decoding.ssmd:decode",
    "ptp": "infill.decoding.ptp:decode",
}
# ASSD whose drafts are copied from the visible text and verified in one pass (draft="lookup")
LOOKUP_ASSD = "infill.decoding.lookup:lookup_decode"


def decoder_function(cfg: DecodeConfig, kind: ModelKind) -> Any:
    """The function that runs `cfg.decoder` on a model of `kind`; DecodeError when that kind cannot run it."""
    name = cfg.decoder
    if DECODER_KIND.get(name) != kind:
        names = ", ".join(decoders_for(kind))
        if kind == "asarm":
            raise DecodeError(
                f"decoder {name!r} is not an any-subset decoder (use {names}; the others run block-diffusion models)"
            )
        raise DecodeError(f"decoder {name!r} does not run block-diffusion models; use {names}")
    target = LOOKUP_ASSD if name == "assd" and cfg.draft == "lookup" else FUNCTIONS[name]
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
