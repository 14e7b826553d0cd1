"""Training block-diffusion models for `infill`: the block-diffusion objective with fill-in-the-middle formatting,
on a Qwen3-architecture model saved in the SDAR folder layout (infill.models.blockdiff_folder).

Training objective (BD3-LM / SDAR): the sequence is cut into blocks of B tokens. Each block gets its own mask
rate t ~ U(eps, 1]; its masked positions are predicted from the CLEAN previous blocks and the NOISY current
block. One forward handles all blocks with the 2N layout [x_t ; x_0]: noisy block b sees noisy block b
(bidirectional) and clean blocks < b; clean block b sees clean blocks <= b. Loss: cross-entropy on the
masked positions, weighted by 1/t.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.models.blockdiff_folder import (
    END,
    FIM_MIDDLE,
    FIM_PREFIX,
    FIM_SUFFIX,
    MASK,
    SPECIALS,
    ModelShape,
    build_model,
    build_tokenizer,
    save_folder,
)
from infill.training.optimizer import adamw
from infill.training.tokenizer import encode_documents

if TYPE_CHECKING:
    import torch

    from infill.training.distributed import World

# ---- training ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    batch_size: int = 16
    seq_len: int = 256  # tokens per example, FIM specials and end padding included
    block_sizes: tuple[int, ...] = (1, 4, 8, 16)  # one drawn per step; 1 keeps the AR (verifier) mode trained
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


@dataclass
class Specials:
    end: int
    mask: int
    fim_prefix: int
    fim_suffix: int
    fim_middle: int


def specials_of(tok: Any) -> Specials:
    ids = [tok.token_to_id(t) for t in (END, MASK, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)]
    if any(i is None for i in ids):
        raise ValueError("tokenizer lacks the block-diffusion special tokens")
    return Specials(*ids)


def with_specials(tok: Any) -> Any:
    """Add SPECIALS a tokenizer lacks (e.g. the AS-ARM's byte-level BPE); existing ids are unchanged."""
    from tokenizers import AddedToken

    missing = [t for t in SPECIALS if tok.token_to_id(t) is None]
    if missing:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
    return tok


def load_texts(paths: Sequence[str | Path], glob: str = "*.py", max_package_bytes: int = 6_000_000) -> list[str]:
    """Texts from files, from directories (files matching `glob`, recursively, sorted), and from corpus
    directories holding a train.jsonl (the AS-ARM corpus layout: only its TRAIN split is read, at most
    `max_package_bytes` per package, as the AS-ARM's training reads it)."""
    from infill.training.corpus import balanced_records

    texts: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir() and (path / "train.jsonl").exists():
            texts.extend(r["text"] for r in balanced_records(path, "train", max_package_bytes))
        elif path.is_dir():
            for file in sorted(path.rglob(glob)):
                if file.is_file():
                    texts.append(file.read_text(encoding="utf-8", errors="replace"))
        elif path.is_file():
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return [t for t in texts if t.strip()]


def pack_documents(pack: Path, tok: Any) -> list[array[int]]:
    """The training documents of a pack written by `infill train pack` (its train stream cut at the <bos> that
    precedes each file), after checking that `tok` extends the tokenizer the pack was written with (its first
    ids spell the same tokens, as the block-diffusion tokenizer extends the AS-ARM's with its specials)."""
    import numpy as np

    from infill.errors import InputError
    from infill.training.streams import vocab_digest
    from infill.training.tokenizer import BOS_ID

    try:
        with np.load(pack) as data:
            meta = json.loads(str(data["meta"]))
            stream = data["train"]
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"{pack}: not a pack written by `infill train pack` ({exc})") from exc
    size = meta.get("vocab_size")
    if size is None:
        raise InputError(f"{pack}: written before packs recorded their vocabulary; pack the corpus again")
    if tok.get_vocab_size() < size or vocab_digest(tok, size) != meta.get("vocab_sha256"):
        raise InputError(f"{pack}: packed with another tokenizer than this model's; pack it with the model's")
    starts = [int(i) for i in np.flatnonzero(stream == BOS_ID)] + [len(stream)]
    return [array("i", stream[a + 1 : b].tolist()) for a, b in zip(starts, starts[1:], strict=False) if b - a > 2]


