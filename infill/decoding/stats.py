"""Statistics every decoder returns next to its tokens.

`accepted` has one meaning for every decoder: per iteration of the decoder's loop, how many masked positions
became final in it. An iteration is one round that ends with tokens decided: a draft-and-verify round of ASSD,
lookup or PTP, one forward of sequential or parallel decoding, one denoising step of a block-diffusion decoder
(confidence, S2D2, SSMD). Accepted drafts, corrections and bonus tokens count, and so do the end-of-fill pads
written without a pass. Beam search records nothing: no token is final before the search ends. What a decoder
counts beyond that (drafts accepted per verification, passes by kind) is in `extra`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class DecodeStats:
    decoder: str
    nfe: int = 0  # forward passes, every one counted (drafts, verifies, prefill, cache commits)
    tokens: int = 0  # tokens produced (forced pads after an end-of-fill count too)
    seconds: float = 0.0  # wall time
    accepted: list[int] = field(default_factory=list)  # tokens made final per iteration (module docstring)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_nfe(self) -> float:
        return self.tokens / self.nfe if self.nfe else 0.0

    def histogram(self) -> dict[int, int]:
        return histogram(self.accepted)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens_per_nfe"] = self.tokens_per_nfe
        d["histogram"] = self.histogram()
        return d


def histogram(accepted: list[int]) -> dict[int, int]:
    """How many iterations made each number of tokens final, by number (the `accepted=` of `infill fill
    --stats`)."""
    return dict(sorted(Counter(accepted).items()))
