"""The any-subset model over HF `XLNetLMHeadModel` (two-stream attention, REFERENCE.md "Attention").

The masks come from infill.models.masks (shared with training):
  draft:  perm_mask(masked, n_decoded=n): every target sees the prompt and the n decoded tokens, never
          another target, so the k drafts are conditionally independent and the first is exact (Lemma 1);
  verify: perm_mask(masked): permuted causal; with the drafts written in, target i sees the drafts before
          it, giving the oracle q_i for all targets in one pass.
Weights stay fp32; bf16 is autocast only (bf16 weights crash HF XLNet with a target_mapping), and
target_mapping is cast to the compute dtype. `use_mems=False` everywhere. The `<mask>` logit is -inf before
any softmax. By default passes go through the prompt/KV cache (xlnet_cache.py), which returns the same logits
as HF's full forward (tests: <= 1e-5) at a fraction of the cost; `cache=False` keeps the full forward.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from infill.errors import ModelError
from infill.models import masks as M

if TYPE_CHECKING:
    import torch


def resolve_device(device: str) -> torch.device:
    """'auto' -> cuda when available, else cpu. 'cuda' without a GPU is a ModelError."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("--device cuda was asked for, but torch sees no CUDA device")
    if device not in ("cpu", "cuda"):
        raise ModelError(f"unknown device {device!r} (expected auto, cpu or cuda)")
    return torch.device(device)


class XLNetAnySubset:
    """infill.models.base.AnySubsetModel over a transformers `XLNetLMHeadModel`.

    `nfe` counts forward passes (draft and verify alike); decoders read differences of it.
    """

    def __init__(
        self,
        hf_model: Any,
        *,
        mask_id: int,
        pad_id: int | None = None,
        bos_id: int | None = None,
        max_length: int = 1024,
        device: str = "auto",
        bf16: bool = False,
        cache: bool = True,
    ) -> None:
        import torch

        from infill.models.xlnet_cache import XLNetKVCache, supports

        self.device = resolve_device(device)
        self.hf = hf_model.to(device=self.device, dtype=torch.float32).eval()
        self.vocab_size: int = int(hf_model.config.vocab_size)
        self.mask_id = int(mask_id)
        self.pad_id = pad_id
        self.bos_id = bos_id
        self.max_length = int(max_length)
        self.bf16 = bool(bf16)
        self.nfe = 0
        # the prompt / decoded-token cache (xlnet_cache.py); None = HF's full forward every pass
        self.cache = XLNetKVCache(self.hf) if cache and supports(hf_model.config) else None

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def logits(
        self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, *, verify: bool
    ) -> torch.Tensor:
        """One forward: (k, V) float32 logits at `targets` = masked[n:n+k], draft or oracle (verify) mask.

        ids (N,) long, masked (M,) long positions in decoding order, targets (k,) long positions.
        """
        import torch

        ids, masked, targets = ids.to(self.device), masked.to(self.device), targets.to(self.device)
        use_cache = self.cache is not None and torch.equal(targets, masked[n : n + targets.shape[0]])
        # On CPU the cached path's few-row matmuls are faster in fp32 than with bf16 casts (benchmarked);
        # bf16 autocast stays for the full forward and for CUDA.
        autocast = self._autocast() if not use_cache or self.device.type == "cuda" else contextlib.nullcontext()
        with torch.no_grad(), autocast:
            if use_cache:
                assert self.cache is not None
                out = self.cache.logits(ids, masked, n, targets, verify)  # (k, V)
            else:
                out = self._full_forward(ids, masked, None if verify else n, targets)
        self.nfe += 1
        logits = out.float()  # (k, V)
        logits[:, self.mask_id] = float("-inf")
        return logits

    def _full_forward(
        self, ids: torch.Tensor, masked: torch.Tensor, n_decoded: int | None, targets: torch.Tensor
    ) -> torch.Tensor:
        """HF's forward over all N positions (the reference path the cache is tested against)."""
        import torch

        N = ids.shape[0]
        masked_bool = torch.zeros(1, N, dtype=torch.bool, device=self.device)  # (1, N)
        masked_bool[0, masked] = True
        perm = M.perm_mask(masked_bool, n_decoded=n_decoded)  # (1, N, N)
        tmap = M.target_mapping(targets[None, :], N)  # (1, k, N)
        if self.bf16:
            tmap = tmap.to(torch.bfloat16)  # must match the autocast compute dtype
        out = self.hf(input_ids=ids[None, :], perm_mask=perm, target_mapping=tmap, use_mems=False)
        return out.logits[0]

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        """p(x_i | prompt, masked[:n]) independently for each target i: (k, V) logits."""
        return self.logits(ids, masked, n, targets, verify=False)

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        """q(x_i | prompt, masked[:n], drafts at targets before i) for each target i: (k, V) logits."""
        return self.logits(ids, masked, n, targets, verify=True)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.hf.parameters())
