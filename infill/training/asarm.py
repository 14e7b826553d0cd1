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

import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch
    from tokenizers import Tokenizer as HFTokenizer

    from infill.models.twostream import TwoStreamXLNet

from infill.errors import InputError
from infill.training.tokenizer import BOS_ID, MASK_ID, PAD_ID

GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0  # 0.618..., the Kronecker sequence frac(n * GOLDEN) is low-discrepancy


@dataclass(frozen=True)
class ModelShape:
    vocab_size: int = 8192
    d_model: int = 256
    n_layer: int = 6
    n_head: int = 4
    d_inner: int = 1024


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
    shape: ModelShape = field(default_factory=ModelShape)


# ----------------------------------------------------------------------------------------------------
# Data: token stream and mask layouts


@dataclass
class Example:
    """One training sequence before batching: tokens (N,), masked (N,) bool, weight (N,) 0/1 loss weight,
    span (N,) index of the span a masked position belongs to (-1: unmasked, or the iid "subset" layout)."""

    tokens: list[int]
    masked: list[bool]
    weight: list[int]
    span: list[int]
    layout: str


def line_break_ids(tok: HFTokenizer) -> set[int]:
    """Ids of tokens made only of line-break characters (byte-level symbols 'Ċ' = \\n, 'č' = \\r)."""
    vocab = tok.get_vocab()
    return {i for s, i in vocab.items() if s and set(s) <= {"Ċ", "č"}}


def token_strings(tok: HFTokenizer) -> list[str]:
    """Decoded text of every id (specials empty), for cheap line / docstring analysis of a window."""
    size = tok.get_vocab_size()
    out = []
    for i in range(size):
        s = tok.id_to_token(i)
        out.append("" if s is None or i < 3 else tok.decode([i]))
    return out


def tokenize_stream(tok: HFTokenizer, texts: list[str]) -> np.ndarray:
    """All texts tokenized once and concatenated, each file preceded by <bos>: (total,) uint16/int32."""
    import numpy as np

    parts: list[np.ndarray] = []
    for start in range(0, len(texts), 256):
        for enc in tok.encode_batch(texts[start : start + 256], add_special_tokens=False):
            parts.append(np.array([BOS_ID], dtype=np.int32))
            parts.append(np.asarray(enc.ids, dtype=np.int32))
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return stream.astype(np.uint16) if tok.get_vocab_size() <= 65535 else stream


