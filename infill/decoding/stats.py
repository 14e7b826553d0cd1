"""Statistics every decoder returns next to its tokens."""

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
    accepted: list[int] = field(default_factory=list)  # tokens accepted per iteration (a histogram source)
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
    """How many iterations accepted each count, by count (the `accepted=` of `infill fill --stats`)."""
    return dict(sorted(Counter(accepted).items()))
