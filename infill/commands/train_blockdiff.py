"""`infill train block-diffusion`: train a small Qwen3-architecture block-diffusion model (FIM formatting) and
save it in the SDAR folder layout, loadable with `infill fill --model FOLDER --decoder s2d2`.

Attached to the `train` group by infill/commands/train.py. torch is imported only when the command runs."""

from __future__ import annotations

from typing import Any

import click

from infill.clitypes import POSITIVE, FiniteFloatRange, IntRange, NonEmptyPath, settings_from_flags, value_option
from infill.commands.training import (
    batch_size_option,
    bf16_option,
    block_sizes_option,
    device_option,
    fim_rate_option,
    log_every_option,
    lr_option,
    parse_until,
    path_option,
    seed_option,
    threads_option,
    time_limit_option,
    under_torchrun,
    until_option,
)
from infill.errors import InputError


@click.command("block-diffusion")
@click.option(
    "--data",
    "--corpus",
    "data",
    multiple=True,
    required=True,
    type=NonEmptyPath(exists=True),
    help="Training text: files, directories (searched with --glob), an AS-ARM corpus directory "
    "(train.jsonl), or one pack from `infill train pack` (.npz; needs --init or --tokenizer). Repeatable.",
)
@click.option("--glob", default="*.py", help="File pattern inside --data directories.")
@click.option("--out", required=True, type=NonEmptyPath(file_okay=False), help="Output model folder.")
@path_option(
    "--tokenizer",
    exists=True,
    dir_okay=False,
    help="Reuse this tokenizer.json (e.g. the AS-ARM's); the FIM / mask / end tokens are added to it.",
)
@value_option("--vocab-size", IntRange(512, 65535), 8192, "BPE size when no --tokenizer is given.")
@click.option("--steps", type=POSITIVE, default=1000)
@batch_size_option(16)
@click.option("--seq-len", type=IntRange(16), default=256)
@block_sizes_option("1,4,8,16", 1, "Block sizes drawn per step; keep 1 so the AR (S2D2 verifier) mode is trained.")
@lr_option()
@click.option(
    "--warmup", type=IntRange(0), default=None, help="Warm-up steps [default: a tenth of --steps, at most 100]."
)
@click.option("--hidden", type=IntRange(8), default=256)
@click.option("--layers", type=POSITIVE, default=4)
@click.option("--heads", type=POSITIVE, default=4)
@click.option("--kv-heads", type=POSITIVE, default=2)
@seed_option()
@bf16_option
@device_option
@value_option(
    "--save-dtype",
    click.Choice(["float32", "bfloat16"]),
    "float32",
    "dtype of the saved weights (bfloat16: half the size; loaded back as fp32).",
)
@value_option(
    "--shard-mb", FiniteFloatRange(0), 0.0, "Save the weights as shards of at most this many MB (0 = one file)."
)
@time_limit_option
@until_option
@threads_option(0, "torch CPU threads (0 = torch's default).")
@log_every_option(50)
@value_option("--save-minutes", FiniteFloatRange(0), 0.0, "Also save --out every N minutes (0 = at end).")
@fim_rate_option(0.9)
@click.option("--max-middle", type=POSITIVE, default=64, help="Longest FIM middle, in tokens.")
@value_option(
    "--loss-on",
    click.Choice(["middle", "all"]),
    "middle",
    "Noise only a FIM example's middle, or every token (prefix and suffix learned left to right too).",
)
@value_option(
    "--line-rate", FiniteFloatRange(0, 1), 0.0, "Share of FIM middles that are 1-3 whole lines, as a user's --span."
)
@path_option(
    "--init",
    exists=True,
    file_okay=False,
    help="Continue from this block-diffusion folder's weights, shape and tokenizer (e.g. infill/weights/blockdiff).",
)
@path_option(
    "--run-dir",
    file_okay=False,
    help="Keep a resumable checkpoint here (last.pt); a run with the same --run-dir resumes from it, and "
    "--time-limit is then the training time across resumes.",
)
def block_diffusion(data: tuple[str, ...], glob: str, out: str, threads: int, **flags: Any) -> None:
    """Train a block-diffusion model (BD3-LM / SDAR objective, fill-in-the-middle formatting); runs under
    torchrun."""
    from pathlib import Path

    from infill.hardware import fast_bf16
    from infill.models.blockdiff_folder import ModelShape
    from infill.training.blockdiff import TrainConfig, load_texts, train

    hidden, heads = flags["hidden"], flags["heads"]
    if hidden % heads or heads % flags["kv_heads"]:
        raise InputError(f"--hidden ({hidden}) must divide by --heads ({heads}), and --heads by --kv-heads")
    packs = [Path(d) for d in data if d.endswith(".npz")]
    if packs and (len(data) > 1 or not (flags["init"] or flags["tokenizer"])):
        raise InputError(
            "a pack (.npz) is the only --data, with --init or --tokenizer (the tokenizer it was packed with)"
        )
    texts = [] if packs else load_texts(data, glob)
    if not texts and not packs:
        raise InputError(f"no training text found in {', '.join(data)} (pattern {glob})")
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    cfg = settings_from_flags(
        TrainConfig,
        warmup=min(100, max(1, flags["steps"] // 10)) if flags["warmup"] is None else flags["warmup"],
        time_limit=flags["time_limit"] * 60,
        until=parse_until(flags["until"]),
        bf16=fast_bf16(flags["device"]) if flags["bf16"] is None else flags["bf16"],
    )
    shape = settings_from_flags(
        ModelShape, head_dim=hidden // heads, intermediate=3 * hidden, max_length=max(512, cfg.seq_len)
    )
    summary = under_torchrun(
        lambda world: train(
            texts,
            out,
            cfg,
            pack=packs[0] if packs else None,
            shape=shape,
            tokenizer_path=flags["tokenizer"],
            vocab_size=flags["vocab_size"],
            init=flags["init"],
            run_dir=flags["run_dir"],
            log=lambda line: click.echo(line, err=True),
            world=world,
        ),
        f"block diffusion: {packs[0] if packs else f'{len(texts)} documents'} -> {out}",
        device=flags["device"],
    )
    if summary is None:
        return
    click.echo(
        f"saved {out}: {summary['parameters'] / 1e6:.1f}M parameters, {summary['steps']} steps, "
        f"loss {summary['final_loss']:.3f}, {summary['seconds']}s"
    )
