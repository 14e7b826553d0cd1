"""Training an SSMD head (infill.models.ssmd) on a FROZEN block-diffusion model.

Examples are the block-diffusion model's own (infill.training.blockdiff.fim_example: fill-in-the-middle,
prompt then middle then end padding). Each step draws one block size B; every block of the response gets a
random split point r (at or after the response start): positions [r, B) of the block are masked, the ones
before it are clean. That is exactly what the SSMD decoder sees, since it reveals each block's masked
positions left to right. One no-grad forward of the base over [x_t ; x_0] (the 2N layout of its training,
`two_stream_mask`) gives the last hidden states h of the noisy stream.

Loss (teacher-forced causal cross-entropy): for each block, track j in [r, B-2] reads the TRUE token at j,
h_j, h_{j+1} and the offsets j, j+1, and predicts the token at j+1 under the causal mask over the block's
tracks; the cross-entropy of p_C is averaged over those targets. Blocks after the middle's end token carry
no loss. The non-causal cross-entropy of p_NC = softmax(lm_head(h_{j+1})) on the same targets is logged
beside it (the first masked position of a block has p_C = p_NC by construction and is left out of both).

The run folder holds checkpoint.pt (head, optimizer, step, random states, log: resumable), log.jsonl and,
at the end, ssmd_head.safetensors with the held-out numbers in its provenance.

Shapes: N = examples, L = sequence length, nb = blocks per sequence, B = block size, D = hidden size.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from infill.errors import InputError
from infill.models.ssmd import HEAD_FILE, HeadShape, SSMDHead, identity_gap, save_head
from infill.training.blockdiff_data import Specials, fim_example, specials_of, two_stream_mask
from infill.training.checkpoints import write_checkpoint
from infill.training.loop import Schedule, cosine_lr, finish, progress_of, restore, train_loop
from infill.training.optimizer import adamw
from infill.training.tokenizer import encode_documents

if TYPE_CHECKING:
    from infill.training.distributed import World


@dataclass(frozen=True)
class SSMDTrainConfig:
    steps: int = 3000
    batch_size: int = 16
    seq_len: int = 256  # must be a multiple of every block size
    block_sizes: tuple[int, ...] = (4, 8, 16)  # one drawn per step
    lr: float = 1e-3
    warmup: int = 50
    weight_decay: float = 0.01
    fim_rate: float = 0.5  # plain left-to-right examples give many more targets per base forward
    max_middle: int = 64
    max_docs: int = 2000  # training documents sampled from the corpus (seeded)
    seed: int = 0
    time_limit: float = 0.0  # seconds; 0 = none; with a limit the cosine schedule follows the clock
    log_every: int = 25
    eval_every: int = 250
    eval_examples: int = 48  # held-out examples, evaluated at every block size
    save_every: int = 100  # checkpoint every this many steps


# ---- one batch ---------------------------------------------------------------------------------------------


def suffix_noise(
    x0: torch.Tensor, resp: torch.Tensor, block: int, sp: Specials, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x0 (N, L), resp (N,) response starts -> (x_t (N, L), split (N, nb) long, lossy (N, nb) bool).

    split[n, b] = r: positions [r, B) of block b are masked; r = B when the block is all prompt. lossy: the
    block starts at or before the row's first end token in the response (later blocks are padding)."""
    n, length = x0.shape
    nb = length // block
    starts = torch.arange(nb) * block  # (nb,)
    lo = (resp[:, None] - starts[None, :]).clamp(0, block)  # (N, nb) first response offset in each block
    u = torch.rand(n, nb, generator=gen)
    split = torch.where(lo >= block, torch.full_like(lo, block), lo + (u * (block - lo)).long().clamp(max=block - 1))
    offsets = torch.arange(length) % block  # (L,)
    masked = offsets[None, :] >= split.repeat_interleave(block, dim=1)  # (N, L)
    xt = torch.where(masked, torch.full_like(x0, sp.mask), x0)
    pos = torch.arange(length)[None, :]
    is_end = (x0 == sp.end) & (pos >= resp[:, None])  # (N, L)
    end_at = torch.where(is_end.any(1), is_end.float().argmax(1), torch.full_like(resp, length - 1))  # (N,)
    lossy = starts[None, :] <= end_at[:, None]  # (N, nb)
    return xt, split, lossy


