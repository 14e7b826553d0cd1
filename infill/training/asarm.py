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
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    import numpy as np
    import torch

    from infill.training.distributed import World
    from infill.training.tokenizer import load_tokenizer

    world = world or World()
    world.check_batch(cfg.batch_size)
    torch.set_num_threads(cfg.threads)
    ckpt_path = run_dir / "last.pt"
    tok = load_tokenizer(tokenizer_json)
    if tok.get_vocab_size() != cfg.shape.vocab_size:
        cfg = TrainConfig(
            **{
                **asdict(cfg),
                "shape": ModelShape(**{**asdict(cfg.shape), "vocab_size": tok.get_vocab_size()}),
            }
        )
    ckpt: dict[str, Any] | None = None
    if resume and ckpt_path.exists():
        ckpt = read_checkpoint(ckpt_path)
        old = config_from_json(ckpt["config"])
        cfg = TrainConfig(**{**asdict(cfg), "shape": old.shape, "seed": old.seed, "seq_len": old.seq_len})
    world.same(int(ckpt["state"]["step"]) if ckpt is not None else -1, "the step of the checkpoint resumed from")
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(cfg.shape, cfg.seq_len)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
    elif init_from is not None:
        from infill.models.weight_files import read_weights

        try:  # model.safetensors or the bf16 shards a GPU run exports
            model.load_file_state(read_weights(init_from))
        except ValueError as exc:
            raise InputError(f"{init_from}: {exc}") from exc
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

        parallel = ParallelBatches(
            stream, token_strings(tok), line_break_ids(tok), cfg.seed, cfg.seq_len, cfg.batch_size, cfg.data_workers
        )
    device = torch.device(cfg.device)
    model.to(device)
    opt = adamw(model, cfg.lr, cfg.weight_decay, betas=(0.9, 0.98))
    rng = np.random.default_rng(cfg.seed)
    state = TrainState()
    counter = 0
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
        f"{'resumed at step ' + str(state.step) if ckpt else 'fresh'}"
    )
    batches = Batches(
        stream,
        LayoutSampler(token_strings(tok), line_break_ids(tok), rng, counter),
        cfg.seq_len,
        cfg.batch_size,
    )
    held = [{k: v.to(device) for k, v in b.items()} for b in held]

    nll_sum = world.data_parallel(model, lambda batch: target_nll(model, batch, cfg.bf16).sum())

    def checkpoint() -> None:
        if not world.main:
            return
        if held:
            model.eval()
            from infill.training.measure import evaluate

            state.last_eval = evaluate(model, held, cfg.bf16)
            model.train()
        state.history.append(
            {
                "step": state.step,
                "tokens": state.tokens_seen,
                "elapsed": state.elapsed,
                "heldout_nll": state.last_eval if state.last_eval is not None else float("nan"),
            }
        )
        save_checkpoint(ckpt_path, model, opt, state, cfg, batches)
        log.line(f"checkpoint step {state.step} tokens {state.tokens_seen:,} heldout_nll {state.last_eval}")

    model.train()
    last_ckpt = time.time()
    window_loss, window_n, window_tok, window_t = 0.0, 0, 0, time.time()
    stop: list[int] = []  # a signal asked to stop: checkpoint after the current step and return

    def request_stop(signum: int, frame: Any) -> None:
        stop.append(signum)

    import signal

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    signalled = 0.0
    try:
        while True:  # every process takes the same decisions: the clock and the stop requests are agreed on
            if cfg.steps and state.step >= cfg.steps:
                break
            if cfg.minutes and state.elapsed >= cfg.minutes * 60:
                break
            signalled, late = world.max(float(bool(stop)), float(bool(cfg.until) and time.time() >= cfg.until))
            if signalled or late:
                break
            t_step = time.time()
            if parallel is not None:  # the global batch, drawn by the workers; this process trains on its part
                full = parallel.get(state.step)
                part = world.part(cfg.batch_size)
                batch = {k: v[part].to(device, non_blocking=True) for k, v in full.items()}
                count, my_count = int((full["labels"] >= 0).sum()), int((full["labels"][part] >= 0).sum())
            else:
                examples = batches.examples()  # the global batch; this process trains on its part
                mine = examples[world.part(len(examples))]
                batch = {k: v.to(device, non_blocking=True) for k, v in collate(mine, cfg.seq_len).items()}
                count, my_count = target_count(examples), target_count(mine)
            positions = cfg.batch_size * cfg.seq_len
            lr = lr_at(cfg, state.step, state.elapsed)
            for g in opt.param_groups:
                g["lr"] = lr
            mean = nll_sum(batch) / max(my_count, 1)
            world.step(opt, model, (mean, my_count, count), cfg.grad_clip)  # Eq. 7 over the global batch
            state.step += 1
            state.tokens_seen += positions
            state.targets_seen += count
            state.elapsed += world.max(time.time() - t_step)[0]
            window_loss += float(mean.detach()) * my_count
            window_n += count
            window_tok += positions
            if state.step % cfg.log_every == 0:
                dt = time.time() - window_t
                window_loss = world.sum(window_loss)[0]
                log.step(
                    state.step,
                    f"step {state.step} loss {window_loss / max(window_n, 1):.3f} "
                    f"lr {lr:.2e} tok/s {window_tok / dt:.0f} tokens {state.tokens_seen:,} "
                    f"elapsed {state.elapsed / 60:.1f}m (wall {(time.time() - t0) / 60:.1f}m)",
                )
                window_loss, window_n, window_tok, window_t = 0.0, 0, 0, time.time()
            if time.time() - last_ckpt >= cfg.checkpoint_minutes * 60:
                checkpoint()
                last_ckpt = time.time()
    finally:
        log.close()
        if parallel is not None:
            parallel.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    checkpoint()
    if signalled:
        by = f"signal {stop[0]}" if stop else "a signal to another process"
        log.line(f"stopped by {by} at step {state.step}; resume with the same command")
    elif export_to is not None and world.main:
        export_model(model, tokenizer_json, export_to, cfg.seq_len, provenance(cfg, state, corpus))
        log.line(f"exported to {export_to}")
    world.barrier()  # every process returns once rank 0's files are written
    return state
