"""`infill train ssmd`: train an SSMD head (infill.models.ssmd) on a frozen block-diffusion model, so that
`infill fill --decoder ssmd` can run it. Resumable: a second run with the same --out continues from its
checkpoint.

Attached to the `train` group by infill/commands/train.py. torch is imported only when the command runs."""

from __future__ import annotations

from typing import Any

import click

from infill.clitypes import POSITIVE, settings_from_flags
from infill.commands.training import (
    batch_size_option,
    block_sizes_option,
    corpus_option,
    fim_rate_option,
    log_every_option,
    lr_option,
    run_folder_option,
    seed_option,
    threads_option,
    time_limit_option,
    under_torchrun,
)
from infill.errors import InputError, ModelError


@click.command("ssmd")
@click.option("--model", "model_name", default="blockdiff", help="Block-diffusion model (frozen).")
@corpus_option("data")
@run_folder_option(
    "Run folder: checkpoint.pt, log.jsonl, and ssmd_head.safetensors at the end. Copy the head beside the model's "
    "weights to use it."
)
@click.option("--steps", type=POSITIVE, default=3000)
@batch_size_option(16)
@click.option("--seq-len", type=POSITIVE, default=256, help="Tokens per example (a multiple of the blocks).")
@block_sizes_option("4,8,16", 2, "Drawn one per step.", " (a block of 1 has nothing to verify)")
@lr_option()
@click.option("--heads", type=POSITIVE, default=4, help="Attention heads of the causal layer.")
@click.option("--intermediate", type=POSITIVE, default=512, help="Feed-forward width of the causal layer.")
@click.option("--max-block", type=POSITIVE, default=32, help="Largest block size the head will decode.")
@fim_rate_option(0.5)
@click.option("--max-docs", type=POSITIVE, default=2000, help="Training documents drawn from the corpus.")
@seed_option()
@time_limit_option
@threads_option()
@log_every_option(25)
@click.option("--eval-every", type=POSITIVE, default=250, help="Held-out cross-entropy every N steps.")
@click.option("--eval-examples", type=POSITIVE, default=48)
@click.option("--resume/--no-resume", default=True, help="Continue from --out's checkpoint.")
def ssmd(model_name: str, data: str, out: str, threads: int, resume: bool, **flags: Any) -> None:
    """Train an SSMD causal head on a frozen block-diffusion model (teacher-forced causal cross-entropy); runs
    under torchrun."""
    from pathlib import Path

    import torch
    from tokenizers import Tokenizer

    from infill.api import load_model
    from infill.config import ModelSpec
    from infill.models.ssmd import HeadShape
    from infill.training.blockdiff import load_texts
    from infill.training.corpus import balanced_records
    from infill.training.ssmd import SSMDTrainConfig, train_head

    steps, eval_every = flags["steps"], flags["eval_every"]
    cfg = settings_from_flags(
        SSMDTrainConfig,
        warmup=min(50, max(1, steps // 10)),
        time_limit=flags["time_limit"] * 60,
        save_every=max(1, min(100, eval_every)),
    )
    if any(cfg.seq_len % b for b in cfg.block_sizes) or max(cfg.block_sizes) > flags["max_block"]:
        raise InputError(f"--seq-len ({cfg.seq_len}) must be a multiple of every block size, each <= --max-block")
    if threads > 0:
        torch.set_num_threads(threads)
    loaded = load_model(ModelSpec(name=model_name, device="cpu", bf16=False))
    try:
        base = loaded.blockdiff.model
    except ModelError:
        raise InputError(f"--model {model_name} is not a block-diffusion model") from None
    folder = Path(str(loaded.info["path"]))
    shape = settings_from_flags(HeadShape, hidden=int(base.config.hidden_size))
    if shape.hidden % shape.heads:
        raise InputError(f"the model's width {shape.hidden} does not divide by --heads {shape.heads}")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    texts = load_texts([data])
    heldout = [r["text"] for r in balanced_records(Path(data), "heldout", 6_000_000) if r["text"].strip()]
    if not texts or not heldout:
        raise InputError(f"{data}: needs a train and a held-out split")
    summary = under_torchrun(
        lambda world: train_head(
            base,
            tokenizer,
            texts,
            heldout,
            out,
            cfg,
            shape=shape,
            resume=resume,
            base_info={"path": str(folder), "provenance_date": (loaded.info.get("provenance") or {}).get("date")},
            log=lambda line: click.echo(line, err=True),
            world=world,
        ),
        f"SSMD head on {folder} (frozen): {len(texts)} documents -> {out}",
    )
    if summary is None:
        return
    ho = summary["heldout"]["all"]
    click.echo(
        f"saved {Path(out) / 'ssmd_head.safetensors'}: {summary['parameters'] / 1e6:.2f}M parameters, "
        f"{summary['steps']} steps, held-out causal CE {ho['causal']:.3f} vs non-causal {ho['noncausal']:.3f}"
    )
