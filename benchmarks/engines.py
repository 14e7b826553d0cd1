"""What runs the models' forward passes fastest on this machine, side by side on the same weights, in one run.

`passes`: one cached pass of the AS-ARM (the default model unless --model) through each engine, interleaved
call by call, as a decoder makes them: a new problem (the prompt's pass over --context tokens, then one row), a
one-row draft, a ten-row draft and a ten-row verify, with --masked positions in the middle of the sequence,
5 of them decoded. Engines:
  torch        eager PyTorch, fp32 (infill.models.xlnet_cache.InPlacePass)
  torch-bf16   the net's weights in bf16 (only where the CPU has native bf16: AMX or AVX512-BF16, or CUDA)
  torch-int8   the same with the linear layers (feed-forward, head) dynamically quantized to int8 (CPU)
  onnx         ONNX Runtime on the graph exported from the same module, fp32 (CPU; the `onnx` extra)
  onnx-int8    the same graph with int8 weight matrices (CPU)
A new problem's pass is mostly the prompt's rows (arithmetic, not reading the weights). Each cell is the median
of --runs calls: wall time and the process's CPU time (the machine may be loaded: CPU time moves less with other
work). Also printed per engine: the largest logit difference to torch over the four calls, and whether the
ten-row verify's top tokens agree. Then the block-diffusion model's pass (a 4-token draft over a
--context-token cache) through the engines that run a stock transformers model (torch, torch-bf16, torch-int8;
the bf16 one is autocast, as the block-diffusion backend runs it).

`fills`: single-line tasks (HumanEval lines, and with --heldout held-out corpus lines) filled through
infill.api.fill_text with the tool's defaults (beam search, syntax check, retrieval) by each product engine
(torch, onnx, onnx-int8), interleaved task by task: the median fill and decoding time (wall), the fill's CPU
time, the paired median ratio of CPU times to torch's, how many fills are identical to torch's, and how many
equal the reference line (exact match).

`example`: the README's fill (examples/stats.py --span 9:9 with the tool's defaults) through each product engine,
interleaved: its passes, the decoder's wall time and the fill's CPU time.

    python benchmarks/engines.py passes --runs 30
    python benchmarks/engines.py fills --limit 60 --heldout runs/corpus --heldout-limit 60
    python benchmarks/engines.py example --runs 15
    python benchmarks/engines.py passes --device cuda      # torch engines only
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

PASSES = ("new problem", "draft, 1 row", "draft, 10 rows", "verify, 10 rows")


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of one call (on CUDA, until the device is done)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu


def interleaved(fns: dict[str, Callable[[], object]], runs: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) ms of each function, called in turn (rotated each round) after two warm-up rounds."""
    names = list(fns)
    for _ in range(2):
        for name in names:
            fns[name]()
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(runs):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            got[name].append(timed(fns[name]))
    return {
        n: (statistics.median(w for w, _ in v) * 1e3, statistics.median(c for _, c in v) * 1e3) for n, v in got.items()
    }


def asarm_engines(spec: Any, device: str) -> dict[str, Any]:
    """Engine name -> a model with `draft` and `verify` (an XLNetAnySubset where it can be one), same weights."""
    from infill.core.kinds import load
    from infill.hardware import fast_bf16
    from infill.models import onnx
    from infill.models.xlnet import XLNetAnySubset

    base = load(replace(spec, engine="torch")).model
    kw = {"mask_id": base.mask_id, "device": device}
    engines: dict[str, Any] = {"torch": base}
    dev = base.device.type
    if fast_bf16(dev):
        engines["torch-bf16"] = CacheOnly(copy.deepcopy(base.net).to(torch.bfloat16).freeze(), base.mask_id)
    if dev == "cpu":
        q8 = torch.ao.quantization.quantize_dynamic(copy.deepcopy(base.net), {torch.nn.Linear}, dtype=torch.qint8)
        engines["torch-int8"] = CacheOnly(q8, base.mask_id)
        if onnx.available():
            for name in ("onnx", "onnx-int8"):
                engines[name] = XLNetAnySubset(base.net, engine=name, **kw)
    return engines