def fim_example(
    doc: Sequence[int],
    sp: Specials,
    seq_len: int,
    rng: random.Random,
    fim_rate: float,
    max_middle: int,
    *,
    loss_on: str = "middle",
    line_rate: float = 0.0,
    newlines: frozenset[int] = frozenset(),
) -> tuple[list[int], int]:
    """One training sequence of exactly `seq_len` tokens and the index where its response starts.

    FIM (PSM order, as at inference): <fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle <end>
    then <end> padding; the response (middle, end, padding) is what gets noised, or, with loss_on="all",
    every token after <fim_prefix> (prefix and suffix are then learned left to right too, as FIM-trained code
    models are). With probability `line_rate` the middle is 1-3 whole lines without the last line break (the
    text `--span N:M` replaces); `newlines` are the ids of line-break tokens. Plain: a window of the document,
    then <end> padding; everything after the first token is response."""
    body = seq_len - 4
    start = rng.randrange(max(1, len(doc) - body + 1))
    window = list(doc[start : start + body])
    if rng.random() < fim_rate and len(window) >= 3:
        cut = line_middle(window, rng, max_middle, newlines) if rng.random() < line_rate else None
        if cut is None:
            mid_len = rng.randint(1, max(1, min(max_middle, len(window) - 2)))
            mid_start = rng.randint(0, len(window) - mid_len)
            cut = (mid_start, mid_start + mid_len)
        pre, mid, suf = window[: cut[0]], window[cut[0] : cut[1]], window[cut[1] :]
        prompt = [sp.fim_prefix, *pre, sp.fim_suffix, *suf, sp.fim_middle]
        seq = prompt + mid + [sp.end]
        resp = len(prompt) if loss_on == "middle" else 1
    else:
        seq = window[: seq_len - 1] + [sp.end]
        resp = 1
    return seq + [sp.end] * (seq_len - len(seq)), resp


def line_middle(
    window: Sequence[int], rng: random.Random, max_middle: int, newlines: frozenset[int]
) -> tuple[int, int] | None:
    """(start, end) token offsets of 1-3 whole lines of `window` (from just after a line break up to the line
    break that ends the last of them, which stays in the suffix), at most `max_middle` tokens and not empty;
    None when the window has no such lines."""
    breaks = [i for i, t in enumerate(window) if t in newlines]
    if len(breaks) < 2:
        return None
    first = rng.randrange(len(breaks) - 1)
    lines = rng.randint(1, min(3, len(breaks) - 1 - first))
    start, end = breaks[first] + 1, breaks[first + lines]
    if end <= start or end - start > max_middle:
        return None
    return start, end


def two_stream_mask(length: int, block: int) -> torch.Tensor:
    """(2L, 2L) bool, True = may attend, for the input [x_t ; x_0] (both at positions 0..L-1):
    noisy row i sees noisy positions of its own block and clean positions of earlier blocks; clean row i sees
    clean positions of blocks <= its own (block-causal). Clean rows never see noisy tokens."""
    import torch

    b = torch.arange(length) // block  # (L,) block index of each position
    same = b[:, None] == b[None, :]  # (L, L)
    earlier = b[None, :] < b[:, None]
    upto = b[None, :] <= b[:, None]
    top = torch.cat([same, earlier], dim=1)  # noisy rows: (L, 2L)
    bottom = torch.cat([torch.zeros_like(same), upto], dim=1)  # clean rows: (L, 2L)
    return torch.cat([top, bottom], dim=0)  # (2L, 2L)


