"""`infill docstrings`: fill missing docstrings, or list them (--check) without loading a model."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import click

from infill import languages, patch
from infill.clitypes import FINITE_FLOAT
from infill.docstrings.comments import COMMENT_LANGUAGES
from infill.docstrings.config import STYLES, DocstringConfig, build_config, find_pyproject
from infill.docstrings.engine import FileResult, process_source
from infill.docstrings.fill import SlotFiller
from infill.errors import InfillError, InputError, NoValidFillError
from infill.options import click_options
from infill.server.options import daemon_options, forward_command
from infill.textops import breaks_syntax

SUFFIXES = tuple(ext for name in ("python", *COMMENT_LANGUAGES) for ext in languages.LANGUAGES[name].extensions)
SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", "node_modules", "build", "dist"}


def collect_files(paths: Iterable[str]) -> list[Path]:
    """Files named on the command line, and the supported files under named folders (hidden ones skipped)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
                out += [Path(root) / f for f in sorted(files) if f.endswith(SUFFIXES)]
        elif path.is_file():
            if not path.name.endswith(SUFFIXES):
                raise InputError(f"unsupported file type (supported: {', '.join(SUFFIXES)})", path=raw)
            out.append(path)
        else:
            raise InputError("no such file or folder", path=raw)
    return out


def _diff(result: FileResult) -> str:
    return patch.unified_diff(result.original, result.text, result.path)


def _real_filler(cfg: DocstringConfig) -> SlotFiller:
    from infill.config import DecodeConfig, ModelSpec
    from infill.docstrings.fill import model_filler, options_for

    return model_filler(
        ModelSpec(name=cfg.model),
        DecodeConfig(seed=cfg.seed, temperature=cfg.temperature),
        options_for(),
    )


def _outcome_json(result: FileResult) -> dict[str, Any]:
    return {
        "path": result.path,
        "changed": result.changed,
        "style": result.style,
        "definitions": [
            {
                "name": o.name,
                "kind": o.kind,
                "line": o.line,
                "status": o.status,
                "confidence": o.confidence,
                "fallbacks": o.fallbacks,
                "docstring": o.docstring,
                "warnings": o.warnings,
            }
            for o in result.outcomes
        ],
    }


def _describe(status: str, confidence: float | None, fallbacks: Sequence[str]) -> str:
    parts = [status]
    if confidence is not None:
        parts.append(f"mean log-prob {confidence:.2f}")
    if fallbacks:
        parts.append("neutral text for " + ", ".join(fallbacks))
    return parts[0] + (f" ({'; '.join(parts[1:])})" if len(parts) > 1 else "")


def _bool_flag(name: str, help_text: str) -> Any:
    return click.option(
        f"--ignore-{name}/--include-{name}", f"ignore_{name.replace('-', '_')}", default=None, help=help_text
    )


@click.command("docstrings", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True, type=click.Path())
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
@click.option("--ignore-regex", multiple=True, help="Skip names (or dotted names) matching this regex; repeatable.")
@_bool_flag("private", "Skip _private names and members of private classes [default: ignore].")
@_bool_flag("magic", "Skip magic methods such as __eq__ [default: ignore].")
@_bool_flag("init-method", "Skip __init__; its arguments go to the class docstring [default: ignore].")
@_bool_flag("nested-functions", "Skip functions and classes defined inside functions [default: ignore].")
@_bool_flag("nested-classes", "Skip classes nested in classes, and their methods [default: include].")
@_bool_flag("overloads", "Skip @overload stubs; the implementation gets the docstring [default: ignore].")
@_bool_flag("module", "Skip module docstrings [default: include].")
@_bool_flag("property-decorators", "Skip @property getters [default: include]; setters are always skipped.")
@click.option("--line-length", type=int, default=None, help="Wrap descriptions at this width [default: 88].")
@click_options(("seed",), help={"seed": "Sampling seed [default: 0]; fixed so local and CI runs agree."}, unset=True)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="pyproject.toml to read [tool.infill] from [default: the nearest one].",
)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", help="Report format.")
@click.option("-q", "--quiet", is_flag=True, help="Print only errors (and the diff with --diff).")
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
    daemon: str,
    idle_timeout: float,
    **overrides: Any,
) -> None:
    """Fill missing docstrings in PATHS (files or folders) with the model.

    The structure (parameters, Returns/Yields, Raises) comes from the code; the model writes only the text.
    Exit codes: 0 ok, 1 changes needed (--check with a missing docstring, --diff with a change),
    2 usage or input error, 3 a file's new docstrings would not parse (it is left unchanged),
    123 internal or model error.
    Configure defaults in [tool.infill.docstrings] of pyproject.toml.
    """
    try:
        code = _run(
            ctx, paths, check, show_diff, update, config_path, output_format, quiet, overrides, daemon, idle_timeout
        )
    except InfillError as exc:
        click.echo(f"error: {exc}", err=True)
        code = exc.exit_code
    except Exception as exc:  # noqa: BLE001 - anything else is our bug: exit 123, as documented
        click.echo(f"error: internal error: {type(exc).__name__}: {exc}", err=True)
        code = 123
    ctx.exit(code)


