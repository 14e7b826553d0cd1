"""Training a PTP drafter (infill.models.ptp) by distillation from a frozen block-diffusion teacher run at block
size 1 (O-PTP, the one-hot variant).

Data: fill-in-the-middle sequences <fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle <end> cut from the
corpus, the same format decoding uses. The middle is either corpus text (whole lines, or a random span) or a
sample of the teacher itself at temperature 1 from that prompt (`teacher_share`): teacher samples are the
distribution the drafter meets when decoding.

One step:
1. Teacher pass, no gradients: the clean sequence (causal, block size 1) plus one mask row per middle position
   (mask row k sees the clean tokens < k: the teacher's q_k there). u_k = extract_u(t_k, q_k, noise), noise ~
   U[0, 1): for a teacher sample this is exactly the posterior of the sampling uniform, so training sees the u's
   decoding draws. The clean rows' KV cache is kept (cropped to the clean part).
2. Student pass over the cache: `splits` groups of N slot rows per sequence, group g at a random split point
   i_g in the middle, slots at i_g..i_g+N-1 (mask token + U(bits(u_k))), seeing the clean tokens < i_g and their
   own group. A share of the groups (`independent_share`) gets no u: the same adapter is trained as the
   independent-slot baseline too, which makes the comparison "with u vs without u" one of the same network.
3. Loss (Eq. 10 of O-PTP): cross-entropy of t_k at every slot row whose position is in the middle (up to and
   including its end token).

The held-out metric, logged as training goes: for fixed held-out prompts with TEACHER-SAMPLED middles (so the
u's make decoding follow exactly that path), at every split point i of the middle the tokens one decoding
iteration would produce there: t_i, the drafts d_{i+1}.. while each equals the teacher's token, then one more
(correction or bonus), capped at the end of the middle. Its mean is "tokens per iteration", for the drafter
with u ("ptp") and without ("independent").

Shapes: B = sequences, L = clean length, M = mask rows, G = split groups, N = slots, V = vocabulary size.
"""

from __future__ import annotations

import json
import random
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.errors import InputError
from infill.training.checkpoints import write_checkpoint
from infill.training.loop import Schedule, cosine_lr, finish, progress_of, restore, train_loop
from infill.training.ptp_teacher import (
    Batch,
    Example,
    Special,
    iteration_tokens,
    sample_middles,
    slot_inside,
    slot_logits,
    teacher_pass,
)

if TYPE_CHECKING:
    import torch

    from infill.models.ptp import PTPAdapter
    from infill.training.distributed import World

__all__ = [
    "Batch",
    "Example",
    "PTPTrainConfig",
    "Special",
    "evaluate",
    "fim_prompt",
    "iteration_tokens",
    "load_docs",
    "make_examples",
    "sample_middles",
    "slot_logits",
    "specials",
    "teacher_pass",
    "train",
]


@dataclass(frozen=True)
class PTPTrainConfig:
    steps: int = 100_000
    batch_size: int = 8
    slots: int = 8  # N
    splits: int = 8  # split groups per sequence
    rank: int = 32
    lr: float = 1e-3
    warmup: int = 50
    weight_decay: float = 0.0
    context: int = 192  # prefix + suffix tokens at most
    max_middle: int = 32  # single lines and short blocks: what one-line infilling asks for
    line_share: float = 0.6  # corpus middles: whole lines (else a random span)
    teacher_share: float = 0.5  # middles sampled by the teacher at temperature 1
    independent_share: float = 0.5  # slot groups trained without u (the baseline mode of the same adapter)
    seed: int = 0
    time_limit: float = 0.0  # seconds for this run; 0 = none
    log_every: int = 25
    eval_every: int = 100
    eval_sequences: int = 32
    save_every: int = 100


