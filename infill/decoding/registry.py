"""Registered names -> the code that runs them, imported on first use (importing this module does not import
torch). What is registered, and which model kind runs each decoder, is infill.config.DECODERS and DRAFTS.

Any-subset decoders take (model, problem, cfg, generator, on_step); block-diffusion decoders take
(model, prompt, max_tokens, cfg, generator, on_step=...). See docs/decoding.md and docs/contributing.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from infill.config import DECODERS, DRAFTS, DecodeConfig, ModelKind, decoders_for
from infill.errors import DecodeError


def decoder_function(cfg: DecodeConfig, kind: ModelKind) -> Any:
    """The function that runs `cfg.decoder` on a model of `kind`; DecodeError when that kind cannot run it."""
    name = cfg.decoder
    entry = DECODERS.get(name)
    if entry is None or kind not in entry.kinds:
        names = ", ".join(decoders_for(kind))
        if kind == "asarm":
            raise DecodeError(
                f"decoder {name!r} is not an any-subset decoder (use {names}; the others run block-diffusion models)"
            )
        raise DecodeError(f"decoder {name!r} does not run block-diffusion models; use {names}")
    return resolve(entry.function)


def draft_source(name: str) -> Any:
    """The class of the registered ASSD draft `name` (infill.decoding.assd.DraftSource)."""
    return resolve(DRAFTS[name].source)


def resolve(target: str) -> Any:
    """ "module:attribute" -> the attribute, importing the module."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
