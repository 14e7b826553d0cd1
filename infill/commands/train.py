"""`infill train`: build the corpus, train the tokenizer, train an AS-ARM, export a model folder.

The `block-diffusion` subcommand lives in infill/commands/train_blockdiff.py (helper "bd") and is attached to
this group lazily when that module exists.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from infill.clitypes import POSITIVE, FiniteFloatRange, IntRange, NonEmptyPath, settings_from_flags, value_option
from infill.commands.shell import load_command
from infill.commands.training import (
    batch_size_option,
    bf16_option,
    device_option,
    log_every_option,
    lr_option,
    parse_until,
    path_option,
    seed_option,
    threads_option,
    under_torchrun,
    until_option,
)
from infill.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_CORPUS = Path("runs/corpus")
DEFAULT_RUN = Path("runs/asarm")


class TrainGroup(click.Group):
    """`train` subcommands; `block-diffusion`, `ssmd`, `ptp` and the GPU job live in their own modules (LAZY),
    imported when the command is run or listed."""

    LAZY = {
        "block-diffusion": "infill.commands.train_blockdiff:block_diffusion",
        "ssmd": "infill.commands.train_ssmd:ssmd",
        "ptp": "infill.commands.train_ptp:ptp",
        "gpu-job": "infill.commands.train_gpu:gpu_job",
        "gpu-carry": "infill.commands.train_gpu:gpu_carry",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        names.update(n for n in self.LAZY if self._lazy(n) is not None)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or self._lazy(cmd_name)

    def _lazy(self, name: str) -> click.Command | None:
        target = self.LAZY.get(name)
        return None if target is None else load_command(target)


@click.group(cls=TrainGroup)
def train() -> None:
    """Train the models infill ships: corpus, tokenizer, AS-ARM (and block diffusion)."""


@train.command("corpus")
@path_option(
    "--out",
    file_okay=False,
    default=DEFAULT_CORPUS,
    help="Corpus folder to write (train.jsonl, heldout.jsonl, heldout/, manifest.json).",
)
@click.option(
    "--site",
    type=NonEmptyPath(path_type=Path, exists=True, file_okay=False),
    multiple=True,
    help="site-packages folder to read; repeat for several (default: this interpreter's).",
)
@value_option(
    "--heldout-permille", IntRange(0, 1000), 20, "Held-out share in 1/1000, decided by each file's content hash."
)
@value_option(
    "--near-dup",
    FiniteFloatRange(0.5, 1.0),
    0.85,
    "Drop files this similar (estimated Jaccard of word 5-grams) to a file kept earlier; 1 = exact only.",
)
def corpus_cmd(out: Path, site: tuple[Path, ...], heldout_permille: int, near_dup: float) -> None:
    """Collect local Python sources (stdlib + installed packages, no tests or eval sets) into a corpus."""
    from infill.evaluation.humaneval import humaneval_problems
    from infill.training.corpus import build_corpus

    build_corpus(
        out,
        site=list(site) or None,
        heldout_permille=heldout_permille,
        near_dup_threshold=near_dup,
        problems=humaneval_problems(),  # never trained on
    )


@train.command("tokenizer")
@path_option("--corpus", exists=True, file_okay=False, default=DEFAULT_CORPUS)
@click.option("--out", type=NonEmptyPath(path_type=Path, dir_okay=False), default=Path("runs/tokenizer.json"))
@click.option("--vocab-size", type=IntRange(512, 65535), default=8192)
@value_option("--sample-bytes-per-package", POSITIVE, 600_000, "Training text per package (files in hash order).")
def tokenizer_cmd(corpus: Path, out: Path, vocab_size: int, sample_bytes_per_package: int) -> None:
    """Train the byte-level BPE on the corpus's training split and print held-out bytes/token."""
    from infill.training.corpus import balanced_records, read_split
    from infill.training.tokenizer import bytes_per_token, save_tokenizer, train_tokenizer

    texts = [r["text"] for r in balanced_records(corpus, "train", sample_bytes_per_package)]
    tok = train_tokenizer(texts, vocab_size)
    save_tokenizer(tok, out)
    held = [r["text"] for r in read_split(corpus, "heldout")]
    click.echo(f"vocab {vocab_size}: held-out {bytes_per_token(tok, held):.3f} bytes/token -> {out}")


