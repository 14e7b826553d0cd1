"""Near-duplicate removal and the evaluation-contamination check of the training corpus.

Near duplicates. Installed packages vendor each other (pip carries old copies of requests and urllib3, several
packages carry `six` or `typing_extensions`), and a file copied with a few edits is not caught by the exact
SHA-256 check. Each file becomes the set of its word 5-grams ("shingles"); a 64-value MinHash signature
estimates the Jaccard similarity of two sets, and locality-sensitive hashing (16 bands of 4 values) finds the
candidate pairs without comparing every pair. A file whose estimated similarity to a file kept earlier is at
least `threshold` is dropped. Deduplication runs before the train / held-out split, so no near copy of a
held-out file is trained on.

Contamination. No HumanEval problem may be in the training data. A file is contaminated by a problem when it
defines the problem's function (`def name(`) and holds at least half of the problem's informative
canonical-solution lines (distinct lines of at least 12 characters after whitespace is collapsed that name
something other than keywords and builtins; a problem needs two such lines, so one-line solutions, which are
generic code such as `return sorted(set(l))`, are reported by their 13-gram overlap only). Contaminated files
are removed. The manifest also records, per problem, whether any kept file shares a 13-gram of word tokens
with the problem's canonical solution (the overlap measure of the GPT-3 paper's contamination study).
"""

from __future__ import annotations

import builtins
import keyword
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+|[^\sA-Za-z_0-9]")
SHINGLE = 5
PERMUTATIONS = 64
BANDS = 16


def words(text: str) -> list[str]:
    """Identifiers, numbers and single punctuation characters of `text` (whitespace and layout ignored)."""
    return _WORD.findall(text)


def _shingle_hashes(text: str, n: int = SHINGLE) -> list[int]:
    w = words(text)
    if len(w) < n:
        return [zlib.crc32(" ".join(w).encode())]
    return list({zlib.crc32("\x1f".join(w[i : i + n]).encode()) for i in range(len(w) - n + 1)})


class MinHasher:
    """MinHash signatures with fixed (seeded) multiply-shift hash functions."""

    def __init__(self, permutations: int = PERMUTATIONS, seed: int = 1) -> None:
        import numpy as np

        rng = np.random.default_rng(seed)
        # multiply-shift hashing: h(x) = ((a x + b) mod 2^64) >> 32, a odd; uint64 arithmetic wraps mod 2^64
        self.a = rng.integers(1, 1 << 63, size=permutations, dtype=np.uint64) | np.uint64(1)
        self.b = rng.integers(0, 1 << 63, size=permutations, dtype=np.uint64)

    def signature(self, text: str) -> Any:
        """(permutations,) uint64 signature of the text's shingle set."""
        import numpy as np

        x = np.asarray(_shingle_hashes(text), dtype=np.uint64)  # (S,) 32-bit values
        h = (self.a[:, None] * x[None, :] + self.b[:, None]) >> np.uint64(32)  # (P, S)
        return h.min(axis=1)


@dataclass
class NearDuplicates:
    """Streaming near-duplicate filter: `add(key, text)` returns the key of an earlier similar file or None."""

    threshold: float = 0.85
    hasher: MinHasher = field(default_factory=MinHasher)
    _buckets: dict[tuple[int, bytes], list[int]] = field(default_factory=dict)
    _signatures: list[Any] = field(default_factory=list)
    _keys: list[str] = field(default_factory=list)

    def add(self, key: str, text: str, signature: Any = None) -> str | None:
        """`signature`: the text's MinHash signature when it was computed elsewhere (a worker process)."""
        sig = self.hasher.signature(text) if signature is None else signature
        rows = len(sig) // BANDS
        bands = [(b, sig[b * rows : (b + 1) * rows].tobytes()) for b in range(BANDS)]
        seen: set[int] = set()
        for band in bands:
            for j in self._buckets.get(band, []):
                if j in seen:
                    continue
                seen.add(j)
                if float((self._signatures[j] == sig).mean()) >= self.threshold:
                    return self._keys[j]
        index = len(self._keys)
        self._keys.append(key)
        self._signatures.append(sig)
        for band in bands:
            self._buckets.setdefault(band, []).append(index)
        return None


