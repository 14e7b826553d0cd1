"""Calibrated confidence of a docstring, and the choice of what each slot gets: the model's text or the names'.

The probability that the model's summary is right comes from infill.core.calibration (the one calibration of the
project), fitted on held-out functions by `benchmarks/docstrings_quality.py --fit` and shipped beside the model
as `docstring_calibration.json` ("right" is defined there: ROUGE-L of the first sentence against the docstring a
person wrote, at or above the cut in the file's `meta`). The features are known when the docstring is written:
the model's log-probabilities, how far its summary agrees with the names-only one, its length, and how many slots
the monitor refused.

A docstring gets the model's sentences only when that probability is at least the threshold (`min-probability`,
by default the one stored with the calibration); otherwise, and for every slot the monitor refused, the
sentence built from the names and the code (infill.docstrings.names). A model without a calibration file gets
the names-only sentences unless the threshold is 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from infill.core.calibration import Calibrator, calibration_of
from infill.docstrings import similarity
from infill.docstrings.monitor import Verdict

CALIBRATION_FILE = "docstring_calibration.json"
FEATURES = ("summary_logprob", "mean_logprob", "agreement", "words", "refused")
DEFAULT_THRESHOLD = 0.5  # when the calibration file names none
NO_SCORE = -10.0  # the log-probability feature of a slot the model wrote no token for


@dataclass
class ModelText:
    """What one model call wrote: raw text per slot key, (sum of token log-probabilities, tokens) per slot."""

    raw: dict[str, str] = field(default_factory=dict)
    scores: dict[str, tuple[float, int]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def mean(self, key: str | None = None) -> float | None:
        """Mean token log-probability of one slot (or of all of them); None without tokens."""
        chosen = [v for k, v in self.scores.items() if key is None or k == key]
        tokens = sum(t for _, t in chosen)
        return sum(s for s, _ in chosen) / tokens if tokens > 0 else None


def features(model: ModelText, verdicts: Mapping[str, Verdict], names_summary: str) -> dict[str, float]:
    """The calibration features of one docstring (its summary must have passed the monitor)."""
    summary = verdicts["summary"].text or ""
    summary_mean, mean = model.mean("summary"), model.mean()
    return {
        "summary_logprob": summary_mean if summary_mean is not None else NO_SCORE,
        "mean_logprob": mean if mean is not None else NO_SCORE,
        "agreement": similarity.rouge_l(summary, names_summary),
        "words": float(len(summary.split())),
        "refused": sum(v.text is None for v in verdicts.values()) / max(len(verdicts), 1),
    }


def model_folder(name: str) -> Path | None:
    """The folder of a packaged model or a local model folder (None for an HF cache name: no calibration)."""
    from infill.models.loading import default_folder, packaged_folder

    if name == "default":
        return default_folder()
    folder = packaged_folder(name)
    if folder is not None:
        return folder
    path = Path(name).expanduser()
    return path if path.is_dir() else None


def calibrator_for(model: str) -> Calibrator | None:
    """The docstring calibration shipped beside `model`, or None; ModelError for an unreadable file."""
    return calibration_of(model_folder(model), CALIBRATION_FILE)


def threshold(calibrator: Calibrator | None, configured: float | None) -> float:
    """The configured threshold, else the calibration's, else DEFAULT_THRESHOLD."""
    if configured is not None:
        return configured
    stored = calibrator.meta.get("threshold") if calibrator is not None else None
    return float(stored) if isinstance(stored, int | float) else DEFAULT_THRESHOLD


@dataclass(frozen=True)
class Choice:
    """The text of every slot, the slots whose text is not the model's, and the calibrated probability."""

    texts: dict[str, str]
    fallbacks: list[str]
    probability: float | None


def choose(
    verdicts: Mapping[str, Verdict],
    names_texts: Mapping[str, str],
    model: ModelText,
    model_name: str,
    configured: float | None,
) -> Choice:
    """The model's sentences when their calibrated probability reaches the threshold (each slot only if the
    monitor let it through), else the names-only ones."""
    calibrator = calibrator_for(model_name)
    probability: float | None = None
    summary = verdicts.get("summary")
    if calibrator is not None and summary is not None and summary.text is not None:
        probability = calibrator.predict(features(model, verdicts, names_texts["summary"]))
    cut = threshold(calibrator, configured)
    trusted = cut <= 0 or (probability is not None and probability >= cut)
    texts: dict[str, str] = {}
    fallbacks: list[str] = []
    for key, verdict in verdicts.items():
        if trusted and verdict.text is not None:
            texts[key] = verdict.text
        else:
            texts[key] = names_texts[key]
            fallbacks.append(key)
    return Choice(texts, fallbacks, probability)
