"""XLNet's two-stream relative attention, written once for training and for cached inference.

The weights are those of a stock Hugging Face `XLNetLMHeadModel` (same parameter names and shapes, so a folder
written here loads with `XLNetLMHeadModel.from_pretrained` and the other way round), for configs with
`attn_type="bi"` and `bi_data=False`. transformers is not imported.

One layer, for a set of query rows against a set of key rows (docs/decoding.md, "The model"):

    q = x W_q,  k = h W_k,  v = h W_v                       x: the rows' stream input, h: the content stream
    score[i, j] = ((q_i + r_w) . k_j + (q_i + r_r) . R[pos_i - pos_j] W_r) / sqrt(d_head),  -1e30 where blocked
    out = LayerNorm(x + softmax(score) v W_o),  then the feed-forward block LayerNorm(out + W_2 gelu(W_1 out))

R[d] is the sinusoid of the relative distance d. The content stream h starts from the token embeddings, the
query stream g from `mask_emb`; both use the content stream's keys and values. Which key a row may see is the
AS-ARM mask of `infill.models.masks`: a content row also sees itself, a query row never does.

Two callers:
  * `TwoStreamXLNet.train_hidden`: a batch of whole sequences (training, held-out loss). The content stream has
    all N rows; the query stream only the T target rows (HF scatters it over all N positions); the last layer's
    content rows are skipped (nothing reads them).
  * `infill.models.xlnet_cache.CachedPass`: the same layer functions on row subsets with cached keys, the
    cache's buffers and the new rows attended as two blocks of keys (eager, or exported to ONNX Runtime).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

NEG = 1e30  # HF's masking constant: score - 1e30 on blocked pairs
Blocks = torch.Tensor | Sequence[torch.Tensor]  # keys or values, whole or in blocks along the key axis


@dataclass(frozen=True)
class XLNetShape:
    vocab_size: int = 8192
    d_model: int = 256
    n_layer: int = 6
    n_head: int = 4
    d_inner: int = 1024
    layer_norm_eps: float = 1e-12
    clamp_len: int = -1  # relative distances are clamped to +-clamp_len when > 0

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> XLNetShape:
        """From an HF XLNet config.json dict; a config this module cannot run is a ValueError."""
        if config.get("attn_type", "bi") != "bi" or config.get("bi_data", False):
            raise ValueError("only attn_type='bi', bi_data=False XLNet configs are supported")
        if config.get("ff_activation", "gelu") != "gelu":
            raise ValueError(f"unsupported ff_activation {config.get('ff_activation')!r}")
        shape = cls(
            vocab_size=int(config["vocab_size"]),
            d_model=int(config["d_model"]),
            n_layer=int(config["n_layer"]),
            n_head=int(config["n_head"]),
            d_inner=int(config["d_inner"]),
            layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
            clamp_len=int(config.get("clamp_len", -1)),
        )
        if int(config.get("d_head", shape.d_head)) != shape.d_head:
            raise ValueError("d_head must be d_model / n_head")
        return shape

    def hf_config(self, pad_id: int, bos_id: int) -> dict[str, Any]:
        """An HF `XLNetConfig` dict for these weights (no dropout, no memory)."""
        return {
            "architectures": ["XLNetLMHeadModel"],
            "model_type": "xlnet",
            "attn_type": "bi",
            "bi_data": False,
            "clamp_len": self.clamp_len,
            "d_head": self.d_head,
            "d_inner": self.d_inner,
            "d_model": self.d_model,
            "dropout": 0.0,
            "dtype": "float32",
            "ff_activation": "gelu",
            "initializer_range": 0.02,
            "layer_norm_eps": self.layer_norm_eps,
            "mem_len": None,
            "n_head": self.n_head,
            "n_layer": self.n_layer,
            "pad_token_id": pad_id,
            "bos_token_id": bos_id,
            "eos_token_id": None,
            "reuse_len": None,
            "same_length": False,
            "summary_last_dropout": 0.0,
            "tie_word_embeddings": True,
            "use_mems_eval": False,
            "use_mems_train": False,
            "vocab_size": self.vocab_size,
        }


class RelAttention(nn.Module):
    """`rel_attn` of one layer: HF's parameter names and shapes (d, n_head, d_head)."""

    def __init__(self, s: XLNetShape) -> None:
        super().__init__()
        d, n, dh = s.d_model, s.n_head, s.d_head
        self.q = nn.Parameter(torch.empty(d, n, dh))
        self.k = nn.Parameter(torch.empty(d, n, dh))
        self.v = nn.Parameter(torch.empty(d, n, dh))
        self.o = nn.Parameter(torch.empty(d, n, dh))
        self.r = nn.Parameter(torch.empty(d, n, dh))
        self.r_r_bias = nn.Parameter(torch.empty(n, dh))
        self.r_s_bias = nn.Parameter(torch.empty(n, dh))  # segment bias: unused (no segments), kept for HF
        self.r_w_bias = nn.Parameter(torch.empty(n, dh))
        self.seg_embed = nn.Parameter(torch.empty(2, n, dh))  # unused, kept for HF
        self.layer_norm = nn.LayerNorm(d, eps=s.layer_norm_eps)
        self.scale = 1.0 / math.sqrt(dh)


