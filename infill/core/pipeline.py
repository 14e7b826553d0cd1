"""The fill pipeline: text and spans in, a FillResult (edits of the original text) out. The public names are
re-exported by infill.api, the library's facade; the CLI, the server, the docstring filler and the evaluations
call it through there or through infill.core.fill.

Contract (other modules code against these signatures):

    fill_text(text, spans, *, language=None, model=ModelSpec(), decode=DecodeConfig(), options=FillOptions(),
              on_progress=None) -> FillResult

`model` may be a ModelSpec (loaded through infill.models.registry, cached per process) or an already
LoadedModel. Edits index the ORIGINAL text: bytes of its UTF-8 encoding, lines 1-based.

How a fill is built (the data flow: spans -> masked token sequence -> decoder -> tokens -> text -> edits). fill_text
runs it as six named steps, each a function of this module or the one named:

    plan     spans -> regions, the model and decoder as they run, the checks (infill.core.plan, core.kinds)
    sample   draw candidates until enough pass (Backend.sample), then the retrieved lines (Backend.ranked_lines)
    check    each candidate -> edits -> valid / flagged / invalid (infill.core.candidates.Pool.consider)
    rescue   when nothing that writes something passes: a wider beam, then hotter samples
    rank     the candidate to write (infill.core.ranking.rank)
    write    warnings, stats, confidence, the errors, the FillResult


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
* Candidates. One seeded generator draws every sample. A candidate is one sample of every span. For code,
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
  FillOptions.allow_syntax_errors the most likely one is returned with a warning. The retrieved lines (offered
  after sampling) are checked only where they could win: one no more likely than a valid fill that writes
  something and passes the monitors is filed unchecked (Pool.unchecked), which changes no choice and no rescue,
  and it still counts as a rival for the chosen fill's margin (stats["valid"] counts checked candidates only).
* Monitors (infill.core.monitor.Monitor). A candidate that passes the checks may still be refused by a monitor:
  the static one (FillOptions.monitor, pyflakes rules for Python) or the caller's `monitor` (the docstring
  filler's checks that each sentence is true of the code). A refusal ranks the candidate after those no monitor
  refuses and, when sampling, draws another (within max_resample); it never makes the fill fail. The caller
  judges the returned text again (stats["refused"] counts the refused candidates).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from infill.config import DecodeConfig, FillOptions, ModelSpec, check_decode, decode_label
from infill.core.backends import Backend, Run
from infill.core.candidates import Checks, Pool
from infill.core.edits import Edit, FillResult, writes
from infill.core.kinds import select, substitution
from infill.core.plan import MIN_CONTEXT, WINDOW_BYTES_PER_TOKEN, Region, plan_regions, token_budget, truncation_notes
from infill.core.ranking import (
    MONITOR_REFUSED,
    UNSCORED,
    WRITES_AND_PASSES,
    Choice,
    calibration_place,
    check_confidence,
    confidence_of,
    fill_features,
    no_valid_fill,
    rank,
    unscored,
)
from infill.decoding.seeded import Seeded
from infill.decoding.stats import histogram
from infill.errors import InputError
from infill.models.fim import PREFIX_SHARE, split_context
from infill.models.registry import LoadedModel
from infill.spans import Span, check_spans, line_index

if TYPE_CHECKING:
    from infill.core.checks import SyntaxCheck
    from infill.core.monitor import Monitor

# the temperature of the samples that rescue a greedy fill the checks rejected: below 1, so that the rescue stays
# near the model's most likely lines
RESCUE_TEMPERATURE = 0.7

ProgressCallback = Callable[[dict[str, Any]], None]

# planning lives in infill.core.plan, edits in infill.core.edits; these names stay importable from here
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
    model cache (infill.core.cache.SHARED, which the server shares)."""
    from infill.core import cache

    if isinstance(model, LoadedModel):
        return model
    spec = model if isinstance(model, ModelSpec) else ModelSpec() if model is None else None
    if spec is None:
        raise InputError(f"model must be a ModelSpec or a LoadedModel, not {type(model).__name__}")
    return cache.SHARED.get(spec)


def clear_model_cache() -> None:
    """Forget loaded models (tests that register and unregister fake models call this)."""
    from infill.core import cache

    cache.SHARED.clear()


