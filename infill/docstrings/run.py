"""One `infill docstrings` run: DocstringsRequest -> plan (settings and files, no model) -> process (fill,
check or update each file, report) -> an exit code, with the output written through an `echo` callback.

The CLI (infill.commands.docstrings) echoes to the terminal; the server's `docstrings` method and a daemon
(`--daemon`) collect the output (Output) and return the JSON report or the exact text. Exit codes: 0 ok,
1 changes needed (--check with a missing docstring, --diff with a change), 2 usage or input error, 3 a
file's new docstrings would not parse (it is left unchanged), 123 internal or model error.

This module imports neither torch nor Click.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from infill import languages, patch
from infill.core.checks import breaks_syntax
from infill.docstrings.comments import COMMENT_LANGUAGES
from infill.docstrings.config import DocstringConfig, build_config, find_pyproject
from infill.docstrings.engine import process_source
from infill.docstrings.fill import SlotFiller
from infill.docstrings.outcome import FileResult
from infill.errors import ExitCode, InfillError, InputError, NoValidFillError, a_kind
from infill.progress import Cancelled, cancel_check
from infill.walk import source_files

Echo = Callable[[str, bool], None]  # (text with its line break, to stderr?)


@dataclass(frozen=True)
class DocstringsRequest:
    """Everything `infill docstrings` was asked to do; plain data, JSON round-trippable via to_dict / from_dict."""

    paths: tuple[str, ...]
    check: bool = False
    diff: bool = False
    update: bool = False
    config_path: str | None = None  # pyproject.toml to read; None = the nearest one
    format: str = "text"  # "text" | "json"
    quiet: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)  # flags over [tool.infill.docstrings] (None = unset)
    cwd: str = "."  # relative paths are relative to this (a daemon runs elsewhere)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: lists for tuples."""
        d = asdict(self)
        d["paths"] = list(self.paths)
        d["overrides"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.overrides.items()}
        return d

    @classmethod
    def from_dict(cls, d: object) -> DocstringsRequest:
        """InputError for anything that is not a request (unknown fields, wrong types)."""
        if not isinstance(d, dict):
            raise InputError("a docstrings request must be an object")
        known = {f.name: f for f in fields(cls)}
        unknown = set(d) - set(known)
        if unknown:
            raise InputError(f"unknown request field(s): {', '.join(sorted(unknown))}")
        paths = d.get("paths")
        if not isinstance(paths, list | tuple) or not paths or not all(isinstance(p, str) for p in paths):
            raise InputError('"paths" must be a non-empty list of strings')
        kinds = {"check": bool, "diff": bool, "update": bool, "quiet": bool, "format": str, "cwd": str}
        for key, kind in kinds.items():
            if key in d and not isinstance(d[key], kind):
                raise InputError(f'"{key}" must be {a_kind(kind)}')
        if d.get("config_path") is not None and not isinstance(d["config_path"], str):
            raise InputError('"config_path" must be a string')
        overrides = d.get("overrides", {})
        if not isinstance(overrides, dict) or set(overrides) - {f.name for f in fields(DocstringConfig)}:
            raise InputError('"overrides" must be an object of docstring settings')
        return cls(**{**d, "paths": tuple(paths)})


@dataclass
class Output:
    """Collects what a run echoes: stdout as one string, stderr as one string (the exact text)."""

    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    def __call__(self, text: str, err: bool) -> None:
        (self.stderr if err else self.stdout).append(text)

    def texts(self) -> tuple[str, str]:
        return "".join(self.stdout), "".join(self.stderr)


@dataclass
class Outcome:
    """A finished run: its exit code, the JSON report (--format json), and the per-file errors it echoed."""

    exit_code: int
    report: dict[str, Any] | None = None
    errors: list[InfillError] = field(default_factory=list)


SUFFIXES = tuple(ext for name in ("python", *COMMENT_LANGUAGES) for ext in languages.LANGUAGES[name].extensions)


