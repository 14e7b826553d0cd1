"""The teacher side of PTP training (infill.training.ptp): teacher samples of a middle, the teacher pass that gives
the targets and the coupling uniforms, the student's slot logits over the teacher's cache, and the held-out
"tokens per iteration" count. The steps are described in infill.training.ptp's module docstring and
docs/ptp.md.

Shapes: B = sequences, L = clean length, M = mask rows, G = split groups, N = slots, V = vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infill.models.blockdiff_model import kv_cache

if TYPE_CHECKING:
    import torch

    from infill.models.ptp import PTPAdapter


@dataclass
class Special:
    end: int
    mask: int
    pre: int
    suf: int
    mid: int
    newline: int


@dataclass
class Example:
    """One FIM sequence: tokens (prompt + middle (+ end)), where the middle starts, where it stops."""

    ids: list[int]
    start: int  # index of the first middle token
    stop: int  # index after the last target (the end token's index + 1 when the middle ended)


def _sdpa_rows_safe(allowed: torch.Tensor) -> torch.Tensor:
    """Padding rows that may attend to nothing would give NaN: let every row see at least its own column."""
    import torch

    b, rows, keys = allowed.shape
    eye = torch.zeros(rows, keys, dtype=torch.bool)
    eye[torch.arange(rows), torch.arange(keys - rows, keys)] = True
    return allowed | (eye[None] & ~allowed.any(-1, keepdim=True))


def sample_middles(
    teacher: Any, prompts: list[list[int]], sp: Special, max_new: int, gen: torch.Generator
) -> list[list[int]]:
    """Teacher samples at temperature 1, batched with left padding: each prompt -> its middle, ending with the
    end token when the teacher wrote one within max_new tokens."""
    import torch
    from transformers import DynamicCache

    b = len(prompts)
    width = max(len(p) for p in prompts)
    pad = [width - len(p) for p in prompts]
    ids = torch.tensor([[sp.end] * k + p for k, p in zip(pad, prompts, strict=True)])  # (B, W)
    valid = torch.arange(width)[None, :] >= torch.tensor(pad)[:, None]  # (B, W)
    pos0 = (torch.arange(width)[None, :] - torch.tensor(pad)[:, None]).clamp(min=0)  # (B, W)
    lengths = torch.tensor([len(p) for p in prompts])  # (B,)
    cache = DynamicCache(config=teacher.config)
    out: list[list[int]] = [[] for _ in range(b)]
    done = torch.zeros(b, dtype=torch.bool)
    # step 0: the prompts (causal over valid columns) and one mask row after each
    causal = torch.tril(torch.ones(width, width, dtype=torch.bool))[None] & valid[:, None, :]  # (B, W, W)
    allowed = torch.zeros(b, width + 1, width + 1, dtype=torch.bool)
    allowed[:, :width, :width] = causal
    allowed[:, width, :width] = valid
    allowed[:, width, width] = True
    inp = torch.cat([ids, torch.full((b, 1), sp.mask)], dim=1)  # (B, W+1)
    positions = torch.cat([pos0, lengths[:, None]], dim=1)  # (B, W+1)
    keys_valid = valid
    with torch.no_grad():
        for step in range(max_new):
            mask4 = _sdpa_rows_safe(allowed)[:, None]  # (B, 1, R, C+R)
            o = teacher(
                input_ids=inp, position_ids=positions, attention_mask=mask4, use_cache=True, **kv_cache(teacher, cache)
            )
            cache.crop(-1)  # drop the mask row
            logits = o.logits[:, -1].float()  # (B, V)
            logits[:, sp.mask] = float("-inf")
            tok = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(-1)  # (B,)
            for k in range(b):
                if not done[k]:
                    out[k].append(int(tok[k]))
                    done[k] = int(tok[k]) == sp.end
            if bool(done.all()):
                break
            c = cache.get_seq_length()
            keys_valid = torch.cat([keys_valid, torch.ones(b, 1, dtype=torch.bool)], dim=1)  # (B, C+1)
            allowed = torch.zeros(b, 2, c + 2, dtype=torch.bool)
            allowed[:, :, :c] = keys_valid[:, None, :c]
            allowed[:, 0, c] = True
            allowed[:, 1, c : c + 2] = True
            inp = torch.stack([tok, torch.full((b,), sp.mask)], dim=1)  # (B, 2)
            positions = torch.stack([lengths + step, lengths + step + 1], dim=1)  # (B, 2)
    return out


@dataclass
class Batch:
    """Teacher-side tensors of one batch."""

    cache: Any  # DynamicCache of the clean rows (B, L)
    tokens: torch.Tensor  # (B, T) long: ids with the targets, right-padded (T >= max stop)
    u: torch.Tensor  # (B, T) float64: extracted u at target positions, random elsewhere
    start: torch.Tensor  # (B,) long
    stop: torch.Tensor  # (B,) long
    clean_len: int  # L


def teacher_pass(
    teacher: Any, examples: list[Example], sp: Special, gen: torch.Generator, part: slice = slice(None)
) -> Batch:
    """Clean rows [0, stop-1) causal + mask rows at the middle positions [start, stop); q at the mask rows ->
    u at every target. Keeps the clean KV cache. `part`: the examples of this process in a distributed run;
    the random draws are those of all `examples` (every process draws the same), the teacher runs on the part,
    and the Batch holds the part."""
    import torch
    from transformers import DynamicCache

    from infill.decoding.coupling import draw_u, extract_u

    b = len(examples)
    total = max(e.stop for e in examples) + 64  # room for slots past the end
    tokens = torch.full((b, total), sp.end, dtype=torch.long)
    for k, e in enumerate(examples):
        tokens[k, : len(e.ids)] = torch.tensor(e.ids)
    u = draw_u(b * total, gen).view(b, total)  # (B, T) random where there is no target
    noises = [torch.rand(e.stop - e.start, generator=gen, dtype=torch.float64) for e in examples]
    clean_len = max(e.stop - 1 for e in examples)  # of the whole batch: the part's rows are computed as in it
    m_max = max(e.stop - e.start for e in examples)
    indices = range(b)[part]
    tokens, u, examples = tokens[part], u[part], examples[part]
    b = len(examples)
    rows = clean_len + m_max
    ids = torch.full((b, rows), sp.mask, dtype=torch.long)
    ids[:, :clean_len] = tokens[:, :clean_len]
    positions = torch.zeros(b, rows, dtype=torch.long)
    positions[:, :clean_len] = torch.arange(clean_len)
    allowed = torch.zeros(b, rows, rows, dtype=torch.bool)
    allowed[:, :clean_len, :clean_len] = torch.tril(torch.ones(clean_len, clean_len, dtype=torch.bool))
    for k, e in enumerate(examples):
        for r in range(e.stop - e.start):
            pos = e.start + r
            positions[k, clean_len + r] = pos
            allowed[k, clean_len + r, :pos] = True
            allowed[k, clean_len + r, clean_len + r] = True
    cache = DynamicCache(config=teacher.config)
    with torch.no_grad():
        hidden = teacher.model(
            input_ids=ids,
            position_ids=positions,
            attention_mask=_sdpa_rows_safe(allowed)[:, None],
            **kv_cache(teacher.model, cache),
            use_cache=True,
        ).last_hidden_state  # (B, L+M, d)
        logits = teacher.lm_head(hidden[:, clean_len:]).double()  # (B, M, V)
    cache.crop(-m_max)  # keep the clean rows
    logits[..., sp.mask] = float("-inf")
    q = torch.softmax(logits, dim=-1)  # (B, M, V)
    for k, (e, index) in enumerate(zip(examples, indices, strict=True)):
        n = e.stop - e.start
        t = tokens[k, e.start : e.stop]  # (n,)
        u[k, e.start : e.stop] = extract_u(t, q[k, :n], noises[index])
    stop = torch.tensor([e.stop for e in examples])
    return Batch(cache, tokens, u, torch.tensor([e.start for e in examples]), stop, clean_len)


def slot_logits(
    teacher: Any,
    adapter: PTPAdapter,
    batch: Batch,
    splits: torch.Tensor,
    with_u: torch.Tensor,
    slots: int,
    sp: Special,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Student pass: splits (B, G) split points, with_u (B, G) bool -> (logits (B, G*N, V), targets (B, G*N)
    with -100 where the slot's position is outside the middle)."""
    import torch

    from infill.models.ptp import slot_forward, u_bits

    b, g = splits.shape
    n = slots
    rows = g * n
    c = batch.clean_len
    pos = (splits[:, :, None] + torch.arange(n)[None, None, :]).reshape(b, rows)  # (B, G*N)
    group = torch.arange(rows) // n  # (G*N,)
    allowed = torch.zeros(b, rows, c + rows, dtype=torch.bool)
    allowed[:, :, :c] = torch.arange(c)[None, None, :] < splits.repeat_interleave(n, dim=1)[:, :, None]
    allowed[:, :, c:] = (group[:, None] == group[None, :])[None]
    u = batch.u.gather(1, pos)  # (B, G*N)
    bits = u_bits(u) * with_u.repeat_interleave(n, dim=1)[:, :, None].float()  # (B, G*N, 32); 0 = no u
    ids = torch.full((b, rows), sp.mask, dtype=torch.long)
    cache = _copy_cache(batch.cache, teacher)
    hidden = slot_forward(teacher, adapter, ids, pos, allowed[:, None], 0, bits, cache=cache)  # (B, G*N, d)
    targets = batch.tokens.gather(1, pos)  # (B, G*N)
    targets = torch.where(slot_inside(splits, batch.start, batch.stop, n), targets, torch.full_like(targets, -100))
    return teacher.lm_head(hidden), targets


