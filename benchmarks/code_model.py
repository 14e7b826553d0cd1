"""What one fill costs with a left-to-right code model on this CPU, on both engines (docs/code-models.md).

The models have RANDOM weights in Qwen2.5-Coder's exact shapes, so a pass costs what the real model's does and
their fills are noise: 0.5B (hidden 896, 24 layers, 14 query / 2 key-value heads, feed-forward 4864, vocabulary
151,936, tied embeddings: 494M parameters) and, for llama.cpp, 1.5B (hidden 1536, 28 layers, 12 / 2 heads,
feed-forward 8960: 1.54B). Their tokenizer is a byte-level BPE of 8,192 tokens trained here on a few standard
library modules (Qwen's own has 151,643 and writes code in somewhat fewer tokens).

llama.cpp (`--engines llamacpp`): each shape written once as a Q8_0 GGUF file (infill.models.tiny_gguf, /tmp),
loaded through `infill.api.load_model` as `--model FILE.gguf` loads it, one thread. In one process:
  - one more token: the tool's pass (CausalFim.draft of the next position: llama.cpp's decode of one token, the
    logits copied out and the model's fixed changes applied) against llama.cpp's own evaluation of the same token
    on the same context (llama_decode and the logits pointer), taking turns, --passes of each, medians;
  - a one-line fill of `examples/stats.py --span 9` through `infill.api.fill_text` with greedy decoding, greedy
    lookup drafts and beam search of widths 1, 2 and 4, first with an empty cache (the first fill of the file) and
    again right after (the prompt cached: what a keystroke costs), --runs rounds, decoders taking turns, medians;
  - the resident memory of a fresh process that loads the 0.5B file and fills once (VmRSS and its peak, VmHWM),
    and of the same process without the model.
torch (`--engines torch`): the 0.5B shape as a folder of bf16 weights (built once, 2 GB, /tmp), the same fills
(beam 4, greedy, greedy lookup, sampled lookup) and the cost of one pass per precision, and the cold command.

The syntax check is off everywhere, and a fill is one sample (no resampling of a fill that splits a UTF-8
character): a random model's lines never parse, and the resampling and wider beam search that would trigger are
not what a real model costs. Every fill runs its whole token budget (a random model rarely writes a line break
or an end token).

    python benchmarks/code_model.py --runs 5                      # both engines, every shape
    python benchmarks/code_model.py --engines llamacpp --shapes 0.5b --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "stats.py"
LINE = "9"
TOKENIZER_SOURCES = ("ast.py", "dataclasses.py", "argparse.py", "pathlib/_local.py", "textwrap.py", "statistics.py")


def build(folder: Path) -> None:
    from infill.models.tiny import QWEN_CODER_05B_SHAPE, tiny_ar_checkpoint

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(stdlib / name).read_text() for name in TOKENIZER_SOURCES if (stdlib / name).is_file()]
    tiny_ar_checkpoint(folder, "qwen", texts=texts, vocab_size=8192, shape=QWEN_CODER_05B_SHAPE, scale=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/infill-qwen-0.5b-shape"))
    parser.add_argument("--gguf-dir", type=Path, default=Path("/tmp/infill-bench"), help="where the GGUF files go")
    parser.add_argument("--engines", default="llamacpp,torch", help="llamacpp, torch or both [both]")
    parser.add_argument("--shapes", default="0.5b,1.5b", help="llama.cpp's shapes: 0.5b, 1.5b [both]")
    parser.add_argument("--runs", type=int, default=3, help="rounds of every decoder [3]")
    parser.add_argument("--passes", type=int, default=30, help="one-token passes of each kind [30]")
    parser.add_argument("--cli-runs", type=int, default=2, help="cold CLI commands (torch) [2]")
    parser.add_argument("--memory-of", type=Path, help=argparse.SUPPRESS)  # the memory probe's child process
    args = parser.parse_args()
    if args.memory_of is not None:
        memory_probe(args.memory_of)
        return
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    engines = args.engines.split(",")
    if "llamacpp" in engines:
        for shape in args.shapes.split(","):
            llama_cpp_costs(args.gguf_dir, shape, args.runs, args.passes, memory=shape == "0.5b")
    if "torch" in engines:
        torch_costs(args)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


SHAPES = {"0.5b": "QWEN_CODER_05B_SHAPE", "1.5b": "QWEN_CODER_15B_SHAPE"}
BEFORE = "beam 4, a pass per hypothesis"  # beam search as it ran before its one batched pass per step
LLAMA_DECODERS = {
    "greedy": {"decoder": "sequential", "temperature": 0},
    "greedy lookup": {"decoder": "assd", "draft": "lookup", "temperature": 0},
    "beam 1": {"decoder": "beam", "beam": 1, "temperature": 0},
    "beam 2": {"decoder": "beam", "beam": 2, "temperature": 0},
    "beam 4": {"decoder": "beam", "beam": 4, "temperature": 0},
    BEFORE: {"decoder": "beam", "beam": 4, "temperature": 0},
}


def gguf_file(directory: Path, shape: str) -> Path:
    """The random Q8_0 GGUF of `shape`, built once."""
    from infill.models import tiny
    from infill.models.tiny_gguf import random_qwen_gguf

    path = directory / f"qwen-{shape}-q8_0.gguf"
    if not path.is_file():
        started = time.perf_counter()
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        texts = [(stdlib / name).read_text() for name in TOKENIZER_SOURCES if (stdlib / name).is_file()]
        random_qwen_gguf(path, getattr(tiny, SHAPES[shape]), texts)
        print(f"built {path} in {time.perf_counter() - started:.0f} s")
    return path


def llama_cpp_costs(directory: Path, shape: str, runs: int, passes: int, memory: bool) -> None:
    """One token (the tool's pass against llama.cpp's own), the one-line fills, and memory, for one shape."""
    import torch

    from infill import api
    from infill.config import DecodeConfig, ModelSpec
    from infill.spans import Selection, resolve

    path = gguf_file(directory, shape)
    torch.set_num_threads(1)
    started = time.perf_counter()
    loaded = api.load_model(ModelSpec(name=str(path)))
    model: Any = loaded.model
    print(
        f"\n== llama.cpp, Qwen2.5-Coder-{shape.upper()} shape, Q8_0 ({path.stat().st_size / 2**20:.0f} MiB), "
        f"{loaded.info['threads']} thread: load {time.perf_counter() - started:.1f} s"
    )
    text = EXAMPLE.read_text()
    spans = resolve(text.encode(), (Selection("span", LINE),), "python", str(EXAMPLE))
    ours, own = one_token(model, loaded.tokenizer, text, spans, passes)
    print(
        f"one more token ({passes} of each, taking turns, medians): the tool's pass {statistics.median(ours) * 1e3:.1f}"
        f" ms, llama.cpp's own {statistics.median(own) * 1e3:.1f} ms, ratio "
        f"{statistics.median(ours) / statistics.median(own):.3f}"
    )
    decoders = {name: DecodeConfig(**cfg) for name, cfg in LLAMA_DECODERS.items()}  # type: ignore[arg-type]

    def fill(cfg: DecodeConfig, name: str = "") -> tuple[float, dict[str, Any], str]:
        return timed_fill(loaded, text, spans, cfg, per_hypothesis=name == BEFORE)

    fill(decoders["greedy"])  # warm-up: the line-break table
    times: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in decoders}
    seen: dict[str, tuple[dict[str, Any], str]] = {}
    for _ in range(runs):
        for name, cfg in decoders.items():
            model.engine.forget()  # an empty cache: the first fill of this file
            times[name]["cold"].append(fill(cfg, name)[0])
            seconds, stats, edit = fill(cfg, name)  # the prompt cached: a keystroke
            times[name]["warm"].append(seconds)
            seen[name] = (stats, edit)
    prompt = len(loaded.tokenizer.encode(text))
    print(f"examples/stats.py ({prompt} tokens) --span {LINE}; {runs} rounds, decoders interleaved, medians")
    print(f"{'decoder':<30} {'first fill s':>12} {'prompt cached s':>15} {'passes':>7} {'tokens':>7}")
    for name in decoders:
        stats, _ = seen[name]
        cold, warm = statistics.median(times[name]["cold"]), statistics.median(times[name]["warm"])
        print(f"{name:<30} {cold:>12.2f} {warm:>15.2f} {stats['nfe']:>7} {stats['tokens']:>7}")
    greedy = {seen[name][1] for name in ("greedy", "greedy lookup", "beam 1")}
    print(f"greedy, greedy lookup and beam 1 wrote the same fill: {len(greedy) == 1}")
    print(f"beam 4 batched and a pass per hypothesis wrote the same fill: {seen['beam 4'][1] == seen[BEFORE][1]}")
    if memory:
        resident(path)


def timed_fill(
    loaded: Any, text: str, spans: Any, cfg: Any, per_hypothesis: bool = False
) -> tuple[float, dict[str, Any], str]:
    """Seconds, stats and the edit of one fill through infill.api.fill_text (syntax check off, one sample);
    `per_hypothesis`: beam search as it ran before, one pass per hypothesis (the model's draft_many hidden)."""
    from infill import api
    from infill.config import FillOptions

    options = FillOptions(syntax_check=False, max_resample=0, allow_syntax_errors=True)
    model = loaded.model
    if per_hypothesis:
        model.draft_many = None  # beam search then takes one pass per hypothesis
    try:
        start = time.perf_counter()
        result = api.fill_text(text, spans, language="python", model=loaded, decode=cfg, options=options)
        return time.perf_counter() - start, result.stats, result.edits[0].text
    finally:
        model.__dict__.pop("draft_many", None)


def one_token(model: Any, tokenizer: Any, text: str, spans: Any, passes: int) -> tuple[list[float], list[float]]:
    """Seconds of the tool's pass over one more token, and of llama.cpp's own decode of the same token on the same
    context, taking turns. Both leave the cache as it was: the prompt and the first fill token in one slot."""
    import torch

    engine, lib = model.engine, model.engine.lib
    data = text.encode()
    prefix = tokenizer.encode(data[: spans[0].start_byte].decode())
    suffix = tokenizer.encode(data[spans[0].end_byte :].decode())
    first = prefix[-1]
    ids = torch.tensor([*prefix, first, model.mask_id, *suffix])
    masked = torch.tensor([len(prefix), len(prefix) + 1])
    model.draft(ids, masked, 1, masked[1:2])  # the prompt and the first token, in the cache
    seq = model.prompt(prefix, suffix) + [first]
    slot = next(j for j, held in enumerate(engine._held) if held == seq)
    batch = lib.llama_batch_init(1, 0, 1)
    batch.n_tokens = 1
    batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = first, len(seq) - 1, 1, 1
    batch.seq_id[0][0] = slot
    ours, own = [], []
    for _ in range(passes):
        start = time.perf_counter()
        model.draft(ids, masked, 1, masked[1:2])  # recomputes the last token (a pass's last row always is)
        ours.append(time.perf_counter() - start)
        lib.llama_memory_seq_rm(engine._memory, slot, len(seq) - 1, -1)
        start = time.perf_counter()
        if lib.llama_decode(engine._ctx, batch) != 0:
            raise SystemExit("llama_decode failed")
        lib.llama_get_logits_ith(engine._ctx, 0)
        own.append(time.perf_counter() - start)
    lib.llama_batch_free(batch)
    return ours, own


def resident(path: Path) -> None:
    """VmRSS and VmHWM of a fresh process that loads `path` and fills once, and of one that only imports."""
    with_model = json.loads(
        subprocess.run(
            [sys.executable, __file__, "--memory-of", str(path)], capture_output=True, text=True, check=True
        ).stdout
    )
    without = json.loads(
        subprocess.run(
            [sys.executable, __file__, "--memory-of", "none"], capture_output=True, text=True, check=True
        ).stdout
    )
    print(
        f"resident memory, MiB (VmRSS / peak VmHWM): a process that loaded the file and filled once "
        f"{with_model['rss'] / 2**20:.0f} / {with_model['hwm'] / 2**20:.0f}; the same imports without the model "
        f"{without['rss'] / 2**20:.0f} / {without['hwm'] / 2**20:.0f}"
    )


def memory_probe(path: Path) -> None:
    """The child of `resident`: import what a fill imports, load `path` (unless "none") and fill once."""
    import llama_cpp  # noqa: F401  (imported in both probes: the library's own pages)
    import torch  # noqa: F401

    from infill import api
    from infill.config import DecodeConfig, FillOptions, ModelSpec
    from infill.spans import Selection, resolve

    if str(path) != "none":
        text = EXAMPLE.read_text()
        spans = resolve(text.encode(), (Selection("span", LINE),), "python", str(EXAMPLE))
        options = FillOptions(syntax_check=False, max_resample=0, allow_syntax_errors=True)
        cfg = DecodeConfig(decoder="beam", beam=4, temperature=0)
        api.fill_text(text, spans, language="python", model=ModelSpec(str(path)), decode=cfg, options=options)
    status = Path("/proc/self/status").read_text()
    fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in status.splitlines() if line[:2] == "Vm"}
    print(json.dumps({"rss": fields["VmRSS"], "hwm": fields["VmHWM"]}))


