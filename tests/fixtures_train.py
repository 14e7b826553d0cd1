"""Tiny corpora and tokenizers for the training tests (helper "train")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SAMPLE_CODE = '''import os


def add(a, b):
    """Return the sum of a and b."""
    return a + b


class Stack:
    """A last-in first-out stack."""

    def __init__(self):
        self.items = []

    def push(self, item):
        # append at the end
        self.items.append(item)

    def pop(self):
        """Remove and return the top item."""
        return self.items.pop()


def main(argv):
    for arg in argv:
\tif arg.startswith("-"):
            print("option", arg)
    return 0
'''


def sample_texts(n: int = 40) -> list[str]:
    """Variations of SAMPLE_CODE (renamed identifiers, CRLF copies) so files differ."""
    out = []
    for i in range(n):
        text = SAMPLE_CODE.replace("add", f"add{i}").replace("Stack", f"Stack{i}")
        if i % 5 == 0:
            text = text.replace("\n", "\r\n")
        out.append(text)
    return out


@pytest.fixture(scope="session")
def tiny_tokenizer():  # type: ignore[no-untyped-def]
    from infill.training.tokenizer import train_tokenizer

    return train_tokenizer(sample_texts(), vocab_size=400)


def write_corpus(folder: Path, texts: list[str], heldout: list[str]) -> Path:
    """A corpus folder in the layout of infill.training.corpus (train.jsonl, heldout.jsonl, manifest.json)."""
    import hashlib

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "heldout").mkdir(exist_ok=True)
    for name, items in (("train", texts), ("heldout", heldout)):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for t in items:
                sha = hashlib.sha256(t.encode()).hexdigest()
                f.write(json.dumps({"sha256": sha, "package": "sample", "path": "x.py", "text": t}) + "\n")
                if name == "heldout":
                    (folder / "heldout" / f"{sha}.py").write_text(t, encoding="utf-8")
    manifest = {
        "totals": {"files": len(texts) + len(heldout), "bytes": 0, "heldout_files": len(heldout)},
        "packages": [],
        "python": "3",
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


BLOCK_TEXTS = [
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n" * 3,
    "for i in range(10):\n    print(i)\n    total = total + i\nprint(total)\n" * 3,
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n" * 3,
]


def tiny_block_model_and_corpus(root: Path, model_name: str) -> tuple[Path, Path]:
    """A tiny random block-diffusion checkpoint (root/model_name) and a corpus of BLOCK_TEXTS, for the trainers
    of heads and adapters on top of a frozen block-diffusion model (PTP, SSMD)."""
    from infill.models.tiny import tiny_blockdiff_checkpoint

    folder = tiny_blockdiff_checkpoint(root / model_name, seed=3, texts=BLOCK_TEXTS)
    return folder, write_corpus(root / "corpus", BLOCK_TEXTS, BLOCK_TEXTS[:2])
