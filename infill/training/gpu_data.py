"""The GPU job's data (infill.training.gpu_job): what travels with it (the carried corpus), the corpus it builds on
the lent machine from that machine's own packages, and the token pack both trainers read."""

from __future__ import annotations

import itertools
import json
import lzma
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.training.gpu_plan import Plan, Report

if TYPE_CHECKING:
    from infill.training.dedup import Problem

CARRY_TRAIN = "corpus-train.jsonl.xz"
CARRY_HELDOUT = "corpus-heldout.jsonl.xz"
CARRY_MANIFEST = "corpus-manifest.json"
CARRY_PROBLEMS = "problems.jsonl"
WEIGHTS = Path(__file__).resolve().parent.parent / "weights"  # the shipped models (tokenizer, blockdiff init)
UNSEEN_PACKAGES = ("pygls", "lsprotocol")  # the code the typing benchmark types: no model may have seen it
MAX_PACKAGE_BYTES = 6_000_000  # text per package, as every trainer reads a corpus (corpus.balanced_records)


def carry_corpus(corpus: Path, carry: Path, problems: Sequence[Problem], budget: int | None = None) -> dict[str, Any]:
    """Write what travels with the job: the corpus's held-out split (the held-out loss is measured on it, and
    the lent machine's corpus leaves out every version of its files), its manifest (whose packages with held-out
    files the lent machine's corpus leaves out), the evaluation `problems` the job's contamination check removes
    (`infill train gpu-carry` gives HumanEval's), and the training files of those left-out packages, as many as
    fit in `budget` bytes for the whole folder (None: at most MAX_PACKAGE_BYTES of text a package): the lent
    machine cannot build them itself, and a call carries the tracked tree too (64 MiB in all)."""
    from infill.training.corpus import read_split

    carry.mkdir(parents=True, exist_ok=True)
    records = sorted(read_split(corpus, "heldout"), key=lambda r: r["sha256"])
    _write_xz(carry / CARRY_HELDOUT, records)
    shutil.copyfile(corpus / "manifest.json", carry / CARRY_MANIFEST)
    lines = "".join(json.dumps(asdict(p)) + "\n" for p in problems)
    (carry / CARRY_PROBLEMS).write_text(lines, encoding="utf-8")
    (carry / CARRY_TRAIN).unlink(missing_ok=True)
    left = None if budget is None else budget - folder_bytes(carry)
    cap, files = _carry_train(corpus, carry, set(heldout_packages(carry)), left)
    return {
        "heldout_files": len(records),
        "problems": len(problems),
        "train_files": files,
        "train_package_bytes": cap,
        "megabytes": round(folder_bytes(carry) / 1e6, 2),
    }


def _write_xz(path: Path, records: Sequence[dict[str, str]]) -> int:
    with lzma.open(path, "wt", encoding="utf-8", preset=6) as f:
        for r in records:
            f.write(json.dumps({k: r[k] for k in ("sha256", "package", "path", "text")}) + "\n")
    return path.stat().st_size


def _carry_train(corpus: Path, carry: Path, packages: set[str], budget: int | None) -> tuple[int, int]:
    """CARRY_TRAIN: the training files of `packages`, at most `cap` bytes of text a package (files in hash
    order), the largest cap whose compressed split fits `budget`. Returns (cap, files)."""
    from infill.training.corpus import balanced_records

    cap = MAX_PACKAGE_BYTES
    while True:
        chosen = [r for r in balanced_records(corpus, "train", cap) if r["package"] in packages]
        size = _write_xz(carry / CARRY_TRAIN, chosen)
        if budget is None or size <= budget or cap < 10_000:
            return cap, len(chosen)
        cap = min(int(cap * 0.9), int(cap * budget / size * 0.95))  # packages under the cap do not shrink


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def read_carried(path: Path) -> list[dict[str, str]]:
    """Records of a carried split (none when the file is absent: a rehearsal without the carried corpus)."""
    if not path.exists():
        return []
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def heldout_packages(carry: Path) -> list[str]:
    """The packages the held-out split draws from ("python-stdlib": the standard library), by the carried
    manifest, else by the shipped model's (the same corpus)."""
    manifest = carry / CARRY_MANIFEST
    if not manifest.exists():
        manifest = WEIGHTS / "default" / "manifest.json"
    packages = json.loads(manifest.read_text(encoding="utf-8"))["packages"]
    return sorted(str(p["package"]) for p in packages if int(p.get("heldout_files", 0)) > 0)


def excluded_packages(carry: Path) -> list[str]:
    """The packages the lent machine's corpus leaves out: every package the held-out split or an evaluation
    uses (HumanEval's package is left out by the corpus rules; the typing benchmark types UNSEEN_PACKAGES)."""
    return sorted(set(heldout_packages(carry)) | set(UNSEEN_PACKAGES))


def site_folders() -> list[Path]:
    """The interpreter's site-packages folders (where the lent machine keeps its Python sources)."""
    import site
    import sysconfig

    found = [Path(p) for p in [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]]
    out: list[Path] = []
    for p in found:
        if p.is_dir() and p.resolve() not in [q.resolve() for q in out]:
            out.append(p)
    return out


