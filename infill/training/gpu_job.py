"""One GPU loan, one call: build a corpus on the lent machine, tokenize it on every core, train the AS-ARM and the
block-diffusion model side by side on its one GPU before a deadline, and leave bf16 weights small enough to come
back in the job's output folder (docs/training.md, "A GPU loan in one call").

The lent machine is bare (no tree-sitter, pyflakes or pygls, nothing installable) and only a few files come
back, so the job imports only the training modules and writes at most `MAX_FILES` files of at most
`MAX_FILE_MB` MiB:

    OUT/default/          the AS-ARM as a model folder `--model` loads (config, tokenizer, index, bf16 shards);
                          its config's provenance holds the run's state, and `--init OUT/default` continues it
    OUT/blockdiff.tar     the block-diffusion folder (bf16 weights), to unpack beside the shipped one
    OUT/job.tar           the summary, both trainers' logs, the corpus manifest and the plan

Data. Two sources, deduplicated apart by construction: the training split of the corpus the shipped models were
trained on, carried compressed (`carry_corpus`, a few tens of MB), and the Python sources of the lent machine's
own site-packages, minus every package the carried corpus lists (so no file of its held-out split, nor another
version of one, is trained on) and minus the standard library (it has held-out files too). The held-out loss
is measured on the carried held-out split, the windows the shipped model's figures use.

`--smoke` runs the same stages on the CPU with tiny settings in a minute or two (CI rehearses the job with it).
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.errors import InputError

if TYPE_CHECKING:
    from infill.training.dedup import Problem

MAX_FILES = 8  # what a call brings back from its output folder
MAX_FILE_MB = 15.0  # MiB per file (the limit is 16)
SHARD_MB = 15.0  # MB per weight shard (below MAX_FILE_MB MiB)
CARRY_TRAIN = "corpus-train.jsonl.xz"
CARRY_HELDOUT = "corpus-heldout.jsonl.xz"
CARRY_MANIFEST = "corpus-manifest.json"
CARRY_PROBLEMS = "problems.jsonl"
WEIGHTS = Path(__file__).resolve().parent.parent / "weights"  # the shipped models (tokenizer, blockdiff init)


@dataclass(frozen=True)
class Shape:
    layers: int
    d_model: int
    heads: int
    d_inner: int

    def params(self, vocab: int = 8192) -> int:
        """Parameters of the AS-ARM of this shape: per layer 5 d^2 attention (q, k, v, o, r) and 2 d d_inner
        feed-forward, plus the tied embedding."""
        d = self.d_model
        return self.layers * (5 * d * d + 2 * d * self.d_inner) + vocab * d

    def train_flops(self, seq_len: int, target_share: float = 0.3, vocab: int = 8192) -> float:
        """Training FLOPs per sequence position (forward x 3): the content stream on every position, the
        query stream and the head on the loss-carrying ones."""
        d, n, L = self.d_model, seq_len, self.layers
        content = L * (2 * 4 * d * d + 2 * 2 * d * self.d_inner + 4 * n * d)
        query = L * (2 * 2 * d * d + 2 * 2 * d * self.d_inner + 4 * n * d) + 2 * d * vocab
        return 3.0 * (content + target_share * query)


# Shapes the estimate chooses from, smallest first (d_model / heads = 64).
LADDER = (
    Shape(6, 256, 4, 1024),
    Shape(8, 320, 5, 1280),
    Shape(8, 384, 6, 1536),
    Shape(9, 384, 6, 1536),
    Shape(10, 448, 7, 1792),
    Shape(12, 512, 8, 2048),
)


@dataclass(frozen=True)
class Plan:
    """Everything the job does, decided before it starts."""

    out: Path
    work: Path
    carry: Path
    minutes: float = 9.0
    device: str = "cuda"
    workers: int = 0  # 0: every core
    smoke: bool = False
    max_files: int = 0  # 0: every file of the lent machine's packages
    max_mb: float = 38.0  # the AS-ARM's bf16 weights at most this many MB (the tracked tree's budget)
    tflops: float = 30.0  # training throughput the compute estimate assumes (measured: docs/training.md)
    seq_len: int = 512
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 250
    blockdiff: bool = True
    bd_seq_len: int = 256
    bd_batch_size: int = 64
    bd_lr: float = 5e-4
    shape: Shape | None = None  # None: the compute estimate picks
    reserve_s: float = 75.0  # left at the end for the held-out check and the export
    seed: int = 0

    @classmethod
    def smoke_plan(cls, out: Path, work: Path, carry: Path) -> Plan:
        return cls(
            out,
            work,
            carry,
            minutes=1.6,
            device="cpu",
            workers=2,
            smoke=True,
            max_files=120,
            seq_len=64,
            batch_size=8,
            lr=1e-3,
            warmup=5,
            bd_seq_len=64,
            bd_batch_size=4,
            shape=Shape(2, 64, 2, 128),
            reserve_s=25.0,
        )


@dataclass
class Report:
    """What the summary prints, filled in as the stages run."""

    stages: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def stage(self, name: str, since: float) -> None:
        self.stages[name] = round(time.time() - since, 1)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- data ----------------------------------------------------------------------------------------------------


def carry_corpus(
    corpus: Path, carry: Path, problems: Sequence[Problem], max_package_bytes: int = 6_000_000
) -> dict[str, Any]:
    """Write what travels with the job: the corpus's training split (at most `max_package_bytes` per package, as
    every trainer reads it) and its held-out split as xz-compressed JSON lines, its manifest (whose packages the
    job leaves out of the lent machine's corpus), and the evaluation `problems` the job's contamination check
    removes (`infill train gpu-carry` gives HumanEval's)."""
    from infill.training.corpus import balanced_records, read_split

    carry.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for name, records in (
        (CARRY_TRAIN, balanced_records(corpus, "train", max_package_bytes)),
        (CARRY_HELDOUT, sorted(read_split(corpus, "heldout"), key=lambda r: r["sha256"])),
    ):
        with lzma.open(carry / name, "wt", encoding="utf-8", preset=6) as f:
            for r in records:
                f.write(json.dumps({"sha256": r["sha256"], "package": r["package"], "text": r["text"]}) + "\n")
        sizes[name] = round((carry / name).stat().st_size / 1e6, 2)
    shutil.copyfile(corpus / "manifest.json", carry / CARRY_MANIFEST)
    lines = "".join(json.dumps(asdict(p)) + "\n" for p in problems)
    (carry / CARRY_PROBLEMS).write_text(lines, encoding="utf-8")
    return {"megabytes": sizes, "problems": len(problems)}


def read_carried(path: Path) -> list[dict[str, str]]:
    """Records of a carried split (none when the file is absent: a rehearsal without the carried corpus)."""
    if not path.exists():
        return []
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def excluded_packages(carry: Path) -> list[str]:
    """The packages the lent machine's corpus leaves out: every package of the carried corpus (its training
    split travels; its held-out files must not be trained on in another version), else of the shipped
    model's corpus, and the standard library."""
    manifest = carry / CARRY_MANIFEST
    if not manifest.exists():
        manifest = WEIGHTS / "default" / "manifest.json"
    packages = json.loads(manifest.read_text(encoding="utf-8"))["packages"]
    return sorted({str(p["package"]) for p in packages} | {"python-stdlib"})


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
    sites = site_folders()
    if plan.max_files:  # the rehearsal: a sample of the site's files
        sites = [_sample_site(sites, plan.work / "site-sample", plan.max_files, excluded_packages(plan.carry))]
    manifest = build_corpus(
        folder,
        site=sites,
        problems=problems,
        exclude_packages=excluded_packages(plan.carry),
        include_stdlib=False,
        workers=plan.workers or os.cpu_count() or 1,
        log=False,
    )
    totals = manifest["totals"]
    assert isinstance(totals, dict)
    report.facts["machine corpus"] = (
        f"{totals['files']} files, {totals['bytes'] / 1e6:.1f} MB from {len(manifest['packages'])} packages "  # type: ignore[arg-type]
        f"({totals['near_duplicates']} near and {totals['duplicates']} exact duplicates dropped; "
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
    for site in sites:
        for src in site_files(site):
            if src.package.lower().replace("_", "-") not in excluded and sum(map(len, by_package.values())) < max_files:
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
    """The pack both trainers read: the carried training split and the lent machine's corpus as one token
    stream, and the carried held-out split (else the machine corpus's) as the held-out stream."""
    from infill.training.corpus import balanced_records, read_split
    from infill.training.streams import write_pack

    t0 = time.time()
    carried = read_carried(plan.carry / CARRY_TRAIN)
    held = read_carried(plan.carry / CARRY_HELDOUT)
    if plan.max_files:  # the rehearsal: a sample
        carried, held = carried[: plan.max_files], held[: plan.max_files // 4]
    report.stage("read carried corpus", t0)
    t0 = time.time()
    machine = machine_corpus(plan, report)
    report.stage("build machine corpus", t0)
    t0 = time.time()
    texts = [r["text"] for r in carried] + [r["text"] for r in balanced_records(machine, "train", 6_000_000)]
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
            "heldout_from": "carried corpus" if (plan.carry / CARRY_HELDOUT).exists() else "machine corpus",
        },
    )
    report.facts["training tokens"] = (
        f"{len(train):,} from {len(texts):,} files ({len(carried):,} carried); held-out {len(heldout):,} tokens "
        f"of {len(held)} files ({'the shipped corpus' if (plan.carry / CARRY_HELDOUT).exists() else 'this machine'})"
    )
    report.facts["pack"] = meta
    return plan.work / "pack.npz"


# ---- the compute estimate --------------------------------------------------------------------------------------


MIN_POSITIONS_PER_PARAM = 4.0  # measured: 8x384 at 3-5 beat 6x256 at 10+ (docs/training.md, "A GPU loan")


def choose_shape(plan: Plan, seconds: float) -> tuple[Shape, str]:
    """The AS-ARM's shape for `seconds` of training: the largest shape of LADDER that both fits the size budget
    and sees at least MIN_POSITIONS_PER_PARAM training positions per parameter at the assumed throughput.
    (Chinchilla's 20 tokens per parameter would pick a smaller shape than the one that measured best here.)"""
    if plan.shape is not None:
        return plan.shape, f"shape given: {plan.shape.params() / 1e6:.1f}M parameters"
    cap = plan.max_mb * 1e6 / 2  # bf16
    flops = plan.tflops * 1e12 * seconds

    def positions(s: Shape) -> float:
        return flops / s.train_flops(plan.seq_len)

    fits = [s for s in LADDER if s.params() <= cap] or [LADDER[0]]
    optimal = [s for s in fits if positions(s) >= MIN_POSITIONS_PER_PARAM * s.params()] or [fits[0]]
    shape = optimal[-1]
    bound = "the size budget" if shape == fits[-1] and len(optimal) == len(fits) else "the compute"
    note = (
        f"{plan.tflops:.0f} TFLOP/s assumed x {seconds:.0f}s = {flops:.2e} FLOPs; {shape.layers}x{shape.d_model} "
        f"({shape.params() / 1e6:.1f}M params, {shape.train_flops(plan.seq_len) / 1e6:.0f} MFLOP per position) "
        f"would see {positions(shape) / 1e6:.0f}M positions ({positions(shape) / shape.params():.0f} per parameter); "
        f"bound by {bound} (budget {plan.max_mb:.0f} MB of bf16 weights)"
    )
    return shape, note


# ---- the trainers ------------------------------------------------------------------------------------------------


def _utc(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(when))


def _infill(*args: str) -> list[str]:
    return [sys.executable, "-m", "infill", *args]


def asarm_command(
    plan: Plan, pack: Path, tokenizer_json: Path, shape: Shape, minutes: float, until: float
) -> list[str]:
    run = plan.work / "asarm"
    return _infill(
        "train", "asarm", "--device", plan.device, "--corpus", str(pack), "--tokenizer", str(tokenizer_json),
        "--run-dir", str(run), "--no-resume", "--minutes", f"{minutes:.3f}",
        "--until", _utc(until),
        "--layers", str(shape.layers), "--d-model", str(shape.d_model), "--heads", str(shape.heads),
        "--d-inner", str(shape.d_inner), "--seq-len", str(plan.seq_len), "--batch-size", str(plan.batch_size),
        "--lr", str(plan.lr), "--warmup", str(plan.warmup), "--checkpoint-minutes", "3",
        "--eval-sequences", "8" if plan.smoke else "64", "--log-every", "5" if plan.smoke else "50",
        "--data-workers", "2" if plan.smoke else "4",
        "--threads", "1" if plan.smoke else "4", "--seed", str(plan.seed),
    )  # fmt: skip


def blockdiff_command(plan: Plan, pack: Path, tokenizer_json: Path, minutes: float, until: float) -> list[str]:
    shape = (
        ["--tokenizer", str(tokenizer_json), "--hidden", "64", "--layers", "2", "--heads", "2", "--kv-heads", "1"]
        if plan.smoke
        else ["--init", str(WEIGHTS / "blockdiff")]
    )
    return _infill(
        "train", "block-diffusion", "--device", plan.device, "--data", str(pack), *shape,
        "--out", str(plan.work / "blockdiff"), "--run-dir", str(plan.work / "blockdiff-run"),
        "--seq-len", str(plan.bd_seq_len), "--batch-size", str(plan.bd_batch_size), "--block-sizes", "1,1,4,4,8,16",
        "--loss-on", "all", "--line-rate", "0.5", "--fim-rate", "0.9", "--max-middle", "64", "--lr", str(plan.bd_lr),
        "--steps", "10000000", "--time-limit", f"{minutes:.3f}", "--until", _utc(until), "--save-minutes", "2",
        "--save-dtype", "bfloat16",
        "--shard-mb", str(SHARD_MB), "--log-every", "5" if plan.smoke else "100", "--threads", "1",
        "--seed", str(plan.seed + 7),
    )  # fmt: skip


def run_trainers(commands: dict[str, list[str]], logs: Path, deadline: float, report: Report) -> None:
    """Run the trainers side by side, each logging to its own file; a trainer still running at `deadline` is
    stopped (SIGTERM: the AS-ARM trainer checkpoints; the block-diffusion trainer saved its folder minutes ago)."""
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = {}
    for name, cmd in commands.items():
        say(f"start {name}: {' '.join(cmd[1:])}")
        with open(logs / f"{name}.log", "w") as log:
            procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    while any(p.poll() is None for p in procs.values()) and time.time() < deadline:
        time.sleep(2)
    for name, p in procs.items():
        if p.poll() is None:
            report.failures.append(f"{name} still running at the deadline: stopped")
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        if p.returncode:
            tail = (logs / f"{name}.log").read_text(errors="replace").splitlines()[-3:]
            report.failures.append(f"{name} exit {p.returncode}: {' | '.join(tail)}")


# ---- what comes back ---------------------------------------------------------------------------------------------


def export_asarm(plan: Plan, pack: Path, tokenizer_json: Path, report: Report) -> None:
    """OUT/default: the AS-ARM's last checkpoint as a bf16 model folder in shards."""
    run = plan.work / "asarm"
    if not (run / "last.pt").exists():
        report.failures.append("asarm: no checkpoint to export")
        return
    cmd = _infill(
        "train", "export", "--run-dir", str(run), "--tokenizer", str(tokenizer_json), "--corpus", str(pack),
        "--out", str(plan.out / "default"), "--bf16", "--shard-mb", str(SHARD_MB),
    )  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        report.failures.append(f"asarm export exit {done.returncode}: {done.stderr.strip()[-300:]}")


def heldout_check(plan: Plan, pack: Path, report: Report) -> None:
    """Held-out NLL of the new AS-ARM and of the shipped one on the same windows, in this process."""
    import torch

    from infill.models.xlnet_folder import load_folder
    from infill.training.measure import evaluate
    from infill.training.objective import TrainConfig
    from infill.training.streams import heldout_batches
    from infill.training.tokenizer import load_tokenizer

    cfg = TrainConfig(seq_len=plan.seq_len, batch_size=16)
    tok = load_tokenizer(WEIGHTS / "default" / "tokenizer.json")
    batches = heldout_batches(tok, pack, cfg, 16 if plan.smoke else 64)
    device = torch.device(plan.device)
    results = {}
    for name, folder in (("new", plan.out / "default"), ("shipped", WEIGHTS / "default")):
        if not (folder / "config.json").exists():
            continue
        model, _ = load_folder(folder)
        model.to(device)
        moved = [{k: v.to(device) for k, v in b.items()} for b in batches]
        results[name] = round(evaluate(model, moved, plan.device == "cuda"), 4)
    report.facts["held-out NLL (nats per masked token, same windows)"] = results


def pack_blockdiff(plan: Plan, report: Report) -> None:
    """OUT/blockdiff.tar: the block-diffusion folder (bf16 weights, config, tokenizer)."""
    folder = plan.work / "blockdiff"
    if not (folder / "config.json").exists():
        report.failures.append("blockdiff: no saved folder")
        return
    with tarfile.open(plan.out / "blockdiff.tar", "w") as tar:
        for f in sorted(folder.iterdir()):
            tar.add(f, arcname=f"blockdiff/{f.name}")


def pack_job(plan: Plan, report: Report, summary: str) -> None:
    """OUT/job.tar: summary, logs, the machine corpus's manifest and the plan."""
    (plan.work / "summary.txt").write_text(summary, encoding="utf-8")
    (plan.work / "plan.json").write_text(json.dumps(asdict(plan), default=str, indent=1), encoding="utf-8")
    with tarfile.open(plan.out / "job.tar", "w") as tar:
        for f in [plan.work / "summary.txt", plan.work / "plan.json", *sorted((plan.work / "logs").glob("*.log"))]:
            tar.add(f, arcname=f.name)
        manifest = plan.work / "corpus" / "manifest.json"
        if manifest.exists():
            tar.add(manifest, arcname="machine-corpus-manifest.json")


def out_files(out: Path) -> Iterator[tuple[Path, int]]:
    for f in sorted(out.rglob("*")):
        if f.is_file():
            yield f, f.stat().st_size


def check_out(out: Path) -> list[str]:
    """What would not come back: more than MAX_FILES files, a file over MAX_FILE_MB MiB, a path too deep."""
    files = list(out_files(out))
    problems = [f"{len(files)} files (at most {MAX_FILES})"] if len(files) > MAX_FILES else []
    for f, size in files:
        if size > MAX_FILE_MB * 2**20:
            problems.append(f"{f.relative_to(out)}: {size / 2**20:.1f} MiB")
        if len(f.relative_to(out).parts) > 3:
            problems.append(f"{f.relative_to(out)}: too deep")
    return problems


def summary_text(plan: Plan, report: Report, started: float) -> str:
    lines = [f"infill GPU job ({'smoke rehearsal' if plan.smoke else 'full'}) on {plan.device}: "
             f"{time.time() - started:.0f}s of {plan.minutes * 60:.0f}s"]  # fmt: skip
    lines += [f"  {k}: {v}" for k, v in report.facts.items()]
    lines.append("  stages: " + ", ".join(f"{k} {v}s" for k, v in report.stages.items()))
    for name in ("asarm", "blockdiff"):
        log = plan.work / "logs" / f"{name}.log"
        if log.exists():
            tail = [x for x in log.read_text(errors="replace").splitlines() if x.strip()][-3:]
            lines += [f"  {name}: {x[:160]}" for x in tail]
    lines += [f"  back: {f.relative_to(plan.out)} {size / 2**20:.1f} MiB" for f, size in out_files(plan.out)]
    lines += [f"  FAILED: {x}" for x in report.failures] or ["  no failures"]
    return "\n".join(lines) + "\n"


def environment(plan: Plan, report: Report) -> None:
    import torch

    device = torch.cuda.get_device_name(0) if plan.device == "cuda" and torch.cuda.is_available() else "cpu"
    report.facts["machine"] = (
        f"{device}, torch {torch.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} cores"
    )
    if plan.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: torch sees no GPU here (use --smoke to rehearse on the CPU)")


def run(plan: Plan) -> int:
    """The whole job; returns the exit code (0: everything came back; 1: something failed, see the summary)."""
    started = time.time()
    deadline = started + plan.minutes * 60
    report = Report()
    plan.out.mkdir(parents=True, exist_ok=True)
    plan.work.mkdir(parents=True, exist_ok=True)
    environment(plan, report)
    tokenizer_json = WEIGHTS / "default" / "tokenizer.json"
    pack = build_pack(plan, report, tokenizer_json)
    say("; ".join(f"{k}: {v}" for k, v in report.facts.items() if k != "pack"))
    train_until = deadline - plan.reserve_s
    startup = 10.0 if plan.smoke else 40.0  # loading the pack and building the model, before the clock starts
    minutes = max(0.1, (train_until - time.time() - startup) / 60)
    shape, note = choose_shape(plan, minutes * 60)
    report.facts["compute estimate"] = note
    say(note)
    commands = {"asarm": asarm_command(plan, pack, tokenizer_json, shape, minutes, train_until)}
    if plan.blockdiff:
        commands["blockdiff"] = blockdiff_command(plan, pack, tokenizer_json, minutes, train_until)
    t0 = time.time()
    run_trainers(commands, plan.work / "logs", train_until + 20, report)
    report.stage("train", t0)
    t0 = time.time()
    export_asarm(plan, pack, tokenizer_json, report)
    if plan.blockdiff:
        pack_blockdiff(plan, report)
    try:
        heldout_check(plan, pack, report)
    except Exception as exc:  # the weights came back; the check is a summary line
        report.failures.append(f"held-out check: {type(exc).__name__}: {exc}")
    report.stage("export and check", t0)
    pack_job(plan, report, summary_text(plan, report, started))
    report.failures += check_out(plan.out)
    text = summary_text(plan, report, started)
    pack_job(plan, report, text)
    print(text, end="", flush=True)
    return 1 if report.failures else 0


def plan_for(out: Path, work: Path, carry: Path, smoke: bool, **overrides: Any) -> Plan:
    base = Plan.smoke_plan(out, work, carry) if smoke else Plan(out, work, carry)
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})
