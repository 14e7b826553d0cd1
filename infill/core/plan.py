"""Planning a fill: spans -> regions of token pieces (the data flow and the length policy: infill.core.pipeline's
module docstring, and docs/decoding.md).

Each region of nearby spans becomes one sequence: its prefix, the spans' masks with the text between them, and
its suffix, cut to the model's window (3/4 of the free room to the prefix, 1/4 to the suffix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from infill.config import FillOptions
from infill.errors import DecodeError, InputError
from infill.models.fim import split_context
from infill.spans import LineIndex, Span

if TYPE_CHECKING:
    from infill.models.base import Tokenizer

MIN_CONTEXT = 16  # tokens of context a region keeps at least, when spans are grouped into regions
# A generous bound on the UTF-8 bytes of one token (byte-level BPE tokens of code average 3-4): context more than
# max_length * this many bytes away from a span cannot fit the model's window, so it is never even tokenized.
WINDOW_BYTES_PER_TOKEN = 64


@dataclass
class SpanPlan:
    span: Span
    index: int  # position in the sorted span list
    budget: int
    prefix: str  # LF text before the span, up to the previous span or the window (for post-processing)
    replaced: str  # LF text the span replaces
    suffix: str  # LF text after the span, up to the next span or the window
    heal: str = ""  # token healing: the text before the span that the model writes itself (see heal_text)
    gap: int = 0  # bytes between the previous span (or the start) and this one

    @property
    def at_line_start(self) -> bool:
        """Whether the span starts a line (nothing before it on its line)."""
        return self.prefix == "" or self.prefix.endswith("\n")


@dataclass
class Region:
    spans: list[SpanPlan]
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


@dataclass(frozen=True)
class Window:
    """What planning needs to know of a model: how long a sequence may be and how it is laid out."""

    max_length: int  # tokens in one sequence (1 << 30: no limit at planning)
    has_bos: bool  # a <bos> token starts every sequence
    has_pad: bool  # an end-of-fill pad ends fills early (so a replaced text's budget gets slack)
    groups_spans: bool  # neighbouring spans may share one sequence
    heals: bool = True  # token healing (heal_text) applies: the prompt ends where the tokenizer would split
    # a prefix cut to the room starts at a multiple of this many of its tokens (0: as late as the room allows), so
    # that typing at its end keeps its first tokens: a left-to-right model's cache keeps a prompt up to its first
    # change, and a cut that moved with every token typed changed the first token at every keystroke
    steady_cut: int = 0
    # a left-to-right model: its prompt puts the text after the span after the prefix, so it reads that text again
    # after every change before the span; FillOptions.max_suffix bounds it (cap_suffix)
    rereads_suffix: bool = False


# a prefix cut to a left-to-right model's window starts at a multiple of this many tokens (Window.steady_cut): a
# keystroke then reuses the cached prompt up to the cursor, and the cut moves once per 256 tokens typed, at the
# cost of up to 255 tokens of the oldest context
STEADY_CUT = 256


def left_to_right(window: Window) -> Window:
    """`window` for a left-to-right FIM model, whether it runs here (llama.cpp, transformers) or on a server
    (llama-server, vLLM, Ollama: their prompt caches keep a prompt up to its first change too): the steady prefix
    cut, and the text after the span bounded by FillOptions.max_suffix."""
    from dataclasses import replace

    return replace(window, steady_cut=STEADY_CUT, rereads_suffix=True)


def plan_regions(
    data: bytes,
    spans: list[Span],
    tok: Tokenizer,
    limits: Window,
    options: FillOptions,
    warnings: list[str],
    index: LineIndex,
) -> list[Region]:
    """Group the spans of `data` into regions and tokenize each (see the module docstring)."""
    max_length, has_bos, has_pad = limits.max_length, limits.has_bos, limits.has_pad
    cap = max_length - int(has_bos) - MIN_CONTEXT
    # Only text within `window` bytes of a span can reach the model, so nothing farther is decoded, tokenized
    # or post-processed: a fill in a 10 MB file does the work of a fill in a small one.
    window = max_length * WINDOW_BYTES_PER_TOKEN
    plans = []
    for i, span in enumerate(spans):
        prev_end = spans[i - 1].end_byte if i else 0
        next_start = spans[i + 1].start_byte if i + 1 < len(spans) else len(data)
        replaced = model_text(data, span.start_byte, span.end_byte)
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
        before = model_text(data, *_tail(data, prev_end, span.start_byte, window))
        after = model_text(data, *_head(data, span.end_byte, next_start, window))
        heal = heal_text(before, tok, alone=not has_bos and not after) if limits.heals else ""
        plan = SpanPlan(span, i, budget + heal_room(heal), before, replaced, after, heal=heal)
        plan.gap = span.start_byte - prev_end
        plans.append(plan)
    # group neighbouring spans into regions while the masks and the text between them fit
    regions: list[list[tuple[SpanPlan, list[int]]]] = []  # each span with the ids of the text before it
    used = 0
    for plan in plans:
        # farther apart never fits (not tokenized); a healed span starts a region (its fill's start is constrained)
        near = regions and limits.groups_spans and plan.gap <= window and not plan.heal
        between = tok.encode(plan.prefix) if near else []
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
        # the text that starts the prompt: a sentencepiece vocabulary puts its space before it, as in training
        # (Code Llama's `<PRE> {prefix}`: GGUFTokenizer.encode_start); every other text is tokenized as text that
        # follows other text
        encode_start = getattr(tok, "encode_start", tok.encode)
        prefix_ids = encode_start(model_prefix(model_text(data, pre_start, pre_end), group[0][0].heal))
        suffix_ids = tok.encode(model_text(data, suf_start, suf_end))
        if limits.rereads_suffix and options.max_suffix:
            suffix_ids = cap_suffix(suffix_ids, options.max_suffix, tok)
        inner = sum(p.budget for p, _ in group) + sum(len(b) for _, b in group[1:])
        free = max(0, max_length - int(has_bos) - inner)
        keep_pre, keep_suf = split_context(
            _steady_room(free, inner, max_length, limits), len(prefix_ids), len(suffix_ids)
        )
        if limits.steady_cut and keep_pre < len(prefix_ids):
            step = max(1, min(limits.steady_cut, keep_pre // 4))
            keep_pre = len(prefix_ids) - -(-(len(prefix_ids) - keep_pre) // step) * step
        if limits.steady_cut:
            keep_suf = min(len(suffix_ids), free - keep_pre)  # the room the prefix does not take
        kept_pre = prefix_ids[len(prefix_ids) - keep_pre :] if keep_pre else []
        kept_suf = suffix_ids[:keep_suf]
        cut_pre = keep_pre < len(prefix_ids) or pre_start > 0
        cut_suf = keep_suf < len(suffix_ids) or suf_end < len(data)
        region = Region([p for p, _ in group], kept_pre, [b for _, b in group[1:]], kept_suf, cut_pre or cut_suf)
        if region.truncated:
            region.seen, region.block_cut = _what_was_seen(index, region, tok, cut_pre)
        out.append(region)
    return out


def _steady_room(free: int, inner: int, max_length: int, limits: Window) -> int:
    """The room a steady cut (Window.steady_cut) divides: `free` less what rounds the spans' budgets up to a
    multiple of a unit (the step, at most 1/16 of the window), so that a fill of another budget at the same place
    (32 tokens for a line, 96 on a new line after Enter) cuts the prefix at the same start: the room it leaves
    goes to the text after the span, which the model reads again anyway, not a new first token for the prefix."""
    if not limits.steady_cut:
        return free
    unit = max(1, min(limits.steady_cut, max_length // 16))
    return max(0, free - (-(-inner // unit) * unit - inner))


def cap_suffix(ids: list[int], cap: int, tok: Tokenizer) -> list[int]:
    """The first `cap` tokens of the text after a span (`ids`), backed up to the end of their last whole line, as
    llama.vim sends whole lines: a function of that text alone, so typing before the span leaves it as it was (and
    the model's cache of it, where the cache can keep it). Only the prompt is cut: the checks and the fill's end
    cut still read the whole file. A first line longer than `cap` tokens is cut inside it; a room of blank lines
    is kept as cut (backing up would leave the model no text at all)."""
    if len(ids) <= cap:
        return ids
    text = tok.decode(ids[:cap])
    end = text.rfind("\n")
    if end < 0 or not text[:end].strip():
        return ids[:cap]
    return tok.encode(text[: end + 1])[:cap]


def model_text(data: bytes, start: int, end: int) -> str:
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


def _what_was_seen(index: LineIndex, region: Region, tok: Tokenizer, cut_pre: bool) -> tuple[tuple[int, int], bool]:
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


MAX_HEAL = 32  # characters a prompt is backed up at most (a longer pre-token is left as it is)


def heal_text(before: str, tok: Tokenizer, *, alone: bool = False) -> str:
    """Token healing: the text at the end of `before` (the text before a span) that the model should write
    itself, or "" for none. `alone`: nothing but `before` would show the model where it is (no <bos> and no text
    after the span), so a cut that would leave nothing before the span is not made: the prompt keeps its word,
    unhealed, rather than leave the model no visible token at all.

    A prompt that ends inside a word (`len(valu`) ends on pieces the tokenizer would not produce there once the
    word goes on (`values` is one token; `valu` rarely is), and byte-level BPE glues a space to the next word, so a
    prompt that ends in " " is as foreign. The prompt is backed up to the start of its last pre-token on the
    span's line (where the tokenizer splits whatever follows: tokenizers that say where, `pretoken_start`), and
    the fill must begin with the removed text (infill.decoding.healing); it is cut off the fill again. A span at
    the start of a line, a tokenizer that cannot say, a cut that is not a token boundary of the line, or more
    than MAX_HEAL characters: no healing.
    """
    line = before[before.rfind("\n") + 1 :]
    start = getattr(tok, "pretoken_start", None)
    if not line or start is None:
        return ""
    cut = start(line)
    if cut is None or not 0 <= cut < len(line) or len(line) - cut > MAX_HEAL:
        return ""
    if alone and cut == 0 and len(line) == len(before):
        return ""  # the whole prompt: healing it would leave the model nothing to read
    kept = tok.encode(line[:cut])
    if tok.encode(line)[: len(kept)] != kept:
        return ""
    return line[cut:]


def heal_room(heal: str) -> int:
    """Tokens added to a healed span's budget for the text it must begin with: at least its bytes (a token
    writes one at least), rounded up to 8, so that typing on inside a word keeps the sequence's layout (and the
    model's cache of its prompt, which is the same text) from one keystroke to the next."""
    size = len(heal.encode("utf-8"))
    return -(-size // 8) * 8


def model_prefix(before: str, heal: str) -> str:
    """The text before a span as the model sees it: without the text token healing moves into the fill."""
    return before[: len(before) - len(heal)]


def truncation_notes(
    regions: list[Region], max_length: int, index: LineIndex, warnings: list[str], max_context: int | None = None
) -> list[str]:
    """The notes for -v (or a warning) when the model's window (or --max-context) hid part of the file."""
    notes: list[str] = []
    if any(r.truncated for r in regions):
        # a small model's window is often shorter than the file: only worth a warning when it hides the start of
        # the block the spans are in (e.g. the signature of the function being filled); otherwise a note for -v
        lines = ", ".join(f"lines {r.seen[0]}-{r.seen[1]}" for r in regions if r.truncated)
        whose = "--max-context" if max_length == max_context else "the model's"
        message = f"context truncated to {whose} {max_length} tokens: it saw {lines} of {index.count}"
        if any(r.block_cut for r in regions):
            warnings.append(f"{message}, not the start of the block around the span(s)")
        else:
            notes.append(message)
    return notes
