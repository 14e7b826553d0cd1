"""GGUF files read without llama.cpp: the header's metadata and tensor table, and the checks made before a file
is handed to llama.cpp (infill.models.llamacpp), so that a bad file is one clear error and never an allocation.

A GGUF file (llama.cpp's single-file format) is: the magic b"GGUF", a version (2 or 3), the tensor count, the
metadata count; the metadata as typed key-value pairs (general.architecture, the shapes, the tokenizer's tokens,
token types, merges and special ids); one record per tensor (name, dimensions, ggml type, offset into the data);
then, aligned to `general.alignment` (32 by default), the tensor data.

What is checked here, before anything is allocated:
- the file is a GGUF file of a version llama.cpp reads, and its header parses inside the file (a header cut short,
  or one whose counts or lengths point past the end, is refused as truncated or corrupt);
- the tensors fit in free memory (their byte sizes from the dimensions and ggml types: a header that claims
  terabytes is refused here, whatever the file's length);
- every tensor's data lies inside the file (a file cut short, e.g. an interrupted download, is refused);
- a split model (`NAME-00001-of-00003.gguf`, llama.cpp's gguf-split: `split.count` and `split.no` in each part's
  metadata) is named by its first part, and every other part is there, whole, beside it.

Importing this module imports neither torch nor llama.cpp; reading the header of a 0.5B model's file (its
151,936 tokens included) takes a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infill.errors import ModelError

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # what llama.cpp reads
DEFAULT_ALIGNMENT = 32

# ggml type id -> (elements per block, bytes per block) for the types llama.cpp stores weights in
GGML_BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    9: (32, 40),  # Q8_1
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    16: (256, 66),  # IQ2_XXS
    17: (256, 74),  # IQ2_XS
    18: (256, 98),  # IQ3_XXS
    19: (256, 50),  # IQ1_S
    20: (32, 18),  # IQ4_NL
    21: (256, 110),  # IQ3_S
    22: (256, 82),  # IQ2_S
    23: (256, 136),  # IQ4_XS
    24: (1, 1),  # I8
    25: (1, 2),  # I16
    26: (1, 4),  # I32
    27: (1, 8),  # I64
    28: (1, 8),  # F64
    29: (256, 56),  # IQ1_M
    30: (1, 2),  # BF16
    34: (256, 54),  # TQ1_0
    35: (256, 66),  # TQ2_0
    39: (32, 17),  # MXFP4
    40: (64, 36),  # NVFP4
    41: (128, 18),  # Q1_0
}

# metadata value types: id -> struct format of a scalar (8 string, 9 array are read apart)
_SCALARS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q"}
_SCALARS[12] = "<d"
STRING, ARRAY = 8, 9
TOKEN_CONTROL = 3  # tokenizer.ggml.token_type of special tokens (BOS, EOS, FIM and chat markers)
TOKEN_USER_DEFINED = 4


class _Truncated(Exception):
    """A read past the end of the file."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # from the start of the data section

    @property
    def elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def nbytes(self) -> int | None:
        """The tensor's bytes in the file, or None for a ggml type this reader does not know."""
        block = GGML_BLOCKS.get(self.ggml_type)
        if block is None:
            return None
        per, size = block
        return -(-self.elements // per) * size


@dataclass
class GGUFHeader:
    """What a GGUF file says about itself (module docstring)."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)
    data_start: int = 0  # byte offset of the tensor data
    file_size: int = 0

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def name(self) -> str | None:
        value = self.metadata.get("general.name")
        return str(value) if value is not None else None

    @property
    def tokens(self) -> list[str]:
        value = self.metadata.get("tokenizer.ggml.tokens")
        return value if isinstance(value, list) else []

    @property
    def token_types(self) -> list[int]:
        value = self.metadata.get("tokenizer.ggml.token_type")
        return value if isinstance(value, list) else []

    def special(self, key: str) -> int | None:
        """A special token's id from the metadata (`bos`, `eos`, `eot`, `fim_pre` ... of tokenizer.ggml.*_token_id)."""
        value = self.metadata.get(f"tokenizer.ggml.{key}_token_id")
        return int(value) if isinstance(value, int) else None

    @property
    def parameters(self) -> int:
        return sum(t.elements for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        """The tensors' bytes (those of a ggml type this reader knows)."""
        return sum(t.nbytes or 0 for t in self.tensors)

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) else None


class _Reader:
    """Little-endian reads from a buffer, each checked against its end."""

    def __init__(self, buf: Any, size: int) -> None:
        self.buf, self.size, self.at = buf, size, 0

    def need(self, n: int) -> None:
        if n < 0 or self.at + n > self.size:
            raise _Truncated

    def scalar(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n)
        (value,) = struct.unpack_from(fmt, self.buf, self.at)
        self.at += n
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        self.need(n)
        raw = bytes(self.buf[self.at : self.at + n])
        self.at += n
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int, keep: bool = True) -> Any:
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, count = self.scalar("<I"), self.scalar("<Q")
            if item in _SCALARS:  # a run of scalars: one bounds check, one unpack
                fmt = _SCALARS[item]
                width = struct.calcsize(fmt)
                self.need(count * width)
                if not keep:
                    self.at += count * width
                    return None
                out = list(struct.unpack_from(f"<{count}{fmt[1:]}", self.buf, self.at))
                self.at += count * width
                return out
            if count > self.size - self.at:  # every element takes at least one byte
                raise _Truncated
            out = [self.value(item, keep) for _ in range(count)]
            return out if keep else None
        scalar = _SCALARS.get(kind)
        if scalar is None:
            raise ValueError(f"unknown metadata type {kind}")
        return self.scalar(scalar)