@train.command("pack")
@path_option("--corpus", exists=True, file_okay=False, default=DEFAULT_CORPUS)
@path_option("--tokenizer", "tokenizer_json", exists=True, dir_okay=False, required=True)
@click.option("--out", type=NonEmptyPath(path_type=Path, dir_okay=False), required=True, help="The .npz file to write.")
@click.option("--max-mb", type=FiniteFloatRange(1), default=60.0, help="Size cap of the file.")
@click.option("--max-package-mb", type=FiniteFloatRange(0.01), default=6.0)
def pack_cmd(corpus: Path, tokenizer_json: Path, out: Path, max_mb: float, max_package_mb: float) -> None:
    """Tokenize the corpus into one compressed file (train + held-out streams) that travels to a GPU machine;
    `infill train asarm --corpus FILE.npz` trains from it."""
    from infill.training.asarm import pack_streams
    from infill.training.tokenizer import load_tokenizer

    meta = pack_streams(load_tokenizer(tokenizer_json), tokenizer_json, corpus, out, int(max_package_mb * 1e6), max_mb)
    click.echo(json.dumps(meta))


@train.command("asarm")
@path_option(
    "--corpus",
    "--data",
    "corpus",
    exists=True,
    default=DEFAULT_CORPUS,
    help="A corpus folder, or a packed training set from `infill train pack`.",
)
@path_option(
    "--tokenizer",
    "tokenizer_json",
    exists=True,
    dir_okay=False,
    required=True,
    help="tokenizer.json from `infill train tokenizer`.",
)
@path_option("--run-dir", file_okay=False, default=DEFAULT_RUN, help="Checkpoints (last.pt) go here.")
@path_option(
    "--out",
    file_okay=False,
    default=None,
    help="Export the final model folder here (config.json, model.safetensors, tokenizer.json).",
)
@click.option("--steps", type=IntRange(0), default=0, help="Stop after this many steps (0 = no limit).")
@click.option(
    "--minutes",
    "--time-limit",
    "minutes",
    type=FiniteFloatRange(0),
    default=0.0,
    help="Training-time budget across resumes; the LR schedule follows it (0 = none).",
)
@until_option
@click.option("--resume/--no-resume", default=True, help="Continue from run-dir/last.pt.")
@click.option(
    "--init",
    "init_from",
    type=NonEmptyPath(path_type=Path, exists=True, file_okay=False),
    default=None,
    help="Start a fresh run from the weights of an exported model folder (e.g. infill/weights/default), in its "
    "shape (--layers/--d-model/--heads/--d-inner default to the folder's).",
)
@click.option("--layers", type=IntRange(1), default=None, help="[default: 6, or the --init folder's]")
@click.option("--d-model", type=IntRange(8), default=None, help="[default: 256, or the --init folder's]")
@click.option("--heads", type=IntRange(1), default=None, help="[default: 4, or the --init folder's]")
@click.option("--d-inner", type=IntRange(8), default=None, help="[default: 1024, or the --init folder's]")
@click.option("--seq-len", type=IntRange(16), default=256)
@batch_size_option(16, "Sequences")
@lr_option()
@click.option("--warmup", type=IntRange(0), default=200)
@click.option("--checkpoint-minutes", type=FiniteFloatRange(0), default=5.0)
@click.option("--eval-sequences", type=IntRange(0), default=32)
@threads_option(1, "torch threads. On a shared CPU 1 beat 2 by 3x here (threads wait for each other when preempted).")
@log_every_option(10)
@value_option(
    "--max-package-mb",
    FiniteFloatRange(0.01),
    6.0,
    "Per-package cap on training text, in MB (keeps huge repetitive packages from dominating).",
)
@value_option(
    "--data-workers",
    IntRange(0, 64),
    0,
    "Processes that draw the batches (0: this one). A GPU trains faster than one process makes batches.",
)
@seed_option()
@bf16_option
@device_option
def asarm(
    corpus: Path, tokenizer_json: Path, run_dir: Path, out: Path | None, init_from: Path | None, **flags: Any
) -> None:
    """Train an any-subset autoregressive XLNet with the joint loss (Eq. 7); resumable; runs under torchrun."""
    from infill.hardware import fast_bf16
    from infill.training.asarm import ModelShape, TrainConfig, init_shape
    from infill.training.asarm import train as run_training

    base = init_shape(init_from) if init_from is not None else ModelShape()  # the shape flags' defaults
    given = {"layers": base.n_layer, "d_model": base.d_model, "heads": base.n_head, "d_inner": base.d_inner}
    flags |= {name: value if flags[name] is None else flags[name] for name, value in given.items()}
    if flags["d_model"] % flags["heads"]:
        raise InputError(f"--d-model {flags['d_model']} is not divisible by --heads {flags['heads']}")
    if not (flags["steps"] or flags["minutes"] or flags["until"]):
        raise InputError("give --steps, --minutes or --until, or training never stops")
    device, bf16 = flags["device"], flags["bf16"]
    # the flags named after a field of TrainConfig set it; these are named or measured otherwise
    cfg = settings_from_flags(
        TrainConfig,
        warmup_steps=flags["warmup"],
        until=parse_until(flags["until"]),
        bf16=fast_bf16(device) if bf16 is None else bf16,
        max_package_bytes=int(flags["max_package_mb"] * 1e6),
        shape=ModelShape(
            d_model=flags["d_model"], n_layer=flags["layers"], n_head=flags["heads"], d_inner=flags["d_inner"]
        ),
    )
    state = under_torchrun(
        lambda world: run_training(
            corpus,
            tokenizer_json,
            run_dir,
            cfg,
            resume=flags["resume"],
            export_to=out,
            init_from=init_from,
            world=world,
        ),
        device=device,
    )
    if state is None:
        return
    click.echo(
        json.dumps(
            {
                "step": state.step,
                "tokens_seen": state.tokens_seen,
                "heldout_nll": state.last_eval,
                "finished": time.strftime("%H:%M:%S", time.gmtime()),
            }
        )
    )