class LayoutSampler:
    """Masked spans that look like what users fill. All randomness comes from one numpy Generator."""

    LAYOUTS = ("line", "block", "body", "docstring", "spans", "subset")
    PROBS = (0.25, 0.2, 0.15, 0.1, 0.15, 0.15)

    def __init__(self, strings: list[str], breaks: set[int], rng: np.random.Generator, counter: int = 0) -> None:
        self.strings = strings
        self.breaks = breaks
        self.rng = rng
        self.counter = counter  # position in the golden-ratio sequence

    def rate(self, lo: float, hi: float) -> float:
        """Next mask rate from the golden-ratio sequence, in [lo, hi)."""
        self.counter += 1
        return lo + (hi - lo) * ((self.counter * GOLDEN) % 1.0)

    def lines(self, window: list[int]) -> list[tuple[int, int]]:
        """Token ranges [start, end) of lines; `end` includes the line break. Bos tokens end a line too."""
        out, start = [], 0
        for i, t in enumerate(window):
            if t in self.breaks or t == BOS_ID:
                if t == BOS_ID:
                    if i > start:
                        out.append((start, i))
                    start = i + 1
                else:
                    out.append((start, i + 1))
                    start = i + 1
        if start < len(window):
            out.append((start, len(window)))
        return out

    def _indent_end(self, window: list[int], a: int, b: int) -> int:
        """First token of the line [a, b) that is not pure whitespace."""
        i = a
        while i < b and window[i] not in self.breaks and not self.strings[window[i]].strip():
            i += 1
        return i

    def _line_span(self, window: list[int], a: int, b: int) -> tuple[int, int]:
        """A single-line span: the code without indentation, the whole line, or the line with its break."""
        body_end = b - 1 if b > a and window[b - 1] in self.breaks else b
        v = self.rng.random()
        if v < 0.45:
            return self._indent_end(window, a, body_end), body_end
        if v < 0.75:
            return a, body_end
        return a, b

    def spans(self, window: list[int]) -> tuple[str, list[tuple[int, int]], list[bool] | None]:
        """(layout, spans [a, b) of masked content (may be empty), iid subset mask or None)."""
        layout = self.LAYOUTS[int(self.rng.choice(len(self.LAYOUTS), p=self.PROBS))]
        spans, subset = self._spans(window, layout)
        return layout, spans, subset

    def _spans(self, window: list[int], layout: str) -> tuple[list[tuple[int, int]], list[bool] | None]:
        n = len(window)
        lines = [ln for ln in self.lines(window) if ln[1] > ln[0]]
        if layout == "subset":
            r = self.rate(0.05, 0.9)
            return [], [bool(x) for x in self.rng.random(n) < r]
        if layout == "spans" or not lines:
            r = self.rate(0.05, 0.6)
            k = int(self.rng.integers(1, 5))
            total = max(1, int(r * n))
            out = []
            for _ in range(k):
                length = max(1, total // k)
                a = int(self.rng.integers(0, max(1, n - length)))
                out.append((a, min(n, a + length)))
            return out, None
        if layout == "docstring":
            found = self._docstrings(window)
            if found:
                return [found[int(self.rng.integers(len(found)))]], None
            layout = "line"
        if layout == "body":
            found = self._bodies(window, lines)
            if found:
                return [found[int(self.rng.integers(len(found)))]], None
            layout = "block"
        if layout == "block":
            i = int(self.rng.integers(len(lines)))
            j = min(len(lines), i + int(self.rng.integers(2, 13)))
            a, b = lines[i][0], lines[j - 1][1]
            if self.rng.random() < 0.5 and window[b - 1] in self.breaks:
                b -= 1  # block without its last line break
            return [(a, b)], None
        # single lines: 1-3 of them, sometimes an empty span (insert nothing) at a line boundary
        count = int(self.rng.integers(1, 7))  # several lines per sequence: more loss signal per forward
        picks = sorted(set(int(x) for x in self.rng.integers(0, len(lines), size=count)))
        out = [self._line_span(window, *lines[p]) for p in picks]
        if self.rng.random() < 0.05:
            a = lines[int(self.rng.integers(len(lines)))][0]
            out.append((a, a))
        return out, None

    def _docstrings(self, window: list[int]) -> list[tuple[int, int]]:
        """Interiors of triple-quoted strings fully inside the window (between the quote tokens)."""
        quotes = [i for i, t in enumerate(window) if '"""' in self.strings[t] or "'''" in self.strings[t]]
        return [(quotes[i] + 1, quotes[i + 1]) for i in range(0, len(quotes) - 1, 2) if quotes[i + 1] > quotes[i] + 1]

    def _bodies(self, window: list[int], lines: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Bodies of `def` / `class` blocks: the following lines indented deeper than the header."""
        texts = ["".join(self.strings[t] for t in window[a:b]) for a, b in lines]
        out = []
        for i, text in enumerate(texts):
            stripped = text.lstrip()
            if not stripped.startswith(("def ", "async def ", "class ")) or not text.rstrip().endswith(":"):
                continue
            indent = len(text) - len(stripped)
            j, last = i + 1, -1
            while j < len(texts):
                t = texts[j]
                if t.strip():
                    if len(t) - len(t.lstrip()) <= indent:
                        break
                    last = j
                j += 1
            if last > i:
                a, b = lines[i + 1][0], lines[last][1]
                out.append((a, b - 1 if window[b - 1] in self.breaks else b))
        return out

    def extra_pads(self, content: int) -> int:
        """How many `<pad>` positions follow a span's `content` tokens, covering the budgets infill's length
        policy gives at inference (api.token_budget): the replaced text's length plus max(8, a quarter), or 32
        tokens for an insertion point; plus exact budgets (no pad) and small random slack."""
        if content == 0:
            return int(self.rng.integers(1, 33))  # an empty span: pads only
        r = self.rng.random()
        if r < 0.1:
            return 0
        if r < 0.55:
            return int(self.rng.integers(0, max(content // 2, 12) + 1))
        if content < 32 and r < 0.75:
            return 32 - content  # an insertion point with the default budget
        return int(self.rng.integers(0, max(8, content // 4) + 9))

    def example(self, window: list[int], seq_len: int) -> Example:
        """Mask `window`, insert end-of-fill pads after each span, re-cut to `seq_len` with <bos> first."""
        layout, spans, subset = self.spans(window)
        if subset is not None:
            toks = [BOS_ID] + window[: seq_len - 1]
            masked = [False] + [m and t != BOS_ID for m, t in zip(subset, window[: seq_len - 1], strict=True)]
            return Example(toks, masked, [int(m) for m in masked], [-1] * len(toks), layout)
        toks, masked, weight, span = [BOS_ID], [False], [0], [-1]
        pos = 0
        for s, (a, b) in enumerate(_merge(spans)):
            if BOS_ID in window[a:b]:
                b = a + window[a:b].index(BOS_ID)  # a span never crosses a file boundary
            toks += window[pos:a]
            masked += [False] * (a - pos)
            weight += [0] * (a - pos)
            span += [-1] * (a - pos)
            content = b - a
            extra = self.extra_pads(content)
            toks += window[a:b] + [PAD_ID] * extra
            masked += [True] * (content + extra)
            weight += [1] * content + [1] * min(extra, 1) + [0] * max(extra - 1, 0)  # later pads are forced
            span += [s] * (content + extra)
            pos = b
        rest = len(window) - pos
        toks += window[pos:]
        masked += [False] * rest
        weight += [0] * rest
        span += [-1] * rest
        return Example(toks[:seq_len], masked[:seq_len], weight[:seq_len], span[:seq_len], layout)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-overlapping spans (overlapping spans are merged; touching ones stay separate spans)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class Batches:
    """Random windows of the token stream turned into masked examples; state = (numpy rng, golden counter)."""

    def __init__(self, stream: np.ndarray, sampler: LayoutSampler, seq_len: int, batch_size: int) -> None:
        self.stream = stream
        self.sampler = sampler
        self.seq_len = seq_len
        self.batch_size = batch_size

    def window(self) -> list[int]:
        n = self.seq_len - 1
        start = int(self.sampler.rng.integers(0, max(1, len(self.stream) - n)))
        w = [int(t) for t in self.stream[start : start + n]]
        if w and w[0] == BOS_ID:
            w = w[1:] + [int(t) for t in self.stream[start + n : start + n + 1]]
        return w

    def next(self) -> dict[str, torch.Tensor]:
        return collate(
            [self.sampler.example(self.window(), self.seq_len) for _ in range(self.batch_size)], self.seq_len
        )


def collate(examples: list[Example], seq_len: int) -> dict[str, torch.Tensor]:
    """One forward's tensors: ids (B, N), masked (B, N) bool, targets (B, T) (-1 = none), labels (B, T)."""
    import torch

    b = len(examples)
    ids = torch.full((b, seq_len), PAD_ID, dtype=torch.long)
    masked = torch.zeros(b, seq_len, dtype=torch.bool)
    targets_list = []
    for i, ex in enumerate(examples):
        n = len(ex.tokens)
        ids[i, :n] = torch.tensor(ex.tokens)
        masked[i, :n] = torch.tensor(ex.masked)
        targets_list.append([j for j in range(n) if ex.masked[j] and ex.weight[j]])
    # Round the target count up to a multiple of 32: a handful of tensor shapes instead of one per batch.
    # (Every new shape makes oneDNN build and cache new kernels: memory grew by GBs and steps slowed down.)
    t = max(1, max(len(x) for x in targets_list))
    t = min(-(-t // 32) * 32, max(seq_len, t))
    targets = torch.full((b, t), -1, dtype=torch.long)
    for i, x in enumerate(targets_list):
        targets[i, : len(x)] = torch.tensor(x, dtype=torch.long)
    labels = torch.where(targets >= 0, ids.gather(1, targets.clamp(min=0)), torch.full_like(targets, -100))
    return {"ids": ids, "masked": masked, "targets": targets, "labels": labels}


# ----------------------------------------------------------------------------------------------------
# Model and loss


def build_model(shape: ModelShape, seq_len: int) -> TwoStreamXLNet:
    """A fresh XLNet (bidirectional attention, no dropout, no memory) in fp32, initialised from torch's global
    generator. `seq_len` is not part of the weights: relative positions work at any length."""
    from infill.models.twostream import TwoStreamXLNet, XLNetShape

    model = TwoStreamXLNet(XLNetShape(**asdict(shape)))
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
# Checkpoints and export


def _config_to_json(cfg: TrainConfig) -> dict[str, Any]:
    return asdict(cfg)


def _config_from_json(d: dict[str, Any]) -> TrainConfig:
    d = dict(d)
    d["shape"] = ModelShape(**d["shape"])
    return TrainConfig(**d)


@dataclass
class TrainState:
    step: int = 0
    tokens_seen: int = 0  # sequence positions processed (batch * seq_len per step)
    targets_seen: int = 0  # loss-carrying masked positions
    elapsed: float = 0.0  # training seconds across resumes
    last_eval: float | None = None
    history: list[dict[str, float]] = field(default_factory=list)


def save_checkpoint(
    path: Path,
    model: TwoStreamXLNet,
    opt: torch.optim.Optimizer,
    state: TrainState,
    cfg: TrainConfig,
    batches: Batches,
) -> None:
    """Atomically write model + optimizer + state + rng (numpy generator state and golden counter)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "state": asdict(state),
            "config": _config_to_json(cfg),
            "rng": batches.sampler.rng.bit_generator.state,
            "counter": batches.sampler.counter,
            "python_rng": random.getstate(),
            "torch_rng": torch.get_rng_state(),
        },
        tmp,
    )
    os.replace(tmp, path)


def export_model(
    model: TwoStreamXLNet,
    tokenizer_json: Path,
    folder: Path,
    seq_len: int,
    provenance: dict[str, Any],
    dtype: torch.dtype | None = None,
    shard_mb: float | None = None,
) -> None:
    """Write a model folder: config.json (HF XLNet + "infill" section), model.safetensors (fp32 unless
    `dtype`; HF-style shards with an index when `shard_mb`), tokenizer.json. The folder also loads with
    transformers' `XLNetLMHeadModel.from_pretrained`."""
    import shutil

    from infill.models.twostream import save_folder

    config = model.shape.hf_config(PAD_ID, BOS_ID)
    config["infill"] = {
        "mask_id": MASK_ID,
        "pad_id": PAD_ID,
        "bos_id": BOS_ID,
        "max_length": seq_len,
        "tokenizer": "byte-bpe",
        "provenance": provenance,
    }
    save_folder(model.float(), folder, config, dtype=dtype, shard_mb=shard_mb)
    if tokenizer_json.resolve() != (folder / "tokenizer.json").resolve():
        shutil.copyfile(tokenizer_json, folder / "tokenizer.json")


# ----------------------------------------------------------------------------------------------------
# Training loop


class Log:
    """Plain log lines; a rich progress bar only when stderr is a terminal."""

    def __init__(self, total: int | None) -> None:
        self.interactive = sys.stderr.isatty()
        self.progress: Any = None
        if self.interactive:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
            self.progress.start()
            self.task = self.progress.add_task("training", total=total)

    def step(self, step: int, msg: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, description=msg)
        else:
            print(msg, flush=True)

    def line(self, msg: str) -> None:
        if self.progress is not None:
            self.progress.console.print(msg)
        else:
            print(msg, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def heldout_batches(
    tok: HFTokenizer, corpus: Path, cfg: TrainConfig, count: int, seed: int = 1234
) -> list[dict[str, torch.Tensor]]:
    """Fixed held-out batches (same layouts and seed every time) for comparable held-out losses. `corpus` is a
    corpus folder or a packed training set (`pack_streams`)."""
    import numpy as np

    stream = heldout_stream(tok, corpus)
    sampler = LayoutSampler(token_strings(tok), line_break_ids(tok), np.random.default_rng(seed))
    b = Batches(stream, sampler, cfg.seq_len, min(cfg.batch_size, count))
    return [b.next() for _ in range(max(1, count // b.batch_size))]


def heldout_stream(tok: HFTokenizer, corpus: Path) -> np.ndarray:
    """The held-out split as one token stream (from a corpus folder, or from a pack)."""
    import numpy as np

    from infill.training.corpus import read_split

    if corpus.is_file():
        return np.load(corpus)["heldout"]
    return tokenize_stream(tok, [r["text"] for r in read_split(corpus, "heldout")])


def pack_streams(
    tok: HFTokenizer, tokenizer_json: Path, corpus: Path, out: Path, max_package_bytes: int, max_mb: float
) -> dict[str, Any]:
    """Write the training and held-out token streams of `corpus` to one compressed .npz of at most `max_mb` MB
    (the training stream is cut to fit), for training where the corpus is not available (a GPU machine)."""
    import hashlib

    import numpy as np

    from infill.training.corpus import balanced_records

    train = tokenize_stream(tok, [r["text"] for r in balanced_records(corpus, "train", max_package_bytes)])
    held = heldout_stream(tok, corpus)
    meta = {
        "tokenizer_sha256": hashlib.sha256(tokenizer_json.read_bytes()).hexdigest(),
        "corpus": str(corpus),
        "max_package_bytes": max_package_bytes,
        "train_tokens_available": int(len(train)),
    }
    keep = len(train)
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:
        meta["train_tokens"] = int(keep)
        np.savez_compressed(out, train=train[:keep], heldout=held, meta=np.array(json.dumps(meta)))
        size = out.stat().st_size / 1e6
        if size <= max_mb or keep < 1000:
            break
        keep = int(keep * max_mb / size * 0.98)
    meta["megabytes"] = round(out.stat().st_size / 1e6, 2)
    return meta


def evaluate(model: TwoStreamXLNet, batches: list[dict[str, torch.Tensor]], bf16: bool = False) -> float:
    """Mean NLL (nats) per loss-carrying masked token over `batches`."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            loss, n = joint_loss(model, batch, bf16)
            total += float(loss) * n
            count += n
    return total / max(count, 1)


def cached_stream(
    tok: HFTokenizer, tokenizer_json: Path, corpus: Path, max_package_bytes: int, run_dir: Path
) -> tuple[np.ndarray, int]:
    """The training token stream, cached in run_dir keyed by tokenizer, corpus and package cap (resumes skip
    the tokenization); returns (stream, number of files). A packed training set (`pack_streams`) is used as is."""
    import hashlib

    import numpy as np

    from infill.training.corpus import balanced_records

    if corpus.is_file():
        data = np.load(corpus)
        meta = json.loads(str(data["meta"]))
        if meta["tokenizer_sha256"] != hashlib.sha256(tokenizer_json.read_bytes()).hexdigest():
            raise InputError(f"{corpus} was packed with another tokenizer than {tokenizer_json}")
        return data["train"], 0
    key = hashlib.sha256()
    key.update(tokenizer_json.read_bytes())
    key.update(str((corpus / "train.jsonl").stat().st_size).encode())
    key.update(str(max_package_bytes).encode())
    path = run_dir / f"stream-{key.hexdigest()[:16]}.npz"
    if path.exists():
        data = np.load(path)
        return data["stream"], int(data["files"])
    records = balanced_records(corpus, "train", max_package_bytes)
    stream = tokenize_stream(tok, [r["text"] for r in records])
    run_dir.mkdir(parents=True, exist_ok=True)
    np.savez(path, stream=stream, files=np.array(len(records)))
    return stream, len(records)


def train(
    corpus: Path,
    tokenizer_json: Path,
    run_dir: Path,
    cfg: TrainConfig,
    resume: bool = True,
    export_to: Path | None = None,
    init_from: Path | None = None,
) -> TrainState:
    """Train (or resume) an AS-ARM on `corpus`; checkpoints in `run_dir/last.pt`; optional export at end.

    `init_from`: an exported model folder whose weights start a fresh run (e.g. continue from the shipped
    weights in a later session, when the checkpoint with optimizer state is gone). Ignored when resuming.
    """
    import numpy as np
    import torch

    from infill.training.tokenizer import load_tokenizer

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
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        old = _config_from_json(ckpt["config"])
        cfg = TrainConfig(**{**asdict(cfg), "shape": old.shape, "seed": old.seed, "seq_len": old.seq_len})
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(cfg.shape, cfg.seq_len)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
    elif init_from is not None:
        from safetensors.torch import load_file

        try:
            model.load_file_state({k: v.float() for k, v in load_file(str(init_from / "model.safetensors")).items()})
        except ValueError as exc:
            raise InputError(f"{init_from}: {exc}") from exc
    device = torch.device(cfg.device)
    model.to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.98),
        eps=1e-8,
    )
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

    log = Log(cfg.steps or None)
    t0 = time.time()
    stream, files = cached_stream(tok, tokenizer_json, corpus, cfg.max_package_bytes, run_dir)
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
    held = heldout_batches(tok, corpus, cfg, cfg.eval_sequences) if cfg.eval_sequences > 0 else []
    held = [{k: v.to(device) for k, v in b.items()} for b in held]

    def checkpoint() -> None:
        if held:
            model.eval()
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
    try:
        while not stop:
            if cfg.steps and state.step >= cfg.steps:
                break
            if cfg.minutes and state.elapsed >= cfg.minutes * 60:
                break
            if cfg.until and time.time() >= cfg.until:
                break
            t_step = time.time()
            batch = {k: v.to(device, non_blocking=True) for k, v in batches.next().items()}
            lr = lr_at(cfg, state.step, state.elapsed)
            for g in opt.param_groups:
                g["lr"] = lr
            loss, count = joint_loss(model, batch, cfg.bf16)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            state.step += 1
            state.tokens_seen += batch["ids"].numel()
            state.targets_seen += count
            state.elapsed += time.time() - t_step
            window_loss += float(loss.detach()) * count
            window_n += count
            window_tok += batch["ids"].numel()
            if state.step % cfg.log_every == 0:
                dt = time.time() - window_t
                log.step(
                    state.step,
                    f"step {state.step} loss {window_loss / max(window_n, 1):.3f} "
                    f"lr {lr:.2e} tok/s {window_tok / dt:.0f} tokens {state.tokens_seen:,} "
                    f"elapsed {state.elapsed / 60:.1f}m",
                )
                window_loss, window_n, window_tok, window_t = 0.0, 0, 0, time.time()
            if time.time() - last_ckpt >= cfg.checkpoint_minutes * 60:
                checkpoint()
                last_ckpt = time.time()
    finally:
        log.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    checkpoint()
    if stop:
        log.line(f"stopped by signal {stop[0]} at step {state.step}; resume with the same command")
        return state
    if export_to is not None:
        export_model(model, tokenizer_json, export_to, cfg.seq_len, provenance(cfg, state, corpus))
        log.line(f"exported to {export_to}")
    return state


def provenance(cfg: TrainConfig, state: TrainState, corpus: Path) -> dict[str, Any]:
    """What produced these weights: corpus summary, steps, tokens, held-out NLL."""
    summary: dict[str, Any] = {}
    manifest = corpus / "manifest.json"
    if corpus.is_file():
        import numpy as np

        summary = {"pack": corpus.name, **json.loads(str(np.load(corpus)["meta"]))}
    elif manifest.exists():
        m = json.loads(manifest.read_text(encoding="utf-8"))
        summary = {
            "files": m["totals"]["files"],
            "bytes": m["totals"]["bytes"],
            "heldout_files": m["totals"]["heldout_files"],
            "packages": len(m["packages"]),
            "python": m.get("python"),
        }
    return {
        "trainer": "infill train asarm",
        "corpus": summary,
        "steps": state.step,
        "tokens_seen": state.tokens_seen,
        "targets_seen": state.targets_seen,
        "train_seconds": round(state.elapsed),
        "seq_len": cfg.seq_len,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "seed": cfg.seed,
        "max_package_bytes": cfg.max_package_bytes,
        "heldout_nll_per_token": state.last_eval,
    }


def load_checkpoint_model(run_dir: Path) -> tuple[TwoStreamXLNet, TrainConfig, TrainState]:
    """The model, config and state of `run_dir/last.pt` (for export and measurement)."""
    import torch

    ckpt = torch.load(run_dir / "last.pt", map_location="cpu", weights_only=False)
    cfg = _config_from_json(ckpt["config"])
    model = build_model(cfg.shape, cfg.seq_len)
    model.load_state_dict(ckpt["model"])
    return model, cfg, TrainState(**ckpt["state"])


def measure_heldout(
    model: TwoStreamXLNet,
    tok: HFTokenizer,
    corpus: Path,
    seq_len: int,
    sequences: int = 512,
    seed: int = 99,
) -> dict[str, Any]:
    """Held-out NLL (nats) per loss-carrying masked token, overall and per mask layout, on `sequences`
    windows of the held-out split drawn with a fixed seed. Content tokens and each span's first pad count;
    forced pads (after the first) don't.
    """
    import numpy as np
    import torch

    stream = heldout_stream(tok, corpus)
    sampler = LayoutSampler(token_strings(tok), line_break_ids(tok), np.random.default_rng(seed))
    batches = Batches(stream, sampler, seq_len, 1)
    by_layout: dict[str, list[Example]] = {}
    for _ in range(sequences):
        ex = sampler.example(batches.window(), seq_len)
        by_layout.setdefault(ex.layout, []).append(ex)
    result: dict[str, Any] = {"sequences": sequences, "seq_len": seq_len, "seed": seed, "layouts": {}}
    total, count, content, content_n, pad, pad_n = 0.0, 0, 0.0, 0, 0.0, 0
    model.eval()
    with torch.no_grad():
        for layout, examples in sorted(by_layout.items()):
            lt, ln = 0.0, 0
            for i in range(0, len(examples), 16):
                batch = collate(examples[i : i + 16], seq_len)
                nll = target_nll(model, batch, bf16=False)  # (B, T)
                valid = batch["labels"] >= 0
                is_pad = valid & (batch["labels"] == PAD_ID)
                lt += float(nll[valid].sum())
                ln += int(valid.sum())
                content += float(nll[valid & ~is_pad].sum())
                content_n += int((valid & ~is_pad).sum())
                pad += float(nll[is_pad].sum())
                pad_n += int(is_pad.sum())
            result["layouts"][layout] = {"nll": lt / max(ln, 1), "tokens": ln, "sequences": len(examples)}
            total += lt
            count += ln
    result["content_nll"] = content / max(content_n, 1)
    result["content_tokens"] = content_n
    result["end_pad_nll"] = pad / max(pad_n, 1)
    result["end_pads"] = pad_n
    result["nll"] = total / max(count, 1)
    result["tokens"] = count
    return result
