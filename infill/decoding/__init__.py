"""Any-subset decoders: each a function of one run (infill.decoding.problem.LeftToRight), which `decode` builds.

- `decode()` runs cfg.decoder (registered in infill.config.DECODERS; imported by infill.decoding.registry):
  "assd" (Algorithm 1, exact: one verification loop, infill.decoding.assd, over the draft source cfg.draft:
  the model, a bigram or prompt lookup), "sequential" (exact, one forward per token), "parallel" (mean-field
  baseline, not exact), "beam" (the most likely fill, width cfg.beam).
- `score()` gives the per-token log q of a finished fill in one oracle pass (for ranking candidates);
  `score_many()` that of several fills of one problem, batched into few passes where the model can.

Every sampler that verifies drafts (ASSD here; S2D2, SSMD and PTP for block-diffusion models) accepts or rejects
them with infill.decoding.speculative.accept.

Importing this package does not import torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from infill.decoding.problem import StepCallback
from infill.errors import DecodeError

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.stats import DecodeStats
    from infill.models.base import AnySubsetModel, FillProblem

__all__ = ["StepCallback", "decode", "decode_healing", "score", "score_many"]

# rows (content and query) of one batched scoring pass at most: a pass of a few dozen rows costs about what one
# row does on a CPU (the weights are read once), while every row also attends to every other fill's rows, masked
SCORE_ROWS = 192


def decode(
    model: AnySubsetModel,
    problem: FillProblem,
    cfg: DecodeConfig,
    generator: torch.Generator,
    on_step: StepCallback | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Fill the masked positions of `problem` with the decoder cfg.decoder.

    model: an AnySubsetModel (infill.models.base); problem.ids (N,) long with <mask> at the masked positions,
    problem.masked (M,) long, ascending (the decoding order). Every random draw comes from `generator`.
    `on_step(decoded, total)` is called after every iteration. Returns (tokens (M,) long in decoding order,
    stats). Raises DecodeError for a malformed problem or config, or a decoder of another model kind.
    """
    from infill.config import Sampling, options_of
    from infill.decoding.problem import LeftToRight, check_problem, pads_enabled
    from infill.decoding.registry import decoder_function
    from infill.decoding.stats import DecodeStats

    function = decoder_function(cfg, "any-subset")
    check_problem(model, problem)
    options_of(Sampling, cfg)  # DecodeError for an out-of-range temperature, top-k or top-p
    ids = problem.ids.detach().to("cpu").clone()  # (N,)
    masked = problem.masked.detach().to("cpu")  # (M,)
    stats = DecodeStats(decoder=cfg.decoder)
    run = LeftToRight(model, problem, cfg, generator, ids, masked, pads_enabled(model, problem), stats, on_step)
    function(run)
    return run.result()


def decode_healing(
    model: AnySubsetModel, problem: FillProblem, cfg: DecodeConfig, generator: torch.Generator
) -> tuple[list[int], DecodeStats]:
    """Only the first tokens of a fill that token healing constrains (problem.heal; infill.decoding.healing),
    drawn exactly from the model's conditional on the text, for a decoder that goes on from them elsewhere (the
    block-diffusion decoders, given the tokens of the model's block-size-1 view). Returns (tokens, stats)."""
    from infill.decoding.healing import heal
    from infill.decoding.problem import LeftToRight, check_problem, pads_enabled
    from infill.decoding.stats import DecodeStats

    check_problem(model, problem)
    ids = problem.ids.detach().to("cpu").clone()  # (N,)
    masked = problem.masked.detach().to("cpu")  # (M,)
    stats = DecodeStats(decoder="heal")
    run = LeftToRight(model, problem, cfg, generator, ids, masked, pads_enabled(model, problem), stats, None)
    n = heal(run)
    return ids[masked[:n]].tolist(), stats


def score(model: AnySubsetModel, problem: FillProblem, tokens: torch.Tensor, length: int | None = None) -> torch.Tensor:
    """Per-token log q(x_i | prompt, x_{<i}) of the fill `tokens` (M,), from one oracle pass: (M,) float32, or
    of its first `length` tokens only (length,): the pass then asks for those rows alone (a fill that ends early
    needs no more), and they are the same numbers, since position i sees only the tokens before it.

    Untransformed model probabilities (no temperature / top-k / top-p); `<mask>` excluded. Sum for a
    sequence score.
    """
    import torch

    from infill.decoding.problem import check_problem

    check_problem(model, problem)
    masked = problem.masked.detach().to("cpu")  # (M,)
    tokens = tokens.detach().to("cpu").long()
    if tokens.shape != masked.shape:
        raise DecodeError(f"score: {tokens.shape[0]} tokens for {masked.shape[0]} masked positions")
    if masked.shape[0] == 0:
        return torch.zeros(0)
    ids = problem.ids.detach().to("cpu").clone()  # (N,)
    ids[masked] = tokens
    rows = masked if length is None else masked[: max(1, min(length, masked.shape[0]))]  # (L,)
    logits = model.verify(ids, masked, 0, rows)  # (L, V)
    logq = torch.log_softmax(logits.detach().float().cpu(), dim=-1)  # (L, V)
    return logq.gather(-1, tokens[: rows.shape[0], None]).squeeze(-1)  # (L,)


def score_many(
    model: AnySubsetModel,
    problem: FillProblem,
    fills: Sequence[torch.Tensor],
    lengths: Sequence[int],
    before_pass: Callable[[], None] | None = None,
    rows: int = SCORE_ROWS,
) -> list[torch.Tensor]:
    """`score(model, problem, fills[b], lengths[b])` of every fill b (each (M,) long): a list of (lengths[b],)
    float32 tensors, the same numbers to float rounding. A model that verifies several fills in one pass
    (infill.models.base.BatchedVerify) scores them in passes of about `rows` rows (each fill's tokens as content
    rows and one query row per token), in order; others take one pass per fill. `before_pass` is called before
    every pass (a cancel check, a pass count)."""
    import torch

    from infill.decoding.problem import check_problem

    check_problem(model, problem)
    masked = problem.masked.detach().to("cpu")  # (M,)
    M = masked.shape[0]
    wanted = [max(1, min(m, M)) for m in lengths]
    batched = getattr(model, "verify_many", None)
    out: list[torch.Tensor] = []
    if batched is None or M == 0:
        for tokens, m in zip(fills, lengths, strict=True):
            if before_pass is not None:
                before_pass()
            out.append(score(model, problem, tokens, m))
        return out
    start = 0
    while start < len(fills):
        stop, size = start + 1, 2 * wanted[start]
        while stop < len(fills) and size + 2 * wanted[stop] <= rows:
            size += 2 * wanted[stop]
            stop += 1
        seqs = []
        for tokens in fills[start:stop]:
            tokens = tokens.detach().to("cpu").long()
            if tokens.shape != masked.shape:
                raise DecodeError(f"score: {tokens.shape[0]} tokens for {M} masked positions")
            ids = problem.ids.detach().to("cpu").clone()  # (N,)
            ids[masked] = tokens
            seqs.append(ids)
        if before_pass is not None:
            before_pass()
        logits = batched(seqs, masked, wanted[start:stop])  # (sum, V)
        logq = torch.log_softmax(logits.detach().float().cpu(), dim=-1)
        at = 0
        for tokens, m in zip(fills[start:stop], wanted[start:stop], strict=True):
            out.append(logq[at : at + m].gather(-1, tokens.detach().cpu().long()[:m, None]).squeeze(-1))  # (m,)
            at += m
        start = stop
    return out
