"""GGUF files and Ollama's models through the CLI, as a user who runs llama.cpp or Ollama meets them
(docs/code-models.md): each family's tiny GGUF (infill.models.tiny_gguf, written from the same random weights as
its Hugging Face folder) loads with its FIM tokens and fills what the folder fills; Ollama's store is read by the
names `ollama list` shows and listed by `infill models`; calibration is per model and a model without one says
so; and each bad input is one stderr line, its documented exit code, and nothing written."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fixtures_cli import fill_in_process
from fixtures_llamacpp import network_gguf  # noqa: F401  (skips without the extra outside CI)

from infill import api
from infill.cli import main
from infill.config import ModelSpec
from infill.models.tiny_gguf import tiny_gguf
from tests.fixtures_serve import plugin_env

SOURCE = "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n"
FAMILIES = ("qwen", "starcoder", "codellama", "deepseek")


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family's tiny model as <family>.gguf, its folder beside it as <family>.gguf.folder."""
    base = tmp_path_factory.mktemp("gguf")
    return {family: tiny_gguf(base / f"{family}.gguf", family) for family in (*FAMILIES, "plain")}


def fill(tmp_path: Path, model: str, *args: str, span: str = "2", name: str = "m.py") -> tuple[int, str, str]:
    path = tmp_path / name
    path.write_text(SOURCE)
    r = fill_in_process(path, span, model, *args)
    return r.exit_code, r.stdout, r.stderr


def fill_fails(tmp_path: Path, model: str, *args: str, span: str = "2") -> tuple[int, str]:
    """`infill fill` that must fail: exactly one stderr line, and the file byte for byte as it went in."""
    code, _, stderr = fill(tmp_path, model, *args, span=span)
    assert (tmp_path / "m.py").read_text() == SOURCE
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return code, lines[0]


# --- what works -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_each_familys_gguf_fills_what_its_folder_fills(ggufs: dict[str, Path], tmp_path: Path, family: str) -> None:
    """Same weights, same FIM prompt (llama.cpp's tokenizer splits this text as the folder's does): the same diff,
    with the tool's defaults (beam 4, syntax check, retrieval)."""
    path = ggufs[family]
    args = ["--diff", "--allow-syntax-errors", "--precision", "fp32"]
    from_gguf = fill(tmp_path, str(path), *args)
    from_folder = fill(tmp_path, str(path.with_name(path.name + ".folder")), *args)
    assert from_gguf[0] == 1 and from_gguf[1] == from_folder[1] and from_gguf[1].startswith("---")
    loaded = api.load_model(ModelSpec(name=str(path)))
    assert loaded.kind == "ar" and loaded.info["fim"] == family and loaded.info["engine"] == "llama.cpp"
    leads = {"codellama": ["<s>"], "deepseek": ["<｜begin▁of▁sentence｜>"]}.get(family, [])
    assert [loaded.tokenizer.decode([t]) for t in loaded.model.lead] == leads  # type: ignore[union-attr]


def test_a_span_inside_a_word_is_healed_as_the_folder_heals_it(ggufs: dict[str, Path], tmp_path: Path) -> None:
    """The cursor after `to` of `total`: the prompt is backed up to the start of the word, and the fill must begin
    with `to` (token healing). The GGUF tokenizer could not say where its pre-tokens start, so a GGUF model was
    never healed and filled otherwise than its own folder (the same weights) did."""
    path = ggufs["qwen"]
    loaded = api.load_model(ModelSpec(name=str(path)))
    assert loaded.tokenizer.pretoken_start("    return to") == 10  # type: ignore[attr-defined]
    args = ["--format", "json", "--allow-syntax-errors", "--precision", "fp32", "--no-retrieve"]
    from_gguf = fill(tmp_path, str(path), *args, span="3:14-3:14")
    from_folder = fill(tmp_path, str(path.with_name(path.name + ".folder")), *args, span="3:14-3:14")
    (edit,) = json.loads(from_gguf[1])["edits"]
    assert [e["text"] for e in json.loads(from_folder[1])["edits"]] == [edit["text"]]


def test_a_span_after_a_lone_word_keeps_the_word_in_the_prompt(tmp_path: Path) -> None:
    """The whole text before the span is one pre-token, nothing follows the span, and a GGUF model has no <bos>:
    healing moved the word into the fill and left the model no visible token ("no visible token: the input has no
    context around the span"). Now the word stays in the prompt, unhealed, and the span is filled."""
    from fixtures_bd import tiny_causal_lm
    from fixtures_llamacpp import NINE, VOCAB

    path = network_gguf(tmp_path / "nine.gguf", tiny_causal_lm("qwen2", seed=3, vocab=VOCAB), NINE)
    (tmp_path / "l.txt").write_text("abcdeabcdeabcdeabcde")  # the nine-token vocabulary: letters, one pre-token
    r = fill_in_process(tmp_path / "l.txt", "1:12-1:21", str(path), "--diff", "--temperature", "0")
    assert r.exit_code == 1 and r.stdout.startswith("---"), r.stderr
    assert (tmp_path / "l.txt").read_text() == "abcdeabcdeabcdeabcde"


