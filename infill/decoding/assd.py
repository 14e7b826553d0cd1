"""Any-Subset Speculative Decoding: Algorithm 1 of the ASSD paper, with the n-gram draft of Algorithm 2.

Names follow the paper: p = draft density, q = oracle (verify) density, n = tokens decoded so far,
k = speculation width. Our `n` counts decoded *masked* positions (the paper's n minus the m prompt positions)
and `M` is the number of masked positions (the paper's N - m); `masked[n]` is the paper's σ(m + n).

Repeat while n < M:
  1. Draft: one forward gives p(. | prompt, x_{<n}) at masked[n:t], t = min(n + k, M); sample x~_i ~ p_i.
  2. Last token: if n == M - 1, accept the draft and stop (Lemma 1: it would be accepted anyway).
  3. Verify: one forward with the drafts written in gives q_i = q(. | prompt, x_{<n}, x~_{n..i-1}).
  4. Accept x~_i if r < min(1, q_i(x~_i) / p_i(x~_i)), left to right; the first draft is accepted
     unconditionally (Lemma 1: p == q there). At the first rejection sample from (q_i - p_i)+ normalised
     and stop.
  5. No bonus token after a fully accepted window.
Theorem 2: the fill follows the oracle's joint exactly (for the temperature/top-k/top-p-transformed q, since
the same transform is applied to p). Theorem 1: NFE <= M for k >= 2 (an iteration costs 2 passes and yields
>= 2 tokens, except a final single token, which costs 1 pass).

Options (DecodeConfig):
  draft="ngram"  Algorithm 2: p is a bigram model of the visible context (prompt + decoded), conditioned on
                 the previous position's token (real, or this window's draft). No draft forward, but Lemma 1
                 no longer holds, so the first draft is tested like the others and NFE may exceed M.
  epsilon > 0    LOSSY: accept if r < min(1, q/p + epsilon). Breaks exactness; off (0) by default.
Variable-length spans: with `problem.span_of` and `model.pad_id` set, an accepted or resampled pad ends its
span: the scan stops there and the rest of that span becomes pad without forward passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.config import AssdOptions, options_of
from infill.decoding.problem import LeftToRight, StepCallback
from infill.decoding.sampling import probs, residual, sample, uniform
from infill.decoding.stats import DecodeStats
from infill.errors import DecodeError

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.models.base import AnySubsetModel, FillProblem


def accept_or_reject(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    generator: torch.Generator,
    *,
    first_exact: bool,
    epsilon: float = 0.0,
) -> tuple[int, int | None]:
    """Step 4 of Algorithm 1 on one window.

    p, q: (k, V) draft and oracle probabilities; drafts: (k,) long, drafts[i] ~ p[i].
    Returns (a, x): the first `a` drafts are accepted; x is the token resampled from (q_a - p_a)+ at the first
    rejection, or None when all k drafts were accepted (no bonus token). `first_exact` accepts drafts[0]
    without a test (Lemma 1; only valid for the model draft, where p_0 == q_0).
    """
    k = drafts.shape[0]
    for i in range(k):
        if i == 0 and first_exact:
            continue
        x = int(drafts[i])
        ratio = float(q[i, x] / p[i, x])  # p[i, x] > 0: x was sampled from p[i]
        r = uniform(generator)
        if not r < min(1.0, ratio + epsilon):
            return i, int(sample(residual(q[i], p[i])[None, :], generator)[0])
    return k, None


def ngram_draft(
    ids: torch.Tensor,
    visible: torch.Tensor,
    targets: torch.Tensor,
    vocab_size: int,
    mask_id: int,
    cfg: DecodeConfig,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 2: bigram drafts from the visible context. Returns (drafts (k,) long, p (k, V) float64).

    ids (N,) long, visible (N,) bool (prompt + decoded), targets (k,) long positions. The bigram counts come
    from adjacent visible pairs only; the conditioning token is the previous position's real token or this
    window's draft. Without a usable bigram it falls back to the visible unigram, then to uniform.
    """
    import torch

    pair_ok = visible[:-1] & visible[1:]  # (N-1,) adjacent visible pairs
    pair_prev, pair_next = ids[:-1][pair_ok], ids[1:][pair_ok]  # (P,), (P,)
    unigram = torch.bincount(ids[visible], minlength=vocab_size)[:vocab_size].double()  # (V,)
    unigram[mask_id] = 0.0
    cur = ids.clone()
    cur_visible = visible.clone()
    drafts = torch.empty(targets.shape[0], dtype=torch.long)
    rows = []
    for i, pos in enumerate(targets.tolist()):
        counts = unigram
        if pos > 0 and bool(cur_visible[pos - 1]):
            sel = pair_next[pair_prev == cur[pos - 1]]  # tokens that followed the previous token
            if sel.numel() > 0:
                counts = torch.bincount(sel, minlength=vocab_size)[:vocab_size].double()
                counts[mask_id] = 0.0
        if counts.sum() == 0:
            counts = torch.ones(vocab_size, dtype=torch.float64)
            counts[mask_id] = 0.0
        pr = probs(torch.log(counts)[None, :], cfg.temperature, cfg.top_k, cfg.top_p)  # (1, V)
        x = int(sample(pr, generator)[0])
        drafts[i] = x
        rows.append(pr[0])
        cur[pos] = x
        cur_visible[pos] = True
    return drafts, torch.stack(rows)  # (k,), (k, V)


