"""Single-line infilling slots and the fillers that answer them.

A `Slot` is one masked line: `before` ends where the line starts, `after` starts with the line's terminator.
The fill replaces the line's content (indentation included) and need not produce the newline itself, so an
answer that stops at the end of the line is complete. Evaluations only ever hand the model `before + after`:
the reference is kept for scoring and for the oracle budget, never shown to the tool.

`api_filler` fills through `infill.api.fill_text`, the same path `infill fill` takes, the way a user fills one
line from an editor: the masked line is emptied (its line break stays) and the span is that empty line, as
`infill fill --span N:N` selects it, so the length policy sees no trace of the reference (an empty line gets
the span default, and one selected line gets one line back). The model sees the line break after the slot, as
in training's single-line layouts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from infill.config import DecodeConfig, FillOptions

_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


def split_lines(text: str) -> list[str]:
    """Lines with their terminators, split on "\\n" only (str.splitlines also splits on form feeds and
    friends, which occur in real sources). "".join(split_lines(t)) == t."""
    return _LINE.findall(text)


def content_of(line: str) -> str:
    """A line without its terminator ("\\n" or "\\r\\n")."""
    if line.endswith("\n"):
        line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
    return line


@dataclass(frozen=True)
class Slot:
    before: str  # everything up to the start of the masked line
    after: str  # the masked line's terminator and everything after it
    reference: str  # the masked line's content, without terminator (never shown to the model)

    @property
    def terminator(self) -> str:
        """The masked line's line break ("" for a last line without one)."""
        return next((t for t in ("\r\n", "\n") if self.after.startswith(t)), "")

    def text_with(self, completion: str) -> str:
        return self.before + completion + self.after


def line_slot(lines: list[str], index: int) -> Slot:
    """Mask lines[index] (0-based) of a text given as split_lines(text)."""
    line = lines[index]
    content = content_of(line)
    return Slot("".join(lines[:index]), line[len(content) :] + "".join(lines[index + 1 :]), content)


@dataclass
class FillOutcome:
    completion: str
    tokens: int = 0  # tokens the decoder produced (pads included, as DecodeStats counts them)
    nfe: int = 0  # forward passes
    seconds: float = 0.0  # wall time of the whole fill call
    decode_seconds: float = 0.0  # the decoder's own wall time, as it reports it (DecodeStats.seconds)
    budget: int | None = None  # token budget asked for (None = the tool's length policy)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None  # an InfillError message: the tool refused this input; scored as a failure
    confidence: float | None = None  # the fill's calibrated confidence, when the model ships a calibration
    features: dict[str, float] | None = None  # what its confidence is computed from (infill.api.fill_features)
    refused: bool = False  # no candidate passed the checks: `infill fill` would write nothing (exit 3)

    def as_dict(self) -> dict[str, Any]:
        return {
            "completion": self.completion,
            "tokens": self.tokens,
            "nfe": self.nfe,
            "fill_seconds": round(self.seconds, 4),
            "decode_seconds": round(self.decode_seconds, 4),
            "budget": self.budget,
            "warnings": self.warnings,
            "error": self.error,
            "confidence": self.confidence,
            "features": self.features,
            "refused": self.refused,
        }


# (slot, budget or None for the length policy) -> outcome
Filler = Callable[[Slot, "int | None"], FillOutcome]


MARKER = "<FILL>"


def api_filler(
    model: Any,
    decode: DecodeConfig,
    options: FillOptions | None = None,
    language: str = "python",
    form: str = "span",
) -> Filler:
    """Fill through infill.api.fill_text with `model` (a LoadedModel or a ModelSpec) and `decode`.

    form "span": the line is emptied and selected as `infill fill --span N:N` selects it; "marker": the line
    holds `<FILL>` at the reference's indentation and is selected as `--marker '<FILL>'` selects it;
    "marker-column-0": the same with `<FILL>` at column 0 (what an editor's "insert marker" often leaves).
    """
    # an unparseable fill is evaluated (and fails its tests), not refused: figures stay comparable
    base = replace(options if options is not None else FillOptions(), allow_syntax_errors=True)
    from infill.api import fill_text
    from infill.errors import InfillError
    from infill.spans import Selection, Span, resolve

    def fill(slot: Slot, budget: int | None) -> FillOutcome:
        terminator = slot.terminator
        if form in ("marker", "marker-column-0"):
            indent = slot.reference[: len(slot.reference) - len(slot.reference.lstrip())]
            text = slot.before + (indent if form == "marker" else "") + MARKER + slot.after
            spans = resolve(text.encode("utf-8"), [Selection("marker", MARKER)], language)
        else:
            at = len(slot.before.encode("utf-8"))
            text = slot.before + slot.after
            spans = [Span(at, at, "eval", one_line=True)]
        start = time.perf_counter()
        try:
            result = fill_text(
                text,
                spans,
                language=language,
                model=model,
                decode=decode,
                options=replace(base, tokens=budget),
            )
        except InfillError as exc:
            return FillOutcome("", seconds=time.perf_counter() - start, budget=budget, error=str(exc))
        seconds = time.perf_counter() - start
        completion = result.edits[0].text if result.edits else ""
        if terminator and completion.endswith(terminator):
            completion = completion[: -len(terminator)]
        elif completion.endswith("\n"):
            completion = completion[:-1]
        return FillOutcome(
            completion,
            tokens=int(result.stats.get("tokens", 0)),
            nfe=int(result.stats.get("nfe", 0)),
            seconds=seconds,
            decode_seconds=float(result.stats.get("seconds", 0.0)),
            budget=budget,
            warnings=list(result.warnings),
            confidence=result.confidence,
            features=result.stats.get("features"),
            refused=result.stats.get("valid", 1) == 0,
        )

    return fill


