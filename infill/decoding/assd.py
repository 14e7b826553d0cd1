"""Any-Subset Speculative Decoding (Algorithm 1 of the ASSD paper): the verification loop of the any-subset
kind, with a pluggable draft source (infill.config.DRAFTS: the model itself, a bigram of the visible text, prompt
lookup).

Names follow the paper: p = draft density, q = oracle (verify) density, n = tokens decoded so far,
k = speculation width. Our `n` counts decoded *masked* positions (the paper's n minus the m prompt positions)
and `M` is the number of masked positions (the paper's N - m); `masked[n]` is the paper's σ(m + n).

Repeat while n < M:
  1. Draft: the draft source proposes L tokens for masked[n : n + L] with their draft probabilities
     (infill.decoding.speculative.Proposal). The model draft (infill.decoding.drafts) is one forward giving
     p(. | prompt, x_{<n}) at masked[n:t], t = min(n + k, M), and samples x~_i ~ p_i.
  2. A lone draft that is the model's own sample (the model draft's last token, or a sequential step when a
     source has nothing to propose) is accepted without a verify pass (Lemma 1).
  3. Verify: one forward with the drafts written in gives q_i = q(. | prompt, x_{<n}, x~_{n..i-1}) (one row more,
     for a bonus token, when the source asks for it).
  4. Accept or reject (infill.decoding.speculative.accept, the "as-tested" order): x~_i is accepted if
     r < min(1, q_i(x~_i) / p_i(x~_i)), left to right; the model draft's first is accepted unconditionally
     (Lemma 1: p == q there). At the first rejection sample from (q_i - p_i)+ normalised and stop; a bonus row
     gives a token from q after a fully accepted window.
Theorem 2: the fill follows the oracle's joint exactly (for the temperature/top-k/top-p-transformed q, since
the same transform is applied to p). Theorem 1: NFE <= M for the model draft with k >= 2 (an iteration costs 2
passes and yields >= 2 tokens, except a final single token, which costs 1 pass).

Drafts (--draft; each a `DraftSource` of infill.decoding.drafts, registered there and in infill.config.DRAFTS):
  model   the model's draft pass (infill.decoding.drafts).
  ngram   Algorithm 2: a bigram model of the visible context (infill.decoding.ngram). No draft forward, but
          Lemma 1 no longer holds, so the first draft is tested like the others and NFE may exceed M.
  lookup  copies of what followed the same tokens elsewhere in the text, point masses verified with a bonus row
          (infill.decoding.lookup).
  epsilon > 0 is LOSSY: accept if r < min(1, q/p + epsilon). Breaks exactness; off (0) by default.
Token healing (infill.decoding.healing): when the fill must begin with given text, its first tokens are drawn
exactly from the model's conditional on that before the loop starts; the loop then speculates from there.
Variable-length spans: with `problem.span_of` and `model.pad_id` set, an accepted or resampled pad ends its
span: the scan stops there and the rest of that span becomes pad without forward passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.config import AssdOptions, options_of
from infill.decoding.drafts import DRAFT_SOURCES, DraftSource, ModelDraft
from infill.decoding.healing import heal
from infill.decoding.problem import LeftToRight
from infill.decoding.sampling import transform
from infill.decoding.speculative import Acceptance, accept

if TYPE_CHECKING:
    pass


def assd(run: LeftToRight) -> None:
    """Fill run.problem with Algorithm 1 and the draft source cfg.draft (module docstring); cfg.k is the
    speculation width (the longest lookup draft). stats.extra counts `drafted` tokens, `rejections` and
    `sequential_steps` (steps without a proposal).

    `run` (infill.decoding.problem.LeftToRight, built by infill.decoding.decode): run.ids (N,) long is filled in
    place at run.masked (M,) long, in that order, drawing from run.generator; returns nothing (decode returns
    run.result(): the tokens (M,) long in decoding order, and run.stats)."""
    opts = options_of(AssdOptions, run.cfg)
    run.stats.extra.update(k=opts.k, draft=opts.draft)
    if opts.epsilon > 0:
        run.stats.extra["lossy_epsilon"] = opts.epsilon
    source: DraftSource = DRAFT_SOURCES[opts.draft](run.model, run.cfg, opts.k)
    speculate(run, source, Acceptance(order="as-tested", epsilon=opts.epsilon))


def sequential(run: LeftToRight) -> None:
    """Exact sequential decoding (Eq. 4): one forward pass per masked token, left to right. It is the loop below
    with the model's own draft of the next token alone, which is the oracle's sample (with one target the draft
    mask equals the oracle mask), so nothing is ever verified and the fill follows the joint by the chain rule.

    `run`: as for `assd` (run.ids (N,) filled in place at run.masked (M,)); returns nothing. M passes at most."""
    speculate(run, ModelDraft(run.model, run.cfg, 1), Acceptance())


def speculate(run: LeftToRight, source: DraftSource, rule: Acceptance) -> None:
    """The verification loop (module docstring): drafts from `source`, one verify pass, `rule` accepts.

    Fills run.ids (N,) in place at run.masked (M,); each iteration verifies the L drafts of one Proposal with
    q (L or L + 1, V) from model.verify and records the tokens it made final in run.stats.accepted."""
    import torch

    model, cfg, generator, stats = run.model, run.cfg, run.generator, run.stats
    ids, masked, M = run.ids, run.masked, run.total  # (N,): prompt, decoded x_{<n}, <mask> elsewhere; (M,) order
    stats.extra.update(drafted=0, rejections=0, sequential_steps=0)
    fallback = ModelDraft(model, cfg, 1)  # the next token alone: a sequential step
    visible = torch.ones_like(ids, dtype=torch.bool)  # (N,) prompt + decoded, for the drafts that read the text
    visible[masked] = False
    n = run.settle(0, heal(run), visible) if run.problem.heal is not None else 0  # token healing's first tokens
    while n < M:
        proposal = source.propose(run, visible, n, generator)
        if proposal is None:
            proposal = fallback.propose(run, visible, n, generator)
            stats.extra["sequential_steps"] += 1
        else:
            stats.extra["drafted"] += len(proposal)
        stats.nfe += proposal.passes
        size = len(proposal)
        targets = masked[n : n + size + proposal.bonus]  # the drafts' positions (and the bonus row's)
        if proposal.first_exact and size == 1 and not proposal.bonus:  # Lemma 1: nothing to verify
            ids[targets[0]] = proposal.tokens[0]
            n = run.settle(n, n + 1, visible)
            continue
        ids[targets[:size]] = proposal.tokens
        q = transform(model.verify(ids, masked, n, targets), cfg)  # (L [+ 1], V)
        stats.nfe += 1
        accepted, token = accept(proposal, q, rule, generator)
        source.verified(accepted, size)
        new_n = n + accepted
        if token is not None:  # the correction after a rejection, or the bonus token
            ids[targets[accepted]] = token
            new_n += 1
        stats.extra["rejections"] += accepted < size
        n = run.settle(n, new_n, visible)