class CacheOnly:
    """The cached pass of a net whose weights XLNetAnySubset would cast back to fp32 (bf16, int8)."""

    def __init__(self, net: Any, mask_id: int) -> None:
        from infill.models.xlnet_cache import XLNetKVCache

        self.cache = XLNetKVCache(net.eval())
        self.mask_id = mask_id

    def logits(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, verify: bool) -> Any:
        with torch.no_grad():
            out = self.cache.logits(ids, masked, n, targets, verify).float()
        out[:, self.mask_id] = float("-inf")
        return out

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> Any:
        return self.logits(ids, masked, n, targets, False)

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> Any:
        return self.logits(ids, masked, n, targets, True)


def passes(args: argparse.Namespace) -> None:
    from infill.config import ModelSpec

    engines = asarm_engines(ModelSpec(name=args.model, device=args.device, bf16=False), args.device)
    base = engines["torch"]
    N, M, done = args.context, args.masked, 5
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, base.vocab_size, (N,), generator=g)
    masked = torch.arange(N // 2, N // 2 + M)
    ids[masked] = base.mask_id
    ids[masked[:done]] = torch.randint(3, base.vocab_size, (done,), generator=g)
    drafted = ids.clone()
    drafted[masked[done : done + 10]] = torch.randint(3, base.vocab_size, (10,), generator=g)
    fresh = [ids.clone(), ids.clone()]  # two prompts that differ: each engine's call is a new problem
    fresh[1][1] = (int(ids[1]) + 1) % base.vocab_size
    turn: dict[int, int] = {}  # per model: the prompt of its last call

    def new_problem(m: Any) -> torch.Tensor:
        turn[id(m)] = 1 - turn.get(id(m), 0)
        return m.draft(fresh[turn[id(m)]], masked, done, masked[done : done + 1])

    calls: dict[str, Callable[[Any], torch.Tensor]] = {
        "new problem": new_problem,
        "draft, 1 row": lambda m: m.draft(ids, masked, done, masked[done : done + 1]),
        "draft, 10 rows": lambda m: m.draft(ids, masked, done, masked[done : done + 10]),
        "verify, 10 rows": lambda m: m.verify(drafted, masked, done, masked[done : done + 10]),
    }

    def call(engine: str, name: str) -> torch.Tensor:
        return calls[name](engines[engine])

    table: dict[str, dict[str, tuple[float, float]]] = {}
    for name in calls:
        table[name] = interleaved({e: (lambda e=e, name=name: call(e, name)) for e in engines}, args.runs)
    diff: dict[str, float] = {}
    agree: dict[str, bool] = {}
    for e in engines:
        worst = 0.0
        for name in calls:
            a = call(e, name)
            turn[id(engines["torch"])] = turn.get(id(engines[e]), 0) ^ 1  # the same problem for both
            b = call("torch", name)
            finite = torch.isfinite(b)
            worst = max(worst, float((a.float() - b)[finite].abs().max()))
            if name.startswith("verify"):
                agree[e] = bool(torch.equal(a.argmax(-1), b.argmax(-1)))
        diff[e] = worst
    params = sum(p.numel() for p in base.net.parameters())
    print(
        f"AS-ARM {args.model}: {params / 1e6:.2f}M parameters; sequence {N} tokens, {M} masked, {done} decoded; "
        f"{torch.get_num_threads()} thread(s), {describe_cpu()}; median of {args.runs} runs, ms wall / ms CPU"
    )
    print(f"{'pass':18s}" + "".join(f"{e:>20s}" for e in engines))
    for name, cells in table.items():
        print(f"{name:18s}" + "".join(f"{cells[e][0]:10.2f} /{cells[e][1]:7.2f}" for e in engines))
    print(f"{'max |logit diff|':18s}" + "".join(f"{diff[e]:>20.1e}" for e in engines))
    print(f"{'same top tokens':18s}" + "".join(f"{'yes' if agree[e] else 'no':>20s}" for e in engines))
    ratio = {e: table["draft, 1 row"]["torch"][1] / table["draft, 1 row"][e][1] for e in engines}
    print(f"{'1-row speed-up':18s}" + "".join(f"{ratio[e]:>19.2f}x" for e in engines))
    if not args.no_blockdiff:
        blockdiff_passes(args)


def blockdiff_passes(args: argparse.Namespace) -> None:
    """A 4-token draft over a --context-token cache of the packaged block-diffusion model, per engine."""
    from infill.config import ModelSpec
    from infill.core.kinds import load
    from infill.hardware import fast_bf16

    loaded = load(ModelSpec(name=args.blockdiff, device=args.device, bf16=False))
    bd = loaded.model
    models: dict[str, tuple[Any, bool]] = {"torch": (bd.model, False)}
    if fast_bf16(bd.device.type):
        models["torch-bf16"] = (bd.model, True)
    if bd.device.type == "cpu":
        models["torch-int8"] = (
            torch.ao.quantization.quantize_dynamic(copy.deepcopy(bd.model), {torch.nn.Linear}, dtype=torch.qint8),
            False,
        )
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, bd.vocab_size - 1, (args.context,), generator=g)
    block = torch.full((4,), bd.mask_id)
    states = {}
    for name, (net, bf16) in models.items():
        bd.model, bd.bf16 = net, bf16
        state = bd.new_state()
        bd.commit(state, prompt, bd.block_size)
        states[name] = state

    def draft(name: str) -> torch.Tensor:
        bd.model, bd.bf16 = models[name]
        out: torch.Tensor = bd.draft(states[name], block)
        return out

    cells = interleaved({name: (lambda name=name: draft(name)) for name in models}, args.runs)
    ref = draft("torch")
    params = sum(p.numel() for p in models["torch"][0].parameters())
    print(
        f"\nblock diffusion {args.blockdiff}: {params / 1e6:.2f}M parameters; 4-token draft over a "
        f"{args.context}-token cache; median of {args.runs} runs, ms wall / ms CPU"
    )
    print(f"{'pass':18s}" + "".join(f"{e:>20s}" for e in models))
    print(f"{'draft, 4 rows':18s}" + "".join(f"{cells[e][0]:10.2f} /{cells[e][1]:7.2f}" for e in models))
    diffs = {e: float((draft(e) - ref)[torch.isfinite(ref)].abs().max()) for e in models}
    print(f"{'max |logit diff|':18s}" + "".join(f"{diffs[e]:>20.1e}" for e in models))
    bd.model, bd.bf16 = models["torch"]


