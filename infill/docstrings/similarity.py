"""ROUGE-L between two sentences: the F-measure of their longest common subsequence of words.

Used to measure a written sentence against the docstring a person wrote (benchmarks/docstrings_quality.py) and,
as a feature of the calibrated confidence, how far the model's summary agrees with the names-only one.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """Lower-case words; identifiers split at underscores and case changes ("read_config" -> read, config)."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return _WORD.findall(spaced.lower())


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence (dynamic programming, one row at a time)."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0
        for j, y in enumerate(b, start=1):
            above = row[j]
            row[j] = diagonal + 1 if x == y else max(row[j], row[j - 1])
            diagonal = above
    return row[-1]


def rouge_l(candidate: str, reference: str, beta: float = 1.0) -> float:
    """ROUGE-L F-measure in [0, 1] (beta 1: precision and recall weigh the same); 0 when either is empty."""
    a, b = words(candidate), words(reference)
    if not a or not b:
        return 0.0
    common = lcs_length(a, b)
    if common == 0:
        return 0.0
    precision, recall = common / len(a), common / len(b)
    return (1 + beta**2) * precision * recall / (recall + beta**2 * precision)


def first_sentence(docstring: str) -> str:
    """The first sentence of a docstring's text (quotes and a string prefix removed; up to the first blank line
    or the first full stop followed by a space)."""
    body = re.sub(r'^[rRuUbB]*("""|\'\'\'|"|\')', "", docstring.strip())
    body = re.sub(r'("""|\'\'\'|"|\')$', "", body).strip()
    paragraph = re.split(r"\n\s*\n", body, maxsplit=1)[0]
    line = " ".join(paragraph.split())
    match = re.search(r"(?<=[a-z0-9)\]`'\"])[.!?](?:\s|$)", line)
    return line[: match.start() + 1] if match else line