@dataclass
class Job:
    """One fill as planned: what every step after `plan` reads (and the warnings, notes and stats they add to)."""

    text: str
    spans: list[Span]  # in text order
    loaded: LoadedModel  # the model as the decoder runs it
    backend: Backend  # what differs between the model kinds (infill.core.backends, one per kind in infill.core.kinds)
    decode: DecodeConfig  # as the model's kind runs it
    options: FillOptions
    regions: list[Region]
    checks: Checks
    static: Monitor | None  # the static monitor (FillOptions.monitor), when it applies
    run: Run
    stats: dict[str, Any]
    warnings: list[str]
    notes: list[str]
    started: float  # when decoding started (perf_counter), without loading the model
    on_progress: ProgressCallback | None

    def progress(self, event: str, **fields: Any) -> None:
        if self.on_progress is not None:
            self.on_progress({"event": event, **fields})

    @property
    def greedy(self) -> bool:
        """Whether the decoder finds one fill per setting (so a repeated candidate means no new one will come)."""
        return self.decode.temperature == 0 or self.decode.decoder == "beam"


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
        model: a ModelSpec (loaded once per process through infill.core.cache.SHARED), a LoadedModel, or None
            for the default model.
        decode: the decoder and its settings; checked before any model runs. The model's kind may adjust it
            (infill.core.backends.Backend.prepare); `decode.seed` seeds the one generator of every draw.
        options: candidates, resampling, token budget, syntax check, monitor rules, retrieval, min_confidence.
        on_progress: called with one dict per event, named by its "event": "load" (model; only when `model`
            is not a LoadedModel), "start" (spans, tokens), "candidate" (index, of, nfe), "step" (tokens, base,
            nfe) as a decoder goes, "score" (nfe), and "done".
        monitor: the caller's own check of candidates that pass the syntax check ("Monitors" above).

    Returns:
        A FillResult: `text` the patched text; `edits` one Edit per span in text order (byte and line ranges of
        the original text, the replacement, its log-likelihood); `stats` (decoder, model, nfe, tokens, seconds,
        samples, score, confidence, scored, accepted_histogram, ...); `warnings`; `notes` (for -v); `confidence`
        (the calibrated probability that the fill is right, None without a calibration or where the model gave
        no log-probabilities: stats "scored" False, score None, and one warning).

    Raises:
        InputError (exit 2): spans outside `text`, inside a UTF-8 character or overlapping; a setting out of
            range; an unknown monitor rule; a decoder the model's kind does not run; min_confidence for a model
            without a calibration, or for a fill the model gave no log-probabilities for. ModelError: the model
            cannot be loaded.
        NoValidFillError (exit 3): no candidate passes the checks (unless options.allow_syntax_errors).
        LowConfidenceError (exit 4): the best fill's confidence is below options.min_confidence.
    """
    from infill.errors import ContextExceeded

    for again in (False, True):
        try:
            job = plan(text, spans, language, model, decode, options, on_progress, monitor)
            if isinstance(job, FillResult):  # no spans: the text back unchanged
                return job
            pool = Pool(job.checks, job.regions)
            retrieved = sample(job, pool)
            rescued = rescue_wider_beam(job, pool) + rescue_hotter(job, pool)
            job.progress("done")
            choice = rank(pool)
            return write(job, pool, choice, retrieved, rescued)
        except ContextExceeded as exc:  # a model server with a shorter context than assumed: now planned for it
            if again or not exc.adopted:
                raise
    raise AssertionError("unreachable")


def check_settings(decode: DecodeConfig, options: FillOptions) -> tuple[str, ...]:
    """What a fill checks of its settings before any model runs (exit 2): nan, inf and out-of-range numbers,
    an unknown --monitor rule (returns the rules), -n below 1. A command that fills many times (infill eval)
    calls it once first, so a bad value is not an error in every task."""
    from infill.core.monitor import parse_rules

    check_decode(decode)
    rules = parse_rules(options.monitor)
    if options.candidates < 1:
        raise InputError(f"-n must be at least 1, got {options.candidates}")
    return rules


def plan(
    text: str,
    spans: Sequence[Span],
    language: str | None,
    model: Any,
    decode: DecodeConfig,
    options: FillOptions,
    on_progress: ProgressCallback | None,
    monitor: Monitor | None,
) -> Job | FillResult:
    """Check the input and settings (exit 2 before any model runs), load the model, lay the spans out in regions
    of the model's window, and set up the checks and the one seeded generator. With no spans, the text back."""
    from infill.core.monitor import monitor_for
    from infill.textops import newline_of

    data = text.encode("utf-8")
    ordered = check_spans(data, spans)
    rules = check_settings(decode, options)
    if on_progress is not None and not isinstance(model, LoadedModel):
        on_progress({"event": "load", "model": getattr(model, "name", "default")})
    # what differs between the model kinds (infill.core.kinds), and the model as the decoder runs it
    asked, given = decode.decoder, load_model(model)
    loaded, backend, decode = select(given, decode)
    started = time.perf_counter()  # decoding time, without loading the model
    stats: dict[str, Any] = {"decoder": decode.decoder, "model": loaded.name, "nfe": 0, "tokens": 0, "seconds": 0.0}
    notes: list[str] = []
    if decode.decoder != asked:  # never silently: the JSON stats and -v say so
        stats["substituted"] = {"asked": asked, "ran": decode.decoder}
        notes.append(substitution(asked, given, decode.decoder))
    warnings: list[str] = []
    if not ordered:
        return FillResult(text, [], stats, warnings, notes)
    index = line_index(data)
    window = backend.window(loaded)
    if options.max_context is not None and options.max_context < window.max_length:
        window = replace(window, max_length=options.max_context)
    regions = plan_regions(data, ordered, loaded.tokenizer, window, options, warnings, index)
    notes += truncation_notes(regions, window.max_length, index, warnings, options.max_context)
    syntax = _syntax_check(language, data, ordered, options, warnings)  # the input's syntax, analysed once
    static = monitor_for(syntax, rules)  # the static monitor, for Python
    monitors = [m for m in (static, monitor) if m is not None]
    checks = Checks(text, data, index, newline_of(text), syntax, monitors)
    run = Run(loaded, decode, Seeded(decode.seed), on_progress=on_progress, accept=checks.region_accepts)
    job = Job(
        text,
        ordered,
        loaded,
        backend,
        decode,
        options,
        regions,
        checks,
        static,
        run,
        stats,
        warnings,
        notes,
        started,
        on_progress,
    )
    job.progress("start", spans=len(ordered), tokens=sum(p.budget for r in regions for p in r.spans))
    return job


