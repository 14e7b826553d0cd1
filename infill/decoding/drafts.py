"""ASSD's draft sources (--draft): the protocol a source follows, the model's own draft pass, and the registry of
the classes by name. Their settings (the smallest -k, the help line) are infill.config.DRAFTS (the model kinds
that take each name it: infill.core.kinds); the loop that verifies the drafts is infill.decoding.assd."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from infill.config import DraftName
from infill.decoding.lookup import LookupDraft
from infill.decoding.ngram import BigramDraft
from infill.decoding.problem import LeftToRight
from infill.decoding.sampling import transform
from infill.decoding.speculative import Proposal

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.models.base import AnySubsetModel


class DraftSource(Protocol):
    """A draft source of the loop. Built as `Source(model, cfg, k)` once per decode (k: the speculation width, -k);
    it may keep state between iterations (the lookup draft adapts its length)."""

    def propose(self, run: LeftToRight, visible: torch.Tensor, n: int, generator: torch.Generator) -> Proposal | None:
        """Drafts for run.masked[n : n + L] (L >= 1; the bonus row, if asked for, is masked[n + L], so
        n + L + bonus <= M), or None when it has nothing to propose (the loop then takes a sequential step).
        `run.ids` (N,) holds the prompt and the decoded tokens, <mask> elsewhere; `visible` (N,) bool marks them.
        A source that draws random numbers draws them from `generator`."""
        ...

    def verified(self, accepted: int, drafted: int) -> None:
        """What the verification made of the last proposal: `accepted` of its `drafted` tokens."""
        ...


class ModelDraft:
    """The model's draft pass: p(. | prompt, x_{<n}) at the next `width` masked positions, independently, and one
    sample of each (the first is the oracle's own sample: Lemma 1)."""

    def __init__(self, model: AnySubsetModel, cfg: DecodeConfig, k: int) -> None:
        self.model, self.cfg, self.width = model, cfg, k

    def propose(self, run: LeftToRight, visible: torch.Tensor, n: int, generator: torch.Generator) -> Proposal:
        targets = run.masked[n : min(n + self.width, run.total)]  # (L,) positions σ(n..t-1)
        p = transform(self.model.draft(run.ids, run.masked, n, targets), self.cfg)  # (L, V)
        return Proposal.sampled(p, generator, first_exact=True, passes=1)

    def verified(self, accepted: int, drafted: int) -> None:
        pass


# how a source is built, once per decode: Source(model, cfg, k)
DraftFactory = Callable[["AnySubsetModel", "DecodeConfig", int], DraftSource]
# the class of each draft name of infill.config.DRAFTS
DRAFT_SOURCES: dict[DraftName, DraftFactory] = {"model": ModelDraft, "ngram": BigramDraft, "lookup": LookupDraft}
