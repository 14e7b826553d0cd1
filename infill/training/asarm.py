"""Training the any-subset AR model (AS-ARM) with the ASSD paper's teacher-forced joint loss (Eq. 7).

One training sequence: `<bos>` + 255 tokens cut from the token stream of whole files (files are tokenized
once; `<bos>` also separates files inside the stream and is never masked). A *layout* picks the masked
positions the way users fill: single lines, multi-line blocks, function bodies, docstrings, random spans,
random subsets. Every masked position is predicted left to right (Eq. 4) under the permuted-causal mask of
`infill.models.masks` (the very function inference uses), and the loss is the cross-entropy summed over all
masked positions, computed in one forward pass:

    L(x) = - sum_{i in masked, in position order} log p(x_i | x_prompt, x_{masked before i})        (Eq. 7)

Variable length: the user does not know how many tokens a fill needs, so a masked span may be longer than its
content. During training each contiguous masked span gets extra `<pad>` positions after its content, sized like
the budgets of infill's length policy (`LayoutSampler.extra_pads`); then the sequence is re-cut to the fixed
length. The model learns to end a fill with `<pad>`. Pads after the span's first pad carry no loss: inference
turns the rest of a span into pad without asking the model.

The mask rate of the random-span and random-subset layouts comes from a golden-ratio (Kronecker) sequence, a
low-discrepancy sampler, so rates cover their range evenly even over few steps.
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from infill.models.twostream import TwoStreamXLNet
    from infill.training.distributed import World

from infill.errors import InputError
from infill.training.checkpoints import (
    TrainState,
    config_from_json,
    export_model,
    provenance,
    read_checkpoint,
    save_checkpoint,
)
from infill.training.layouts import (  # noqa: F401 - the data pipeline, re-exported for callers of this module
    Batches,
    Example,
    LayoutSampler,
    collate,
    line_break_ids,
    target_count,
    token_strings,
    tokenize_stream,
)
from infill.training.loop import Schedule, finish, train_loop
from infill.training.objective import ModelShape, TrainConfig, build_model, joint_loss, target_nll  # noqa: F401
from infill.training.optimizer import adamw
from infill.training.streams import cached_stream, heldout_batches, heldout_stream, pack_streams  # noqa: F401


def lr_at(cfg: TrainConfig, step: int, elapsed: float) -> float:
    """Linear warm-up, then cosine decay to lr * min_lr_ratio over the step or time budget (time if both)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.minutes > 0:
        progress = elapsed / (cfg.minutes * 60.0)
    elif cfg.steps > 0:
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    else:
        return cfg.lr
    progress = min(1.0, max(0.0, progress))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


# ----------------------------------------------------------------------------------------------------
# Training loop


