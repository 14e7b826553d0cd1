"""The self-speculative masked diffusion (SSMD) head: a small causal transformer on top of a FROZEN
block-diffusion model that turns its factorized (non-causal) draft p_NC into a causal target p_C.

Inside a block the base model is a masked diffusion model: one forward gives, at every masked position i, a
last hidden state h_i (after the final norm: what the tied LM head reads) and p_NC(i) = softmax(lm_head(h_i)).
The positions are revealed in an order sigma (here: the masked positions of the block, left to right). Track j
of the head reads

    z_j = Linear([E(x_sigma(j)) ; h_sigma(j) ; h_sigma(j+1)]) + off_cur[sigma(j)] + off_next[sigma(j+1)]

(E = the base's token embedding, x = the token at sigma(j): the true one in training, a draft when sampling;
off_* = learned in-block offset embeddings of the current and the next position), runs one pre-norm
transformer layer with a causal mask over the tracks, and predicts the token at sigma(j+1):

    delta_j = W_out RMSNorm(z_j)                           W_out starts at ZERO
    logits_C(sigma(j+1)) = lm_head(h_sigma(j+1) + delta_j) = logits_NC(sigma(j+1)) + lm_head(delta_j)

The second form (the LM head is linear) is how the logits are computed: with W_out = 0, delta is exactly 0,
lm_head(0) is exactly 0, and p_C == p_NC bit for bit, whatever the rounding of the base's own matmuls
(`identity_gap` checks it; the loader runs it). The first position of the order has no track: p_C = p_NC there.

Shapes: N = blocks (batch), T = tracks, D = the base's hidden size, V = vocabulary size.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from infill.errors import ModelError

HEAD_FILE = "ssmd_head.safetensors"


@dataclass(frozen=True)
class HeadShape:
    hidden: int  # D: the base model's hidden size (the head's width too)
    heads: int = 4
    intermediate: int = 512  # feed-forward width (GELU)
    max_block: int = 32  # in-block offsets 0 .. max_block-1: the largest block size the head can decode
    eps: float = 1e-6


class SSMDHead(nn.Module):
    """One causal transformer layer over tracks (module docstring). `forward` returns delta (N, T, D)."""

    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        d = shape.hidden
        if d % shape.heads:
            raise ModelError(f"SSMD head: hidden size {d} does not divide by {shape.heads} heads")
        self.shape = shape
        self.inp = nn.Linear(3 * d, d)
        self.off_cur = nn.Embedding(shape.max_block, d)
        self.off_next = nn.Embedding(shape.max_block, d)
        self.norm_attn = nn.RMSNorm(d, eps=shape.eps)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm_mlp = nn.RMSNorm(d, eps=shape.eps)
        self.up = nn.Linear(d, shape.intermediate)
        self.down = nn.Linear(shape.intermediate, d)
        self.norm_out = nn.RMSNorm(d, eps=shape.eps)
        self.out = nn.Linear(d, d, bias=False)
        for emb in (self.off_cur, self.off_next):
            nn.init.normal_(emb.weight, std=0.02)
        nn.init.zeros_(self.out.weight)  # p_C == p_NC at initialisation

    def forward(
        self,
        emb: torch.Tensor,
        h_cur: torch.Tensor,
        h_next: torch.Tensor,
        off_cur: torch.Tensor,
        off_next: torch.Tensor,
        allowed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """emb, h_cur, h_next (N, T, D); off_cur, off_next (N, T) long in-block offsets; `allowed` (N, T, T)
        bool (True = track i may attend to track k), default plain causal. -> delta (N, T, D)."""
        n, t, d = h_cur.shape
        if allowed is None:
            allowed = torch.tril(torch.ones(t, t, dtype=torch.bool, device=h_cur.device))[None].expand(n, t, t)
        z = self.inp(torch.cat([emb, h_cur, h_next], dim=-1)) + self.off_cur(off_cur) + self.off_next(off_next)
        heads, hd = self.shape.heads, d // self.shape.heads
        q, k, v = self.qkv(self.norm_attn(z)).view(n, t, 3, heads, hd).permute(2, 0, 3, 1, 4)  # 3 x (N, H, T, hd)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])  # (N, H, T, hd)
        z = z + self.proj(att.transpose(1, 2).reshape(n, t, d))
        z = z + self.down(F.gelu(self.up(self.norm_mlp(z))))
        return self.out(self.norm_out(z))  # (N, T, D)

    @property
    def parameters_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def causal_logits(
    head: SSMDHead,
    embed: nn.Module,
    lm_head: nn.Module,
    tokens: torch.Tensor,
    hidden: torch.Tensor,
    offsets: torch.Tensor,
    nc_logits: torch.Tensor,
) -> torch.Tensor:
    """One causal pass over ONE window in its order: tokens (W,) long (drafts or decided tokens), hidden (W, D)
    the base's h at those positions, offsets (W,) their in-block offsets, nc_logits (W, V) the base's logits
    there. -> causal logits (W, V): row 0 is nc_logits[0] (no track predicts the first position), row j >= 1
    is nc_logits[j] + lm_head(delta_{j-1}), which depends on tokens[:j] only."""
    w = int(tokens.numel())
    if w < 2:
        return nc_logits.clone()
    with torch.no_grad():
        h = hidden.float()[None]  # (1, W, D)
        emb = embed(tokens[None, :-1]).float()  # (1, W-1, D)
        delta = head(emb, h[:, :-1], h[:, 1:], offsets[None, :-1], offsets[None, 1:])  # (1, W-1, D)
        extra = lm_head(delta[0]).float()  # (W-1, V)
    return torch.cat([nc_logits[:1], nc_logits[1:] + extra])  # (W, V)


def identity_gap(head: SSMDHead, lm_head: nn.Module, embed: nn.Module, seed: int = 0) -> float:
    """The built-in zero-initialisation check: a copy of `head` whose output projection is zeroed must give
    p_C == p_NC exactly. Runs it on random hidden states and tokens; returns max |logits_C - logits_NC| over
    the finite entries (0.0 when the plumbing is right; NaN if the copy produced non-finite numbers)."""
    probe = copy.deepcopy(head).eval()
    with torch.no_grad():
        probe.out.weight.zero_()
    gen = torch.Generator().manual_seed(seed)
    w, d = min(6, probe.shape.max_block), probe.shape.hidden
    vocab = int(cast(torch.Tensor, embed.weight).shape[0])
    hidden = torch.randn(w, d, generator=gen)  # (W, D)
    tokens = torch.randint(0, vocab, (w,), generator=gen)  # (W,)
    with torch.no_grad():
        nc = lm_head(hidden).float()  # (W, V)
    got = causal_logits(probe, embed, lm_head, tokens, hidden, torch.arange(w), nc)  # (W, V)
    if not bool(torch.isfinite(got).all()):
        return float("nan")
    return float((got - nc).abs().max())


# ---- files ----------------------------------------------------------------------------------------------


def save_head(path: str | Path, head: SSMDHead, provenance: dict[str, Any] | None = None) -> Path:
    """Write the head's tensors (fp32) with its shape and provenance as safetensors metadata."""
    from safetensors.torch import save_file

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().contiguous() for k, v in head.state_dict().items()}
    meta = {"format": "pt", "shape": json.dumps(asdict(head.shape)), "provenance": json.dumps(provenance or {})}
    save_file(state, str(out), metadata=meta)
    return out


