"""`infill fill` through Click's CliRunner: every exit code, every bad input, output modes, filter mode."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from fixtures_cli import fake_model, unreadable_file

from infill import api
from infill.cli import main
from infill.commands.fill import FillRequest, run_fill
from infill.core import pipeline
from infill.errors import ModelError
from infill.models.registry import register, unregister
from infill.spans import Span

SOURCE = 'def f(x):\n    """Double x."""\n    return 0\n\n\ndef g():\n    pass\n'
FILL = "return x * 2"


@pytest.fixture
def model() -> Iterator[str]:
    with fake_model([FILL], name="fake-cli"):
        yield "fake-cli"


def run(args: list[str], input: str | bytes | None = None) -> Result:
    return CliRunner().invoke(main, ["fill", *args], input=input)


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return p


# --- success paths ------------------------------------------------------------------------------------------


def test_in_place_write_keeps_mode(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    os.chmod(p, 0o640)
    r = run([str(p), "--function", "f", "--model", model])
    assert r.exit_code == 0, r.stderr
    assert p.read_text() == SOURCE.replace("return 0", FILL)
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert not [x for x in os.listdir(tmp_path) if x.endswith(".infill-tmp")]


def test_diff_exit_1_and_file_untouched(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    r = run([str(p), "--span", "3:3", "--model", model, "--diff"])
    assert r.exit_code == 1
    assert "-    return 0\n+    return x * 2\n" in r.stdout
    assert r.stdout.startswith("--- a/")
    assert p.read_text() == SOURCE


def test_diff_without_change_exits_0(tmp_path: Path) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    with fake_model(["return 0"], name="fake-same"):
        r = run([str(p), "--span", "3:3", "--model", "fake-same", "--diff"])
    assert r.exit_code == 0, r.stderr
    assert r.stdout == ""


def test_check_exit_1_writes_nothing(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    r = run([str(p), "--span", "3:3", "--model", model, "--check"])
    assert r.exit_code == 1
    assert "would fill" in r.stderr
    assert p.read_text() == SOURCE


def test_output_path(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    out = tmp_path / "b.py"
    r = run([str(p), "--span", "3:3", "--model", model, "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    assert p.read_text() == SOURCE
    assert out.read_text() == SOURCE.replace("return 0", FILL)


def test_json_format(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    r = run([str(p), "--span", "3:3", "--model", model, "--format", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"file", "edits", "stats", "confidence", "warnings"}
    assert doc["confidence"] is None  # a model without a calibration file
    assert doc["file"] == str(p)
    (edit,) = doc["edits"]
    assert set(edit) == {"start_line", "end_line", "start_byte", "end_byte", "text", "score"}
    assert (edit["start_line"], edit["end_line"]) == (3, 3)
    data = SOURCE.encode()
    assert data[edit["start_byte"] : edit["end_byte"]] == b"    return 0"
    assert edit["text"] == "    " + FILL
    assert edit["score"] <= 0.0
    assert set(doc["stats"]) == {"decoder", "model", "nfe", "tokens", "seconds", "substituted"}
    assert doc["stats"]["decoder"] == "beam" and doc["stats"]["model"] == model  # the tool's default
    assert doc["stats"]["substituted"] is None  # the decoder asked for is the one that ran
    assert doc["stats"]["nfe"] >= 1
    assert p.read_text() == SOURCE  # json reports edits; the plugin applies them


def test_json_stdin_file_is_null(model: str) -> None:
    r = run(["-", "--stdin-filename", "a.py", "--span", "3:3", "--model", model, "--format", "json"], SOURCE)
    assert r.exit_code == 0
    assert json.loads(r.stdout)["file"] is None


def test_filter_mode_stdout_only_text(model: str) -> None:
    r = run(["-", "--stdin-filename", "a.py", "--span", "3:3", "--model", model, "--stats"], SOURCE)
    assert r.exit_code == 0
    assert r.stdout == SOURCE.replace("return 0", FILL)
    assert r.stderr == ""  # filter mode: nothing on stderr unless -v


def test_filter_mode_verbose_talks(model: str) -> None:
    r = run(["-", "--stdin-filename", "a.py", "--span", "3:3", "--model", model, "-v", "--stats"], SOURCE)
    assert r.exit_code == 0
    assert "stats: decoder=beam" in r.stderr and "nfe=" in r.stderr


def test_stats_on_stderr(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    r = run([str(p), "--span", "3:3", "--model", model, "--stats", "--diff"])
    assert "stats: decoder=beam" in r.stderr and "tokens/nfe=" in r.stderr


def test_quiet(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    r = run([str(p), "--span", "3:3", "--model", model, "-q", "--stats"])
    assert r.exit_code == 0 and r.stderr == ""


def test_crlf_preserved(tmp_path: Path, model: str) -> None:
    src = SOURCE.replace("\n", "\r\n").encode()
    p = write(tmp_path, "a.py", src)
    with fake_model(["return x\nx * 2"], name="fake-crlf"):
        r = run([str(p), "--span", "3:4", "--model", "fake-crlf"])
    assert r.exit_code == 0, r.stderr
    out = p.read_bytes()
    assert out == src.replace(b"    return 0\r\n\r\n", b"    return x\r\n    x * 2\r\n")
    assert b"\n" not in out.replace(b"\r\n", b"")


def test_one_selected_line_gets_one_line_back(tmp_path: Path) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    with fake_model(["\nreturn x * 2\nprint(x)\n"], name="fake-lines"):
        one = run([str(p), "--span", "3", "--model", "fake-lines", "--diff", "--tokens", "40"])
        two = run([str(p), "--span", "3:4", "--model", "fake-lines", "--diff", "--tokens", "40"])
    assert one.exit_code == 1 and two.exit_code == 1, (one.stderr, two.stderr)
    assert "+    return x * 2\n" in one.stdout and "print(x)" not in one.stdout
    assert "+    return x * 2\n" in two.stdout and "+    print(x)\n" in two.stdout
    assert p.read_text() == SOURCE  # --diff writes nothing


def test_crlf_preserved_in_filter_mode(model: str) -> None:
    src = SOURCE.replace("\n", "\r\n")
    r = run(["-", "--stdin-filename", "a.py", "--span", "3:3", "--model", model], src.encode())
    assert r.exit_code == 0
    assert r.stdout_bytes == src.replace("return 0", FILL).encode()


def test_utf8_preserved(tmp_path: Path) -> None:
    src = "# héllo ☃\nx = '<FILL>'  # naïve\n"
    p = write(tmp_path, "u.py", src)
    with fake_model(["日本"], name="fake-utf8"):
        r = run([str(p), "--marker", "<FILL>", "--model", "fake-utf8"])
    assert r.exit_code == 0, r.stderr
    assert p.read_text(encoding="utf-8") == src.replace("<FILL>", "日本")


def test_candidates_ranked_by_likelihood(tmp_path: Path) -> None:
    p = write(tmp_path, "a.txt", "x = <FILL>\n")
    with fake_model([[("rare", 0.1), ("common", 0.9)]], name="fake-n"):
        r = run([str(p), "--marker", "<FILL>", "--model", "fake-n", "-n", "6", "--format", "json"])
    doc = json.loads(r.stdout)
    assert doc["edits"][0]["text"] == "common"


def test_seed_is_fixed_by_default(tmp_path: Path) -> None:
    p = write(tmp_path, "a.txt", "x = <FILL>\n")
    outs = set()
    with fake_model([[("a1", 0.5), ("b2", 0.5)]], name="fake-seed"):
        for _ in range(3):
            args = [str(p), "--marker", "<FILL>", "--model", "fake-seed", "--temperature", "1", "--format", "json"]
            doc = json.loads(run(args).stdout)
            outs.add(json.dumps(doc["edits"]))
        other = {run([*args, "--seed", str(s)]).stdout for s in range(8)}
    assert len(outs) == 1
    assert len({json.loads(o)["edits"][0]["text"] for o in other}) == 2


def test_unchanged_file_not_rewritten(tmp_path: Path) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    before = p.stat().st_mtime_ns
    with fake_model(["return 0"], name="fake-same"):
        r = run([str(p), "--span", "3:3", "--model", "fake-same"])
    assert r.exit_code == 0
    assert p.stat().st_mtime_ns == before


# --- bad input: one stderr line, documented exit code, file byte-identical ----------------------------------


def assert_refused(r: Result, code: int, needle: str, path: Path | None = None, before: bytes | None = None) -> None:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    assert needle in lines[0], lines[0]
    if path is not None and before is not None:
        assert path.read_bytes() == before


def test_missing_file(tmp_path: Path, model: str) -> None:
    assert_refused(run([str(tmp_path / "nope.py"), "--span", "1:1", "--model", model]), 2, "no such file")


def test_directory(tmp_path: Path, model: str) -> None:
    assert_refused(run([str(tmp_path), "--span", "1:1", "--model", model]), 2, "is a directory")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x00\x01\x02binary", "binary file"),
        (b"caf\xe9 = 1\n", "not UTF-8"),
        (b"", "empty"),
        (b"\n\n", "empty"),
    ],
)
def test_unusable_content(tmp_path: Path, model: str, content: bytes, needle: str) -> None:
    p = write(tmp_path, "a.py", content)
    assert_refused(run([str(p), "--span", "1:1", "--model", model]), 2, needle, p, content)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--span", "9:12"], "out of range"),
        (["--span", "0:1"], "out of range"),
        (["--span", "3:2"], "reversed"),
        (["--span", "1:3", "--span", "3:4"], "overlap"),
        (["--span", "1:99-1:100"], "column 99"),
        (["--span", "x:y"], "expected LINE"),
        (["--marker", "<NOPE>"], "marker not found"),
        (["--function", "nope"], "function 'nope' not found"),
        (["--class", "Nope"], "class 'Nope' not found"),
        (["--node", "bogus"], "no query capture named 'bogus'"),
        ([], "nothing selected"),
    ],
)
def test_bad_selection(tmp_path: Path, model: str, flags: list[str], needle: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    assert_refused(run([str(p), *flags, "--model", model]), 2, needle, p, SOURCE.encode())


def test_tree_sitter_selector_on_plain_text(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "notes.txt", SOURCE)
    assert_refused(run([str(p), "--function", "f", "--model", model]), 2, "plain text", p, SOURCE.encode())


def test_missing_grammar_extra(tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from infill import languages

    src = "fn one() -> i32 { 0 }\n"
    p = write(tmp_path, "lib.rs", src)
    monkeypatch.setitem(sys.modules, "tree_sitter_rust", None)  # import now raises ImportError
    languages.grammar.cache_clear()
    languages.queries.cache_clear()
    try:
        r = run([str(p), "--function", "one", "--model", model])
    finally:
        languages.grammar.cache_clear()
        languages.queries.cache_clear()
    assert_refused(r, 2, "[rust]'", p, src.encode())  # pip install '.[rust]' from the clone (infill.extras)


def test_unreadable_file(tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    unreadable_file(p, monkeypatch)
    try:
        assert_refused(run([str(p), "--span", "1:1", "--model", model]), 2, "permission denied")
    finally:
        os.chmod(p, 0o644)
    with open(p, "rb") as fh:
        assert fh.read() == SOURCE.encode()


def test_read_only_file(tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    os.chmod(p, 0o444)
    real_access = os.access
    if os.geteuid() == 0:  # root ignores mode bits; make access() report what a user would see
        monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == p else real_access(path, mode))
    try:
        assert_refused(run([str(p), "--span", "3:3", "--model", model]), 2, "read-only", p, SOURCE.encode())
        # --diff does not need to write, so a read-only file is fine
        assert run([str(p), "--span", "3:3", "--model", model, "--diff"]).exit_code == 1
    finally:
        os.chmod(p, 0o644)


def test_file_changed_during_run(tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    edited = SOURCE + "# edited by someone else\n"
    real = api.fill_text

    def fill_then_edit(*args: object, **kw: object) -> api.FillResult:
        result = real(*args, **kw)  # type: ignore[arg-type]
        p.write_text(edited)  # the user saves in their editor while we decode
        return result

    monkeypatch.setattr(pipeline, "fill_text", fill_then_edit)
    assert_refused(run([str(p), "--span", "3:3", "--model", model]), 123, "changed on disk", p, edited.encode())


def test_model_folder_missing(tmp_path: Path) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    r = run([str(p), "--span", "3:3", "--model", str(tmp_path / "no-such-model")])
    assert r.exit_code == 123, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: ")
    assert p.read_bytes() == SOURCE.encode()


def fill_with_failing_model(tmp_path: Path, error: Exception, name: str) -> tuple[Result, Path]:
    """`infill fill` of a one-line span with a model `name` whose loading raises `error`."""

    def failing(spec: object) -> object:
        raise error

    p = write(tmp_path, "a.py", SOURCE)
    register(name, failing)  # type: ignore[arg-type]
    api.clear_model_cache()
    try:
        return run([str(p), "--span", "3:3", "--model", name]), p
    finally:
        unregister(name)


def test_model_corrupt(tmp_path: Path) -> None:
    error = ModelError("model.safetensors is corrupt: header too large", path="/m")
    r, p = fill_with_failing_model(tmp_path, error, "fake-corrupt")
    assert_refused(r, 123, "corrupt", p, SOURCE.encode())


def test_backend_crash_is_internal_error(tmp_path: Path) -> None:
    def broken(spec: object) -> object:
        raise ZeroDivisionError("boom")

    p = write(tmp_path, "a.py", SOURCE)
    register("fake-broken", broken)  # type: ignore[arg-type]
    api.clear_model_cache()
    try:
        r = run([str(p), "--span", "3:3", "--model", "fake-broken"])
        rv = run([str(p), "--span", "3:3", "--model", "fake-broken", "-v"])
    finally:
        unregister("fake-broken")
    assert_refused(r, 123, "internal error: ZeroDivisionError: boom", p, SOURCE.encode())
    assert "Traceback" in rv.stderr


@pytest.mark.parametrize(
    ("error", "needle"),
    [
        (ZeroDivisionError("\nboom\nat step 3"), "internal error: ZeroDivisionError: boom"),
        (ValueError("\nshape mismatch: [2, 3]\nvs [3, 2]"), "cannot load model 'fake-broken-lines': ValueError: shape"),
    ],
)
def test_error_messages_starting_with_a_line_break_keep_their_text(
    tmp_path: Path, error: Exception, needle: str
) -> None:
    """Messages that span lines (torch and numpy errors quote tensors) give their first non-blank line."""
    r, p = fill_with_failing_model(tmp_path, error, "fake-broken-lines")
    assert_refused(r, 123, needle, p, SOURCE.encode())


def test_usage_error_exit_2(model: str) -> None:
    r = run(["a.py", "--decoder", "nope"])
    assert r.exit_code == 2
    r = run(["a.py", "--tokens", "0"])
    assert r.exit_code == 2


def test_blockdiff_decoder_on_asarm_model(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    assert_refused(run([str(p), "--span", "3:3", "--model", model, "--decoder", "s2d2"]), 2, "block-diffusion")


def test_filter_mode_echoes_input_on_failure(model: str) -> None:
    src = SOURCE.replace("\n", "\r\n")
    r = run(["-", "--stdin-filename", "a.py", "--span", "99:100", "--model", model], src.encode())
    assert r.exit_code == 2
    assert r.stdout_bytes == src.encode()
    assert r.stderr == ""
    rv = run(["-", "--stdin-filename", "a.py", "--span", "99:100", "--model", model, "-v"], src.encode())
    assert rv.stdout_bytes == src.encode() and "out of range" in rv.stderr


def test_filter_mode_echoes_non_utf8(model: str) -> None:
    raw = b"caf\xe9\n"
    r = run(["-", "--span", "1:1", "--model", model], raw)
    assert r.exit_code == 2
    assert r.stdout_bytes == raw


def test_long_input_truncates_context_not_span(tmp_path: Path) -> None:
    body = "".join(f"x{i} = {i}\n" for i in range(400))
    src = body + "y = <FILL>\n" + body
    p = write(tmp_path, "long.py", src)
    with fake_model(["42"], name="fake-short", max_length=256) as m:
        r = run([str(p), "--marker", "<FILL>", "--model", "fake-short", "-v"])
        assert r.exit_code == 0, r.stderr
        assert "context truncated" in r.stderr
        assert m.forwards > 0
    assert p.read_text() == src.replace("<FILL>", "42")


def test_tokens_larger_than_context(tmp_path: Path) -> None:
    p = write(tmp_path, "a.txt", "x = <FILL>\n")
    with fake_model(["1"], name="fake-short", max_length=64):
        r = run([str(p), "--marker", "<FILL>", "--model", "fake-short", "--tokens", "500"])
    assert_refused(r, 2, "does not fit")


# --- the request / run_fill hook used by the daemon ---------------------------------------------------------


def test_request_round_trips_through_json(tmp_path: Path, model: str) -> None:
    p = write(tmp_path, "a.py", SOURCE)
    from infill.spans import Selection

    req = FillRequest(file=str(p), selections=(Selection("span", "3:3"),), diff=True)
    req = FillRequest(**{**req.__dict__, "model": api.ModelSpec(name=model)})
    wire = json.loads(json.dumps(req.to_dict()))
    assert FillRequest.from_dict(wire) == req
    out = run_fill(wire)
    assert out["exit_code"] == 1
    assert "+    return x * 2" in out["stdout"]
    assert out["result"]["edits"][0]["start_line"] == 3
    json.dumps(out)  # the whole answer is JSON-serialisable


def test_run_fill_rejects_unknown_fields() -> None:
    out = run_fill({"file": "-", "selections": [], "bogus": 1})
    assert out["exit_code"] == 2 and "bogus" in out["stderr"][0]


# --- block-diffusion models dispatch to blockfill.fill_middle -----------------------------------------------


def test_blockdiff_model_uses_fill_middle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from fixtures_cli import ByteTokenizer

    from infill.decoding.stats import DecodeStats
    from infill.models.registry import LoadedModel

    calls: list[tuple[str, str, int, str]] = []
    stops: list[Callable[[str], bool] | None] = []
    tok = ByteTokenizer()

    def fill_middle(
        loaded: object,
        prefix: list[int],
        suffix: list[int],
        max_tokens: int,
        cfg: object,
        gen: object,
        on_step: object = None,
        done: Callable[[str], bool] | None = None,
        start: list[int] | tuple[int, ...] = (),
    ) -> object:  # the planner's token ids arrive as they are (no second tokenization)
        assert not start  # the byte tokenizer splits everywhere: nothing to heal
        calls.append((tok.decode(prefix), tok.decode(suffix), max_tokens, cfg.decoder))  # type: ignore[attr-defined]
        stops.append(done)
        return "return x * 2", DecodeStats(decoder="s2d2", nfe=3, tokens=12)

    module = types.ModuleType("infill.decoding.blockfill")
    module.fill_middle = fill_middle  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "infill.decoding.blockfill", module)
    bd = types.SimpleNamespace(max_length=512, mask_id=1, pad_id=None, bos_id=None)
    register("fake-bd", lambda spec: LoadedModel("fake-bd", "blockdiff", bd, ByteTokenizer()))
    api.clear_model_cache()
    p = write(tmp_path, "a.py", SOURCE)
    try:
        r = run([str(p), "--span", "3:3", "--model", "fake-bd", "--format", "json"])
        bad = run([str(p), "--span", "3:3", "--model", "fake-bd", "--decoder", "sequential"])
    finally:
        unregister("fake-bd")
        api.clear_model_cache()
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["edits"][0]["text"] == "    " + FILL
    assert doc["stats"]["nfe"] == 3 and doc["stats"]["decoder"] == "s2d2"
    ((prefix, suffix, _, decoder),) = calls
    assert prefix == SOURCE[: SOURCE.index("    return 0")] and suffix.startswith("\n\n\ndef g")
    assert decoder == "s2d2"  # the tool's default decoder (beam) maps to S2D2 on block-diffusion models
    ((done,),) = [stops]  # `--span N` is one line: decoding may stop once the line is written, not before
    assert done is not None and not done("\n    return x") and done("\n    return x\n")
    assert bad.exit_code == 2 and "any-subset" in bad.stderr


BRANCHES = "def f(x):\n    if x:\n        return 1\n{line}\n    return 2\n"


@pytest.mark.parametrize("form", ["marker", "span"])
def test_a_marker_line_is_checked_like_an_emptied_line(tmp_path: Path, form: str) -> None:
    """`else:` before a statement at the same indentation does not compile: refused whether the line is selected
    with --span N:N or holds a <FILL> marker (which does not compile either, so it must not lower the bar)."""
    line, where = ("    <FILL>", ["--marker", "<FILL>"]) if form == "marker" else ("", ["--span", "4:4"])
    src = BRANCHES.format(line=line)
    p = write(tmp_path, "b.py", src)
    with fake_model(["    else:"], name="fake-else"):
        bad = run([str(p), *where, "--model", "fake-else"])
    assert bad.exit_code == 3, bad.stderr
    assert "does not compile" in bad.stderr and p.read_text() == src
    with fake_model(["    y = 2"], name="fake-ok"):
        good = run([str(p), *where, "--model", "fake-ok"])
    assert good.exit_code == 0, good.stderr
    assert p.read_text() == BRANCHES.format(line="    y = 2")


@pytest.mark.parametrize("local", [False, True])
def test_syntax_check_judges_a_placeholder_as_removed(monkeypatch: pytest.MonkeyPatch, local: bool) -> None:
    from infill.core import checks

    if local:  # a large input is checked block by block: the placeholder inside the block is judged removed too
        monkeypatch.setattr(checks, "LOCAL_CHECK_BYTES", 16)

    data = BRANCHES.format(line="    <FILL>").encode()
    start = data.index(b"    <FILL>")
    edit = type("E", (), {"start_byte": start, "end_byte": start + 10, "text": "    else:"})()
    patched = data.replace(b"    <FILL>", b"    else:")
    marker = Span(start, start + 10, "--marker <FILL>", placeholder=True, one_line=True)
    assert checks.SyntaxCheck("python", data, [marker]).rejection(patched, [edit]) == "does not compile"
    # without the span the input never compiled, so only tree-sitter's error count held `else:` back
    assert checks.SyntaxCheck("python", data).rejection(patched, [edit]) is None


def test_an_empty_fill_chosen_over_rejected_ones_is_reported(tmp_path: Path) -> None:
    """The user asked for a line; when only the empty fill passes the syntax check, the file is unchanged and
    stderr says why (it is not silently "filled")."""
    src = BRANCHES.format(line="")
    p = write(tmp_path, "b.py", src)
    args = [str(p), "--span", "4:4", "-n", "2", "--temperature", "1"]
    with fake_model([[("    else:", 0.7), ("", 0.3)]], name="fake-empty"):
        r = run([*args, "--model", "fake-empty"])
    assert r.exit_code == 0, r.stderr
    assert p.read_text() == src
    assert "--span 4:4: the only valid fill is empty" in r.stderr
    with fake_model([""], name="fake-nothing"):  # nothing was rejected: the empty fill is the model's answer
        quiet = run([*args, "--model", "fake-nothing"])
    assert quiet.exit_code == 0 and "only valid fill" not in quiet.stderr


@pytest.mark.parametrize("selector", [["--function", "sub"], ["--function", "K.m"], ["--node", "function.body"]])
def test_a_python_body_fill_ends_where_the_body_does(tmp_path: Path, selector: list[str]) -> None:
    """A model that writes on past the body (a dedented line: the next definition) had that code written into
    the body, where it became a second definition. The fill now ends at its first line indented no deeper than
    the definition. The control: the same fill in a --span over the same lines keeps all of it."""
    source = "def sub(a, b):\n    x = 1\n    return x\n\n\nclass K:\n    def m(self, x):\n        return x\n"
    fill = "{indent}return a - b\n\n\ndef extra():\n    pass\n"
    p = write(tmp_path, "b.py", source)
    indent = "        " if selector[1] == "K.m" else "    "
    with fake_model([fill.format(indent=indent)] * 2, name="fake-body"):
        r = run([str(p), *selector, "--model", "fake-body", "--no-retrieve", "--tokens", "64", "--diff"])
    assert r.exit_code == 1, r.stderr
    assert "extra" not in r.stdout and f"+{indent}return a - b" in r.stdout, r.stdout
    with fake_model([fill.format(indent="    ")], name="fake-body"):
        r = run([str(p), "--span", "2:3", "--model", "fake-body", "--no-retrieve", "--tokens", "64", "--diff"])
    assert r.exit_code == 1 and "+def extra():" in r.stdout, r.stdout


@pytest.mark.parametrize(
    ("source", "written", "filled"),
    [
        ("def g():\n\treturn 1\n\n\ndef f():\n\t\n", "    return 2", "\treturn 2"),
        ("def g():\n    return 1\n\n\ndef f():\n    \n", "\treturn 2", "    return 2"),
    ],
)
def test_a_fill_is_indented_as_the_file_is_with_tabs_or_spaces(
    tmp_path: Path, source: str, written: str, filled: str
) -> None:
    """A model that indents with spaces, filling the body of a function in a file indented with tabs, kept its
    spaces (any deeper indentation after `def f():` is valid): the file, and an editor's ghost text accepted
    on a tab-indented line (the server fills the same way), then mixed tabs and spaces."""
    p = tmp_path / "tabs.py"
    p.write_text(source)
    with fake_model([written], name="fake-tabs"):
        r = CliRunner().invoke(main, ["fill", str(p), "--span", "6", "--model", "fake-tabs"])
    assert r.exit_code == 0, r.output
    assert p.read_text() == source.rsplit("\n", 2)[0] + "\n" + filled + "\n"
