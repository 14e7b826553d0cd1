"""One GPU loan, one call: build a corpus on the lent machine, tokenize it on every core, continue the shipped
AS-ARM on its one GPU (or train the block-diffusion model, or both side by side) before a deadline, and leave
bf16 weights small enough to come back in the job's output folder (docs/training.md, "A GPU loan in one call").

The lent machine is bare (no tree-sitter, pyflakes or pygls, nothing installable) and only a few files come
back, so the job imports only the training modules and writes at most `MAX_FILES` files of at most
`MAX_FILE_MB` MiB:

    OUT/default/          the AS-ARM as a model folder `--model` loads (config, tokenizer, index, bf16 shards);
                          its config's provenance holds the run's state, and `--init OUT/default` continues it
    OUT/blockdiff.tar     the block-diffusion folder (bf16 weights), to unpack beside the shipped one
    OUT/job.tar           the summary, the trainers' logs, the batch probe's profile, the corpus manifest, the plan

Data. The Python sources of the lent machine (its site-packages and, unless the held-out split uses it, its
standard library, by the corpus rules), leaving out every package the carried held-out split or an evaluation
uses, and every version of the held-out files wherever they turn up (same module path, or a near duplicate:
`build_corpus(reserved=...)`); and the training files of those left-out packages, carried, as many as fit
beside the tracked tree in one call (`carry_corpus`). The held-out loss is measured on the carried held-out
split, the windows the shipped model's figures use.

Model. By default the AS-ARM continues the shipped default model (its shape, re-warmed to half the first run's
learning rate); `from_scratch` trains a fresh one of the shape the compute estimate picks. The batch is
measured on the lent GPU first (infill.training.gpu_probe).

`--smoke` runs the same stages on the CPU with tiny settings, the trainers stopping after a few steps or at the
deadline, whichever comes first (CI rehearses the job with it: about a minute on an idle machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from infill.errors import InputError
from infill.training.gpu_data import WEIGHTS, build_pack
from infill.training.gpu_plan import BD, Plan, Report, Shape, choose_shape, say
from infill.training.gpu_probe import Choice, choose, probe

MAX_FILES = 8  # what a call brings back from its output folder
MAX_FILE_MB = 15.0  # MiB per file (the limit is 16)
SHARD_MB = 15.0  # MB per weight shard (below MAX_FILE_MB MiB)


# ---- the trainers ------------------------------------------------------------------------------------------------


def _utc(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(when))


def _infill(*args: str) -> list[str]:
    return [sys.executable, "-m", "infill", *args]


def asarm_command(
    plan: Plan, pack: Path, tokenizer_json: Path, shape: Shape, choice: Choice, minutes: float, until: float
) -> list[str]:
    run = plan.work / "asarm"
    init = ["--init", str(plan.init)] if plan.init is not None else []
    return _infill(
        "train", "asarm", "--device", plan.device, "--corpus", str(pack), "--tokenizer", str(tokenizer_json),
        "--run-dir", str(run), "--no-resume", *init, "--minutes", f"{minutes:.3f}",
        "--until", _utc(until),
        "--layers", str(shape.layers), "--d-model", str(shape.d_model), "--heads", str(shape.heads),
        "--d-inner", str(shape.d_inner), "--seq-len", str(plan.seq_len), "--batch-size", str(choice.batch_size),
        "--lr", f"{choice.lr:.3g}", "--warmup", str(choice.warmup), "--checkpoint-minutes", "3",
        "--eval-sequences", "8" if plan.smoke else "64", "--log-every", "5" if plan.smoke else "50",
        "--data-workers", "2" if plan.smoke else "6",
        "--threads", "1" if plan.smoke else "4", "--seed", str(plan.seed), "--steps", str(plan.steps),
    )  # fmt: skip


def blockdiff_command(
    plan: Plan, pack: Path, tokenizer_json: Path, choice: Choice, minutes: float, until: float
) -> list[str]:
    tiny = [x for k, v in BD.smoke_shape for x in (f"--{k.replace('_', '-')}", str(v))]
    shape = ["--tokenizer", str(tokenizer_json), *tiny] if plan.smoke else ["--init", str(WEIGHTS / "blockdiff")]
    return _infill(
        "train", "block-diffusion", "--device", plan.device, "--data", str(pack), *shape,
        "--out", str(plan.work / "blockdiff"), "--run-dir", str(plan.work / "blockdiff-run"),
        "--seq-len", str(plan.bd_seq_len), "--batch-size", str(choice.batch_size),
        "--block-sizes", ",".join(map(str, BD.block_sizes)), "--loss-on", BD.loss_on,
        "--line-rate", str(BD.line_rate), "--fim-rate", str(BD.fim_rate), "--max-middle", str(BD.max_middle),
        "--lr", f"{choice.lr:.3g}", "--warmup", str(choice.warmup),
        "--steps", str(plan.steps or 10_000_000), "--time-limit", f"{minutes:.3f}", "--until", _utc(until),
        "--save-minutes", "2", "--save-dtype", "bfloat16",
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
    for p in procs.values():  # until every trainer ended, or the deadline
        try:
            p.wait(max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            break
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
    """OUT/job.tar: summary, logs, the batch probe's profile, the machine corpus's manifest and the plan."""
    (plan.work / "summary.txt").write_text(summary, encoding="utf-8")
    (plan.work / "plan.json").write_text(json.dumps(asdict(plan), default=str, indent=1), encoding="utf-8")
    with tarfile.open(plan.out / "job.tar", "w") as tar:
        logs = [*sorted((plan.work / "logs").glob("*.log")), *sorted((plan.work / "logs").glob("profile-*.txt"))]
        for f in [plan.work / "summary.txt", plan.work / "plan.json", *logs]:
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
    # this process's own torch work (the batch probe, the held-out check) on the trainers' thread counts (the
    # rehearsal's one: on a busy 2-core machine a second thread waits for a core more than it helps)
    torch.set_num_threads(1 if plan.smoke else 4)


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
    commands = {}
    shape = None
    if plan.asarm:
        shape, note = choose_shape(plan, max(6.0, train_until - time.time() - 60.0))
        report.facts["compute estimate" if plan.init is None else "model"] = note
        say(note)
    choices = {}
    t0 = time.time()
    for name in [n for n in ("asarm", "blockdiff") if getattr(plan, n)]:
        try:
            choices[name] = probe(plan, name, pack, tokenizer_json, shape, report)
        except Exception as exc:  # the trainer may still run at the plan's batch; it says why if not
            report.failures.append(f"batch probe, {name}: {type(exc).__name__}: {exc}")
            choices[name] = choose(plan.trainer(name), {}, f"; the probe failed: {type(exc).__name__}")
        say(f"{name}: {choices[name].note}")
    report.stage("batch probe", t0)
    minutes, until = _training_minutes(plan, train_until), train_until
    if shape is not None:
        commands["asarm"] = asarm_command(plan, pack, tokenizer_json, shape, choices["asarm"], minutes, until)
    if plan.blockdiff:
        commands["blockdiff"] = blockdiff_command(plan, pack, tokenizer_json, choices["blockdiff"], minutes, until)
    t0 = time.time()
    run_trainers(commands, plan.work / "logs", train_until + 20, report)
    report.stage("train", t0)
    t0 = time.time()
    if plan.asarm:
        export_asarm(plan, pack, tokenizer_json, report)
    if plan.blockdiff:
        pack_blockdiff(plan, report)
    if plan.asarm:
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


def _training_minutes(plan: Plan, train_until: float) -> float:
    """The trainers' budget: what is left before `train_until`, less their start (loading the pack, building the
    model) before their clocks start."""
    startup = 10.0 if plan.smoke else 40.0
    return max(0.1, (train_until - time.time() - startup) / 60)


def plan_for(out: Path, work: Path, carry: Path, smoke: bool, from_scratch: bool = False, **overrides: Any) -> Plan:
    """The full plan or the rehearsal's, with `overrides` (None: the plan's own). The AS-ARM continues the
    shipped default model unless `from_scratch`."""
    base = Plan.smoke_plan(out, work, carry) if smoke else Plan(out, work, carry)
    base = replace(base, init=None if from_scratch else WEIGHTS / "default")
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})
