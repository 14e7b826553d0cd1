"""Which AS-ARM shape learns most for a fixed amount of compute? A short sweep from scratch.

Each shape trains from random weights with `infill train asarm` for a number of steps that gives every shape the
same training FLOPs (about 6 x parameters x positions: steps scale with 1 / parameters, anchored at
`--ref-steps` for the default shape), then `infill train heldout-nll` measures it on the same held-out windows.
Counting steps instead of minutes keeps the budget fixed when the machine's load changes during the sweep.

    python benchmarks/size_sweep.py --corpus runs/corpus --ref-steps 120 --seq-len 256
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name -> (layers, d_model, heads, d_inner)
SHAPES: dict[str, tuple[int, int, int, int]] = {
    "small 4x192": (4, 192, 3, 768),
    "default 6x256": (6, 256, 4, 1024),
    "large 8x320": (8, 320, 5, 1280),
}
REFERENCE = "default 6x256"


def parameters(layers: int, d_model: int, heads: int, d_inner: int, vocab: int) -> int:
    """Parameters of the two-stream XLNet of this shape (built, then counted)."""
    from infill.models.twostream import TwoStreamXLNet, XLNetShape

    shape = XLNetShape(vocab_size=vocab, d_model=d_model, n_layer=layers, n_head=heads, d_inner=d_inner)
    return sum(p.numel() for p in TwoStreamXLNet(shape).parameters())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, default=ROOT / "infill/weights/default/tokenizer.json")
    ap.add_argument("--ref-steps", type=int, default=120, help="steps of the default shape; others scale by size")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--sequences", type=int, default=128, help="held-out windows for the NLL")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--stream-from", type=Path, help="a run folder whose cached token stream (stream-*.npz) to reuse")
    args = ap.parse_args()

    vocab = len(json.loads(args.tokenizer.read_text())["model"]["vocab"])
    sizes = {name: parameters(*SHAPES[name], vocab) for name in SHAPES}
    infill = [str(Path(sys.executable).parent / "infill")]
    rows = []
    for name in args.shapes.split(","):
        layers, d_model, heads, d_inner = SHAPES[name]
        steps = max(1, round(args.ref_steps * sizes[REFERENCE] / sizes[name]))
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            run.mkdir()
            for cached in args.stream_from.glob("stream-*.npz") if args.stream_from else ():
                (run / cached.name).hardlink_to(cached)
            start = time.perf_counter()
            train = [
                *infill, "train", "asarm", "--corpus", str(args.corpus), "--tokenizer", str(args.tokenizer),
                "--run-dir", str(run), "--out", str(run / "export"), "--no-resume", "--steps", str(steps),
                "--layers", str(layers), "--d-model", str(d_model), "--heads", str(heads), "--d-inner", str(d_inner),
                "--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size), "--lr", "1e-3",
                "--warmup", str(max(1, steps // 10)), "--checkpoint-minutes", "1000", "--eval-sequences", "0",
                "--threads", str(args.threads), "--seed", "0",
            ]  # fmt: skip
            subprocess.run(train, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            seconds = time.perf_counter() - start
            nll = subprocess.run(
                [*infill, "train", "heldout-nll", "--model", str(run / "export"), "--corpus", str(args.corpus),
                 "--sequences", str(args.sequences), "--seq-len", str(args.seq_len), "--threads", str(args.threads)],
                check=True, cwd=ROOT, capture_output=True, text=True,
            )  # fmt: skip
        result = json.loads(nll.stdout)
        rows.append((name, sizes[name], steps, steps * args.batch_size * args.seq_len, seconds, result))
        print(f"  done: {name}", file=sys.stderr, flush=True)

    print(f"# fixed compute: {args.ref_steps} steps of {REFERENCE}, batch {args.batch_size} x {args.seq_len}")
    print(f"# held-out NLL on {args.sequences} windows of {args.seq_len} tokens (nats per predicted token)")
    print(f"{'shape':<16}{'params':>9}{'steps':>7}{'positions':>11}{'train+eval s':>14}{'held-out NLL':>14}")
    for name, size, steps, positions, seconds, result in rows:
        print(f"{name:<16}{size / 1e6:>8.2f}M{steps:>7}{positions:>11,}{seconds:>14.0f}{result['nll']:>14.3f}")


if __name__ == "__main__":
    main()
