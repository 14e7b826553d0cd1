"""AS-ARM training step: transformers' XLNetLMHeadModel vs infill's two-stream forward, side by side.

Same model shape, same weights, same batches, interleaved runs; prints the median step time and positions per
second of each, and their ratio. Batches are what training sees: windows of the standard library's sources,
tokenized with the shipped tokenizer and masked by the trainer's own layout sampler (lines, blocks, bodies,
docstrings, spans, random subsets), so the number of targets varies between sequences as it does in training.

    python benchmarks/train_step.py --threads 1 --seq-len 256 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def batches(count: int, batch: int, n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    import sysconfig
    from pathlib import Path

    import numpy as np

    from infill.training import asarm
    from infill.training.tokenizer import load_tokenizer

    tok = load_tokenizer(Path(__file__).resolve().parents[1] / "infill" / "weights" / "default" / "tokenizer.json")
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:80]
    stream = asarm.tokenize_stream(tok, [f.read_text(encoding="utf-8", errors="replace") for f in files])
    sampler = asarm.LayoutSampler(asarm.token_strings(tok), asarm.line_break_ids(tok), np.random.default_rng(seed))
    source = asarm.Batches(stream, sampler, n, batch)
    return [source.next() for _ in range(count)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5, help="timed steps per implementation (after one warm-up)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-inner", type=int, default=1024)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from infill.training import asarm
    from infill.training.tokenizer import BOS_ID, PAD_ID

    shape = asarm.ModelShape(d_model=args.d_model, n_layer=args.layers, n_head=args.heads, d_inner=args.d_inner)
    torch.manual_seed(0)
    ours = asarm.build_model(shape, args.seq_len).train()
    from transformers import XLNetConfig, XLNetLMHeadModel

    config = ours.shape.hf_config(PAD_ID, BOS_ID)
    hf = XLNetLMHeadModel(XLNetConfig(**{k: v for k, v in config.items() if k != "architectures"})).train()
    hf.load_state_dict(ours.state_dict())  # the same weights
    data = batches(args.runs + 1, args.batch_size, args.seq_len, seed=1)
    targets = [int((b["targets"] >= 0).sum()) for b in data]
    padded = [b["targets"].numel() for b in data]

    def hf_nll(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from infill.models import masks

        out = hf(
            input_ids=batch["ids"],
            perm_mask=masks.perm_mask(batch["masked"]),
            target_mapping=masks.target_mapping(batch["targets"], args.seq_len),
            use_mems=False,
        )
        logits = out.logits
        labels = batch["labels"].reshape(-1)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, ignore_index=-100)

    def ours_nll(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return ours.target_nll(batch).sum() / (batch["labels"] >= 0).sum()

    impls = {"transformers XLNetLMHeadModel": (hf, hf_nll), "infill two-stream": (ours, ours_nll)}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, (m, _) in impls.items()}
    times: dict[str, list[float]] = {name: [] for name in impls}
    losses: dict[str, float] = {}
    for r in range(args.runs + 1):
        for name, (_, nll) in impls.items():
            batch = data[r]
            t = time.perf_counter()
            loss = nll(batch)
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            opts[name].step()
            dt = time.perf_counter() - t
            if r == 0:
                losses[name] = float(loss.detach())
            else:
                times[name].append(dt)
    positions = args.batch_size * args.seq_len
    print(
        f"shape: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, d_inner {args.d_inner}; "
        f"batch {args.batch_size} x {args.seq_len} positions, {sum(targets) / len(targets):.0f} targets per batch "
        f"(padded to {sum(padded) / len(padded):.0f}); "
        f"{args.threads} thread(s), cpu capability {torch.backends.cpu.get_cpu_capability()}"
    )
    base = None
    for name, ts in times.items():
        med = statistics.median(ts)
        base = base or med
        print(
            f"{name:32s} step {med:7.3f} s (min {min(ts):.3f}, max {max(ts):.3f})  {positions / med:8.0f} positions/s  "
            f"first loss {losses[name]:.4f}  speedup {base / med:.2f}x"
        )


if __name__ == "__main__":
    main()
