"""A deterministic fake any-subset model for CLI / API tests, registered through the real registry.

The model fills each masked span with one of a few scripted alternatives (byte strings), chosen with given
weights. Its draft and verify passes are the exact marginals / conditionals of that mixture, so it is a proper
any-subset model: ASSD and sequential decoding both sample the mixture exactly. With one alternative per span
the fill is deterministic (every other token has probability ~1e-12).

Run as a script, this module is `infill` with such a model registered (run_cli), for tests that need a real
process (signals).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from infill import api
from infill.models.registry import LoadedModel, register, unregister

if TYPE_CHECKING:  # pytest stays out of the processes that run this module (a plugin, a script): ~0.2 s each
    import pytest

PAD, MASK, BOS = 256, 257, 258
VOCAB = 259


class ByteTokenizer:
    """One token per UTF-8 byte: an exact round trip, and "\\n" is always its own token."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


Alternatives = Sequence[tuple[str | bytes, float]]  # bytes: raw token bytes, e.g. half a UTF-8 character


class ScriptedModel:
    """Span j (0-based, in one sequence) is filled from fills[j % len(fills)], a list of (text, weight)."""

    def __init__(self, fills: Sequence[Alternatives], max_length: int = 4096, pad: bool = True) -> None:
        self.fills = [[(list(t.encode("utf-8") if isinstance(t, str) else t), w) for t, w in alts] for alts in fills]
        self.vocab_size = VOCAB
        self.mask_id = MASK
        self.pad_id: int | None = PAD if pad else None
        self.bos_id: int | None = BOS
        self.max_length = max_length
        self.forwards = 0
        self.last_prompt: list[int] = []  # the ids before the first masked position, as last seen
        self._rows: dict[tuple[int, tuple[int, ...], int], torch.Tensor] = {}  # _dist's rows

    def _spans(self, masked: torch.Tensor) -> tuple[list[int], list[int]]:
        """Span index and offset in span of every masked index (spans = runs of consecutive positions)."""
        span, offset = [], []
        pos = masked.tolist()
        for r, p in enumerate(pos):
            if r and p == pos[r - 1] + 1:
                span.append(span[-1])
                offset.append(offset[-1] + 1)
            else:
                span.append(span[-1] + 1 if r else 0)
                offset.append(0)
        return span, offset

    def _dist(self, span: int, known: list[int], at: int) -> torch.Tensor:
        """log p(token at offset `at` | the span's first len(known) tokens), over the vocabulary (memoized: a
        fill asks for the same rows at every step of its beams)."""
        key = (span % len(self.fills), tuple(known), at)
        if key not in self._rows:
            self._rows[key] = self._row(*key)
        return self._rows[key]

    def _row(self, span: int, known: tuple[int, ...], at: int) -> torch.Tensor:
        alts = self.fills[span]
        p = torch.full((VOCAB,), 1e-12, dtype=torch.float64)
        for seq, w in alts:
            full = seq + [PAD] * (at + 1)
            if self.pad_id is None:
                full = seq + [ord(" ")] * (at + 1)
            if tuple(full[: len(known)]) == known:
                p[full[at]] += w
        logits = torch.log(p / p.sum()).float()
        logits[MASK] = -math.inf
        return logits

    def _logits(
        self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, verify: bool
    ) -> torch.Tensor:
        self.forwards += 1
        id_list, pos = ids.tolist(), masked.tolist()
        self.last_prompt = id_list[: pos[0]] if pos else []
        span, offset = self._spans(masked)
        rank = {p: r for r, p in enumerate(pos)}
        rows = []
        for t in targets.tolist():
            r = rank[t]
            # verify: earlier positions of the span are filled (decoded or drafted); draft: decoded ones only
            limit = r if verify else min(r, n)
            known = [id_list[pos[q]] for q in range(r - offset[r], limit)]
            rows.append(self._dist(span[r], known, offset[r]))
        return torch.stack(rows)  # (k, V)

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._logits(ids, masked, n, targets, verify=False)

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._logits(ids, masked, n, targets, verify=True)