def specials(tokenizer: Any, mask_id: int) -> Special:
    ids = [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")]
    nl = tokenizer.encode("\n").ids
    if any(i is None for i in ids) or len(nl) != 1:
        raise ValueError("the teacher's tokenizer lacks the FIM / end tokens or a single newline token")
    end, pre, suf, mid = (int(i) for i in ids)
    return Special(end=end, mask=mask_id, pre=pre, suf=suf, mid=mid, newline=int(nl[0]))


def fim_prompt(doc: Sequence[int], sp: Special, cfg: PTPTrainConfig, rng: random.Random) -> tuple[list[int], list[int]]:
    """A (prompt, corpus middle) pair cut from a tokenized document."""
    span = cfg.context + cfg.max_middle
    start = rng.randrange(max(1, len(doc) - span + 1))
    window = list(doc[start : start + span])
    lines = [k + 1 for k, t in enumerate(window) if t == sp.newline]  # indices where a line starts
    mid_a = mid_b = -1
    if rng.random() < cfg.line_share and len(lines) >= 2:
        a = rng.randrange(len(lines) - 1)
        b = min(len(lines) - 1, a + rng.choice((1, 1, 1, 2, 3)))
        mid_a, mid_b = lines[a], lines[b]
    if not 0 < mid_b - mid_a <= cfg.max_middle:
        n = rng.randint(1, max(1, min(cfg.max_middle, len(window) - 2)))
        mid_a = rng.randint(0, max(0, len(window) - n))
        mid_b = mid_a + n
    pre, mid, suf = window[:mid_a], window[mid_a:mid_b], window[mid_b:]
    room = cfg.context
    keep_suf = min(len(suf), room // 4)
    keep_pre = min(len(pre), room - keep_suf)
    pre, suf = pre[len(pre) - keep_pre :], suf[: room - keep_pre]
    return [sp.pre, *pre, sp.suf, *suf, sp.mid], mid


# ---- the loop ---------------------------------------------------------------------------------------------------


def load_docs(corpus: Path, split: str, tokenizer: Any, max_package_bytes: int, limit: int = 0) -> list[array[int]]:
    from infill.training.corpus import balanced_records, read_split
    from infill.training.tokenizer import encode_documents

    if split == "train":
        texts = [r["text"] for r in balanced_records(corpus, "train", max_package_bytes)]
    else:
        texts = [r["text"] for r in read_split(corpus, split)]
    if limit:
        texts = texts[:limit]
    return encode_documents(tokenizer, texts, min_tokens=16)


def make_examples(
    teacher: Any,
    docs: Sequence[Sequence[int]],
    sp: Special,
    cfg: PTPTrainConfig,
    rng: random.Random,
    gen: torch.Generator,
    count: int,
    teacher_share: float,
) -> list[Example]:
    if count == 0:
        return []
    weights = [len(d) for d in docs]
    pairs = [fim_prompt(rng.choices(docs, weights)[0], sp, cfg, rng) for _ in range(count)]
    # corpus middles end with the end token; a teacher sample ends with it when the teacher wrote it, and has no
    # end target when it was cut at max_middle
    bodies = [[*mid, sp.end] for _, mid in pairs]
    sampled = [k for k in range(count) if rng.random() < teacher_share]
    if sampled:
        mids = sample_middles(teacher, [pairs[k][0] for k in sampled], sp, cfg.max_middle, gen)
        for k, mid in zip(sampled, mids, strict=True):
            bodies[k] = mid
    return [
        Example(ids=p + body, start=len(p), stop=len(p) + len(body)) for (p, _), body in zip(pairs, bodies, strict=True)
    ]


def evaluate(
    teacher: Any, adapter: PTPAdapter, held: list[Example], sp: Special, cfg: PTPTrainConfig
) -> dict[str, float]:
    """Held-out tokens per iteration (teacher-forced, every split point of every middle), with and without u."""
    import torch

    gen = torch.Generator().manual_seed(12345)
    result: dict[str, float] = {}
    totals = {"ptp": [0.0, 0], "independent": [0.0, 0]}
    was = adapter.training
    adapter.eval()
    with torch.no_grad():
        for s in range(0, len(held), cfg.batch_size):
            chunk = held[s : s + cfg.batch_size]
            batch = teacher_pass(teacher, chunk, sp, gen)
            span = int((batch.stop - batch.start).max())
            splits = batch.start[:, None] + torch.arange(span)[None, :]  # (B, S) every split point
            splits = torch.minimum(splits, batch.stop[:, None] - 1)
            valid = (batch.start[:, None] + torch.arange(span)[None, :]) < batch.stop[:, None]  # (B, S)
            for mode, flag in (("ptp", True), ("independent", False)):
                with_u = torch.full(splits.shape, flag)
                logits, targets = slot_logits(teacher, adapter, batch, splits, with_u, cfg.slots, sp)
                per = iteration_tokens(logits, targets, cfg.slots)  # (B, S)
                totals[mode][0] += float(per[valid].sum())
                totals[mode][1] += int(valid.sum())
    adapter.train(was)
    for mode, (tot, cnt) in totals.items():
        result[mode] = tot / max(cnt, 1)
    return result


def train(
    teacher_folder: str | Path,
    corpus: str | Path,
    out: str | Path,
    cfg: PTPTrainConfig,
    *,
    resume: bool = False,
    max_package_bytes: int = 150_000,
    log: Callable[[str], None] = print,
    world: World | None = None,
) -> dict[str, Any]:
    """Train an adapter for the block-diffusion model in `teacher_folder`. Writes into the folder `out`:
    ptp_adapter.safetensors (the adapter), ptp_checkpoint.pt (adapter + optimizer + step, for --resume) and
    ptp_log.jsonl (one line per evaluation). Returns the summary stored in the adapter's provenance.
    `world`: this process's part in a distributed run (infill.training.distributed); `cfg.batch_size` is the
    global batch, every process draws its teacher samples (they decide the data), and only rank 0 evaluates,
    logs and writes."""
    from infill.training.distributed import World

    world = world or World()
    world.check_batch(cfg.batch_size)
    log = world.logger(log)
    t_start = time.perf_counter()
    task = PTPTask.build(teacher_folder, Path(corpus), Path(out), cfg, max_package_bytes, world, log)
    task.resume(resume)
    if task.done == 0 and world.main:
        task.evaluate(0, final=False)
    schedule = Schedule(
        cfg.steps,
        cfg.log_every,
        eval_every=cfg.eval_every,
        save_every=cfg.save_every,
        time_limit=task.horizon,
        signals=True,  # Ctrl-C, SIGTERM, SIGUSR1: save the adapter and the checkpoint, as at the end
    )
    train_loop(task, schedule, world, log, task.done)
    finish(world)
    result = task.summary()
    result["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    return result


@dataclass
class PTPTask:
    """A PTP adapter's run as the training loop (infill.training.loop) drives it."""

    cfg: PTPTrainConfig
    teacher: Any
    adapter: PTPAdapter
    optimizer: torch.optim.Optimizer
    sp: Special
    docs: list[array[int]]
    held: list[Example]
    world: World
    log: Callable[[str], None]
    out: Path
    teacher_folder: str | Path
    rng: random.Random
    gen: torch.Generator
    done: int = 0
    elapsed_before: float = 0.0
    t_run: float = 0.0
    horizon: float = 0.0  # the time limit on the schedule's clock (sessions before this one included)
    last_eval: dict[str, float] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    pool: list[Example] = field(default_factory=list)  # teacher-sampled examples not used yet
    loss_of: Callable[..., torch.Tensor] | None = None  # the slot loss, data-parallel (set when the run starts)

    @classmethod
    def build(
        cls,
        teacher_folder: str | Path,
        corpus: Path,
        out: Path,
        cfg: PTPTrainConfig,
        max_package_bytes: int,
        world: World,
        log: Callable[[str], None],
    ) -> PTPTask:
        """The frozen teacher, the documents, the held-out examples (rank 0's) and a fresh adapter."""
        import torch
        from tokenizers import Tokenizer

        from infill.config import ModelSpec
        from infill.models.blockdiff import load_folder
        from infill.models.ptp import PTPAdapter

        if world.main:
            out.mkdir(parents=True, exist_ok=True)
        loaded = load_folder(teacher_folder, ModelSpec(name=str(teacher_folder), device="cpu", bf16=False))
        teacher = loaded.blockdiff.model
        teacher.eval()
        for prm in teacher.parameters():
            prm.requires_grad_(False)
        tok = Tokenizer.from_file(str(Path(teacher_folder) / "tokenizer.json"))
        sp = specials(tok, loaded.blockdiff.mask_id)
        rng = random.Random(cfg.seed)
        gen = torch.Generator().manual_seed(cfg.seed)
        log(f"reading {corpus} ...")
        docs = load_docs(corpus, "train", tok, max_package_bytes)
        held_docs = load_docs(corpus, "heldout", tok, 0, limit=400)
        log(f"{len(docs)} training documents, {sum(len(d) for d in docs)} tokens; {len(held_docs)} held-out documents")
        if not docs or not held_docs:
            raise InputError(f"{corpus}: needs training and held-out documents long enough to cut examples from")
        held_rng, held_gen = random.Random(1000 + cfg.seed), torch.Generator().manual_seed(1000)
        count = cfg.eval_sequences if world.main else 0  # rank 0 alone evaluates
        held = make_examples(teacher, held_docs, sp, cfg, held_rng, held_gen, count, teacher_share=1.0)
        adapter = PTPAdapter.for_teacher(teacher, rank=cfg.rank, alpha=float(cfg.rank), slots=cfg.slots)
        adapter.train()
        opt = torch.optim.AdamW(adapter.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99))
        return cls(cfg, teacher, adapter, opt, sp, docs, held, world, log, out, teacher_folder, rng, gen)

    @property
    def checkpoint_path(self) -> Path:
        return self.out / "ptp_checkpoint.pt"

    def resume(self, resume: bool) -> None:
        """With `resume`, continue from the checkpoint when there is one. Starts this session's clock."""
        path = self.checkpoint_path
        if resume and path.exists():
            state = restore(path, {"adapter": self.adapter, "optimizer": self.optimizer}, self.rng, self.gen)
            self.done, self.elapsed_before = int(state["step"]), float(state["seconds"])
            self.log(f"resumed from {path} at step {self.done} ({self.elapsed_before:.0f}s trained)")
        self.world.same(self.done, "the step of the checkpoint resumed from")
        self.t_run = time.perf_counter()
        # --time-limit is this session's: the schedule's clock counts the sessions before it too
        self.horizon = self.cfg.time_limit + self.elapsed_before if self.cfg.time_limit else 0.0
        self.loss_of = self.world.data_parallel(self.adapter, self.slot_loss)

    def slot_loss(self, batch: Batch, splits: torch.Tensor, with_u: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        logits, targets = slot_logits(self.teacher, self.adapter, batch, splits, with_u, self.cfg.slots, self.sp)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    def seconds(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.t_run

    def lr(self, step: int) -> float:
        seconds = self.world.max(self.seconds())[0] if self.horizon else 0.0
        return cosine_lr(self.cfg.lr, self.cfg.warmup, step, progress_of(step, self.cfg.steps, seconds, self.horizon))

    def step(self, step: int) -> None:
        import torch

        cfg, rng, gen, teacher, sp = self.cfg, self.rng, self.gen, self.teacher, self.sp
        part = self.world.part(cfg.batch_size)
        n_sampled = sum(rng.random() < cfg.teacher_share for _ in range(cfg.batch_size))
        if len(self.pool) < n_sampled:  # teacher samples in batches of 32: one sampling step costs about what 4 do
            self.pool += make_examples(teacher, self.docs, sp, cfg, rng, gen, 32, teacher_share=1.0)
        examples = make_examples(teacher, self.docs, sp, cfg, rng, gen, cfg.batch_size - n_sampled, 0.0)
        examples += [self.pool.pop() for _ in range(n_sampled)]
        batch = teacher_pass(teacher, examples, sp, gen, part)  # this process's part of the global batch
        start = torch.tensor([e.start for e in examples])
        stop = torch.tensor([e.stop for e in examples])
        span = (stop - start).clamp(min=1)  # (B,)
        offs = (torch.rand(len(examples), cfg.splits, generator=gen) * span[:, None]).long()  # (B, G)
        splits = start[:, None] + offs
        with_u = torch.rand(len(examples), cfg.splits, generator=gen) >= cfg.independent_share
        assert self.loss_of is not None, "resume() starts the run"
        mean = self.loss_of(batch, splits[part], with_u[part])
        inside = slot_inside(splits, start, stop, cfg.slots)  # (B, G*N) the targets
        count, my_count = int(inside.sum()), int(inside[part].sum())
        self.world.step(self.optimizer, self.adapter, (mean, my_count, count))
        self.losses.append(self.world.average(my_count, float(mean.detach()))[1][0])
        self.done = step

    def log_step(self, step: int, lr: float) -> None:
        recent = self.losses[-self.cfg.log_every :]
        self.log(f"step {step}  loss {sum(recent) / len(recent):.3f}  lr {lr:.2e}  {self.seconds():.0f}s")

    def evaluate(self, step: int, final: bool) -> None:
        """Held-out tokens per iteration, logged; at step 0 and every eval_every steps also in ptp_log.jsonl."""
        ev = self.last_eval = evaluate(self.teacher, self.adapter, self.held, self.sp, self.cfg)
        where = "final " if final else f"step {step} "
        self.log(f"{where} held-out tokens/iteration: ptp {ev['ptp']:.3f}  independent {ev['independent']:.3f}")
        if final:
            return
        if step == 0:
            entry: dict[str, Any] = {"step": 0, "seconds": 0.0, **ev}
        else:
            recent = self.losses[-50:]
            entry = {"step": step, "seconds": round(self.seconds(), 1), "loss": sum(recent) / len(recent), **ev}
            self.history.append(entry)
        with (self.out / "ptp_log.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    def save(self, step: int, final: bool) -> None:
        """The adapter file (its provenance the summary so far) and the checkpoint."""
        from infill.models.ptp import ADAPTER_FILE

        self.adapter.save(self.out / ADAPTER_FILE, provenance=self.summary())
        payload = {
            "adapter": self.adapter.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.done,
            "seconds": self.seconds(),
            "rng": self.rng.getstate(),
            "gen": self.gen.get_state(),
        }
        write_checkpoint(self.checkpoint_path, payload)

    def summary(self) -> dict[str, Any]:
        return {
            "objective": "O-PTP distillation (one-hot), gated LoRA on slot rows, u bits embedding",
            "teacher": str(self.teacher_folder),
            "steps": self.done,
            "seconds": round(self.seconds(), 1),
            "config": asdict(self.cfg),
            "heldout_tokens_per_iteration": self.last_eval,
            "adapter_parameters": sum(p.numel() for p in self.adapter.parameters()),
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
        }