def read_head(path: str | Path) -> tuple[SSMDHead, dict[str, Any]]:
    """(head in eval mode, provenance) from a file `save_head` wrote. ModelError when it is unreadable."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}
        shape = HeadShape(**json.loads(meta["shape"]))
        provenance = json.loads(meta.get("provenance", "{}"))
    except (OSError, KeyError, TypeError, ValueError, SafetensorError) as exc:
        raise ModelError(f"{path}: not an SSMD head file: {exc}") from exc
    head = SSMDHead(shape)
    try:
        head.load_state_dict(state)
    except RuntimeError as exc:
        raise ModelError(f"{path}: SSMD head tensors do not match its shape: {exc}") from exc
    return head.eval(), provenance


def attach_head(folder: str | Path, base: Any) -> dict[str, Any] | None:
    """If `folder` holds HEAD_FILE, load it onto `base` (a BlockDiffModel) as `base.ssmd_head` after checking
    that it fits the base (width, vocabulary) and passes the zero-initialisation check. -> a summary for the
    model's info, or None when there is no head file."""
    path = Path(folder) / HEAD_FILE
    if not path.exists():
        return None
    head, provenance = read_head(path)
    inner = base.model
    embed, lm_head = inner.get_input_embeddings(), inner.get_output_embeddings()
    if head.shape.hidden != int(inner.config.hidden_size):
        raise ModelError(f"{path}: head width {head.shape.hidden} != the model's {inner.config.hidden_size}")
    gap = identity_gap(head, lm_head, embed)
    if not gap == 0.0:
        raise ModelError(f"{path}: zero-initialised SSMD head does not reproduce p_NC exactly (gap {gap})")
    base.ssmd_head = head.to(base.device)
    return {"parameters": head.parameters_count, "file": str(path), "provenance": provenance}