def _run(
    ctx: click.Context,
    paths: tuple[str, ...],
    check: bool,
    show_diff: bool,
    update: bool,
    config_path: str | None,
    output_format: str,
    quiet: bool,
    overrides: dict[str, Any],
    daemon: str = "off",
    idle_timeout: float = 0.0,
) -> int:
    if check and update:
        raise InputError("--check and --update cannot be combined")
    pyproject = Path(config_path) if config_path else find_pyproject(Path(paths[0]) if paths else Path.cwd())
    cfg = build_config(pyproject, overrides)
    files = collect_files(paths)
    injected = (ctx.obj or {}).get("slot_filler") if isinstance(ctx.obj, dict) else None
    if not check and injected is None:  # a warm model in this user's daemon, if there is one (or may be)
        size = sum(f.stat().st_size for f in files if f.is_file())
        forwarded = forward_command(ctx, daemon, idle_timeout, model=cfg.model, input_bytes=size)
        if forwarded is not None:
            return forwarded
    filler: SlotFiller | None = None
    if not check:
        filler = injected if injected is not None else _real_filler(cfg)
    results: list[FileResult] = []
    errors = invalid = 0
    for path in files:
        try:
            data, snapshot = patch.read_source(str(path))
            result = process_source(patch.decode_utf8(data, str(path)), str(path), cfg, filler, update=update)
            if result.changed and breaks_syntax(languages.detect(str(path)), data, result.text.encode("utf-8")):
                raise NoValidFillError("the new docstrings would break the file's syntax; nothing was written")
            if filler is not None and result.changed and not show_diff:
                patch.atomic_write(str(path), result.text.encode("utf-8"), snapshot)
        except NoValidFillError as exc:
            exc.path = str(path)
            click.echo(f"error: {exc}", err=True)
            invalid += 1
            continue
        except InputError as exc:
            click.echo(f"error: {exc}", err=True)
            errors += 1
            continue
        results.append(result)
        if output_format == "text":
            _report_text(result, check, show_diff, quiet)
    missing = sum(o.status == "missing" for r in results for o in r.outcomes)
    changed = sum(r.changed for r in results)
    if output_format == "json":
        report = {
            "files": [_outcome_json(r) | ({"diff": _diff(r)} if show_diff else {}) for r in results],
            "summary": {
                "files": len(results),
                "changed": changed,
                "missing": missing,
                "errors": errors + invalid,
            },
        }
        click.echo(json.dumps(report, indent=2))
    elif not quiet and (results or not (errors or invalid)):  # no "0 of 0 files" after the error lines
        _summary(results, check, show_diff, changed, missing)
    if errors:
        return 2
    if invalid:
        return 3
    if (check and missing) or (show_diff and changed):
        return 1
    return 0


def _report_text(result: FileResult, check: bool, show_diff: bool, quiet: bool) -> None:
    if check:
        if not quiet:
            for o in result.outcomes:
                click.echo(f"{result.path}:{o.line}: {o.name}")
        return
    if show_diff and result.changed:
        click.echo(_diff(result), nl=False)
    if quiet:
        return
    for o in result.outcomes:
        line = f"{result.path}:{o.line}: {o.name}: {_describe(o.status, o.confidence, o.fallbacks)}"
        click.echo(line, err=show_diff)
        for warning in o.warnings:
            click.echo(f"{result.path}:{o.line}: {o.name}: warning: {warning}", err=True)


def _summary(results: list[FileResult], check: bool, show_diff: bool, changed: int, missing: int) -> None:
    if check:
        files = f"{len(results)} file{'s' * (len(results) != 1)}"
        click.echo(f"{missing} missing docstring{'s' * (missing != 1)} in {files}", err=True)
        return
    filled = sum(o.status in ("filled", "low-confidence") for r in results for o in r.outcomes)
    updated = sum(o.status == "updated" for r in results for o in r.outcomes)
    left = sum(o.status == "left-missing" for r in results for o in r.outcomes)
    verb = "would change" if show_diff else "changed"
    message = f"{filled} docstrings filled, {updated} updated, {left} left missing (low confidence); "
    click.echo(message + f"{changed} of {len(results)} file{'s' * (len(results) != 1)} {verb}", err=True)
