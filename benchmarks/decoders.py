"""Sequential vs ASSD (k = 3, 5, 10, model and n-gram drafts) on the same model and infill tasks, in one run.

    python benchmarks/decoders.py          # the packaged default model, else a random one (and says so)
    python benchmarks/decoders.py --model PATH --tasks 8 --span 48 --context 256 --runs 3

Tasks: windows of `--context` tokens cut from this repository's own Python sources, with a contiguous span of
`--span` tokens masked in each (fixed seed). Every decoder fills every task with the same seeds; wall time is the
median over `--runs` repetitions of the whole task set, interleaved across decoders so that load drift on a shared
machine hits all alike. Prints NFE, tokens/NFE, wall seconds, and the speedups (NFE and wall) against sequential.
The "(no cache)" rows run HF's full forward instead of the prompt/KV cache. Not a test: nothing asserts a timing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_tasks(tokenizer, n_tasks: int, context: int, span: int, seed: int):  # type: ignore[no-untyped-def]
    """(ids, masked) pairs: [<bos>] + a window of source tokens with `span` of them replaced by <mask>."""
    import random

    import torch

    from infill.models.base import FillProblem

    rng = random.Random(seed)
    sources = sorted((ROOT / "infill").rglob("*.py"))
    text = "\n".join(p.read_text(encoding="utf-8") for p in sources)
    ids = tokenizer.encode(text)
    off = 1 if tokenizer.bos_id is not None else 0  # room for the <bos>
    body = context - off
    tasks = []
    for _ in range(n_tasks):
        start = rng.randrange(0, max(1, len(ids) - body))
        window = ids[start : start + body]
        first = rng.randrange(1, max(2, len(window) - span))
        seq = ([tokenizer.bos_id] if tokenizer.bos_id is not None else []) + window
        masked = torch.arange(first + off, first + off + span)
        t = torch.tensor(seq)
        t[masked] = tokenizer.mask_id
        tasks.append(FillProblem(ids=t, masked=masked))
    return tasks


def build_random_model(folder: Path, layers: int, width: int) -> Path:
    from infill.models.tiny import build_tiny_checkpoint

    sources = sorted((ROOT / "infill").rglob("*.py"))
    texts = [p.read_text(encoding="utf-8") for p in sources]
    return build_tiny_checkpoint(
        folder, vocab_size=4096, n_layer=layers, d_model=width, n_head=4, max_length=1024, seed=0, texts=texts
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder or name (default: packaged, else random)")
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--context", type=int, default=256, help="tokens per task, including the span")
    ap.add_argument("--span", type=int, default=48, help="masked tokens per task")
    ap.add_argument("--runs", type=int, default=3, help="repetitions; wall time is the median")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--layers", type=int, default=6, help="random model only")
    ap.add_argument("--width", type=int, default=256, help="random model only")
    ap.add_argument("--no-bf16", action="store_true", help="fp32 compute instead of bf16 autocast")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-plain", action="store_true", help="skip the rows without the prompt/KV cache")
    args = ap.parse_args()

    import torch

    from infill.config import DecodeConfig, ModelSpec
    from infill.core.kinds import load
    from infill.decoding import decode
    from infill.models.loading import default_folder

    torch.set_num_threads(args.threads)
    tmp = None
    if args.model is not None:
        name, note = args.model, f"model: {args.model}"
    elif (default_folder() / "config.json").is_file():
        name, note = "default", f"model: packaged default ({default_folder()})"
    else:
        tmp = tempfile.TemporaryDirectory()
        name = str(build_random_model(Path(tmp.name) / "random", args.layers, args.width))
        note = (
            f"model: RANDOMLY INITIALISED XLNet ({args.layers} layers, width {args.width}; no trained "
            "default model exists yet), so acceptance rates are not those of a trained model"
        )
    lm = load(ModelSpec(name=name, device=args.device, bf16=not args.no_bf16))
    model = lm.model
    tasks = make_tasks(lm.tokenizer, args.tasks, args.context, args.span, seed=0)
    print(note)
    print(
        f"{lm.info.get('parameters', 0) / 1e6:.1f}M parameters, bf16={not args.no_bf16}, "
        f"{args.tasks} tasks x {args.span} masked tokens in {args.context}-token windows, "
        f"{args.runs} runs, {args.threads} threads, temperature {args.temperature}"
    )

    configs = [("sequential", DecodeConfig(decoder="sequential", temperature=args.temperature))]
    for k in (3, 5, 10):
        configs.append((f"assd k={k}", DecodeConfig(decoder="assd", k=k, draft="model", temperature=args.temperature)))
    for k in (5, 10):
        cfg = DecodeConfig(decoder="assd", k=k, draft="ngram", temperature=args.temperature)
        configs.append((f"assd ngram k={k}", cfg))

    runs = [(label, cfg, model) for label, cfg in configs]
    if getattr(model, "cache", None) is not None and not args.no_plain:
        from infill.models.xlnet import XLNetAnySubset

        plain = XLNetAnySubset(
            model.hf, mask_id=model.mask_id, pad_id=model.pad_id, bos_id=model.bos_id,
            max_length=model.max_length, device=args.device, bf16=not args.no_bf16, cache=False,
        )  # fmt: skip
        runs.append(("sequential (no cache)", configs[0][1], plain))
        runs.append(("assd k=10 (no cache)", configs[3][1], plain))

    # warm-up (first-call allocations), not timed
    for _, _, m in runs[:1] + runs[-1:]:
        decode(m, tasks[0], configs[1][1], torch.Generator().manual_seed(0))

    # runs are interleaved (run 1 of every decoder, then run 2 ...) so that load drift on a shared machine
    # hits every decoder alike; NFE and the histogram come from run 1
    walls: dict[str, list[float]] = {label: [] for label, _, _ in runs}
    first: dict[str, tuple[int, int, dict[int, int]]] = {}
    for _ in range(args.runs):
        for label, cfg, model in runs:
            start = time.perf_counter()
            nfe = tokens = 0
            hist: dict[int, int] = {}
            for i, task in enumerate(tasks):
                _, stats = decode(model, task, cfg, torch.Generator().manual_seed(i))
                nfe += stats.nfe
                tokens += stats.tokens
                for a, c in stats.histogram().items():
                    hist[a] = hist.get(a, 0) + c
            walls[label].append(time.perf_counter() - start)
            first.setdefault(label, (nfe, tokens, hist))
    rows = [(label, *first[label][:2], statistics.median(walls[label]), first[label][2]) for label, _, _ in runs]

    base_nfe, base_wall = rows[0][1], rows[0][3]
    print()
    print(f"{'decoder':<24}{'NFE':>7}{'tokens':>8}{'tok/NFE':>9}{'wall s':>9}{'NFE x':>8}{'wall x':>8}")
    for label, nfe, tokens, wall, _ in rows:
        print(
            f"{label:<24}{nfe:>7}{tokens:>8}{tokens / nfe:>9.2f}{wall:>9.2f}"
            f"{base_nfe / nfe:>8.2f}{base_wall / wall:>8.2f}"
        )
    print()
    print("tokens made final per iteration, as {tokens: iterations}:")
    for label, _, _, _, hist in rows[1:]:
        print(f"  {label:<22} {dict(sorted(hist.items()))}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