def describe_cpu() -> str:
    from infill.hardware import cpu_flags, fast_bf16

    bf16 = ", native bf16" if fast_bf16("cpu") else ""
    vnni = ", VNNI" if "avx512_vnni" in cpu_flags() or "avx_vnni" in cpu_flags() else ""
    return f"CPU {torch.backends.cpu.get_cpu_capability()}{bf16}{vnni}"


def fills(args: argparse.Namespace) -> None:
    from infill.config import TOOL_DECODE, FillOptions, ModelSpec
    from infill.evaluation.filling import FillOutcome, api_filler
    from infill.evaluation.humaneval import build_tasks, evenly_spaced, load_problems
    from infill.models import onnx
    from infill.models.registry import load

    engines = ["torch", *(["onnx", "onnx-int8"] if onnx.available() and args.device != "cuda" else [])]
    loaded = {e: load(ModelSpec(name=args.model, device=args.device, engine=e)) for e in engines}
    tasks: list[Any] = [("humaneval", t) for t in evenly_spaced(build_tasks(load_problems()), args.limit)]
    if args.heldout is not None:
        from infill.evaluation import heldout
        from infill.evaluation.filling import token_counter

        count = token_counter(loaded["torch"])
        picked = heldout.sample_line_tasks(heldout.corpus_heldout_files(args.heldout), args.heldout_limit)
        room = int(loaded["torch"].model.max_length) - 64
        tasks += [("held-out", replace(t, slot=heldout.crop_slot(t.slot, count, room))) for t in picked]
    fillers = {e: api_filler(loaded[e], TOOL_DECODE, FillOptions()) for e in engines}
    for e in engines:
        fillers[e](tasks[0][1].slot, None)  # warm-up
    runs: dict[str, list[FillOutcome]] = {e: [] for e in engines}
    cpu: dict[str, list[float]] = {e: [] for e in engines}  # the fill call's CPU time (moves less with load)
    started = time.perf_counter()
    for i, (_, task) in enumerate(tasks):
        for j in range(len(engines)):
            e = engines[(i + j) % len(engines)]
            before = time.process_time()
            runs[e].append(fillers[e](task.slot, None))
            cpu[e].append(time.process_time() - before)
        print(f"\r{i + 1}/{len(tasks)} tasks", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(
        f"model {args.model}, {len(tasks)} one-line tasks, the tool's defaults (beam {TOOL_DECODE.beam}), "
        f"{torch.get_num_threads()} thread(s), {describe_cpu()}, {time.perf_counter() - started:.0f} s"
    )
    print(
        f"{'engine':10s} {'fill med':>9s} {'decode med':>11s} {'fill CPU med':>13s} {'vs torch':>9s} {'same':>6s} "
        + " ".join(f"{'EM ' + s:>12s}" for s in sorted({s for s, _ in tasks}))
    )
    ref = runs["torch"]
    for e in engines:
        out = runs[e]
        vs = statistics.median(r / o for r, o in zip(cpu["torch"], cpu[e], strict=True))  # paired, CPU time
        same = sum(o.completion == r.completion for o, r in zip(out, ref, strict=True)) / len(out)
        em = {}
        for source in sorted({s for s, _ in tasks}):
            idx = [i for i, (s, _) in enumerate(tasks) if s == source]
            em[source] = sum(out[i].completion.strip() == tasks[i][1].slot.reference.strip() for i in idx) / len(idx)
        print(
            f"{e:10s} {statistics.median(o.seconds for o in out) * 1e3:7.1f}ms "
            f"{statistics.median(o.decode_seconds for o in out) * 1e3:9.1f}ms "
            f"{statistics.median(cpu[e]) * 1e3:11.1f}ms {vs:8.2f}x {same:6.0%} "
            + " ".join(f"{em[s]:>12.1%}" for s in sorted(em))
        )


def example(args: argparse.Namespace) -> None:
    """The README's fill (examples/stats.py --span 9:9, the tool's defaults) in this process, per engine."""
    from infill.api import fill_text
    from infill.config import TOOL_DECODE, ModelSpec
    from infill.models import onnx
    from infill.models.registry import load
    from infill.spans import Selection, resolve

    engines = ["torch", *(["onnx", "onnx-int8"] if onnx.available() and args.device != "cuda" else [])]
    loaded = {e: load(ModelSpec(name=args.model, device=args.device, engine=e)) for e in engines}
    text = (Path(__file__).resolve().parent.parent / "examples" / "stats.py").read_text(encoding="utf-8")
    spans = resolve(text.encode("utf-8"), [Selection("span", "9:9")], "python")
    results: dict[str, list[Any]] = {e: [] for e in engines}

    def run(e: str) -> None:
        cpu = time.process_time()
        result = fill_text(text, spans, language="python", model=loaded[e], decode=TOOL_DECODE)
        results[e].append((result, time.process_time() - cpu))

    interleaved({e: (lambda e=e: run(e)) for e in engines}, args.runs)
    print(
        f"examples/stats.py --span 9:9, the tool's defaults, in-process; {torch.get_num_threads()} thread(s), "
        f"{describe_cpu()}; median of {args.runs} fills"
    )
    print(f"{'engine':10s} {'passes':>7s} {'decoding wall':>14s} {'fill CPU':>9s}  fill")
    for e, runs in results.items():
        runs = runs[2:]  # after the warm-up rounds
        result = runs[0][0]
        wall = statistics.median(r.stats["seconds"] for r, _ in runs)
        print(
            f"{e:10s} {result.stats['nfe']:>7d} {wall * 1e3:>12.1f}ms "
            f"{statistics.median(c for _, c in runs) * 1e3:>7.1f}ms  {result.edits[0].text.strip()!r}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["passes", "fills", "example"])
    ap.add_argument("--model", default="default")
    ap.add_argument("--blockdiff", default="blockdiff", help="block-diffusion model for `passes`")
    ap.add_argument("--no-blockdiff", action="store_true", help="skip the block-diffusion passes")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--context", type=int, default=256, help="sequence length in tokens (passes)")
    ap.add_argument("--masked", type=int, default=24, help="masked positions (passes)")
    ap.add_argument("--limit", type=int, default=60, help="HumanEval single-line tasks (fills)")
    ap.add_argument("--heldout", type=Path, default=None, help="corpus folder: add held-out lines (fills)")
    ap.add_argument("--heldout-limit", type=int, default=60)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import os

    os.environ["INFILL_THREADS"] = str(args.threads)
    {"passes": passes, "fills": fills, "example": example}[args.what](args)


if __name__ == "__main__":
    main()
