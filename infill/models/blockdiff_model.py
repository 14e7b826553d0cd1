"""Block-diffusion backend: a STOCK transformers decoder (Qwen3, Qwen2, Llama) driven by custom 4D attention
masks, explicit position ids and a block-causal KV cache (`DynamicCache`, rolled back with `crop`).

Block diffusion (BD3-LM, SDAR, Fast-dLLM v2) generates a sequence block by block. Blocks are aligned on
absolute positions: block b holds positions [b*B, (b+1)*B). Inside the current block, masked positions are
predicted in parallel; the block sees every committed block through the cache and itself bidirectionally.
When a block is fully decoded, it is written into the cache by one more forward (a "cache commit").

Two prediction conventions:
- position-aligned (SDAR, LLaDA): the logits at position i predict the token at position i (a mask token);
- right-shifted (Fast-dLLM v2, Dream): the logits at position i-1 predict the token at position i, like an
  AR model.

Every method that runs the network increments `KVState.nfe` and one of its per-kind counters, so decoders
report forwards without bookkeeping of their own. Nothing here samples: the decoders in infill/decoding do.

Shapes: L = tokens in one forward, C = committed tokens in the cache, V = vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from infill.errors import ModelError

if TYPE_CHECKING:
    import torch

ForwardKind = Literal["prefill", "draft", "verify", "commit"]


_CACHE_KEYWORD: dict[type, str] = {}


def kv_cache(module: Any, cache: Any) -> dict[str, Any]:
    """The keyword argument that hands `cache` (a DynamicCache) to a transformers model's forward: `cache` in
    the releases that renamed it (5.24 on, where `past_key_values` warns), `past_key_values` before."""
    kind = type(module)
    if kind not in _CACHE_KEYWORD:
        import inspect

        names = inspect.signature(kind.forward).parameters
        _CACHE_KEYWORD[kind] = "cache" if "cache" in names else "past_key_values"
    return {_CACHE_KEYWORD[kind]: cache}


@dataclass
class KVState:
    """Per-decode cache state. `cache` holds exactly the committed positions [0, length)."""

    cache: Any  # transformers DynamicCache
    length: int = 0
    next_logits: torch.Tensor | None = None  # (V,) right-shifted models: the prediction for position `length`
    nfe: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "draft": 0, "verify": 0, "commit": 0})
    # SSMD (infill.decoding.ssmd): when want_hidden is set, every forward also keeps the last hidden states of the
    # rows it returns logits for (after the final norm: what the LM head reads), as `hidden` (rows, D) fp32
    want_hidden: bool = False
    hidden: torch.Tensor | None = None


class BlockDiffModel:
    """A stock causal-LM class used as a block-diffusion model.

    mask_id:   the mask token written at undecoded positions.
    shifted:   True for right-shifted models (see the module docstring).
    end_ids:   tokens that end a generation.
    block_size: the block size the model was trained with (decoders take theirs from DecodeConfig).
    clean_attention: how committed tokens attend to each other: "block" (block-causal, SDAR / BD3-LM
               training) or "causal" (Fast-dLLM v2 style, whose prompt is processed like an AR model's).
    bf16:      bf16 autocast over fp32 weights.
    folder:    the folder it was loaded from, if any.
    """

    def __init__(
        self,
        model: Any,
        *,
        mask_id: int,
        shifted: bool = False,
        end_ids: tuple[int, ...] = (),
        block_size: int = 4,
        clean_attention: Literal["block", "causal"] | None = None,
        bf16: bool = False,
        folder: Path | None = None,
    ) -> None:
        self.model = model
        self.mask_id = mask_id
        self.shifted = shifted
        self.end_ids = end_ids
        self.block_size = block_size
        self.clean_attention: Literal["block", "causal"] = clean_attention or ("causal" if shifted else "block")
        self.bf16 = bf16
        self.vocab_size = int(model.config.vocab_size)
        self.ssmd_head: Any = None  # an infill.models.ssmd.SSMDHead when the folder ships one
        self.folder = folder  # where it was loaded from (optional files beside it: ptp_adapter.safetensors)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the network's positions allow (config.max_position_embeddings), if it says."""
        limit = getattr(self.model.config, "max_position_embeddings", None)
        return None if limit is None else int(limit)

    @property
    def num_layers(self) -> int:
        """The network's transformer layers (config.num_hidden_layers)."""
        return int(self.model.config.num_hidden_layers)

    @property
    def attn_implementation(self) -> str:
        return str(self.model.config._attn_implementation)

    def new_state(self) -> KVState:
        """An empty cache (no committed token, length 0) for one generation; the operations below extend it."""
        from transformers import DynamicCache

        return KVState(cache=DynamicCache(config=self.model.config))

    # ---- masks ------------------------------------------------------------------------------------------

    def attention_mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """`allowed` (L, C+L) bool, True = may attend -> the 4D mask the attention implementation expects.

        sdpa (and flex/flash paths that accept 4D masks) take a bool mask; eager ADDS the mask to the scores,
        so a bool mask would silently add 1 to the allowed scores and 0 elsewhere: it must be additive float
        there.
        """
        import torch

        mask = allowed[None, None].to(self.device)  # (1, 1, L, C+L)
        if self.attn_implementation == "eager":
            dtype = next(self.model.parameters()).dtype
            zero = torch.zeros((), dtype=dtype, device=mask.device)
            neg = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=mask.device)
            return torch.where(mask, zero, neg)
        return mask

    def clean_mask(self, start: int, length: int, block_size: int) -> torch.Tensor:
        """(length, start+length) bool: how committed tokens [start, start+length) see the cache and each
        other."""
        import torch

        pos = torch.arange(start, start + length)  # (L,)
        keys = torch.arange(start + length)  # (C+L,)
        if self.clean_attention == "causal":
            return keys[None, :] <= pos[:, None]
        return (keys[None, :] // block_size) <= (pos[:, None] // block_size)

    # ---- the one forward --------------------------------------------------------------------------------

    def forward(
        self,
        state: KVState,
        ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor,
        kind: ForwardKind,
        keep: int = 0,
    ) -> torch.Tensor:
        """Run ids (L,) at `positions` (L,) with `allowed` (L, state.length+L) over the cache; the new entries
        stay in the cache (callers crop). Returns float32 logits (L, V), or only the last `keep` rows if
        keep > 0 (a long prefill needs no (P, V) logits), with the mask token's logit at -inf."""
        import torch

        if state.cache.get_seq_length() != state.length:
            raise ModelError(f"block-diffusion cache out of sync: {state.cache.get_seq_length()} != {state.length}")
        dev = self.device
        with torch.no_grad(), torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=self.bf16):
            if state.want_hidden:  # the same computation as the causal-LM class's forward, split in two
                base = self.model.model(
                    input_ids=ids[None].to(dev),  # (1, L)
                    position_ids=positions[None].to(dev),  # (1, L)
                    attention_mask=self.attention_mask(allowed),  # (1, 1, L, C+L)
                    **kv_cache(self.model.model, state.cache),
                    use_cache=True,
                )
                hidden = base.last_hidden_state[:, -keep:] if keep > 0 else base.last_hidden_state  # (1, L|keep, D)
                out_logits = self.model.lm_head(hidden)  # (1, L|keep, V)
                state.hidden = hidden[0].float().cpu()  # (L|keep, D)
            else:
                out_logits = self.model(
                    input_ids=ids[None].to(dev),  # (1, L)
                    position_ids=positions[None].to(dev),  # (1, L)
                    attention_mask=self.attention_mask(allowed),  # (1, 1, L, C+L)
                    **kv_cache(self.model, state.cache),
                    use_cache=True,
                    logits_to_keep=keep,
                ).logits
        state.nfe += 1
        state.counts[kind] += 1
        logits = out_logits[0].float().cpu()  # (L, V) or (keep, V)
        logits[:, self.mask_id] = float("-inf")
        return logits

    def _rollback(self, state: KVState) -> None:
        extra = state.cache.get_seq_length() - state.length
        if extra > 0:
            state.cache.crop(-extra)

    # ---- operations the decoders use --------------------------------------------------------------------

    def commit(
        self,
        state: KVState,
        ids: torch.Tensor,
        block_size: int,
        draft_ids: torch.Tensor | None = None,
        kind: ForwardKind = "commit",
    ) -> torch.Tensor | None:
        """Write clean `ids` (L,) at positions [length, length+L) into the cache (one forward).

        When `draft_ids` (D,) is given, the SAME forward also drafts the next block at [length+L, length+L+D)
        (bidirectional inside it, seeing all committed tokens) and returns its predictions (D, V), aligned
        with positions; its cache entries are dropped. This fusion makes block size 1 cost one forward per
        token, like AR decoding."""
        import torch

        n, d = int(ids.numel()), 0 if draft_ids is None else int(draft_ids.numel())
        start = state.length
        clean = self.clean_mask(start, n, block_size)  # (L, C+L)
        allowed = torch.zeros(n + d, start + n + d, dtype=torch.bool)  # (L+D, C+L+D)
        allowed[:n, : start + n] = clean
        allowed[n:, :] = True  # the next block sees everything committed and itself
        inp = ids if draft_ids is None else torch.cat([ids, draft_ids])  # (L+D,)
        keep = max(1, d + 1 if self.shifted else d)  # rows needed: the draft's (and the last clean one's)
        logits = self.forward(state, inp, torch.arange(start, start + n + d), allowed, kind, keep)  # (keep, V)
        state.length = start + n
        self._rollback(state)
        if self.shifted:
            state.next_logits = logits[keep - d - 1]  # the last clean token's row
        if draft_ids is None:
            return None
        if self.shifted:  # row j predicts position j+1; the first draft row comes from the last clean token
            return logits[:d]  # (D, V)
        return logits[keep - d :]  # (D, V)

    def draft(self, state: KVState, block: torch.Tensor) -> torch.Tensor:
        """Predictions (L, V) for every position of the current block (L,) (mask tokens at undecoded
        positions), bidirectional inside the block, seeing all committed tokens. The cache is unchanged."""
        import torch

        n = int(block.numel())
        if self.shifted and state.next_logits is not None and n == 1:
            return state.next_logits[None]  # the only prediction needs no forward
        allowed = torch.ones(n, state.length + n, dtype=torch.bool)  # (L, C+L)
        logits = self.forward(state, block, torch.arange(state.length, state.length + n), allowed, "draft")
        self._rollback(state)
        if self.shifted:
            first = logits[:1] if state.next_logits is None else state.next_logits[None]
            return torch.cat([first, logits[:-1]])  # (L, V)
        return logits

    def verify(self, state: KVState, block: torch.Tensor, span_start: int, span_len: int) -> torch.Tensor:
        """Block-size-1 (autoregressive) predictions q (S, V) for the span [span_start, span_start+S) of the
        current block, whose drafts are written in `block` (L,). Every block position before the span is
        decoded.

        Position-aligned models use the 2L trick (S2D2): input [block[:s] ; drafts ; S mask tokens], the mask
        copies at the same position ids as the drafts, mask [[A, 0], [A^<, I]]: the first part is causal, mask
        copy r sees the first part strictly before span position r, plus itself. q is read from the copies.
        Right-shifted models read q from the plain causal view: q for position j comes from position j-1."""
        import torch

        s, m, c = span_start, span_len, state.length
        if self.shifted:
            n = s + m - 1  # inputs needed: block[: s+m-1]; logits row j predicts block position j+1
            if state.next_logits is None and s == 0:
                raise ModelError("right-shifted verify at block position 0 needs a committed prefix")
            first = state.next_logits if state.next_logits is not None else torch.zeros(self.vocab_size)
            if n == 0:
                return first[None]  # (1, V): the only prediction needs no forward
            allowed = torch.ones(n, c + n, dtype=torch.bool)  # (n, C+n)
            allowed[:, c:] = torch.tril(torch.ones(n, n, dtype=torch.bool))  # causal inside the block
            logits = self.forward(state, block[:n], torch.arange(c, c + n), allowed, "verify")  # (n, V)
            self._rollback(state)
            full = torch.cat([first[None], logits])  # (n+1, V): row p predicts block position p
            return full[s : s + m]  # (S, V)
        n = s + m
        allowed = torch.zeros(n + m, c + n + m, dtype=torch.bool)  # (2L', C+2L')
        allowed[:, :c] = True
        allowed[:n, c : c + n] = torch.tril(torch.ones(n, n, dtype=torch.bool))  # A: causal
        for r in range(m):
            allowed[n + r, c : c + s + r] = True  # A^<: first part strictly before span position r
            allowed[n + r, c + n + r] = True  # I: itself
        ids = torch.cat([block[:n], torch.full((m,), self.mask_id, dtype=block.dtype)])  # (n+m,)
        positions = torch.cat([torch.arange(c, c + n), torch.arange(c + s, c + n)])  # copies repeat ids
        logits = self.forward(state, ids, positions, allowed, "verify")  # (n+m, V)
        self._rollback(state)
        return logits[n:]  # (S, V)