@train.command("export")
@path_option("--run-dir", exists=True, file_okay=False, default=DEFAULT_RUN)
@path_option("--tokenizer", "tokenizer_json", exists=True, dir_okay=False, required=True)
@path_option("--corpus", exists=True, default=DEFAULT_CORPUS)
@click.option("--out", type=NonEmptyPath(path_type=Path, file_okay=False), required=True)
@click.option("--bf16", is_flag=True, help="Store the weights in bf16 (half the size; loaded back as fp32).")
@value_option(
    "--shard-mb",
    FiniteFloatRange(1),
    None,
    "Split the weights into safetensors shards of at most this many MB (with an index file).",
)
def export_cmd(
    run_dir: Path, tokenizer_json: Path, corpus: Path, out: Path, bf16: bool, shard_mb: float | None
) -> None:
    """Export run-dir/last.pt as a model folder."""
    import torch

    from infill.training.checkpoints import export_model, load_checkpoint_model, provenance
    from infill.training.tokenizer import load_tokenizer

    if not (run_dir / "last.pt").exists():
        raise InputError(f"no checkpoint {run_dir / 'last.pt'}")
    model, cfg, state = load_checkpoint_model(run_dir)
    # the folder is only usable with the tokenizer the run trained with: same specials, same vocabulary
    vocab = load_tokenizer(tokenizer_json).get_vocab_size()
    if vocab != cfg.shape.vocab_size:
        raise InputError(
            f"{tokenizer_json}: {vocab} tokens, but the run in {run_dir} was trained with {cfg.shape.vocab_size}; "
            "give the --tokenizer it trained with"
        )
    export_model(
        model,
        tokenizer_json,
        out,
        cfg.seq_len,
        provenance(cfg, state, corpus),
        dtype=torch.bfloat16 if bf16 else None,
        shard_mb=shard_mb,
    )
    click.echo(f"exported step {state.step} to {out}")


@train.command("heldout-nll")
@path_option(
    "--model",
    "model_dir",
    exists=True,
    file_okay=False,
    required=True,
    help="An exported model folder (config.json, model.safetensors, tokenizer.json).",
)
@path_option("--corpus", exists=True, file_okay=False, default=DEFAULT_CORPUS)
@click.option("--sequences", type=IntRange(1), default=512)
@seed_option(99)
@threads_option()
@value_option(
    "--seq-len",
    IntRange(16),
    None,
    "Window length in tokens [default: the model's max_length]; compare models at the same length.",
)
def heldout_nll_cmd(
    model_dir: Path, corpus: Path, sequences: int, seed: int, threads: int, seq_len: int | None
) -> None:
    """Held-out NLL per masked token (overall and per mask layout) of an exported model, as JSON."""
    import torch

    from infill.models.xlnet_folder import load_folder
    from infill.training.measure import measure_heldout
    from infill.training.tokenizer import load_tokenizer

    torch.set_num_threads(threads)
    model, config = load_folder(model_dir)
    tok = load_tokenizer(model_dir / "tokenizer.json")
    length = seq_len or int(config["infill"]["max_length"])
    result = measure_heldout(model, tok, corpus, length, sequences, seed)
    click.echo(json.dumps(result, indent=1))
