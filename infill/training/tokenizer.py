"""The AS-ARM's tokenizer, trained, saved and loaded: the project's one BPE recipe (infill.models.tokenizer
.train_byte_bpe: line breaks isolated, bytes mapped to printable characters, an exact round trip) with the
specials below.

Special tokens, in this order so their ids are fixed: "<pad>" = 0 (end-of-fill padding inside a
variable-length span), "<mask>" = 1, "<bos>" = 2 (always-visible first position). They are never produced from
text: the literal string "<mask>" in a source file encodes as ordinary bytes (`encode_special_tokens`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from infill.errors import InputError, one_line
from infill.models.tokenizer import SPECIALS, train_byte_bpe

if TYPE_CHECKING:
    from tokenizers import Tokenizer as HFTokenizer

PAD_ID, MASK_ID, BOS_ID = 0, 1, 2  # SPECIALS' ids


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> HFTokenizer:
    """The AS-ARM's tokenizer: train_byte_bpe with SPECIALS at ids 0..2, never matched inside text."""
    tok = train_byte_bpe(texts, vocab_size)
    finish(tok)
    return tok


def finish(tok: HFTokenizer) -> None:
    """Check the special ids and stop specials from being matched inside text."""
    for i, s in enumerate(SPECIALS):
        if tok.token_to_id(s) != i:
            raise ValueError(f"special token {s!r} must have id {i}, has {tok.token_to_id(s)}")
    tok.encode_special_tokens = True


def read_tokenizer(path: Path) -> HFTokenizer:
    """Any tokenizer.json a trainer is given (--tokenizer); InputError (exit 2) naming the file when it is
    missing or not one (tokenizers raises a plain Exception, which would read as our bug)."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - a missing file, not JSON, not a tokenizer
        raise InputError(f"{path}: not a tokenizer.json ({one_line(str(exc))})") from None


def load_tokenizer(path: Path) -> HFTokenizer:
    """A tokenizer.json written by `save_tokenizer` (specials checked, never matched in text); InputError for a
    file that is not one, or not an AS-ARM's."""
    tok = read_tokenizer(path)
    try:
        finish(tok)
    except ValueError as exc:
        raise InputError(f"{path}: not an AS-ARM tokenizer from `infill train tokenizer` ({exc})") from None
    return tok


def save_tokenizer(tok: HFTokenizer, path: Path) -> None:
    """Write `tok` to `path`; InputError (exit 2) when it cannot be written (tokenizers raises a plain
    Exception for a folder that cannot hold it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        tok.save(str(path))
    except Exception as exc:  # noqa: BLE001 - a missing or read-only folder, a full disk, a folder named so
        raise InputError(f"cannot write {path}: {one_line(str(exc))}") from None


def encode(tok: HFTokenizer, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False).ids)


def decode(tok: HFTokenizer, ids: list[int]) -> str:
    return str(tok.decode(ids, skip_special_tokens=False))


def bytes_per_token(tok: HFTokenizer, texts: list[str]) -> float:
    """UTF-8 bytes per token over `texts` (higher = shorter sequences for the same code)."""
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    n_tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    return n_bytes / max(n_tokens, 1)


def sample_texts(records: Iterator[dict[str, str]], max_bytes: int) -> list[str]:
    """The first records' texts up to `max_bytes` in total."""
    out: list[str] = []
    total = 0
    for r in records:
        out.append(r["text"])
        total += len(r["text"])
        if total >= max_bytes:
            break
    return out


def encode_documents(tok: HFTokenizer, texts: Sequence[str], min_tokens: int = 1) -> list[array[int]]:
    """Each text's token ids as a compact array('i') (4 bytes a token), those with fewer than `min_tokens`
    left out. Texts are encoded 256 at a time: a tokenizers Encoding also keeps every token's string and
    offsets, so encoding a whole corpus at once held about 13 GB for 9,500 files (and two trainers could not share a
    24 GB machine)."""
    out: list[array[int]] = []
    for start in range(0, len(texts), 256):
        for enc in tok.encode_batch(list(texts[start : start + 256])):
            if len(enc.ids) >= min_tokens:
                out.append(array("i", enc.ids))
    return out
