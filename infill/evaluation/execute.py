"""Run an untrusted candidate program in a separate Python process, never in-process.

Each program runs in a fresh interpreter (`python -I`: no user site, no PYTHON* variables) in an empty
temporary working directory, in its own session (so a timeout kills the whole process group), with resource
limits set before `exec`:
  RLIMIT_AS     address space (a memory hog gets MemoryError or dies instead of taking the machine),
  RLIMIT_CPU    CPU seconds (a busy loop that outlives the wall-clock timeout is killed by the kernel too),
  RLIMIT_FSIZE  largest file it may write, RLIMIT_CORE 0 (no core dumps).
A short prologue also removes the obvious destructive calls (process spawning, file deletion) from `os`,
`shutil` and `subprocess`. This guards against accidents of generated code; it is not a security sandbox:
there is no network or filesystem isolation beyond the temporary cwd.

Outcome statuses: "passed" (exit status 0), "failed" (non-zero exit, e.g. an AssertionError), "timeout"
(killed after the wall-clock timeout or by RLIMIT_CPU), "memory" (MemoryError under RLIMIT_AS), "crashed"
(killed by another signal, e.g. a segfault or abort when a C allocation fails).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Literal

Status = Literal["passed", "failed", "timeout", "memory", "crashed"]

# Runs before the candidate. Kept to names HumanEval programs never need.
PROLOGUE = """\
def _infill_guard() -> None:
    import os, shutil, subprocess
    for name in ("system", "kill", "killpg", "fork", "forkpty", "remove", "unlink", "removedirs", "rmdir",
                 "rename", "renames", "replace", "truncate", "putenv", "chmod", "chown", "setuid"):
        if hasattr(os, name):
            setattr(os, name, None)
    shutil.rmtree = None
    shutil.move = None
    subprocess.Popen = None
_infill_guard()
del _infill_guard
"""


@dataclass(frozen=True)
class ExecResult:
    status: Status
    returncode: int | None  # None when killed on timeout
    detail: str  # last line of stderr (the exception), or why it was killed
    seconds: float

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _limits(memory_bytes: int, cpu_seconds: int, file_bytes: int) -> None:
    """preexec_fn: runs in the child between fork and exec."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _last_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def run_program(
    source: str,
    *,
    timeout: float = 10.0,
    memory_mb: int = 1024,
    guard: bool = True,
) -> ExecResult:
    """Execute `source` as a Python program in a subprocess; exit status 0 means passed.

    timeout: wall-clock seconds before the process group is killed; the CPU limit is int(timeout) + 2 s.
    memory_mb: address-space limit. The interpreter itself needs about 30 MB; stay well above that.
    """
    if sys.platform == "win32":  # resource limits and process groups are POSIX
        from infill.errors import InputError

        raise InputError("the execution harness needs a POSIX system (resource limits, process groups)")
    program = (PROLOGUE if guard else "") + source
    cpu_seconds = int(timeout) + 2
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="infill-eval-") as tmp:
        path = os.path.join(tmp, "candidate.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(program)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", path],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # candidates may print a lot; only the verdict matters
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=lambda: _limits(memory_mb * 2**20, cpu_seconds, 16 * 2**20),
        )
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return ExecResult("timeout", None, f"killed after {timeout:g} s", time.perf_counter() - start)
        seconds = time.perf_counter() - start
    stderr = err.decode("utf-8", errors="replace")
    rc = proc.returncode
    if rc == 0:
        return ExecResult("passed", 0, "", seconds)
    if rc == -signal.SIGXCPU:
        return ExecResult("timeout", rc, f"CPU limit ({cpu_seconds} s)", seconds)
    if "MemoryError" in stderr:
        return ExecResult("memory", rc, _last_line(stderr), seconds)
    if rc < 0:
        return ExecResult("crashed", rc, _last_line(stderr) or f"killed by signal {-rc}", seconds)
    return ExecResult("failed", rc, _last_line(stderr) or f"exit status {rc}", seconds)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # already gone
        pass
