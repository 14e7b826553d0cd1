"""Runtime tokenizers: text <-> ids with an exact round trip.

- `ByteBPETokenizer`: the project's byte-level BPE (`tokenizer.json`, HF `tokenizers`).
  decode(encode(s)) == s for every string, whitespace included, because every byte has a token and no
  normalizer runs. Special-token strings in the text ("<mask>" in a source file) are tokenized as ordinary
  text, never as the special id.
- `SentencePieceTokenizer`: XLNet's sentencepiece model for the published checkpoints. Sentencepiece
  normalizes whitespace away (newlines, tabs, runs of spaces), so this wrapper never
  lets it see any: the text is cut into whitespace and non-whitespace runs, whitespace is encoded by this
  module, and decoding is the concatenation of per-id surface strings defined here (not sentencepiece's
  decode). The round trip is exact for every text whose non-whitespace characters the vocabulary covers;
  `lossless(text)` tells.

`train_byte_bpe` is the project's one BPE recipe, for the AS-ARM's tokenizer (infill.training.tokenizer), the
block-diffusion models' (infill.models.blockdiff_folder) and the tiny test models': every line break ("\\r\\n",
"\\r" or "\\n") is its own pre-token, then GPT-2's byte-level split, so a line boundary is always a token boundary
(docs/training.md, "Tokenizer": masking whole lines in training and tokenizing prefix / fill / suffix separately
at inference give the same tokens), and bytes map to printable characters, so any UTF-8 text round-trips exactly.

Importing this module is cheap (no torch); `tokenizers` / `sentencepiece` are imported on use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from infill.errors import ModelError

SPECIALS = ("<pad>", "<mask>", "<bos>")  # ids 0, 1, 2 in the project's tokenizers
LINE_BREAK = r"\r\n|\r|\n"


def new_tokenizer() -> Any:
    """An untrained tokenizer with the project's normalization-free byte-level pipeline."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LINE_BREAK), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def train_byte_bpe(texts: Iterable[str], vocab_size: int, specials: Sequence[str] = SPECIALS) -> Any:
    """Train the BPE on `texts` (new_tokenizer's pipeline): `specials` get ids 0, 1, ... in order, then the 256
    byte symbols, then merges of pairs seen at least twice (so the vocabulary may stop below `vocab_size` on
    little text)."""
    from tokenizers import pre_tokenizers, trainers

    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable-unicode alphabet for bytes, inverted: char -> byte value."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class ByteBPETokenizer:
    """The project's byte-level BPE tokenizer (a `tokenizer.json`), with an exact round trip."""

    def __init__(self, tok: Any) -> None:
        self._tok = tok
        self._tok.encode_special_tokens = True  # "<mask>" in user text is text, not the special token
        self._tok.no_padding()
        self._tok.no_truncation()
        vocab: dict[str, int] = tok.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1
        special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
        dec = _byte_decoder()
        self._bytes: list[bytes] = [b""] * self.vocab_size
        for piece, i in vocab.items():
            if piece in special:
                continue
            try:
                self._bytes[i] = bytes(dec[c] for c in piece)
            except KeyError as exc:
                raise ModelError(f"tokenizer piece {piece!r} is not byte-level") from exc
        self.mask_id = vocab.get("<mask>")
        self.pad_id = vocab.get("<pad>")
        self.bos_id = vocab.get("<bos>")
        self.special_ids = frozenset(vocab[s] for s in special)

    @classmethod
    def from_file(cls, path: str | Path) -> ByteBPETokenizer:
        from tokenizers import Tokenizer

        try:
            return cls(Tokenizer.from_file(str(path)))
        except ModelError:
            raise
        except Exception as exc:  # tokenizers raises plain Exception on a bad file
            raise ModelError(f"cannot read tokenizer {path}: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def token_bytes(self, i: int) -> bytes:
        """The bytes of one token; b'' for special tokens."""
        return self._bytes[i]

    def pretoken_start(self, text: str) -> int | None:
        """Where the last pre-token of `text` starts (a string offset): the tokenizer splits there whatever
        text follows, so a prompt cut there ends on a token boundary (token healing: infill.core.plan)."""
        return pretoken_start(self._tok, text)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join(self._bytes[i] for i in ids)

    def decode(self, ids: Iterable[int]) -> str:
        """Concatenated bytes of `ids` (specials dropped), UTF-8 decoded; a split character becomes U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def lossless(self, text: str) -> bool:
        return self.decode(self.encode(text)) == text


# The pre-tokenizers of byte-level BPE vocabularies (tokenizer.ggml.model "gpt2"), by tokenizer.ggml.pre: the
# regular expressions llama.cpp splits text with before BPE (the ones the models' tokenizer.json files hold), each
# applied to the pieces the one before left. Where a pre-token starts is where token healing backs a prompt up to
# (infill.core.plan.heal_text); a vocabulary not named here is not healed. A model server's tokenizer
# (infill.models.remote) is given the one its FIM family's models use (infill.models.fim.FimFamily.pre).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LLAMA3 = _QWEN2.replace(r"|\p{N}|", r"|\p{N}{1,3}|")
PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "qwen2": (_QWEN2,),
    "llama3": (_LLAMA3,),
    "llama-bpe": (_LLAMA3,),
    "deepseek-coder": (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}"),
    "starcoder": (r"\p{N}", _GPT2),
    "refact": (r"\p{N}", _GPT2),
    "gpt-2": (_GPT2,),
}


@cache
def named_pre_tokenizer(name: str) -> Any:
    """llama.cpp's pre-tokenizer `name` (PRE_TOKENIZERS) as `pretoken_start` reads one: its splits in sequence."""
    from types import SimpleNamespace

    from tokenizers import Regex, pre_tokenizers

    splits = [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in PRE_TOKENIZERS[name]]
    return SimpleNamespace(pre_tokenizer=pre_tokenizers.Sequence(splits))


def pretoken_start(tok: Any, text: str) -> int | None:
    """The start of the last pre-token of `text` under a `tokenizers.Tokenizer`'s pre-tokenizer, or None when it
    has none."""
    pre = getattr(tok, "pre_tokenizer", None)
    if pre is None or not text:
        return None
    pieces = pre.pre_tokenize_str(text)
    return int(pieces[-1][1][0]) if pieces else None


# A text that no piece of a sentencepiece vocabulary joins to what follows it (Llama's vocabulary writes a line
# break only as the byte token <0x0A>): what `without_space_prefix` tokenizes before a text
_SEPARATOR = "\n"


def without_space_prefix(
    encode: Callable[[str], list[int]], token_bytes: Callable[[int], bytes], text: str
) -> list[int] | None:
    """The tokens of `text` where it follows other text, for a tokenizer `encode` that, as sentencepiece does
    (Llama and Code Llama vocabularies), puts a space ("▁") before the first word of every text it encodes; None
    when `encode` adds no such space (its own tokens of `text` are the answer then).

    Code Llama was trained on `<PRE> {prefix} <SUF>{suffix} <MID>`: the space before the prefix, none before the
    suffix or the middle (Meta's encode_infilling; llama-cpp-python and transformers strip it the same way). The
    text is tokenized after _SEPARATOR, whose tokens are dropped; if the split does not fall between them (a
    vocabulary that joins a line break to the text after it), a lone space token in front is dropped instead."""
    data = text.encode("utf-8")
    head = encode(_SEPARATOR)
    if b"".join(token_bytes(t) for t in head) != b" " + _SEPARATOR.encode():
        return None
    if not data:
        return []
    marked = encode(_SEPARATOR + text)
    rest = marked[len(head) :]
    if marked[: len(head)] == head and b"".join(token_bytes(t) for t in rest) == data:
        return rest
    plain = encode(text)
    if plain and token_bytes(plain[0]) == b" " and b"".join(token_bytes(t) for t in plain[1:]) == data:
        return plain[1:]
    return plain


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def whole_characters(data: bytes) -> bytes:
    """`data` without the incomplete UTF-8 character it ends with, if any: the lead byte and the continuation bytes
    after it when they are fewer than the lead byte announces (llama.cpp's server holds such bytes back while it
    streams). Invalid bytes earlier on are left as they are."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: its lead is further back
            continue
        size = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
        return data[:-back] if size > back else data
    return data


def fill_text(tokenizer: Any, ids: list[int]) -> str:
    """The text a fill's tokens write, for a file: decoded as one byte sequence (a character whose bytes several
    tokens hold decodes whole), without an incomplete character at its end (a token budget or an end token reached
    inside its bytes writes the bytes before it, never U+FFFD). A U+FFFD that invalid bytes inside the fill make
    stays, for the checks to refuse (infill.core.candidates)."""
    text = str(tokenizer.decode(ids))
    own = getattr(tokenizer, "token_bytes", None)
    if not text.endswith("\ufffd") or own is None:
        return text
    pieces = [bytes(own(int(i))) for i in ids]
    data = b"".join(pieces)
    cut = len(data) - len(whole_characters(data))
    if not cut:
        return text
    if text == data.decode("utf-8", errors="replace"):  # plain text tokens: decode the whole bytes
        return whole_characters(data).decode("utf-8", errors="replace")
    n, dropped = len(ids), 0  # special tokens or a decoder of its own: drop the tokens that hold the cut bytes
    while n and dropped < cut:
        n -= 1
        dropped += len(pieces[n])
    return str(tokenizer.decode(ids[:n]))


def piece_bytes(piece: str, byte_level: bool) -> bytes:
    """The bytes a vocabulary piece writes: through GPT-2's byte alphabet for a byte-level BPE; else
    sentencepiece's spelling ("▁" a space, <0xNN> one byte)."""
    if byte_level:
        dec = _byte_decoder()
        return bytes(dec[c] for c in piece) if all(c in dec for c in piece) else piece.encode("utf-8")
    found = _BYTE_PIECE.fullmatch(piece)
    if found:
        return bytes([int(found.group(1), 16)])
    return piece.replace(_SP_SPACE, " ").encode("utf-8")


