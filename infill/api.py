"""Library entry points used by the CLI, the server, the docstring filler and tests.

Contract (other modules code against these signatures):

    fill_text(text, spans, *, language=None, model=ModelSpec(), decode=DecodeConfig(), options=FillOptions(),
              on_progress=None) -> FillResult
    fill_file(path, spans, ...) -> FillResult   (reads, fills, does not write; writing is infill.patch's job)

`model` may be a ModelSpec (loaded through infill.models.registry, cached per process) or an already
LoadedModel. Edits index the ORIGINAL text: bytes of its UTF-8 encoding, lines 1-based.

How a fill is built (the data flow: spans -> masked token sequence -> decoder -> tokens -> text -> edits):

* Tokens. Each region of nearby spans becomes one sequence
  [<bos>] + tok(prefix) + [<mask>] * budget_1 + tok(between_1) + ... + [<mask>] * budget_s + tok(suffix).
  The model sees "\\n" line endings (CRLF files are converted back on output). A space right before an
  in-line span is left for the model to write (byte BPE glues it to the next word; see _heals).
* Length policy (token budget per span). `FillOptions.tokens` (--tokens N) wins. Otherwise, when the span
  replaces real text, its token length plus slack (a quarter, at least 8 tokens; no slack for models without
  an end-of-fill pad, whose fills always use the whole budget). Otherwise (an insertion point, blank lines
  or a --marker) the selector's default: span 32, marker 32, function 96, class 192, node 64 tokens.
  Models with a pad token end fills early: everything from the first <pad> of a span on is cut. A span of
  one whole line (`--span N`, `--span N:N`) gets one line back: the fill is cut at its first line break.
* Context truncation. A sequence may hold `model.max_length` tokens. The masked tokens and the text between
  spans of one region are never cut. What remains goes 3/4 to the prefix (its end is kept) and 1/4 to the
  suffix (its start is kept); a side that needs less gives the rest to the other. Spans too far apart to share
  one sequence are filled as separate regions, each seeing the original text around it.
* Candidates. One seeded torch.Generator draws every sample. A candidate is one sample of every span. For
  code, candidates that add tree-sitter ERROR/MISSING nodes are rejected (for Python input that CPython's parser
  accepts, also candidates it rejects: tree-sitter takes `if x:` with no body), and so are fills with broken UTF-8
  (U+FFFD); rejects are resampled (up to FillOptions.max_resample extra samples). The valid candidate with
  the highest log-likelihood (sum over spans of the fill's token log-probabilities under the model,
  end-of-fill pad included) wins. If none is valid, NoValidFillError names the failing spans (exit code 3:
  nothing is written); with FillOptions.allow_syntax_errors the most likely one is returned with a warning.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.config import DecodeConfig, FillOptions, ModelSpec, check_decode, decoders_for
from infill.errors import DecodeError, InputError, NoValidFillError
from infill.models.registry import LoadedModel
from infill.spans import LineIndex, Span, check_spans

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Edit:
    start_byte: int
    end_byte: int
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str  # the replacement text
    score: float  # log-likelihood of the fill's tokens under the model (natural log, summed)
    tokens: int  # number of tokens in the fill (score / tokens = mean token log-probability)


@dataclass
class FillResult:
    text: str  # the whole patched text
    edits: list[Edit]
    stats: dict[str, Any] = field(default_factory=dict)  # decoder, model, nfe, tokens, seconds, ...
    warnings: list[str] = field(default_factory=list)  # e.g. "no valid candidate found ..."
    notes: list[str] = field(default_factory=list)  # details for -v, e.g. which lines the model saw


ProgressCallback = Callable[[dict[str, Any]], None]

PREFIX_SHARE = 0.75  # share of the free context given to the prefix (the suffix gets the rest)
MIN_CONTEXT = 16  # tokens of context a region keeps at least, when spans are grouped into regions
# A generous bound on the UTF-8 bytes of one token (byte-level BPE tokens of code average 3-4): context more than
# max_length * this many bytes away from a span cannot fit the model's window, so it is never even tokenized.
WINDOW_BYTES_PER_TOKEN = 64
ASARM_DECODERS = decoders_for("asarm")
BLOCKDIFF_DECODERS = decoders_for("blockdiff")


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


# ------------------------------------------------------------------------------------------------------------
# planning: spans -> regions of token pieces


@dataclass
class _SpanPlan:
    span: Span
    index: int  # position in the sorted span list
    budget: int
    prefix: str  # LF text before the span, up to the previous span or the window (for post-processing)
    replaced: str  # LF text the span replaces
    suffix: str  # LF text after the span, up to the next span or the window
    healed: bool = False  # the space before the span was moved into the model's fill (see _model_prefix)
    gap: int = 0  # bytes between the previous span (or the start) and this one


@dataclass
class _Region:
    spans: list[_SpanPlan]
    prefix_ids: list[int]
    between_ids: list[list[int]]  # len(spans) - 1 pieces
    suffix_ids: list[int]
    truncated: bool = False
    seen: tuple[int, int] = (0, 0)  # when truncated: the first and last line the model saw (1-based)
    block_cut: bool = False  # when truncated: the cut hid the start of the block around the spans (a warning)


def token_budget(span: Span, replaced_tokens: int, replaced: str, options: FillOptions, has_pad: bool) -> int:
    """Tokens to mask for one span (the length policy in the module docstring)."""
    if options.tokens is not None:
        if options.tokens < 1:
            raise InputError(f"--tokens must be at least 1, got {options.tokens}")
        return options.tokens
    if span.placeholder or not replaced.strip():
        return span.default_tokens
    slack = max(8, replaced_tokens // 4) if has_pad else 0
    return replaced_tokens + slack


def _plan(
    data: bytes, spans: list[Span], loaded: LoadedModel, options: FillOptions, warnings: list[str], index: LineIndex
) -> list[_Region]:
    tok, model = loaded.tokenizer, loaded.model
    max_length = int(getattr(model, "max_length", 0) or 0) or 1 << 30
    has_bos = getattr(model, "bos_id", None) is not None
    has_pad = getattr(model, "pad_id", None) is not None
    cap = max_length - int(has_bos) - MIN_CONTEXT
    # Only text within `window` bytes of a span can reach the model, so nothing farther is decoded, tokenized
    # or post-processed: a fill in a 10 MB file does the work of a fill in a small one.
    window = max_length * WINDOW_BYTES_PER_TOKEN
    plans = []
    for i, span in enumerate(spans):
        prev_end = spans[i - 1].end_byte if i else 0
        next_start = spans[i + 1].start_byte if i + 1 < len(spans) else len(data)
        replaced = _model_text(data, span.start_byte, span.end_byte)
        if options.tokens is not None or not replaced.strip():
            replaced_tokens = 0  # not needed by the length policy
        elif span.end_byte - span.start_byte > window:
            replaced_tokens = cap + 1  # more than fits: capped below without tokenizing it all
        else:
            replaced_tokens = len(tok.encode(replaced))
        budget = token_budget(span, replaced_tokens, replaced, options, has_pad)
        if budget > cap:
            if options.tokens is not None:
                raise DecodeError(
                    f"{span.label or 'span'}: --tokens {budget} does not fit the model's context of "
                    f"{max_length} tokens (at most {cap})"
                )
            warnings.append(f"{span.label or 'span'}: token budget {budget} capped at {cap} (the model's context)")
            budget = cap
        before = _model_text(data, *_tail(data, prev_end, span.start_byte, window))
        after = _model_text(data, *_head(data, span.end_byte, next_start, window))
        plan = _SpanPlan(span, i, budget, before, replaced, after, healed=_heals(before))
        plan.gap = span.start_byte - prev_end
        plans.append(plan)
    # group neighbouring spans into regions while the masks and the text between them fit
    blockdiff = loaded.kind == "blockdiff"
    regions: list[list[tuple[_SpanPlan, list[int]]]] = []  # each span with the ids of the text before it
    used = 0
    for plan in plans:
        near = regions and not blockdiff and plan.gap <= window  # farther apart never fits: not tokenized
        between = tok.encode(_model_prefix(plan.prefix, plan.healed)) if near else []
        cost = len(between) + plan.budget
        if near and used + cost <= cap:
            regions[-1].append((plan, between))
            used += cost
        else:
            regions.append([(plan, [])])
            used = plan.budget
    out = []
    for group in regions:
        first, last = group[0][0].span, group[-1][0].span
        pre_start, pre_end = _tail(data, 0, first.start_byte, window)
        suf_start, suf_end = _head(data, last.end_byte, len(data), window)
        prefix_ids = tok.encode(_model_prefix(_model_text(data, pre_start, pre_end), group[0][0].healed))
        suffix_ids = tok.encode(_model_text(data, suf_start, suf_end))
        inner = sum(p.budget for p, _ in group) + sum(len(b) for _, b in group[1:])
        free = max(0, max_length - int(has_bos) - inner)
        keep_pre, keep_suf = split_context(free, len(prefix_ids), len(suffix_ids))
        kept_pre = prefix_ids[len(prefix_ids) - keep_pre :] if keep_pre else []
        kept_suf = suffix_ids[:keep_suf]
        cut_pre = keep_pre < len(prefix_ids) or pre_start > 0
        cut_suf = keep_suf < len(suffix_ids) or suf_end < len(data)
        region = _Region([p for p, _ in group], kept_pre, [b for _, b in group[1:]], kept_suf, cut_pre or cut_suf)
        if region.truncated:
            region.seen, region.block_cut = _what_was_seen(index, region, tok, cut_pre)
        out.append(region)
    return out


def _model_text(data: bytes, start: int, end: int) -> str:
    """The model's view of data[start:end]: LF line endings, and no byte order mark at the start of the file."""
    from infill.textops import to_model

    text = to_model(data[start:end].decode("utf-8"))
    return text.removeprefix("\ufeff") if start == 0 else text