def test_a_sentencepiece_suffix_has_no_space_before_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Code Llama's vocabulary is sentencepiece's: llama.cpp puts a space ("▁") before the first word of every text
    it tokenizes. The suffix after <SUF> got one too, a space the file does not have and Code Llama never saw there
    (it was trained on `<PRE> {prefix} <SUF>{suffix} <MID>`). Now only the prefix, which starts the prompt, has it,
    and every other text round-trips exactly."""
    from fixtures_bd import tiny_causal_lm
    from fixtures_llamacpp import sentencepiece_vocabulary

    from infill.models.autoregressive import CausalFim

    space = "\u2581"
    pieces = [space, space * 2, space * 4, *"deftrunx():", "de", "def", space + "def", space + "f", space + "x"]
    pieces += ["return", space + "return", space + "total"]
    vocab = sentencepiece_vocabulary(pieces)
    path = network_gguf(tmp_path / "spm.gguf", tiny_causal_lm("llama", seed=1, vocab=len(vocab.tokens)), vocab)
    loaded = api.load_model(ModelSpec(name=str(path)))
    tok = loaded.tokenizer
    assert loaded.info["fim"] == "codellama"
    for text in ["\n    return x\n", "def f(x):", " x", "x", "\n", "  "]:
        assert tok.decode(tok.encode(text)) == text, text
    assert [vocab.tokens[t] for t in tok.encode_start("def f")] == [space + "def", space + "f"]  # type: ignore[attr-defined]

    prompts: list[tuple[str, str]] = []
    real = CausalFim.prompt

    def spy(self: CausalFim, prefix: list[int], suffix: list[int]) -> list[int]:
        prompts.append((tok.decode(list(prefix)), tok.decode(list(suffix))))
        return real(self, prefix, suffix)

    monkeypatch.setattr(CausalFim, "prompt", spy)
    code, _, stderr = fill(tmp_path, str(path), "--allow-syntax-errors", "--no-retrieve", "--diff")
    assert code in (0, 1), stderr
    first, _, third = SOURCE.split("\n", 2)  # --span 2 replaces the second line's text, not its line break
    assert prompts and set(prompts) == {(" " + first + "\n", "\n" + third)}


def ollama_store(root: Path, blob_source: Path, name: tuple[str, str, str, str]) -> str:
    """An Ollama store under `root` holding `blob_source` as the model `name` (registry, namespace, model, tag),
    laid out as `ollama pull` leaves it; returns the blob's digest."""
    data = blob_source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    manifest = root / "manifests" / Path(*name)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 10},
    ]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return digest


