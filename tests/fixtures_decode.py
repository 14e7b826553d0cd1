"""Fixtures for the decoding-core tests: tiny random XLNets and a memoizing model wrapper."""

from __future__ import annotations

import random
from typing import Any

import torch

from infill.decoding.lookup import lookup
from infill.decoding.sampling import probs, sample
from infill.models.base import FillProblem
from infill.models.tiny import random_xlnet, xlnet_shape
from infill.models.xlnet import XLNetAnySubset


def tiny_xlnet(
    vocab: int = 6,
    *,
    n_layer: int = 1,
    d_model: int = 16,
    n_head: int = 2,
    seed: int = 0,
    init_scale: float = 1.0,
    mask_id: int | None = None,
    pad_id: int | None = None,
    max_length: int = 64,
    cache: bool = True,
) -> XLNetAnySubset:
    """A random XLNet whose last id is `<mask>` (unless given). A large `init_scale` makes the conditionals
    peaky and strongly dependent on context, which gives the exactness tests power."""
    torch.manual_seed(seed)
    net = random_xlnet(xlnet_shape(vocab, n_layer, d_model, n_head), seed=seed, init_scale=init_scale)
    return XLNetAnySubset(
        net,
        mask_id=vocab - 1 if mask_id is None else mask_id,
        pad_id=pad_id,
        max_length=max_length,
        device="cpu",
        bf16=False,
        cache=cache,
    )


class Memo:
    """Wraps an AnySubsetModel and memoizes draft/verify on their full inputs.

    The model is a deterministic function of (ids, masked, n, targets, pass), so replaying a stored result is
    exactly what a fresh forward would return; it turns 20k decodes into a few hundred real forwards. `calls`
    counts calls (what a decoder would pay), `forwards` the real ones.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.vocab_size = model.vocab_size
        self.mask_id = model.mask_id
        self.pad_id = model.pad_id
        self.bos_id = model.bos_id
        self.max_length = model.max_length
        self._cache: dict[tuple[Any, ...], torch.Tensor] = {}
        self.calls = 0
        self.forwards = 0

    def _get(self, kind: str, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        key = (kind, tuple(ids.tolist()), tuple(masked.tolist()), n, tuple(targets.tolist()))
        hit = self._cache.get(key)
        if hit is None:
            self.forwards += 1
            hit = getattr(self.model, kind)(ids, masked, n, targets)
            self._cache[key] = hit
        return hit

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._get("draft", ids, masked, n, targets)

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._get("verify", ids, masked, n, targets)


class OnePassPerHypothesis:
    """A model without draft_many (infill.models.base.BatchedDraft): beam search then takes one draft pass per
    hypothesis, the reference its batched pass is compared with."""

    def __init__(self, model: Any) -> None:
        self.model = model
        for name in ("vocab_size", "mask_id", "pad_id", "bos_id", "max_length"):
            setattr(self, name, getattr(model, name))

    def draft(self, *args: Any) -> torch.Tensor:
        return self.model.draft(*args)  # type: ignore[no-any-return]

    def verify(self, *args: Any) -> torch.Tensor:
        return self.model.verify(*args)  # type: ignore[no-any-return]


def repeats_problems(mask: int, count: int = 30, seed: int = 0) -> list[FillProblem]:
    """`count` span problems on random texts full of repeats (a motif of 2 to 4 of the ids 0..4, repeated, cut
    to 6..19 tokens), 10 masks (id `mask`) put in at a random point: lookup drafts find matches in them, and the
    target accepts some and rejects some."""
    rng = random.Random(seed)
    problems = []
    for _ in range(count):
        motif = [rng.randrange(5) for _ in range(rng.randrange(2, 5))]
        text = (motif * 6)[: rng.randrange(6, 20)]
        cut = rng.randrange(1, len(text))
        ids = torch.tensor([*text[:cut], *([mask] * 10), *text[cut:]])
        problems.append(FillProblem(ids, torch.arange(cut, cut + 10), torch.zeros(10, dtype=torch.long)))
    return problems


# --- the negative control of prompt-lookup drafts: the looked-up tokens copied without the acceptance test ----
def unverified_step(model: Memo, ids: torch.Tensor, visible: list[bool], masked: torch.Tensor, n: int) -> object:
    """The negative control's next step: the tokens the lookup proposes, taken as they are (a list), or else
    the model's distribution of the next token ((V,) probabilities)."""
    tokens = lookup(ids.tolist(), visible, int(masked[n]), masked.shape[0] - n)
    return tokens if tokens else probs(model.draft(ids, masked, n, masked[n : n + 1]))[0]


def _start(problem: FillProblem) -> tuple[torch.Tensor, list[bool]]:
    visible = [True] * problem.ids.shape[0]
    for m in problem.masked.tolist():
        visible[m] = False
    return problem.ids.clone(), visible


def _written(ids: torch.Tensor, visible: list[bool], masked: torch.Tensor, n: int, tokens: list[int]) -> int:
    for t in tokens:
        ids[masked[n]] = t
        visible[int(masked[n])] = True
        n += 1
    return n


def unverified_draw(model: Memo, problem: FillProblem, g: torch.Generator) -> list[int]:
    """The negative control: copy what the lookup proposes without the acceptance test, sample the rest."""
    (ids, visible), masked, n = _start(problem), problem.masked, 0
    while n < masked.shape[0]:
        step = unverified_step(model, ids, visible, masked, n)
        n = _written(ids, visible, masked, n, step if isinstance(step, list) else [int(sample(step[None], g)[0])])
    return ids[masked].tolist()


def unverified_joint(model: Memo, problem: FillProblem) -> dict[tuple[int, ...], float]:
    """The exact distribution of `unverified_draw`'s fills, every branch of its steps enumerated."""
    joint: dict[tuple[int, ...], float] = {}
    masked = problem.masked

    def walk(ids: torch.Tensor, visible: list[bool], n: int, pr: float) -> None:
        if n == masked.shape[0]:
            fill = tuple(ids[masked].tolist())
            joint[fill] = joint.get(fill, 0.0) + pr
            return
        step = unverified_step(model, ids, visible, masked, n)
        branches = [(step, 1.0)] if isinstance(step, list) else [([x], float(q)) for x, q in enumerate(step) if q > 0]
        for tokens, q in branches:
            ids2, visible2 = ids.clone(), list(visible)
            walk(ids2, visible2, _written(ids2, visible2, masked, n, tokens), pr * q)

    walk(*_start(problem), 0, 1.0)
    assert abs(sum(joint.values()) - 1.0) < 1e-6
    return joint
