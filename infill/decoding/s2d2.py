"""S2D2: self-speculative decoding for block-diffusion models (S2D2 paper, Algorithm 3).

At a denoising step the draft forward gave p at every masked position of the block. The router (routing.py,
Algorithm 4) decides whether to verify:
- verify: sample drafts x^_i ~ p_i on the FIRST contiguous masked span C_t; the same model in block-size-1
  (AR) mode gives q_i for the span in one forward (the 2L trick for position-aligned models, the causal view
  for right-shifted ones; infill.models.blockdiff.BlockDiffModel.verify). Scan left to right: accept x^_i
  with probability min(1, (q_i(x^_i) / p_i(x^_i))^gamma); at the first rejection resample that position
  from (q_i - p_i)+ and stop. With gamma = 1 the accepted prefix plus the correction follows the AR
  verifier exactly (speculative sampling); gamma < 1 accepts more and is lossy.
- skip: a confidence step (Algorithm 2, confidence.py).
Variable names follow the paper: p = draft density, q = verifier density.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.config import S2D2Options, options_of
from infill.decoding.confidence import Step, confidence_probs, confidence_step, denoise
from infill.decoding.routing import Router, RoutingConfig, features, make_router, parse_routing
from infill.decoding.sampling import sample, transform
from infill.decoding.speculative import Acceptance, Proposal, accept

if TYPE_CHECKING:
    import torch

    from infill.decoding.problem import Generation
    from infill.decoding.stats import DecodeStats


def accept_prefix(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator, gamma: float = 1.0
) -> tuple[int, int | None]:
    """S2D2's and SSMD's acceptance over a span: infill.decoding.speculative.accept in the "span-first" order.

    p, q (S, V) probabilities; drafts (S,) with p[i, drafts[i]] > 0. Returns (accepted, correction):
    drafts[:accepted] are kept; `correction` is the token resampled from (q - p)+ at position `accepted` after a
    rejection, or None when every draft was accepted. S uniforms are drawn up front from `generator`, then one
    multinomial draw at a rejection."""
    return accept(Proposal(drafts, p), q, Acceptance(order="span-first", gamma=gamma), generator)


def first_masked_span(masked: torch.Tensor) -> tuple[int, int]:
    """(L,) bool -> (start, length) of the first contiguous run of True; (0, 0) when nothing is masked."""
    idx = masked.nonzero().squeeze(-1)
    if idx.numel() == 0:
        return 0, 0
    start = int(idx[0])
    length = 1
    while start + length < masked.numel() and bool(masked[start + length]):
        length += 1
    return start, length


def s2d2_step(step: Step, router: Router, rc: RoutingConfig, opts: S2D2Options) -> int:
    """Algorithm 3: one denoising step, verified or not as the router decides. Returns tokens unmasked."""
    cfg, model, state = step.cfg, step.model, step.state
    nfe0 = state.nfe
    s, n = first_masked_span(step.masked)
    conf_p = confidence_probs(step.logits, cfg)  # (L, V)
    masked_conf = conf_p[step.masked].max(dim=-1).values  # (m,) top confidence at each masked position
    n_gen = int(step.generated.sum())
    progress = 1.0 - float(step.masked.sum()) / max(n_gen, 1)
    f = features(conf_p[s : s + n], int((masked_conf > opts.threshold).sum()), progress, rc)
    if not router.decide(f):
        got = confidence_step(step)
        router.update(False, got, 1 + state.nfe - nfe0)
        return got
    p = transform(step.logits[s : s + n], cfg)  # (S, V) draft densities: the model's own draft pass
    x_hat = sample(p, step.generator)  # (S,)
    filled = step.block.clone()  # (L,)
    filled[s : s + n] = x_hat
    q_logits = model.verify(state, filled, s, n)  # (S, V)
    q = transform(q_logits, cfg)  # (S, V) verifier densities
    accepted, fix = accept_prefix(p, q, x_hat, step.generator, opts.gamma)
    step.block[s : s + accepted] = x_hat[:accepted]
    step.masked[s : s + accepted] = False
    if fix is not None:
        step.block[s + accepted] = fix
        step.masked[s + accepted] = False
    kept = accepted + (fix is not None)
    step.logp[s : s + kept] = (
        confidence_probs(q_logits[:kept], cfg).gather(-1, step.block[s : s + kept, None]).log().squeeze(-1)
    )
    step.stats.extra.setdefault("drafts_accepted", []).append(accepted)
    step.stats.extra["verifications"] = step.stats.extra.get("verifications", 0) + 1
    step.stats.extra["verified_tokens"] = step.stats.extra.get("verified_tokens", 0) + kept
    router.update(True, kept, 1 + state.nfe - nfe0)  # cost: the draft forward plus the verifier's
    return kept


def s2d2(job: Generation) -> tuple[torch.Tensor, DecodeStats]:
    """Block-wise S2D2 decoding -> (generated tokens (n,) long without the end token, n <= job.max_tokens;
    stats). stats.accepted holds the tokens each denoising step unmasked (verified or not); stats.extra adds
    `verifications`, `verified_tokens` and `drafts_accepted`, the drafts accepted per verification (before the
    correction).

    `job` (infill.decoding.problem.Generation, built by infill.decoding.blockfill): job.prompt (P,) long, at most
    job.max_tokens tokens written after it with job.model, every draw from job.generator, job.on_step called after every
    step. A routed step verifies a span of S drafts with the model's block-size-1 predictions q (S, V)
    (BlockDiffModel.verify) through infill.decoding.speculative.accept."""
    opts = options_of(S2D2Options, job.cfg)
    rc = parse_routing(opts.routing)
    router = make_router(rc)

    def step_fn(step: Step) -> None:
        s2d2_step(step, router, rc, opts)

    tokens, stats = denoise(job, step_fn)
    stats.extra.setdefault("verifications", 0)
    stats.extra.setdefault("verified_tokens", 0)
    stats.extra.setdefault("drafts_accepted", [])
    stats.extra["routing"] = opts.routing
    return tokens, stats
