"""The text after the cursor a left-to-right model reads in the editor (FillOptions.max_suffix): its prompt puts
that text after the prefix, so every change before the cursor makes it read all of it again. The language server
bounds it (to whole lines, as llama.vim sends them), the same text from key to key while only the prefix changes;
`infill fill` keeps the whole window. Only the prompt is cut: the checks read the whole file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fixtures_cli import ByteTokenizer

from infill.config import FillOptions
from infill.core.plan import Region, Window, plan_regions
from infill.spans import LineIndex, Span

AFTER = "".join(f"value_{i} = compute({i}, {i + 1})\n" for i in range(120))  # 3,600 bytes after the cursor


def suffix_of(
    typed: str, options: FillOptions, rereads: bool = True, after: str = AFTER, max_length: int = 8192
) -> tuple[str, Region]:
    """The suffix the model reads for a cursor at the end of `typed`, with `after` on the lines below it."""
    text = "def f():\n    " + typed
    data = (text + "\n" + after).encode()
    window = Window(max_length, has_bos=False, has_pad=True, groups_spans=False, rereads_suffix=rereads)
    span = Span(len(text.encode()), len(text.encode()), one_line=True)
    (region,) = plan_regions(data, [span], ByteTokenizer(), window, options, [], LineIndex(data))
    return bytes(region.suffix_ids).decode(), region


def test_a_left_to_right_model_reads_whole_lines_up_to_the_cap_and_the_same_ones_at_every_key() -> None:
    seen = set()
    for n in range(40):
        suffix, region = suffix_of("total = " + "x" * n, FillOptions(max_suffix=100))
        assert len(region.suffix_ids) <= 100 and suffix.endswith("\n") and ("\n" + AFTER).startswith(suffix)
        cut = ("\n" + AFTER)[:100]
        assert suffix == cut[: cut.rfind("\n") + 1]  # the whole lines within 100 tokens
        assert not region.truncated  # a bound the user chose, not the model's window: no truncation note
        seen.add(suffix)
    assert len(seen) == 1  # typing before the cursor leaves the text after it as it was: nothing is read again


def test_no_cap_reads_all_that_fits_and_other_kinds_are_not_capped() -> None:
    for options in (FillOptions(max_suffix=0), FillOptions()):  # 0, and no setting (`infill fill`'s default)
        assert suffix_of("total = ", options)[0] == "\n" + AFTER
    # the any-subset kind reads its whole bidirectional prompt at every change anyway: left as it was
    assert suffix_of("total = ", FillOptions(max_suffix=100), rereads=False)[0] == "\n" + AFTER
    # the model's own window still applies under a larger cap (its quarter for the suffix)
    suffix, region = suffix_of("total = " * 200, FillOptions(max_suffix=4000), max_length=1024)
    assert len(suffix) < 1024 // 3 and region.truncated


def test_a_first_line_longer_than_the_cap_is_cut_inside_it() -> None:
    long_line = "x = [" + "1, " * 100 + "]\n"
    suffix, region = suffix_of("total = ", FillOptions(max_suffix=50), after=long_line + AFTER)
    assert len(region.suffix_ids) == 50 and ("\n" + long_line).startswith(suffix)
    blank = "\n" * 80  # a room of blank lines keeps the text up to the cap: backing up would leave nothing
    assert suffix_of("total = ", FillOptions(max_suffix=50), after=blank + AFTER)[0] == "\n" * 50


def test_only_left_to_right_kinds_reread_the_suffix() -> None:
    from infill.core.kinds.ar import Autoregressive
    from infill.core.kinds.asarm import AnySubset
    from infill.models.registry import LoadedModel

    network = type("Causal", (), {"max_length": 4096, "bos_id": None, "pad_id": 0})()
    loaded = LoadedModel("m", "ar", network, ByteTokenizer(), {})
    assert Autoregressive().window(loaded).rereads_suffix and not AnySubset().window(loaded).rereads_suffix


# the language server and `infill fill` with a tiny left-to-right model (a Qwen layout, a 2,048-token window)
SOURCE = "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n\n\n"
FILE = "import math\n\n\ndef area(r):\n    return \n" + "".join(
    SOURCE.replace("mean", f"mean_{i}") for i in range(40)
)  # about 3,000 bytes after the cursor
CURSOR = FILE.index("return ") + len("return ")
QUICK = {"precision": "fp32", "tokens": 2, "beam": 1, "retrieve": False}  # the prompt is the point, not the fill
QUICK_FLAGS = ["--precision", "fp32", "--tokens", "2", "--beam", "1", "--no-retrieve"]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infill.models.tiny import tiny_ar_checkpoint

    root = tmp_path_factory.mktemp("suffixcap")
    return tiny_ar_checkpoint(root / "qwen", "qwen", texts=[SOURCE] * 3, shape={"max_position_embeddings": 2048})


@pytest.fixture
def prompts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The suffix of every region a fill plans (as the model's tokenizer decodes it)."""
    from infill.core import pipeline

    seen: list[str] = []
    plan = pipeline.plan_regions

    def spy(data: bytes, spans: Any, tok: Any, *args: Any) -> list[Region]:
        regions = plan(data, spans, tok, *args)
        seen.extend(tok.decode(r.suffix_ids) for r in regions)
        return regions

    monkeypatch.setattr(pipeline, "plan_regions", spy)
    return seen


def lsp_suffix(model: Path, prompts: list[str], fill: dict[str, Any] | None = None) -> str:
    from infill.lsp import fills
    from infill.lsp.documents import Document

    settings = fills.Settings.parse({"model": str(model), "threshold": 0, "fill": {**QUICK, **(fill or {})}})
    document = Document("file:///m.py", "python", 1, FILE)
    target = fills.cursor_target(document, CURSOR, settings.lines)
    assert target is not None
    fills.fill(document, target, settings)
    return prompts.pop()


def test_the_language_server_caps_a_left_to_right_models_suffix_and_infill_fill_does_not(
    qwen: Path, prompts: list[str], tmp_path: Path
) -> None:
    from infill import api
    from infill.cli import main
    from infill.lsp.fills import SUFFIX_TOKENS
    from infill.models.hf_folder import load_tokenizer

    tok = load_tokenizer(qwen)
    assert len(tok.encode(FILE[CURSOR:])) > SUFFIX_TOKENS + 100  # more than the cap: the cap has work to do
    capped = lsp_suffix(qwen, prompts)
    assert FILE[CURSOR:].startswith(capped) and capped.endswith("\n")
    assert len(tok.encode(capped)) <= SUFFIX_TOKENS < len(tok.encode(FILE[CURSOR:]))
    assert lsp_suffix(qwen, prompts, {"max_suffix": 0}) == FILE[CURSOR:]  # 0: all that fits the window
    path = tmp_path / "m.py"
    path.write_text(FILE)
    api.clear_model_cache()
    line = FILE[:CURSOR].count("\n") + 1
    span = f"{line}:{len('    return ') + 1}-{line}:{len('    return ') + 1}"
    r = CliRunner().invoke(main, ["fill", str(path), "--model", str(qwen), "--span", span, *QUICK_FLAGS])
    assert r.exit_code in (0, 3), r.stderr  # 3: no fill passed the checks (a random model); the prompt is the point
    assert prompts.pop() == FILE[CURSOR:]  # `infill fill` keeps the whole window