def test_ollama_models_are_listed_and_filled_by_the_names_ollama_shows(
    ggufs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "ollama"
    ollama_store(store, ggufs["qwen"], ("registry.ollama.ai", "library", "qwen2.5-coder", "0.5b"))
    ollama_store(store, ggufs["deepseek"], ("registry.ollama.ai", "me", "coder", "latest"))
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    r = CliRunner().invoke(main, ["models", "--json"])
    assert r.exit_code == 0, r.output
    listed = {e["name"]: e for e in json.loads(r.stdout)}
    assert listed["qwen2.5-coder:0.5b"]["kind"] == listed["me/coder:latest"]["kind"] == "ar"
    parameters = api.load_model(ModelSpec(str(ggufs["qwen"]))).info["parameters"]
    assert listed["qwen2.5-coder:0.5b"]["parameters"] == parameters
    table = CliRunner().invoke(main, ["models"]).stdout
    assert "qwen2.5-coder:0.5b" in table and "Ollama, qwen2 GGUF" in table
    args = ["--diff", "--allow-syntax-errors"]
    by_name = fill(tmp_path, "qwen2.5-coder:0.5b", *args)
    assert by_name[0] == 1 and by_name[1] == fill(tmp_path, str(ggufs["qwen"]), *args)[1]
    assert fill(tmp_path, "me/coder", *args)[0] == 1  # the tag defaults to latest


def test_a_truncated_ollama_blob_is_listed_as_unsupported(
    ggufs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted download: its header reads, its tensors run past the end. `infill models` listed it as a
    model to fill with (KIND ar) that every fill then refused; now it says why it is not one."""
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(ggufs["qwen"].read_bytes()[:50_000])
    store = tmp_path / "ollama"
    ollama_store(store, cut, ("registry.ollama.ai", "library", "cut", "latest"))
    ollama_store(store, ggufs["qwen"], ("registry.ollama.ai", "library", "whole", "latest"))
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    r = CliRunner().invoke(main, ["models", "--json", "--cache-dir", str(tmp_path / "empty-hub")])
    assert r.exit_code == 0, r.output
    kinds = {e["name"]: e["kind"] for e in json.loads(r.stdout)}
    assert kinds["cut:latest"] == "unsupported (truncated GGUF file)" and kinds["whole:latest"] == "ar"


def hf_gguf_repo(hub: Path, repo_id: str, files: dict[str, bytes], revision: str = "0" * 40) -> Path:
    """An HF hub cache repo at `hub` laid out as `hf download` leaves a -GGUF repo: the files as blobs, linked from
    snapshots/<revision>/ (subfolders too), and refs/main; returns the snapshot."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(*[".."] * (len(Path(name).parts) + 1), "blobs", blob.name))
    return snapshot


def test_gguf_files_in_the_hf_cache_are_listed_by_a_name_that_fills(
    ggufs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `hf download Org/Name-GGUF` leaves has no config.json: `infill models` listed nothing of it. Each GGUF
    file is listed now (the later files of a split model are not: llama.cpp loads them from the first), named by
    its path in the snapshot, which --model takes."""
    qwen = ggufs["qwen"].read_bytes()
    snapshot = hf_gguf_repo(
        tmp_path / "home" / "hub",
        "Org/Tiny-Coder-GGUF",
        {
            "tiny-coder-q8_0.gguf": qwen,
            "f32/tiny-coder-f32-00001-of-00002.gguf": qwen,
            "f32/tiny-coder-f32-00002-of-00002.gguf": b"GGUF" + bytes(40),
            "README.md": b"# tiny",
        },
    )
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    r = CliRunner().invoke(main, ["models", "--json"])
    assert r.exit_code == 0, r.output
    listed = {e["name"]: e for e in json.loads(r.stdout) if "Tiny-Coder" in e["provenance"]}
    first_split = str(snapshot / "f32" / "tiny-coder-f32-00001-of-00002.gguf")
    assert sorted(listed) == [first_split, str(snapshot / "tiny-coder-q8_0.gguf")]
    entry = listed[str(snapshot / "tiny-coder-q8_0.gguf")]
    assert entry["kind"] == "ar" and entry["size_bytes"] == len(qwen)
    assert entry["parameters"] == api.load_model(ModelSpec(str(ggufs["qwen"]))).info["parameters"]
    assert entry["provenance"] == "HF cache Org/Tiny-Coder-GGUF@main, qwen2 GGUF"
    table = CliRunner().invoke(main, ["models"]).stdout
    assert str(snapshot / "tiny-coder-q8_0.gguf") in table
    args = ["--diff", "--allow-syntax-errors"]
    by_listed_name = fill(tmp_path, entry["name"], *args)
    assert by_listed_name[0] == 1 and by_listed_name[1] == fill(tmp_path, str(ggufs["qwen"]), *args)[1]


def test_calibration_is_per_model_and_a_model_without_one_says_so(ggufs: dict[str, Path], tmp_path: Path) -> None:
    model = tmp_path / "coder.gguf"
    shutil.copy(ggufs["qwen"], model)
    code, line = fill_fails(tmp_path, str(model), "--min-confidence", "0.5", "--allow-syntax-errors")
    assert code == 2 and "ships no calibrated confidence for beam 4" in line
    code, _, stderr = fill(tmp_path, str(model), "--allow-syntax-errors", "--diff", "-v")
    where = tmp_path / "coder.calibration.json"
    assert code == 1 and f"no calibration for beam 4 (infill eval calibrate --out {where})" in stderr
    shipped = Path(api.__file__).parent / "weights" / "default" / "calibration.json"  # fitted for beam 4
    shutil.copy(shipped, tmp_path / "coder.calibration.json")
    api.clear_model_cache()
    r = CliRunner().invoke(
        main,
        [
            "fill",
            "-",
            "--stdin-filename",
            "m.py",
            "--span",
            "2",
            "--model",
            str(model),
            "--format",
            "json",
            "--allow-syntax-errors",
        ],
        input=SOURCE,
    )
    assert r.exit_code == 0, r.stderr
    confidence = json.loads(r.stdout)["confidence"]
    assert isinstance(confidence, float) and 0 <= confidence <= 1


def respelled_gguf(ggufs: dict[str, Path], path: Path, spellings: dict[str, str], special: dict[str, int]) -> Path:
    """The tiny Qwen model's weights with its special tokens respelled (`spellings`: old text -> new) and
    `special` written as tokenizer.ggml.<key>_token_id, as the GGUF file `path`."""
    import dataclasses

    from safetensors.numpy import load_file

    from infill.models.tiny_gguf import folder_vocabulary, write_gguf

    folder = Path(str(ggufs["qwen"]) + ".folder")
    cfg = json.loads((folder / "config.json").read_text())
    vocab = folder_vocabulary(folder, cfg)
    tokens = [spellings.get(t, t) for t in vocab.tokens]
    vocab = dataclasses.replace(vocab, tokens=tokens, special=special)
    return write_gguf(path, cfg, load_file(str(folder / "model.safetensors")), vocab, name=path.stem)


@pytest.mark.parametrize("layout", ["metadata", "codegemma"])
def test_fim_and_end_tokens_a_gguf_names_otherwise(ggufs: dict[str, Path], tmp_path: Path, layout: str) -> None:
    """FIM tokens spelled as no family here spells them, named by the file's tokenizer.ggml.fim_*_token_id (what
    llama.cpp reads): the model could only continue text (a fill with text after it failed with exit 2); it fills
    with them now, and the file separator the metadata names ends the middle. CodeGemma spells its FIM tokens as
    Qwen does and ends a file with <|file_separator|>, which did not end the middle (a control token: banned, so a
    fill ran to its budget)."""
    if layout == "metadata":
        spellings = {"<|fim_prefix|>": "[P]", "<|fim_suffix|>": "[S]", "<|fim_middle|>": "[M]", "<|file_sep|>": "[F]"}
        special = {"fim_pre": 3, "fim_suf": 5, "fim_mid": 4, "fim_sep": 7}
    else:
        spellings = {"<|file_sep|>": "<|file_separator|>", "<|fim_pad|>": "<pad>"}
        special = {}
    path = respelled_gguf(ggufs, tmp_path / f"{layout}.gguf", spellings, special)
    loaded = api.load_model(ModelSpec(str(path)))
    assert loaded.model.fim is not None and loaded.model.fim.ids == (3, 5, 4)
    assert 7 in set(loaded.model._ends.tolist())
    code, out, stderr = fill(tmp_path, str(path), "--allow-syntax-errors", "--format", "json")
    assert code in (0, 1) and json.loads(out)["edits"], stderr


# --- bad input ------------------------------------------------------------------------------------------------


def test_an_architecture_llama_cpp_does_not_know(ggufs: dict[str, Path], tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "alien.gguf"
    writer = gguf.GGUFWriter(str(path), "alienformer")
    writer.add_token_list(["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "a"])
    writer.add_tensor("token_embd.weight", __import__("numpy").zeros((4, 32), dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    code, line = fill_fails(tmp_path, str(path))
    assert code == 123 and "unknown model architecture: 'alienformer'" in line


def test_a_gguf_without_fim_tokens_asked_for_a_fill_with_text_after_it(ggufs: dict[str, Path], tmp_path: Path) -> None:
    code, line = fill_fails(tmp_path, str(ggufs["plain"]))
    assert code == 2 and "has no fill-in-the-middle tokens" in line


@pytest.mark.parametrize(("keep", "needle"), [(0.5, "truncated GGUF file: its tensors end at byte"), (40, "header")])
def test_a_truncated_file(ggufs: dict[str, Path], tmp_path: Path, keep: float, needle: str) -> None:
    """Cut in the tensor data (an interrupted download) or inside the header."""
    data = ggufs["qwen"].read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: int(len(data) * keep) if keep < 1 else int(keep)])
    code, line = fill_fails(tmp_path, str(path))
    assert code == 123 and needle in line and "truncated" in line


@pytest.fixture(scope="module")
def split_qwen(ggufs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The tiny Qwen model as llama.cpp's gguf-split leaves it: four parts, qs-0000i-of-00004.gguf (the `gguf`
    package's own splitter, 8 tensors a part)."""
    import functools

    import gguf

    from infill.models.tiny_gguf import gguf_from_folder

    base = tmp_path_factory.mktemp("split")
    whole = gguf.GGUFWriter
    gguf.GGUFWriter = functools.partial(whole, split_max_tensors=8)  # type: ignore[misc]
    try:
        gguf_from_folder(str(ggufs["qwen"]) + ".folder", base / "qs.gguf")
    finally:
        gguf.GGUFWriter = whole  # type: ignore[misc]
    parts = sorted(base.glob("qs-*.gguf"))
    assert [p.name for p in parts] == [f"qs-0000{i}-of-00004.gguf" for i in range(1, 5)]
    return parts


def test_a_split_model_fills_from_its_first_part(
    ggufs: dict[str, Path], split_qwen: list[Path], tmp_path: Path
) -> None:
    loaded = api.load_model(ModelSpec(str(split_qwen[0])))
    assert loaded.info["parameters"] == api.load_model(ModelSpec(str(ggufs["qwen"]))).info["parameters"]
    args = ["--diff", "--allow-syntax-errors"]
    assert fill(tmp_path, str(split_qwen[0]), *args)[:2] == fill(tmp_path, str(ggufs["qwen"]), *args)[:2]


@pytest.mark.parametrize("broken", ["missing", "cut", "later"])
def test_a_split_model_with_a_part_missing_cut_or_named_by_a_later_part(
    split_qwen: list[Path], tmp_path: Path, broken: str
) -> None:
    """A part not downloaded, a part cut short, or the second part passed: llama.cpp's own words were "failed to
    load GGUF split from ...", "data is not within the file bounds", "illegal split file idx: 1"; now each says
    which part and what to do."""
    folder = tmp_path / "parts"
    folder.mkdir()
    for part in split_qwen:
        if not (broken == "missing" and "00002-of" in part.name):
            shutil.copy(part, folder / part.name)
    if broken == "cut":
        third = folder / split_qwen[2].name
        third.write_bytes(third.read_bytes()[:2000])
    model = folder / split_qwen[1 if broken == "later" else 0].name
    code, line = fill_fails(tmp_path, str(model))
    assert code == 123, line
    expected = {
        "missing": "part 2 of 4 of this split model, qs-00002-of-00004.gguf, is missing",
        "cut": f"{folder / split_qwen[2].name}: truncated GGUF file",
        "later": f"is part 2 of 4 of a split model: pass its first part, --model {folder / split_qwen[0].name}",
    }[broken]
    assert expected in line


def huge_header(path: Path) -> None:
    """A GGUF header (architecture qwen2) claiming one f32 tensor of 2^21 x 2^21 elements (16 TiB), and no data."""

    def string(s: str) -> bytes:
        return struct.pack("<Q", len(s)) + s.encode()

    kv = string("general.architecture") + struct.pack("<I", 8) + string("qwen2")
    tensor = string("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 1 << 21, 1 << 21)
    tensor += struct.pack("<IQ", 0, 0)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + kv + tensor)


def test_a_header_claiming_tensors_larger_than_memory_is_refused_before_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infill.models import llamacpp

    huge_header(tmp_path / "huge.gguf")

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("llama.cpp was asked to load it")

    monkeypatch.setattr(llamacpp.LlamaEngine, "__init__", never)
    code, line = fill_fails(tmp_path, str(tmp_path / "huge.gguf"))
    assert code == 123 and "its tensors need 16384.0 GiB of memory" in line


def test_an_ollama_name_that_is_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "store"))
    code, line = fill_fails(tmp_path, "qwen2.5-coder:7b")
    assert code == 123 and "'qwen2.5-coder:7b' is not in Ollama's store" in line and "ollama pull" in line


