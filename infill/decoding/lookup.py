"""Prompt-lookup drafts for ASSD: code repeats itself, so copy, then verify exactly.

At decoded count n, the tokens just before the next masked position are looked up in the visible sequence
(the prompt on both sides of the gap, and the tokens decoded so far); where they occurred before, the tokens
that followed them there are the draft d_1..d_L (the longest match wins, the nearest on ties). The draft is
deterministic: p = one-hot(d_i). The verify pass gives q_i = q(. | prompt, x_{<n}, d_{<i}) at masked[n..n+L]
(one more row than drafts: a bonus position). Left to right, d_i is accepted with probability
min(1, q_i(d_i) / p_i(d_i)) = q_i(d_i); at the first rejection a token is drawn from (q_i - p_i)+ normalised,
i.e. q_i without d_i; if all L are accepted the bonus token is drawn from q_{L+1} itself
(infill.decoding.speculative.accept). That is speculative sampling with a point-mass draft, so every token
follows the model's conditionals exactly, and every pass yields at least one token.

Without a match there is nothing to propose: the loop takes a plain sequential step (one draft pass, one
target, which is exact). The draft length adapts: it doubles (up to k) after a fully accepted draft and falls to
what was accepted plus one after a rejection, so a run of bad guesses costs little.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.decoding.speculative import Proposal

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.problem import LeftToRight
    from infill.models.base import AnySubsetModel

MIN_MATCH = 1  # tokens of context that must match before a continuation is copied
MAX_MATCH = 8


def lookup(tokens: list[int], visible: list[bool], pos: int, length: int) -> list[int]:
    """Up to `length` tokens that followed the longest earlier (or later) occurrence of tokens[pos-m:pos],
    m = MAX_MATCH .. MIN_MATCH, elsewhere in the visible sequence; [] if none. tokens[:pos] are all visible."""
    N = len(tokens)
    for m in range(min(MAX_MATCH, pos), MIN_MATCH - 1, -1):
        key = tokens[pos - m : pos]
        best: list[int] = []
        best_dist = N + 1
        for j in range(0, N - m):
            if j == pos - m or tokens[j : j + m] != key or not all(visible[j : j + m]):
                continue
            out = []
            for t in range(j + m, min(N, j + m + length)):
                if not visible[t]:
                    break
                out.append(tokens[t])
            if out and (len(out) > len(best) or (len(out) == len(best) and abs(j - pos) < best_dist)):
                best, best_dist = out, abs(j - pos)
        if best:
            return best
    return []


class LookupDraft:
    """infill.decoding.drafts.DraftSource: copies of the visible text as point masses, with a bonus row."""

    def __init__(self, model: AnySubsetModel, cfg: DecodeConfig, k: int) -> None:
        self.longest = k
        self.window = min(4, k)  # positions per step: the drafts and the bonus row

    def propose(self, run: LeftToRight, visible: torch.Tensor, n: int, generator: torch.Generator) -> Proposal | None:
        import torch

        masked, M = run.masked, run.total
        pos = int(masked[n])
        room = 0  # masked positions right after each other from n on: drafts are copied into a contiguous run
        while n + room < M and int(masked[n + room]) == pos + room and room < self.window:
            room += 1
        drafts = lookup(run.ids.tolist(), visible.tolist(), pos, room) if room > 1 else []
        drafts = drafts[: room - 1]  # keep a row for the bonus token
        if not drafts:
            return None
        return Proposal(torch.tensor(drafts), None, bonus=True)

    def verified(self, accepted: int, drafted: int) -> None:
        if accepted < drafted:
            self.window = max(2, accepted + 1)
        else:
            self.window = min(self.longest, 2 * self.window)