def torch_costs(args: argparse.Namespace) -> None:
    """The eager PyTorch engine on the 0.5B folder (bf16 weights where bf16 is fast)."""
    import torch

    from infill import api
    from infill.config import TOOL_DECODE, DecodeConfig, ModelSpec
    from infill.core.tokens import token_sets
    from infill.spans import Selection, resolve

    if not (args.folder / "config.json").is_file():
        started = time.perf_counter()
        build(args.folder)
        print(f"built {args.folder} in {time.perf_counter() - started:.0f} s")
    torch.set_num_threads(1)
    print("\n== eager PyTorch, Qwen2.5-Coder-0.5B shape, torch threads 1")

    started = time.perf_counter()
    loaded = api.load_model(ModelSpec(name=str(args.folder)))
    print(
        f"load: {time.perf_counter() - started:.1f} s  ({loaded.info['parameters'] / 1e6:.0f}M parameters, "
        f"{loaded.info['dtype']} weights, FIM {loaded.info['fim']})"
    )
    started = time.perf_counter()
    token_sets(loaded.tokenizer, loaded.model.vocab_size)
    print(f"line-break table over the 151,936 ids (once per process): {time.perf_counter() - started:.2f} s")

    text = EXAMPLE.read_text()
    spans = resolve(text.encode(), (Selection("span", LINE),), "python", str(EXAMPLE))
    decoders = {
        "beam 4": TOOL_DECODE,
        BEFORE: TOOL_DECODE,
        "greedy": DecodeConfig(decoder="sequential", temperature=0),
        "greedy lookup": DecodeConfig(decoder="assd", draft="lookup", temperature=0),
        "sample lookup": DecodeConfig(decoder="assd", draft="lookup", temperature=0.8),
    }
    model: Any = loaded.model

    def fill(cfg: DecodeConfig, name: str = "") -> tuple[float, dict[str, Any], str]:
        return timed_fill(loaded, text, spans, cfg, per_hypothesis=name == BEFORE)

    prompt = len(loaded.tokenizer.encode(text))
    fill(TOOL_DECODE)  # warm-up
    times: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in decoders}
    seen: dict[str, tuple[dict[str, Any], str]] = {}
    for _ in range(args.runs):
        for name, cfg in decoders.items():
            model.engine.forget()  # an empty prompt cache: the first fill of this file
            seconds, stats, edit = fill(cfg, name)
            times[name]["cold"].append(seconds)
            seconds, stats, edit = fill(cfg, name)
            times[name]["warm"].append(seconds)
            seen[name] = (stats, edit)
    print(f"\nexamples/stats.py ({prompt} tokens) --span {LINE}; {args.runs} rounds, decoders interleaved, medians")
    print(f"{'decoder':<30} {'first fill s':>12} {'again s':>8} {'passes':>7} {'tokens':>7}  fill")
    for name in decoders:
        stats, edit = seen[name]
        cold, warm = statistics.median(times[name]["cold"]), statistics.median(times[name]["warm"])
        print(f"{name:<30} {cold:>12.2f} {warm:>8.2f} {stats['nfe']:>7} {stats['tokens']:>7}  {edit.strip()[:40]!r}")
    greedy = {seen[name][1] for name in ("greedy", "greedy lookup")}
    print(f"greedy and greedy lookup wrote the same fill: {len(greedy) == 1}")
    print(f"beam 4 batched and a pass per hypothesis wrote the same fill: {seen['beam 4'][1] == seen[BEFORE][1]}")

    passes(args.folder, loaded, text, spans, args.runs)

    command = [sys.executable, "-m", "infill", "fill", str(EXAMPLE), "--span", LINE, "--model", str(args.folder)]
    command += ["--diff", "--daemon", "off", "--no-syntax-check", "--allow-syntax-errors"]
    walls = []
    for _ in range(args.cli_runs):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, capture_output=True, timeout=1800)
        walls.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"failed ({done.returncode}): {done.stderr.decode()}")
    print(f"\ncold CLI command ({args.cli_runs} runs, median): {statistics.median(walls):.1f} s")


