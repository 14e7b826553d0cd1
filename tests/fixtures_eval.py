"""A scripted any-subset model for evaluation tests: it fills whatever answer the test sets, token by token.

ByteTokenizer: one token per UTF-8 byte (exact round trip), specials <pad>=256, <mask>=257, <bos>=258.
ScriptedModel: the i-th masked position (in decoding order) gets answer[i], positions past the answer get <pad>;
both passes return the same logits, so every decoder reproduces the answer exactly.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from infill.models.registry import LoadedModel

PAD, MASK, BOS, VOCAB = 256, 257, 258, 259


class ByteTokenizer:
    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class ScriptedModel:
    vocab_size = VOCAB
    mask_id = MASK
    pad_id: int | None = PAD
    bos_id: int | None = BOS
    max_length = 4096

    def __init__(self) -> None:
        self.answer: list[int] = []
        self.calls = 0

    def _logits(self, masked: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        logits = torch.zeros(len(targets), VOCAB)  # (k, V)
        for row, position in enumerate(targets.tolist()):
            rank = int((masked == position).nonzero()[0, 0])
            logits[row, self.answer[rank] if rank < len(self.answer) else PAD] = 20.0
        logits[:, MASK] = float("-inf")
        return logits

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._logits(masked, targets)

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        return self._logits(masked, targets)


def scripted_loaded_model() -> LoadedModel:
    return LoadedModel("scripted", "asarm", ScriptedModel(), ByteTokenizer(), {"params": 0, "provenance": "test"})
