"""The any-subset model: XLNet two-stream attention (infill.models.twostream) behind the AnySubsetModel protocol.

The masks are those of infill.models.masks (shared with training):
  draft:  every target sees the prompt and the n decoded tokens, never another target, so the k drafts are
          conditionally independent and the first is exact (Lemma 1);
  verify: permuted causal; with the drafts written in, target i sees the drafts before it, giving the oracle
          q_i for all targets in one pass.
Passes go through the prompt/KV cache (xlnet_cache.py), which returns the same logits as the full forward
(tests: <= 1e-5) at a fraction of the cost; `cache=False` keeps the full forward. The `<mask>` logit is -inf
before any softmax. Weights stay fp32; bf16 autocast is used only where it is fast (infill.hardware).
The cached pass runs in eager PyTorch or in ONNX Runtime (`engine`, infill.models.onnx), on the same module.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, get_args

from infill.config import EngineName
from infill.errors import InputError, ModelError, one_line
from infill.hardware import resolve_device

if TYPE_CHECKING:
    import torch

    from infill.models.twostream import TwoStreamXLNet
    from infill.models.xlnet_cache import Engine


ENGINE_ENV = "INFILL_ENGINE"
AUTOMATIC = ("auto", "auto-int8")  # the engines chosen by the device and the extras installed


def resolve_engine(engine: str, device: str) -> str:
    """The engine that runs the cached pass: 'torch', 'onnx' or 'onnx-int8'. `auto` is $INFILL_ENGINE when set,
    else onnx on the CPU when the `onnx` extra is installed, else torch; `auto-int8` is the same with onnx-int8
    for onnx (unless $INFILL_ENGINE names one); an ONNX engine asked for on another device, or without its extra
    (onnx.require), is an InputError (exit 2: the flags or the install, not the model)."""
    from infill.models import onnx

    if engine in AUTOMATIC:
        from infill import environment

        chosen = environment.read(ENGINE_ENV) or ""  # a junk value is an InputError naming the variable (exit 2)
        if chosen and chosen not in AUTOMATIC:
            return resolve_engine(chosen, device)
        if device != "cpu" or not onnx.available():
            return "torch"
        return "onnx-int8" if engine == "auto-int8" or chosen == "auto-int8" else "onnx"
    if engine in ("onnx", "onnx-int8"):
        if device != "cpu":
            raise InputError(f"--engine {engine} runs on the CPU; use --engine torch with --device {device}")
        onnx.require()
        return engine
    if engine not in get_args(EngineName):
        raise ModelError(f"unknown engine {engine!r} (expected auto, torch, onnx or onnx-int8)")
    return engine


class XLNetAnySubset:
    """infill.models.base.AnySubsetModel over a TwoStreamXLNet.

    `nfe` counts forward passes (draft and verify alike); decoders read differences of it.
    """

    def __init__(
        self,
        net: TwoStreamXLNet,
        *,
        mask_id: int,
        pad_id: int | None = None,
        bos_id: int | None = None,
        max_length: int = 1024,
        device: str = "auto",
        bf16: bool = False,
        cache: bool = True,
        engine: str = "torch",
        folder: str | None = None,
    ) -> None:
        import torch

        from infill.hardware import fast_bf16
        from infill.models.xlnet_cache import XLNetKVCache

        self.device = resolve_device(device)
        self.net = net.to(device=self.device, dtype=torch.float32).freeze()
        self.vocab_size: int = int(net.shape.vocab_size)
        self.mask_id = int(mask_id)
        self.pad_id = pad_id
        self.bos_id = bos_id
        self.max_length = int(max_length)
        self.bf16 = bool(bf16) and fast_bf16(self.device.type)  # bf16 is 65x slower than fp32 on AVX2 CPUs
        self.nfe = 0
        self.engine = resolve_engine(engine, self.device.type)
        self.folder = folder  # the model folder the weights came from (another process can load them)
        self._making: tuple[subprocess.Popen[bytes], str] | None = None  # a graph made elsewhere, its engine
        self.cache = XLNetKVCache(self.net, self._engine(engine)) if cache else None  # None: the full forward

    def _engine(self, asked: str) -> Engine | None:
        """The cached pass's engine (None: the eager default). When an ONNX graph cannot be made or run, `auto`
        falls back to the eager engine with a warning on stderr; an engine asked for by name is a ModelError."""
        if self.engine == "torch":
            return None
        from infill.models import onnx
        from infill.models.onnx import OnnxPass

        int8 = self.engine == "onnx-int8"
        chosen = os.environ.get(ENGINE_ENV, "").strip() in ("", *AUTOMATIC)  # no engine named by the environment
        if (
            asked in AUTOMATIC
            and chosen
            and onnx.Background.enabled
            and self.folder
            and not onnx.graph_ready(self.net, int8)
        ):
            self._making = onnx.make_elsewhere(self.folder, int8), self.engine
            print(
                "infill: making the ONNX Runtime engine in the background; PyTorch runs fills meanwhile",
                file=sys.stderr,
            )
            self.engine = "torch"
            return None
        try:
            return OnnxPass(self.net, int8=int8)
        except Exception as exc:  # the exporter, the quantizer or the runtime (their errors have no common base)
            reason = one_line(f"{type(exc).__name__}: {exc}")
            if asked not in AUTOMATIC or not chosen:
                raise ModelError(f"--engine {self.engine}: {reason}") from exc
            print(f"infill: warning: the ONNX Runtime engine failed ({reason}); using torch", file=sys.stderr)
            self.engine = "torch"
            return None

    def adopt_made_engine(self) -> None:
        """Between two fills: run on the ONNX Runtime engine once its graph, made in another process, is ready
        (a fresh cache: no fill mixes two engines). A failed or unusable graph keeps PyTorch, with a warning."""
        if self._making is None or self._making[0].poll() is None:
            return
        (process, engine), self._making = self._making, None
        from infill.models import onnx
        from infill.models.xlnet_cache import XLNetKVCache

        int8 = engine == "onnx-int8"
        reason = f"exit {process.returncode}"
        if process.returncode == 0 and onnx.graph_ready(self.net, int8):
            try:
                made = onnx.OnnxPass(self.net, int8=int8)
            except Exception as exc:  # the runtime (its errors have no common base)
                reason = one_line(f"{type(exc).__name__}: {exc}")
            else:
                self.cache = XLNetKVCache(self.net, made) if self.cache is not None else None
                self.engine = engine
                return
        print(f"infill: warning: the ONNX Runtime engine could not be made ({reason}); using torch", file=sys.stderr)

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
        # On CPU the cached path's few-row products are faster in fp32 than with bf16 casts (benchmarked)
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
        """The whole sequence in one pass (the reference the cache is tested against): (k, V) logits."""
        import torch

        masked_bool = torch.zeros(1, ids.shape[0], dtype=torch.bool, device=self.device)  # (1, N)
        masked_bool[0, masked] = True
        g = self.net.train_hidden(ids[None], masked_bool, targets[None], n_decoded=n_decoded)  # (k, d)
        return self.net.lm_loss(g)

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        """p(x_i | prompt, masked[:n]) independently for each target i: (k, V) logits."""
        return self.logits(ids, masked, n, targets, verify=False)

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        """q(x_i | prompt, masked[:n], drafts at targets before i) for each target i: (k, V) logits."""
        return self.logits(ids, masked, n, targets, verify=True)

    def draft_many(self, ids: Sequence[torch.Tensor], masked: torch.Tensor, ns: Sequence[int]) -> torch.Tensor:
        """`draft` of the next position of several sequences of one problem, in one cached pass
        (infill.models.base.BatchedDraft; XLNetKVCache.draft_many): (B, V) logits."""
        import torch

        if self.cache is None:  # the full forward: one pass each
            return torch.cat([self.draft(x, masked, n, masked[n : n + 1]) for x, n in zip(ids, ns, strict=True)])
        cache = self.cache
        return self._batched(lambda: cache.draft_many([x.to(self.device) for x in ids], masked.to(self.device), [*ns]))

    def verify_many(self, ids: Sequence[torch.Tensor], masked: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
        """`verify` of the first lengths[b] positions of several fills of one problem, in one cached pass
        (infill.models.base.BatchedVerify; XLNetKVCache.verify_many): (sum(lengths), V) logits, fill by fill."""
        import torch

        if self.cache is None:  # the full forward: one pass each
            return torch.cat([self.verify(x, masked, 0, masked[:m]) for x, m in zip(ids, lengths, strict=True)])
        cache, moved = self.cache, [x.to(self.device) for x in ids]
        return self._batched(lambda: cache.verify_many(moved, masked.to(self.device), [*lengths]))

    def _batched(self, cached_pass: Callable[[], torch.Tensor]) -> torch.Tensor:
        """One cached pass of several sequences (its float32 logits, `<mask>` at -inf), counted as one nfe."""
        import torch

        autocast = self._autocast() if self.device.type == "cuda" else contextlib.nullcontext()
        with torch.no_grad(), autocast:
            out = cached_pass()
        self.nfe += 1
        logits = out.float()
        logits[:, self.mask_id] = float("-inf")
        return logits

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.net.parameters())