def _syntax_check(
    language: str | None, data: bytes, spans: list[Span], options: FillOptions, warnings: list[str]
) -> SyntaxCheck | None:
    """The input's syntax, which candidates may not make worse; None when not checked."""
    from infill.core.checks import SyntaxCheck

    if not options.syntax_check or language is None:
        return None
    try:
        return SyntaxCheck(language, data, spans)
    except InputError as exc:  # grammar extra missing: fill without the check
        warnings.append(f"syntax check skipped: {exc.message}")
        return None


def sample(job: Job, pool: Pool) -> int:
    """Draw candidates until options.candidates of them write something and pass, within options.candidates +
    max_resample samples (resampling only happens on rejects); then offer the retrieved lines. Returns how many
    retrieved lines were new candidates.

    A candidate that writes nothing into a span the user asked to fill is kept, but ranked after any that write
    something (beam search often finds an empty line most likely: the model's pad is cheap to predict)."""
    options, totals = job.options, job.run.totals
    attempts_left = options.candidates + max(0, options.max_resample)
    while attempts_left > 0 and pool.writing() < options.candidates:
        attempts_left -= 1
        pool.attempts += 1
        job.progress("candidate", index=pool.attempts, of=pool.attempts + attempts_left, nfe=totals.nfe)
        fills = []
        for region in job.regions:
            fills += job.backend.sample(region, job.run, pool.attempts - 1)
        if not fills:  # the backend knows it has no other candidate (a server's greedy answer): nothing was drawn
            pool.attempts -= 1
            break
        if not pool.consider(fills) and job.greedy:
            break  # deterministic: no further candidate is new
    retrieved = 0
    for fill in job.backend.ranked_lines(job.regions, job.run, options):
        retrieved += pool.consider([fill], lazy=True)  # checked only where it could be chosen
    return retrieved


def rescue_wider_beam(job: Job, pool: Pool) -> int:
    """Every fill the beam found that writes something was rejected (usually a syntax error): search again,
    rescue_width times wider, and take its finished fills, best first, until one passes. Returns how many new
    candidates it found."""
    options, decode, totals = job.options, job.decode, job.run.totals
    if options.rescue_width <= 1 or decode.decoder != "beam" or job.checks.syntax is None or pool.writing():
        return 0
    rescued = 0
    wider = replace(job.run, cfg=replace(decode, beam=decode.beam * options.rescue_width))
    totals.nbest.clear()
    for attempt in range(wider.cfg.beam):
        fills = [f for region in job.regions for f in job.backend.sample(region, wider, attempt)]
        pool.attempts += 1
        rescued += pool.consider(fills, writing_only=True)  # an empty fill is no rescue
        if pool.writing() or attempt + 1 >= max(map(len, totals.nbest.values()), default=0):
            break
    return rescued


