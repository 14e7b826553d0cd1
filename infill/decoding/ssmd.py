"""SSMD: self-speculative masked diffusion decoding for block-diffusion models with an SSMD head
(infill.models.ssmd; `infill train ssmd` trains one, `ssmd_head.safetensors` beside the model's weights).

Blocks are decoded as by the other block-diffusion decoders (infill.decoding.confidence, Algorithm 1: prefill,
one full forward per denoising step, a cache commit per block fused with the next block's first draft). A
denoising step replaces the confidence rule:

    h, p_NC = the full forward's last hidden states and (factorized) predictions at the block's positions
    W = the next w masked positions in the order sigma (the masked positions, left to right); w = the window
    draft x~_j ~ p_NC(j) for every j in W, independently
    repeat at most K times (cfg.ssmd_passes) while W has undecided positions:
        p_C = the causal head over W with the current tokens (reuses h: one small layer, no base forward)
        for the undecided j in W, in order:
            accept x~_j with probability min(1, p_C(x~_j) / p_NC(x~_j))
            at the first rejection: x_j ~ normalize((p_C(j) - p_NC(j))+), and end this pass
    reveal every accepted or resampled position; the others stay masked for the next full forward

The first position of W has p_C = p_NC, so its draft is always accepted. A pass that ends in a rejection still
reveals the resampled token, so a full forward reveals at least min(w, K + 1) tokens.

Window (cfg.ssmd_window = 0, the default): a cosine schedule over the block. With n0 positions to generate in
the block and n still masked, the masked fraction follows sin(pi/2 * tau) in a time tau going from 1 to 0 in
S = ceil(n0 / 3) equal steps (about three tokens per full forward if every draft is accepted): at tau =
asin(n/n0) * 2/pi the window is n - floor(n0 * sin(pi/2 * (tau - 1/S))), at least 2. Windows grow through the
block (small while the base sees little of it, large near its end). cfg.ssmd_window = n > 0 fixes w = n.

EXACTNESS. Each inner loop is exact speculative sampling: the tokens it reveals follow the causal head's joint
over W (given h) exactly, for every K and w. The output is NOT a sample of one fixed model's joint: every full
forward changes the target, and when the next one happens depends on the rejections, so the distribution is
path-dependent (its probability is computable by a recursion over the steps; tests/test_ssmd_exactness.py does
that on a tiny model). It is exact per speculative step, lossy relative to any fixed verifier.

Pass counting (stats.extra): `nfe` counts base forwards (full passes) as for every decoder; `head_passes` the
causal-head passes; `nfe_paper` = full passes + (head passes beyond the first of each full pass) / L, with L =
the base's layers + 1 (the head is the network's last layer, so its first pass belongs to the full pass, as in
the SSMD paper); `nfe_plain` = full passes + every head pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from infill.config import SsmdOptions, options_of
from infill.decoding.confidence import Step, confidence_probs, denoise
from infill.decoding.s2d2 import accept_prefix
from infill.decoding.sampling import sample, transform
from infill.errors import DecodeError

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.problem import Generation
    from infill.decoding.stats import DecodeStats
    from infill.models.blockdiff import BlockDiffModel

MISSING_HEAD = (
    "--decoder ssmd needs an SSMD head, and this model has none (no ssmd_head.safetensors beside its weights; "
    "`infill train ssmd` trains one)"
)


def cosine_window(masked: int, total: int) -> int:
    """Window size for `masked` still-masked positions out of `total` to generate in the block (module
    docstring): between min(2, masked) and masked."""
    if masked <= 0:
        return 0
    total = max(total, masked)
    steps = max(1, math.ceil(total / 3))
    tau = 2 / math.pi * math.asin(min(1.0, masked / total))
    stay = math.floor(total * math.sin(math.pi / 2 * max(0.0, tau - 1 / steps)) + 1e-9)
    return min(masked, max(2, masked - stay))


def speculate_window(
    nc_logits: torch.Tensor,
    causal: Callable[[torch.Tensor], torch.Tensor],
    cfg: DecodeConfig,
    generator: torch.Generator,
    passes: int,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The inner loop over one window W of w positions (module docstring), with the base's h fixed.

    nc_logits (w, V): the full forward's logits at W, in order; `causal(tokens (w,)) -> (w, V)`: the causal
    logits given the window's current tokens (row 0 equals nc_logits[0]; row j depends on tokens[:j] only).
    Both go through the same sampling transform (temperature, top-k, top-p).
    -> (revealed tokens (n,), the causal logits each was decided under (n, V), causal passes run); the
    revealed positions are W[:n], n >= min(w, passes + 1)."""
    import torch

    w = int(nc_logits.shape[0])
    p_nc = transform(nc_logits, cfg)  # (w, V)
    drafts = sample(p_nc, generator)  # (w,)
    if w == 1:  # p_C = p_NC at the first position: nothing to verify
        return drafts, nc_logits, 0
    tokens = drafts.clone()  # (w,) drafts, overwritten by corrections
    decided: list[torch.Tensor] = []  # causal logits rows of the decided positions
    pos = used = 0
    while pos < w and used < passes:
        c_logits = causal(tokens)  # (w, V)
        used += 1
        p_c = transform(c_logits, cfg)  # (w, V)
        accepted, fix = accept_prefix(p_nc[pos:], p_c[pos:], drafts[pos:], generator)
        if fix is not None:
            tokens[pos + accepted] = fix
        kept = accepted + (fix is not None)
        decided.append(c_logits[pos : pos + kept])
        pos += kept
    return tokens[:pos], torch.cat(decided), used