# --- XLNet sentencepiece
# ------------------------------------------------------------------------------------------

_SP_SPACE = "\u2581"  # sentencepiece's visible space
# Whitespace that sentencepiece would normalize away -> the XLNet special piece that stands for it. "\n" as
# <eop>
# matches XLNet pretraining (end of paragraph); the others are arbitrary but fixed and documented.
XLNET_WHITESPACE_PIECES = {"\n": "<eop>", "\t": "<eod>", "\r": "<sep>"}
_RUNS = re.compile(r"[\n\t\r]| +|[^\s]+|\s", re.UNICODE)


class SentencePieceTokenizer:
    """XLNet sentencepiece (`spiece.model`) with whitespace kept exactly; see the module docstring.

    Encoding of a text cut into runs:
      "\\n" / "\\t" / "\\r"       -> one special id each (XLNET_WHITESPACE_PIECES);
      m spaces before a word      -> (m - 1) x "▁" then the word's pieces, the first carrying its "▁";
      m spaces before anything else (or the end) -> m x "▁";
      a word with no space before -> its pieces with no leading "▁";
      other unicode whitespace    -> encoded like a word.
    Decoding concatenates each id's surface: the piece with "▁" -> " ", the whitespace specials -> their
    character, other specials -> "".
    """

    def __init__(self, model_file: str | Path, whitespace: dict[str, str] | None = None) -> None:
        import sentencepiece as spm

        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.Load(str(model_file))
        except Exception as exc:  # sentencepiece raises OSError / RuntimeError on a bad file
            raise ModelError(f"cannot read sentencepiece model {model_file}: {exc}") from exc
        self.vocab_size = int(self._sp.GetPieceSize())
        self.unk_id = int(self._sp.unk_id())
        pieces = [self._sp.IdToPiece(i) for i in range(self.vocab_size)]
        self._piece_id = {p: i for i, p in enumerate(pieces)}
        ws = whitespace if whitespace is not None else XLNET_WHITESPACE_PIECES
        self._ws_id: dict[str, int] = {}
        for ch, piece in ws.items():
            if piece not in self._piece_id:
                raise ModelError(f"sentencepiece model has no piece {piece!r} to stand for {ch!r}")
            self._ws_id[ch] = self._piece_id[piece]
        self._surface: list[str] = []
        ws_by_id = {i: ch for ch, i in self._ws_id.items()}
        for i, p in enumerate(pieces):
            if i in ws_by_id:
                self._surface.append(ws_by_id[i])
            elif self._sp.IsControl(i) or self._sp.IsUnknown(i) or (p.startswith("<") and p.endswith(">")):
                self._surface.append("")
            else:
                self._surface.append(p.replace(_SP_SPACE, " "))
        self.space_id = self._piece_id.get(_SP_SPACE, self.unk_id)
        self.mask_id = self._piece_id.get("<mask>")
        self.pad_id: int | None = None  # published checkpoints were not trained with end-of-fill padding
        self.bos_id: int | None = None

    def _word(self, word: str, spaced: bool) -> list[int]:
        """Ids of one whitespace-free run; with `spaced` the first piece carries the preceding space."""
        pieces: list[str] = self._sp.EncodeAsPieces(word)  # sentencepiece adds the dummy "▁" prefix
        if pieces and pieces[0] == _SP_SPACE:
            pieces = pieces[1:]
            first_spaced = False
        else:
            first_spaced = bool(pieces) and pieces[0].startswith(_SP_SPACE)
        ids = [self._piece_id.get(p, self.unk_id) for p in pieces]
        if not ids:
            return [self.space_id] if spaced else []
        if spaced and not first_spaced:
            return [self.space_id, *ids]
        if not spaced and first_spaced:
            bare = pieces[0][1:]
            rest = ids[1:]
            return self._greedy(bare) + rest
        return ids

    def _greedy(self, s: str) -> list[int]:
        """Longest-match split of `s` into vocabulary pieces without a leading "▁" (unknown chars -> unk)."""
        out: list[int] = []
        i = 0
        while i < len(s):
            for j in range(len(s), i, -1):
                pid = self._piece_id.get(s[i:j])
                if pid is not None:
                    out.append(pid)
                    i = j
                    break
            else:
                out.append(self.unk_id)
                i += 1
        return out

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        pending_spaces = 0
        for m in _RUNS.finditer(text):
            run = m.group(0)
            if run[0] == " ":
                pending_spaces = len(run)
                continue
            if run in self._ws_id:
                ids.extend([self.space_id] * pending_spaces)
                ids.append(self._ws_id[run])
            else:
                ids.extend([self.space_id] * max(pending_spaces - 1, 0))
                ids.extend(self._word(run, spaced=pending_spaces > 0))
            pending_spaces = 0
        ids.extend([self.space_id] * pending_spaces)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self._surface[i] for i in ids)

    def lossless(self, text: str) -> bool:
        return self.decode(self.encode(text)) == text


def load_tokenizer(folder: str | Path) -> ByteBPETokenizer | SentencePieceTokenizer:
    """The tokenizer of a model folder: `tokenizer.json` for the project's models, else `spiece.model`."""
    folder = Path(folder)
    cfg_path = folder / "config.json"
    infill_cfg: dict[str, Any] = {}
    if cfg_path.is_file():
        try:
            infill_cfg = json.loads(cfg_path.read_text()).get("infill", {}) or {}
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read {cfg_path}: {exc}") from exc
    byte_bpe = infill_cfg.get("tokenizer", "byte-bpe") == "byte-bpe"
    if infill_cfg and byte_bpe and (folder / "tokenizer.json").is_file():
        return ByteBPETokenizer.from_file(folder / "tokenizer.json")
    if (folder / "spiece.model").is_file():
        return SentencePieceTokenizer(folder / "spiece.model")
    if (folder / "tokenizer.json").is_file():
        return ByteBPETokenizer.from_file(folder / "tokenizer.json")
    raise ModelError(f"no tokenizer in {folder} (expected tokenizer.json or spiece.model)")