class FeedForward(nn.Module):
    def __init__(self, s: XLNetShape) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(s.d_model, eps=s.layer_norm_eps)
        self.layer_1 = nn.Linear(s.d_model, s.d_inner)
        self.layer_2 = nn.Linear(s.d_inner, s.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(x + self.layer_2(nn.functional.gelu(self.layer_1(x))))


class Layer(nn.Module):
    def __init__(self, s: XLNetShape) -> None:
        super().__init__()
        self.rel_attn = RelAttention(s)
        self.ff = FeedForward(s)
        # weights in the shapes the products use, made once by `freeze()` for inference (empty while training)
        self._frozen: dict[str, torch.Tensor] = {}

    def _derived(self, name: str) -> torch.Tensor:
        """A weight in product shape: 'q' / 'kv' / 'qkv' (d, c*n*dh) stacked projections, 'o' (n*dh, d),
        'rr' / 'rw' (n, 1, 1, dh) biases times the scale."""
        w = self._frozen.get(name)
        if w is not None:
            return w
        a = self.rel_attn
        if name == "o":
            return a.o.reshape(a.o.shape[0], -1).t()
        if name in ("rr", "rw"):
            return (a.r_r_bias if name == "rr" else a.r_w_bias)[:, None, None, :] * a.scale
        stacked = torch.stack([getattr(a, c) for c in name], dim=1)  # (d, c, n, dh)
        return stacked.reshape(stacked.shape[0], -1)

    def freeze(self) -> None:
        with torch.no_grad():
            self._frozen = {}
            self._frozen = {n: self._derived(n).contiguous() for n in ("q", "kv", "qkv", "o", "rr", "rw")}

    def project(self, x: torch.Tensor, which: str) -> torch.Tensor:
        """x (..., d) times the stacked weights of `which` ('q', 'kv', 'qkv'): (..., len(which), n, dh)."""
        a = self.rel_attn
        return (x @ self._derived(which)).unflatten(-1, (len(which), a.q.shape[1], a.q.shape[2]))

    def attend(
        self,
        x: torch.Tensor,  # (B, Q, d) stream input of the query rows
        q: torch.Tensor,  # (B, Q, n, dh) their queries
        kt: Blocks,  # (n, B, dh, R) keys, head-major and transposed (any strides), or blocks of them
        vh: Blocks,  # (n, B, R, dh) values, head-major (any strides), or blocks of them (the same split)
        kr: torch.Tensor,  # (n, dh, P) relative keys by distance, transposed, descending: p <-> distance (P-1)/2 - p
        rel: torch.Tensor | None,  # (B, Q, R) long index into kr, or None: rows and keys are both 0..N-1
        neg: torch.Tensor | None,  # (B, Q, R) additive mask: 0 allowed, -1e30 blocked; None: all allowed
    ) -> torch.Tensor:
        """One attention sub-layer with residual and layer norm: (B, Q, d). The keys (and values) may come in
        blocks, e.g. a cache's buffer and the new rows, attended as one concatenation without making it."""
        return self.post(x, self.attention(q, kt, vh, kr, rel, neg))

    def post(self, x: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        """Output projection, residual and layer norm: x (..., d), vec (..., n*dh) -> (..., d)."""
        out = torch.addmm(x.reshape(-1, x.shape[-1]), vec.reshape(-1, vec.shape[-1]), self._derived("o"))
        return self.rel_attn.layer_norm(out.view(x.shape))

    def attention(
        self,
        q: torch.Tensor,  # (B, Q, n, dh)
        kt: Blocks,  # (n, B, dh, R), or blocks (n, B, dh, R_i) with sum R_i = R
        vh: Blocks,  # (n, B, R, dh), or blocks (n, B, R_i, dh)
        kr: torch.Tensor,  # (n, dh, P)
        rel: torch.Tensor | None,  # (B, Q, R) or None
        neg: torch.Tensor | None,  # (B, Q, R) or None
    ) -> torch.Tensor:
        """softmax(score) v before the output projection: (B, Q, n*dh). Arguments as for `attend`.

        Head-major layout (n, B, ...) throughout, so every large (Q, R) tensor is made contiguous by the
        operation that produces it and never copied.
        """
        kts = [kt] if isinstance(kt, torch.Tensor) else list(kt)
        vhs = [vh] if isinstance(vh, torch.Tensor) else list(vh)
        B, Q, n, dh = q.shape
        R = sum(k.shape[-1] for k in kts)
        qs = q.permute(2, 0, 1, 3) * self.rel_attn.scale  # (n, B, Q, dh), the 1/sqrt(d_head) folded in
        by_dist = (qs + self._derived("rr")).reshape(n, B * Q, dh) @ kr  # (n, B*Q, P)
        P = by_dist.shape[-1]
        if rel is None:  # row i needs distances i - j, j = 0..N-1: a contiguous window of each row (a view)
            bd = by_dist.as_strided((n, B, Q, R), (B * Q * P, Q * P, P - 1, 1), by_dist.storage_offset() + (P - 1) // 2)
        else:
            bd = by_dist.view(n, B, Q, P).gather(3, rel[None].expand(n, -1, -1, -1))  # (n, B, Q, R)
        base = (bd if neg is None else bd + neg[None]).reshape(n * B, Q, R)
        qw = (qs + self._derived("rw")).reshape(n * B, Q, dh)
        parts, at = [], 0
        for block in kts:  # base + (q + r_w) . k, one fused product per (head, batch) and block
            width = block.shape[-1]
            parts.append(torch.baddbmm(base[..., at : at + width], qw, block.reshape(n * B, dh, width)))
            at += width
        prob = torch.softmax(parts[0] if len(parts) == 1 else torch.cat(parts, -1), dim=-1)  # (n*B, Q, R)
        vec, at = None, 0
        for block in vhs:
            width = block.shape[-2]
            term = prob[..., at : at + width] @ block.reshape(n * B, width, dh)  # (n*B, Q, dh)
            vec = term if vec is None else vec + term
            at += width
        assert vec is not None
        return vec.view(n, B, Q, dh).permute(1, 2, 0, 3).reshape(B, Q, n * dh)  # (B, Q, n*dh)


def sinusoid(P: int, d: int, clamp_len: int, device: torch.device) -> torch.Tensor:
    """(P, d) HF's relative encoding for distances (P-1)/2 down to -(P-1)/2 (P odd)."""
    half = (P - 1) // 2
    freq = torch.arange(0, d, 2, device=device).float()
    inv_freq = 1 / torch.pow(10000, freq / d)  # (d/2,)
    dist = torch.arange(half, -half - 1, -1, device=device).float()  # (P,)
    if clamp_len > 0:
        dist = dist.clamp(-clamp_len, clamp_len)
    ang = dist[:, None] * inv_freq[None, :]  # (P, d/2)
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


class _Body(nn.Module):
    def __init__(self, s: XLNetShape) -> None:
        super().__init__()
        self.word_embedding = nn.Embedding(s.vocab_size, s.d_model)
        self.mask_emb = nn.Parameter(torch.empty(1, 1, s.d_model))
        self.layer = nn.ModuleList(Layer(s) for _ in range(s.n_layer))


class TwoStreamXLNet(nn.Module):
    """The AS-ARM network: `transformer` (embeddings, layers) and the tied `lm_loss` head, HF names."""

    def __init__(self, shape: XLNetShape) -> None:
        super().__init__()
        self.shape = shape
        self.transformer = _Body(shape)
        self.lm_loss = nn.Linear(shape.d_model, shape.vocab_size)
        self.lm_loss.weight = self.transformer.word_embedding.weight  # tied
        self._tables: dict[tuple[int, str], torch.Tensor] = {}

    def init_weights(self, generator: torch.Generator | None = None, std: float = 0.02) -> None:
        """HF's initialisation: normal(0, 0.02) weights, zero biases, unit layer norms."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("layer_norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    p.normal_(0.0, std, generator=generator)

    def freeze(self) -> TwoStreamXLNet:
        """Eval mode, with each layer's weights kept in product shape (inference; `train()` undoes it)."""
        self.eval()
        for layer in self.layers():
            layer.freeze()
        return self

    def train(self, mode: bool = True) -> TwoStreamXLNet:
        if mode:
            for layer in self.layers():
                layer._frozen = {}
        return super().train(mode)

    def layers(self) -> list[Layer]:
        return cast("list[Layer]", list(self.transformer.layer))

    # --- relative keys -------------------------------------------------------------------------------------

    def distances(self, N: int, device: torch.device) -> torch.Tensor:
        """(2N-1, d) sinusoids of distances N-1 .. -(N-1), cached per (N, device)."""
        key = (N, str(device))
        table = self._tables.get(key)
        if table is None:
            table = sinusoid(2 * N - 1, self.shape.d_model, self.shape.clamp_len, device)
            self._tables[key] = table
        return table

    def relative_keys(self, layer: Layer, N: int, device: torch.device) -> torch.Tensor:
        """(n, dh, 2N-1) relative keys of one layer, head-major and transposed (a view of the product)."""
        r = layer.rel_attn.r
        by_dist = self.distances(N, device).to(r.dtype) @ r.reshape(r.shape[0], -1)  # (2N-1, n*dh)
        return by_dist.t().unflatten(0, r.shape[1:])

    # --- training / scoring forward ------------------------------------------------------------------------

    def train_hidden(
        self,
        ids: torch.Tensor,
        masked: torch.Tensor,
        targets: torch.Tensor,
        n_decoded: int | None = None,
        packed: bool | None = None,
    ) -> torch.Tensor:
        """Teacher-forced two-stream forward: query-stream outputs (S, d) of the S valid targets, packed in
        (sequence, target) order.

        ids (B, N) long with the true tokens; masked (B, N) bool; targets (B, T) long positions, -1 = padding.
        The mask is `masks.perm_mask(masked, n_decoded)`: the oracle mask, or with `n_decoded` the draft mask
        (masked positions of rank >= n_decoded see only the prompt and ranks < n_decoded). Target rows are packed:
        a batch pads T to its longest sequence, often 3-4x the mean, and the query stream would otherwise attend
        for every padding row. `packed` (default: on a CPU, not on a GPU): attend sequence by sequence over the
        packed rows; otherwise in one batched product over the padded (B, T) rows, which a GPU runs faster than
        B small products (the padding rows are computed and dropped). Both give the same outputs.
        """
        if packed is None:
            packed = ids.device.type == "cpu"
        if not packed:
            return self._train_hidden_padded(ids, masked, targets, n_decoded)
        from infill.models.masks import blocked as blocked_mask

        B, N = ids.shape
        dev = ids.device
        blocked = blocked_mask(masked, n_decoded)  # (B, N, N)
        eye = torch.eye(N, dtype=torch.bool, device=dev)
        neg_h = (blocked & ~eye).to(torch.float32) * -NEG  # (B, N, N) a content row sees itself
        counts = (targets >= 0).sum(1).tolist()  # targets per sequence
        seqs = [b for b in range(B) if counts[b]]
        counts_of = [counts[b] for b in seqs]
        cols = torch.arange(N, device=dev)
        neg_g, rel_g = [], []
        for b in seqs:
            t = targets[b, : counts[b]]  # (T_b,)
            neg_g.append(blocked[b, t].to(torch.float32)[None] * -NEG)  # (1, T_b, N)
            rel_g.append(((N - 1) - t[:, None] + cols)[None])  # (1, T_b, N) index of distance t - j
        tr = self.transformer
        h = tr.word_embedding(ids)  # (B, N, d)
        g = tr.mask_emb[0].expand(sum(counts_of), -1)  # (S, d)
        layers = self.layers()
        last = len(layers) - 1
        for li, layer in enumerate(layers):
            kr = self.relative_keys(layer, N, dev)  # (n, dh, 2N-1)
            if li < last:
                q_h, k, v = layer.project(h, "qkv").unbind(-3)  # each (B, N, n, dh)
            else:  # the last layer's content rows feed nothing
                k, v = layer.project(h, "kv").unbind(-3)
            kt, vh = k.permute(2, 0, 3, 1), v.permute(2, 0, 1, 3)  # (n, B, dh, N), (n, B, N, dh) views
            q_g = layer.project(g, "q").squeeze(-3)  # (S, n, dh)
            # per sequence: split/unbind keep the backward to one concatenation (slices would each add a full grad)
            k_b, v_b, q_b = kt.unbind(1), vh.unbind(1), q_g.split(counts_of)
            vec = torch.cat(
                [
                    layer.attention(q_b[i][None], k_b[b][:, None], v_b[b][:, None], kr, rel, neg)[0]
                    for i, (b, rel, neg) in enumerate(zip(seqs, rel_g, neg_g, strict=True))
                ]
            )  # (S, n*dh)
            if li < last:
                h = layer.ff(layer.attend(h, q_h, kt, vh, kr, None, neg_h))
            g = layer.ff(layer.post(g, vec))
        return g

    def _train_hidden_padded(
        self, ids: torch.Tensor, masked: torch.Tensor, targets: torch.Tensor, n_decoded: int | None
    ) -> torch.Tensor:
        """`train_hidden` with the query stream over the padded (B, T) target rows in one product per layer."""
        from infill.models.masks import blocked as blocked_mask

        B, N = ids.shape
        dev = ids.device
        blocked = blocked_mask(masked, n_decoded)  # (B, N, N)
        eye = torch.eye(N, dtype=torch.bool, device=dev)
        neg_h = (blocked & ~eye).to(torch.float32) * -NEG  # (B, N, N) a content row sees itself
        valid = targets >= 0  # (B, T)
        t = targets.clamp(min=0)
        rows = blocked.gather(1, t[:, :, None].expand(-1, -1, N))  # (B, T, N)
        neg_g = rows.to(torch.float32) * -NEG
        rel_g = (N - 1) - t[:, :, None] + torch.arange(N, device=dev)  # (B, T, N) index of distance t - j
        tr = self.transformer
        h = tr.word_embedding(ids)  # (B, N, d)
        g = tr.mask_emb.expand(B, t.shape[1], -1)  # (B, T, d)
        layers = self.layers()
        last = len(layers) - 1
        for li, layer in enumerate(layers):
            kr = self.relative_keys(layer, N, dev)
            if li < last:
                q_h, k, v = layer.project(h, "qkv").unbind(-3)
            else:
                k, v = layer.project(h, "kv").unbind(-3)
            kt, vh = k.permute(2, 0, 3, 1), v.permute(2, 0, 1, 3)
            q_g = layer.project(g, "q").squeeze(-3)  # (B, T, n, dh)
            vec = layer.attention(q_g, kt, vh, kr, rel_g, neg_g)
            if li < last:
                h = layer.ff(layer.attend(h, q_h, kt, vh, kr, None, neg_h))
            g = layer.ff(layer.post(g, vec))
        return g[valid]

    def target_nll(self, batch: dict[str, torch.Tensor], packed: bool | None = None) -> torch.Tensor:
        """Per-target NLL (B, T) of a training batch (ids, masked, targets, labels with -100 = none); 0 at
        padding. Targets of a sequence must come first in its row (-1 only after them), as `collate` makes them."""
        labels = batch["labels"]  # (B, T)
        valid = batch["targets"] >= 0  # (B, T)
        g = self.train_hidden(batch["ids"], batch["masked"], batch["targets"], packed=packed)  # (S, d)
        nll = nn.functional.cross_entropy(self.lm_loss(g), labels[valid], ignore_index=-100, reduction="none")
        return torch.zeros(labels.shape, dtype=nll.dtype, device=nll.device).masked_scatter(valid, nll)

    # --- files ---------------------------------------------------------------------------------------------

    def state_for_file(self) -> dict[str, torch.Tensor]:
        """Tensors as an HF checkpoint stores them (the tied head weight is not stored)."""
        return {k: v.detach().contiguous() for k, v in self.state_dict().items() if k != "lm_loss.weight"}

    def load_file_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Load HF-named tensors; a missing or extra tensor (other than the tied head) is a ValueError."""
        missing, unexpected = self.load_state_dict(tensors, strict=False)
        missing = [k for k in missing if k != "lm_loss.weight"]
        if missing or unexpected:
            raise ValueError(f"weights do not fit the model shape: missing {missing[:3]}, unexpected {unexpected[:3]}")
