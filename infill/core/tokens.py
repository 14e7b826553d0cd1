"""What a fill needs of a tokenizer besides encoding and decoding: the ids of line-break and blank tokens (which
end a one-line fill), the bytes each id writes (token healing), both cached per tokenizer, and where a decoded
fill ends (its pad, a stop token, the end of its block of lines)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infill.models.base import Pieces, Tokenizer


def cut_at_pad(
    tokens: list[int],
    logq: list[float] | None,
    pad_id: int | None,
    stops: frozenset[int] = frozenset(),
    blank: frozenset[int] = frozenset(),
    ends: Callable[[list[int]], bool] | None = None,
) -> tuple[list[int], int, float, float]:
    """The fill's tokens: those before the first pad, or up to and including the first stop token after some
    text (see FillProblem; a token such as `):\n` holds text before its line break, which the one-line cut of
    infill.core.pipeline keeps), or up to and including the token after which `ends` holds (a block of lines);
    how many came before the token that ended the fill; the log-likelihood of
    the tokens up to the one that ended the fill, that one included, and the lowest of their log-probabilities."""
    end, kept, text = len(tokens), len(tokens), False
    for i, t in enumerate(tokens):
        if t == pad_id:
            end = kept = i
            break
        if (t in stops and text) or (ends is not None and ends(tokens[: i + 1])):
            end, kept = i, i + 1
            break
        text = text or t not in blank
    scored = min(len(tokens), end + 1)
    if logq is None or not scored:
        return tokens[:kept], end, 0.0, 0.0
    return tokens[:kept], end, float(sum(logq[:scored])), float(min(logq[:scored]))


# id(tokenizer), vocabulary size -> (the tokenizer, held weakly where it can be, and its sets)
_TOKEN_SETS: dict[tuple[int, int], tuple[Callable[[], object], tuple[frozenset[int], frozenset[int]]]] = {}


def token_sets(tokenizer: Tokenizer, vocab_size: int) -> tuple[frozenset[int], frozenset[int]]:
    """(line breaks, blanks): ids of the tokens whose text holds a line break, and of whitespace-only tokens
    (cached per tokenizer: an entry whose tokenizer is gone is not another tokenizer's, though the new one may
    have the old one's id). A line break after some text ends a one-line span."""
    import weakref

    key = (id(tokenizer), vocab_size)
    found = _TOKEN_SETS.get(key)
    if found is not None and found[0]() is tokenizer:
        return found[1]
    texts = [tokenizer.decode([i]) for i in range(vocab_size)]
    sets = (
        frozenset(i for i, t in enumerate(texts) if "\n" in t),
        frozenset(i for i, t in enumerate(texts) if t and not t.strip()),
    )
    try:
        held: Callable[[], object] = weakref.ref(tokenizer)
    except TypeError:  # a tokenizer without weak references: held for good
        held = lambda: tokenizer  # noqa: E731
    _TOKEN_SETS[key] = (held, sets)
    return sets


_PIECES: dict[tuple[int, int], Pieces] = {}


def token_pieces(tokenizer: Tokenizer, vocab_size: int) -> Pieces:
    """The bytes every token id writes, for token healing (cached per tokenizer): the tokenizer's own
    `token_bytes` where it has one, else its decoding of the id alone (b"" where that splits a character)."""
    from infill.models.base import Pieces

    key = (id(tokenizer), vocab_size)
    found = _PIECES.get(key)
    if found is None:
        own = getattr(tokenizer, "token_bytes", None)

        def piece(i: int) -> bytes:
            if own is not None:
                try:
                    return bytes(own(i))
                except (IndexError, KeyError):  # an id past the tokenizer's (a model's padding rows)
                    return b""
            text = tokenizer.decode([i])
            return b"" if "\ufffd" in text else text.encode("utf-8")

        found = _PIECES[key] = Pieces([piece(i) for i in range(vocab_size)])
    return found