def test_ollamas_linux_service_store_is_read_when_the_users_holds_no_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ollama's Linux installer runs the server as user `ollama`, whose home is /usr/share/ollama: models pulled
    through it live in /usr/share/ollama/.ollama/models, and ~/.ollama/models stays empty. A name `ollama list`
    shows was "not in Ollama's store (~/.ollama/models)"."""
    from infill.models import ollama

    home, service = tmp_path / "home", tmp_path / "service"
    name = ("registry.ollama.ai", "library", "qwen2.5-coder", "1.5b")
    ollama_store(service, Path(__file__), name)
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(ollama, "SERVICE_STORE", service)
    monkeypatch.setattr(ollama.sys, "platform", "linux")
    (home / ".ollama" / "models" / "manifests").mkdir(parents=True)  # `ollama` run once by the user: empty
    found = ollama.find("qwen2.5-coder:1.5b")
    assert ollama.store() == service and found is not None and found.blob.parent == service / "blobs"
    ollama_store(home / ".ollama" / "models", Path(__file__), name)  # the user's own store holds models: it wins
    assert ollama.store() == home / ".ollama" / "models"
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "elsewhere"))  # as set for the server, it decides
    assert ollama.store() == tmp_path / "elsewhere"
    monkeypatch.delenv("OLLAMA_MODELS")
    shutil.rmtree(home / ".ollama")
    monkeypatch.setattr(ollama.sys, "platform", "darwin")  # the service store is Linux's
    assert ollama.store() == home / ".ollama" / "models"


def test_the_older_hf_cache_variable_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub still reads HUGGINGFACE_HUB_CACHE where HF_HUB_CACHE is unset; `infill models` did not."""
    from infill.models.hf_folder import hf_cache_dir

    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "old"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hf_cache_dir() == tmp_path / "old"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "new"))
    assert hf_cache_dir() == tmp_path / "new"