@contextmanager
def fake_model(
    fills: Sequence[Alternatives] | Sequence[str],
    name: str = "fake-cli",
    max_length: int = 4096,
    pad: bool = True,
    folder: Path | None = None,
) -> Iterator[ScriptedModel]:
    """Register a ScriptedModel as `name` for the duration of the block (unregistered in `finally`). `folder`
    stands for the model's folder (where a calibration.json would be read)."""
    norm = [[(f, 1.0)] if isinstance(f, str) else list(f) for f in fills]
    model = ScriptedModel(norm, max_length=max_length, pad=pad)
    info: dict[str, Any] = {"fake": True, **({"path": str(folder)} if folder is not None else {})}
    register(name, lambda spec: LoadedModel(name, "asarm", model, ByteTokenizer(), info))
    api.clear_model_cache()
    try:
        yield model
    finally:
        unregister(name)
        api.clear_model_cache()


class StalledModel(ScriptedModel):
    """A ScriptedModel that, on its first forward pass, creates the file `ready` and then waits (for a signal):
    a fill that is under way for as long as a test needs."""

    def __init__(self, fills: Sequence[Alternatives], ready: str) -> None:
        super().__init__(fills)
        self.ready = ready

    def _logits(
        self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, verify: bool
    ) -> torch.Tensor:
        import time

        open(self.ready, "w").close()  # noqa: SIM115 - an empty marker file
        time.sleep(600)
        return super()._logits(ids, masked, n, targets, verify)


def fill_in_process(path: Path, span: str, model: str, *args: str) -> Any:
    """`infill fill PATH --span SPAN --model MODEL ARGS` in this process (click's CliRunner; its Result, with
    stdout and stderr apart) on an empty model cache, emptied again after: every call loads its model afresh, as
    a new process would, and keeps none loaded."""
    from click.testing import CliRunner

    from infill.cli import main

    api.clear_model_cache()
    try:
        return CliRunner().invoke(main, ["fill", str(path), "--span", span, "--model", model, *args])
    finally:
        api.clear_model_cache()


def run_cli(argv: list[str]) -> None:
    """`infill ARGV` in this (real) process, with a fake model `fake-cli` that fills every span with the text of
    $FAKE_CLI_FILL. With $FAKE_CLI_STALL=PATH the model stalls (StalledModel, creating PATH); with
    $FAKE_CLI_STALL_WRITE=PATH the first fsync of a write does (after creating PATH). For tests that send real
    signals to a real process: run this file as a script."""
    import os

    from infill.__main__ import run

    fill = [[(os.environ.get("FAKE_CLI_FILL", "x = 1"), 1.0)]]
    stall = os.environ.get("FAKE_CLI_STALL")
    model = StalledModel(fill, stall) if stall else ScriptedModel(fill)
    register("fake-cli", lambda spec: LoadedModel("fake-cli", "asarm", model, ByteTokenizer(), {"fake": True}))
    stall_write = os.environ.get("FAKE_CLI_STALL_WRITE")
    if stall_write:
        import time

        def fsync(fd: int) -> None:
            open(stall_write, "w").close()  # noqa: SIM115 - an empty marker file
            time.sleep(600)

        os.fsync = fsync
    run(argv)


if __name__ == "__main__":
    import sys

    run_cli(sys.argv[1:])


def compiles(text: str) -> bool:
    """CPython's verdict on `text` as a module."""
    try:
        compile(text, "<test>", "exec", dont_inherit=True)
    except SyntaxError:
        return False
    return True


def unreadable_file(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the file at `path` unreadable (mode 0; as root, who reads any file, reading it fails as it would for
    its owner)."""
    path.chmod(0)
    if os.geteuid() == 0:
        real = Path.read_bytes

        def read_bytes(self: Path) -> bytes:
            if self == path:
                raise PermissionError(13, "Permission denied")
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", read_bytes)
