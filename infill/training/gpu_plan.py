"""The GPU job's plan (infill.training.gpu_job): the settings of one run, the report its stages fill in, and
the compute estimate that picks the AS-ARM's shape for the minutes a loan leaves."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Shape:
    layers: int
    d_model: int
    heads: int
    d_inner: int

    def params(self, vocab: int = 8192) -> int:
        """Parameters of the AS-ARM of this shape: per layer 5 d^2 attention (q, k, v, o, r) and 2 d d_inner
        feed-forward, plus the tied embedding."""
        d = self.d_model
        return self.layers * (5 * d * d + 2 * d * self.d_inner) + vocab * d

    def train_flops(self, seq_len: int, target_share: float = 0.3, vocab: int = 8192) -> float:
        """Training FLOPs per sequence position (forward x 3): the content stream on every position, the
        query stream and the head on the loss-carrying ones."""
        d, n, L = self.d_model, seq_len, self.layers
        content = L * (2 * 4 * d * d + 2 * 2 * d * self.d_inner + 4 * n * d)
        query = L * (2 * 2 * d * d + 2 * 2 * d * self.d_inner + 4 * n * d) + 2 * d * vocab
        return 3.0 * (content + target_share * query)


# Shapes the estimate chooses from, smallest first (d_model / heads = 64).
LADDER = (
    Shape(6, 256, 4, 1024),
    Shape(8, 320, 5, 1280),
    Shape(8, 384, 6, 1536),
    Shape(9, 384, 6, 1536),
    Shape(10, 448, 7, 1792),
    Shape(12, 512, 8, 2048),
)


@dataclass(frozen=True)
class Plan:
    """Everything the job does, decided before it starts."""

    out: Path
    work: Path
    carry: Path
    minutes: float = 9.0
    device: str = "cuda"
    workers: int = 0  # 0: every core
    smoke: bool = False
    job: str = "asarm"  # which trainers: "asarm", "blockdiff" or "both" (side by side on the one GPU)
    init: Path | None = None  # the AS-ARM folder to continue (its shape); None: a fresh model the estimate sizes
    max_files: int = 0  # 0: every file of the lent machine's packages
    max_mb: float = 38.0  # the AS-ARM's bf16 weights at most this many MB (the tracked tree's budget)
    tflops: float = 30.0  # training throughput the compute estimate assumes (measured: docs/training.md)
    seq_len: int = 512
    batch_size: int = 64  # the batch lr and warmup are given at; the probe picks the one trained at
    batch_sizes: tuple[int, ...] = (64, 128, 256, 512)  # what the probe measures, for either trainer (gpu_probe)
    lr: float = 1e-3  # a fresh model's peak learning rate
    warmup: int = 250
    init_lr: float = 5e-4  # a continued model's (re-warmed to half the first run's peak)
    init_warmup: int = 100
    bd_seq_len: int = 256
    bd_batch_size: int = 64
    bd_lr: float = 5e-4
    bd_warmup: int = 100
    shape: Shape | None = None  # None: the compute estimate picks
    reserve_s: float = 75.0  # left at the end for the held-out check and the export
    probe_s: float = 40.0  # a trainer's batch probe measures no further batch after this many seconds
    steps: int = 0  # each trainer stops after this many steps (0: the deadline alone ends training)
    seed: int = 0

    @classmethod
    def smoke_plan(cls, out: Path, work: Path, carry: Path) -> Plan:
        return cls(
            out,
            work,
            carry,
            minutes=1.6,
            device="cpu",
            workers=2,
            smoke=True,
            max_files=120,
            seq_len=64,
            batch_size=8,
            lr=1e-3,
            warmup=5,
            init_warmup=5,
            batch_sizes=(2, 4),
            bd_seq_len=64,
            bd_batch_size=4,
            bd_warmup=5,
            shape=Shape(2, 64, 2, 128),
            reserve_s=25.0,
            steps=6,  # a rehearsal of the stages, not of the deadline: each trainer stops after 6 steps
        )

    @property
    def asarm(self) -> bool:
        return self.job in ("asarm", "both")

    @property
    def blockdiff(self) -> bool:
        return self.job in ("blockdiff", "both")

    def trainer(self, name: str) -> Trainer:
        """What the batch probe measures of trainer `name` ("asarm" or "blockdiff"), and its schedule at the
        batch it is given at: a continued AS-ARM's or a fresh one's; the block-diffusion model's."""
        memory = 0.45 if self.job == "both" else 0.8  # the other trainer shares the GPU
        if name == "blockdiff":
            bd = (self.bd_seq_len, self.bd_batch_size, self.bd_lr, self.bd_warmup)
            return Trainer(name, *bd, self.batch_sizes, memory)
        lr, warmup = (self.init_lr, self.init_warmup) if self.init is not None else (self.lr, self.warmup)
        return Trainer(name, self.seq_len, self.batch_size, lr, warmup, self.batch_sizes, memory)