def slot_inside(splits: torch.Tensor, start: torch.Tensor, stop: torch.Tensor, slots: int) -> torch.Tensor:
    """(B, G*N) bool: the slot rows whose position is inside the middle (those with a target). splits (B, G),
    start and stop (B,)."""
    import torch

    b = splits.shape[0]
    pos = (splits[:, :, None] + torch.arange(slots)[None, None, :]).reshape(b, -1)  # (B, G*N)
    return (pos >= start[:, None]) & (pos < stop[:, None])


def _copy_cache(cache: Any, teacher: Any) -> Any:
    """A DynamicCache with the same (detached) entries: the student pass appends to its own copy."""
    from transformers import DynamicCache

    fresh = DynamicCache(config=teacher.config)
    for idx, layer in enumerate(cache.layers):
        fresh.update(layer.keys, layer.values, idx)
    return fresh


def iteration_tokens(logits: torch.Tensor, targets: torch.Tensor, slots: int) -> torch.Tensor:
    """Tokens one decoding iteration yields at each group's split point, teacher-forced: 1 (the teacher's
    token) + matched drafts + 1 (correction or bonus), capped at the middle's end. logits (B, G*N, V),
    targets (B, G*N) -> (B, G) float."""
    import torch

    b = targets.shape[0]
    n = slots
    pred = logits.argmax(-1).view(b, -1, n)  # (B, G, N)
    tgt = targets.view(b, -1, n)  # (B, G, N)
    inside = tgt != -100
    match = (pred[:, :, 1:] == tgt[:, :, 1:]) & inside[:, :, 1:]  # (B, G, N-1) drafts 1..N-1
    accepted = torch.cumprod(match.long(), dim=-1).sum(-1)  # (B, G)
    left = inside.long().sum(-1)  # (B, G) positions of the window inside the middle (the split's included)
    return torch.minimum(accepted + 2, left).float()