def assd(
    model: AnySubsetModel,
    problem: FillProblem,
    cfg: DecodeConfig,
    generator: torch.Generator,
    on_step: StepCallback | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Fill `problem.masked` with Algorithm 1 (speculation width cfg.k >= 2). Returns (tokens (M,) long,
    stats)."""
    import torch

    opts = options_of(AssdOptions, cfg)
    if opts.draft == "lookup":
        raise DecodeError("the lookup draft runs in infill.decoding.lookup (decode() picks it)")
    k = opts.k
    use_ngram = opts.draft == "ngram"
    stats = DecodeStats(decoder="assd", extra={"k": k, "draft": opts.draft, "drafted": 0, "rejections": 0})
    if opts.epsilon > 0:
        stats.extra["lossy_epsilon"] = opts.epsilon
    run = LeftToRight.begin(model, problem, cfg, stats, on_step)
    ids, masked, M = run.ids, run.masked, run.total  # (N,): prompt, decoded x_{<n}, <mask> elsewhere; (M,) order
    visible = torch.ones_like(ids, dtype=torch.bool)  # (N,) prompt + decoded, for the n-gram draft
    visible[masked] = False

    n = 0
    while n < M:
        t = min(n + k, M)
        targets = masked[n:t]  # (t - n,) positions σ(n..t-1)

        # 1. Draft: x~_i ~ p_i, conditionally independent given the prompt and x_{<n}
        if use_ngram:
            x_tilde, p = ngram_draft(ids, visible, targets, model.vocab_size, model.mask_id, cfg, generator)
        else:
            p = probs(model.draft(ids, masked, n, targets), cfg.temperature, cfg.top_k, cfg.top_p)  # (t-n, V)
            stats.nfe += 1
            x_tilde = sample(p, generator)  # (t-n,)
        stats.extra["drafted"] += t - n

        # 2. Last token: Lemma 1, the draft is the oracle's sample
        if not use_ngram and n == M - 1:
            ids[targets[0]] = x_tilde[0]
            visible[targets[0]] = True
            n = run.advance(n, M)
            break

        # 3. Verify: q_i with the drafts written in (one forward)
        ids[targets] = x_tilde
        q = probs(model.verify(ids, masked, n, targets), cfg.temperature, cfg.top_k, cfg.top_p)  # (t-n, V)
        stats.nfe += 1

        # 4. Accept left to right; resample from (q - p)+ at the first rejection; 5. no bonus token
        a, x_res = accept_or_reject(p, q, x_tilde, generator, first_exact=not use_ngram, epsilon=opts.epsilon)
        new_n = n + a
        if x_res is not None:
            ids[targets[a]] = x_res
            new_n += 1
            stats.extra["rejections"] += 1
        n = run.settle(model, problem, n, new_n, visible)
    return run.result()
