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

STALE_CARRY_TRAIN = "corpus-train.jsonl.xz"
CARRY_HELDOUT = "corpus-heldout.jsonl.xz"
CARRY_MANIFEST = "corpus-manifest.json"
CARRY_PROBLEMS = "problems.jsonl"
WEIGHTS = Path(__file__).resolve().parent.parent / "weights"  # the shipped models (tokenizer, blockdiff init)
UNSEEN_PACKAGES = ("pygls", "lsprotocol")  # the code the typing benchmark types: no model may have seen it


def carry_corpus(corpus: Path, carry: Path, problems: Sequence[Problem]) -> dict[str, Any]:
    """Write what travels with the job: the corpus's held-out split as xz-compressed JSON lines (the held-out
    loss is measured on it, and the lent machine's corpus leaves out every version of its files), its manifest,
    and the evaluation `problems` the job's contamination check removes (`infill train gpu-carry` gives
    HumanEval's). The training split stays here: with the shipped weights in the tree it would not fit in a
    call (the lent machine builds its own from the same kinds of sources)."""
    from infill.training.corpus import read_split

    carry.mkdir(parents=True, exist_ok=True)
    (carry / STALE_CARRY_TRAIN).unlink(missing_ok=True)  # an earlier layout's training split: 27 MB
    records = sorted(read_split(corpus, "heldout"), key=lambda r: r["sha256"])
    with lzma.open(carry / CARRY_HELDOUT, "wt", encoding="utf-8", preset=6) as f:
        for r in records:
            f.write(json.dumps({k: r[k] for k in ("sha256", "package", "path", "text")}) + "\n")
    shutil.copyfile(corpus / "manifest.json", carry / CARRY_MANIFEST)
    lines = "".join(json.dumps(asdict(p)) + "\n" for p in problems)
    (carry / CARRY_PROBLEMS).write_text(lines, encoding="utf-8")
    return {"heldout_files": len(records), "problems": len(problems), "megabytes": round(folder_bytes(carry) / 1e6, 2)}


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def read_carried(path: Path) -> list[dict[str, str]]:
    """Records of a carried split (none when the file is absent: a rehearsal without the carried corpus)."""
    if not path.exists():
        return []
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def excluded_packages(carry: Path) -> list[str]:
    """The packages the lent machine's corpus leaves out: those of the typing benchmark, and, when no held-out
    split was carried (so its files cannot be left out one by one), every package of the shipped model's corpus
    and the standard library."""
    if (carry / CARRY_HELDOUT).exists():
        return sorted(UNSEEN_PACKAGES)
    packages = json.loads((WEIGHTS / "default" / "manifest.json").read_text(encoding="utf-8"))["packages"]
    return sorted({str(p["package"]) for p in packages} | {"python-stdlib"} | set(UNSEEN_PACKAGES))


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
        include_stdlib=not plan.max_files,
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
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return np.concatenate(pool.map(_tokenize_chunk, chunks))


def build_pack(plan: Plan, report: Report, tokenizer_json: Path) -> Path:
    """The pack both trainers read: the training split of the lent machine's corpus as one token stream, and the
    carried held-out split (else the machine corpus's) as the held-out stream."""
    from infill.training.corpus import balanced_records, read_split
    from infill.training.streams import write_pack

    t0 = time.time()
    held = read_carried(plan.carry / CARRY_HELDOUT)
    if plan.max_files:  # the rehearsal: a sample
        held = held[: max(1, plan.max_files // 4)]
    carried = bool(held)
    report.stage("read carried held-out split", t0)
    t0 = time.time()
    machine = machine_corpus(plan, report)
    report.stage("build machine corpus", t0)
    t0 = time.time()
    texts = [r["text"] for r in balanced_records(machine, "train", 6_000_000)]
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
            "machine_files": len(texts),
            "heldout_files": len(held),
            "heldout_from": "carried corpus" if carried else "machine corpus",
        },
    )
    report.facts["training tokens"] = (
        f"{len(train):,} from {len(texts):,} files; held-out {len(heldout):,} tokens of {len(held)} files "
        f"({'the shipped corpus' if carried else 'this machine'})"
    )
    report.facts["pack"] = meta
    return plan.work / "pack.npz"
