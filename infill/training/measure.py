"""Held-out loss of an AS-ARM: during training (a few fixed batches) and for a model card (per layout)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer as HFTokenizer

    from infill.models.twostream import TwoStreamXLNet
    from infill.training.layouts import Example

from infill.training.layouts import Batches, LayoutSampler, collate, line_break_ids, token_strings
from infill.training.objective import joint_loss, target_nll
from infill.training.streams import heldout_stream
from infill.training.tokenizer import PAD_ID


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

    stream = heldout_stream(tok, corpus, required=True)
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