def _norm_line(line: str) -> str:
    return " ".join(line.split())


@dataclass(frozen=True)
class Problem:
    """An evaluation problem: its id, function name and canonical solution."""

    task_id: str
    entry_point: str
    solution: str

    def lines(self) -> list[str]:
        """Distinct informative solution lines: >= 12 characters after collapsing whitespace, not a comment,
        and naming something other than keywords and builtins (`return False` matches any file)."""
        out: list[str] = []
        for line in self.solution.splitlines():
            n = _norm_line(line)
            names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", n)) - _GENERIC
            if len(n) >= 12 and not n.startswith("#") and names and n not in out:
                out.append(n)
        return out


_GENERIC = frozenset(keyword.kwlist) | frozenset(dir(builtins))


class Contamination:
    """Which files contain an evaluation problem (rule in the module docstring), and 13-gram overlap stats."""

    NGRAM = 13

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        self._lines = [p.lines() for p in self.problems]
        self._grams: dict[int, set[int]] = {}  # 13-gram hash -> problem indices
        for i, p in enumerate(self.problems):
            w = words(p.solution)
            for j in range(len(w) - self.NGRAM + 1):
                self._grams.setdefault(zlib.crc32("\x1f".join(w[j : j + self.NGRAM]).encode()), set()).add(i)
        self.overlap: set[int] = set()  # problems sharing a 13-gram with a kept file

    def contaminating(self, text: str) -> list[str]:
        """Task ids of the problems this file contains (empty when clean)."""
        hits = []
        file_lines: set[str] | None = None
        for p, lines in zip(self.problems, self._lines, strict=True):
            if len(lines) < 2 or f"def {p.entry_point}(" not in text:
                continue
            if file_lines is None:
                file_lines = {_norm_line(x) for x in text.splitlines()}
            if sum(line in file_lines for line in lines) * 2 >= len(lines):
                hits.append(p.task_id)
        return hits

    def note_kept(self, text: str) -> None:
        """Record the 13-gram overlap of a file that stays in the corpus."""
        self.overlap |= self.overlapping(text)

    def overlapping(self, text: str) -> set[int]:
        """Indices of the problems whose canonical solution shares a 13-gram of word tokens with `text`."""
        found: set[int] = set()
        if not self._grams:
            return found
        w = words(text)
        for j in range(len(w) - self.NGRAM + 1):
            hit = self._grams.get(zlib.crc32("\x1f".join(w[j : j + self.NGRAM]).encode()))
            if hit:
                found |= hit
        return found

    def report(self, removed: dict[str, list[str]]) -> dict[str, Any]:
        return {
            "method": (
                "file removed when it defines the problem's function and holds >= half of its informative "
                "canonical-solution lines (>= 12 chars, not only keywords/builtins, >= 2 lines); overlap = "
                "problems whose canonical solution shares a 13-gram of word tokens with a kept file"
            ),
            "problems": len(self.problems),
            "removed_files": len(removed),
            "removed": dict(sorted(removed.items())),
            "problems_with_13gram_overlap": len(self.overlap),
            "overlap_task_ids": sorted(self.problems[i].task_id for i in self.overlap),
        }


def problems_from(records: Iterable[dict[str, str]]) -> list[Problem]:
    """Problems from dicts with task_id, entry_point and canonical_solution (or MBPP's code) keys."""
    out = []
    for r in records:
        solution = r.get("canonical_solution") or r.get("code") or ""
        name = r.get("entry_point") or _first_def(solution)
        out.append(Problem(str(r.get("task_id", "?")), name, solution))
    return out


def _first_def(code: str) -> str:
    m = re.search(r"def\s+([A-Za-z_][A-Za-z_0-9]*)", code)
    return m.group(1) if m else ""
