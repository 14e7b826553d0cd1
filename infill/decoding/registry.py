"""Registered names -> the code that runs them: the functions and classes themselves, so that go-to-definition
and mypy follow them. What is registered, each decoder's family (what its function takes) and its settings, is
infill.config.DECODERS and DRAFTS (at the bottom, read by the flags and `infill --help` without importing this);
tests/test_options.py holds the two registries to the same names.

Any-subset decoders take the LeftToRight run infill.decoding.decode builds; block-diffusion decoders the
Generation infill.decoding.blockfill builds. This module is imported when a decoder first runs (none of the
decoders imports torch at import time). See docs/decoding.md and docs/contributing.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infill.config import DECODERS, DecodeConfig, DecoderFamily, DecoderName, DraftName, decoders_of
from infill.decoding.assd import assd, sequential
from infill.decoding.beam import beam_search
from infill.decoding.confidence import denoise
from infill.decoding.drafts import DRAFT_SOURCES, DraftFactory
from infill.decoding.parallel import parallel
from infill.decoding.ptp import ptp
from infill.decoding.s2d2 import s2d2
from infill.decoding.ssmd import ssmd
from infill.errors import DecodeError

# the function of each decoder name of infill.config.DECODERS
DECODER_FUNCTIONS: dict[DecoderName, Callable[..., Any]] = {
    "assd": assd,
    "sequential": sequential,
    "parallel": parallel,
    "beam": beam_search,
    "confidence": denoise,
    "s2d2": s2d2,
    "ssmd": ssmd,
    "ptp": ptp,
}


def decoder_function(cfg: DecodeConfig, family: DecoderFamily) -> Callable[..., Any]:
    """The function of `cfg.decoder`, which takes a run of `family` (infill.config.Decoder.family); DecodeError
    for a decoder of the other family (a library caller's mistake: the tool checks the decoder against the model
    once, in infill.core.kinds.select)."""
    name = cfg.decoder
    entry = DECODERS.get(name)
    if entry is None or entry.family != family:
        names = ", ".join(decoders_of(family))
        if family == "any-subset":
            raise DecodeError(
                f"decoder {name!r} is not an any-subset decoder (use {names}; the others run block-diffusion models)"
            )
        raise DecodeError(f"decoder {name!r} does not run block-diffusion models; use {names}")
    return DECODER_FUNCTIONS[name]


def draft_source(name: DraftName) -> DraftFactory:
    """The class of the registered ASSD draft `name` (infill.decoding.drafts.DraftSource)."""
    return DRAFT_SOURCES[name]
