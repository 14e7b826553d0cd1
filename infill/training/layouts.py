"""Training data for the AS-ARM: the token stream of whole files, mask layouts that look like what users fill,
and batches (docs/training.md, "The AS-ARM").

A *layout* picks the masked positions the way users fill: single lines, multi-line blocks, function bodies,
docstrings, random spans, random subsets. Each contiguous masked span gets extra `<pad>` positions after its
content, sized like the budgets of infill's length policy (`LayoutSampler.extra_pads`), so the model learns to
end a fill. The mask rate of the random-span and random-subset layouts comes from a golden-ratio (Kronecker)
sequence, a low-discrepancy sampler, so rates cover their range evenly even over few steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch
    from tokenizers import Tokenizer as HFTokenizer

from infill.training.tokenizer import BOS_ID, PAD_ID

GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0  # 0.618..., the Kronecker sequence frac(n * GOLDEN) is low-discrepancy


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

    def examples(self) -> list[Example]:
        """The next batch's examples (a distributed run draws the whole global batch on every rank, and each
        rank collates its part)."""
        return [self.sampler.example(self.window(), self.seq_len) for _ in range(self.batch_size)]

    def next(self) -> dict[str, torch.Tensor]:
        return collate(self.examples(), self.seq_len)


def target_count(examples: list[Example]) -> int:
    """Loss-carrying positions of `examples` (masked, with weight): the targets `collate` makes of them."""
    return sum(1 for ex in examples for m, w in zip(ex.masked, ex.weight, strict=True) if m and w)


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


_SHARED: dict[str, object] = {}  # what forked workers inherit: the stream and the sampler's tables


def _batch_of_step(step: int) -> dict[str, np.ndarray]:
    """The collated batch of `step`, a function of (seed, step) alone (run in a worker process)."""
    import numpy as np

    seed, seq_len, batch_size = (int(_SHARED[k]) for k in ("seed", "seq_len", "batch_size"))  # type: ignore[call-overload]
    strings, breaks, stream = _SHARED["strings"], _SHARED["breaks"], _SHARED["stream"]
    sampler = LayoutSampler(strings, breaks, np.random.default_rng([seed, step]), counter=step * batch_size)  # type: ignore[arg-type]
    return {k: v.numpy() for k, v in Batches(stream, sampler, seq_len, batch_size).next().items()}  # type: ignore[arg-type]


def _worker_init() -> None:
    import torch

    from infill.training.corpus import quiet_worker

    quiet_worker()
    torch.set_num_threads(1)


class ParallelBatches:
    """Batches drawn by worker processes, for a GPU that trains faster than one process masks and collates
    (the layouts are Python). Batch `step` depends only on (seed, step), so a resumed run draws the same
    batches whatever the number of workers; `prefetch` batches are made ahead. Workers are forked: make this
    before the process touches CUDA."""

    def __init__(
        self,
        stream: np.ndarray,
        strings: list[str],
        breaks: set[int],
        seed: int,
        seq_len: int,
        batch_size: int,
        workers: int,
        prefetch: int = 0,
    ) -> None:
        import multiprocessing

        _SHARED.update(seed=seed, seq_len=seq_len, batch_size=batch_size, strings=strings, breaks=breaks, stream=stream)
        self.pool = multiprocessing.get_context("fork").Pool(workers, initializer=_worker_init)
        self.prefetch = prefetch or 2 * workers
        self.pending: dict[int, object] = {}
        self.next_step = -1

    def get(self, step: int) -> dict[str, torch.Tensor]:
        """The batch of `step` (collate's tensors), asking the workers for the following ones."""
        import torch

        if step != self.next_step:  # a jump (the first call, a resume): start over from here
            self.pending.clear()
        for s in range(step, step + self.prefetch):
            if s not in self.pending:
                self.pending[s] = self.pool.apply_async(_batch_of_step, (s,))
        self.next_step = step + 1
        arrays = self.pending.pop(step).get()  # type: ignore[attr-defined]
        return {k: torch.from_numpy(v) for k, v in arrays.items()}

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()
