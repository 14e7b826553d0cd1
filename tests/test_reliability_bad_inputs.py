"""Never make a file worse, systematically: bad and edge inputs, one table. For every case the command exits with
the documented code, says so in exactly one stderr line, and leaves every file byte for byte as it was (no temporary
files either). Editor-filter cases echo their input unchanged on stdout instead.

Exit codes: 2 usage or input error, 3 no valid fill (nothing written), 123 model or internal error.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_cli import fake_model, unreadable_file
from fixtures_doc import FakeFiller

from infill import api
from infill.cli import main
from infill.core import cache, pipeline
from infill.errors import ModelError
from infill.models.registry import register, unregister

SOURCE = b'def f(x):\n    """Double x."""\n    return 0\n\n\nclass Stack:\n    pass\n'
BOM = b"\xef\xbb\xbf"
GOOD, BAD = "fake-good", "fake-unparseable"  # fill "x = 1"; fill an unterminated string
CJK = (  # CJK and emoji in names, strings and comments: a fill that breaks it must not be written either
    '# 統計の関数 🎉\n\n\ndef 平均(値):\n    """平均値を返す 😀"""\n    return sum(値) / len(値)\n\n\n'
    "class Stack:\n    pass\n"
).encode()
STATS = b"".join(  # 21 lines: line 15 is `total += d * d` in a loop, lines 13-16 the loop and the line after it
    line + b"\n"
    for line in [
        b"import math",
        b"",
        b"",
        b"def mean(xs):",
        b"    return sum(xs) / len(xs)",
        b"",
        b"",
        b"def variance(xs):",
        b'    """The population variance of xs."""',
        b"    m = mean(xs)",
        b"    total = 0.0",
        b"    n = len(xs)",
        b"    for x in xs:",
        b"        d = x - m",
        b"        total += d * d",
        b"    return total / n",
        b"",
        b"",
        b"def std(xs):",
        b"    return math.sqrt(variance(xs))",
        b"",
    ]
)
TOKENIZER = str(Path(__file__).resolve().parent.parent / "infill" / "weights" / "default" / "tokenizer.json")
HUGE = b"".join(b"def f%d(x):\n    return x + %d\n\n\n" % (i, i) for i in range(60_000))  # 1.9 MB

Setup = Callable[[Path, pytest.MonkeyPatch], None]


@dataclass(frozen=True)
class Bad:
    id: str
    args: list[str]  # after the command; {f} is the input file, {d} the test's folder
    code: int
    needle: str  # in the one stderr line
    content: bytes | None = SOURCE  # the input file's bytes (None: no file)
    name: str = "a.py"
    setup: Setup | None = None
    stdin: bytes | None = None  # the input on stdin (FILE is -)
    echo: bool = True  # with stdin: the editor filter, whose stdout must be the input unchanged
    command: str = "fill"
    extra: dict[str, bytes] = field(default_factory=dict)  # other files in the folder
    others: dict[str, bytes | None] = field(default_factory=dict)  # what someone else wrote (None: deleted)


# --- setups -----------------------------------------------------------------------------------------------------


def symlink_loop(d: Path, mp: pytest.MonkeyPatch) -> None:
    (d / "loop.py").symlink_to(d / "loop.py")


def fifo(d: Path, mp: pytest.MonkeyPatch) -> None:
    os.mkfifo(d / "pipe.py")


def unreadable(d: Path, mp: pytest.MonkeyPatch) -> None:
    unreadable_file(d / "a.py", mp)


def read_only_file(d: Path, mp: pytest.MonkeyPatch) -> None:
    (d / "a.py").chmod(0o444)


def read_only_folder(d: Path, mp: pytest.MonkeyPatch) -> None:
    d.chmod(0o555)


def read_only_subfolder(d: Path, mp: pytest.MonkeyPatch) -> None:
    (d / "ro").mkdir()
    (d / "ro").chmod(0o555)


def changed_during_run(d: Path, mp: pytest.MonkeyPatch) -> None:
    real = api.fill_text

    def fill_then_edit(*args: object, **kw: object) -> api.FillResult:
        result = real(*args, **kw)  # type: ignore[arg-type]
        (d / "a.py").write_bytes(SOURCE + b"# saved meanwhile\n")
        return result

    mp.setattr(pipeline, "fill_text", fill_then_edit)


def deleted_during_run(d: Path, mp: pytest.MonkeyPatch) -> None:
    real = api.fill_text

    def fill_then_delete(*args: object, **kw: object) -> api.FillResult:
        result = real(*args, **kw)  # type: ignore[arg-type]
        (d / "a.py").unlink()
        return result

    mp.setattr(pipeline, "fill_text", fill_then_delete)


def no_rust_grammar(d: Path, mp: pytest.MonkeyPatch) -> None:
    from infill import languages

    mp.setitem(sys.modules, "tree_sitter_rust", None)  # `import tree_sitter_rust` now fails
    languages.grammar.cache_clear()
    languages.queries.cache_clear()


def corrupt_model_folder(d: Path, mp: pytest.MonkeyPatch) -> None:
    (d / "model").mkdir()
    (d / "model" / "config.json").write_text("{ not json")
    (d / "model" / "model.safetensors").write_bytes(b"\x00garbage")


def broken_backend(d: Path, mp: pytest.MonkeyPatch) -> None:
    def crash(spec: object) -> object:
        raise ZeroDivisionError("boom")

    register("fake-crash", crash)  # type: ignore[arg-type]
    mp.setattr(cache, "SHARED", cache.ModelCache())


def corrupt_registered_model(d: Path, mp: pytest.MonkeyPatch) -> None:
    def corrupt(spec: object) -> object:
        raise ModelError("model.safetensors is corrupt: header too large")

    register("fake-corrupt", corrupt)  # type: ignore[arg-type]


def big_context(d: Path, mp: pytest.MonkeyPatch) -> None:
    from infill import options

    mp.setattr(options, "MAX_CONTEXT_BYTES", 1000)
    (d / "ctx.py").write_bytes(b"x = 1\n" * 200)


def env(name: str, value: str) -> Setup:
    def setup(d: Path, mp: pytest.MonkeyPatch) -> None:
        mp.setenv(name, value)

    return setup


def empty_corpus(d: Path, mp: pytest.MonkeyPatch) -> None:
    from fixtures_train import write_corpus

    write_corpus(d / "corpus", [], ["y = 2\n"])


def corpus_without_heldout(d: Path, mp: pytest.MonkeyPatch) -> None:
    from fixtures_train import sample_texts, write_corpus

    write_corpus(d / "corpus", sample_texts(3), [])


def corpus_and_folder(d: Path, mp: pytest.MonkeyPatch) -> None:
    corpus_without_heldout(d, mp)
    (d / "ro").mkdir()


def tokenizer_without_specials(d: Path, mp: pytest.MonkeyPatch) -> None:
    """{d}/t.json: a tokenizer, but not one of `infill train tokenizer` (no <pad>, <mask>, <bos> at ids 0-2)."""
    from tokenizers import Tokenizer, models

    corpus_without_heldout(d, mp)
    Tokenizer(models.BPE()).save(str(d / "t.json"))


class RunsCode:
    """Unpickling this runs a command (here: it creates the file `pwned`, which the table's snapshot would show)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.folder / 'pwned'}",))


def crafted(checkpoint: str, block_model: bool = False, legacy: bool = False) -> Setup:
    """A run folder {d}/run whose checkpoint would run code if unpickled; with `block_model`, the tiny
    block-diffusion model {d}/base and corpus {d}/corpus the PTP and SSMD trainers read before it; with `legacy`,
    a plain pickle (torch warned about its protocol on stderr before refusing it)."""

    def setup(d: Path, mp: pytest.MonkeyPatch) -> None:
        import torch

        if block_model:
            from fixtures_train import tiny_block_model_and_corpus

            tiny_block_model_and_corpus(d, "base")
        (d / "run").mkdir()
        if legacy:
            import pickle

            (d / "run" / checkpoint).write_bytes(pickle.dumps({"model": RunsCode(d)}, protocol=4))
            return
        torch.save({"model": RunsCode(d)}, d / "run" / checkpoint)

    return setup


# --- the table ----------------------------------------------------------------------------------------------------

M = ["--model", GOOD]
CASES = [
    # unusable files
    Bad("missing-file", ["{d}/nope.py", "--span", "1", *M], 2, "no such file"),
    Bad("directory", ["{d}", "--span", "1", *M], 2, "is a directory"),
    Bad("binary", ["{f}", "--span", "1", *M], 2, "binary file", content=b"\x00\x01\x02bin\n"),
    Bad("non-utf8", ["{f}", "--span", "1", *M], 2, "not UTF-8", content=b"caf\xe9 = 1\n"),
    Bad("empty", ["{f}", "--span", "1", *M], 2, "empty", content=b""),
    Bad("whitespace-only", ["{f}", "--span", "1", *M], 2, "empty", content=b"  \n\t\r\n"),
    Bad("bom-only", ["{f}", "--span", "1", *M], 2, "empty", content=BOM),
    Bad("symlink-loop", ["{d}/loop.py", "--span", "1", *M], 2, "cannot access", setup=symlink_loop),
    Bad("fifo", ["{d}/pipe.py", "--span", "1", *M], 2, "not a regular file", setup=fifo),
    Bad("unreadable", ["{f}", "--span", "1", *M], 2, "permission denied", setup=unreadable),
    # selections
    Bad("span-past-the-end", ["{f}", "--span", "9:12", *M], 2, "out of range"),
    Bad("span-line-zero", ["{f}", "--span", "0:1", *M], 2, "out of range"),
    Bad("span-reversed", ["{f}", "--span", "3:2", *M], 2, "reversed"),
    Bad("spans-overlap", ["{f}", "--span", "1:3", "--span", "3:4", *M], 2, "overlap"),
    Bad("column-out-of-range", ["{f}", "--span", "1:99-1:100", *M], 2, "column 99"),
    Bad("columns-reversed", ["{f}", "--span", "3:9-3:2", *M], 2, "reversed"),
    Bad("span-garbage", ["{f}", "--span", "x:y", *M], 2, "expected LINE"),
    Bad("span-negative", ["{f}", "--span=-1", *M], 2, "expected LINE"),
    Bad("marker-not-found", ["{f}", "--marker", "<NOPE>", *M], 2, "marker not found"),
    Bad("marker-empty", ["{f}", "--marker", "", *M], 2, "'--marker': is empty"),
    Bad("function-not-found", ["{f}", "--function", "nope", *M], 2, "function 'nope' not found"),
    Bad("class-not-found", ["{f}", "--class", "Nope", *M], 2, "class 'Nope' not found"),
    Bad("node-kind-unknown", ["{f}", "--node", "bogus", *M], 2, "no query capture named 'bogus'"),
    Bad("nothing-selected", ["{f}", *M], 2, "nothing selected"),
    Bad("selector-on-plain-text", ["{f}", "--function", "f", *M], 2, "plain text", name="notes.txt"),
    Bad("unknown-language", ["-", "--class", "Stack", "--format", "json", *M], 2, "language is unknown",
        stdin=SOURCE, echo=False),
    Bad("grammar-extra-missing", ["{f}", "--function", "one", *M], 2, "[rust]'", name="lib.rs",
        content=b"fn one() -> i32 { 0 }\n", setup=no_rust_grammar),
    # models
    Bad("model-folder-missing", ["{f}", "--span", "3", "--model", "{d}/no-such-model"], 123, "no-such-model"),
    Bad("model-folder-corrupt", ["{f}", "--span", "3", "--model", "{d}/model"], 123, "model",
        setup=corrupt_model_folder),
    Bad("model-corrupt", ["{f}", "--span", "3", "--model", "fake-corrupt"], 123, "corrupt",
        setup=corrupt_registered_model),
    Bad("model-backend-crash", ["{f}", "--span", "3", "--model", "fake-crash"], 123, "internal error",
        setup=broken_backend),
    Bad("decoder-for-other-models", ["{f}", "--span", "3", "--decoder", "s2d2", *M], 2, "block-diffusion"),
    # the file changes under us
    Bad("changed-during-run", ["{f}", "--span", "3", *M], 123, "changed on disk", setup=changed_during_run,
        others={"a.py": SOURCE + b"# saved meanwhile\n"}),
    Bad("deleted-during-run", ["{f}", "--span", "3", *M], 123, "disappeared", setup=deleted_during_run,
        others={"a.py": None}),
    # permissions
    Bad("read-only-file", ["{f}", "--span", "3", *M], 2, "file is read-only", setup=read_only_file),
    Bad("read-only-folder", ["{f}", "--span", "3", *M], 2, "folder is read-only", setup=read_only_folder),
    Bad("output-folder-missing", ["{f}", "--span", "3", "-o", "{d}/no/out.py", *M], 2, "does not exist"),
    Bad("output-folder-read-only", ["{f}", "--span", "3", "-o", "{d}/ro/out.py", *M], 2, "read-only",
        setup=read_only_subfolder),
    # huge inputs
    Bad("huge-file-marker-missing", ["{f}", "--marker", "<FILL>", *M], 2, "marker not found", content=HUGE),
    Bad("huge-file-span-out-of-range", ["{f}", "--span", "240001", *M], 2, "out of range", content=HUGE),
    Bad("huge-single-line-unparseable", ["{f}", "--span", "1:5-1:6", "--model", BAD], 3, "no valid fill",
        content=b"x = [" + b"1, " * 350_000 + b"]\n"),
    Bad("tokens-beyond-the-context", ["{f}", "--span", "3", "--tokens", "100000", *M], 2, "does not fit"),
    # bad numbers
    Bad("tokens-zero", ["{f}", "--span", "3", "--tokens", "0", *M], 2, "--tokens"),
    Bad("tokens-negative", ["{f}", "--span", "3", "--tokens=-4", *M], 2, "--tokens"),
    Bad("tokens-not-a-number", ["{f}", "--span", "3", "--tokens", "ten", *M], 2, "--tokens"),
    Bad("temperature-nan", ["{f}", "--span", "3", "--temperature", "nan", *M], 2, "finite"),
    Bad("temperature-inf", ["{f}", "--span", "3", "--temperature", "inf", *M], 2, "finite"),
    Bad("temperature-negative", ["{f}", "--span", "3", "--temperature=-1", *M], 2, "--temperature"),
    Bad("top-p-zero", ["{f}", "--span", "3", "--top-p", "0", *M], 2, "--top-p"),
    Bad("top-p-above-one", ["{f}", "--span", "3", "--top-p", "1.5", *M], 2, "--top-p"),
    Bad("k-zero", ["{f}", "--span", "3", "-k", "0", *M], 2, "'-k'"),
    Bad("candidates-zero", ["{f}", "--span", "3", "-n", "0", *M], 2, "--candidates"),
    Bad("seed-too-large", ["{f}", "--span", "3", "--seed", str(10**30), *M], 2, "--seed"),
    Bad("max-resample-negative", ["{f}", "--span", "3", "--max-resample=-1", *M], 2, "--max-resample"),
    # usage
    Bad("unknown-option", ["{f}", "--span", "3", "--bogus", *M], 2, "No such option"),
    Bad("option-without-value", ["{f}", *M, "--span"], 2, "requires an argument"),
    Bad("unknown-decoder", ["{f}", "--span", "3", "--decoder", "nope", *M], 2, "--decoder"),
    # a fill that would break the file
    Bad("no-valid-fill", ["{f}", "--class", "Stack", "--model", BAD], 3, "no valid fill"),
    Bad("no-valid-fill-diff", ["{f}", "--class", "Stack", "--model", BAD, "--diff"], 3, "--class Stack"),
    Bad("no-valid-fill-cjk-emoji", ["{f}", "--span", "6", "--model", BAD], 3, "--span 6 (line 6)", content=CJK),
    Bad("no-valid-fill-cjk-emoji-filter", ["-", "--stdin-filename", "a.py", "--span", "6", "-v", "--model", BAD], 3,
        "no valid fill", stdin=CJK),
    Bad("no-valid-fill-span-15", ["{f}", "--span", "15", "--model", BAD], 3, "--span 15 (line 15)", content=STATS),
    Bad("no-valid-fill-multi-line-span", ["{f}", "--span", "13:16", "--model", BAD], 3, "--span 13:16 (line",
        content=STATS),
    # the editor filter: the input comes back unchanged (exit code as above; -v prints the one line)
    Bad("filter-bad-span", ["-", "--stdin-filename", "a.py", "--span", "99", "-v", *M], 2, "out of range",
        stdin=SOURCE),
    Bad("filter-non-utf8", ["-", "--span", "1", "-v", *M], 2, "not UTF-8", stdin=b"caf\xe9\r\n"),
    Bad("filter-usage-error", ["-", "--stdin-filename", "a.py", "--span", "3", "--tokens", "0", "-v", *M], 2,
        "--tokens", stdin=SOURCE.replace(b"\n", b"\r\n")),
    Bad("filter-temperature-nan", ["-", "--span", "3", "--temperature", "nan", "-v", *M], 2, "finite",
        stdin=SOURCE),
    Bad("filter-no-valid-fill", ["-", "--stdin-filename", "a.py", "--class", "Stack", "-v", "--model", BAD], 3,
        "no valid fill", stdin=SOURCE),
    Bad("filter-empty", ["-", "--span", "1", "-v", *M], 2, "empty", stdin=b"\n\n"),
    # infill docstrings
    Bad("docstrings-missing-path", ["{d}/nope.py"], 2, "no such file or folder", command="docstrings"),
    Bad("docstrings-unsupported-file", ["{f}"], 2, "unsupported file type", name="notes.txt",
        command="docstrings"),
    Bad("docstrings-non-utf8", ["{f}"], 2, "not UTF-8", content=b"def f():\n    return '\xe9'\n",
        command="docstrings"),
    Bad("docstrings-binary", ["{f}"], 2, "binary file", content=b"\x00def f(): pass\n", command="docstrings"),
    Bad("docstrings-read-only", ["{f}"], 2, "read-only", setup=read_only_file, command="docstrings"),
    Bad("docstrings-min-confidence-nan", ["{f}", "--min-confidence", "nan"], 2, "finite", command="docstrings"),
    Bad("docstrings-read-only-hint", ["{f}"], 2, "nothing was written (use --diff)", setup=read_only_file,
        command="docstrings"),
    Bad("docstrings-fifo", ["{d}/pipe.py"], 2, "not a regular file or folder", setup=fifo, command="docstrings"),
    # what the second sweep found: targets that are not regular files, unbounded work, environment variables
    Bad("output-fifo", ["{f}", "--span", "3", "-o", "{d}/pipe.py", *M], 2, "not a regular file", setup=fifo),
    Bad("output-folder", ["{f}", "--span", "3", "-o", "{d}", *M], 2, "is a directory"),
    Bad("json-with-output", ["{f}", "--span", "3", "--format", "json", "-o", "{d}/out.py", *M], 2,
        "cannot be combined with -o PATH"),
    Bad("context-fifo-never-read", ["{f}", "--span", "3", "--context", "{d}/pipe.py", *M], 2, "not a regular file",
        setup=fifo),
    Bad("context-too-large", ["{f}", "--span", "3", "--context", "{d}/ctx.py", *M], 2, "more than",
        setup=big_context),
    Bad("beam-too-wide", ["{f}", "--span", "3", "--beam", "100000", *M], 2, "--beam"),
    Bad("candidates-too-many", ["{f}", "--span", "3", "-n", "100000", *M], 2, "--candidates"),
    Bad("rescue-too-wide", ["{f}", "--span", "3", "--rescue-width", "9", *M], 2, "--rescue-width"),
    Bad("env-timeout-infinite", ["{f}", "--span", "3", *M], 2, "INFILL_DAEMON_TIMEOUT",
        setup=env("INFILL_DAEMON_TIMEOUT", "1e999")),
    Bad("env-switch-junk", ["{f}", "--span", "3", *M], 2, "INFILL_NO_DAEMON", setup=env("INFILL_NO_DAEMON", "2")),
    Bad("env-threads-too-many", ["{f}", "--span", "3", *M], 2, "INFILL_THREADS",
        setup=env("INFILL_THREADS", "100000")),
    Bad("no-valid-fill-names-the-file", ["{f}", "--class", "Stack", "--model", BAD], 3, "a.py: no valid fill"),
    Bad("no-valid-fill-json", ["{f}", "--class", "Stack", "--format", "json", "--model", BAD], 3, "no valid fill"),
    Bad("json-selector-not-found", ["{f}", "--function", "nope", "--format", "json", *M], 2, "not found"),
    # names, markers and paths holding line breaks: still one line (the breaks written as escapes)
    Bad("function-name-line-break", ["{f}", "--function", "f\nx", *M], 2, "--function f\\nx: function"),
    Bad("marker-line-break", ["{f}", "--marker", "<A\r\nB>", *M], 2, "--marker <A\\r\\nB>: marker not found"),
    Bad("file-name-line-break", ["{f}", "--span", "99", *M], 2, "new\\nline.py: --span 99", name="new\nline.py"),
    Bad("stdin-filename-line-break", ["-", "--stdin-filename", "x\u2028y.py", "--span", "99", "-v", *M], 2,
        "x\\u2028y.py: --span 99", stdin=SOURCE),
    # training: an empty corpus, and checkpoints that would run code if unpickled
    Bad("train-asarm-empty-corpus", ["asarm", "--corpus", "{d}/corpus", "--tokenizer", TOKENIZER, "--run-dir",
        "{d}/run", "--steps", "1"], 2, "no training text", setup=empty_corpus, content=None, command="train"),
    Bad("train-asarm-no-heldout", ["asarm", "--corpus", "{d}/corpus", "--tokenizer", TOKENIZER, "--run-dir",
        "{d}/run", "--steps", "1", "--layers", "1", "--d-model", "8", "--heads", "1", "--d-inner", "8"], 2,
        "no held-out text", setup=corpus_without_heldout, content=None, command="train"),
    Bad("train-tokenizer-empty-corpus", ["tokenizer", "--corpus", "{d}/corpus", "--out", "{d}/t.json"], 2,
        "no training text", setup=empty_corpus, content=None, command="train"),
    Bad("train-pack-empty-corpus", ["pack", "--corpus", "{d}/corpus", "--tokenizer", TOKENIZER, "--out",
        "{d}/p.npz"], 2, "no training text", setup=empty_corpus, content=None, command="train"),
    Bad("train-block-diffusion-empty-corpus", ["block-diffusion", "--data", "{d}/corpus", "--out", "{d}/o"], 2,
        "no training text", setup=empty_corpus, content=None, command="train"),
    # a --tokenizer that is not one, and a tokenizer --out that cannot be written (tokenizers' plain Exception)
    Bad("train-asarm-tokenizer-not-json", ["asarm", "--corpus", "{d}/corpus", "--tokenizer", "{d}/t.json",
        "--run-dir", "{d}/run", "--steps", "1"], 2, "t.json: not a tokenizer.json", setup=corpus_without_heldout,
        content=None, command="train", extra={"t.json": b"not json\n"}),
    Bad("train-asarm-tokenizer-without-specials", ["asarm", "--corpus", "{d}/corpus", "--tokenizer",
        "{d}/t.json", "--run-dir", "{d}/run", "--steps", "1"], 2, "not an AS-ARM tokenizer",
        setup=tokenizer_without_specials, content=None, command="train"),
    Bad("train-pack-tokenizer-not-json", ["pack", "--corpus", "{d}/corpus", "--tokenizer", "{d}/t.json", "--out",
        "{d}/p.npz"], 2, "t.json: not a tokenizer.json", setup=corpus_without_heldout, content=None,
        command="train", extra={"t.json": b"{}"}),
    Bad("train-block-diffusion-tokenizer-not-json", ["block-diffusion", "--data", "{d}/corpus", "--out", "{d}/o",
        "--tokenizer", "{d}/t.json", "--steps", "1"], 2, "t.json: not a tokenizer.json",
        setup=corpus_without_heldout, content=None, command="train", extra={"t.json": b"not json\n"}),
    Bad("train-tokenizer-out-is-a-folder", ["tokenizer", "--corpus", "{d}/corpus", "--out", "{d}/ro",
        "--vocab-size", "512"], 2, "is a directory", setup=corpus_and_folder, content=None, command="train"),
    Bad("train-export-crafted-checkpoint", ["export", "--run-dir", "{d}/run", "--tokenizer", TOKENIZER, "--corpus",
        "{d}", "--out", "{d}/out"], 2, "last.pt",
        setup=crafted("last.pt"), content=None, command="train"),
    Bad("train-export-legacy-pickle-checkpoint", ["export", "--run-dir", "{d}/run", "--tokenizer", TOKENIZER,
        "--corpus", "{d}", "--out", "{d}/out"], 2, "last.pt",
        setup=crafted("last.pt", legacy=True), content=None, command="train"),
    Bad("train-ssmd-resume-crafted-checkpoint", ["ssmd", "--model", "{d}/base", "--data", "{d}/corpus", "--out",
        "{d}/run", "--steps", "1", "--seq-len", "16", "--block-sizes", "4", "--batch-size", "2",
        "--eval-examples", "2"], 2, "checkpoint.pt",
        setup=crafted("checkpoint.pt", block_model=True), content=None, command="train"),
    Bad("train-ptp-resume-crafted-checkpoint", ["ptp", "--teacher", "{d}/base", "--corpus", "{d}/corpus", "--out",
        "{d}/run", "--resume", "--steps", "1"], 2, "ptp_checkpoint.pt",
        setup=crafted("ptp_checkpoint.pt", block_model=True), content=None, command="train"),
]  # fmt: skip


@pytest.fixture(autouse=True)
def fake_models() -> Iterator[None]:
    with fake_model(["x = 1"], name=GOOD), fake_model(['"""unterminated'], name=BAD):
        yield
    for name in ("fake-crash", "fake-corrupt"):
        unregister(name)
    api.clear_model_cache()


def snapshot(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every entry under `folder` (not following links): its bytes (None for folders, links, fifos) and mode."""
    out: dict[str, tuple[bytes | None, int]] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            st = path.lstat()
            data = None
            if stat.S_ISREG(st.st_mode) and (st.st_mode & stat.S_IRUSR or os.geteuid() == 0):
                with open(path, "rb") as fh:  # not Path.read_bytes, which a case may have patched
                    data = fh.read()
            out[str(path.relative_to(folder))] = (data, stat.S_IMODE(st.st_mode))
    return out


def test_the_table_has_at_least_40_cases() -> None:
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Bad, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    if case.content is not None:
        (folder / case.name).write_bytes(case.content)
    for name, data in case.extra.items():
        (folder / name).write_bytes(data)
    args = [a.replace("{f}", str(folder / case.name)).replace("{d}", str(folder)) for a in case.args]
    try:
        if case.setup is not None:
            case.setup(folder, monkeypatch)
        before = snapshot(folder)
        stdin = case.stdin
        obj = {"slot_filler": FakeFiller()} if case.command == "docstrings" else None
        r = CliRunner().invoke(main, [case.command, *args], input=stdin, obj=obj)
        after = snapshot(folder)
    finally:
        for root, dirs, _ in os.walk(tmp_path):  # let pytest clean up
            for name in dirs:
                Path(root, name).chmod(0o755)
        folder.chmod(0o755)
        if (folder / case.name).exists() and not (folder / case.name).is_symlink():
            (folder / case.name).chmod(0o644)
    assert r.exit_code == case.code, (r.exit_code, r.stdout, r.stderr, r.exception)
    lines = r.stderr.splitlines()
    if case.command == "train":  # a trainer reports its progress on stderr too; the error is the last line
        lines = lines[-1:] if [line for line in lines if "error: " in line] == lines[-1:] else lines
    assert len(lines) == 1, r.stderr  # one line, whatever went wrong
    assert lines[0].startswith("error: ") and case.needle in lines[0], lines[0]
    for name, data in case.others.items():  # what someone else did meanwhile is theirs to keep
        if data is None:
            del before[name]
        else:
            before[name] = (data, before[name][1])
    assert after == before  # every file byte for byte, every mode, and no temporary files
    if case.stdin is not None and case.echo:
        assert r.stdout_bytes == case.stdin  # the editor's buffer comes back unchanged
    elif "json" in case.args and case.command == "fill":  # --format json: one document for every outcome
        document = json.loads(r.stdout)
        assert document["edits"] == [] and document["error"]["exit_code"] == case.code, document
        assert case.needle in document["error"]["message"]
    else:
        assert r.stdout == ""