def reference_filler(slot: Slot, budget: int | None) -> FillOutcome:
    """Answers with the reference line: a harness self-check (every HumanEval task must then pass)."""
    return FillOutcome(slot.reference, budget=budget)


def token_counter(model: Any) -> Callable[[str], int]:
    """The oracle budget: the reference line's length in the model's tokens (tokenized on its own; the
    project's pre-tokenizer keeps "\\n" apart, so a line's tokens do not depend on the text around it)."""
    tokenizer = model.tokenizer

    def count(text: str) -> int:
        return len(tokenizer.encode(text))

    return count


def raw_filler(model: Any, decode: DecodeConfig, default_tokens: int = 32) -> Filler:
    """Fill with the model alone: the api's token layout [<bos>] + prefix + [<mask>] * budget + suffix and its
    3/4 : 1/4 context split, one decode, the fill cut at its first <pad>, and nothing else (no re-indentation,
    repeated-suffix removal or syntax resampling, which infill.api.fill_text adds for users).

    For model-only comparisons (published figures are model-only). `model` is a LoadedModel of kind "asarm";
    budget None means `default_tokens`, the insertion-point default of the tool's length policy.
    """
    import torch

    from infill.api import split_context
    from infill.decoding import decode as run_decode
    from infill.errors import InfillError, InputError, ModelError
    from infill.models.base import FillProblem

    try:
        net, tok = model.asarm, model.tokenizer
    except ModelError:
        raise InputError(
            f"--raw is for any-subset and left-to-right models; {model.name!r} is not one (a block-diffusion "
            "model's decoders are already the model alone: nothing to take away)"
        ) from None
    head = [net.bos_id] if net.bos_id is not None else []

    def fill(slot: Slot, budget: int | None) -> FillOutcome:
        m = budget or default_tokens
        start = time.perf_counter()
        prefix, suffix = tok.encode(slot.before), tok.encode(slot.after)
        keep_pre, keep_suf = split_context(max(0, net.max_length - len(head) - m), len(prefix), len(suffix))
        prefix, suffix = prefix[len(prefix) - keep_pre :], suffix[:keep_suf]
        ids = head + prefix + [net.mask_id] * m + suffix
        at = len(head) + len(prefix)
        problem = FillProblem(
            torch.tensor(ids, dtype=torch.long),  # (N,)
            torch.arange(at, at + m, dtype=torch.long),  # (M,)
            torch.zeros(m, dtype=torch.long),  # (M,) one span
        )
        try:
            tokens, stats = run_decode(net, problem, decode, torch.Generator().manual_seed(decode.seed))
        except InfillError as exc:
            return FillOutcome("", seconds=time.perf_counter() - start, budget=budget, error=str(exc))
        out = tokens.tolist()
        if net.pad_id is not None and net.pad_id in out:
            out = out[: out.index(net.pad_id)]
        return FillOutcome(
            tok.decode(out),
            tokens=stats.tokens,
            nfe=stats.nfe,
            seconds=time.perf_counter() - start,
            decode_seconds=stats.seconds,
            budget=budget,
        )

    return fill


def fill_costs(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the fills of an evaluation cost, for its summary: tokens, forward passes, and fill time."""
    tokens = sum(r["tokens"] for r in results)
    nfe = sum(r["nfe"] for r in results)
    return {
        "tokens": tokens,
        "nfe": nfe,
        "tokens_per_nfe": tokens / nfe if nfe else 0.0,
        "fill_seconds": round(sum(r["fill_seconds"] for r in results), 2),
    }


T = TypeVar("T")


def run_tasks(
    tasks: Sequence[T],
    one: Callable[[T], dict[str, Any]],
    on_result: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """`one(task)` for every task, in order -> the per-task results; on_result(done, total, result) after each."""
    results: list[dict[str, Any]] = []
    for index, task in enumerate(tasks):
        result = one(task)
        results.append(result)
        if on_result is not None:
            on_result(index + 1, len(tasks), result)
    return results