def passes(folder: Path, loaded: Any, text: str, spans: Any, runs: int) -> None:
    """Median seconds of a prompt pass and of a one-row pass, per precision, taking turns."""
    import contextlib

    import torch

    from infill import api
    from infill.config import ModelSpec

    fp32 = api.load_model(ModelSpec(name=str(folder), bf16=False))
    tok = loaded.tokenizer
    start, end = spans[0].start_byte, spans[0].end_byte
    data = text.encode()
    prefix, suffix = tok.encode(data[:start].decode()), tok.encode(data[end:].decode())
    mask = loaded.model.mask_id
    ids = torch.tensor([*prefix, prefix[-1], mask, *suffix])  # the first fill token, given for the one-row pass
    masked = torch.tensor([len(prefix), len(prefix) + 1])
    kinds: dict[str, tuple[Any, Any]] = {
        f"{loaded.info['dtype']} weights (as loaded)": (loaded.model, contextlib.nullcontext),
        "fp32 weights, bf16 autocast": (fp32.model, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
        "fp32": (fp32.model, contextlib.nullcontext),
    }
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in kinds}
    for _ in range(runs):
        for name, (model, context) in kinds.items():
            model.engine.forget()
            with context():
                begin = time.perf_counter()
                model.draft(ids, masked, 0, masked[:1])
                middle = time.perf_counter()
                model.draft(ids, masked, 1, masked[1:])
                times[name][0].append(middle - begin)
                times[name][1].append(time.perf_counter() - middle)
    print(f"\none pass, {len(prefix) + len(suffix) + 3}-token prompt ({runs} runs each, taking turns, medians)")
    for name, (prompt, row) in times.items():
        print(f"{name:<28} prompt {statistics.median(prompt):.2f} s   one row {statistics.median(row):.3f} s")


if __name__ == "__main__":
    main()