@pytest.mark.parametrize("name", ["qwen2.5-coder:7b", "qwen2.5-coder", "Qwen2.5-Coder:latest"])
def test_a_name_not_pulled_says_where_it_looked_and_what_is_near(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Only qwen2.5-coder:1.5b is pulled: another tag, no tag (latest) or another case said only `ollama pull` (or,
    without a tag, `hf download qwen2.5-coder`, which is no repo id); the line now names the stores it read and
    the tag that is there."""
    from huggingface_hub import constants

    store = tmp_path / "ollama"
    ollama_store(store, Path(__file__), ("registry.ollama.ai", "library", "qwen2.5-coder", "1.5b"))
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    code, line = fill_fails(tmp_path, name)
    assert code == 123 and f"Ollama's store ({store})" in line and "near: qwen2.5-coder:1.5b" in line, line
    if ":" not in name:
        assert f"HF cache ({tmp_path / 'hub'})" in line and f"`ollama pull {name}`" in line, line


@pytest.mark.parametrize("manifest", ['{"layers": 5}', '{"layers": "x"}', "[1]"])
def test_a_broken_ollama_manifest_is_left_out_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifest: str
) -> None:
    """A manifest whose layers are not a list: `infill models` lists the store without it (it failed whole, an
    internal error), and a fill with its name is a model error naming the manifest."""
    store = tmp_path / "store"
    folder = store / "manifests" / "registry.ollama.ai" / "library" / "broken"
    folder.mkdir(parents=True)
    (folder / "latest").write_text(manifest)
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    listed = CliRunner().invoke(main, ["models"])
    assert listed.exit_code == 0 and "broken" not in listed.stdout, listed.output
    code, line = fill_fails(tmp_path, "broken")
    assert code == 123 and "has no model layer" in line and str(folder / "latest") in line


def test_an_ollama_model_whose_blob_is_missing_is_listed_and_named(
    ggufs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull that did not finish, or a pruned blob: the manifest is there, the GGUF file is not. `ollama list`
    still lists it; `infill models` left it out. Now it is listed as unsupported with the command that fetches it,
    and a fill with its name is one line saying what is missing and what to run."""
    store = tmp_path / "store"
    digest = ollama_store(store, ggufs["qwen"], ("registry.ollama.ai", "library", "gone", "latest"))
    (store / "blobs" / f"sha256-{digest}").unlink()
    ollama_store(store, ggufs["deepseek"], ("registry.ollama.ai", "library", "whole", "latest"))
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    r = CliRunner().invoke(main, ["models", "--json", "--cache-dir", str(tmp_path / "empty-hub")])
    assert r.exit_code == 0, r.output
    kinds = {e["name"]: e["kind"] for e in json.loads(r.stdout)}
    assert kinds["gone:latest"] == "unsupported (GGUF file missing: ollama pull gone:latest)"
    assert kinds["whole:latest"] == "ar"
    code, line = fill_fails(tmp_path, "gone")
    assert code == 123 and str(store / "blobs" / f"sha256-{digest}") in line, line
    assert line.endswith("is missing (run `ollama pull gone:latest` again)"), line


def test_an_ollama_manifest_that_is_not_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Left out of `infill models`, as `ollama list` leaves it; a fill with its name names the manifest and says
    what to run."""
    store = tmp_path / "store"
    folder = store / "manifests" / "registry.ollama.ai" / "library" / "cut"
    folder.mkdir(parents=True)
    (folder / "latest").write_text('{"schemaVersion": 2, "layers": [')
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    listed = CliRunner().invoke(main, ["models", "--cache-dir", str(tmp_path / "empty-hub")])
    assert listed.exit_code == 0 and "cut" not in listed.stdout, listed.output
    code, line = fill_fails(tmp_path, "cut")
    assert code == 123 and f"unreadable manifest {folder / 'latest'}" in line, line
    assert line.endswith("; run `ollama pull cut:latest` again"), line


def test_the_extra_not_installed(ggufs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`infill models` lists GGUF models without it (the header is read in Python); a fill names the extra."""
    from infill.models import llamacpp

    monkeypatch.setattr(llamacpp, "available", lambda: False)
    code, line = fill_fails(tmp_path, str(ggufs["qwen"]))
    from infill.extras import install_hint

    assert code == 2 and install_hint("llamacpp") in line and "infill[" not in line


def test_a_missing_gguf_file_and_folder_flags(ggufs: dict[str, Path], tmp_path: Path) -> None:
    code, line = fill_fails(tmp_path, str(tmp_path / "nope.gguf"))
    assert code == 123 and "nope.gguf does not exist" in line
    for flag in ("--revision", "--mask-token"):  # a flag that does not apply is a usage error (exit 2)
        code, line = fill_fails(tmp_path, str(ggufs["qwen"]), flag, "v2")
        assert code == 2 and line.endswith(f"{flag} applies to model folders; {ggufs['qwen']} is a GGUF model")


# --- the editor and the daemon ----------------------------------------------------------------------------------


def test_the_language_server_reports_a_bad_gguf_once_per_request_and_keeps_serving(
    ggufs: dict[str, Path], tmp_path: Path
) -> None:
    pytest.importorskip("pygls")
    from fixtures_lsp import LspClient

    request_failed = -32803
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(ggufs["qwen"].read_bytes()[:50_000])
    uri = "file:///project/m.py"
    client = LspClient()
    try:
        client.initialize({"model": str(cut)})
        client.open(uri, "def mean(xs):\n    total = sum(xs)\n    \n    return total / len(xs)\n")
        for _ in range(2):
            response = client.inline(uri, 2, 4)
            assert response["error"]["code"] == request_failed and "truncated GGUF file" in response["error"]["message"]
        client.configure({"model": str(ggufs["qwen"]), "threshold": 0})
        response = client.inline(uri, 2, 4)
        assert "error" not in response, response
        assert isinstance(response["result"]["items"], list)
    finally:
        assert client.close() == 0, client.stderr()


@pytest.mark.slow
def test_the_daemon_fills_with_a_gguf_model_as_in_process(
    ggufs: dict[str, Path], runtime_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--daemon on` keeps the llama.cpp model loaded and prints and writes what `--daemon off` does."""
    from infill.server import client

    monkeypatch.delenv("INFILL_NO_DAEMON")
    env = plugin_env(runtime_dir)
    del env["INFILL_SERVER_PLUGINS"]
    env["INFILL_DAEMON_DEBUG"] = "1"
    outputs = []
    for mode in ("on", "off"):
        (tmp_path / mode).mkdir()
        (tmp_path / mode / "m.py").write_text(SOURCE)
        monkeypatch.chdir(tmp_path / mode)
        args = ["fill", "m.py", "--span", "2", "--model", str(ggufs["qwen"]), "--allow-syntax-errors", "-v"]
        r = CliRunner().invoke(main, [*args, "--daemon", mode], env=env)
        outputs.append((r.exit_code, r.stdout, r.stderr))
        if mode == "on":
            info = client.status(env)
            assert info is not None and [m["name"] for m in info["models"]] == [str(ggufs["qwen"])]
    assert outputs[0] == outputs[1] and outputs[0][0] == 0, outputs
    assert (tmp_path / "on" / "m.py").read_text() == (tmp_path / "off" / "m.py").read_text() != SOURCE


# --- a fill that stops inside a character -----------------------------------------------------------------------


@pytest.mark.parametrize("model", ["qwen.gguf", "qwen.gguf.folder", "codellama.gguf", "codellama.gguf.folder"])
@pytest.mark.parametrize("cut", [1, 0])
def test_a_fill_stopped_inside_a_character_writes_the_characters_before_it(
    ggufs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, cut: int
) -> None:
    """A fill whose tokens stop inside a character's bytes (its budget, or an end token, reached inside them:
    `cut` bytes of `—` missing) writes what comes before it, never U+FFFD (llama.cpp's server holds such bytes
    back); a character several byte tokens hold (`é`, `—`) decodes whole. Byte-level BPE (Qwen) and
    sentencepiece's byte tokens (Code Llama), a GGUF file and a folder. Before, the fill was refused as broken
    UTF-8 and nothing was written (exit 3), or with --allow-syntax-errors U+FFFD was written."""
    import infill.decoding as decoding

    path = ggufs[model.split(".")[0]]
    name = str(path.with_name(path.name + ".folder")) if model.endswith("folder") else str(path)
    text = "    total = 1  # é—"
    ids = api.load_model(ModelSpec(name=name)).tokenizer.encode(text)
    ids = ids[: len(ids) - cut]  # each byte of `—` is its own token in these vocabularies
    real = decoding.decode

    def forced(model_: Any, problem: Any, *args: Any, **kwargs: Any) -> Any:
        tokens, stats = real(model_, problem, *args, **kwargs)
        budget = len(problem.masked)
        filled = ids + [int(model_.pad_id)] * (budget - len(ids))
        return tokens.new_tensor(filled[:budget]), stats

    monkeypatch.setattr(decoding, "decode", forced)
    code, _, stderr = fill(
        tmp_path, name, "--decoder", "sequential", "--temperature", "0", "--no-retrieve", "--tokens", "40"
    )
    written = (tmp_path / "m.py").read_text()
    assert code == 0, stderr
    assert "\ufffd" not in written
    assert written.splitlines()[1] == ("    total = 1  # é" if cut else text), written


# --- llama.cpp's -hf cache, LM Studio's folders, a -GGUF repo in the HF cache, by name ---------------------------


@pytest.fixture
def gguf_stores(ggufs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Each store laid out as its tool leaves it, with the tiny Qwen model as one file and the tiny StarCoder as
    another, so that which was picked shows in the loaded model's family: llama.cpp's `-hf` cache (ORG_REPO_FILE
    and the manifest of each tag it was run with), LM Studio's PUBLISHER/REPO/FILE, and `hf download`'s snapshot."""
    qwen, starcoder = ggufs["qwen"].read_bytes(), ggufs["starcoder"].read_bytes()
    cache = tmp_path / "llama.cpp"
    cache.mkdir()
    for tag, file, data in [("latest", "tiny-coder-Q4_K_M.gguf", starcoder), ("Q8_0", "tiny-coder-Q8_0.gguf", qwen)]:
        (cache / f"ggml-org_Tiny-Coder-GGUF_{file}").write_bytes(data)
        (cache / f"ggml-org_Tiny-Coder-GGUF_{file}.etag").write_text('"x"')
        manifest = {"ggufFile": {"rfilename": file, "size": len(data)}, "mmprojFile": None}
        (cache / f"manifest=ggml-org=Tiny-Coder-GGUF={tag}.json").write_text(json.dumps(manifest))
    studio = tmp_path / "home" / ".lmstudio" / "models" / "lmstudio-community" / "Tiny-Coder-GGUF"
    studio.mkdir(parents=True)
    (studio / "Tiny-Coder-Q8_0.gguf").write_bytes(qwen)
    (studio / "Tiny-Coder-F16.gguf").write_bytes(starcoder)  # no Q4_K_M: the first by name is picked
    (studio / "mmproj-Tiny-Coder-F16.gguf").write_bytes(qwen)  # never picked
    hf_gguf_repo(
        tmp_path / "hf" / "hub",
        "Org/Tiny-Coder-GGUF",
        {"tiny-coder-q8_0.gguf": qwen, "tiny-coder-q4_k_m.gguf": starcoder},
    )
    monkeypatch.setenv("LLAMA_CACHE", str(cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    return {"llama.cpp": cache, "lmstudio": studio}


@pytest.mark.parametrize(
    ("name", "family", "store"),
    [
        ("ggml-org/Tiny-Coder-GGUF", "starcoder", "llama.cpp cache"),  # the manifest of `latest`: Q4_K_M
        ("ggml-org/Tiny-Coder-GGUF:Q8_0", "qwen", "llama.cpp cache"),
        ("ggml-org/Tiny-Coder-GGUF:q8_0", "qwen", "llama.cpp cache"),
        ("lmstudio-community/Tiny-Coder-GGUF", "starcoder", "LM Studio"),
        ("lmstudio-community/Tiny-Coder-GGUF:Q8_0", "qwen", "LM Studio"),
        ("Org/Tiny-Coder-GGUF", "starcoder", "HF cache"),  # Q4_K_M
        ("hf:Org/Tiny-Coder-GGUF:Q8_0", "qwen", "HF cache"),
    ],
)
def test_gguf_repos_of_llama_cpp_lm_studio_and_the_hf_cache_fill_by_name(
    gguf_stores: dict[str, Path], ggufs: dict[str, Path], tmp_path: Path, name: str, family: str, store: str
) -> None:
    """`--model ORG/REPO[:QUANT]`, llama.cpp's -hf syntax, names a GGUF file llama.cpp's cache, LM Studio or the HF
    cache holds (Q4_K_M, else the first file by name, when no quant is named). Before, only their paths worked:
    these names were refused as not in Ollama's store (with a quant) or as a folder of GGUF files to pick from."""
    loaded = api.load_model(ModelSpec(name=name))
    assert loaded.info["fim"] == family and loaded.info["provenance"].startswith(store), loaded.info
    args = ["--diff", "--allow-syntax-errors", "--precision", "fp32"]
    assert fill(tmp_path, name, *args)[1] == fill(tmp_path, str(ggufs[family]), *args)[1]


def test_infill_models_lists_llama_cpp_and_lm_studio_models_by_name(gguf_stores: dict[str, Path]) -> None:
    r = CliRunner().invoke(main, ["models", "--json"])
    assert r.exit_code == 0, r.output
    listed = {e["name"]: e for e in json.loads(r.stdout)}
    cache, studio = gguf_stores["llama.cpp"], gguf_stores["lmstudio"]
    assert listed["ggml-org/Tiny-Coder-GGUF"]["path"] == str(cache / "ggml-org_Tiny-Coder-GGUF_tiny-coder-Q4_K_M.gguf")
    assert listed["ggml-org/Tiny-Coder-GGUF:Q8_0"]["path"] == str(
        cache / "ggml-org_Tiny-Coder-GGUF_tiny-coder-Q8_0.gguf"
    )
    assert listed["lmstudio-community/Tiny-Coder-GGUF"]["path"] == str(studio / "Tiny-Coder-F16.gguf")
    assert listed["lmstudio-community/Tiny-Coder-GGUF:Q8_0"]["path"] == str(studio / "Tiny-Coder-Q8_0.gguf")
    assert {listed[n]["kind"] for n in listed if n.startswith(("ggml-org/", "lmstudio-community/"))} == {"ar"}
    assert listed["lmstudio-community/Tiny-Coder-GGUF"]["provenance"].startswith("LM Studio, ")
    assert not [n for n in listed if "mmproj" in n and n.startswith("lmstudio")]


@pytest.mark.parametrize(
    ("platform", "where"),
    [
        ("darwin", "home/Library/Caches/llama.cpp"),  # XDG_CACHE_HOME is not read there
        ("win32", "AppData/Local/llama.cpp"),  # %LOCALAPPDATA%
        ("linux", "xdg/llama.cpp"),
    ],
)
def test_llama_cpp_s_cache_is_where_llama_cpp_keeps_it_on_each_system(
    gguf_stores: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str, where: str
) -> None:
    """Without $LLAMA_CACHE, llama.cpp's -hf writes to the system's cache folder: ~/Library/Caches on macOS,
    %LOCALAPPDATA% on Windows, $XDG_CACHE_HOME (else ~/.cache) elsewhere. It was read at ~/.cache (or
    $XDG_CACHE_HOME) on every system, so on macOS and Windows its models were neither listed nor found by name."""
    import sys

    gguf_stores["llama.cpp"].rename(tmp_path / "cache")
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cache").rename(tmp_path / where)
    monkeypatch.delenv("LLAMA_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "AppData" / "Local"))
    monkeypatch.setattr(sys, "platform", platform)
    r = CliRunner().invoke(main, ["models", "--json"])
    assert r.exit_code == 0, r.output
    listed = {e["name"]: e["path"] for e in json.loads(r.stdout)}
    assert listed["ggml-org/Tiny-Coder-GGUF:Q8_0"] == str(
        tmp_path / where / "ggml-org_Tiny-Coder-GGUF_tiny-coder-Q8_0.gguf"
    )
    from infill.models import gguf_stores as stores

    found = stores.find("ggml-org/Tiny-Coder-GGUF", tmp_path / "hf" / "hub")
    assert found is not None and found.file.parent == tmp_path / where and found.store == "llama.cpp cache"


@pytest.mark.parametrize("name", ["ggml-org/Tiny-Coder-GGUF:Q5_K_M", "ggml-org/Small-Coder-GGUF"])
def test_a_gguf_repo_found_nowhere_names_the_stores_read(
    gguf_stores: dict[str, Path], tmp_path: Path, name: str
) -> None:
    code, line = fill_fails(tmp_path, name)
    assert code == 123 and f"llama.cpp's cache ({gguf_stores['llama.cpp']})" in line, line
    assert str(tmp_path / "home" / ".lmstudio" / "models") in line and "near: ggml-org/Tiny-Coder-GGUF" in line, line
    if ":" in name:  # llama.cpp's -hf name of a quant not fetched: how llama.cpp (or Ollama) would fetch it
        assert f"`llama-cli -hf {name}`" in line and f"`ollama pull hf.co/{name}`" in line, line


def test_a_model_folder_in_the_hf_cache_still_wins_over_the_same_name_elsewhere(
    gguf_stores: dict[str, Path], ggufs: dict[str, Path], tmp_path: Path
) -> None:
    """The order names resolve in is kept: a model folder in the HF cache under a name LM Studio also holds loads
    from the HF cache (the stores read for -GGUF repos come after it)."""
    folder = ggufs["qwen"].with_name("qwen.gguf.folder")
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    hf_gguf_repo(tmp_path / "hf" / "hub", "lmstudio-community/Tiny-Coder-GGUF", files)
    loaded = api.load_model(ModelSpec(name="lmstudio-community/Tiny-Coder-GGUF"))
    assert loaded.info.get("engine") != "llama.cpp" and loaded.info["path"].startswith(str(tmp_path / "hf")), (
        loaded.info
    )