def _tail(data: bytes, start: int, end: int, window: int) -> tuple[int, int]:
    """The last `window` bytes or fewer of data[start:end], beginning at a line start (else a character)."""
    if end - start <= window:
        return start, end
    cut = end - window
    newline = data.find(b"\n", cut, end)
    if newline >= 0:
        return newline + 1, end
    while cut < end and data[cut] & 0xC0 == 0x80:  # not inside a UTF-8 character
        cut += 1
    return cut, end


def _head(data: bytes, start: int, end: int, window: int) -> tuple[int, int]:
    """The first `window` bytes or fewer of data[start:end], ending after a line break (else at a character)."""
    if end - start <= window:
        return start, end
    cut = start + window
    newline = data.rfind(b"\n", start, cut)
    if newline >= 0:
        return start, newline + 1
    while cut > start and data[cut] & 0xC0 == 0x80:
        cut -= 1
    return start, cut


def _what_was_seen(index: LineIndex, region: _Region, tok: Any, cut_pre: bool) -> tuple[tuple[int, int], bool]:
    """The lines the model saw around a truncated region, and whether the cut hid the start of the block its
    spans are in (the definition's header): no line in column 1 (a definition, a top-level statement, a closing
    brace) is left in sight between the cut and the spans."""
    before = tok.decode(region.prefix_ids) if region.prefix_ids else ""
    after = tok.decode(region.suffix_ids) if region.suffix_ids else ""
    first_seen = index.line_of(region.spans[0].span.start_byte) - before.count("\n")
    last_seen = index.line_of(region.spans[-1].span.end_byte) + after.count("\n") - int(after.endswith("\n"))
    lines = before.split("\n")
    lines[-1] += region.spans[0].replaced.split("\n", 1)[0]  # the spans' own first line
    if cut_pre:
        lines = lines[1:]  # the first line seen may be partial
    block_cut = cut_pre and not any(_column_one(line) for line in lines)
    return (max(1, first_seen), last_seen), block_cut