class Log:
    """Plain log lines; a rich progress bar only when stderr is a terminal. `quiet`: nothing at all (the ranks
    of a distributed run other than 0)."""

    def __init__(self, total: int | None, quiet: bool = False) -> None:
        self.quiet = quiet
        self.interactive = sys.stderr.isatty() and not quiet
        self.progress: Any = None
        if self.interactive:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
            self.progress.start()
            self.task = self.progress.add_task("training", total=total)

    def step(self, step: int, msg: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, description=msg)
        elif not self.quiet:
            print(msg, flush=True)

    def line(self, msg: str) -> None:
        if self.progress is not None:
            self.progress.console.print(msg)
        elif not self.quiet:
            print(msg, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def train(
    corpus: Path,
    tokenizer_json: Path,
    run_dir: Path,
    cfg: TrainConfig,
    resume: bool = True,
    export_to: Path | None = None,
    init_from: Path | None = None,
    world: World | None = None,
) -> TrainState:
    """Train (or resume) an AS-ARM on `corpus`; checkpoints in `run_dir/last.pt`; optional export at end.

    `init_from`: an exported model folder whose weights start a fresh run (e.g. continue from the shipped
    weights in a later session, when the checkpoint with optimizer state is gone). Ignored when resuming.
    `world`: this process's part in a distributed run (infill.training.distributed); `cfg.batch_size` is the
    global batch, and only rank 0 logs and writes.
    """
    import torch

    from infill.training.distributed import World
    from infill.training.tokenizer import load_tokenizer

    world = world or World()
    world.check_batch(cfg.batch_size)
    torch.set_num_threads(cfg.threads)
    tok = load_tokenizer(tokenizer_json)
    ckpt_path = run_dir / "last.pt"
    ckpt = read_checkpoint(ckpt_path) if resume and ckpt_path.exists() else None
    asked = _run_config(cfg, tok.get_vocab_size(), None)
    cfg = _run_config(cfg, tok.get_vocab_size(), ckpt)
    world.same(int(ckpt["state"]["step"]) if ckpt is not None else -1, "the step of the checkpoint resumed from")
    task = AsarmTask.build(corpus, tokenizer_json, tok, run_dir, cfg, ckpt, init_from, world)
    log = task.log
    kept = _kept_from_checkpoint(asked, cfg)
    if kept:
        log.line(
            f"note: resuming keeps the checkpoint's {kept}; --no-resume or another --run-dir trains what was asked"
        )
    schedule = Schedule(
        cfg.steps or None,
        cfg.log_every,
        save_minutes=cfg.checkpoint_minutes,
        time_limit=cfg.minutes * 60,
        until=cfg.until,
        signals=True,
    )
    try:
        outcome = train_loop(task, schedule, world, log.line, task.state.step)
    finally:
        log.close()
        if task.parallel is not None:
            task.parallel.close()
    if outcome.signal:
        by = f"signal {outcome.signal}" if outcome.signal > 0 else "a signal to another process"
        log.line(f"stopped by {by} at step {task.state.step}; resume with the same command")
    elif export_to is not None:
        finish(world, lambda: task.export(export_to, corpus))
        return task.state
    finish(world)  # every process returns once rank 0's files are written
    return task.state


def _run_config(cfg: TrainConfig, vocab_size: int, ckpt: dict[str, Any] | None) -> TrainConfig:
    """`cfg` with the tokenizer's vocabulary and, when resuming, the checkpoint's shape, seed and length."""
    if vocab_size != cfg.shape.vocab_size:
        cfg = TrainConfig(**{**asdict(cfg), "shape": ModelShape(**{**asdict(cfg.shape), "vocab_size": vocab_size})})
    if ckpt is not None:
        old = config_from_json(ckpt["config"])
        if old.shape.vocab_size != vocab_size:  # its ids would index past the embedding, or mean other text
            raise InputError(
                f"the tokenizer has {vocab_size} tokens, but the checkpoint resumed from was trained with "
                f"{old.shape.vocab_size}; give the --tokenizer it trained with, or --no-resume"
            )
        cfg = TrainConfig(**{**asdict(cfg), "shape": old.shape, "seed": old.seed, "seq_len": old.seq_len})
    return cfg


def _kept_from_checkpoint(asked: TrainConfig, run: TrainConfig) -> str:
    """What a resumed run keeps of its checkpoint although the command asked otherwise ("" when nothing): the
    shape, the sequence length and the seed."""
    wanted = {**asdict(asked.shape), "seq_len": asked.seq_len, "seed": asked.seed}
    kept = {**asdict(run.shape), "seq_len": run.seq_len, "seed": run.seed}
    return ", ".join(
        f"{_FLAGS.get(k, k.replace('_', '-'))} {kept[k]} (asked {wanted[k]})" for k in kept if kept[k] != wanted[k]
    )


_FLAGS = {"n_layer": "--layers", "n_head": "--heads", "d_model": "--d-model", "d_inner": "--d-inner"}
_FLAGS |= {"seq_len": "--seq-len", "seed": "--seed"}  # a setting of `infill train asarm` -> its flag


def _model(cfg: TrainConfig, ckpt: dict[str, Any] | None, init_from: Path | None) -> TwoStreamXLNet:
    """The model: the checkpoint's, `init_from`'s weights, or fresh (after seeding torch and random)."""
    import torch

    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(cfg.shape, cfg.seq_len)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
    elif init_from is not None:
        from infill.models.weight_files import read_weights

        _check_init_shape(cfg, init_from)
        try:  # model.safetensors or the bf16 shards a GPU run exports
            model.load_file_state(read_weights(init_from))
        except ValueError as exc:
            raise InputError(f"{init_from}: {exc}") from exc
    return model


def init_shape(init_from: Path) -> ModelShape:
    """The shape of the exported model folder an --init names; InputError (one line) when it has none."""
    from infill.training.gpu_plan import folder_shape

    try:
        shape = folder_shape(init_from)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{init_from}: not an AS-ARM model folder with a readable config.json ({exc})") from exc
    return ModelShape(d_model=shape.d_model, n_layer=shape.layers, n_head=shape.heads, d_inner=shape.d_inner)


def _check_init_shape(cfg: TrainConfig, init_from: Path) -> None:
    """An --init folder of another shape than the flags give is an input error naming the flags to give (its
    weights would not load into the model the flags build)."""
    shape = init_shape(init_from)
    theirs = {k: getattr(shape, k) for k in ("n_layer", "d_model", "n_head", "d_inner")}
    ours = asdict(cfg.shape)
    differ = [f"{_FLAGS[k]} {v} (asked {ours[k]})" for k, v in theirs.items() if ours[k] != v]
    if differ:
        raise InputError(
            f"--init {init_from} has another shape: {', '.join(differ)}; leave out the shape flags to train its shape"
        )


@dataclass
class AsarmTask:
    """An AS-ARM run as the training loop (infill.training.loop) drives it."""

    cfg: TrainConfig
    model: TwoStreamXLNet
    optimizer: torch.optim.Optimizer
    state: TrainState
    batches: Batches
    parallel: Any  # infill.training.layouts.ParallelBatches with --data-workers, else None
    held: list[dict[str, torch.Tensor]]
    device: torch.device
    world: World
    log: Log
    ckpt_path: Path
    tokenizer_json: Path
    t0: float  # when the run started (time.time), for the wall clock in the log

    @classmethod
    def build(
        cls,
        corpus: Path,
        tokenizer_json: Path,
        tok: Any,
        run_dir: Path,
        cfg: TrainConfig,
        ckpt: dict[str, Any] | None,
        init_from: Path | None,
        world: World,
    ) -> AsarmTask:
        """The model, the token stream (rank 0 tokenizes and caches it first), the held-out batches (rank 0's),
        the optimizer and the random generators, resumed from `ckpt` when given."""
        import numpy as np
        import torch

        model = _model(cfg, ckpt, init_from)
        log = Log(cfg.steps or None, quiet=not world.main)
        t0 = time.time()
        # first: a corpus with no held-out text fails before the training stream is tokenized and cached
        held = heldout_batches(tok, corpus, cfg, cfg.eval_sequences) if cfg.eval_sequences > 0 and world.main else []
        if not world.main:
            world.barrier()  # rank 0 tokenizes and caches the stream first
        stream, files = cached_stream(tok, tokenizer_json, corpus, cfg.max_package_bytes, run_dir, write=world.main)
        if world.main:
            world.barrier()
        parallel = None
        if cfg.data_workers > 0:  # forked before this process touches the GPU
            from infill.training.layouts import ParallelBatches

            strings, breaks = token_strings(tok), line_break_ids(tok)
            parallel = ParallelBatches(stream, strings, breaks, cfg.seed, cfg.seq_len, cfg.batch_size, cfg.data_workers)
        device = torch.device(cfg.device)
        model.to(device)
        opt = adamw(model, cfg.lr, cfg.weight_decay, betas=(0.9, 0.98))
        rng = np.random.default_rng(cfg.seed)
        state, counter = TrainState(), 0
        if ckpt is not None:
            opt.load_state_dict(ckpt["optimizer"])  # moved to the parameters' device
            state = TrainState(**ckpt["state"])
            rng.bit_generator.state = ckpt["rng"]
            counter = int(ckpt["counter"])
            random.setstate(ckpt["python_rng"])
            torch.set_rng_state(ckpt["torch_rng"])
        log.line(
            f"stream: {files} files, {len(stream):,} tokens ({time.time() - t0:.0f}s); "
            f"model {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params; "
            f"{'resumed at step ' + str(state.step) if ckpt else f'from {init_from}' if init_from else 'fresh'}"
        )
        sampler = LayoutSampler(token_strings(tok), line_break_ids(tok), rng, counter)
        batches = Batches(stream, sampler, cfg.seq_len, cfg.batch_size)
        held = [{k: v.to(device) for k, v in b.items()} for b in held]
        return cls(
            cfg, model, opt, state, batches, parallel, held, device, world, log, run_dir / "last.pt", tokenizer_json, t0
        )

    def __post_init__(self) -> None:
        self.nll_sum = self.world.data_parallel(
            self.model, lambda batch: target_nll(self.model, batch, self.cfg.bf16).sum()
        )
        self.model.train()
        self.window = (0.0, 0, 0, time.time())  # loss, targets, positions since the last log line, and since when

    def seconds(self) -> float:
        return self.state.elapsed  # the training clock every process agreed on

    def lr(self, step: int) -> float:
        return lr_at(self.cfg, step - 1, self.state.elapsed)

    def step(self, step: int) -> None:
        cfg, world, state = self.cfg, self.world, self.state
        t_step = time.time()
        batch, count, my_count = self._batch()
        positions = cfg.batch_size * cfg.seq_len
        mean = self.nll_sum(batch) / max(my_count, 1)
        world.step(self.optimizer, self.model, (mean, my_count, count), cfg.grad_clip)  # Eq. 7 over the global batch
        state.step += 1
        state.tokens_seen += positions
        state.targets_seen += count
        state.elapsed += world.max(time.time() - t_step)[0]
        loss, n, tokens, since = self.window
        self.window = (loss + float(mean.detach()) * my_count, n + count, tokens + positions, since)

    def _batch(self) -> tuple[dict[str, torch.Tensor], int, int]:
        """This process's part of the global batch, and the targets in all of it and in its part."""
        cfg, world, device = self.cfg, self.world, self.device
        if self.parallel is not None:  # the global batch, drawn by the workers; this process trains on its part
            full = self.parallel.get(self.state.step)
            part = world.part(cfg.batch_size)
            batch = {k: v[part].to(device, non_blocking=True) for k, v in full.items()}
            return batch, int((full["labels"] >= 0).sum()), int((full["labels"][part] >= 0).sum())
        examples = self.batches.examples()  # the global batch; this process trains on its part
        mine = examples[world.part(len(examples))]
        batch = {k: v.to(device, non_blocking=True) for k, v in collate(mine, cfg.seq_len).items()}
        return batch, target_count(examples), target_count(mine)

    def log_step(self, step: int, lr: float) -> None:
        state = self.state
        loss, n, tokens, since = self.window
        dt = time.time() - since
        loss = self.world.sum(loss)[0]
        self.log.step(
            state.step,
            f"step {state.step} loss {loss / max(n, 1):.3f} "
            f"lr {lr:.2e} tok/s {tokens / dt:.0f} tokens {state.tokens_seen:,} "
            f"elapsed {state.elapsed / 60:.1f}m (wall {(time.time() - self.t0) / 60:.1f}m)",
        )
        self.window = (0.0, 0, 0, time.time())

    def evaluate(self, step: int, final: bool) -> None:
        """Nothing between checkpoints: each checkpoint measures the held-out NLL (`save`)."""

    def save(self, step: int, final: bool) -> None:
        """Measure the held-out NLL, add it to the history, write the checkpoint."""
        state, model = self.state, self.model
        if self.held:
            from infill.training.measure import evaluate

            model.eval()
            state.last_eval = evaluate(model, self.held, self.cfg.bf16)
            model.train()
        nll = state.last_eval if state.last_eval is not None else float("nan")
        state.history.append(
            {"step": state.step, "tokens": state.tokens_seen, "elapsed": state.elapsed, "heldout_nll": nll}
        )
        save_checkpoint(self.ckpt_path, model, self.optimizer, state, self.cfg, self.batches)
        self.log.line(f"checkpoint step {state.step} tokens {state.tokens_seen:,} heldout_nll {state.last_eval}")

    def export(self, folder: Path, corpus: Path) -> None:
        export_model(
            self.model, self.tokenizer_json, folder, self.cfg.seq_len, provenance(self.cfg, self.state, corpus)
        )
        self.log.line(f"exported to {folder}")