def noise(
    x0: torch.Tensor, resp: torch.Tensor, block: int, mask_id: int, min_t: float, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """x0 (N, L), resp (N,) response starts -> (x_t (N, L), weight (N, L)): each block of each row draws
    t ~ U(min_t, 1]; response positions are masked with probability t; weight = 1/t at masked positions."""
    import torch

    n, length = x0.shape
    n_blocks = -(-length // block)
    t = min_t + (1 - min_t) * torch.rand(n, n_blocks, generator=gen)  # (N, nb)
    t_pos = t.repeat_interleave(block, dim=1)[:, :length]  # (N, L)
    in_resp = torch.arange(length)[None, :] >= resp[:, None]  # (N, L)
    masked = in_resp & (torch.rand(n, length, generator=gen) < t_pos)
    xt = torch.where(masked, torch.full_like(x0, mask_id), x0)
    return xt, masked.float() / t_pos


def block_diffusion_loss(
    model: Any, x0: torch.Tensor, xt: torch.Tensor, weight: torch.Tensor, block: int, n_resp: int
) -> torch.Tensor:
    """Weighted cross-entropy of the noisy stream's predictions at masked positions, per response token."""
    import torch
    import torch.nn.functional as F

    n, length = x0.shape
    ids = torch.cat([xt, x0], dim=1)  # (N, 2L)
    positions = torch.arange(length, device=x0.device).repeat(2)[None].expand(n, -1)  # (N, 2L)
    mask = two_stream_mask(length, block).to(x0.device)[None, None]  # (1, 1, 2L, 2L)
    hidden = model.model(input_ids=ids, position_ids=positions, attention_mask=mask).last_hidden_state
    sel = weight > 0  # (N, L)
    logits = model.lm_head(hidden[:, :length][sel])  # (m, V)
    ce = F.cross_entropy(logits.float(), x0[sel], reduction="none")  # (m,)
    return (ce * weight[sel]).sum() / max(n_resp, 1)


def newline_ids(tok: Any) -> frozenset[int]:
    """Ids of the tokens that are exactly a line break (the project's BPE isolates every line break)."""
    return frozenset(i for text in ("\n", "\r\n", "\r") if (i := tok.token_to_id(_byte_level(text))) is not None)


def _byte_level(text: str) -> str:
    """`text` as a byte-level BPE spells it in its vocabulary (GPT-2 byte-to-unicode: newline is "Ċ")."""
    from tokenizers.pre_tokenizers import ByteLevel

    return "".join(piece for piece, _ in ByteLevel(add_prefix_space=False).pre_tokenize_str(text))


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
    import torch
    from tokenizers import Tokenizer

    from infill.training.checkpoints import read_checkpoint, write_checkpoint
    from infill.training.distributed import World

    if not texts and pack is None:
        raise ValueError("no training text")
    if pack is not None and init is None and tokenizer_path is None:
        raise ValueError("training from a pack needs the tokenizer it was packed with (init or tokenizer_path)")
    world = world or World()
    world.check_batch(cfg.batch_size)
    log = world.logger(log)
    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    before: dict[str, Any] = {}
    if init is not None:
        model, tok, shape, before = load_init(Path(init))
    else:
        tok = Tokenizer.from_file(str(tokenizer_path)) if tokenizer_path else build_tokenizer(texts, vocab_size)
        model = None
    tok = with_specials(tok)
    sp = specials_of(tok)
    newlines = newline_ids(tok)
    docs = pack_documents(pack, tok) if pack is not None else encode_documents(tok, texts, min_tokens=2)
    weights = [len(d) for d in docs]  # sample documents by length
    cum_weights = list(itertools.accumulate(weights))  # what rng.choices(docs, weights) sums on every call
    if model is None:
        model = build_model(tok.get_vocab_size(), replace(shape, max_length=max(shape.max_length, cfg.seq_len)))
    elif model.config.vocab_size != tok.get_vocab_size():
        raise ValueError(f"{init}: model has {model.config.vocab_size} tokens, tokenizer {tok.get_vocab_size()}")
    device = torch.device(cfg.device)
    model.to(device)  # before the optimizer, so that a resumed optimizer's state lands on the same device
    model.train()
    opt = adamw(model, cfg.lr, cfg.weight_decay, betas=(0.9, 0.95))
    ckpt_path = Path(run_dir) / "last.pt" if run_dir is not None else None
    losses: list[float] = []
    step, elapsed_before = 0, 0.0
    if ckpt_path is not None and ckpt_path.exists():
        ck = read_checkpoint(ckpt_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        step, elapsed_before, losses = int(ck["step"]), float(ck["seconds"]), list(ck["losses"])
        before = dict(ck["before"])
        rng.setstate(ck["rng"])
        gen.set_state(ck["gen"])
        log(f"resumed {ckpt_path} at step {step} ({elapsed_before:.0f}s trained)")
    world.same(step if ckpt_path is not None and ckpt_path.exists() else -1, "the step of the checkpoint resumed from")
    t_run = time.perf_counter()
    last_save = t_run
    last_log = (step, t_run)  # (step, clock) of the last log line, for the rate since then

    def seconds() -> float:
        return elapsed_before + time.perf_counter() - t_run

    def summary_now() -> dict[str, Any]:
        prior_steps = int(before.get("steps", 0)) + int(before.get("prior_steps", 0))
        prior_tokens = int(before.get("tokens_seen", 0)) + int(before.get("prior_tokens_seen", 0))
        return {
            "objective": "block diffusion (BD3-LM / SDAR 2N layout), FIM formatting",
            "steps": step,
            "tokens_seen": step * cfg.batch_size * cfg.seq_len,
            "prior_steps": prior_steps,  # steps of the runs `init` came from
            "prior_tokens_seen": prior_tokens,
            "init": str(init) if init is not None else None,
            "final_loss": sum(losses[-50:]) / max(len(losses[-50:]), 1),
            "documents": len(docs),
            "corpus_tokens": sum(weights),
            "parameters": sum(p.numel() for p in model.parameters()),
            "seconds": round(seconds(), 1),
            "config": {k: v for k, v in asdict(cfg).items()},
            "shape": asdict(shape),
            "tokenizer": str(tokenizer_path or init or f"byte-level BPE, {tok.get_vocab_size()} tokens"),
            "pack": str(pack) if pack is not None else None,
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
        }

    def save() -> None:
        if not world.main:
            return
        model.eval()
        save_folder(
            out,
            model,
            tok,
            block_size=4,
            provenance=summary_now(),
            dtype=getattr(torch, cfg.save_dtype),
            shard_mb=cfg.shard_mb or None,
        )
        model.train()
        if ckpt_path is not None:
            write_checkpoint(
                ckpt_path,
                {
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "step": step,
                    "seconds": seconds(),
                    "losses": losses[-1000:],
                    "before": before,
                    "rng": rng.getstate(),
                    "gen": gen.get_state(),
                },
            )

    loss_of = world.data_parallel(
        model, lambda x0, xt, weight, block, n_resp: block_diffusion_loss(model, x0, xt, weight, block, n_resp)
    )
    while step < cfg.steps:
        step += 1
        progress = step / cfg.steps
        if cfg.time_limit:  # the slowest process's clock, so that every process takes the same learning rate
            progress = max(progress, world.max(seconds())[0] / cfg.time_limit)
        lr = cfg.lr * min(1.0, step / max(cfg.warmup, 1))
        lr *= 0.5 * (1 + math.cos(math.pi * min(1.0, progress))) * 0.9 + 0.1
        for group in opt.param_groups:
            group["lr"] = lr
        batch = [
            fim_example(
                rng.choices(docs, cum_weights=cum_weights)[0],
                sp,
                cfg.seq_len,
                rng,
                cfg.fim_rate,
                cfg.max_middle,
                loss_on=cfg.loss_on,
                line_rate=cfg.line_rate,
                newlines=newlines,
            )
            for _ in range(cfg.batch_size)
        ]
        x0 = torch.tensor([b[0] for b in batch])  # (N, L)
        resp = torch.tensor([b[1] for b in batch])  # (N,)
        block = rng.choice(cfg.block_sizes)
        xt, weight = noise(x0, resp, block, sp.mask, cfg.min_t, gen)
        x0, xt, weight = (t.to(device, non_blocking=True) for t in (x0, xt, weight))
        in_resp = torch.arange(cfg.seq_len)[None, :] >= resp[:, None]  # the global batch: this process takes its part
        part = world.part(cfg.batch_size)
        n_resp, my_resp = int(in_resp.sum()), int(in_resp[part].sum())
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            mean = loss_of(x0[part], xt[part], weight[part], block, my_resp)
        world.step(opt, model, (mean, my_resp, n_resp))
        losses.append(world.average(my_resp, float(mean.detach()))[1][0])
        if step % cfg.log_every == 0 or step == cfg.steps:
            recent = losses[-cfg.log_every :]
            now = time.perf_counter()
            rate = (step - last_log[0]) * cfg.batch_size * cfg.seq_len / max(now - last_log[1], 1e-9)
            last_log = (step, now)
            log(
                f"step {step}/{cfg.steps}  loss {sum(recent) / len(recent):.3f}  lr {lr:.2e}  "
                f"{seconds():.0f}s  {rate:.0f} positions/s"
            )
        if cfg.save_minutes and time.perf_counter() - last_save > cfg.save_minutes * 60:
            save()
            last_save = time.perf_counter()
            log(f"saved {out} at step {step}")
        if cfg.time_limit and world.max(seconds())[0] > cfg.time_limit:
            log(f"time limit reached after {step} steps")
            break
        if cfg.until and world.max(time.time())[0] >= cfg.until:
            log(f"--until reached after {step} steps")
            break
    save()
    world.barrier()  # every process returns once rank 0's files are written
    return summary_now()