def _column_one(line: str) -> bool:
    return bool(line[:1].strip()) and not line.startswith(("#", "//", "/*", "*"))


def _heals(before: str) -> bool:
    """Whether the text before a span ends in a space that the model should write itself.

    Byte-level BPE with GPT-2 pre-tokenization glues a space to the following word (" foo"), so a prompt that
    ends in a lone " " (as in "x = <FILL>", or indentation before a column span) is a token sequence the model
    never saw. The model sees the text without that space and writes " foo"; the space is removed from the fill
    again (the file keeps its own). Spans at a line start are untouched (the text before ends with "\n").
    """
    return before.endswith(" ")


def _model_prefix(before: str, healed: bool) -> str:
    return before[:-1] if healed else before


def split_context(free: int, prefix: int, suffix: int) -> tuple[int, int]:
    """Prefix / suffix tokens to keep in `free` slots: 3/4 : 1/4; an unused share goes to the other side."""
    if prefix + suffix <= free:
        return prefix, suffix
    pre_share = math.ceil(free * PREFIX_SHARE)
    suf_share = free - pre_share
    if prefix < pre_share:
        suf_share += pre_share - prefix
        pre_share = prefix
    if suffix < suf_share:
        pre_share = min(prefix, pre_share + suf_share - suffix)
        suf_share = suffix
    return pre_share, suf_share


