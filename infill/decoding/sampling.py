"""Logits -> probabilities -> samples, with one seeded `torch.Generator` (docs/decoding.md).

The same `probs()` transform (temperature, top-k, top-p) must be applied to the draft p and the oracle q; the
exactness guarantee then holds for the transformed joint. Temperature 0 is greedy: a one-hot distribution at
the argmax, so speculative acceptance degenerates to "accept iff the oracle's argmax equals the draft".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig, Sampling


def probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """(k, V) logits -> (k, V) float64 probabilities after temperature, top-k and top-p (rows sum to 1).

    float64 keeps acceptance ratios q/p and residuals free of float32 round-off on tiny models.
    """
    import torch

    x = logits.detach().to(device="cpu", dtype=torch.float64)  # (k, V)
    if temperature == 0:
        out = torch.zeros_like(x)
        out.scatter_(-1, x.argmax(dim=-1, keepdim=True), 1.0)
        return out
    x = (x - x.max(dim=-1, keepdim=True).values) / temperature  # the max first: 1e-320 would make x/T inf (nan)
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[:, -1:]  # (k, 1)
        x = x.masked_fill(x < kth, float("-inf"))
    pr = torch.softmax(x, dim=-1)  # (k, V)
    if top_p < 1.0:
        sorted_p, order = torch.sort(pr, dim=-1, descending=True)  # (k, V)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass strictly before each token
        # keep the smallest prefix whose mass reaches top_p (the first token always stays)
        drop_sorted = before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        pr = pr.masked_fill(drop, 0.0)
        pr = pr / pr.sum(dim=-1, keepdim=True)
    return pr


def transform(logits: torch.Tensor, cfg: DecodeConfig | Sampling) -> torch.Tensor:
    """`probs` with the settings of `cfg`: (n, V) logits -> (n, V) float64 probabilities, the one transform every
    sampler applies to its drafts and its verifier alike."""
    return probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)


def sample(pr: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of (k, V) probabilities -> (k,) long."""
    import torch

    return torch.multinomial(pr, 1, generator=generator).squeeze(-1)


def draw(pr: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """`sample`, except that rows that are all one-hot (temperature 0) give their argmax without a draw.

    A draw of one token costs V exponential variates (about 5 ms for a code model's 152k-token vocabulary, a tenth
    of a llama.cpp pass of a 0.5B model) for an outcome that is certain. The generator is then left as it was:
    the same for every later draw of this seed and version. Drafts are drawn this way (`Proposal.sampled`); the
    acceptance test's residual and bonus draws keep `sample`'s documented use of the generator."""
    top = pr.max(dim=-1)
    if bool((top.values == 1.0).all()):
        return top.indices
    return sample(pr, generator)


def uniform(generator: torch.Generator) -> float:
    """r ~ U[0, 1) from the one generator."""
    import torch

    return float(torch.rand((), generator=generator, dtype=torch.float64))


def residual(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """(q - p)+ normalised: the distribution to resample from at the first rejection (V,) -> (V,).

    If q <= p everywhere (only possible through round-off, since a rejection needs q_i < p_i at the draft
    and both sum to 1), fall back to q itself.
    """
    import torch

    r = torch.clamp(q - p, min=0.0)
    total = r.sum()
    if total <= 0:
        return q / q.sum()
    return r / total