@dataclass(frozen=True)
class Trainer:
    """One trainer as the batch probe (infill.training.gpu_probe) sees it."""

    name: str
    seq_len: int
    batch_size: int  # the batch `lr` and `warmup` are given at
    lr: float
    warmup: int
    batch_sizes: tuple[int, ...]  # the batches measured
    memory_share: float  # the most of the GPU's memory its step may take


@dataclass(frozen=True)
class BlockDiffSettings:
    """The block-diffusion trainer's settings in the job (its command, and the probe's copy of its task)."""

    block_sizes: tuple[int, ...] = (1, 1, 4, 4, 8, 16)
    loss_on: str = "all"
    line_rate: float = 0.5
    fim_rate: float = 0.9
    max_middle: int = 64
    smoke_shape: tuple[tuple[str, int], ...] = (("hidden", 64), ("layers", 2), ("heads", 2), ("kv_heads", 1))


BD = BlockDiffSettings()


@dataclass
class Report:
    """What the summary prints, filled in as the stages run."""

    stages: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def stage(self, name: str, since: float) -> None:
        self.stages[name] = round(time.time() - since, 1)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- the compute estimate --------------------------------------------------------------------------------------


MIN_POSITIONS_PER_PARAM = 4.0  # measured: 8x384 at 3-5 beat 6x256 at 10+ (docs/training.md, "A GPU loan")


def folder_shape(folder: Path) -> Shape:
    """The shape of the AS-ARM model folder `folder` (its config.json)."""
    import json

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return Shape(int(config["n_layer"]), int(config["d_model"]), int(config["n_head"]), int(config["d_inner"]))


def choose_shape(plan: Plan, seconds: float) -> tuple[Shape, str]:
    """The AS-ARM's shape for `seconds` of training: the largest shape of LADDER that both fits the size budget
    and sees at least MIN_POSITIONS_PER_PARAM training positions per parameter at the assumed throughput.
    (Chinchilla's 20 tokens per parameter would pick a smaller shape than the one that measured best here.)"""
    if plan.init is not None:
        shape = folder_shape(plan.init)
        return shape, f"continuing {plan.init}: {shape.layers}x{shape.d_model}, {shape.params() / 1e6:.1f}M parameters"
    if plan.shape is not None:
        return plan.shape, f"shape given: {plan.shape.params() / 1e6:.1f}M parameters"
    cap = plan.max_mb * 1e6 / 2  # bf16
    flops = plan.tflops * 1e12 * seconds

    def positions(s: Shape) -> float:
        return flops / s.train_flops(plan.seq_len)

    fits = [s for s in LADDER if s.params() <= cap] or [LADDER[0]]
    optimal = [s for s in fits if positions(s) >= MIN_POSITIONS_PER_PARAM * s.params()] or [fits[0]]
    shape = optimal[-1]
    bound = "the size budget" if shape == fits[-1] and len(optimal) == len(fits) else "the compute"
    note = (
        f"{plan.tflops:.0f} TFLOP/s assumed x {seconds:.0f}s = {flops:.2e} FLOPs; {shape.layers}x{shape.d_model} "
        f"({shape.params() / 1e6:.1f}M params, {shape.train_flops(plan.seq_len) / 1e6:.0f} MFLOP per position) "
        f"would see {positions(shape) / 1e6:.0f}M positions ({positions(shape) / shape.params():.0f} per parameter); "
        f"bound by {bound} (budget {plan.max_mb:.0f} MB of bf16 weights)"
    )
    return shape, note