def _problem(region: _Region, loaded: LoadedModel) -> Any:
    import torch

    from infill.models.base import FillProblem

    model = loaded.model
    ids: list[int] = [model.bos_id] if model.bos_id is not None else []
    ids += region.prefix_ids
    masked: list[int] = []
    span_of: list[int] = []
    for j, plan in enumerate(region.spans):
        if j:
            ids += region.between_ids[j - 1]
        masked += range(len(ids), len(ids) + plan.budget)
        span_of += [j] * plan.budget
        ids += [model.mask_id] * plan.budget
    ids += region.suffix_ids
    if len(masked) >= len(ids):
        raise DecodeError("no visible token: the input has no context around the span and the model has no <bos>")
    breaks, blank = token_sets(loaded.tokenizer, int(model.vocab_size))
    return FillProblem(
        torch.tensor(ids, dtype=torch.long),  # (N,)
        torch.tensor(masked, dtype=torch.long),  # (M,)
        torch.tensor(span_of, dtype=torch.long),  # (M,)
        stops=tuple(breaks if plan.span.one_line else frozenset() for plan in region.spans),  # one line back
        blank=blank,
    )


# ------------------------------------------------------------------------------------------------------------
# sampling candidates


@dataclass
class _Fill:
    raw: str  # the model's text (LF), cut at the first pad
    score: float
    tokens: int


@dataclass
class _Totals:
    nfe: int = 0
    tokens: int = 0
    accepted: list[int] = field(default_factory=list)
    nbest: dict[int, list[list[int]]] = field(default_factory=dict)  # beam: region -> fills, best first


def _cut_at_pad(
    tokens: list[int],
    logq: list[float] | None,
    pad_id: int | None,
    stops: frozenset[int] = frozenset(),
    blank: frozenset[int] = frozenset(),
) -> tuple[list[int], float]:
    """Tokens before the first pad (or stop token after some text, see FillProblem), and the log-likelihood of
    those tokens plus the one that ended the fill."""
    end, text = len(tokens), False
    for i, t in enumerate(tokens):
        if t == pad_id or (t in stops and text):
            end = i
            break
        text = text or t not in blank
    scored = min(len(tokens), end + 1)
    return tokens[:end], float(sum(logq[:scored])) if logq is not None else 0.0


_TOKEN_SETS: dict[int, tuple[frozenset[int], frozenset[int]]] = {}


def token_sets(tokenizer: Any, vocab_size: int) -> tuple[frozenset[int], frozenset[int]]:
    """(line breaks, blanks): ids of the tokens whose text holds a line break, and of whitespace-only tokens
    (cached per tokenizer). A line break after some text ends a one-line span."""
    key = id(tokenizer)
    found = _TOKEN_SETS.get(key)
    if found is None:
        texts = [tokenizer.decode([i]) for i in range(vocab_size)]
        found = (
            frozenset(i for i, t in enumerate(texts) if "\n" in t),
            frozenset(i for i, t in enumerate(texts) if t and not t.strip()),
        )
        _TOKEN_SETS[key] = found
    return found