def rescue_hotter(job: Job, pool: Pool) -> int:
    """A greedy decoder (ASSD, S2D2, PTP, SSMD, confidence, a code model's) wrote one fill and it was rejected, or
    beam search found nothing that passes the checks even wider (a small model's likeliest lines can all share one
    broken start): draw up to 2 x rescue_width samples at RESCUE_TEMPERATURE (beam search's by exact sequential
    sampling) and take the first that passes. Returns how many new candidates it found."""
    options, decode = job.options, job.decode
    # beam search is not steered by monitors: it samples only when none of its fills passes the checks
    passing = pool.writing(also_flagged=decode.decoder == "beam")
    if options.rescue_width <= 1 or not job.greedy or job.checks.syntax is None or passing:
        return 0
    rescued = 0
    sampler = "sequential" if decode.decoder == "beam" else decode.decoder
    hot = replace(job.run, cfg=replace(decode, decoder=sampler, temperature=RESCUE_TEMPERATURE))
    for attempt in range(2 * options.rescue_width):
        fills = [f for region in job.regions for f in job.backend.sample(region, hot, attempt)]
        pool.attempts += 1
        rescued += pool.consider(fills, writing_only=True)
        if pool.writing():
            break
    return rescued


def write(job: Job, pool: Pool, choice: Choice, retrieved: int, rescued: int) -> FillResult:
    """The FillResult of the chosen candidate: its warnings and notes, the stats, its features and calibrated
    confidence; NoValidFillError or LowConfidenceError when nothing may be written."""
    options, warnings, stats = job.options, job.warnings, job.stats
    if choice.tier == MONITOR_REFUSED:
        job.notes.append("the monitor refused every fill that writes something; kept the most likely one")
    valid = pool.valid + pool.flagged  # what the syntax rule accepts
    warnings += _choice_warnings(job, pool, choice, valid)
    totals = job.run.totals
    stats.update(
        nfe=totals.nfe,
        tokens=totals.tokens,
        seconds=round(time.perf_counter() - job.started, 4),
        samples=pool.attempts,
        retrieved=retrieved,
        rescued=rescued,
        valid=len(valid),
        refused=len(pool.flagged),
        score=choice.score,
        regions=len(job.regions),
        accepted_histogram=histogram(totals.accepted),
        healed=sum(len(p.heal) for r in job.regions for p in r.spans),  # characters token healing moved into fills
    )
    if not valid and not options.allow_syntax_errors:
        data = job.checks.data
        raise no_valid_fill(data, job.spans, choice.edits, pool.attempts, job.checks.rejection, stats)
    beam_scores = [sorted(scores, reverse=True) for scores in totals.nbest_scores.values()]
    features = fill_features(
        job.text,
        choice.edits,
        choice.score,
        [c for c in valid + pool.invalid + pool.unchecked if c[1] is not choice.edits],
        job.spans,
        monitored=choice.tier == WRITES_AND_PASSES and job.static is not None,
        rescued=rescued > 0,
        beam_margin=min((s[0] - s[1] for s in beam_scores if len(s) > 1), default=10.0),
    )
    stats["features"] = features
    scored = stats["scored"] = not any(unscored(c) for c in [*valid, *pool.invalid, *pool.unchecked])
    if not scored:  # its score and its rivals' are no likelihoods: neither is a confidence from them
        stats["score"] = None
        warnings.append(UNSCORED)
    confidence = stats["confidence"] = confidence_of(job.loaded, job.decode, features) if scored else None
    if confidence is None and scored:
        folder, name = calibration_place(job.loaded)
        where = f" (infill eval calibrate --out {folder / name})" if folder is not None else ""
        label = decode_label(job.decode)
        job.notes.append(f"no calibrated confidence: {job.loaded.name!r} has no calibration for {label}{where}")
    if options.min_confidence > 0:
        threshold = options.min_confidence
        check_confidence(job.loaded, job.decode, job.spans, choice.edits, confidence, threshold, stats, scored)
    return FillResult(choice.text, choice.edits, stats, warnings, job.notes, confidence)


def _choice_warnings(job: Job, pool: Pool, choice: Choice, valid: list[Any]) -> list[str]:
    """Why the chosen fill is empty although fills that write something exist, or why a rejected one is kept."""
    warnings = []
    if valid and not writes(choice.edits) and any(writes(c[1]) for c in pool.invalid):
        empty = ", ".join(s.label or "span" for s, e in zip(job.spans, choice.edits, strict=True) if not e.text.strip())
        advice = (  # the flag only picks among fills when none is valid: never suggest it to who gave it
            "a valid fill exists, so --allow-syntax-errors does not apply"
            if job.options.allow_syntax_errors
            else "--allow-syntax-errors accepts the most likely one"
        )
        warnings.append(
            f"{empty}: the only valid fill is empty (every fill that writes something was rejected: "
            f"syntax errors or broken UTF-8; {advice})"
        )
    if not valid and job.options.allow_syntax_errors:
        warnings.append(
            f"no valid candidate found in {pool.attempts} sample(s) (syntax errors or broken UTF-8); "
            "using the most likely one (--allow-syntax-errors)"
        )
    return warnings