def collect_files(paths: Iterable[str], respect_gitignore: Callable[[Path], bool] | bool = True) -> list[Path]:
    """Files named on the command line, and the supported files under named folders (infill.walk.source_files:
    what git ignores there is skipped when `respect_gitignore`, a bool or a test of each named folder: its
    configuration's `respect-gitignore`); each file once, where it is first found (so no two `--jobs` workers
    write one file). A file named on the command line is read whatever git ignores, as ruff and black do."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            respects = respect_gitignore(path) if callable(respect_gitignore) else respect_gitignore
            out += source_files(path, SUFFIXES, respects)
        elif path.is_file():
            if not path.name.endswith(SUFFIXES):
                raise InputError(f"unsupported file type (supported: {', '.join(SUFFIXES)})", path=raw)
            out.append(path)
        elif path.exists():  # a named pipe, a device, a socket
            raise InputError("not a regular file or folder", path=raw)
        else:
            raise InputError("no such file or folder", path=raw)
    unique: dict[str, Path] = {}
    for path in out:
        unique.setdefault(os.path.realpath(path), path)
    return list(unique.values())


def _diff(result: FileResult) -> str:
    return patch.unified_diff(result.original, result.text, result.path)


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
                "probability": o.probability,
                "fallbacks": o.fallbacks,
                "refused": o.refused,
                "docstring": o.docstring,
                "warnings": o.warnings,
            }
            for o in result.outcomes
        ],
    }


def _describe(status: str, confidence: float | None, probability: float | None, fallbacks: Sequence[str]) -> str:
    parts = [status]
    if confidence is not None:
        parts.append(f"mean log-prob {confidence:.2f}")
    if probability is not None:
        parts.append(f"p(right) {probability:.2f}")
    if fallbacks:
        parts.append("names-only text for " + ", ".join(fallbacks))
    return parts[0] + (f" ({'; '.join(parts[1:])})" if len(parts) > 1 else "")


def model_filler_for(cfg: DocstringConfig, on_progress: Callable[[dict[str, Any]], None] | None = None) -> SlotFiller:
    """The real SlotFiller for these settings: infill.api.fill_text with the model (loaded on first use)."""
    from infill.config import DecodeConfig, ModelSpec
    from infill.docstrings.fill import model_filler, options_for

    return model_filler(
        ModelSpec(name=cfg.model),
        DecodeConfig(seed=cfg.seed, temperature=cfg.temperature),
        options_for(cfg.temperature),
        on_progress,
    )


def plan(req: DocstringsRequest) -> tuple[DocstringConfig, list[Path]]:
    """The settings and the files of a run (no model): InputError for a bad combination, setting or path."""
    if req.check and req.update:
        raise InputError("--check and --update cannot be combined")
    if req.check and req.diff:  # --diff was ignored: --check lists what is missing and never loads the model
        raise InputError("--check and --diff cannot be combined (--check lists what is missing; --diff shows the fill)")
    paths = req.paths
    pyproject = Path(req.config_path) if req.config_path else find_pyproject(Path(paths[0]) if paths else Path.cwd())
    cfg = build_config(pyproject, req.overrides)

    def respects(folder: Path) -> bool:  # each named folder's own configuration, as each file's (file_config)
        return (
            cfg.respect_gitignore
            if req.config_path
            else build_config(find_pyproject(folder), req.overrides).respect_gitignore
        )

    return cfg, collect_files(paths, respects)


RUN_WIDE = ("model", "seed", "temperature")  # settings of the one model that fills every file of a run


def file_config(path: Path, req: DocstringsRequest, run_cfg: DocstringConfig) -> DocstringConfig:
    """The settings of one file: from the nearest pyproject.toml at or above it (the flags win), whichever file
    the run started from; `--config` names one for all. A file whose project asks for another model, seed or
    temperature than the run's is an input error (one model fills a run); `--check` loads none."""
    if req.config_path:
        return run_cfg
    cfg = build_config(find_pyproject(path), req.overrides)
    if not req.check:
        for name in RUN_WIDE:
            ours, run = getattr(cfg, name), getattr(run_cfg, name)
            if ours != run:
                raise InputError(
                    f"its pyproject.toml sets {name} {ours!r}, another file of this run {run!r}: fill the two"
                    " projects in separate runs"
                )
    return cfg


def fill_file(
    path: Path,
    req: DocstringsRequest,
    cfg: DocstringConfig,
    filler: SlotFiller | None,
    cancelled: Callable[[], bool] | None = None,
) -> FileResult | InfillError:
    """One file of a run: its FileResult (the file written unless --diff, or without a filler), or the
    InputError / NoValidFillError that skips it. What a serial run and a `--jobs` worker do with each file.
    Raises Cancelled instead of writing once `cancelled()` holds (a daemon's client went away)."""
    try:
        cfg = file_config(path, req, cfg)
        data, snapshot = patch.read_source(str(path))
        result = process_source(patch.decode_utf8(data, str(path)), str(path), cfg, filler, update=req.update)
        if result.changed and breaks_syntax(languages.detect(str(path)), data, result.text.encode("utf-8")):
            raise NoValidFillError("the new docstrings would break the file's syntax; nothing was written")
        foreign = patch.foreign_text(data, [result.text]) if result.changed and data.isascii() else None
        if foreign is not None:
            raise NoValidFillError(f"the new docstrings {foreign}; nothing was written")
        if filler is not None and result.changed and not req.diff:
            if cancelled is not None and cancelled():
                raise Cancelled("the client went away; nothing more is written")
            patch.atomic_write(str(path), result.text.encode("utf-8"), snapshot, "use --diff")
    except NoValidFillError as exc:
        exc.path = str(path)
        return exc
    except InputError as exc:
        if exc.path is None:  # a missing grammar, say: which file it stopped is the first thing to know
            exc.path = str(path)
        return exc
    return result


