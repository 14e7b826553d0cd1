"""The ONNX Runtime engine of the AS-ARM's cached pass (`--engine onnx`, `--engine onnx-int8`).

The graph is exported by torch from `infill.models.xlnet_cache.CachedPass` (the module the eager engine runs),
with the cache's committed keys and values as inputs and the new rows' keys and values as outputs, so there is
one implementation of the model's mathematics. ONNX Runtime runs a pass of a few rows in about two thirds of the
eager time on a CPU (docs/performance.md): a pass is a few hundred operations, most of them small, which cost it
a fraction of a microsecond each against several in eager PyTorch, and its matrix products of a few rows are
faster. `onnx-int8` also quantizes the graph's weight matrices to int8 (per output
channel; the activations are quantized on the fly), which reads a quarter of the bytes per pass but changes the
logits (by up to about 0.2, a total variation of up to 0.05 between the distributions): an option, not exact.
Signed int8 weights on an x86 CPU without VNNI give distributions a total variation of 0.45 away (the kernel's
int16 sums saturate), so there the weights are unsigned (hardware.int8_dot_saturates) and the graph is another
file.

Exporting takes seconds (tens on a loaded machine), so a graph is written once per weights and code, into the
user's cache directory (`$INFILL_CACHE_DIR`, else `$XDG_CACHE_HOME/infill`, else ~/.cache/infill; `onnx/`),
named by a hash of the weights, of the source of the modules that trace it and of the exporter's versions;
files are written to a temporary name and renamed, so a reader never sees half a file. Nothing is downloaded.

Needs the `onnx` extra (onnxruntime, onnx and onnxscript; infill.extras says how to install it); this module imports
them only when a graph is made or run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import io
import os
import subprocess
import sys
import tempfile
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.environment import cache_dir
from infill.errors import InputError

if TYPE_CHECKING:
    import torch

    from infill.models.twostream import TwoStreamXLNet

PACKAGES = ("onnxruntime", "onnx", "onnxscript")  # the `onnx` extra
CACHE_ENV = "INFILL_CACHE_DIR"
OUTPUTS = ("logits", "new_k", "new_v")
_FORMAT = "3"  # bump when the graph's inputs or outputs change meaning


def input_names(layers: int) -> list[str]:
    """The graph's inputs: CachedPass's arguments, with one input per layer for each list (k0.., v0.., r0..)."""
    per = [f"{c}{i}" for c in "kvr" for i in range(layers)]
    return ["tokens", "queries", *per, "rel", "neg"]


def available() -> bool:
    """Whether the `onnx` extra is installed (without importing it)."""
    return all(importlib.util.find_spec(p) is not None for p in PACKAGES)


def require() -> None:
    """InputError (exit 2, as for the other extras: an install is missing, not a model) when the `onnx` extra
    is missing."""
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        from infill.extras import install_hint

        raise InputError(
            f"the ONNX Runtime engine needs {', '.join(missing)}: {install_hint('onnx')} (or --engine torch)"
        )


def fingerprint(net: TwoStreamXLNet) -> str:
    """A hash of the weights, of the code that traces the graph and of the exporter's versions: a graph file's
    name, so that new weights, a changed pass or another exporter never reuse a stale graph."""
    import torch

    h = hashlib.blake2b(_code_digest(), digest_size=16)
    for key, tensor in sorted(net.state_dict().items()):
        h.update(f"{key}{tuple(tensor.shape)}{tensor.dtype};".encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _code_digest() -> bytes:
    """The code part of `fingerprint`, read once per process (so that a file changed on disk while this process
    runs the code it loaded earlier cannot name a graph traced from the old code)."""
    h = hashlib.blake2b(_FORMAT.encode(), digest_size=16)
    here = Path(__file__).resolve().parent
    for name in ("twostream.py", "xlnet_cache.py", "onnx.py"):
        h.update((here / name).read_bytes())
    for package in ("torch", *PACKAGES):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            h.update(f"{package}={importlib.metadata.version(package)};".encode())
    return h.digest()


def export(net: TwoStreamXLNet, path: Path) -> None:
    """Export CachedPass over `net` (fp32, frozen) to the ONNX file `path`, every row count dynamic."""
    import logging

    import torch
    from torch.export import Dim

    from infill.models.xlnet_cache import CachedPass

    s = net.shape
    L, G, k, N = s.n_layer, 3, 2, 12  # distinct sizes above 1, so that none is specialised
    g = torch.Generator().manual_seed(0)

    def per_layer(*shape: int) -> list[torch.Tensor]:
        return [torch.randn(*shape, generator=g) for _ in range(L)]

    n, dh = s.n_head, s.d_head
    args = (
        torch.randint(0, s.vocab_size, (G,), generator=g),
        torch.zeros(k, dtype=torch.long),
        per_layer(n, dh, N),
        per_layer(n, N, dh),
        per_layer(n, dh, 2 * N - 1),
        torch.randint(0, 2 * N - 1, (G + k, N + G), generator=g),
        torch.zeros(G + k, N + G),
    )
    auto = Dim.AUTO
    dims: dict[str, Any] = {
        "tokens": {0: auto},
        "queries": {0: auto},
        "keys": [{2: auto}] * L,
        "values": [{1: auto}] * L,
        "kr": [{2: auto}] * L,
        "rel": {0: auto, 1: auto},
        "neg": {0: auto, 1: auto},
    }
    level = logging.getLogger("torch").level
    logging.getLogger("torch").setLevel(logging.ERROR)  # "torchvision is not installed" and the like
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's deprecation chatter; its progress lines go to stdout
            program = torch.onnx.export(
                CachedPass(net.freeze()).eval(),
                args,
                dynamic_shapes=dims,
                input_names=input_names(L),
                output_names=list(OUTPUTS),
                dynamo=True,
                verbose=False,
            )
            assert program is not None
            program.save(str(path))
    finally:
        logging.getLogger("torch").setLevel(level)


def quantize(source: Path, path: Path, unsigned: bool) -> None:
    """The graph `source` with its weight matrices in int8 (ONNX Runtime's dynamic quantization), to `path`:
    unsigned weights where the CPU's signed kernel saturates (`unsigned`, hardware.int8_dot_saturates)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process the model, logged on the root logger
    try:
        # per output channel: a scale per column of each weight matrix, half the error of one scale per matrix
        weights = QuantType.QUInt8 if unsigned else QuantType.QInt8
        quantize_dynamic(str(source), str(path), weight_type=weights, per_channel=True)
    finally:
        root.setLevel(level)


def graph_file(net: TwoStreamXLNet, int8: bool) -> Path:
    """The cached graph of `net` (exported, and quantized for int8, on first use), made under the cache
    directory; when that cannot be written, in a temporary directory that the caller's session outlives."""
    name = f"xlnet-{fingerprint(net)}"
    folder = cache_dir() / "onnx"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return _made(folder, name, net, int8)
    except OSError:  # a read-only or full cache directory: make it for this process only
        return _made(Path(tempfile.mkdtemp(prefix="infill-onnx-")), name, net, int8)


class Background:
    """Whether a missing graph is made in another process while fills run in PyTorch (`make_elsewhere`): set by
    the long-lived processes (`infill lsp`, the daemon, `infill serve`), where the first fill should not wait
    for the export (about 30 s on a 2-core CPU); a one-off `infill fill` makes it in place."""

    enabled = False


def _paths(folder: Path, name: str, int8: bool) -> tuple[Path, Path]:
    """(the fp32 graph, the graph the engine runs) of model `name` under `folder`."""
    from infill.hardware import int8_dot_saturates

    fp32 = folder / f"{name}.onnx"
    unsigned = int8 and int8_dot_saturates()
    return fp32, folder / f"{name}-{'uint8' if unsigned else 'int8'}.onnx" if int8 else fp32


def graph_ready(net: TwoStreamXLNet, int8: bool) -> bool:
    """Whether the graph the engine would run is in the cache directory already."""
    return _paths(cache_dir() / "onnx", f"xlnet-{fingerprint(net)}", int8)[1].is_file()


def make_elsewhere(folder: str, int8: bool) -> subprocess.Popen[bytes]:
    """Start making the cached graph of the AS-ARM in model folder `folder` in another process (`python -m
    infill.models.onnx_make`, one thread, its output discarded); it outlives this one if need be."""
    command = [sys.executable, "-m", "infill.models.onnx_make", folder, *(["--int8"] if int8 else [])]
    return reaped_background(command, {**os.environ, "OMP_NUM_THREADS": "1", "INFILL_ENGINE": "torch"})


def reaped_background(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start `command` in its own session, its output discarded, with a thread that waits for it: the process
    is reaped when it ends, not left a zombie until the model is used again or the next process is started
    (a long-lived process may never use that model again). `poll()` stays usable from other threads."""
    import threading

    quiet = subprocess.DEVNULL
    process = subprocess.Popen(command, stdin=quiet, stdout=quiet, stderr=quiet, env=env, start_new_session=True)
    threading.Thread(target=process.wait, name="infill-reap-onnx-make", daemon=True).start()
    return process


def _made(folder: Path, name: str, net: TwoStreamXLNet, int8: bool) -> Path:
    from infill.hardware import int8_dot_saturates

    unsigned = int8 and int8_dot_saturates()
    fp32, target = _paths(folder, name, int8)
    if target.is_file():
        return target
    if not fp32.is_file():
        print(f"infill: exporting the model to ONNX (once for these weights) into {folder}", file=sys.stderr)
        _atomic(fp32, lambda tmp: export(net, tmp))
    if int8:
        _atomic(target, lambda tmp: quantize(fp32, tmp, unsigned))
    return target


def _atomic(path: Path, make: Callable[[Path], None]) -> None:
    """make(tmp) writes a file; it becomes `path` by one rename (readers see the old file or the whole new one)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".onnx", dir=path.parent)
    os.close(fd)
    try:
        make(Path(tmp))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class OnnxPass:
    """An infill.models.xlnet_cache.Engine: the exported CachedPass in ONNX Runtime (CPU)."""

    def __init__(self, net: TwoStreamXLNet, *, int8: bool = False, threads: int | None = None) -> None:
        require()
        import onnxruntime as ort
        import torch

        path = graph_file(net, int8)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only
        # with --threads above 1, idle workers sleep rather than spin, which on a busy machine waits on a
        # descheduled peer (docs/performance.md, "Threads")
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.int8 = int8
        self.path = path
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._inputs = [i.name for i in self.session.get_inputs()]
        self._running: Any = None  # the RunOptions of the pass in flight (interrupt_passes stops it)
        _ENGINES.add(self)

    def __call__(self, *inputs: torch.Tensor | list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """CachedPass's arguments, in its order (the per-layer lists flattened as the graph's inputs are named)."""
        import torch

        flat = [t for x in inputs for t in (x if isinstance(x, list) else [x])]
        layers = len(inputs[2])
        given = dict(zip(input_names(layers), flat, strict=True))
        import onnxruntime as ort

        from infill.progress import Cancelled

        self._running = run = ort.RunOptions()
        try:
            # each buffer is a contiguous block, passed without a copy
            logits, new_k, new_v = self.session.run(None, {n: given[n].numpy() for n in self._inputs}, run)
        except Exception:
            if run.terminate:  # interrupt_passes: the pass was stopped between two of its operations
                raise Cancelled("the forward pass was interrupted") from None
            raise
        finally:
            self._running = None
        return torch.from_numpy(logits), torch.from_numpy(new_k), torch.from_numpy(new_v)


_ENGINES: weakref.WeakSet[OnnxPass] = weakref.WeakSet()


def interrupt_passes() -> None:
    """Stop the pass every ONNX Runtime engine of the process is running, from any thread: it raises
    infill.progress.Cancelled (the caller's cache stays consistent: infill.models.xlnet_cache writes a pass's rows
    only after it returns). A server calls this when the fill that runs is no longer wanted, so that a new request
    does not wait for a long pass (a prompt's, hundreds of milliseconds) to end; between passes the fill's cancel
    check stops it."""
    for engine in list(_ENGINES):
        running = engine._running
        if running is not None:
            running.terminate = True
