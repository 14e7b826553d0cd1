"""Training block-diffusion models for `infill`: the block-diffusion objective with fill-in-the-middle formatting
(infill.training.blockdiff_data, which says how it works), on a Qwen3-architecture model saved in the SDAR folder
layout (infill.models.blockdiff_folder), run by the one training loop (infill.training.loop).
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.models.blockdiff_folder import (
    ModelShape,
    build_model,
    build_tokenizer,
    save_folder,
)
from infill.training.blockdiff_data import (  # noqa: F401 - the objective and its data, re-exported for callers
    Specials,
    block_diffusion_loss,
    fim_example,
    line_middle,
    newline_ids,
    noise,
    pack_documents,
    specials_of,
    two_stream_mask,
    with_specials,
)
from infill.training.loop import Schedule, cosine_lr, finish, progress_of, restore, train_loop
from infill.training.optimizer import adamw
from infill.training.tokenizer import encode_documents, read_tokenizer

if TYPE_CHECKING:
    import torch

    from infill.training.distributed import World

# ---- training ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    batch_size: int = 16
    seq_len: int = 256  # tokens per example, FIM specials and end padding included
    block_sizes: tuple[int, ...] = (
        1,
        4,
        8,
        16,
    )  # one drawn per step; 1 keeps the AR (verifier) mode trained
    lr: float = 1e-3
    warmup: int = 100
    weight_decay: float = 0.01
    fim_rate: float = 0.9  # the rest are plain left-to-right examples
    max_middle: int = 64  # longest middle, in tokens
    min_t: float = 0.1  # per-block mask rate t ~ U(min_t, 1]; the loss weight 1/t stays <= 1/min_t
    seed: int = 0
    bf16: bool = False  # bf16 autocast (fast only on CPUs with AMX / avx512_bf16, or CUDA)
    time_limit: float = 0.0  # seconds; 0 = no limit; with a limit the cosine schedule follows the clock
    until: float = 0.0  # unix time at which to stop (and save); 0 = none
    log_every: int = 50
    save_minutes: float = 0.0  # also save the folder every this many minutes (0 = only at the end)
    loss_on: str = "middle"  # "middle": only a FIM example's middle is noised; "all": every token after the first
    line_rate: float = 0.0  # share of FIM middles cut at line boundaries (1-3 whole lines), as a user's span is
    device: str = "cpu"  # "cuda": the model and each batch on the GPU (one per process under torchrun)
    save_dtype: str = "float32"  # the saved weights' dtype: "float32" or "bfloat16" (half the size)
    shard_mb: float = 0.0  # > 0: save the weights as HF-style shards of at most this many MB


def load_texts(paths: Sequence[str | Path], glob: str = "*.py", max_package_bytes: int = 6_000_000) -> list[str]:
    """Texts from files, from directories (files matching `glob`, recursively, sorted), and from corpus
    directories holding a train.jsonl (the AS-ARM corpus layout: only its TRAIN split is read, at most
    `max_package_bytes` per package, as the AS-ARM's training reads it). Files that are not UTF-8 text are skipped,
    as `infill train corpus` skips them; InputError when they were all there was."""
    from infill.errors import InputError
    from infill.training.corpus import balanced_records

    texts: list[str] = []
    skipped: list[Path] = []

    def read(file: Path) -> None:
        try:
            texts.append(file.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError):  # a binary or Latin-1 file: training on U+FFFD teaches nothing
            skipped.append(file)

    for raw in paths:
        path = Path(raw)
        if path.is_dir() and (path / "train.jsonl").exists():
            texts.extend(r["text"] for r in balanced_records(path, "train", max_package_bytes))
        elif path.is_dir():
            for file in sorted(path.rglob(glob)):
                if file.is_file():
                    read(file)
        elif path.is_file():
            read(path)
    usable = [t for t in texts if t.strip()]
    if skipped and not usable:
        raise InputError(
            f"no training text in {', '.join(str(p) for p in paths)}: {len(skipped)} file(s) skipped, not UTF-8 "
            f"text (the first: {skipped[0]})"
        )
    return usable


def load_init(folder: Path) -> tuple[Any, Any, ModelShape, dict[str, Any]]:
    """(model, tokenizer, shape, provenance) of a block-diffusion folder this trainer wrote (e.g. the shipped
    `blockdiff`), to continue training from its weights."""
    import torch
    from tokenizers import Tokenizer

    from infill.errors import InputError
    from infill.models.weight_files import read_weights

    try:
        raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        state = read_weights(folder)
    except Exception as exc:  # a missing or corrupt file of any kind (json, tokenizers, safetensors errors)
        raise InputError(f"{folder}: not a block-diffusion model folder ({exc})") from exc
    shape = ModelShape(
        hidden=raw["hidden_size"],
        layers=raw["num_hidden_layers"],
        heads=raw["num_attention_heads"],
        kv_heads=raw["num_key_value_heads"],
        head_dim=raw["head_dim"],
        intermediate=raw["intermediate_size"],
        max_length=raw["max_position_embeddings"],
    )
    model = build_model(raw["vocab_size"], shape)
    missing, unexpected = model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()}, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise InputError(
            f"{folder}: weights do not match its config ({len(missing)} missing, {len(unexpected)} unknown)"
        )
    model.tie_weights()
    prov = raw.get("infill", {}).get("provenance") or {}
    return model, tok, shape, prov


def train(
    texts: Sequence[str],
    out: str | Path,
    cfg: TrainConfig,
    *,
    pack: Path | None = None,
    shape: ModelShape = ModelShape(),  # noqa: B008 (frozen, so a shared default is safe)
    tokenizer_path: str | Path | None = None,
    vocab_size: int = 8192,
    init: str | Path | None = None,
    run_dir: str | Path | None = None,
    log: Callable[[str], None] = print,
    world: World | None = None,
) -> dict[str, Any]:
    """Train a Qwen3-architecture block-diffusion model on `texts` (or, with `pack`, on the documents of a pack
    from `infill train pack`, which needs the tokenizer from `init` or `tokenizer_path`) and save it in the SDAR
    layout at `out`.

    The tokenizer is `tokenizer_path` (e.g. the AS-ARM's tokenizer.json) plus SPECIALS, or a new byte-level
    BPE trained on `texts`. With `init` (a folder this trainer wrote), training continues from that folder's
    weights, shape and tokenizer. With `run_dir`, `run_dir/last.pt` (model, optimizer, step, training time and
    random generators) is written at every save and at the end, and a later call with the same `run_dir`
    resumes from it; `cfg.time_limit` is then the training time across all resumes, and the cosine schedule
    follows it. `world`: this process's part in a distributed run (infill.training.distributed); `cfg.batch_size`
    is the global batch, and only rank 0 logs and writes. Returns a summary (also stored as the folder's
    provenance)."""
    from infill.training.distributed import World

    if not texts and pack is None:
        raise ValueError("no training text")
    if pack is not None and init is None and tokenizer_path is None:
        raise ValueError("training from a pack needs the tokenizer it was packed with (init or tokenizer_path)")
    world = world or World()
    world.check_batch(cfg.batch_size)
    log = world.logger(log)
    task = BlockDiffTask.build(texts, Path(out), cfg, pack, shape, tokenizer_path, vocab_size, init, world, log)
    task.resume(Path(run_dir) / "last.pt" if run_dir is not None else None)
    schedule = Schedule(
        cfg.steps,
        cfg.log_every,
        save_minutes=cfg.save_minutes,
        time_limit=cfg.time_limit,
        until=cfg.until,
        signals=True,  # Ctrl-C, SIGTERM, SIGUSR1: save the folder and the checkpoint, as at the end
    )
    train_loop(task, replace(schedule, log_last=True), world, log, task.done)
    finish(world)
    return task.summary()


@dataclass
class BlockDiffTask:
    """A block-diffusion run as the training loop (infill.training.loop) drives it."""

    cfg: TrainConfig
    model: Any
    tok: Any
    optimizer: torch.optim.Optimizer
    docs: list[Any]
    world: World
    log: Callable[[str], None]
    out: Path
    shape: ModelShape
    sources: dict[str, Any]  # init, tokenizer_path, pack: what the summary names
    before: dict[str, Any]  # the provenance of the folder `init` came from
    rng: random.Random
    gen: torch.Generator
    ckpt_path: Path | None = None
    done: int = 0  # steps taken, across resumes
    elapsed_before: float = 0.0  # training seconds of earlier sessions
    losses: list[float] = field(default_factory=list)
    t_run: float = 0.0  # when this session's training started (perf_counter)
    last_log: tuple[int, float] = (
        0,
        0.0,
    )  # (step, clock) of the last log line, for the rate since then
    sp: Specials = field(init=False)
    newlines: frozenset[int] = field(init=False)
    weights: list[int] = field(init=False)
    cum_weights: list[int] = field(init=False)
    device: torch.device = field(init=False)
    loss_of: Callable[..., torch.Tensor] = field(init=False)

    @classmethod
    def build(
        cls,
        texts: Sequence[str],
        out: Path,
        cfg: TrainConfig,
        pack: Path | None,
        shape: ModelShape,
        tokenizer_path: str | Path | None,
        vocab_size: int,
        init: str | Path | None,
        world: World,
        log: Callable[[str], None],
    ) -> BlockDiffTask:
        """The tokenizer, the documents and the model (fresh, or `init`'s), on cfg.device with its optimizer."""
        import torch

        rng = random.Random(cfg.seed)
        gen = torch.Generator().manual_seed(cfg.seed)
        before: dict[str, Any] = {}
        if init is not None:
            model, tok, shape, before = load_init(Path(init))
        else:
            tok = read_tokenizer(Path(tokenizer_path)) if tokenizer_path else build_tokenizer(texts, vocab_size)
            model = None
        tok = with_specials(tok)
        docs = pack_documents(pack, tok) if pack is not None else encode_documents(tok, texts, min_tokens=2)
        if model is None:
            model = build_model(
                tok.get_vocab_size(),
                replace(shape, max_length=max(shape.max_length, cfg.seq_len)),
            )
        elif model.config.vocab_size != tok.get_vocab_size():
            raise ValueError(f"{init}: model has {model.config.vocab_size} tokens, tokenizer {tok.get_vocab_size()}")
        model.to(torch.device(cfg.device))  # before the optimizer: a resumed optimizer's state lands beside it
        model.train()
        opt = adamw(model, cfg.lr, cfg.weight_decay, betas=(0.9, 0.95))
        sources = {"init": init, "tokenizer_path": tokenizer_path, "pack": pack}
        return cls(
            cfg,
            model,
            tok,
            opt,
            docs,
            world,
            log,
            out,
            shape,
            sources,
            before,
            rng,
            gen,
        )

    def __post_init__(self) -> None:
        self.sp = specials_of(self.tok)
        self.newlines = newline_ids(self.tok)
        self.weights = [len(d) for d in self.docs]  # sample documents by length
        self.cum_weights = list(itertools.accumulate(self.weights))  # what rng.choices(docs, weights) sums
        import torch

        self.device = torch.device(self.cfg.device)

    def resume(self, ckpt_path: Path | None) -> None:
        """Continue from `ckpt_path` when it exists; it is written at every save from here on (None: no
        checkpoint). Starts this session's clock."""
        self.ckpt_path = ckpt_path
        resumed = ckpt_path is not None and ckpt_path.exists()
        if ckpt_path is not None and resumed:
            ck = restore(ckpt_path, {"model": self.model, "optimizer": self.optimizer}, self.rng, self.gen)
            self.done, self.elapsed_before, self.losses = int(ck["step"]), float(ck["seconds"]), list(ck["losses"])
            self.before = dict(ck["before"])
            self.log(f"resumed {ckpt_path} at step {self.done} ({self.elapsed_before:.0f}s trained)")
        self.world.same(self.done if resumed else -1, "the step of the checkpoint resumed from")
        self.t_run = time.perf_counter()
        self.last_log = (self.done, self.t_run)
        self.loss_of = self.world.data_parallel(
            self.model, lambda x0, xt, w, block, n_resp: block_diffusion_loss(self.model, x0, xt, w, block, n_resp)
        )

    def seconds(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.t_run

    def lr(self, step: int) -> float:
        # the slowest process's clock, so that every process takes the same learning rate
        seconds = self.world.max(self.seconds())[0] if self.cfg.time_limit else 0.0
        return cosine_lr(
            self.cfg.lr,
            self.cfg.warmup,
            step,
            progress_of(step, self.cfg.steps, seconds, self.cfg.time_limit),
        )

    def step(self, step: int) -> None:
        import torch

        cfg, rng = self.cfg, self.rng
        batch = [
            fim_example(
                rng.choices(self.docs, cum_weights=self.cum_weights)[0],
                self.sp,
                cfg.seq_len,
                rng,
                cfg.fim_rate,
                cfg.max_middle,
                loss_on=cfg.loss_on,
                line_rate=cfg.line_rate,
                newlines=self.newlines,
            )
            for _ in range(cfg.batch_size)
        ]
        x0 = torch.tensor([b[0] for b in batch])  # (N, L)
        resp = torch.tensor([b[1] for b in batch])  # (N,)
        block = rng.choice(cfg.block_sizes)
        xt, weight = noise(x0, resp, block, self.sp.mask, cfg.min_t, self.gen)
        x0, xt, weight = (t.to(self.device, non_blocking=True) for t in (x0, xt, weight))
        in_resp = torch.arange(cfg.seq_len)[None, :] >= resp[:, None]  # the global batch: this process takes its part
        part = self.world.part(cfg.batch_size)
        n_resp, my_resp = int(in_resp.sum()), int(in_resp[part].sum())
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            mean = self.loss_of(x0[part], xt[part], weight[part], block, my_resp)
        self.world.step(self.optimizer, self.model, (mean, my_resp, n_resp))
        self.losses.append(self.world.average(my_resp, float(mean.detach()))[1][0])
        self.done = step

    def log_step(self, step: int, lr: float) -> None:
        cfg = self.cfg
        recent = self.losses[-cfg.log_every :]
        now = time.perf_counter()
        rate = (step - self.last_log[0]) * cfg.batch_size * cfg.seq_len / max(now - self.last_log[1], 1e-9)
        self.last_log = (step, now)
        self.log(
            f"step {step}/{cfg.steps}  loss {sum(recent) / len(recent):.3f}  lr {lr:.2e}  "
            f"{self.seconds():.0f}s  {rate:.0f} positions/s"
        )

    def evaluate(self, step: int, final: bool) -> None:
        """No held-out measure during training: `benchmarks/blockdiff_nll.py` measures a saved folder."""

    def save(self, step: int, final: bool) -> None:
        """The model folder at `out` and, with a run directory, the checkpoint."""
        import torch

        from infill.training.checkpoints import write_checkpoint

        self.model.eval()
        dtype = getattr(torch, self.cfg.save_dtype)
        shard_mb = self.cfg.shard_mb or None
        save_folder(
            self.out,
            self.model,
            self.tok,
            block_size=4,
            provenance=self.summary(),
            dtype=dtype,
            shard_mb=shard_mb,
        )
        self.model.train()
        if self.ckpt_path is not None:
            payload = {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "step": self.done,
                "seconds": self.seconds(),
                "losses": self.losses[-1000:],
                "before": self.before,
                "rng": self.rng.getstate(),
                "gen": self.gen.get_state(),
            }
            write_checkpoint(self.ckpt_path, payload)
        if not final:
            self.log(f"saved {self.out} at step {step}")

    def summary(self) -> dict[str, Any]:
        """What the run did, stored as the saved folder's provenance."""
        cfg, before, src = self.cfg, self.before, self.sources
        prior_steps = int(before.get("steps", 0)) + int(before.get("prior_steps", 0))
        prior_tokens = int(before.get("tokens_seen", 0)) + int(before.get("prior_tokens_seen", 0))
        return {
            "objective": "block diffusion (BD3-LM / SDAR 2N layout), FIM formatting",
            "steps": self.done,
            "tokens_seen": self.done * cfg.batch_size * cfg.seq_len,
            "prior_steps": prior_steps,  # steps of the runs `init` came from
            "prior_tokens_seen": prior_tokens,
            "init": str(src["init"]) if src["init"] is not None else None,
            "final_loss": sum(self.losses[-50:]) / max(len(self.losses[-50:]), 1),
            "documents": len(self.docs),
            "corpus_tokens": sum(self.weights),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "seconds": round(self.seconds(), 1),
            "config": {k: v for k, v in asdict(cfg).items()},
            "shape": asdict(self.shape),
            "tokenizer": str(
                src["tokenizer_path"] or src["init"] or f"byte-level BPE, {self.tok.get_vocab_size()} tokens"
            ),
            "pack": str(src["pack"]) if src["pack"] is not None else None,
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
        }
