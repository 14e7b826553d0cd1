"""What one fill costs with a 0.5B left-to-right code model on this CPU (docs/code-models.md).

The model has RANDOM weights in Qwen2.5-Coder-0.5B's shape (hidden 896, 24 layers, 14 query / 2 key-value heads,
feed-forward 4864, vocabulary 151,936, tied embeddings: 494M parameters), so a pass costs what the real model's
does, and its fills are noise. Its tokenizer is a byte-level BPE of 8,192 tokens trained here on a few standard
library modules (Qwen's own has 151,643 and writes code in somewhat fewer tokens).

In one process, after loading the folder (timed) and one warm-up fill: `examples/stats.py --span 9` through
`infill.api.fill_text` (the path `infill fill` takes) with each decoder in turn, --runs rounds, medians:

  beam 4          the default (`infill fill` with no decoder flag)
  greedy          --decoder sequential --temperature 0
  greedy lookup   --decoder assd --temperature 0 (prompt-lookup drafts verified in one pass; same output)
  sample lookup   --decoder assd --temperature 0.8

each first with an empty prompt cache (the first fill of that file: the prompt is computed) and then again right
after (warm: only the fill's own tokens are recomputed, as a daemon or editor refilling the same place does).
Then the cost of one pass in each precision: the whole prompt (cache empty) and one more row (cache warm), with
bf16 weights (what loads on CPUs with fast bf16), fp32 weights under a bf16 autocast, and fp32. Then the cold
command as a user types it, in a fresh process: `infill fill examples/stats.py --span 9 --model
FOLDER --diff --daemon off --no-syntax-check --allow-syntax-errors`.

The syntax check is off everywhere, and a fill is one sample (no resampling of a fill that splits a UTF-8
character): a random model's lines never parse, and the resampling and wider beam search that would trigger are
not what a real model costs. Every fill runs its whole token budget (a random model rarely writes a line break
or an end token).

    python benchmarks/code_model.py --folder /tmp/qwen-shape   # builds the 2 GB folder once, then reuses it
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--runs", type=int, default=3, help="rounds of every decoder [3]")
    parser.add_argument("--cli-runs", type=int, default=2, help="cold CLI commands [2]")
    args = parser.parse_args()

    import torch

    from infill import api
    from infill.config import TOOL_DECODE, DecodeConfig, FillOptions, ModelSpec
    from infill.core.backends import token_sets
    from infill.spans import Selection, resolve

    if not (args.folder / "config.json").is_file():
        started = time.perf_counter()
        build(args.folder)
        print(f"built {args.folder} in {time.perf_counter() - started:.0f} s")
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; torch threads 1")

    started = time.perf_counter()
    loaded = api.load_model(ModelSpec(name=str(args.folder)))
    print(
        f"load: {time.perf_counter() - started:.1f} s  ({loaded.info['parameters'] / 1e6:.0f}M parameters, "
        f"{loaded.info['dtype']} weights, FIM {loaded.info['fim']})"
    )
    started = time.perf_counter()
    token_sets(loaded.tokenizer, loaded.model.vocab_size)  # type: ignore[union-attr]
    print(f"line-break table over the 151,936 ids (once per process): {time.perf_counter() - started:.2f} s")

    text = EXAMPLE.read_text()
    spans = resolve(text.encode(), (Selection("span", LINE),), "python", str(EXAMPLE))
    options = FillOptions(syntax_check=False, max_resample=0, allow_syntax_errors=True)
    decoders = {
        "beam 4": TOOL_DECODE,
        "greedy": DecodeConfig(decoder="sequential", temperature=0),
        "greedy lookup": DecodeConfig(decoder="assd", draft="lookup", temperature=0),
        "sample lookup": DecodeConfig(decoder="assd", draft="lookup", temperature=0.8),
    }
    model: Any = loaded.model

    def fill(cfg: DecodeConfig) -> tuple[float, dict[str, Any], str]:
        start = time.perf_counter()
        result = api.fill_text(text, spans, language="python", model=loaded, decode=cfg, options=options)
        return time.perf_counter() - start, result.stats, result.edits[0].text

    prompt = len(loaded.tokenizer.encode(text))
    fill(TOOL_DECODE)  # warm-up
    times: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in decoders}
    seen: dict[str, tuple[dict[str, Any], str]] = {}
    for _ in range(args.runs):
        for name, cfg in decoders.items():
            model.engine.forget()  # an empty prompt cache: the first fill of this file
            seconds, stats, edit = fill(cfg)
            times[name]["cold"].append(seconds)
            seconds, stats, edit = fill(cfg)
            times[name]["warm"].append(seconds)
            seen[name] = (stats, edit)
    print(f"\nexamples/stats.py ({prompt} tokens) --span {LINE}; {args.runs} rounds, decoders interleaved, medians")
    print(f"{'decoder':<14} {'first fill s':>12} {'again s':>8} {'passes':>7} {'tokens':>7}  fill")
    for name in decoders:
        stats, edit = seen[name]
        cold, warm = statistics.median(times[name]["cold"]), statistics.median(times[name]["warm"])
        print(f"{name:<14} {cold:>12.2f} {warm:>8.2f} {stats['nfe']:>7} {stats['tokens']:>7}  {edit.strip()[:40]!r}")
    greedy = {seen[name][1] for name in ("greedy", "greedy lookup")}
    print(f"greedy and greedy lookup wrote the same fill: {len(greedy) == 1}")

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
    print(f"load average after: {os.getloadavg()[0]:.2f}")


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
        "bf16 weights": (loaded.model, contextlib.nullcontext),
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