def _sample_asarm(
    region: _Region,
    loaded: LoadedModel,
    cfg: DecodeConfig,
    generator: torch.Generator,
    totals: _Totals,
    on_progress: ProgressCallback | None,
    attempt: int = 0,
) -> list[_Fill]:
    """One candidate fill of every span of `region` (beam search: the attempt-th best beam)."""
    import torch

    from infill.decoding import decode, score

    problem = _problem(region, loaded)

    def on_step(decoded: int, total: int) -> None:
        if on_progress is not None:
            on_progress({"event": "step", "tokens": totals.tokens + decoded, "base": totals.tokens, "nfe": 0})

    if cfg.decoder == "beam" and id(region) in totals.nbest:  # a later candidate: the next best beam
        ranked = totals.nbest[id(region)]
        tokens = torch.tensor(ranked[min(attempt, len(ranked) - 1)], dtype=torch.long)
    else:
        tokens, stats = decode(loaded.model, problem, cfg, generator, on_step=on_step)  # (M,)
        totals.nfe += int(stats.nfe)
        totals.tokens += int(stats.tokens)
        totals.accepted += list(stats.accepted)
        if cfg.decoder == "beam":
            totals.nbest[id(region)] = [fill for _, fill in stats.extra["nbest"]]
    logq = score(loaded.model, problem, tokens)  # (M,) log q of each token under the oracle
    totals.nfe += 1  # the scoring pass
    fills = []
    at = 0
    flat, flat_q = tokens.tolist(), logq.tolist()
    for plan, stops in zip(region.spans, problem.stops or (), strict=True):
        piece, piece_q = flat[at : at + plan.budget], flat_q[at : at + plan.budget]
        kept, s = _cut_at_pad(piece, piece_q, loaded.model.pad_id, stops, problem.blank)
        fills.append(_Fill(loaded.tokenizer.decode(kept), s, len(kept)))
        at += plan.budget
    return fills


def _sample_blockdiff(
    region: _Region, loaded: LoadedModel, cfg: DecodeConfig, generator: torch.Generator, totals: _Totals
) -> list[_Fill]:
    from infill.decoding.blockfill import fill_middle

    (plan,) = region.spans  # block-diffusion regions hold one span each
    tok = loaded.tokenizer
    text, stats = fill_middle(
        loaded, tok.decode(region.prefix_ids), tok.decode(region.suffix_ids), plan.budget, cfg, generator
    )  # (decoded text, stats); block-diffusion decoders report no log-likelihood, so score is 0
    totals.nfe += int(stats.nfe)
    totals.tokens += int(stats.tokens)
    totals.accepted += list(stats.accepted)
    score = float(stats.extra.get("logprob", 0.0)) if isinstance(stats.extra, dict) else 0.0
    return [_Fill(text, score, len(tok.encode(text)) if text else 0)]


def _retrieved_fills(regions: list[_Region], loaded: LoadedModel, options: FillOptions, totals: _Totals) -> list[_Fill]:
    """Lines from the user's code (infill.retrieval) as fills of a lone one-line span, each scored by its exact
    log-likelihood in the span (one oracle pass) the way sampled fills are: tokens plus the ending pad."""
    import torch

    from infill.decoding import score
    from infill.retrieval import line_candidates

    if len(regions) != 1 or len(regions[0].spans) != 1:
        return []
    region, plan = regions[0], regions[0].spans[0]
    pad = loaded.model.pad_id
    if not plan.span.one_line or plan.healed or pad is None or (plan.prefix and not plan.prefix.endswith("\n")):
        return []
    problem = _problem(region, loaded)
    out = []
    for text in line_candidates(plan.prefix, plan.suffix, options.context):
        if text.strip() == plan.replaced.strip():
            continue  # refilling a line with itself changes nothing
        ids = loaded.tokenizer.encode(text)
        if len(ids) >= plan.budget:
            continue
        logq = score(loaded.model, problem, torch.tensor(ids + [pad] * (plan.budget - len(ids))))
        totals.nfe += 1
        out.append(_Fill(text, float(logq[: len(ids) + 1].sum()), len(ids)))
    return out


