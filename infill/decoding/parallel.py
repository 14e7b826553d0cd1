"""The mean-field baseline: every masked position in a chunk of k is sampled independently from one pass.

Not exact (it ignores the dependence between positions filled in the same pass); it exists as a baseline and
to show that the exactness test has power. NFE = ceil(M / k).
"""

from __future__ import annotations

from infill.config import ParallelOptions, options_of
from infill.decoding.healing import heal
from infill.decoding.problem import LeftToRight, ends_span, force_pads
from infill.decoding.sampling import sample, transform


def parallel(run: LeftToRight) -> None:
    """Fill run.problem in chunks of `cfg.k` positions, one draft pass per chunk: the k positions of a chunk are
    sampled independently from model.draft's (k, V) logits, so the fill does not follow the model's joint (the
    mean-field baseline). `run`: as for infill.decoding.assd.assd (run.ids (N,) filled in place at run.masked
    (M,)); returns nothing."""
    import torch

    model, problem, cfg, generator = run.model, run.problem, run.cfg, run.generator
    chunk = options_of(ParallelOptions, cfg).k
    ids, masked, stats = run.ids, run.masked, run.stats
    n = heal(run)  # token healing's first tokens (exact), then the chunks
    if n:
        n = run.settle(0, n, torch.zeros_like(ids, dtype=torch.bool))
    while n < run.total:
        targets = masked[n : n + chunk]  # (k',)
        logits = model.draft(ids, masked, n, targets)  # (k', V)
        stats.nfe += 1
        x = sample(transform(logits, cfg), generator)  # (k',)
        ids[targets] = x
        before = n
        n += targets.shape[0]
        if run.pads:  # a pad ends its span: overwrite the rest of that span (and later spans keep their samples)
            j = before
            while j < n:
                if ends_span(model, problem, ids, j, int(ids[masked[j]])):
                    j = force_pads(ids, model, problem, j)
                else:
                    j += 1
            n = max(n, j)
        n = run.advance(before, n)