def process(
    req: DocstringsRequest,
    cfg: DocstringConfig,
    files: list[Path],
    filler: SlotFiller | None,
    echo: Echo,
    done: Iterable[FileResult | InfillError] | None = None,
    cancelled: Callable[[], bool] | None = None,
    changed_before: Sequence[str] = (),
) -> Outcome:
    """Fill (or, without a filler, only check) every file; a file that fails is reported and skipped. `changed_before`:
    files this run changed before (a daemon that stopped mid-run), counted as changed in the summary. `done`:
    the files' `fill_file` results in the order of `files`, computed elsewhere (`--jobs` workers); by default
    each file is filled here, with `filler`, as the report reaches it (Cancelled once `cancelled()` holds: no
    file is written after that)."""
    results: list[FileResult] = []
    failures: list[InfillError] = []
    errors = invalid = 0
    shown: set[str] = set()  # a sub-project's bad pyproject.toml stops each of its files with the same line
    finished = done if done is not None else (fill_file(path, req, cfg, filler, cancelled) for path in files)
    for result in finished:
        if isinstance(result, InfillError):
            line = f"error: {result}\n"
            if line not in shown:
                echo(line, True)
                shown.add(line)
            failures.append(result)
            if isinstance(result, NoValidFillError):
                invalid += 1
            else:
                errors += 1
            continue
        results.append(result)
        if req.format == "text":
            _report_text(result, req.check, req.diff, req.quiet, echo)
    missing = sum(o.status == "missing" for r in results for o in r.outcomes)
    changed = len({r.path for r in results if r.changed} | set(changed_before))
    report = None
    if req.format == "json":
        report = {
            "files": [_outcome_json(r) | ({"diff": _diff(r)} if req.diff else {}) for r in results],
            "summary": {
                "files": len(results),
                "changed": changed,
                "missing": missing,
                "errors": errors + invalid,
            },
        }
        echo(json.dumps(report, indent=2) + "\n", False)
    elif not req.quiet and (results or not (errors or invalid)):  # no "0 of 0 files" after the error lines
        _summary(results, req.check, req.diff, changed, missing, echo)
    needed = (req.check and missing) or (req.diff and changed)
    code = (
        ExitCode.USAGE if errors else ExitCode.NO_VALID_FILL if invalid else ExitCode.CHANGES if needed else ExitCode.OK
    )
    return Outcome(code, report, failures)


_WORKER: dict[str, Any] = {}  # a `--jobs` worker's request, settings and filler (infill.jobs)


def worker_setup(request: dict[str, Any], cfg: DocstringConfig) -> None:
    """Start a `--jobs` worker: the run's request and settings, and its own model filler (loaded on first use,
    once per worker)."""
    req = DocstringsRequest.from_dict(request)
    _WORKER.update(req=req, cfg=cfg, filler=None if req.check else model_filler_for(cfg))


def worker_fill_file(path: str) -> FileResult | InfillError:
    """`fill_file` in a `--jobs` worker."""
    return fill_file(Path(path), _WORKER["req"], _WORKER["cfg"], _WORKER["filler"])


def run_docstrings(
    req: DocstringsRequest,
    echo: Echo,
    filler: SlotFiller | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Outcome:
    """plan + process, with the model's filler unless --check (or a filler is given). Raises InfillError for a
    request that cannot start (bad flags, settings or paths); per-file errors are in the Outcome. Relative paths
    are relative to the current directory (a server enters the request's `cwd` first). `cancelled`: a server's
    test of whether its client is still there; once it holds, the run stops (Cancelled) between two forward
    passes or before its next write, whichever comes first."""
    cfg, files = plan(req)
    if filler is None and not req.check:
        filler = model_filler_for(cfg, None if cancelled is None else cancel_check(cancelled))
    return process(req, cfg, files, None if req.check else filler, echo, cancelled=cancelled)


def _report_text(result: FileResult, check: bool, show_diff: bool, quiet: bool, echo: Echo) -> None:
    if check:
        if not quiet:
            for o in result.outcomes:
                echo(f"{result.path}:{o.line}: {o.name}\n", False)
        return
    if show_diff and result.changed:
        echo(_diff(result), False)
    if quiet:
        return
    for o in result.outcomes:  # what happened is news on stderr, as `infill fill` says "filled a.py"; stdout is
        # for data (a diff, the --check list, JSON), so a report never mixes into what a pipe reads
        line = f"{result.path}:{o.line}: {o.name}: {_describe(o.status, o.confidence, o.probability, o.fallbacks)}"
        echo(line + "\n", True)
        for warning in o.warnings:
            echo(f"{result.path}:{o.line}: {o.name}: warning: {warning}\n", True)


def _summary(results: list[FileResult], check: bool, show_diff: bool, changed: int, missing: int, echo: Echo) -> None:
    if check:
        files = f"{len(results)} file{'s' * (len(results) != 1)}"
        echo(f"{missing} missing docstring{'s' * (missing != 1)} in {files}\n", True)
        return
    filled = sum(o.status in ("filled", "low-confidence") for r in results for o in r.outcomes)
    updated = sum(o.status == "updated" for r in results for o in r.outcomes)
    left = sum(o.status == "left-missing" for r in results for o in r.outcomes)
    verb = "would change" if show_diff else "changed"
    message = f"{filled} docstrings filled, {updated} updated, {left} left missing (low confidence); "
    echo(message + f"{changed} of {len(results)} file{'s' * (len(results) != 1)} {verb}\n", True)
