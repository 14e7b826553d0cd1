"""`infill train ptp`: train a Parallel Token Prediction drafter (an adapter over a frozen block-diffusion model
run at block size 1) by distillation, and write ptp_adapter.safetensors for `infill fill --decoder ptp`.

Attached to the `train` group by infill/commands/train.py. torch is imported only when the command runs."""

from __future__ import annotations

from typing import Any

import click

from infill.clitypes import POSITIVE, FiniteFloatRange, IntRange, settings_from_flags, value_option
from infill.commands.training import (
    batch_size_option,
    corpus_option,
    log_every_option,
    lr_option,
    run_folder_option,
    seed_option,
    threads_option,
    under_torchrun,
)


@click.command("ptp")
@click.option(
    "--teacher",
    default="blockdiff",
    help="Block-diffusion model name or folder (frozen; its tokenizer must have the FIM tokens).",
)
@corpus_option("corpus")
@run_folder_option(
    "Run folder: ptp_adapter.safetensors, ptp_checkpoint.pt, ptp_log.jsonl. Copy the adapter beside the model."
)
@click.option("--resume/--no-resume", default=True, help="Continue from --out/ptp_checkpoint.pt when it exists.")
@click.option("--steps", type=POSITIVE, default=100_000)
@click.option(
    "--minutes",
    "--time-limit",
    "time_limit",
    type=FiniteFloatRange(0),
    default=0.0,
    help="Stop after this many minutes of this run (0 = none).",
)
@batch_size_option(8, "Sequences")
@click.option("--slots", type=IntRange(2), default=8, help="N: slot rows per group (tokens guessed per call).")
@click.option("--splits", type=POSITIVE, default=8, help="Split points (slot groups) per sequence.")
@click.option("--rank", type=POSITIVE, default=32, help="LoRA rank.")
@lr_option()
@value_option("--teacher-share", FiniteFloatRange(0, 1), 0.5, "Share of middles sampled by the teacher.")
@value_option(
    "--independent-share",
    FiniteFloatRange(0, 1, max_open=True),
    0.5,
    "Share of slot groups trained without u (the independent-slot baseline of the same adapter).",
)
@click.option("--package-bytes", type=POSITIVE, default=150_000, help="Training text read per corpus package.")
@threads_option()
@seed_option()
@log_every_option(25)
@click.option("--eval-every", type=POSITIVE, default=100)
@click.option("--save-every", type=POSITIVE, default=100)
def ptp(teacher: str, corpus: str, out: str, resume: bool, package_bytes: int, threads: int, **flags: Any) -> None:
    """Train a PTP drafter for a block-diffusion model (O-PTP distillation, gated LoRA on the slot rows); runs
    under torchrun."""
    from infill.models.loading import packaged_folder
    from infill.training.ptp import PTPTrainConfig, train

    folder = packaged_folder(teacher) or teacher
    import torch

    torch.set_num_threads(max(1, threads))
    cfg = settings_from_flags(PTPTrainConfig, time_limit=flags["time_limit"] * 60)
    summary = under_torchrun(
        lambda world: train(
            folder,
            corpus,
            out,
            cfg,
            resume=resume,
            max_package_bytes=package_bytes,
            log=lambda line: click.echo(line, err=True),
            world=world,
        )
    )
    if summary is None:
        return
    ev = summary["heldout_tokens_per_iteration"] or {}
    click.echo(
        f"saved {out}/ptp_adapter.safetensors: {summary['adapter_parameters'] / 1e6:.2f}M parameters, "
        f"{summary['steps']} steps, {summary['seconds']}s; held-out tokens/iteration ptp "
        f"{ev.get('ptp', 0):.3f} vs independent {ev.get('independent', 0):.3f}"
    )
