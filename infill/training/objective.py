"""The AS-ARM's training objective and the settings of a run (infill.training.asarm trains with them): the
model's shape, the run's config, a fresh model, and the teacher-forced joint loss of the ASSD paper (Eq. 7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infill.models.twostream import XLNetShape as ModelShape  # a run trains the network's own shape

if TYPE_CHECKING:
    import torch

    from infill.models.twostream import TwoStreamXLNet


@dataclass(frozen=True)
class TrainConfig:
    seq_len: int = 256  # including the leading <bos>
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 200
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    grad_clip: float = 1.0
    steps: int = 0  # 0 = no step limit (use minutes)
    minutes: float = 0.0  # total training time budget across resumes; 0 = no time limit. Drives the schedule
    until: float = 0.0  # unix time at which to stop (checkpoint + exit); 0 = none
    seed: int = 0
    max_package_bytes: int = 6_000_000  # per-package cap on training text (see corpus.balanced_records)
    checkpoint_minutes: float = 5.0
    log_every: int = 10
    eval_sequences: int = 32  # held-out sequences evaluated at each checkpoint
    threads: int = 2
    device: str = "cpu"  # "cpu" or "cuda"
    bf16: bool = False  # autocast; fast only on AMX / AVX512-BF16 CPUs and CUDA (infill.hardware.fast_bf16)
    data_workers: int = 0  # > 0: processes that draw the batches (a GPU outruns one process's Python layouts)
    shape: ModelShape = field(default_factory=ModelShape)


def build_model(shape: ModelShape, seq_len: int) -> TwoStreamXLNet:
    """A fresh XLNet (bidirectional attention, no dropout, no memory) in fp32, initialised from torch's global
    generator. `seq_len` is not part of the weights: relative positions work at any length."""
    from infill.models.twostream import TwoStreamXLNet

    model = TwoStreamXLNet(shape)
    model.init_weights()
    return model


def target_nll(model: TwoStreamXLNet, batch: dict[str, torch.Tensor], bf16: bool = False) -> torch.Tensor:
    """Per-target negative log-likelihood (B, T) from one teacher-forced forward; 0 where labels are -100.

    The content stream holds the true tokens (teacher forcing); the mask is the permuted-causal oracle mask of
    `infill.models.masks`, identical to the verify pass at inference, so no masked position sees its own or
    any later masked token. `bf16`: autocast (only worth it where `infill.hardware.fast_bf16()`).
    """
    import torch

    device = batch["ids"].device.type
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        return model.target_nll(batch).float()


def joint_loss(model: TwoStreamXLNet, batch: dict[str, torch.Tensor], bf16: bool = False) -> tuple[torch.Tensor, int]:
    """Eq. 7: mean cross-entropy over the loss-carrying masked positions, one forward -> (loss, n_targets)."""
    count = int((batch["labels"] >= 0).sum())
    return target_nll(model, batch, bf16).sum() / max(count, 1), count
