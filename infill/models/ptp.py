"""The PTP drafter: a small adapter over a FROZEN block-diffusion teacher run as a causal LM (block size 1).

Slot rows. The drafter predicts the tokens at positions i, i+1, ..., i+N-1 (N slots) in one forward. Slot k's
input is the teacher's mask-token embedding plus U(bits(u_{i+k})), U = Linear(32 -> d, no bias) of the 32 bits
(+-1) of its sampling uniform. Zero bits give a zero embedding: the "independent" mode, the same drafter with u
replaced by nothing, the baseline that guesses every slot from the context alone. Slots see the committed
tokens and every slot of their group (bidirectional, like the teacher's own block-diffusion draft: the
zero-initialised adapter IS that draft; the u's of later slots carry no information about earlier tokens, so
seeing them costs nothing).

Gated LoRA. Every attention / MLP projection of every layer (q, k, v, o, gate, up, down) gets a rank-r update
B·A·x·(alpha/r), applied ONLY to the slot rows of a forward (rows >= `start`): committed rows and the teacher's
own rows stay the teacher's computation bit for bit, so one KV cache serves drafting and verifying. It is
implemented with forward hooks registered for one forward and removed after it, so the stock transformers
module is never modified and the shared teacher is untouched between forwards (wrapping the Linear modules
in place would change the model every other decoder uses). B starts at zero.

File: a safetensors file beside the model (ptp_adapter.safetensors), tensors `u_embed.weight` (d, 32),
`lora.<layer>.<target>.a` (r, d_in), `lora.<layer>.<target>.b` (d_out, r); its metadata
"infill_ptp" holds the JSON config (rank, alpha, slots, teacher shape, provenance).

Shapes: B = batch, L = rows of one forward, S = slot rows, d = hidden size, V = vocabulary size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from infill.errors import ModelError
from infill.models.blockdiff_model import kv_cache

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

ADAPTER_FILE = "ptp_adapter.safetensors"
U_BITS = 32  # the drafter reads u as the bits of m = floor(u * 2**32): all of u, as infill.decoding.coupling draws it
TARGETS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)


@dataclass(frozen=True)
class AdapterConfig:
    rank: int = 32
    alpha: float = 32.0
    slots: int = 8  # N: slot rows per group in training (the decoder's default)
    hidden: int = 0  # the teacher's shape, checked when loading
    layers: int = 0
    vocab_size: int = 0
    targets: tuple[str, ...] = TARGETS
    provenance: dict[str, Any] = field(default_factory=dict)


def u_bits(u: torch.Tensor) -> torch.Tensor:
    """u (...) in [0, 1) -> (..., 32) float32 in {-1, +1}: the bits of m = floor(u * 2**32), most significant
    first (the drafter's input; structured bits beat a scalar)."""
    m = torch.clamp(torch.floor(u.to(torch.float64) * 2**U_BITS), 0, 2**U_BITS - 1).to(torch.int64)  # (...)
    shifts = torch.arange(U_BITS - 1, -1, -1, dtype=torch.int64)  # (32,)
    bits = (m[..., None] >> shifts) & 1  # (..., 32)
    return bits.to(torch.float32) * 2.0 - 1.0


class PTPAdapter(nn.Module):
    """u embedding + gated LoRA for one teacher shape. `use_u` False = the independent-slot baseline."""

    def __init__(self, cfg: AdapterConfig, shapes: dict[str, tuple[int, int]]) -> None:
        super().__init__()
        self.cfg = cfg
        self.use_u = True
        self.u_embed = nn.Linear(U_BITS, cfg.hidden, bias=False)  # no bias: zero bits = no u (independent)
        nn.init.zeros_(self.u_embed.weight)
        self.a = nn.ParameterDict()
        self.b = nn.ParameterDict()
        gen = torch.Generator().manual_seed(0)
        for name, (d_in, d_out) in shapes.items():
            key = name.replace(".", "__")
            self.a[key] = nn.Parameter(torch.randn(cfg.rank, d_in, generator=gen) / d_in**0.5)
            self.b[key] = nn.Parameter(torch.zeros(d_out, cfg.rank))

    @property
    def scale(self) -> float:
        return self.cfg.alpha / self.cfg.rank

    @classmethod
    def for_teacher(cls, teacher: Any, **kw: Any) -> PTPAdapter:
        """A fresh adapter (the teacher's own behaviour: B = 0, U = 0) for a stock causal LM."""
        cfg = AdapterConfig(
            hidden=int(teacher.config.hidden_size),
            layers=int(teacher.config.num_hidden_layers),
            vocab_size=int(teacher.config.vocab_size),
            **kw,
        )
        return cls(cfg, target_shapes(teacher, cfg.targets))

    def slot_embeddings(self, bits: torch.Tensor | None, count: int) -> torch.Tensor:
        """What is added to the mask-token embedding of `count` slot rows: U(bits) (..., S, d) from bits
        (..., S, 32), or zeros without u (independent mode, or bits None; zero bits give zeros too)."""
        if bits is None or not self.use_u:
            return torch.zeros(count, self.cfg.hidden, dtype=self.u_embed.weight.dtype)
        return self.u_embed(bits.to(self.u_embed.weight.dtype))

    @contextmanager
    def active(self, teacher: Any, start: int) -> Iterator[None]:
        """LoRA on the rows >= `start` of every forward inside the block (dimension 1 of (B, L, d_in))."""
        handles: list[RemovableHandle] = []
        modules = dict(teacher.model.named_modules())
        for key in self.a:
            module = modules.get(key.replace("__", "."))  # 'layers.<i>.<target>' inside teacher.model
            if module is None:
                raise ModelError(f"PTP adapter: the teacher has no module {key.replace('__', '.')}")
            handles.append(module.register_forward_hook(self._hook(key, start)))
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def _hook(self, key: str, start: int) -> Any:
        a, b, scale = self.a[key], self.b[key], self.scale

        def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
            x = inputs[0][:, start:]  # (B, S, d_in)
            delta = (x @ a.t().to(x.dtype)) @ b.t().to(x.dtype) * scale  # (B, S, d_out)
            if start == 0:
                return output + delta
            return torch.cat([output[:, :start], output[:, start:] + delta], dim=1)

        return hook

    # ---- files ---------------------------------------------------------------------------------------------

    def save(self, path: str | Path, provenance: dict[str, Any] | None = None) -> Path:
        from safetensors.torch import save_file

        cfg = asdict(self.cfg)
        if provenance is not None:
            cfg["provenance"] = provenance
        tensors = {"u_embed.weight": self.u_embed.weight.detach().contiguous()}
        for key in self.a:
            name = key.replace("__", ".")
            tensors[f"lora.{name}.a"] = self.a[key].detach().contiguous()
            tensors[f"lora.{name}.b"] = self.b[key].detach().contiguous()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(out), metadata={"format": "pt", "infill_ptp": json.dumps(cfg)})
        return out


