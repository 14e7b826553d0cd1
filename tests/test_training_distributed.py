"""Training under torchrun: two CPU processes (gloo) train like one process with the same global batch and seed,
write the same checkpoints, resume with another world size, and a lost process ends the run with one clear error
instead of a hang."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from infill.cli import main
from infill.errors import InputError
from infill.training.checkpoints import read_checkpoint
from infill.training.distributed import DistributedError, World, timeout_seconds
from infill.training.tokenizer import save_tokenizer
from tests.fixtures_train import (  # noqa: F401
    BLOCK_TEXTS,
    sample_texts,
    tiny_block_model_and_corpus,
    tiny_tokenizer,
    write_corpus,
)

ASARM_SHAPE = ["--layers", "2", "--d-model", "32", "--heads", "2", "--d-inner", "64", "--seq-len", "48"]
HANG_GUARD_S = 300  # a run that has not ended by then hangs: the test fails instead of waiting for ever


# Run in every process of a torchrun through a sitecustomize module: the one of rank 1 records every file it
# opens for writing, creates, renames or removes (Python's audit events), one path per line in $INFILL_TEST_WRITES
RECORD_WRITES = """
import os, sys
if os.environ.get("RANK") == "1" and os.environ.get("INFILL_TEST_WRITES"):
    _fd = os.open(os.environ["INFILL_TEST_WRITES"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    _WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def _record(event, args):
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            mode, flags = args[1], args[2]
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & _WRITE:
                os.write(_fd, os.fsencode(args[0]) + b"\\n")
        elif event in ("os.rename", "os.remove", "os.mkdir", "os.truncate", "shutil.rmtree", "shutil.copyfile"):
            os.write(_fd, os.fsencode(str(args[0])) + b"\\n")

    sys.addaudithook(_record)
"""


def torchrun(
    args: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    writes: Path | None = None,
    program: Sequence[str] = ("-m", "infill"),
) -> subprocess.Popen[bytes]:
    """`torchrun --standalone --nproc-per-node 2 -m infill ARGS` (or another `program`), one thread per process,
    output in `log`; with `writes`, rank 1 records there every path it writes (RECORD_WRITES)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *program]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    if writes is not None:
        hook = writes.parent / "record-writes"
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text(RECORD_WRITES)
        paths = [str(hook), *filter(None, [environ.get("PYTHONPATH")])]
        environ.update(PYTHONPATH=os.pathsep.join(paths), INFILL_TEST_WRITES=str(writes))
    with log.open("wb") as out:
        return subprocess.Popen([*command, *args], stdout=out, stderr=subprocess.STDOUT, env=environ)


def finished(process: subprocess.Popen[bytes], log: Path) -> str:
    """The output of a torchrun that must end (by itself) within the hang guard."""
    try:
        process.wait(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("the distributed run hangs:\n" + log.read_text(errors="replace")) from None
    return log.read_text(errors="replace")


def written_by_rank_1(writes: Path, folder: Path) -> list[str]:
    """What rank 1 wrote under `folder` (a run's directory): rank 0 alone writes logs, checkpoints and exports."""
    assert writes.exists(), "rank 1 recorded nothing at all: the recorder did not run"
    inside = str(folder.resolve())
    lines = writes.read_text(errors="replace").splitlines()
    return [line for line in lines if os.path.realpath(line).startswith(inside)]


def single(args: Sequence[str]) -> str:
    """The same command in this process (no torchrun environment: a world of one)."""
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def losses(output: str) -> list[float]:
    """The training losses a run logged (one per --log-every steps)."""
    return [float(line.split(" loss ")[1].split()[0]) for line in output.splitlines() if " loss " in line]


def without_clocks(value: object) -> object:
    """A checkpoint's contents without the training clocks (they differ between any two runs)."""
    if isinstance(value, dict):
        return {k: without_clocks(v) for k, v in value.items() if k not in ("seconds", "elapsed")}
    if isinstance(value, list):
        return [without_clocks(v) for v in value]
    return value


def assert_same_tensors(a: object, b: object, where: str = "", atol: float = 1e-5) -> None:
    """Nested checkpoint contents equal: tensors to float tolerance, everything else exactly."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape, where
        if a.is_floating_point():
            torch.testing.assert_close(a, b, atol=atol, rtol=1e-4, msg=where)
        else:
            assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}/{key}", atol)
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tensors(x, y, f"{where}[{i}]", atol)
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-6), where
    else:
        assert a == b, where


def test_world_from_torchrun_environment() -> None:
    assert World.from_env({}) == World()
    world = World.from_env({"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "0"})
    assert (world.rank, world.size, world.main) == (2, 4, False)
    assert world.part(16) == slice(8, 12) and World().part(16) == slice(0, 16)
    with pytest.raises(InputError, match="--batch-size 6 is the global batch"):
        world.check_batch(6)
    with pytest.raises(InputError, match="RANK 4"):
        World.from_env({"WORLD_SIZE": "4", "RANK": "4"})
    assert timeout_seconds({}) == 600 and timeout_seconds({"INFILL_DIST_TIMEOUT": "2.5"}) == 2.5
    with pytest.raises(InputError, match="INFILL_DIST_TIMEOUT"):
        timeout_seconds({"INFILL_DIST_TIMEOUT": "0"})


def test_a_world_of_one_touches_no_process_group() -> None:
    """Without torchrun nothing is wrapped, scaled or exchanged: single-process training is what it was."""
    world = World()
    module = torch.nn.Linear(2, 1)

    def loss(x: torch.Tensor) -> torch.Tensor:
        return module(x).sum()

    assert world.data_parallel(module, loss) is loss
    value = torch.tensor(3.0)
    assert world.share(value, 2, 4) is value
    assert world.max(1.0, 2.0) == (1.0, 2.0) and world.sum(5.0) == (5.0,) and world.any(True)
    assert world.average(3, 0.5, 0.25) == (3, (0.5, 0.25))
    world.same(3, "a step")
    world.barrier()
    assert not torch.distributed.is_initialized()


def asarm_command(root: Path, tokenizer) -> list[str]:  # type: ignore[no-untyped-def]
    """`infill train asarm` on a tiny corpus and tokenizer written under `root`."""
    corpus = write_corpus(root / "corpus", sample_texts(30), sample_texts(40)[30:])
    save_tokenizer(tokenizer, root / "tokenizer.json")
    return ["train", "asarm", "--corpus", str(corpus), "--tokenizer", str(root / "tokenizer.json"), *ASARM_SHAPE]


@pytest.fixture
def asarm_data(tmp_path: Path, tiny_tokenizer) -> list[str]:  # type: ignore[no-untyped-def]  # noqa: F811
    return asarm_command(tmp_path, tiny_tokenizer)


def rank_pid(launcher: subprocess.Popen[bytes], rank: int) -> int:
    """The pid of the worker process of `rank` that torchrun started (its environment names the rank)."""
    for _ in range(HANG_GUARD_S * 10):
        for task in Path(f"/proc/{launcher.pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                try:
                    environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if f"RANK={rank}".encode() in environ:
                    return int(child)
        time.sleep(0.1)
    raise AssertionError(f"torchrun started no rank {rank}")


def training_started(log: Path) -> None:
    for _ in range(HANG_GUARD_S * 10):
        if "step 2 " in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError("the run did not start:\n" + log.read_text(errors="replace"))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_lost_process_ends_the_run_with_one_clear_error(asarm_data: list[str], tmp_path: Path, how: str) -> None:
    """Rank 1 killed (SIGKILL) or frozen (SIGSTOP): rank 0 does not wait for ever. A killed peer closes its
    connections; a frozen one never answers, and the process group's timeout ends rank 0's wait."""
    args = [*asarm_data, "--batch-size", "4", "--steps", "1000000", "--eval-sequences", "0", "--threads", "1"]
    args += ["--no-bf16", "--log-every", "1", "--run-dir", str(tmp_path / "run")]
    log = tmp_path / "torchrun.log"
    launcher = torchrun(args, log, env={"INFILL_DIST_TIMEOUT": "5"})
    try:
        training_started(log)
        pid = rank_pid(launcher, 1)
        rank0 = rank_pid(launcher, 0)
        os.kill(pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        if how == "frozen":  # torchrun ends the others once rank 0 failed; a stopped process waits for SIGCONT
            for _ in range(HANG_GUARD_S * 10):
                if not Path(f"/proc/{rank0}").exists():
                    break
                time.sleep(0.1)
            os.kill(pid, signal.SIGCONT)
        output = finished(launcher, log)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0
    if how == "killed":  # torchrun names the lost process (rank 0's own line may be cut short by its SIGTERM)
        assert "Signal 9 (SIGKILL) received by PID" in output, output
    else:
        lines = [x for x in output.splitlines() if x.startswith("error: rank 0 of 2:")]
        assert lines, output
        assert "did not answer within 5 s" in lines[0] and "resume" in lines[0], output


def test_lost_peer_errors_become_one_line() -> None:
    from infill.training.distributed import _failure, _lost

    gloo = RuntimeError("[../third_party/gloo/transport/tcp/pair.cc:537] Connection closed by peer [::1]:1. Hints.")
    assert _lost(gloo) and not _lost(RuntimeError("shape mismatch"))
    assert _lost(RuntimeError("Application timeout caused pair closure"))  # a frozen peer, seen under load
    error = _failure(World(rank=1, size=2), gloo)
    assert isinstance(error, DistributedError) and error.exit_code == 123
    assert "rank 1 of 2" in str(error) and "Connection closed by peer [::1]:1;" in str(error)
    assert "\n" not in str(error) and "Hints" not in str(error)


TRAINERS = ["block-diffusion", "ptp", "ssmd"]


TRAINER_CHECKPOINTS = {"block-diffusion": "last.pt", "ptp": "ptp_checkpoint.pt", "ssmd": "checkpoint.pt"}


def trainer_command(trainer: str, root: Path) -> list[str]:
    """`infill train TRAINER` on tiny inputs made under `root`: the arguments both runs share, without their
    output folders (`trainer_outputs`)."""
    folder, corpus = tiny_block_model_and_corpus(root, "tinybd")
    if trainer == "block-diffusion":
        data = root / "src"
        data.mkdir()
        for i, text in enumerate(BLOCK_TEXTS):
            (data / f"{i}.py").write_text(text)
        args = ["--data", str(data), "--tokenizer", str(folder / "tokenizer.json"), "--seq-len", "32"]
        args += ["--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--block-sizes", "1,4"]
        args += ["--no-bf16"]  # fp32, as the AS-ARM runs above: bf16 rounds the split batches apart
    elif trainer == "ptp":
        args = ["--teacher", str(folder), "--corpus", str(corpus), "--slots", "2", "--splits", "2", "--rank", "4"]
        args += ["--eval-every", "100", "--save-every", "100"]
    else:
        args = ["--model", str(folder), "--data", str(corpus), "--seq-len", "32", "--block-sizes", "4,8"]
        args += ["--heads", "2", "--intermediate", "32", "--max-block", "8", "--eval-every", "100"]
        args += ["--eval-examples", "4"]
    return ["train", trainer, *args, "--steps", "3", "--batch-size", "4", "--log-every", "1", "--threads", "1"]


def trainer_outputs(trainer: str, run: Path) -> list[str]:
    if trainer == "block-diffusion":
        return ["--out", str(run / "model"), "--run-dir", str(run)]
    return ["--out", str(run)]


@pytest.fixture(scope="module")
def two_processes(  # type: ignore[no-untyped-def]
    tmp_path_factory: pytest.TempPathFactory,
    tiny_tokenizer,  # noqa: F811
) -> dict[str, tuple[Path, list[str], str]]:
    """Every trainer's run under torchrun (the AS-ARM's for 3 steps), all in ONE launch (fixtures_torchrun: the
    commands one after another in the same two processes; a launch is most of these tests' time). For each
    trainer: its folder (the run is its `two`), the arguments the run had besides its length and output folders,
    and the run's output."""
    from tests.fixtures_torchrun import DONE, NEXT

    root = tmp_path_factory.mktemp("trainers")
    commands, runs = {}, []
    for trainer in ["asarm", *TRAINERS]:
        (root / trainer).mkdir()
        if trainer == "asarm":
            commands[trainer] = [*asarm_command(root / trainer, tiny_tokenizer), *ASARM_RUN]
            runs.append([*commands[trainer], "--steps", "3", "--run-dir", str(root / trainer / "two"), NEXT])
        else:
            commands[trainer] = trainer_command(trainer, root / trainer)
            runs.append([*commands[trainer], *trainer_outputs(trainer, root / trainer / "two"), NEXT])
    args = [arg for run in runs for arg in run]
    log, writes = root / "torchrun.log", root / "rank-1-writes"
    driver = Path(__file__).with_name("fixtures_torchrun.py")
    output = finished(torchrun(args, log, writes=writes, program=[str(driver)]), log)
    assert "exitcode" not in output, output
    parts = re.split(rf"^{DONE} (-?\d+)\n", output, flags=re.MULTILINE)  # [output, exit code] per command, the rest
    assert parts[1::2] == ["0"] * len(commands), output
    # rank 0 alone writes logs, checkpoints and the model (before the race such writes would start)
    for trainer in commands:
        assert written_by_rank_1(writes, root / trainer / "two") == [], trainer
    return {t: (root / t, commands[t], section) for t, section in zip(commands, parts[0::2], strict=False)}


ASARM_RUN = ["--batch-size", "8", "--warmup", "2", "--eval-sequences", "8", "--log-every", "1", "--threads", "1"]
ASARM_RUN += ["--no-bf16", "--checkpoint-minutes", "1000"]


@pytest.mark.slow
def test_asarm_two_processes_train_like_one_and_resume_with_one(
    two_processes: dict[str, tuple[Path, list[str], str]],
) -> None:
    """Global batch 8: two gloo processes with 4 sequences each take the steps one process with 8 takes (losses,
    weights, optimizer and data generators to float rounding); the two-process checkpoint resumes in one process
    as the one-process run goes on."""
    root, common, output = two_processes["asarm"]
    one, two = root / "one", root / "two"
    alone = single([*common, "--steps", "3", "--run-dir", str(one)])
    at_three = read_checkpoint(one / "last.pt")
    assert losses(output) == losses(alone) and len(losses(alone)) == 3
    assert output.count("checkpoint step 3") == 1  # rank 0 alone logs and writes
    assert [json.loads(line) for line in output.splitlines() if line.startswith("{")][0]["tokens_seen"] == 3 * 8 * 48
    assert_same_tensors(without_clocks(at_three), without_clocks(read_checkpoint(two / "last.pt")))

    single([*common, "--steps", "5", "--run-dir", str(one)])
    resumed = single([*common, "--steps", "5", "--run-dir", str(two)])
    assert "resumed at step 3" in resumed
    a, b = read_checkpoint(one / "last.pt"), read_checkpoint(two / "last.pt")
    assert_same_tensors(a["model"], b["model"])
    assert a["state"]["last_eval"] == pytest.approx(b["state"]["last_eval"], rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_trainer_trains_alike_on_two_processes(
    trainer: str, two_processes: dict[str, tuple[Path, list[str], str]]
) -> None:
    """The block-diffusion, PTP and SSMD trainers under torchrun: the same losses and checkpoints as one process
    with the same global batch (4) and seed."""
    root, common, output = two_processes[trainer]
    alone = single([*common, *trainer_outputs(trainer, root / "one")])
    logged = [line.split("  lr ")[0] for line in output.splitlines() if line.startswith("step ") and "  lr " in line]
    assert logged == [
        line.split("  lr ")[0] for line in alone.splitlines() if line.startswith("step ") and "  lr " in line
    ]
    assert len(logged) == 3, logged  # the losses to 3 decimals; the checkpoints below hold them to float rounding
    checkpoint = TRAINER_CHECKPOINTS[trainer]
    a, b = (read_checkpoint(root / name / checkpoint) for name in ("one", "two"))
    assert_same_tensors(without_clocks(a), without_clocks(b))