def read_header(path: str | Path, *, vocabulary: bool = True) -> GGUFHeader:
    """The header of the GGUF file at `path` (vocabulary=False skips the token lists and merges, for listing).
    ModelError for a file that is not GGUF, of a version llama.cpp does not read, or whose header is cut short or
    points past the file's end."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            size = path.stat().st_size
            if size < 24:
                if fh.read(4) != MAGIC:
                    raise ModelError(f"{path} is not a GGUF file")
                raise ModelError(f"{path}: truncated GGUF file ({size} bytes, shorter than its header)")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(path, buf, size, vocabulary)
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _parse(path: Path, buf: Any, size: int, vocabulary: bool) -> GGUFHeader:
    if bytes(buf[:4]) != MAGIC:
        raise ModelError(f"{path} is not a GGUF file (it does not start with b'GGUF')")
    r = _Reader(buf, size)
    r.at = 4
    try:
        version = r.scalar("<I")
        if version not in VERSIONS:
            raise ModelError(f"{path}: GGUF version {version}; llama.cpp reads versions 2 and 3")
        n_tensors, n_kv = r.scalar("<Q"), r.scalar("<Q")
        if n_kv > size or n_tensors > size:  # every entry takes bytes
            raise _Truncated
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string()
            kind = r.scalar("<I")
            keep = vocabulary or not key.startswith(("tokenizer.ggml.tokens", "tokenizer.ggml.merges"))
            keep = keep and (vocabulary or key != "tokenizer.ggml.token_type")
            metadata[key] = r.value(kind, keep)
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            dims = r.scalar("<I")
            if dims > 8:
                raise ModelError(f"{path}: tensor {name!r} claims {dims} dimensions: a corrupt GGUF header")
            shape = tuple(r.scalar("<Q") for _ in range(dims))
            tensors.append(TensorInfo(name, shape, r.scalar("<I"), r.scalar("<Q")))
    except _Truncated:
        raise ModelError(
            f"{path}: truncated or corrupt GGUF file (its header runs past the file's {size} bytes)"
        ) from None
    except (ValueError, struct.error) as exc:
        raise ModelError(f"{path}: corrupt GGUF header ({exc})") from None
    align = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    align = align if isinstance(align, int) and align > 0 else DEFAULT_ALIGNMENT
    data_start = -(-r.at // align) * align
    return GGUFHeader(path, version, metadata, tensors, data_start, size)


def check_loadable(header: GGUFHeader, free: int | None) -> None:
    """ModelError, before anything is allocated, when the tensors the header claims would not fit in `free` bytes
    of memory (None: unknown, not checked) or lie past the end of the file (a file cut short)."""
    _check_memory(header.path, header.tensor_bytes, free)
    _check_bounds(header)


def _check_memory(path: Path, need: int, free: int | None) -> None:
    if free is not None and need > free:
        raise ModelError(
            f"{path}: its tensors need {need / 2**30:.1f} GiB of memory, but {free / 2**30:.1f} GiB is free; "
            "close other programs or use a smaller (more quantized) model"
        )


def _check_bounds(header: GGUFHeader) -> None:
    end = header.data_start
    for t in header.tensors:
        nbytes = t.nbytes
        if nbytes is not None:
            end = max(end, header.data_start + t.offset + nbytes)
    if end > header.file_size:
        raise ModelError(
            f"{header.path}: truncated GGUF file: its tensors end at byte {end:,} but the file has "
            f"{header.file_size:,} (an interrupted download? fetch it again)"
        )


def is_gguf(path: Path) -> bool:
    """Whether `path` is a file that starts with the GGUF magic."""
    try:
        with path.open("rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


# llama.cpp's names for the parts of a split model (llama_split_path): PREFIX-00001-of-00003.gguf
_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def check_split(header: GGUFHeader, free: int | None) -> GGUFHeader:
    """check_loadable over a whole model: for a split model's first part, every part (read from beside it, as
    llama.cpp reads them) and the memory of all of them. Returns the first part's header with every part's tensors
    (for their count and types; each part's offsets are its own). ModelError for a later part (naming the first),
    or a part that is missing or cut short."""
    count, number = header.metadata.get("split.count"), header.metadata.get("split.no", 0)
    if not isinstance(count, int) or count <= 1:
        check_loadable(header, free)
        return header
    path = header.path
    named = _SPLIT_NAME.match(path.name)
    if isinstance(number, int) and number != 0:
        first = path.with_name(f"{named.group('prefix')}-00001-of-{count:05d}.gguf") if named else None
        hint = f": pass its first part, --model {first}" if first else ": pass its first part"
        raise ModelError(f"{path} is part {number + 1} of {count} of a split model{hint}")
    if named is None:
        raise ModelError(
            f"{path} is the first of {count} parts of a split model, but not named NAME-00001-of-{count:05d}.gguf, "
            "so llama.cpp cannot find its other parts: give it its original name"
        )
    parts = [header]
    for n in range(2, count + 1):
        part = path.with_name(f"{named.group('prefix')}-{n:05d}-of-{count:05d}.gguf")
        if not part.is_file():
            raise ModelError(
                f"{path}: part {n} of {count} of this split model, {part.name}, is missing beside it "
                "(an interrupted download? fetch it again)"
            )
        parts.append(read_header(part, vocabulary=False))
    _check_memory(path, sum(h.tensor_bytes for h in parts), free)
    for part_header in parts:
        _check_bounds(part_header)
    return dataclasses.replace(header, tensors=[t for h in parts for t in h.tensors])
