"""Byte-level BPE: exact round trip for any text, line breaks are token boundaries, fixed special ids."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from infill.training.tokenizer import BOS_ID, MASK_ID, PAD_ID, decode, encode, load_tokenizer, save_tokenizer
from tests.fixtures_train import tiny_tokenizer  # noqa: F401  (pytest fixture)

SHIPPED = Path(__file__).resolve().parent.parent / "infill" / "weights" / "default" / "tokenizer.json"

# every character UTF-8 can encode, as st.text()'s default alphabet, without hypothesis building that
# alphabet's table by encoding all 1.1M code points (tests/test_tokenizer_roundtrip.py, ANY_CHARACTER)
ANY_CHARACTER = st.characters(blacklist_categories=("Cs",))
code_like = st.text(alphabet=st.sampled_from(list('def x(a, b):\n\r\t    return \'é中😀"""#<mask>')), max_size=200)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.one_of(st.text(ANY_CHARACTER, max_size=200), code_like))
def test_round_trip_any_text(tiny_tokenizer, text: str) -> None:  # noqa: F811
    assert decode(tiny_tokenizer, encode(tiny_tokenizer, text)) == text


@settings(max_examples=200, deadline=None, derandomize=True)
@given(text=code_like)
def test_line_breaks_are_token_boundaries(tiny_tokenizer, text: str) -> None:  # noqa: F811
    # In a byte-level BPE every character of a token's string stands for one byte.
    ids = encode(tiny_tokenizer, text)
    boundaries, pos = {0}, 0
    for i in ids:
        pos += len(tiny_tokenizer.id_to_token(i))
        boundaries.add(pos)
    data = text.encode("utf-8")
    assert pos == len(data)
    for j, byte in enumerate(data):
        if byte == 0x0A:  # "\n": a line ends right after it; "\r\n" is one piece, so check before the "\r"
            assert j + 1 in boundaries
            assert (j - 1 if data[j - 1 : j] == b"\r" else j) in boundaries
        elif byte == 0x0D and data[j + 1 : j + 2] != b"\n":  # a lone "\r" is a line break of its own
            assert j in boundaries and j + 1 in boundaries


def test_whitespace_survives(tiny_tokenizer) -> None:  # noqa: F811
    for text in ["\t\tx = 1  \r\n", "   \n\n\n   ", "a\rb", " odd indent\n", "", "trailing   "]:
        assert decode(tiny_tokenizer, encode(tiny_tokenizer, text)) == text


def test_specials_have_fixed_ids_and_never_come_from_text(tiny_tokenizer, tmp_path: Path) -> None:  # noqa: F811
    assert (PAD_ID, MASK_ID, BOS_ID) == (0, 1, 2)
    for s, i in (("<pad>", PAD_ID), ("<mask>", MASK_ID), ("<bos>", BOS_ID)):
        assert tiny_tokenizer.token_to_id(s) == i
    save_tokenizer(tiny_tokenizer, tmp_path / "tokenizer.json")
    loaded = load_tokenizer(tmp_path / "tokenizer.json")
    ids = encode(loaded, "x = '<mask><pad><bos>'")
    assert not {PAD_ID, MASK_ID, BOS_ID} & set(ids)
    assert decode(loaded, ids) == "x = '<mask><pad><bos>'"


def test_shipped_tokenizer_round_trip() -> None:
    if not SHIPPED.exists():
        return  # weights not exported in this checkout
    tok = load_tokenizer(SHIPPED)
    for text in ["def f(x):\r\n\treturn x  \n", "    # é 中 😀\n\n", "<mask>"]:
        assert decode(tok, encode(tok, text)) == text
    assert tok.get_vocab_size() == 8192


def test_encode_documents_keeps_each_texts_ids_compactly_in_order(tiny_tokenizer) -> None:  # noqa: F811
    from array import array

    from infill.training.tokenizer import encode_documents

    texts = ["x", "def f(a):\n    return a\n", "", *(f"y{i} = {i}\n" for i in range(300))]  # more than one chunk
    docs = encode_documents(tiny_tokenizer, texts, min_tokens=2)
    expected = [e.ids for e in tiny_tokenizer.encode_batch(texts) if len(e.ids) >= 2]
    assert [list(d) for d in docs] == expected and len(docs) > 256
    assert all(isinstance(d, array) and d.itemsize == 4 for d in docs)
    assert len(encode_documents(tiny_tokenizer, texts)) == len([t for t in texts if t])