def _candidate_edits(
    data: bytes, regions: list[_Region], fills: list[_Fill], newline: str, index: LineIndex
) -> list[Edit]:
    from infill.textops import first_line, restore_newlines, shape_fill

    edits = []
    plans = [p for r in regions for p in r.spans]
    for plan, fill in zip(plans, fills, strict=True):
        raw = fill.raw[1:] if plan.healed and fill.raw.startswith(" ") else fill.raw
        if plan.span.one_line:
            raw = first_line(raw)
        text = restore_newlines(shape_fill(raw, plan.prefix, plan.replaced, plan.suffix), newline)
        span = plan.span
        start_line = index.line_of(span.start_byte) if data else 1
        end_line = index.line_of(max(span.start_byte, span.end_byte - 1)) if data else 1
        edits.append(Edit(span.start_byte, span.end_byte, start_line, end_line, text, fill.score, fill.tokens))
    return edits


def _check_decoder(cfg: DecodeConfig, loaded: LoadedModel) -> None:
    allowed = BLOCKDIFF_DECODERS if loaded.kind == "blockdiff" else ASARM_DECODERS
    if cfg.decoder not in allowed:
        needs = "an any-subset (AS-ARM)" if loaded.kind == "blockdiff" else "a block-diffusion"
        is_kind = "a block-diffusion" if loaded.kind == "blockdiff" else "an any-subset (AS-ARM)"
        raise InputError(
            f"--decoder {cfg.decoder} needs {needs} model, but {loaded.name!r} is {is_kind} model; "
            f"use one of: {', '.join(allowed)}"
        )


