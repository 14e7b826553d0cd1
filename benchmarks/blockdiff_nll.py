"""Held-out cross-entropy of block-diffusion folders on line-shaped middles, to compare training runs.

A 300-line HumanEval run tells 3% from 1% only roughly; this measures every token of many held-out middles.
For each of --examples held-out windows (the corpus's held-out split, a fixed seed, so every folder sees the same
examples), 1-3 whole lines (a random cut where a window has no such lines) are cut out as the middle of a
fill-in-the-middle prompt (as a user's --span is, and as `infill train block-diffusion --line-rate` trains) and
the folder's model predicts them:

- "ar": block size 1, every middle token masked: the left-to-right cross-entropy (what S2D2's verifier and
  `--block-size 1` decode with), nats per middle token (the end token included);
- "block4": block size 4, every middle token masked: the first denoising step of each block of 4.

    python benchmarks/blockdiff_nll.py --corpus runs/corpus infill/weights/blockdiff runs/bd5/model
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def measure(folder: Path, texts: list[str], examples: int, seq_len: int, seed: int) -> dict[str, float]:
    import torch
    import torch.nn.functional as F

    from infill.training.blockdiff import (
        fim_example,
        load_init,
        newline_ids,
        specials_of,
        two_stream_mask,
        with_specials,
    )

    model, tok, _shape, _prov = load_init(folder)
    model.eval()
    tok = with_specials(tok)
    sp, newlines = specials_of(tok), newline_ids(tok)
    docs = [d for d in (e.ids for e in tok.encode_batch(texts)) if len(d) >= 32]
    rng = random.Random(seed)
    batch = []
    while len(batch) < examples:
        seq, resp = fim_example(rng.choice(docs), sp, seq_len, rng, 1.0, 64, line_rate=1.0, newlines=newlines)
        ends = [i for i in range(resp, seq_len) if seq[i] == sp.end]
        if ends and ends[0] > resp:  # a line-shaped middle was cut (not the plain fallback)
            batch.append((seq, resp, ends[0] + 1))
    out: dict[str, float] = {}
    for name, block in (("ar", 1), ("block4", 4)):
        total, count, right = 0.0, 0, 0
        for seq, resp, stop in batch:
            x0 = torch.tensor([seq])  # (1, L)
            xt = x0.clone()
            xt[0, resp:stop] = sp.mask  # the middle and its end token, all masked (t = 1)
            ids = torch.cat([xt, x0], dim=1)  # (1, 2L): noisy stream, clean stream
            pos = torch.cat([torch.arange(seq_len), torch.arange(seq_len)])[None]
            mask = two_stream_mask(seq_len, block)[None, None]
            with torch.no_grad():
                hidden = model.model(input_ids=ids, position_ids=pos, attention_mask=mask).last_hidden_state
                logits = model.lm_head(hidden[0, resp:stop]).float()  # (m, V)
            target = x0[0, resp:stop]
            total += float(F.cross_entropy(logits, target, reduction="sum"))
            right += int((logits.argmax(-1) == target).sum())
            count += stop - resp
        out[f"{name}_nll"] = round(total / count, 4)
        out[f"{name}_top1"] = round(right / count, 4)
    out["middle_tokens"] = count
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--corpus", type=Path, required=True, help="Corpus folder; its held-out split is read.")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch

    from infill.training.corpus import balanced_records

    torch.set_num_threads(1)
    texts = [r["text"] for r in balanced_records(args.corpus, "heldout", 6_000_000) if r["text"].strip()]
    for folder in args.folders:
        print(json.dumps({"folder": str(folder), **measure(folder, texts, args.examples, args.seq_len, args.seed)}))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