def ssmd_step(step: Step, tally: dict[str, int], opts: SsmdOptions) -> int:
    """One denoising step (module docstring). Writes into step.block / step.masked / step.logp; returns the
    tokens revealed. `tally` accumulates head passes, extra head passes and windows."""
    from infill.models.ssmd import causal_logits

    model, cfg, state = step.model, step.cfg, step.state
    hidden = state.hidden
    if hidden is None or hidden.shape[0] != step.logits.shape[0]:
        raise DecodeError("SSMD: the draft forward kept no hidden states for this block")
    idx = step.masked.nonzero().squeeze(-1)  # (m,) masked block positions, left to right: the order sigma
    m = int(idx.numel())
    w = min(m, opts.ssmd_window) if opts.ssmd_window > 0 else cosine_window(m, int(step.generated.sum()))
    win = idx[:w]  # (w,) block positions = in-block offsets (blocks start at multiples of the block size)
    inner = model.model
    embed, lm_head = inner.get_input_embeddings(), inner.get_output_embeddings()
    nc_logits = step.logits[win]  # (w, V)
    h_win = hidden[win].to(model.device)  # (w, D)
    offsets = win.to(model.device)

    def causal(tokens: torch.Tensor) -> torch.Tensor:
        return causal_logits(
            model.ssmd_head, embed, lm_head, tokens.to(model.device), h_win, offsets, nc_logits.to(model.device)
        ).cpu()  # (w, V)

    tokens, decided, used = speculate_window(nc_logits, causal, cfg, step.generator, opts.ssmd_passes)
    n = int(tokens.numel())
    where = win[:n]
    step.block[where] = tokens
    step.masked[where] = False
    step.logp[where] = confidence_probs(decided, cfg).gather(-1, tokens[:, None]).squeeze(-1).log()
    tally["head_passes"] += used
    tally["extra_head_passes"] += max(0, used - 1)
    tally["windows"] += 1
    tally["window_positions"] += w
    return n


def decode(
    model: BlockDiffModel, prompt: torch.Tensor, max_tokens: int, cfg: DecodeConfig, generator: torch.Generator
) -> tuple[torch.Tensor, DecodeStats]:
    """`ssmd` on a prompt (P,) long -> (generated tokens (n,), stats)."""
    from infill.decoding.problem import Generation

    return ssmd(Generation(model, prompt, max_tokens, cfg, generator))


def ssmd(job: Generation) -> tuple[torch.Tensor, DecodeStats]:
    """Block-wise SSMD decoding -> (generated tokens (n,) long without the end token, n <= job.max_tokens;
    stats). stats.accepted holds the tokens revealed per full forward; stats.extra adds the pass counts (module
    docstring).

    `job` (infill.decoding.problem.Generation, built by infill.decoding.blockfill): job.prompt (P,) long, at most
    job.max_tokens tokens written after it with job.model, every draw from job.generator, job.on_step called after every
    step. job.model must ship an SSMD head and be position-aligned, its block size at most the head's (DecodeError
    otherwise)."""
    model = job.model
    head = model.ssmd_head
    if head is None:
        raise DecodeError(MISSING_HEAD)
    if model.shifted:
        raise DecodeError("--decoder ssmd runs position-aligned block-diffusion models only (SDAR style)")
    opts = options_of(SsmdOptions, job.cfg)
    bsz = opts.block_size or model.block_size
    if bsz > head.shape.max_block:
        raise DecodeError(f"the SSMD head decodes blocks of at most {head.shape.max_block} positions, not {bsz}")
    tally = {"head_passes": 0, "extra_head_passes": 0, "windows": 0, "window_positions": 0}

    def step_fn(step: Step) -> None:
        ssmd_step(step, tally, opts)

    tokens, stats = denoise(job, step_fn, hidden=True)
    layers = model.num_layers + 1
    stats.extra.update(
        {
            "mode": "ssmd",
            "causal_passes": opts.ssmd_passes,
            "window": opts.ssmd_window or "cosine",
            "head_passes": tally["head_passes"],
            "nfe_paper": stats.nfe + tally["extra_head_passes"] / layers,
            "nfe_plain": stats.nfe + tally["head_passes"],
            "windows": tally["windows"],
            "window_positions": tally["window_positions"],
        }
    )
    return tokens, stats
