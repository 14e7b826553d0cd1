"""What a loaded model is (LoadedModel), and models registered by name: backends and tests register factories
(simonw/llm style; tests unregister in `finally`). infill.models.loading.load looks a name up here first, then
among the folders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from infill.config import ModelKind, ModelSpec
from infill.errors import ModelError

if TYPE_CHECKING:
    from infill.models.base import AnySubsetModel, Tokenizer
    from infill.models.blockdiff_model import BlockDiffModel
    from infill.models.remote import RemoteFim

__all__ = ["Factory", "LoadedModel", "ModelKind", "factory_of", "register", "registered", "unregister"]


@dataclass
class LoadedModel:
    """A model ready to decode, with its tokenizer.

    `kind` names its kind (infill.core.kinds: "asarm", "blockdiff", "ar", "remote", or a registered one), which
    says what the fill core does with it. The typed views: `.asarm`, an infill.models.base.AnySubsetModel (an
    any-subset model; a left-to-right code model, infill.models.autoregressive.CausalFim, is one too);
    `.blockdiff`, an infill.models.blockdiff_model.BlockDiffModel; `.remote`, an infill.models.remote.RemoteFim.
    """

    name: str
    kind: ModelKind  # a key of infill.core.kinds.KINDS
    model: AnySubsetModel | BlockDiffModel | RemoteFim
    tokenizer: Tokenizer
    info: dict[str, Any] = field(default_factory=dict)  # size, provenance, path, device ...

    @property
    def asarm(self) -> AnySubsetModel:
        """The any-subset model (a left-to-right one is one too); ModelError for a block-diffusion model or one on
        a server."""
        from infill.models.blockdiff_model import BlockDiffModel
        from infill.models.remote import RemoteFim

        if isinstance(self.model, BlockDiffModel | RemoteFim):
            raise ModelError(f"model {self.name!r} is not an any-subset (AS-ARM) model")
        return cast("AnySubsetModel", self.model)

    @property
    def blockdiff(self) -> BlockDiffModel:
        """The block-diffusion model; ModelError for any other."""
        from infill.models.blockdiff_model import BlockDiffModel

        if not isinstance(self.model, BlockDiffModel):
            raise ModelError(f"model {self.name!r} is not a block-diffusion model")
        return self.model

    @property
    def remote(self) -> RemoteFim:
        """The model on a server; ModelError for one run here."""
        from infill.models.remote import RemoteFim

        if not isinstance(self.model, RemoteFim):
            raise ModelError(f"model {self.name!r} is not on a model server")
        return self.model


Factory = Callable[[ModelSpec], LoadedModel]

_FACTORIES: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> None:
    """Make `name` loadable. Re-registering a name replaces it."""
    _FACTORIES[name] = factory


def unregister(name: str) -> None:
    _FACTORIES.pop(name, None)


def registered() -> list[str]:
    return sorted(_FACTORIES)


def factory_of(name: str) -> Factory | None:
    """The factory registered under `name`, or None (a folder model)."""
    return _FACTORIES.get(name)
