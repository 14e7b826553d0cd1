"""Any-subset decoders: pure functions (model, problem, cfg, generator, on_step) -> (tokens, stats).

- `decode()` dispatches on cfg.decoder: "assd" (Algorithm 1, exact; with draft="lookup" the drafts are copied
  from the visible text and verified in one pass: infill.decoding.lookup), "sequential" (exact, one forward per
  token), "parallel" (mean-field baseline, not exact), "beam" (the most likely fill, width cfg.beam).
- `score()` gives the per-token log q of a finished fill in one oracle pass (for ranking candidates).

Importing this package does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.decoding.problem import StepCallback
from infill.errors import DecodeError

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.stats import DecodeStats
    from infill.models.base import AnySubsetModel, FillProblem

__all__ = ["StepCallback", "decode", "score"]


def decode(
    model: AnySubsetModel,
    problem: FillProblem,
    cfg: DecodeConfig,
    generator: torch.Generator,
    on_step: StepCallback | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Fill the masked positions of `problem`. Returns (tokens (M,) long in decoding order, stats).

    `on_step(decoded, total)` is called after every iteration. Raises DecodeError for a malformed problem or
    config.
    """
    if cfg.decoder == "assd" and cfg.draft == "lookup":
        from infill.decoding.lookup import lookup_decode

        return lookup_decode(model, problem, cfg, generator, on_step)
    if cfg.decoder == "assd":
        from infill.decoding.assd import assd

        return assd(model, problem, cfg, generator, on_step)
    if cfg.decoder == "sequential":
        from infill.decoding.sequential import sequential

        return sequential(model, problem, cfg, generator, on_step)
    if cfg.decoder == "parallel":
        from infill.decoding.parallel import parallel

        return parallel(model, problem, cfg, generator, on_step)
    if cfg.decoder == "beam":
        from infill.decoding.beam import beam_search

        return beam_search(model, problem, cfg, generator, on_step)
    raise DecodeError(
        f"decoder {cfg.decoder!r} is not an any-subset decoder (use assd, sequential, parallel or beam; "
        "confidence and s2d2 run block-diffusion models)"
    )


def score(model: AnySubsetModel, problem: FillProblem, tokens: torch.Tensor) -> torch.Tensor:
    """Per-token log q(x_i | prompt, x_{<i}) of the fill `tokens` (M,), from one oracle pass: (M,) float32.

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
    logits = model.verify(ids, masked, 0, masked)  # (M, V)
    logq = torch.log_softmax(logits.detach().float().cpu(), dim=-1)  # (M, V)
    return logq.gather(-1, tokens[:, None]).squeeze(-1)  # (M,)