def machine_corpus(plan: Plan, report: Report) -> Path:
    """The lent machine's corpus (infill.training.corpus rules, in parallel), without the excluded packages."""
    from infill.training.corpus import build_corpus
    from infill.training.dedup import Problem

    folder = plan.work / "corpus"
    problems_file = plan.carry / CARRY_PROBLEMS
    problems = []
    if problems_file.exists():
        problems = [Problem(**json.loads(x)) for x in problems_file.read_text(encoding="utf-8").splitlines() if x]
    held = read_carried(plan.carry / CARRY_HELDOUT)
    sites = site_folders()
    if plan.max_files:  # the rehearsal: a sample of the site's files, no standard library
        sample = plan.work / "site-sample" / "site-packages"
        sites = [_sample_site(sites, sample, plan.max_files, excluded_packages(plan.carry))]
    manifest = build_corpus(
        folder,
        site=sites,
        problems=problems,
        exclude_packages=excluded_packages(plan.carry),
        include_stdlib=not plan.max_files,  # unless excluded ("python-stdlib")
        workers=plan.workers or os.cpu_count() or 1,
        log=False,
        reserved=[(r.get("path") or r["sha256"], r["text"]) for r in held],
    )
    totals = manifest["totals"]
    assert isinstance(totals, dict)
    report.facts["machine corpus"] = (
        f"{totals['files']} files, {totals['bytes'] / 1e6:.1f} MB from {len(manifest['packages'])} packages "  # type: ignore[arg-type]
        f"({totals['near_duplicates']} near and {totals['duplicates']} exact duplicates dropped; "
        f"{totals['reserved']} versions of the {len(held)} carried held-out files left out; "
        f"{len(problems)} HumanEval problems checked, {totals['contaminated']} files removed)"
    )
    return folder


def _sample_site(sites: Sequence[Path], dest: Path, max_files: int, exclude: Sequence[str]) -> Path:
    """A site folder holding the first `max_files` files of the permissively licensed packages of `sites` that
    are not excluded (the rehearsal's small stand-in for the lent machine's site-packages)."""
    from infill.training.corpus import SourceFile, site_files

    dest.mkdir(parents=True, exist_ok=True)
    excluded = {e.lower().replace("_", "-") for e in exclude}
    by_package: dict[str, list[tuple[Path, SourceFile]]] = {}
    allowed = ((site, src) for site in sites for src in site_files(site)
               if src.package.lower().replace("_", "-") not in excluded)  # fmt: skip
    for site, src in itertools.islice(allowed, max_files):  # stop reading the sites once there are enough
        by_package.setdefault(src.package, []).append((site, src))
    for name, files in by_package.items():
        version, license_ = files[0][1].version, files[0][1].license
        info = dest / f"{name}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nLicense: {license_}\n"
        (info / "METADATA").write_text(meta)
        rels = []
        for site, src in files:
            rel = src.path.relative_to(site)
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src.path, dest / rel)
            rels.append(str(rel))
        (info / "RECORD").write_text("".join(f"{r},,\n" for r in rels))
    return dest


def _tokenize_chunk(args: tuple[str, list[str]]) -> Any:
    from infill.training.layouts import tokenize_stream
    from infill.training.tokenizer import load_tokenizer

    tokenizer_json, texts = args
    return tokenize_stream(load_tokenizer(Path(tokenizer_json)), texts)


def tokenize_parallel(tokenizer_json: Path, texts: list[str], workers: int) -> Any:
    """`tokenize_stream` of `texts` on `workers` processes: the same stream (each file after its <bos>)."""
    import multiprocessing

    import numpy as np

    if workers <= 1 or len(texts) < 2 * workers:
        return _tokenize_chunk((str(tokenizer_json), texts))
    size = -(-len(texts) // (4 * workers))
    chunks = [(str(tokenizer_json), texts[i : i + size]) for i in range(0, len(texts), size)]
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per process
    from infill.training.corpus import quiet_worker

    with multiprocessing.get_context("fork").Pool(workers, initializer=quiet_worker) as pool:
        return np.concatenate(pool.map(_tokenize_chunk, chunks))


def build_pack(plan: Plan, report: Report, tokenizer_json: Path) -> Path:
    """The pack both trainers read: the carried training files and the training split of the lent machine's
    corpus as one token stream, and the carried held-out split (else the machine corpus's) as the held-out
    stream."""
    from infill.training.corpus import balanced_records, read_split
    from infill.training.streams import write_pack

    t0 = time.time()
    carried = read_carried(plan.carry / CARRY_TRAIN)
    held = read_carried(plan.carry / CARRY_HELDOUT)
    if plan.max_files:  # the rehearsal: a sample
        carried, held = carried[: plan.max_files], held[: max(1, plan.max_files // 4)]
    from_carry = bool(held)
    report.stage("read carried corpus", t0)
    t0 = time.time()
    machine = machine_corpus(plan, report)
    report.stage("build machine corpus", t0)
    t0 = time.time()
    texts = [r["text"] for r in carried] + [r["text"] for r in balanced_records(machine, "train", MAX_PACKAGE_BYTES)]
    if not held:
        held = sorted(read_split(machine, "heldout"), key=lambda r: r["sha256"])
    workers = plan.workers or os.cpu_count() or 1
    train = tokenize_parallel(tokenizer_json, texts, workers)
    heldout = tokenize_parallel(tokenizer_json, [r["text"] for r in held], workers)
    report.stage("tokenize", t0)
    meta = write_pack(
        plan.work / "pack.npz",
        tokenizer_json,
        train,
        heldout,
        {
            "carried_files": len(carried),
            "machine_files": len(texts) - len(carried),
            "heldout_files": len(held),
            "heldout_from": "carried corpus" if from_carry else "machine corpus",
        },
    )
    report.facts["training tokens"] = (
        f"{len(train):,} from {len(texts):,} files ({len(carried):,} carried); held-out {len(heldout):,} tokens "
        f"of {len(held)} files ({'the shipped corpus' if from_carry else 'this machine'})"
    )
    report.facts["pack"] = meta
    return plan.work / "pack.npz"
