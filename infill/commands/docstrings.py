"""`infill docstrings`: fill missing docstrings, or list them (--check) without loading a model.

Click only: flags -> one DocstringsRequest -> infill.docstrings.run (also what the server and a daemon run)
-> the output echoed here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from infill.clitypes import FINITE_FLOAT, JOBS, FiniteFloatRange, IntRange, NonEmptyPath
from infill.docstrings.config import MIN_LINE_LENGTH, STYLES
from infill.docstrings.fill import SlotFiller
from infill.docstrings.outcome import FileResult
from infill.docstrings.run import (
    DocstringsRequest,
    fill_file,
    model_filler_for,
    plan,
    process,
    worker_fill_file,
    worker_setup,
)
from infill.errors import ExitCode, InfillError, one_line
from infill.options import click_options
from infill.server.options import daemon_options, forward_docstrings
from infill.server.protocol import DEFAULT_MAX_INPUT_BYTES


def _bool_flag(name: str, help_text: str) -> Any:
    return click.option(
        f"--ignore-{name}/--include-{name}", f"ignore_{name.replace('-', '_')}", default=None, help=help_text
    )


@click.command("docstrings", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True, type=NonEmptyPath())
@click.option(
    "--check",
    is_flag=True,
    help="List `path:line: name` for each missing docstring and exit 1 if any. Never loads the model.",
)
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff instead of writing; exit 1 on a change.")
@click.option(
    "--update",
    is_flag=True,
    help="Also add missing and remove stale parameter entries in existing docstrings (other text is kept).",
)
@click.option(
    "--style",
    type=click.Choice(STYLES),
    default=None,
    help="Docstring style [default: google]; auto follows the file's existing docstrings.",
)
@click_options(("model",), help={"model": "Model name or folder [default: the embedded model]."}, unset=True)
@click.option(
    "--min-confidence",
    type=FINITE_FLOAT,
    default=None,
    help="Leave a docstring missing (and report it) when the mean token log-probability of its text is below "
    "this (e.g. -3.5), or when the model could not write its summary.",
)
@click.option(
    "--min-probability",
    type=FiniteFloatRange(0.0, 1.0),
    default=None,
    help="Write the model's sentences only when their calibrated probability of being right is at least this; "
    "otherwise sentences built from the names and the code [default: the threshold stored with the model's "
    "calibration; 0 = whenever the checks find no contradiction].",
)
@click.option("--ignore-regex", multiple=True, help="Skip names (or dotted names) matching this regex; repeatable.")
@_bool_flag("private", "Skip _private names and members of private classes [default: ignore].")
@_bool_flag("magic", "Skip magic methods such as __eq__ [default: ignore].")
@_bool_flag("init-method", "Skip __init__; its arguments go to the class docstring [default: ignore].")
@_bool_flag("nested-functions", "Skip functions and classes defined inside functions [default: ignore].")
@_bool_flag("nested-classes", "Skip classes nested in classes, and their methods [default: include].")
@_bool_flag("overloads", "Skip @overload stubs; the implementation gets the docstring [default: ignore].")
@_bool_flag("module", "Skip module docstrings [default: include].")
@_bool_flag("property-decorators", "Skip @property getters [default: include]; setters are always skipped.")
@click.option(
    "--line-length",
    type=IntRange(MIN_LINE_LENGTH),
    default=None,
    help="Wrap descriptions at this width [default: 88].",
)
@click.option(
    "--respect-gitignore/--no-respect-gitignore",
    "respect_gitignore",
    default=None,
    help="In folders, skip the files and folders git ignores (.gitignore, .git/info/exclude, core.excludesFile) "
    "[default: respect]; a file named on the command line is always read.",
)
@click_options(("seed",), help={"seed": "Sampling seed [default: 0]; fixed so local and CI runs agree."}, unset=True)
@click.option(
    "--config",
    "config_path",
    type=NonEmptyPath(dir_okay=False),
    default=None,
    help="pyproject.toml to read [tool.infill] from, for every file [default: the nearest one to each file].",
)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", help="Report format.")
@click.option("-q", "--quiet", is_flag=True, help="Print only errors (and the diff with --diff).")
@click.option(
    "-j",
    "--jobs",
    type=JOBS,
    default=1,
    help="Worker processes for several files, one thread and one model each (no daemon); the output and exit "
    "code are those of one.",
)
@daemon_options
@click.pass_context
def docstrings(
    ctx: click.Context,
    paths: tuple[str, ...],
    check: bool,
    show_diff: bool,
    update: bool,
    config_path: str | None,
    output_format: str,
    quiet: bool,
    jobs: int,
    daemon: str,
    idle_timeout: float,
    **overrides: Any,
) -> None:
    """Fill missing docstrings in PATHS (files or folders) with the model.

    The structure (parameters, Returns/Yields, Raises) comes from the code; the model writes only the text.
    Exit codes: 0 ok, 1 changes needed (--check with a missing docstring, --diff with a change),
    2 usage or input error, 3 a file's new docstrings would not parse (it is left unchanged),
    123 internal or model error, 130 / 143 interrupted (Ctrl-C / SIGTERM).
    Configure defaults in [tool.infill.docstrings] of pyproject.toml.
    """
    request = DocstringsRequest(
        paths, check, show_diff, update, config_path, output_format, quiet, overrides, cwd=os.getcwd()
    )
    try:
        code = _run(ctx, request, daemon, idle_timeout, jobs)
    except InfillError as exc:
        click.echo(f"error: {one_line(str(exc))}", err=True)
        code = exc.exit_code
    except Exception as exc:  # noqa: BLE001 - anything else is our bug: exit 123, as documented
        click.echo(f"error: internal error: {type(exc).__name__}: {one_line(str(exc))}", err=True)
        code = ExitCode.INTERNAL
    ctx.exit(code)


def _run(
    ctx: click.Context, request: DocstringsRequest, daemon: str = "off", idle_timeout: float = 0.0, jobs: int = 1
) -> int:
    from infill.progress import files_progress

    cfg, files = plan(request)
    injected = (ctx.obj or {}).get("slot_filler") if isinstance(ctx.obj, dict) else None
    parallel = jobs > 1 and len(files) > 1 and injected is None  # an injected filler stays in this process
    changed_by_daemon: list[str] = []
    if not request.check and injected is None and not parallel:  # a warm model in this user's daemon, if any
        size = sum(f.stat().st_size for f in files if f.is_file())
        before = _fingerprints(files) if size <= DEFAULT_MAX_INPUT_BYTES and not request.diff else {}
        forwarded = forward_docstrings(request.to_dict(), daemon, idle_timeout, model=cfg.model, input_bytes=size)
        if forwarded is not None:
            return forwarded
        # a daemon that stopped mid-run (a crash, a kill) may have written some files: they count as changed
        after = _fingerprints(files) if before else {}
        changed_by_daemon = [name for name, print_ in before.items() if after.get(name) != print_]
        if changed_by_daemon and not request.quiet:
            _echo(f"note: the daemon stopped after changing {len(changed_by_daemon)} file(s); finishing here\n", True)
    with files_progress(not request.quiet and len(files) > 1, len(files), _echo) as bar:
        if parallel:
            from infill.jobs import in_order

            names = [str(f) for f in files]
            setup = (request.to_dict(), cfg)
            done = in_order(worker_fill_file, names, jobs, setup=worker_setup, setup_args=setup, done=bar.advance)
            return process(request, cfg, files, None, bar.write, done, changed_before=changed_by_daemon).exit_code
        filler: SlotFiller | None = None
        if not request.check:
            filler = injected if injected is not None else model_filler_for(cfg)
        done = _each(files, request, cfg, filler, bar.advance)
        return process(request, cfg, files, filler, bar.write, done, changed_before=changed_by_daemon).exit_code


def _fingerprints(files: list[Path]) -> dict[str, bytes]:
    """Each readable file's content hash, by the name the report uses."""
    import hashlib

    out = {}
    for path in files:
        try:
            if not path.is_file():  # a named pipe would block the read; the run reports it as not a file
                continue
            out[str(path)] = hashlib.sha256(path.read_bytes()).digest()
        except OSError:
            continue
    return out


def _each(
    files: list[Path], request: DocstringsRequest, cfg: Any, filler: SlotFiller | None, advance: Callable[[], None]
) -> Iterator[FileResult | InfillError]:
    """The files filled one after the other in this process, the bar advancing after each."""
    for path in files:
        yield fill_file(path, request, cfg, filler)
        advance()


def _echo(text: str, err: bool) -> None:
    click.echo(text, err=err, nl=False)