def base_hidden(base: Any, x0: torch.Tensor, xt: torch.Tensor, block: int) -> torch.Tensor:
    """The frozen base's last hidden states (after its final norm) of the noisy stream: (N, L, D)."""
    n, length = x0.shape
    ids = torch.cat([xt, x0], dim=1)  # (N, 2L)
    positions = torch.cat([torch.arange(length), torch.arange(length)])[None].expand(n, -1)  # (N, 2L)
    mask = two_stream_mask(length, block)[None, None]  # (1, 1, 2L, 2L)
    with torch.no_grad():
        out = base.model(input_ids=ids, position_ids=positions, attention_mask=mask)
    return out.last_hidden_state[:, :length].float()  # (N, L, D)


def head_losses(
    head: SSMDHead,
    base: Any,
    x0: torch.Tensor,
    hidden: torch.Tensor,
    split: torch.Tensor,
    lossy: torch.Tensor,
    block: int,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(causal cross-entropy (scalar, with grad), non-causal cross-entropy on the same targets (scalar),
    targets). x0 (N, L), hidden (N, L, D), split / lossy (N, nb)."""
    n, length, d = hidden.shape
    nb = length // block
    tok = x0.reshape(n * nb, block)  # (N*nb, B)
    hid = hidden.reshape(n * nb, block, d)  # (N*nb, B, D)
    r = split.reshape(-1)  # (N*nb,)
    keep = lossy.reshape(-1) & (r <= block - 2)  # blocks with at least one track target
    tok, hid, r = tok[keep], hid[keep], r[keep]
    m, t = int(tok.shape[0]), block - 1
    if m == 0:
        zero = hidden.sum() * 0.0
        return zero, zero.detach(), 0
    j = torch.arange(t)  # track index = offset of its current position
    valid = j[None, :] >= r[:, None]  # (m, T)
    causal = j[None, :, None] >= j[None, None, :]  # (1, T, T) i >= k
    allowed = (causal & (j[None, None, :] >= r[:, None, None])) | torch.eye(t, dtype=torch.bool)[None]  # (m, T, T)
    embed, lm_head = base.get_input_embeddings(), base.get_output_embeddings()
    with torch.no_grad():
        emb = embed(tok[:, :-1]).float()  # (m, T, D)
    offs = j[None].expand(m, t)
    delta = head(emb, hid[:, :-1], hid[:, 1:], offs, offs + 1, allowed)  # (m, T, D)
    target = tok[:, 1:][valid]  # (M,)
    h_next = hid[:, 1:][valid]  # (M, D)
    c_logits = lm_head(h_next + delta[valid]).float()  # (M, V)
    with torch.no_grad():
        nc_logits = lm_head(h_next).float()  # (M, V)
    return F.cross_entropy(c_logits, target), F.cross_entropy(nc_logits, target), int(target.numel())


def track_targets(split: torch.Tensor, lossy: torch.Tensor, block: int) -> int:
    """The targets `head_losses` counts for split / lossy (N, nb): B-1-r in every lossy block with r <= B-2."""
    keep = lossy & (split <= block - 2)
    return int((block - 1 - split)[keep].sum())


def make_batch(
    docs: Sequence[Sequence[int]], sp: Specials, cfg: SSMDTrainConfig, rng: random.Random, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (x0 (N, L), resp (N,)) from documents drawn by length."""
    weights = [len(d) for d in docs]
    batch = [
        fim_example(rng.choices(docs, weights)[0], sp, cfg.seq_len, rng, cfg.fim_rate, cfg.max_middle)
        for _ in range(size)
    ]
    return torch.tensor([b[0] for b in batch]), torch.tensor([b[1] for b in batch])


def evaluate(
    head: SSMDHead, base: Any, sp: Specials, heldout: list[tuple[torch.Tensor, torch.Tensor]], blocks: Sequence[int]
) -> dict[str, Any]:
    """Held-out causal and non-causal cross-entropy per block size (fixed examples and split points)."""
    head.eval()
    out: dict[str, Any] = {}
    tot_c = tot_nc = 0.0
    tot_n = 0
    for b in blocks:
        gen = torch.Generator().manual_seed(1000 + b)
        s_c = s_nc = 0.0
        s_n = 0
        for x0, resp in heldout:
            xt, split, lossy = suffix_noise(x0, resp, b, sp, gen)
            hidden = base_hidden(base, x0, xt, b)
            with torch.no_grad():
                c, nc, k = head_losses(head, base, x0, hidden, split, lossy, b)
            s_c, s_nc, s_n = s_c + float(c) * k, s_nc + float(nc) * k, s_n + k
        out[f"B{b}"] = {"causal": s_c / max(s_n, 1), "noncausal": s_nc / max(s_n, 1), "targets": s_n}
        tot_c, tot_nc, tot_n = tot_c + s_c, tot_nc + s_nc, tot_n + s_n
    out["all"] = {"causal": tot_c / max(tot_n, 1), "noncausal": tot_nc / max(tot_n, 1), "targets": tot_n}
    head.train()
    return out


# ---- the loop ----------------------------------------------------------------------------------------------


def train_head(
    base: Any,
    tokenizer: Any,
    texts: Sequence[str],
    heldout_texts: Sequence[str],
    out: str | Path,
    cfg: SSMDTrainConfig,
    *,
    shape: HeadShape,
    resume: bool = True,
    base_info: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    world: World | None = None,
) -> dict[str, Any]:
    """Train an SSMD head on the frozen `base` (a Qwen3ForCausalLM-like module with .model and the tied
    embeddings) and write the run folder `out` (module docstring). Returns the summary (also the head file's
    provenance). `world`: this process's part in a distributed run (infill.training.distributed);
    `cfg.batch_size` is the global batch, and only rank 0 evaluates, logs and writes."""
    from infill.training.distributed import World

    if any(cfg.seq_len % b for b in cfg.block_sizes) or max(cfg.block_sizes) > shape.max_block:
        raise ValueError(f"seq_len {cfg.seq_len} must be a multiple of every block size <= {shape.max_block}")
    world = world or World()
    world.check_batch(cfg.batch_size)
    log = world.logger(log)
    task = SSMDTask.build(base, tokenizer, texts, heldout_texts, Path(out), cfg, shape, world, log)
    task.resume(resume)
    schedule = Schedule(
        cfg.steps,
        cfg.log_every,
        eval_every=cfg.eval_every,
        save_every=cfg.save_every,
        time_limit=cfg.time_limit,
        signals=True,  # Ctrl-C, SIGTERM, SIGUSR1: save the head and the checkpoint, as at the end
    )
    train_loop(task, schedule, world, log, task.done)
    summary = task.summary(base_info or {})
    finish(world, lambda: save_head(task.run / HEAD_FILE, task.head, summary))
    return summary


@dataclass
class SSMDTask:
    """An SSMD head's run as the training loop (infill.training.loop) drives it."""

    cfg: SSMDTrainConfig
    base: Any
    head: SSMDHead
    optimizer: torch.optim.Optimizer
    sp: Specials
    docs: list[Any]
    heldout: list[tuple[torch.Tensor, torch.Tensor]]
    shape: HeadShape
    world: World
    log: Callable[[str], None]
    run: Path
    rng: random.Random
    gen: torch.Generator
    done: int = 0
    elapsed0: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)
    t_start: float = 0.0
    recent: list[tuple[float, float, int]] = field(default_factory=list)  # (causal, non-causal, targets) per step
    positions: int = 0
    last_eval: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        base: Any,
        tokenizer: Any,
        texts: Sequence[str],
        heldout_texts: Sequence[str],
        run: Path,
        cfg: SSMDTrainConfig,
        shape: HeadShape,
        world: World,
        log: Callable[[str], None],
    ) -> SSMDTask:
        """The frozen base, the documents, the fixed held-out batches and a fresh head."""
        if world.main:
            run.mkdir(parents=True, exist_ok=True)
        base.eval()
        base.requires_grad_(False)
        sp = specials_of(tokenizer)
        rng = random.Random(cfg.seed)
        gen = torch.Generator().manual_seed(cfg.seed)
        pool = list(texts)
        rng.shuffle(pool)
        docs = encode_documents(tokenizer, pool[: cfg.max_docs], min_tokens=8)
        if not docs:
            raise InputError("no training documents of 8 tokens or more in the corpus")
        ho_rng = random.Random(cfg.seed + 1)
        ho_docs = encode_documents(tokenizer, list(heldout_texts)[:400], min_tokens=8)
        heldout: list[tuple[torch.Tensor, torch.Tensor]] = []
        for i in range(0, cfg.eval_examples, cfg.batch_size):
            heldout.append(make_batch(ho_docs, sp, cfg, ho_rng, min(cfg.batch_size, cfg.eval_examples - i)))
        with torch.random.fork_rng():  # the head's initial weights follow --seed (they followed the process's seed)
            torch.manual_seed(cfg.seed)
            head = SSMDHead(shape)
        opt = adamw(head, cfg.lr, cfg.weight_decay, betas=(0.9, 0.95))
        return cls(cfg, base, head, opt, sp, docs, heldout, shape, world, log, run, rng, gen)

    def resume(self, resume: bool) -> None:
        """With `resume`, continue from the checkpoint when there is one. Starts this session's clock."""
        path = self.run / "checkpoint.pt"
        if resume and path.exists():
            ck = restore(path, {"head": self.head, "opt": self.optimizer}, self.rng, self.gen)
            self.done, self.elapsed0, self.history = int(ck["step"]), float(ck["elapsed"]), list(ck["history"])
            self.log(f"resumed {path} at step {self.done} ({self.elapsed0:.0f}s trained)")
        self.world.same(self.done, "the step of the checkpoint resumed from")
        gap = identity_gap(self.head, self.base.get_output_embeddings(), self.base.get_input_embeddings())
        self.log(
            f"SSMD head: {sum(p.numel() for p in self.head.parameters()) / 1e6:.2f}M parameters, "
            f"{len(self.docs)} documents, zero-init check gap {gap}"
        )
        self.t_start = time.perf_counter()
        self.head.train()
        self.losses_of = self.world.data_parallel(self.head, head_losses)

    def seconds(self) -> float:
        return self.elapsed0 + time.perf_counter() - self.t_start

    def lr(self, step: int) -> float:
        cfg = self.cfg
        seconds = self.world.max(self.seconds())[0] if cfg.time_limit else 0.0
        return cosine_lr(cfg.lr, cfg.warmup, step, progress_of(step, cfg.steps, seconds, cfg.time_limit))

    def step(self, step: int) -> None:
        cfg, sp, part = self.cfg, self.sp, self.world.part(self.cfg.batch_size)
        block = self.rng.choice(cfg.block_sizes)
        x0, resp = make_batch(self.docs, sp, cfg, self.rng, cfg.batch_size)  # the global batch: this process's part
        xt, split, lossy = suffix_noise(x0, resp, block, sp, self.gen)
        hidden = base_hidden(self.base, x0[part], xt[part], block)
        c_loss, nc_loss, k = self.losses_of(self.head, self.base, x0[part], hidden, split[part], lossy[part], block)
        total = track_targets(split, lossy, block)
        self.world.step(self.optimizer, self.head, (c_loss, k, total))
        k_all, (c_all, nc_all) = self.world.average(k, float(c_loss.detach()), float(nc_loss))
        self.recent.append((c_all, nc_all, int(k_all)))
        self.positions += x0.numel()
        self.done = step

    def log_step(self, step: int, lr: float) -> None:
        recent, elapsed = self.recent, self.seconds()
        n_t = sum(r[2] for r in recent)
        c = sum(r[0] * r[2] for r in recent) / max(n_t, 1)
        nc = sum(r[1] * r[2] for r in recent) / max(n_t, 1)
        rate = self.positions / max(time.perf_counter() - self.t_start, 1e-9)
        self.log(
            f"step {step}/{self.cfg.steps}  causal CE {c:.3f}  non-causal CE {nc:.3f}  lr {lr:.2e}  "
            f"{elapsed:.0f}s  {rate:.0f} positions/s"
        )
        self.record({"step": step, "train_causal": c, "train_noncausal": nc, "lr": lr, "seconds": self.seconds()})
        self.recent = []

    def record(self, entry: dict[str, Any]) -> None:
        """One line of the run's history (and, on rank 0, of log.jsonl)."""
        self.history.append(entry)
        if self.world.main:
            with (self.run / "log.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    def evaluate(self, step: int, final: bool) -> None:
        if final:
            self.head.eval()
        ev = self.last_eval = evaluate(self.head, self.base, self.sp, self.heldout, self.cfg.block_sizes)
        self.log(_eval_line(step, ev))
        self.record({"step": step, "heldout": ev, "seconds": self.seconds(), **({"final": True} if final else {})})

    def save(self, step: int, final: bool) -> None:
        state = {
            "head": self.head.state_dict(),
            "opt": self.optimizer.state_dict(),
            "step": self.done,
            "elapsed": self.seconds(),
            "history": self.history,
            "rng": self.rng.getstate(),
            "gen": self.gen.get_state(),
            "shape": asdict(self.shape),
            "config": asdict(self.cfg),
        }
        write_checkpoint(self.run / "checkpoint.pt", state)

    def summary(self, base_info: dict[str, Any]) -> dict[str, Any]:
        return {
            "objective": "SSMD causal head, teacher-forced causal cross-entropy, frozen base",
            "steps": self.done,
            "seconds": round(self.seconds(), 1),
            "heldout": self.last_eval,
            "parameters": sum(p.numel() for p in self.head.parameters()),
            "documents": len(self.docs),
            "config": asdict(self.cfg),
            "shape": asdict(self.shape),
            "base": base_info,
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
        }


def _eval_line(step: int, ev: dict[str, Any]) -> str:
    parts = [
        f"{k}: causal {v['causal']:.3f} vs non-causal {v['noncausal']:.3f} ({v['targets']} targets)"
        for k, v in ev.items()
    ]
    return f"held-out at step {step}: " + "; ".join(parts)