def fill_text(
    text: str,
    spans: Sequence[Span],
    *,
    language: str | None = None,
    model: Any = None,
    decode: DecodeConfig = DecodeConfig(),  # noqa: B008 (frozen, so a shared default is safe)
    options: FillOptions = FillOptions(),  # noqa: B008
    on_progress: ProgressCallback | None = None,
) -> FillResult:
    """Fill every span of `text`; see the module docstring."""
    from infill.patch import apply_edits, check_outside_unchanged
    from infill.textops import SyntaxCheck, newline_of

    data = text.encode("utf-8")
    ordered = check_spans(data, spans)
    check_decode(decode)  # nan, inf, out-of-range numbers: exit 2 before any model runs
    if options.candidates < 1:
        raise InputError(f"-n must be at least 1, got {options.candidates}")
    if on_progress is not None and not isinstance(model, LoadedModel):
        on_progress({"event": "load", "model": getattr(model, "name", "default")})
    loaded = load_model(model)
    if loaded.kind == "blockdiff" and decode.decoder == "assd":
        # the default decoder; on a block-diffusion model its self-speculative analogue is S2D2
        decode = replace(decode, decoder="s2d2")
    _check_decoder(decode, loaded)
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
    regions = _plan(data, ordered, loaded, options, warnings, index)
    notes: list[str] = []
    if any(r.truncated for r in regions):
        # a small model's window is often shorter than the file: only worth a warning when it hides the start of
        # the block the spans are in (e.g. the signature of the function being filled); otherwise a note for -v
        lines = ", ".join(f"lines {r.seen[0]}-{r.seen[1]}" for r in regions if r.truncated)
        message = f"context truncated to the model's {loaded.model.max_length} tokens: it saw {lines} of {index.count}"
        if any(r.block_cut for r in regions):
            warnings.append(f"{message}, not the start of the block around the span(s)")
        else:
            notes.append(message)
    import torch

    generator = torch.Generator().manual_seed(decode.seed)
    syntax: SyntaxCheck | None = None  # the input's syntax, analysed once; candidates may not make it worse
    if options.syntax_check and language is not None:
        try:
            syntax = SyntaxCheck(language, data)
        except InputError as exc:  # grammar extra missing: fill without the check
            warnings.append(f"syntax check skipped: {exc.message}")
    newline = newline_of(text)

    def rejection(patched: bytes, edits: list[Edit]) -> str | None:
        """Why a candidate is rejected, or None: it splits a UTF-8 character (U+FFFD), adds tree-sitter ERROR /
        MISSING nodes, or (Python that parsed before) no longer parses with CPython's parser."""
        if any("\ufffd" in e.text for e in edits) and "\ufffd" not in text:
            return "splits a UTF-8 character"
        return syntax.rejection(patched, edits) if syntax is not None else None

    totals = _Totals()
    valid: list[tuple[float, list[Edit], str]] = []
    invalid: list[tuple[float, list[Edit], str]] = []
    seen: set[tuple[str, ...]] = set()
    attempts_left = options.candidates + max(0, options.max_resample)  # resampling only happens on rejects
    attempts = 0
    if on_progress is not None:
        total = sum(p.budget for r in regions for p in r.spans)
        on_progress({"event": "start", "spans": len(ordered), "tokens": total})

    def consider(fills: list[_Fill]) -> bool:
        """Check one candidate (a fill per span) and file it as valid or invalid; False if seen before."""
        edits = _candidate_edits(data, regions, fills, newline, index)
        key = tuple(e.text for e in edits)
        if key in seen:
            return False
        seen.add(key)
        patched = apply_edits(data, edits)
        check_outside_unchanged(data, patched, edits)
        ok = rejection(patched, edits) is None
        (valid if ok else invalid).append((sum(e.score for e in edits), edits, patched.decode("utf-8")))
        return True

    while attempts_left > 0 and len(valid) < options.candidates:
        attempts_left -= 1
        attempts += 1
        if on_progress is not None:
            on_progress({"event": "candidate", "index": attempts, "of": attempts + attempts_left, "nfe": totals.nfe})
        fills: list[_Fill] = []
        for region in regions:
            if loaded.kind == "blockdiff":
                fills += _sample_blockdiff(region, loaded, decode, generator, totals)
            else:
                fills += _sample_asarm(region, loaded, decode, generator, totals, on_progress, attempts - 1)
        if not consider(fills) and (decode.temperature == 0 or decode.decoder == "beam"):
            break  # deterministic: no further candidate is new
    retrieved = 0
    if options.retrieve and loaded.kind == "asarm":
        for fill in _retrieved_fills(regions, loaded, options, totals):
            retrieved += consider([fill])
    if on_progress is not None:
        on_progress({"event": "done"})
    pool = valid or invalid
    best_score, best_edits, best_text = max(pool, key=lambda c: c[0])
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
        valid=len(valid),
        score=best_score,
        regions=len(regions),
        accepted_histogram=_histogram(totals.accepted),
    )
    if not valid and not options.allow_syntax_errors:
        raise _no_valid_fill(data, ordered, best_edits, attempts, rejection, stats)
    return FillResult(best_text, best_edits, stats, warnings, notes)


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
        failed=[
            {
                "label": s.label,
                "start_line": e.start_line,
                "end_line": e.end_line,
                "start_byte": e.start_byte,
                "end_byte": e.end_byte,
                "text": e.text,
                "score": e.score,
                "reason": reason,
            }
            for s, e, reason in failed
        ],
        stats=dict(stats),
    )


def _lines(edit: Edit) -> str:
    return str(edit.start_line) if edit.start_line == edit.end_line else f"{edit.start_line}-{edit.end_line}"


def _histogram(accepted: list[int]) -> dict[int, int]:
    hist: dict[int, int] = {}
    for a in accepted:
        hist[a] = hist.get(a, 0) + 1
    return dict(sorted(hist.items()))


def fill_file(
    path: str | Path,
    spans: Sequence[Span],
    *,
    language: str | None = None,
    model: Any = None,
    decode: DecodeConfig = DecodeConfig(),  # noqa: B008 (frozen, so a shared default is safe)
    options: FillOptions = FillOptions(),  # noqa: B008
    on_progress: ProgressCallback | None = None,
) -> FillResult:
    """Read `path` (UTF-8), fill `spans` (byte offsets of the file), return the result. Nothing is written."""
    from infill.languages import detect
    from infill.patch import decode_utf8, read_source

    data, _ = read_source(str(path))
    text = decode_utf8(data, str(path))
    return fill_text(
        text,
        spans,
        language=language if language is not None else detect(str(path)),
        model=model,
        decode=decode,
        options=options,
        on_progress=on_progress,
    )
