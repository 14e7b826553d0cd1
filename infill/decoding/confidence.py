"""Block-wise decoding of block-diffusion models (S2D2 paper, Algorithm 1) with confidence-threshold denoising
steps (Algorithm 2).

Outer loop (Algorithm 1): the sequence [prompt ; max_tokens masks] is cut into blocks of B positions aligned
on absolute positions. The prompt's complete blocks are prefilled into the KV cache; the block holding the
prompt's tail is the first one decoded. For each block: repeat {draft forward -> denoising step} until no
position is masked, then commit the block to the cache. The commit forward also drafts the next block
(infill.models.blockdiff), so block size 1 costs one forward per token: plain AR decoding.

Denoising step (Algorithm 2), at the masked positions of the block:
- dynamic (cfg.unmask_per_step == 0): sample x^ ~ p, unmask every position whose confidence p(x^) > tau
  (cfg.threshold), and always the most confident one;
- static (cfg.unmask_per_step = n > 0): unmask the n most confident positions.
Confidence is the probability of the sampled token under softmax(logits / T) (T = 1 when greedy), so greedy
decoding still ranks positions.

Generation stops at the first end token once every position before it is decoded, after the token the job's
stop rule names in the decoded prefix (a one-line fill's line break; that token is kept), or after max_tokens.
Every forward is counted in the stats: prefill, drafts, verifies (S2D2), cache commits. stats.accepted holds
the tokens each denoising step unmasked, whatever the step function.
stats.extra["logprob"] sums, over the output and its end token, the log-probability each token had when it was
decoded (confidence probabilities; the verifier's for S2D2-verified tokens): a score for ranking candidates,
not an exact likelihood.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infill.config import BlockOptions, Sampling, options_of
from infill.decoding.sampling import sample, transform
from infill.decoding.stats import DecodeStats

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.problem import Generation, StopRule
    from infill.models.blockdiff import BlockDiffModel, KVState


# ---- sampling: infill.decoding.sampling's transform, the same for drafts and verifiers -----------------


def confidence_probs(logits: torch.Tensor, cfg: DecodeConfig) -> torch.Tensor:
    """(n, V) -> (n, V) probabilities for confidences and routing estimates: softmax(logits / T), with T = 1
    when greedy (T = 0), so that positions still rank."""
    import torch

    t = cfg.temperature if cfg.temperature > 0 else 1.0
    return torch.softmax(logits.detach().to(dtype=torch.float64) / t, dim=-1)


# ---- one denoising step --------------------------------------------------------------------------------


@dataclass
class Step:
    """What a denoising step sees. `block` (L,) and `masked` (L,) are views into the decoder's sequence; a
    step writes tokens into `block` and clears `masked` where it unmasks."""

    model: BlockDiffModel
    state: KVState
    block: torch.Tensor  # (L,) long, mask_id at undecoded positions
    masked: torch.Tensor  # (L,) bool, True = still to decode
    generated: torch.Tensor  # (L,) bool, True = a generated (non-prompt) position
    logits: torch.Tensor  # (L, V) draft predictions, aligned with positions
    logp: torch.Tensor  # (L,) float64 view: log-probability of each position's token when it was decoded
    cfg: DecodeConfig
    generator: torch.Generator
    stats: DecodeStats
    options: BlockOptions  # the block options read from `cfg` (the decoder's own, if it extends them, it reads)


StepFn = Callable[[Step], object]


def confidence_step(step: Step) -> int:
    """Algorithm 2: unmask by confidence (static or dynamic, see the module docstring). -> tokens unmasked."""
    import torch

    cfg, opts = step.cfg, step.options
    idx = step.masked.nonzero().squeeze(-1)  # (m,) masked block positions
    x_hat = sample(transform(step.logits[idx], cfg), step.generator)  # (m,)
    conf = confidence_probs(step.logits[idx], cfg).gather(-1, x_hat[:, None]).squeeze(-1)  # (m,)
    if opts.unmask_per_step > 0:  # static
        choose = torch.zeros_like(conf, dtype=torch.bool)
        choose[torch.topk(conf, min(opts.unmask_per_step, int(idx.numel()))).indices] = True
    else:  # dynamic
        choose = conf > opts.threshold
        choose[conf.argmax()] = True
    step.block[idx[choose]] = x_hat[choose]
    step.masked[idx[choose]] = False
    step.logp[idx[choose]] = torch.log(conf[choose])
    return int(choose.sum())


# ---- the outer loop --------------------------------------------------------------------------------------


def _end_of_generation(
    seq: torch.Tensor,
    start: int,
    stop: int,
    mask_id: int,
    end_ids: tuple[int, ...],
    rule: StopRule | None = None,
) -> tuple[int, int] | None:
    """Whether the generation seq[start:stop] is over, judged on its decoded prefix (every position before the
    first mask): (end of the output, end of its scored tokens) for the first end token (the output stops before
    it; its probability counts) or the token `rule` names before it (kept in the output); None while neither."""
    import torch

    gen = seq[start:stop]  # (g,)
    undecoded = (gen == mask_id).nonzero()
    limit = int(undecoded[0]) if undecoded.numel() else int(gen.numel())
    if limit == 0:
        return None
    end: int | None = None
    if end_ids:
        ends = torch.isin(gen[:limit], torch.tensor(end_ids, dtype=gen.dtype)).nonzero()
        end = int(ends[0]) if ends.numel() else None
    if rule is not None:
        at = rule(gen[: end if end is not None else limit].tolist())
        if at is not None:
            return start + at + 1, start + at + 1
    return (start + end, start + end + 1) if end is not None else None


def denoise(job: Generation, step_fn: StepFn | None = None, hidden: bool = False) -> tuple[torch.Tensor, DecodeStats]:
    """Algorithm 1 -> (generated tokens (n,) long without the end token, n <= job.max_tokens; stats).

    `job` (infill.decoding.problem.Generation, built by infill.decoding.blockfill): job.prompt (P,) long, at most
    job.max_tokens tokens written after it with job.model, every draw from job.generator, job.on_step called after every
    step. Blocks of cfg.block_size (else the model's) are decoded one after another: each step sees the block's draft
    logits (L, V) and unmasks some of its positions (Step); a full block is committed to the cache. `step_fn` is the
    denoising step (default: confidence_step); S2D2 and SSMD pass their own. `hidden` keeps the draft forwards' last
    hidden states in `step.state.hidden` (SSMD's causal head reads them)."""
    import torch

    model, prompt, max_tokens, cfg = job.model, job.prompt, job.max_tokens, job.cfg
    options_of(Sampling, cfg)
    opts = options_of(BlockOptions, cfg)  # the decoders that run this loop (S2D2, SSMD) build their own too
    t0 = time.perf_counter()
    step: StepFn = step_fn or confidence_step
    stats = DecodeStats(decoder=cfg.decoder)
    n_prompt, bsz, mask_id = int(prompt.numel()), opts.block_size or model.block_size, model.mask_id
    total = n_prompt + max_tokens
    state = model.new_state()
    state.want_hidden = hidden
    seq = torch.cat([prompt.long().cpu(), torch.full((max_tokens,), mask_id, dtype=torch.long)])  # (P+max,)
    logp = torch.zeros(total, dtype=torch.float64)  # (P+max,)
    end_at: tuple[int, int] | None = None  # (end of the output, end of its scored tokens) once it is over
    b_start = (n_prompt // bsz) * bsz  # the block holding the prompt's tail (or the first generated one)
    b_end = min(b_start + bsz, total)
    logits: torch.Tensor | None = None
    if max_tokens > 0 and b_start > 0:
        logits = model.commit(state, seq[:b_start], bsz, draft_ids=seq[b_start:b_end], kind="prefill")
    steps = blocks = 0
    while max_tokens > 0:
        block = seq[b_start:b_end]  # (L,) view
        generated = torch.arange(b_start, b_end) >= n_prompt  # (L,)
        masked = block == mask_id  # (L,)
        while bool(masked.any()):
            if logits is None:
                logits = model.draft(state, block)
            view = logp[b_start:b_end]
            before = int(masked.sum())
            step(Step(model, state, block, masked, generated, logits, view, cfg, job.generator, stats, opts))
            stats.accepted.append(before - int(masked.sum()))  # tokens this step made final
            logits = None
            steps += 1
            end_at = _end_of_generation(seq, n_prompt, b_end, mask_id, model.end_ids, job.stop)
            if job.on_step is not None:
                decoded = int((seq[n_prompt:] != mask_id).sum())
                job.on_step({"tokens": decoded, "nfe": state.nfe, "block": blocks})
            if end_at is not None:
                break
        blocks += 1
        if end_at is not None or b_end == total:
            break
        nb_end = min(b_end + bsz, total)
        logits = model.commit(state, block, bsz, draft_ids=seq[b_end:nb_end])
        b_start, b_end = b_end, nb_end
    out_end, stop = end_at if end_at is not None else (total, total)  # an end token's probability counts too
    out = seq[n_prompt:out_end].clone()  # (n,)
    stats.nfe = state.nfe
    stats.tokens = stop - n_prompt
    stats.seconds = time.perf_counter() - t0
    stats.extra.update(
        {
            "forwards": dict(state.counts),
            "steps": steps,
            "blocks": blocks,
            "block_size": bsz,
            "ended": end_at is not None,
            "mode": "static" if opts.unmask_per_step > 0 else "dynamic",
            "logprob": float(logp[n_prompt:stop].sum()),
        }
    )
    return out, stats
