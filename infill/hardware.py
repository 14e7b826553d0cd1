"""What this machine's CPU does well: the one place that decides on the device, bf16 and thread counts.

bf16 matrix products are fast only on CPUs with AMX or AVX512-BF16 (0.4-0.9 TFLOP/s measured); on AVX2-only CPUs
they run about 65x slower than fp32. Decoding runs many tiny matrix products, where one intra-op thread beats
two: OpenMP workers spin and wait for a peer that the OS has descheduled (docs/performance.md).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from infill.errors import ModelError

if TYPE_CHECKING:
    import torch

THREADS_ENV = "INFILL_THREADS"
DECODE_THREADS = 1  # decoding default (docs/performance.md has the 1 vs 2 thread measurements)


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def fast_bf16(device_type: str = "cpu") -> bool:
    """Whether bf16 autocast speeds up matrix products on `device_type` ('cpu' or 'cuda')."""
    if device_type == "cuda":
        return True
    flags = cpu_flags()
    return "amx_bf16" in flags or "avx512_bf16" in flags


def int8_dot_saturates() -> bool:
    """Whether an x86 CPU's unsigned-by-signed int8 dot product saturates (no VNNI: AVX2's pmaddubsw adds pairs
    into int16), which makes int8 weights (ONNX Runtime's u8 x s8 kernel) wrong wherever activations and weights
    are both large; u8 x u8 kernels do not saturate. Not x86 (no `avx2` flag), or VNNI: False."""
    flags = cpu_flags()
    vnni = "avx512_vnni" in flags or "avx_vnni" in flags or "amx_int8" in flags
    return "avx2" in flags and not vnni


def decode_threads(requested: int | None = None) -> int:
    """Intra-op threads for decoding: `requested`, else $INFILL_THREADS (InputError for a junk value), else 1."""
    from infill import environment

    if requested is not None and requested > 0:
        return requested
    threads: int | None = environment.read(THREADS_ENV)
    return threads if threads is not None else DECODE_THREADS


def configure_decode_threads(requested: int | None = None) -> int:
    """Set torch's intra-op threads for decoding (see `decode_threads`); returns the count."""
    import torch

    threads = decode_threads(requested)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def resolve_device(device: str) -> torch.device:
    """'auto' -> cuda when available, else cpu. 'cuda' without a GPU is a ModelError."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("--device cuda was asked for, but torch sees no CUDA device")
    if device not in ("cpu", "cuda"):
        raise ModelError(f"unknown device {device!r} (expected auto, cpu or cuda)")
    return torch.device(device)


def free_memory(device: str = "cpu") -> int | None:
    """Bytes a new model could take on `device`: the GPU's free memory for 'cuda'; for the CPU, MemAvailable of
    /proc/meminfo, lowered to what the cgroup's memory limit leaves. None where it cannot be told."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0]) if torch.cuda.is_available() else None
    free: int | None = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        return None
    limit, used = _read("/sys/fs/cgroup/memory.max"), _read("/sys/fs/cgroup/memory.current")
    if limit.isdigit() and used.isdigit():  # "max" when the cgroup has no limit
        room = int(limit) - int(used)
        free = room if free is None else min(free, room)
    return free


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""
