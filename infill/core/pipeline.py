"""The fill pipeline: text and spans in, a FillResult (edits of the original text) out. The public names are
re-exported by infill.api, the library's facade; the CLI, the server, the docstring filler and the evaluations
call it through there or through infill.core.fill.

Contract (other modules code against these signatures):

    fill_text(text, spans, *, language=None, model=ModelSpec(), decode=DecodeConfig(), options=FillOptions(),
              on_progress=None) -> FillResult

`model` may be a ModelSpec (loaded through infill.models.registry, cached per process) or an already
LoadedModel. Edits index the ORIGINAL text: bytes of its UTF-8 encoding, lines 1-based.

How a fill is built (the data flow: spans -> masked token sequence -> decoder -> tokens -> text -> edits;
planning is infill.core.plan, and what differs between the two model kinds is infill.core.backends):

* Tokens. Each region of nearby spans becomes one sequence
  [<bos>] + tok(prefix) + [<mask>] * budget_1 + tok(between_1) + ... + [<mask>] * budget_s + tok(suffix).
  The model sees "\\n" line endings (CRLF files are converted back on output). Token healing: a span that
  starts inside a line ends its prefix at the start of the last pre-token (a partial word, a space that byte BPE
  would glue to the next word; infill.core.plan.heal_text), and the fill must begin with that text
  (infill.decoding.healing), which is then cut off it; a healed span starts its own region.
* Length policy (token budget per span). `FillOptions.tokens` (--tokens N) wins. Otherwise, when the span
  replaces real text, its token length plus slack (a quarter, at least 8 tokens; no slack for models without
  an end-of-fill pad, whose fills always use the whole budget). Otherwise (an insertion point, blank lines
  or a --marker) the selector's default: span 32, marker 32, function 96, class 192, node 64 tokens.
  Models with a pad token end fills early: everything from the first <pad> of a span on is cut. A span of
  one whole line (`--span N`, `--span N:N`) gets one line back: the fill is cut at its first line break. A
  one-line span that starts inside a line (the language server's completion at the cursor) gets the rest of that
  line: everything from the fill's first line break on is cut, so a fill that starts with one is empty.
* Context truncation. A sequence may hold `model.max_length` tokens. The masked tokens and the text between
  spans of one region are never cut. What remains goes 3/4 to the prefix (its end is kept) and 1/4 to the
  suffix (its start is kept); a side that needs less gives the rest to the other. Spans too far apart to share
  one sequence are filled as separate regions, each seeing the original text around it.
* Candidates. One seeded torch.Generator draws every sample. A candidate is one sample of every span. For code,
  candidates worse than the best text the spans allow are rejected (infill.core.checks.SyntaxCheck: Python that some
  text in the spans makes compile must compile with CPython; no more tree-sitter ERROR/MISSING nodes than that text
  leaves), and so are fills with broken UTF-8 (U+FFFD); rejects are resampled (up to FillOptions.max_resample extra
  samples). The valid candidate with the highest log-likelihood (sum over spans of the fill's token log-
  probabilities under the model, end-of-fill pad included) wins. Beam search is given the same checks (Run.accept ->
  FillProblem.accept): a finished fill they reject does not end the search. When every fill it found that writes
  something is still rejected, the search runs once more FillOptions.rescue_width times wider and its fills that
  write something are tried best first until one passes (a small model's few best lines often all break the syntax).
  A greedy decoder (temperature 0: ASSD, S2D2, PTP, SSMD, confidence, a code model's) writes one fill; when it is
  rejected, or when the wider beam search found nothing that passes either, up to 2 x rescue_width samples are
  drawn at RESCUE_TEMPERATURE (sequential sampling for beam search) and the first that passes is taken.
  If none is valid, NoValidFillError names the failing spans (exit code 3: nothing is written); with
  FillOptions.allow_syntax_errors the most likely one is returned with a warning.
* Monitors (infill.core.checks.Monitor). A candidate that passes the checks may still be refused by a monitor:
  the static one (FillOptions.monitor, pyflakes rules for Python) or the caller's `monitor` (the docstring
  filler's checks that each sentence is true of the code). A refusal ranks the candidate after those no monitor
  refuses and, when sampling, draws another (within max_resample); it never makes the fill fail. The caller
  judges the returned text again (stats["refused"] counts the refused candidates).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.config import DecodeConfig, FillOptions, ModelSpec, check_decode, decode_label
from infill.core.backends import Fill, Run, select
from infill.core.plan import MIN_CONTEXT, WINDOW_BYTES_PER_TOKEN, Region, plan_regions, token_budget
from infill.decoding.stats import histogram
from infill.errors import InputError, LowConfidenceError, NoValidFillError
from infill.models.fim import PREFIX_SHARE, split_context
from infill.models.registry import LoadedModel
from infill.spans import LineIndex, Span, check_spans

if TYPE_CHECKING:
    from infill.core.checks import Monitor

# the temperature of the samples that rescue a greedy fill the checks rejected: below 1, so that the rescue stays
# near the model's most likely lines
RESCUE_TEMPERATURE = 0.7


@dataclass(frozen=True)
class Edit:
    """One span's fill: the byte range [start_byte, end_byte) and lines of the ORIGINAL text it replaces, the
    replacement, and how likely the model found it."""

    start_byte: int
    end_byte: int
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str  # the replacement text
    score: float  # log-likelihood of the fill's tokens under the model (natural log, summed)
    tokens: int  # number of tokens in the fill (score / tokens = mean token log-probability)
    worst: float = 0.0  # the lowest log-probability of one of its tokens (0 when not scored)

    def to_json(self) -> dict[str, Any]:
        """The edit as `infill fill --format json` and the server print it."""
        keys = ("start_line", "end_line", "start_byte", "end_byte", "text", "score")
        return {key: getattr(self, key) for key in keys}


@dataclass
class FillResult:
    """What fill_text returns: the patched text, one Edit per span (in text order), and how it was found."""

    text: str  # the whole patched text
    edits: list[Edit]
    stats: dict[str, Any] = field(default_factory=dict)  # decoder, model, nfe, tokens, seconds, ...
    warnings: list[str] = field(default_factory=list)  # e.g. "no valid candidate found ..."
    notes: list[str] = field(default_factory=list)  # details for -v, e.g. which lines the model saw
    # calibrated probability that the fill is right (the lowest over its spans); None when the model ships no
    # calibration for this kind of fill
    confidence: float | None = None


ProgressCallback = Callable[[dict[str, Any]], None]

# planning lives in infill.core.plan; these names stay importable from here
__all__ = [
    "MIN_CONTEXT",
    "PREFIX_SHARE",
    "WINDOW_BYTES_PER_TOKEN",
    "Edit",
    "FillResult",
    "clear_model_cache",
    "fill_text",
    "load_model",
    "split_context",
    "token_budget",
]


def load_model(model: Any = None) -> LoadedModel:
    """A LoadedModel from a ModelSpec, a LoadedModel, or None (the default model), through the one per-process
    model cache (infill.models.cache.SHARED, which the server shares)."""
    from infill.models import cache

    if isinstance(model, LoadedModel):
        return model
    spec = model if isinstance(model, ModelSpec) else ModelSpec() if model is None else None
    if spec is None:
        raise InputError(f"model must be a ModelSpec or a LoadedModel, not {type(model).__name__}")
    return cache.SHARED.get(spec)


def clear_model_cache() -> None:
    """Forget loaded models (tests that register and unregister fake models call this)."""
    from infill.models import cache

    cache.SHARED.clear()


def _candidate_edits(
    data: bytes, regions: list[Region], fills: list[Fill], newline: str, index: LineIndex
) -> list[Edit]:
    from infill.textops import block_cut, one_line_cut, restore_newlines, shape_fill

    edits = []
    plans = [p for r in regions for p in r.spans]
    for plan, fill in zip(plans, fills, strict=True):
        raw = fill.raw
        if plan.heal:  # token healing: the fill begins with the text before the span, which stays the file's
            raw = raw[len(plan.heal) :] if raw.startswith(plan.heal) else ""
        if plan.span.one_line:
            raw = one_line_cut(raw, plan.at_line_start)
        elif plan.span.block_lines:
            raw = block_cut(raw, plan.prefix, plan.span.block_lines)
        # a marker is not content: a line holding only a marker is shaped as the emptied line it stands for
        # (`--span N` on a blank line), wherever the marker sits on it, so the model's indentation is kept
        replaced = "" if plan.span.placeholder else plan.replaced
        text = restore_newlines(shape_fill(raw, plan.prefix, replaced, plan.suffix), newline)
        span = plan.span
        start_line = index.line_of(span.start_byte) if data else 1
        end_line = index.line_of(max(span.start_byte, span.end_byte - 1)) if data else 1
        edit = Edit(span.start_byte, span.end_byte, start_line, end_line, text, fill.score, fill.tokens, fill.worst)
        edits.append(edit)
    return edits


def fill_text(
    text: str,
    spans: Sequence[Span],
    *,
    language: str | None = None,
    model: Any = None,
    decode: DecodeConfig = DecodeConfig(),  # noqa: B008 (frozen, so a shared default is safe)
    options: FillOptions = FillOptions(),  # noqa: B008
    on_progress: ProgressCallback | None = None,
    monitor: Monitor | None = None,
) -> FillResult:
    """Fill every span of `text` and return the patched text; nothing is written (the module docstring says how).

    Arguments:
        text: the whole input. Spans and edits index the bytes of its UTF-8 encoding.
        spans: the regions to replace (infill.spans.Span, half-open byte ranges of `text`, e.g. from
            infill.spans.resolve), in any order; they must not overlap. No span gives `text` back unchanged.
        language: a tree-sitter language name (infill.languages.detect) for the syntax check; None checks only
            for broken UTF-8.
        model: a ModelSpec (loaded once per process through infill.models.cache.SHARED), a LoadedModel, or None
            for the default model.
        decode: the decoder and its settings; checked before any model runs. The model's kind may adjust it
            (infill.core.backends.Backend.decode_config); `decode.seed` seeds the one generator of every draw.
        options: candidates, resampling, token budget, syntax check, monitor rules, retrieval, min_confidence.
        on_progress: called with one dict per event, named by its "event": "load" (model; only when `model`
            is not a LoadedModel), "start" (spans, tokens), "candidate" (index, of, nfe), "step" (tokens, base,
            nfe) as a decoder goes, "score" (nfe), and "done".
        monitor: the caller's own check of candidates that pass the syntax check ("Monitors" above).

    Returns:
        A FillResult: `text` the patched text; `edits` one Edit per span in text order (byte and line ranges of
        the original text, the replacement, its log-likelihood); `stats` (decoder, model, nfe, tokens, seconds,
        samples, score, confidence, accepted_histogram, ...); `warnings`; `notes` (for -v); `confidence` (the
        calibrated probability that the fill is right, None without a calibration).

    Raises:
        InputError (exit 2): spans outside `text`, inside a UTF-8 character or overlapping; a setting out of
            range; an unknown monitor rule; a decoder the model's kind does not run; min_confidence for a model
            without a calibration. ModelError: the model cannot be loaded.
        NoValidFillError (exit 3): no candidate passes the checks (unless options.allow_syntax_errors).
        LowConfidenceError (exit 4): the best fill's confidence is below options.min_confidence.
    """
    from infill.core.checks import SyntaxCheck, monitor_for, parse_rules
    from infill.patch import apply_edits, check_outside_unchanged
    from infill.textops import newline_of

    data = text.encode("utf-8")
    ordered = check_spans(data, spans)
    check_decode(decode)  # nan, inf, out-of-range numbers: exit 2 before any model runs
    rules = parse_rules(options.monitor)  # an unknown monitor rule too
    if options.candidates < 1:
        raise InputError(f"-n must be at least 1, got {options.candidates}")
    if on_progress is not None and not isinstance(model, LoadedModel):
        on_progress({"event": "load", "model": getattr(model, "name", "default")})
    loaded = load_model(model)
    # what differs between the model kinds (infill.core.backends), and the model as the decoder runs it
    loaded, backend, decode = select(loaded, decode)
    started = time.perf_counter()  # decoding time, without loading the model
    warnings: list[str] = []
    stats: dict[str, Any] = {
        "decoder": decode.decoder,
        "model": loaded.name,
        "nfe": 0,
        "tokens": 0,
        "seconds": 0.0,
    }
    if not ordered:
        return FillResult(text, [], stats, warnings)
    index = LineIndex(data)
    window = backend.window(loaded)
    if options.max_context is not None and options.max_context < window.max_length:
        window = replace(window, max_length=options.max_context)
    regions = plan_regions(data, ordered, loaded.tokenizer, window, options, warnings, index)
    notes: list[str] = []
    if any(r.truncated for r in regions):
        # a small model's window is often shorter than the file: only worth a warning when it hides the start of
        # the block the spans are in (e.g. the signature of the function being filled); otherwise a note for -v
        lines = ", ".join(f"lines {r.seen[0]}-{r.seen[1]}" for r in regions if r.truncated)
        whose = "--max-context" if window.max_length == options.max_context else "the model's"
        message = f"context truncated to {whose} {window.max_length} tokens: it saw {lines} of {index.count}"
        if any(r.block_cut for r in regions):
            warnings.append(f"{message}, not the start of the block around the span(s)")
        else:
            notes.append(message)
    import torch

    generator = torch.Generator().manual_seed(decode.seed)
    syntax: SyntaxCheck | None = None  # the input's syntax, analysed once; candidates may not make it worse
    if options.syntax_check and language is not None:
        try:
            syntax = SyntaxCheck(language, data, ordered)
        except InputError as exc:  # grammar extra missing: fill without the check
            warnings.append(f"syntax check skipped: {exc.message}")
    static = monitor_for(syntax, rules)  # the static monitor, for Python
    monitors = [m for m in (static, monitor) if m is not None]
    newline = newline_of(text)

    def rejection(patched: bytes, edits: list[Edit]) -> str | None:
        """Why a candidate is rejected, or None: it splits a UTF-8 character (U+FFFD), or it is worse than the best
        the spans' surroundings allow (infill.core.checks.SyntaxCheck: Python that some text in the spans makes
        compile must compile; no more tree-sitter ERROR / MISSING nodes than that text leaves)."""
        if any("\ufffd" in e.text for e in edits) and "\ufffd" not in text:
            return "splits a UTF-8 character"
        return syntax.rejection(patched, edits) if syntax is not None else None

    def region_accepts(region: Region, fills: list[Fill]) -> bool:
        """Whether one region's fills pass the checks on their own (beam search stops only at such fills; the
        monitor then ranks the fills it found)."""
        edits = _candidate_edits(data, [region], fills, newline, index)
        return rejection(apply_edits(data, edits), edits) is None

    run = Run(loaded, decode, generator, on_progress=on_progress, accept=region_accepts)
    totals = run.totals
    valid: list[tuple[float, list[Edit], str]] = []
    flagged: list[tuple[float, list[Edit], str]] = []  # pass the checks, but a monitor refuses them
    invalid: list[tuple[float, list[Edit], str]] = []
    seen: set[tuple[str, ...]] = set()
    attempts_left = options.candidates + max(0, options.max_resample)  # resampling only happens on rejects
    attempts = 0
    if on_progress is not None:
        total = sum(p.budget for r in regions for p in r.spans)
        on_progress({"event": "start", "spans": len(ordered), "tokens": total})

    def consider(fills: list[Fill], writing_only: bool = False) -> bool:
        """Check one candidate (a fill per span) and file it as valid or invalid; False if seen before (or, with
        `writing_only`, if it leaves a span empty)."""
        edits = _candidate_edits(data, regions, fills, newline, index)
        key = tuple(e.text for e in edits)
        if key in seen or (writing_only and not _writes(edits)):
            return False
        seen.add(key)
        patched = apply_edits(data, edits)
        check_outside_unchanged(data, patched, edits)
        tier = valid
        if rejection(patched, edits) is not None:
            tier = invalid
        elif any(m.rejection(patched, edits) is not None for m in monitors):
            tier = flagged
        tier.append((sum(e.score for e in edits), edits, patched.decode("utf-8")))
        return True

    # a candidate that writes nothing into a span the user asked to fill is kept, but ranked after any that write
    # something (beam search often finds an empty line most likely: the model's pad is cheap to predict)
    while attempts_left > 0 and sum(_writes(c[1]) for c in valid) < options.candidates:
        attempts_left -= 1
        attempts += 1
        if on_progress is not None:
            on_progress({"event": "candidate", "index": attempts, "of": attempts + attempts_left, "nfe": totals.nfe})
        fills: list[Fill] = []
        for region in regions:
            fills += backend.sample(region, run, attempts - 1)
        if not consider(fills) and (decode.temperature == 0 or decode.decoder == "beam"):
            break  # deterministic: no further candidate is new
    retrieved = 0
    for fill in backend.ranked_lines(regions, run, options):
        retrieved += consider([fill])
    rescued = 0
    if (
        options.rescue_width > 1
        and decode.decoder == "beam"
        and syntax is not None
        and not any(_writes(c[1]) for c in valid)
    ):
        # every fill the beam found that writes something was rejected (usually a syntax error): search again,
        # rescue_width times wider, and take its finished fills, best first, until one passes
        wider = replace(run, cfg=replace(decode, beam=decode.beam * options.rescue_width))
        totals.nbest.clear()
        for attempt in range(wider.cfg.beam):
            fills = [f for region in regions for f in backend.sample(region, wider, attempt)]
            attempts += 1
            rescued += consider(fills, writing_only=True)  # an empty fill is no rescue
            if any(_writes(c[1]) for c in valid) or attempt + 1 >= max(map(len, totals.nbest.values()), default=0):
                break
    # beam search is not steered by monitors: it samples only when none of its fills passes the checks
    passing = valid + flagged if decode.decoder == "beam" else valid
    if (
        options.rescue_width > 1
        and (decode.temperature == 0 or decode.decoder == "beam")
        and syntax is not None
        and not any(_writes(c[1]) for c in passing)
    ):
        # a greedy decoder (ASSD, S2D2, PTP, SSMD, confidence, a code model's) wrote one fill and it was rejected,
        # or beam search found nothing that passes the checks even wider (a small model's likeliest lines can all
        # share one broken start): draw up to 2 x rescue_width samples at RESCUE_TEMPERATURE (beam search's by
        # exact sequential sampling) and take the first that passes
        sampler = "sequential" if decode.decoder == "beam" else decode.decoder
        hot = replace(run, cfg=replace(decode, decoder=sampler, temperature=RESCUE_TEMPERATURE))
        for attempt in range(2 * options.rescue_width):
            fills = [f for region in regions for f in backend.sample(region, hot, attempt)]
            attempts += 1
            rescued += consider(fills, writing_only=True)
            if any(_writes(c[1]) for c in valid):
                break
    if on_progress is not None:
        on_progress({"event": "done"})
    # a fill that writes something and passes everything, else one the monitor refuses (it is a ranking signal,
    # not a reason to write nothing), else an empty fill, else (with --allow-syntax-errors) a rejected one
    tiers = [[c for c in valid if _writes(c[1])], [c for c in flagged if _writes(c[1])], valid, flagged, invalid]
    pool = next(t for t in tiers if t)
    best_score, best_edits, best_text = max(pool, key=lambda c: c[0])
    if pool is tiers[1]:
        notes.append("the monitor refused every fill that writes something; kept the most likely one")
    refused = len(flagged)
    valid += flagged  # what the syntax rule accepts, from here on
    if valid and not _writes(best_edits) and any(_writes(c[1]) for c in invalid):
        empty = ", ".join(s.label or "span" for s, e in zip(ordered, best_edits, strict=True) if not e.text.strip())
        advice = (  # the flag only picks among fills when none is valid: never suggest it to who gave it
            "a valid fill exists, so --allow-syntax-errors does not apply"
            if options.allow_syntax_errors
            else "--allow-syntax-errors accepts the most likely one"
        )
        warnings.append(
            f"{empty}: the only valid fill is empty (every fill that writes something was rejected: "
            f"syntax errors or broken UTF-8; {advice})"
        )
    if not valid and options.allow_syntax_errors:
        warnings.append(
            f"no valid candidate found in {attempts} sample(s) (syntax errors or broken UTF-8); "
            "using the most likely one (--allow-syntax-errors)"
        )
    stats.update(
        nfe=totals.nfe,
        tokens=totals.tokens,
        seconds=round(time.perf_counter() - started, 4),
        samples=attempts,
        retrieved=retrieved,
        rescued=rescued,
        valid=len(valid),
        refused=refused,
        score=best_score,
        regions=len(regions),
        accepted_histogram=histogram(totals.accepted),
        healed=sum(len(p.heal) for r in regions for p in r.spans),  # characters token healing moved into fills
    )
    if not valid and not options.allow_syntax_errors:
        raise _no_valid_fill(data, ordered, best_edits, attempts, rejection, stats)
    beam_scores = [sorted(scores, reverse=True) for scores in totals.nbest_scores.values()]
    features = fill_features(
        text,
        best_edits,
        best_score,
        [c for c in valid + invalid if c[1] is not best_edits],
        ordered,
        monitored=pool is tiers[0] and static is not None,
        rescued=rescued > 0,
        beam_margin=min((s[0] - s[1] for s in beam_scores if len(s) > 1), default=10.0),
    )
    stats["features"] = features
    confidence = stats["confidence"] = confidence_of(loaded, decode, features)
    if confidence is None:
        folder, name = calibration_place(loaded)
        where = f" (infill eval calibrate --out {folder / name})" if folder is not None else ""
        notes.append(f"no calibrated confidence: {loaded.name!r} has no calibration for {decode_label(decode)}{where}")
    if options.min_confidence > 0:
        _check_confidence(loaded, decode, ordered, best_edits, confidence, options.min_confidence, stats)
    return FillResult(best_text, best_edits, stats, warnings, notes, confidence)


def _check_confidence(
    loaded: LoadedModel,
    decode: DecodeConfig,
    spans: list[Span],
    edits: list[Edit],
    confidence: float | None,
    threshold: float,
    stats: dict[str, Any],
) -> None:
    """--min-confidence: InputError when the model has no calibration to answer with, LowConfidenceError (exit
    4, nothing written) when the best fill is below the threshold."""

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


def fill_features(
    text: str,
    edits: list[Edit],
    score: float,
    others: list[tuple[float, list[Edit], str]],
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
    runner_up = max((c[0] for c in others if _writes(c[1]) and c[1] != edits), default=None)
    own_lines = {line.strip() for line in text.splitlines() if line.strip()}
    written = [line.strip() for e in edits for line in e.text.splitlines() if line.strip()]
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
        "empty": float(not _writes(edits)),
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


def _writes(edits: list[Edit]) -> bool:
    """Whether a candidate writes some text into every span."""
    return all(e.text.strip() for e in edits)


def _no_valid_fill(
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
    where = ", ".join(f"{s.label or 'span'} (line {_lines(e)}) {reason}" for s, e, reason in failed)
    return NoValidFillError(
        f"no valid fill in {attempts} sample(s): {where}; nothing was written "
        "(--allow-syntax-errors accepts the most likely one)",
        failed=[{"label": s.label, **e.to_json(), "reason": reason} for s, e, reason in failed],
        stats=dict(stats),
    )


def _lines(edit: Edit) -> str:
    return str(edit.start_line) if edit.start_line == edit.end_line else f"{edit.start_line}-{edit.end_line}"