def target_shapes(teacher: Any, targets: tuple[str, ...] = TARGETS) -> dict[str, tuple[int, int]]:
    """'layers.<i>.<target>' -> (in_features, out_features) for every decoder layer of a stock causal LM."""
    shapes: dict[str, tuple[int, int]] = {}
    for i, layer in enumerate(teacher.model.layers):
        mods = dict(layer.named_modules())
        for t in targets:
            m = mods.get(t)
            if not isinstance(m, nn.Linear):
                raise ModelError(f"PTP adapter: layer {i} has no linear {t}")
            shapes[f"layers.{i}.{t}"] = (m.in_features, m.out_features)
    return shapes


def load_adapter(path: str | Path, teacher: Any) -> PTPAdapter:
    """Read an adapter file and check it fits `teacher` (ModelError with one line otherwise)."""
    from safetensors import SafetensorError, safe_open

    p = Path(path)
    try:
        with safe_open(str(p), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    except (OSError, SafetensorError) as exc:
        raise ModelError(f"cannot read PTP adapter {p}: {exc}") from exc
    try:
        raw = json.loads(meta["infill_ptp"])
        raw["targets"] = tuple(raw["targets"])
        cfg = AdapterConfig(**raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{p} is not a PTP adapter (no valid infill_ptp metadata)") from exc
    teacher_shape = (
        int(teacher.config.hidden_size),
        int(teacher.config.num_hidden_layers),
        int(teacher.config.vocab_size),
    )
    if (cfg.hidden, cfg.layers, cfg.vocab_size) != teacher_shape:
        raise ModelError(
            f"PTP adapter {p} was trained for hidden/layers/vocab {(cfg.hidden, cfg.layers, cfg.vocab_size)}, "
            f"the model has {teacher_shape}"
        )
    adapter = PTPAdapter(cfg, target_shapes(teacher, cfg.targets))
    state = {"u_embed.weight": tensors.pop("u_embed.weight", None)}
    for key in adapter.a:
        name = key.replace("__", ".")
        state[f"a.{key}"] = tensors.pop(f"lora.{name}.a", None)
        state[f"b.{key}"] = tensors.pop(f"lora.{name}.b", None)
    missing = [k for k, v in state.items() if v is None]
    if missing or tensors:
        raise ModelError(f"PTP adapter {p}: missing {missing[:3]} / unexpected {sorted(tensors)[:3]} tensors")
    try:
        adapter.load_state_dict({k: v for k, v in state.items() if v is not None})
    except RuntimeError as exc:
        raise ModelError(f"PTP adapter {p}: {str(exc).splitlines()[0]}") from exc
    adapter.eval()
    for prm in adapter.parameters():
        prm.requires_grad_(False)
    return adapter


def slot_forward(
    teacher: Any,
    adapter: PTPAdapter,
    ids: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor,
    start: int,
    bits: torch.Tensor | None,
    cache: Any = None,
) -> torch.Tensor:
    """One teacher forward whose rows >= `start` are slot rows. ids (B, L) with the mask token on slot rows,
    positions (B, L), mask (B, 1, L, C+L) as the attention implementation expects, bits (B, L-start, 32) or
    None. Returns the last hidden states (B, L, d) (the caller applies the LM head to the rows it needs)."""
    emb = teacher.model.embed_tokens(ids)  # (B, L, d)
    add = adapter.slot_embeddings(bits, ids.shape[1] - start)  # (B, S, d) or (S, d)
    emb = torch.cat([emb[:, :start], emb[:, start:] + add.to(emb.dtype)], dim=1)
    with adapter.active(teacher, start):
        out = teacher.model(
            inputs_embeds=emb,
            position_ids=positions,
            attention_mask=mask,
            **kv_cache(teacher.model, cache),
            use_cache=cache is not None,
        )
    hidden: torch.Tensor = out.last_hidden_state
    return hidden
