"""What a model kind is to the tool (Kind) and what the fill core needs from one (Backend): which decoders it
runs, how a fill's window is laid out, how one candidate is sampled and scored, whether retrieved lines can be
ranked, how its folders are recognised and loaded. infill.core.pipeline calls these instead of branching on the
kind (docs/decoding.md, docs/blockdiff.md).

Each kind is one module of infill.core.kinds (asarm, blockdiff, ar, remote: its backend, its loader, its folder
detection and the decoders it runs, in one `Kind` object), registered in infill.core.kinds.KINDS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from infill.config import DecodeConfig, DecoderName, DraftName, FillOptions, ModelSpec
from infill.core.plan import Region, Window
from infill.decoding.seeded import Seeded
from infill.models.registry import LoadedModel

if TYPE_CHECKING:
    import torch

    from infill.decoding.stats import DecodeStats

ProgressCallback = Callable[[dict[str, Any]], None]


@dataclass
class Fill:
    """One span's fill in a candidate."""

    raw: str  # the model's text (LF), cut at the first pad
    score: float
    tokens: int
    worst: float = 0.0  # the lowest log-probability of a scored token (the fill's weakest point)
    # False: text the model gave no log-probabilities for (a model server that ignores `logprobs`); its score
    # of 0 is then no likelihood, and the fill is neither ranked by it nor given a confidence (infill.core.ranking)
    scored: bool = True


@dataclass
class Totals:
    """Decoding counts over every sample of one fill."""

    nfe: int = 0
    tokens: int = 0
    accepted: list[int] = field(default_factory=list)
    nbest: dict[int, list[list[int]]] = field(default_factory=dict)  # beam: region -> fills, best first
    nbest_scores: dict[int, list[float]] = field(default_factory=dict)  # beam: region -> their log-likelihoods
    # regions whose token healing ran out of the exact rejection's tries: their later draws impose it step by step
    heal_stepwise: set[int] = field(default_factory=set)

    def add(self, stats: DecodeStats) -> None:
        """Count one decoder run."""
        self.nfe += int(stats.nfe)
        self.tokens += int(stats.tokens)
        self.accepted += list(stats.accepted)


@dataclass
class Run:
    """One fill's decoding: the model, its settings, the one generator every sample draws from, the counts."""

    loaded: LoadedModel
    cfg: DecodeConfig
    draws: Seeded  # the one generator; its torch.Generator is made when a decoder first draws (`generator`)
    totals: Totals = field(default_factory=Totals)
    on_progress: ProgressCallback | None = None
    # beam search: whether a region's finished fill may be returned (the caller's syntax check); see FillProblem
    accept: Callable[[Region, list[Fill]], bool] | None = None

    @property
    def generator(self) -> torch.Generator:
        """The torch.Generator every decoder draws from (importing torch on first use)."""
        return self.draws.torch


class Backend(Protocol):
    """What the fill core needs from a model kind. Every kind tokenizes through `loaded.tokenizer`
    (infill.models.base.Tokenizer)."""

    def prepare(self, cfg: DecodeConfig, loaded: LoadedModel) -> tuple[LoadedModel, DecodeConfig]:
        """The model as `cfg`'s decoder runs it (a view of another kind, or `loaded` itself) and `cfg` with any
        decoder this kind runs under another name (infill.core.kinds.select reports the swap and checks the
        decoder, once)."""
        ...

    def window(self, loaded: LoadedModel) -> Window:
        """How a fill's sequence is laid out for this model (planning: infill.core.plan)."""
        ...

    def sample(self, region: Region, run: Run, attempt: int) -> list[Fill]:
        """One candidate fill of every span of `region`, each with its score (a log-likelihood); none where the
        kind knows this attempt would only repeat an earlier one (pipeline.sample then stops drawing)."""
        ...

    def ranked_lines(self, regions: list[Region], run: Run, options: FillOptions) -> list[Fill]:
        """Lines of the user's code as scored fills, ranked with the samples (none where the kind cannot score
        a given text)."""
        ...


Detect = Callable[[dict[str, Any], Path | None], bool]  # (config.json, its folder) -> whether it is this kind
FolderLoader = Callable[[Path, ModelSpec, dict[str, Any], str], LoadedModel]  # (folder, spec, config, provenance)
NameLoader = Callable[[ModelSpec], LoadedModel | None]  # a model named otherwise (a URL, a GGUF file), or None


@dataclass(frozen=True)
class Kind:
    """A model kind, everything the tool knows of it in one object (registered in infill.core.kinds.KINDS;
    docs/contributing.md, "A model kind")."""

    name: str  # LoadedModel.kind of its models
    label: str  # how messages name it: "a block-diffusion" (model)
    decoders: tuple[DecoderName, ...]  # the decoders of infill.config.DECODERS it runs, in the order offered
    backend: Backend
    drafts: tuple[DraftName, ...] = ()  # the ASSD drafts it takes (infill.config.DRAFTS), when it runs assd
    detect: Detect | None = None  # whether a model folder is of this kind, by its config alone (no torch)
    load: FolderLoader | None = None  # a folder `detect` accepted -> the loaded model
    load_name: NameLoader | None = None  # models that are no folder: tried before the folders, in KINDS order
    model_types: tuple[str, ...] = ()  # the config.json model_types it knows (the "unsupported" message)
    engines: tuple[str, ...] = ("auto", "torch")  # the --engine values its models run on
    # whether its fills run torch (set to the decoding threads when one loads); a model server's do not, and a fill
    # with it imports no torch
    runs_torch: bool = True


def retrieves(regions: list[Region], options: FillOptions) -> bool:
    """Whether lines of the user's code are ranked with the samples: retrieval on, one region of one span that is
    one whole line (not healed: the line starts at the span)."""
    if not options.retrieve or len(regions) != 1 or len(regions[0].spans) != 1:
        return False
    plan = regions[0].spans[0]
    return plan.span.one_line and not plan.heal and plan.at_line_start
