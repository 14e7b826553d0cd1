"""Token healing: a fill whose text must begin with given characters (docs/decoding.md, "Token healing").

A span that starts inside a word (`len(valu`) ends its prompt on a piece the tokenizer would not produce there:
`valu` is rarely a token, `values` is. The planner (infill.core.plan) backs the prompt up to the start of that
last pre-token and hands the decoder the removed text r (`FillProblem.heal`); the fill must begin with r, which
is cut off again before the fill is written. A token is consistent with what remains of r when its bytes begin
with the rest (it writes it and may go on: `values` after `valu`) or are a beginning of it (`val`).

What each decoder makes of the constraint, the event F = "the fill's text begins with r":
- samplers (sequential; ASSD with every draft, which then speculate from where healing ended; the mean-field
  baseline) draw the tokens that spell r from exactly p(. | prompt, F), by rejection (`heal`): the first token
  from the model's (transformed) conditional restricted to the consistent tokens and renormalised, each later
  one from the model's conditional unchanged; when a later token leaves r, the draw starts over from the first.
  What follows is the decoder's own, so the whole fill follows p(fill | prompt, F).
- greedy decoding (temperature 0) takes the most likely consistent token at every step;
- beam search (infill.decoding.beam) leaves inconsistent tokens out of the search and ranks by the joint
  log-probability, which is log p(fill | prompt, F) up to the constant log p(F).

Why the rejection is exact. Let S = the mass of the consistent first tokens. One try draws a path x_1..x_j that
spells r (x_j covers the last of it) with probability p(x_1)/S * p(x_2 | x_1) ... p(x_j | x_<j) = p(x_1..x_j) / S,
and tries are independent, so the accepted path follows p(x_1..x_j) / p(F): the conditional given F. A try fails
only where a token that spells part of r is followed by one that leaves it: the expected number of tries is
S / p(F), 1 when the likely consistent tokens write all of r at once. After MAX_TRIES the rest of r is imposed
step by step, renormalised at every step (not exact); `stats.extra["heal_lossy"]` says when. A fill's later draws
with the same constraint (the samples of a rescue) then impose it so from the start (Healing.stepwise): each would
most likely spend its MAX_TRIES tries too (S / p(F) > MAX_TRIES), a model pass or more each, to end the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.decoding.sampling import sample, transform
from infill.errors import DecodeError

if TYPE_CHECKING:
    import torch

    from infill.decoding.problem import LeftToRight
    from infill.models.base import Healing

MAX_TRIES = 64  # tries of the exact rejection before the rest of the constraint is imposed step by step


def allowed_logits(logits: torch.Tensor, healing: Healing, written: bytes) -> torch.Tensor:
    """`logits` (k, V) with the tokens inconsistent with what remains of healing.text after `written` at -inf
    (unchanged once it is all written)."""
    rest = healing.rest(written)
    if not rest:
        return logits
    return logits.masked_fill(~healing.mask(rest, logits.shape[-1]), float("-inf"))


def heal(run: LeftToRight) -> int:
    """Decode the fill's first tokens, those that write run.problem.heal.text (module docstring), into run.ids;
    returns how many masked positions they took (0 without a constraint). One draft pass (one target: the exact
    conditional) per token. DecodeError when no token can begin the fill with the text, or the fill's budget is
    too short for it. stats.extra gets `healed` (tokens), `heal_tries` and, after MAX_TRIES, `heal_lossy`."""
    import torch

    healing = run.problem.heal
    if healing is None:
        return 0
    model, cfg, ids, masked, stats = run.model, run.cfg, run.ids, run.masked, run.stats
    greedy = cfg.temperature == 0
    tries = 0
    while True:
        tries += 1
        # every step restricted (greedy: the best consistent token)
        stepwise = greedy or healing.stepwise or tries > MAX_TRIES
        n, written, left = 0, b"", False
        while rest := healing.rest(written):
            if n >= run.total:
                raise DecodeError(f"the fill's {run.total} tokens cannot hold the text it must begin with")
            logits = model.draft(ids, masked, n, masked[n : n + 1])  # (1, V)
            stats.nfe += 1
            allowed = healing.mask(rest, logits.shape[-1])  # (V,)
            if n == 0 or stepwise:
                if not bool(torch.isfinite(logits[0][allowed]).any()):
                    raise DecodeError(f"no token can begin the fill with {healing.text!r}")
                pr = transform(logits, cfg)[0] * allowed  # (V,) the (transformed) conditional on consistent tokens
                if not float(pr.sum()) > 0:  # none survives top-k / top-p (or greedy): restrict, then transform
                    pr = transform(logits.masked_fill(~allowed, float("-inf")), cfg)[0]
                x = int(sample((pr / pr.sum())[None, :], run.generator)[0])
            else:
                x = int(sample(transform(logits, cfg), run.generator)[0])
                if not bool(allowed[x]):
                    left = True
                    break
            ids[masked[n]] = x
            written += healing.pieces.pieces[x]
            n += 1
        if not left:
            break
        ids[masked[:n]] = model.mask_id  # start over
    stats.extra.update(healed=n, heal_tries=tries)
    if tries > MAX_TRIES or (healing.stepwise and not greedy):
        stats.extra["heal_lossy"] = True
    return n
