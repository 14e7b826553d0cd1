"""Per-pass cost of the AS-ARM on this machine: transformers' full forward vs infill's full and cached passes.

Same weights (the default model unless --model), same problem: a fill of --masked positions in the middle of
a --context-token sequence, some already decoded. Prints the median time of
  - transformers' XLNetLMHeadModel full forward (perm_mask + target_mapping), the reference implementation;
  - infill's full two-stream forward (TwoStreamXLNet.train_hidden without a cache);
  - infill's cached pass (infill.models.xlnet_cache), which decoding uses, on the eager engine (--engine torch;
    benchmarks/engines.py compares the engines),
for a draft pass with 1 and 10 target rows and a verify pass with 10 rows, and two floors: the arithmetic of
one row (2 x parameters FLOP at this machine's measured fp32 matrix rate) and the time to read the weights'
bytes once (one reduction over an fp32 buffer of that size: the memory read rate, from whichever cache level
holds the buffer; a pass reads each weight once, so it cannot be faster than this; int8 weights, a quarter of
the bytes, at the same rate).

    python benchmarks/forward.py --threads 1 --runs 30
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch


def median_ms(fn: Callable[[], object], runs: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--context", type=int, default=256, help="sequence length in tokens")
    ap.add_argument("--masked", type=int, default=24, help="masked positions (5 of them decoded)")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' forward (it imports transformers)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from infill.config import ModelSpec
    from infill.core.kinds import load
    from infill.models.loading import resolve_folder
    from infill.models.xlnet import XLNetAnySubset

    spec = ModelSpec(name=args.model, device=args.device, bf16=False, engine="torch")
    cached = load(spec).model
    full = XLNetAnySubset(cached.net, mask_id=cached.mask_id, device=args.device, cache=False)
    N, M, done = args.context, args.masked, 5
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, cached.vocab_size, (N,), generator=g)
    ids[0] = cached.bos_id if cached.bos_id is not None else ids[0]
    masked = torch.arange(N // 2, N // 2 + M)
    ids[masked] = cached.mask_id
    ids[masked[:done]] = torch.randint(3, cached.vocab_size, (done,), generator=g)
    drafted = ids.clone()
    drafted[masked[done : done + 10]] = torch.randint(3, cached.vocab_size, (10,), generator=g)

    passes: dict[str, Callable[[XLNetAnySubset], object]] = {
        "draft, 1 row": lambda m: m.draft(ids, masked, done, masked[done : done + 1]),
        "draft, 10 rows": lambda m: m.draft(ids, masked, done, masked[done : done + 10]),
        "verify, 10 rows": lambda m: m.verify(drafted, masked, done, masked[done : done + 10]),
    }
    rows: dict[str, dict[str, float]] = {name: {} for name in passes}
    hf_forward: Callable[[int | None, torch.Tensor, torch.Tensor], object] | None = None
    if not args.no_hf:
        from transformers import XLNetLMHeadModel

        from infill.models import masks

        hf = XLNetLMHeadModel.from_pretrained(str(resolve_folder(spec)[0]), dtype=torch.float32).eval()
        masked_bool = torch.zeros(1, N, dtype=torch.bool)
        masked_bool[0, masked] = True

        def hf_forward(n_decoded: int | None, x: torch.Tensor, targets: torch.Tensor) -> object:
            with torch.no_grad():
                return hf(
                    input_ids=x[None],
                    perm_mask=masks.perm_mask(masked_bool, n_decoded),
                    target_mapping=masks.target_mapping(targets[None], N),
                    use_mems=False,
                ).logits

    for name, run in passes.items():
        if hf_forward is not None:
            verify = name.startswith("verify")
            k = 1 if "1 row" in name else 10
            x = drafted if verify else ids
            rows[name]["transformers full"] = median_ms(
                lambda x=x, k=k, verify=verify: hf_forward(None if verify else done, x, masked[done : done + k]),
                args.runs,
            )
        rows[name]["infill full"] = median_ms(lambda run=run: run(full), args.runs)
        rows[name]["infill cached"] = median_ms(lambda run=run: run(cached), args.runs)

    params = sum(p.numel() for p in cached.net.parameters())
    a = torch.randn(512, 512)
    gemm_ms = median_ms(lambda: a @ a, 20)
    flops = 2 * 512**3 / (gemm_ms / 1e3)
    fp32 = torch.randn(params)
    read_fp32 = median_ms(lambda: fp32.sum(), 20)
    print(
        f"model {args.model}: {params / 1e6:.2f}M parameters ({params * 4 / 1e6:.0f} MB fp32); sequence {N} tokens, "
        f"{M} masked, {done} decoded; {args.threads} thread(s); median of {args.runs} runs"
    )
    print(
        f"floors: arithmetic of one row {2 * params / flops * 1e3:.3f} ms (fp32 matrix rate {flops / 1e9:.0f} "
        f"GFLOP/s); reading the weights once {read_fp32:.2f} ms in fp32 ({params * 4 / read_fp32 / 1e6:.0f} GB/s), "
        f"{read_fp32 / 4:.2f} ms in int8 at that rate"
    )
    names = list(next(iter(rows.values())))
    print(f"{'pass':18s}" + "".join(f"{n:>20s}" for n in names))
    for name, cells in rows.items():
        print(f"{name:18s}" + "".join(f"{cells[n]:17.2f} ms" for n in names))


if __name__ == "__main__":
    main()
