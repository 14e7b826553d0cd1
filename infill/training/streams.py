"""Token streams for training and held-out measurement: tokenized once and cached per run, or packed into one
compressed file that travels to a GPU machine (docs/training.md, "On a GPU")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch
    from tokenizers import Tokenizer as HFTokenizer

    from infill.training.objective import TrainConfig

from infill.errors import InputError
from infill.training.layouts import Batches, LayoutSampler, line_break_ids, token_strings, tokenize_stream


def heldout_batches(
    tok: HFTokenizer, corpus: Path, cfg: TrainConfig, count: int, seed: int = 1234
) -> list[dict[str, torch.Tensor]]:
    """Fixed held-out batches (same layouts and seed every time) for comparable held-out losses. `corpus` is a
    corpus folder or a packed training set (`pack_streams`)."""
    import numpy as np

    stream = heldout_stream(tok, corpus, required=True)
    sampler = LayoutSampler(token_strings(tok), line_break_ids(tok), np.random.default_rng(seed))
    b = Batches(stream, sampler, cfg.seq_len, min(cfg.batch_size, count))
    return [b.next() for _ in range(max(1, count // b.batch_size))]


def heldout_stream(tok: HFTokenizer, corpus: Path, required: bool = False) -> np.ndarray:
    """The held-out split as one token stream (from a corpus folder, or from a pack), its files in hash order:
    the same windows whatever order a corpus build found them in (the order of --site folders, of packages).
    `required`: an empty one is an InputError (something is to be measured on it)."""
    import numpy as np

    from infill.training.corpus import read_split

    if corpus.is_file():
        stream = np.load(corpus)["heldout"]
    else:
        records = sorted(read_split(corpus, "heldout"), key=lambda r: r["sha256"])
        stream = tokenize_stream(tok, [r["text"] for r in records])
    if required and not len(stream):
        raise InputError(f"{corpus}: the corpus has no held-out text to measure on")
    return stream


def vocab_digest(tok: HFTokenizer, size: int) -> str:
    """sha256 of the strings of ids 0..size-1: a tokenizer that extends another (new tokens after its last id)
    has the other's digest over the other's size."""
    import hashlib

    return hashlib.sha256("\n".join(str(tok.id_to_token(i)) for i in range(size)).encode("utf-8")).hexdigest()


def pack_streams(
    tok: HFTokenizer, tokenizer_json: Path, corpus: Path, out: Path, max_package_bytes: int, max_mb: float
) -> dict[str, Any]:
    """Write the training and held-out token streams of `corpus` to one compressed .npz of at most `max_mb` MB
    (the training stream is cut to fit), for training where the corpus is not available (a GPU machine)."""
    import numpy as np

    from infill.training.corpus import balanced_records

    train = tokenize_stream(tok, [r["text"] for r in balanced_records(corpus, "train", max_package_bytes)])
    held = heldout_stream(tok, corpus)
    meta = {
        **pack_meta(tok, tokenizer_json),
        "corpus": str(corpus),
        "max_package_bytes": max_package_bytes,
        "train_tokens_available": int(len(train)),
    }
    keep = len(train)
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:
        meta["train_tokens"] = int(keep)
        np.savez_compressed(out, train=train[:keep], heldout=held, meta=np.array(json.dumps(meta)))
        size = out.stat().st_size / 1e6
        if size <= max_mb or keep < 1000:
            break
        keep = int(keep * max_mb / size * 0.98)
    meta["megabytes"] = round(out.stat().st_size / 1e6, 2)
    return meta


def pack_meta(tok: HFTokenizer, tokenizer_json: Path) -> dict[str, Any]:
    """What a pack records of its tokenizer, checked by the trainers that read it."""
    import hashlib

    return {
        "tokenizer_sha256": hashlib.sha256(tokenizer_json.read_bytes()).hexdigest(),
        "vocab_size": tok.get_vocab_size(),
        "vocab_sha256": vocab_digest(tok, tok.get_vocab_size()),
    }


def write_pack(
    out: Path, tokenizer_json: Path, train: np.ndarray, heldout: np.ndarray, extra: dict[str, Any]
) -> dict[str, Any]:
    """A pack of already tokenized streams, uncompressed (it is read where it is written, by the GPU job's
    trainers); the same layout `pack_streams` writes and every trainer reads."""
    import numpy as np

    from infill.training.tokenizer import load_tokenizer

    meta = {**pack_meta(load_tokenizer(tokenizer_json), tokenizer_json), **extra, "train_tokens": int(len(train))}
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, train=train, heldout=heldout, meta=np.array(json.dumps(meta)))
    return meta


def cached_stream(
    tok: HFTokenizer, tokenizer_json: Path, corpus: Path, max_package_bytes: int, run_dir: Path, write: bool = True
) -> tuple[np.ndarray, int]:
    """The training token stream, cached in run_dir keyed by tokenizer, corpus and package cap (resumes skip
    the tokenization); returns (stream, number of files). A packed training set (`pack_streams`) is used as is.
    `write`: False for the processes of a distributed run that read rank 0's cache, or tokenize without one."""
    import hashlib

    import numpy as np

    from infill.training.corpus import balanced_records

    if corpus.is_file():
        data = np.load(corpus)
        meta = json.loads(str(data["meta"]))
        if meta["tokenizer_sha256"] != hashlib.sha256(tokenizer_json.read_bytes()).hexdigest():
            raise InputError(f"{corpus} was packed with another tokenizer than {tokenizer_json}")
        if not len(data["train"]):
            raise InputError(f"{corpus}: the packed training set has no training text")
        return data["train"], 0
    key = hashlib.sha256()
    key.update(tokenizer_json.read_bytes())
    key.update(str((corpus / "train.jsonl").stat().st_size).encode())
    key.update(str(max_package_bytes).encode())
    path = run_dir / f"stream-{key.hexdigest()[:16]}.npz"
    if path.exists():
        data = np.load(path)
        return data["stream"], int(data["files"])
    records = balanced_records(corpus, "train", max_package_bytes)
    stream = tokenize_stream(tok, [r["text"] for r in records])
    if write:
        run_dir.mkdir(parents=True, exist_ok=True)
        np.savez(path, stream=stream, files=np.array(len(records)))
    return stream, len(records)
