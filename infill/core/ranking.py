"""The rank step of a fill and what is judged of the chosen candidate: which candidate is written (the tiers),
its features and calibrated confidence (infill.core.calibration), and the errors when nothing may be written
(NoValidFillError, LowConfidenceError)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infill.config import DecodeConfig, decode_label
from infill.core.candidates import Candidate, Pool
from infill.core.edits import Edit, writes
from infill.errors import InputError, LowConfidenceError, NoValidFillError
from infill.models.registry import LoadedModel
from infill.spans import Span

# the tiers a candidate is chosen from, first non-empty one wins
WRITES_AND_PASSES, MONITOR_REFUSED = 0, 1


@dataclass
class Choice:
    """The candidate to write and the tier it came from (0: writes something and passes everything; 1: a
    monitor refuses it; 2: valid but empty; 3: refused and empty; 4: rejected)."""

    score: float
    edits: list[Edit]
    text: str
    tier: int


def rank(pool: Pool) -> Choice:
    """A fill that writes something and passes everything, else one the monitor refuses (it is a ranking signal,
    not a reason to write nothing), else an empty fill, else (with --allow-syntax-errors) a rejected one; the most
    likely of its tier. A tier that holds an unscored candidate (`unscored`) has no likelihood order: its first
    candidate is kept, in sample order (the first sample, the greedy one at temperature 0), before any retrieved
    line, whose score could not be compared with it."""
    valid, flagged = pool.valid, pool.flagged
    tiers = [[c for c in valid if writes(c[1])], [c for c in flagged if writes(c[1])], valid, flagged, pool.invalid]
    tier = next(i for i, t in enumerate(tiers) if t)
    chosen = tiers[tier][0] if any(unscored(c) for c in tiers[tier]) else max(tiers[tier], key=lambda c: c[0])
    score, edits, text = chosen
    return Choice(score, edits, text, tier)


def unscored(candidate: Candidate) -> bool:
    """Whether the model gave no log-probabilities for some of the candidate's text (infill.core.backends.Fill):
    its score of 0 is no likelihood."""
    return not all(e.scored for e in candidate[1])


# the warning of a fill with an unscored candidate (once per fill, not per candidate)
UNSCORED = (
    "the model server returned no log-probabilities (it ignores `logprobs`): fills are neither ranked by "
    "likelihood (the first valid sample is kept) nor given a confidence"
)


def fill_features(
    text: str,
    edits: list[Edit],
    score: float,
    others: list[Candidate],
    spans: list[Span],
    *,
    monitored: bool,
    rescued: bool,
    beam_margin: float = 10.0,
) -> dict[str, float]:
    """What is known of the chosen fill when it is written, for its calibrated confidence
    (infill.core.calibration): likelihood per token and in all, the margin to the next candidate, agreement
    with the file's own lines, length, span kind, and which checks it needed."""
    tokens = sum(e.tokens for e in edits)
    runner_up = max((c[0] for c in others if writes(c[1]) and c[1] != edits), default=None)
    written = [line.strip() for e in edits for line in e.text.splitlines() if line.strip()]
    # a line that is no substring of the text is on no line of it: the set of the text's lines (seconds for a
    # 20 MB file) is built only when every written line may be there
    own_lines = (
        {line.strip() for line in text.splitlines() if line.strip()}
        if written and all(w in text for w in written)
        else set()
    )
    return {
        "mean_logp": score / max(tokens + len(edits), 1),  # the ending token of each span counts too
        "logp": score,
        "margin": min(score - runner_up, 10.0) if runner_up is not None else 10.0,
        "beam_margin": min(beam_margin, 10.0),  # between the beam's two most likely finished fills
        "worst_logp": min((e.worst for e in edits), default=0.0),
        "in_file": float(bool(written) and all(line in own_lines for line in written)),
        "tokens": float(tokens),
        "lines": float(len(written)),
        "one_line": float(all(s.one_line for s in spans)),
        "empty": float(not writes(edits)),
        "monitored": float(monitored),  # the static monitor ran and passed it
        "rescued": float(rescued),
    }


def confidence_of(loaded: LoadedModel, decode: DecodeConfig, features: dict[str, float]) -> float | None:
    """The calibrated probability that the fill is right, when the model ships a calibration for this decoder
    (calibration.json beside its weights; infill.core.calibration), else None."""
    from infill.core.calibration import calibration_of

    calibrator = calibration_of(*calibration_place(loaded))
    if calibrator is None or calibrator.meta.get("decoder") != decode_label(decode):
        return None
    return round(calibrator.predict(features), 4)


def calibration_place(loaded: LoadedModel) -> tuple[Path | None, str]:
    """(folder, file name) of the model's calibration: calibration.json in a model folder; for a GGUF model the
    file its info names (beside the file, or under infill's data folder for one of Ollama's)."""
    from infill.core.calibration import CALIBRATION_FILE

    named = loaded.info.get("calibration")
    if isinstance(named, str):
        return Path(named).parent, Path(named).name
    folder = loaded.info.get("path")
    return (Path(folder) if isinstance(folder, str) else None), CALIBRATION_FILE


def check_confidence(
    loaded: LoadedModel,
    decode: DecodeConfig,
    spans: list[Span],
    edits: list[Edit],
    confidence: float | None,
    threshold: float,
    stats: dict[str, Any],
    scored: bool = True,
) -> None:
    """--min-confidence: InputError when the model has no calibration to answer with or gave no log-probabilities
    (`scored` False), LowConfidenceError (exit 4, nothing written) when the best fill is below the threshold."""
    if not scored:
        raise InputError(
            f"--min-confidence: model {loaded.name!r} returned no log-probabilities, so no fill has a confidence"
        )
    if confidence is None:
        raise InputError(
            f"--min-confidence: model {loaded.name!r} ships no calibrated confidence for {decode_label(decode)}"
        )
    if confidence < threshold:
        reason = f"confidence {confidence:.2f} is below {threshold:g}"
        raise LowConfidenceError(
            f"the best fill's {reason} (--min-confidence); nothing was written",
            failed=[{"label": s.label, **e.to_json(), "reason": reason} for s, e in zip(spans, edits, strict=True)],
            stats=dict(stats),
        )


def no_valid_fill(
    data: bytes,
    spans: list[Span],
    edits: list[Edit],
    attempts: int,
    rejection: Callable[[bytes, list[Edit]], str | None],
    stats: dict[str, Any],
) -> NoValidFillError:
    """The error for a fill whose every candidate was rejected, naming the edits of the most likely candidate
    that fail on their own (all of them when only their combination fails)."""
    from infill.patch import apply_edits

    failed = []
    for span, edit in zip(spans, edits, strict=True):
        reason = rejection(apply_edits(data, [edit]), [edit])
        if reason is not None:
            failed.append((span, edit, reason))
    if not failed:
        reason = rejection(apply_edits(data, edits), edits) or "is rejected"
        failed = [(span, edit, reason) for span, edit in zip(spans, edits, strict=True)]
    where = ", ".join(f"{s.label or 'span'} (line {e.lines()}) {reason}" for s, e, reason in failed)
    return NoValidFillError(
        f"no valid fill in {attempts} sample(s): {where}; nothing was written "
        "(--allow-syntax-errors accepts the most likely one)",
        failed=[{"label": s.label, **e.to_json(), "reason": reason} for s, e, reason in failed],
        stats=dict(stats),
    )
