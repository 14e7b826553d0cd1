"""Both runtime tokenizers round-trip text exactly, whitespace included (docs/training.md, "Tokenizer")."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infill.models.tokenizer import ByteBPETokenizer, SentencePieceTokenizer, load_tokenizer, train_byte_bpe

CODE = "def f(x):\n\tif x:\r\n        return  x  \n    y = 'é😀'  # <mask> <pad>\n\n\n"
PIECES = [" ", "  ", "\t", "\n", "\r\n", "\r", "a", "bc", "(", ":", "é", "😀", "\u00a0", "<mask>"]
WHITESPACE_HEAVY = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)
# st.text()'s own default alphabet (every character UTF-8 can encode: all but the surrogates), named by category:
# the default, characters(codec="utf-8"), has hypothesis encode all 1.1M code points to build its table (~2.3 s of
# CPU in each process of a fresh clone, where .hypothesis/ holds no cached copy)
ANY_CHARACTER = st.characters(blacklist_categories=("Cs",))


@pytest.fixture(scope="module")
def bpe() -> ByteBPETokenizer:
    return ByteBPETokenizer(train_byte_bpe([CODE * 3, "hello world, the quick brown fox\n" * 5], 300))


@settings(max_examples=200, derandomize=True, deadline=None)
@given(text=st.text(ANY_CHARACTER, max_size=60) | WHITESPACE_HEAVY)
def test_byte_bpe_round_trip(bpe: ByteBPETokenizer, text: str) -> None:
    ids = bpe.encode(text)
    assert bpe.decode(ids) == text
    assert bpe.decode_bytes(ids) == text.encode("utf-8")


@settings(max_examples=100, derandomize=True, deadline=None)
@given(text=WHITESPACE_HEAVY)
def test_byte_bpe_newline_is_its_own_token(bpe: ByteBPETokenizer, text: str) -> None:
    """Line boundaries are token boundaries: no token mixes a line break ("\\n", "\\r\\n") with anything else."""
    for i in bpe.encode(text):
        piece = bpe.token_bytes(i)
        assert b"\n" not in piece or piece in (b"\n", b"\r\n")


def test_byte_bpe_specials(bpe: ByteBPETokenizer) -> None:
    assert (bpe.pad_id, bpe.mask_id, bpe.bos_id) == (0, 1, 2)
    ids = bpe.encode("<mask><pad><bos>")  # special strings in user text stay text
    assert not set(ids) & {0, 1, 2}
    assert bpe.decode([bpe.bos_id, *ids, bpe.pad_id]) == "<mask><pad><bos>"  # specials decode to nothing


def test_byte_bpe_file_and_folder(bpe: ByteBPETokenizer, tmp_path: Path) -> None:
    bpe._tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "config.json").write_text('{"model_type": "xlnet", "infill": {"tokenizer": "byte-bpe"}}')
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, ByteBPETokenizer)
    assert loaded.encode(CODE) == bpe.encode(CODE)


# --- XLNet sentencepiece ---------------------------------------------------------------------------

spm = pytest.importorskip("sentencepiece")  # optional dependency, for published XLNet checkpoints
SP_TEXT = [
    "def foo(bar):",
    "    return bar + 1",
    "The quick brown fox jumps over the lazy dog.",
    "x = [1, 2, 3]  # comment",
    "class Foo(object): pass",
    "if a == b: print('hi')",
]
SP_ALPHABET = sorted(set("".join(SP_TEXT)) - {" "})


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny unigram sentencepiece model with XLNet's special pieces, trained in-process."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SP_TEXT * 20),
        model_writer=buf,
        vocab_size=60,
        model_type="unigram",
        user_defined_symbols=["<eop>", "<eod>", "<sep>", "<cls>", "<mask>"],
        character_coverage=1.0,
        minloglevel=2,
    )
    path = tmp_path_factory.mktemp("sp") / "spiece.model"
    path.write_bytes(buf.getvalue())
    return path


@settings(max_examples=200, derandomize=True, deadline=None)
@given(text=st.lists(st.sampled_from([" ", "  ", "   ", "\t", "\n", "\r\n", *SP_ALPHABET]), max_size=50).map("".join))
def test_sentencepiece_round_trip_keeps_whitespace(sp_model: Path, text: str) -> None:
    tok = SentencePieceTokenizer(sp_model)
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "def foo(bar):\n    return  bar+1\n\n\tx = 3   \r\n",
        " a",  # one leading space
        "   a",  # an odd run of leading spaces
        "a \n",  # a space before a newline
        "\n\n",
        "",
    ],
)
def test_sentencepiece_code_cases(sp_model: Path, text: str) -> None:
    tok = SentencePieceTokenizer(sp_model)
    assert tok.lossless(text)


def test_sentencepiece_reports_uncovered_characters(sp_model: Path) -> None:
    tok = SentencePieceTokenizer(sp_model)
    assert not tok.lossless("foo ☃")  # not in the vocabulary: <unk>, and the check says so
    assert tok.mask_id is not None and tok.pad_id is None


def test_folder_with_spiece_model_uses_sentencepiece(sp_model: Path, tmp_path: Path) -> None:
    (tmp_path / "spiece.model").write_bytes(sp_model.read_bytes())
    (tmp_path / "config.json").write_text('{"model_type": "xlnet"}')
    assert isinstance(load_tokenizer(tmp_path), SentencePieceTokenizer)
