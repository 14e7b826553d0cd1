"""Left-to-right code models (Qwen2.5-Coder, StarCoder2, Code Llama, DeepSeek-Coder layouts) load from a folder or
the Hugging Face cache as fill-in-the-middle models and fill through the same pipeline as the other kinds: beam
search with the syntax check, retrieval, exact sampling with lookup drafts. Tiny random models whose tokenizers
carry each family's special tokens, built here; nothing is downloaded."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from infill import api
from infill.cli import main
from infill.config import ModelSpec
from infill.core.kinds import folder_kind
from infill.models.autoregressive import CausalFim
from infill.models.tiny import tiny_ar_checkpoint

torch.set_num_threads(1)

SOURCE = (
    "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n\n\n"
    "def total(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n"
)
# family -> (model_type, FIM tokens in prompt order, the token before them or None)
FAMILIES = {
    "qwen": ("qwen2", ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"), None),
    "starcoder": ("starcoder2", ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"), None),
    "codellama": ("llama", ("▁<PRE>", "▁<SUF>", "▁<MID>"), "<s>"),
    "deepseek": ("llama", ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"), "<｜begin▁of▁sentence｜>"),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ar")
    return {family: tiny_ar_checkpoint(root / family, family, texts=[SOURCE] * 3) for family in [*FAMILIES, "plain"]}


def fill(*args: str, input: str | None = None) -> tuple[int, str, str]:
    """`infill fill ARGS` in fp32, which every CPU computes alike (bf16 weights load only where bf16 is fast)."""
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", *args, "--precision", "fp32"], input=input)
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_loads_as_a_fim_model_with_its_own_tokens(folders: dict[str, Path], family: str) -> None:
    model_type, names, lead = FAMILIES[family]
    raw = json.loads((folders[family] / "config.json").read_text())
    assert raw["model_type"] == model_type and folder_kind(raw) == "ar"
    loaded = api.load_model(ModelSpec(name=str(folders[family]), device="cpu", bf16=False))
    assert loaded.kind == "ar" and loaded.info["fim"] == family
    model = loaded.model
    assert isinstance(model, CausalFim)
    tok = loaded.tokenizer
    pre, suf = tok.encode("x = "), tok.encode("\n")
    ids = [tok.token_id(t) for t in names]  # type: ignore[attr-defined]
    expected = [*([tok.token_id(lead)] if lead else []), ids[0], *pre, ids[1], *suf, ids[2]]  # type: ignore[attr-defined]
    assert model.prompt(pre, suf) == expected


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_python_line_is_filled_through_the_cli(folders: dict[str, Path], family: str, tmp_path: Path) -> None:
    """Default decoding (beam search with the syntax check) on a random model: exit 0 with a diff of the one
    line, or exit 3 with the file untouched; either way a file that parsed still parses."""
    path = tmp_path / "s.py"
    path.write_text(SOURCE)
    code, out, err = fill(str(path), "--span", "4", "--model", str(folders[family]))
    assert code in (0, 3), err
    ast.parse(path.read_text())
    lines, before = path.read_text().splitlines(), SOURCE.splitlines()
    assert lines[:3] + lines[4:] == before[:3] + before[4:]  # only line 4 may change


def test_the_syntax_check_and_retrieval_apply(folders: dict[str, Path], tmp_path: Path) -> None:
    """This model's most likely line breaks the file; with the check on, a line of the user's own code that keeps
    it parsing is written instead (retrieval ranks it with the model's own fills)."""
    path = tmp_path / "s.py"
    path.write_text(SOURCE)
    base = [str(path), "--span", "10", "--model", str(folders["qwen"]), "-o", "-"]
    code, unchecked, err = fill(*base, "--no-syntax-check")
    assert code == 0, err
    with pytest.raises(SyntaxError):
        ast.parse(unchecked)
    code, checked, err = fill(*base)
    assert code == 0, err
    ast.parse(checked)
    written = checked.splitlines()[9].strip()
    assert written != unchecked.splitlines()[9].strip()
    assert written in [line.strip() for line in SOURCE.splitlines()[:9]]  # a line from above it, re-indented
    code, alone, _ = fill(*base, "--no-retrieve")
    assert code == 3 or alone.splitlines()[9].strip() != written


@pytest.mark.parametrize(
    "args",
    [
        ["--decoder", "assd", "--temperature", "0.8"],
        ["--decoder", "sequential", "--temperature", "0.8"],
        ["--beam", "2"],
    ],
)
def test_decoders_that_run_left_to_right_models(folders: dict[str, Path], tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("first line\nsecond line\nthird line\n")
    model = ["--model", str(folders["qwen"]), "--allow-syntax-errors"]  # a random model may split a UTF-8 character
    code, out, err = fill(str(path), "--span", "2", *model, "--diff", "--stats", *args)
    decoder = "beam" if "--beam" in args else args[1]
    assert code in (0, 1) and f"stats: decoder={decoder} " in err, err
    assert path.read_text() == "first line\nsecond line\nthird line\n"  # --diff writes nothing


def hf_cache(root: Path, repo: str, folder: Path) -> Path:
    """`folder` as the Hugging Face cache stores a download of `repo`: refs/main names a snapshot."""
    entry = root / ("models--" + repo.replace("/", "--"))
    shutil.copytree(folder, entry / "snapshots" / "0123abcd")
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("0123abcd")
    return root


def test_a_model_in_the_hf_cache_is_listed_and_filled_with_offline(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    cache = hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-Coder-0.5B", folders["qwen"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # $HF_HUB_CACHE, read when huggingface_hub loads
    r = CliRunner().invoke(main, ["models", "--json", "--cache-dir", str(cache)])
    (entry,) = [e for e in json.loads(r.stdout) if e["name"] == "Qwen/Qwen2.5-Coder-0.5B"]
    assert entry["kind"] == "ar" and entry["revision"] == "main"  # the ref the snapshot was downloaded as
    path = tmp_path / "notes.txt"
    path.write_text("first line\nsecond line\n")
    code, out, err = fill(str(path), "--span", "2", "--model", "Qwen/Qwen2.5-Coder-0.5B", "--diff")
    assert code in (0, 1), err
    code, _, err = fill(str(path), "--span", "2", "--model", "Qwen/Qwen2.5-Coder-7B")
    assert code == 123 and "in the HF cache" in err


def test_an_hf_name_is_looked_up_in_the_hf_cache_only(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--model hf:Org/Name` names a repo in the HF cache: it was read as an Ollama name (namespace "hf:Org") and
    refused with `ollama pull hf:Org/Name`. A repo not there names the HF cache and what is near, not Ollama."""
    from huggingface_hub import constants

    cache = hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-Coder-0.5B", folders["qwen"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    path = tmp_path / "notes.txt"
    path.write_text("first line\nsecond line\n")
    by_repo = fill(str(path), "--span", "2", "--model", "Qwen/Qwen2.5-Coder-0.5B", "--diff")
    assert by_repo[0] in (0, 1), by_repo[2]
    assert fill(str(path), "--span", "2", "--model", "hf:Qwen/Qwen2.5-Coder-0.5B", "--diff")[:2] == by_repo[:2]
    code, _, err = fill(str(path), "--span", "2", "--model", "hf:Qwen/Qwen2.5-Coder-0.5")
    assert code == 123 and f"is not in the HF cache ({cache}); near: Qwen/Qwen2.5-Coder-0.5B;" in err, err
    assert "Ollama" not in err


def test_infill_models_tells_diffusion_folders_from_left_to_right_ones(tmp_path: Path) -> None:
    """By config alone: a diffusion model_type, or a mask token or block size, makes a block-diffusion folder."""
    configs = {
        "coder": ({"model_type": "qwen2"}, "ar"),
        "starcoder2": ({"model_type": "starcoder2"}, "ar"),
        "codellama": ({"model_type": "llama"}, "ar"),
        "fast-dllm": ({"model_type": "qwen2", "bd_size": 32}, "blockdiff"),
        "masked-llama": ({"model_type": "llama", "mask_token_id": 7}, "blockdiff"),
        "sdar": ({"model_type": "sdar"}, "blockdiff"),
        "mamba": ({"model_type": "mamba"}, "unsupported (mamba)"),
    }
    for name, (cfg, _) in configs.items():
        (tmp_path / "hub" / f"models--me--{name}" / "snapshots" / "abc").mkdir(parents=True)
        (tmp_path / "hub" / f"models--me--{name}" / "snapshots" / "abc" / "config.json").write_text(json.dumps(cfg))
    blocky = tmp_path / "hub" / "models--me--coder-bd" / "snapshots" / "abc"
    blocky.mkdir(parents=True)
    (blocky / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (blocky / "generation_config.json").write_text(json.dumps({"block_length": 4}))
    r = CliRunner().invoke(main, ["models", "--json", "--cache-dir", str(tmp_path / "hub")])
    kinds = {e["name"]: e["kind"] for e in json.loads(r.stdout) if e["name"].startswith("me/")}
    assert kinds == {f"me/{name}": kind for name, (_, kind) in configs.items()} | {"me/coder-bd": "blockdiff"}
    table = CliRunner().invoke(main, ["models", "--cache-dir", str(tmp_path / "hub")]).stdout
    assert any(line.startswith("me/coder ") and " ar " in line for line in table.splitlines())


def test_the_packaged_models_keep_their_kinds() -> None:
    from infill.core.catalog import packaged_models

    assert {e.name: e.kind for e in packaged_models()} == {"blockdiff": "blockdiff", "default": "asarm"}


def test_weights_load_in_bf16_only_where_bf16_is_fast(folders: dict[str, Path]) -> None:
    from infill.hardware import fast_bf16

    api.clear_model_cache()
    loaded = api.load_model(ModelSpec(name=str(folders["qwen"]), device="cpu", bf16=True))
    want = torch.bfloat16 if fast_bf16("cpu") else torch.float32
    assert next(loaded.model.engine.model.parameters()).dtype == want  # type: ignore[union-attr]
    assert loaded.info["dtype"] == str(want).removeprefix("torch.")
    fp32 = api.load_model(ModelSpec(name=str(folders["qwen"]), device="cpu", bf16=False))
    assert next(fp32.model.engine.model.parameters()).dtype == torch.float32  # type: ignore[union-attr]


@pytest.mark.parametrize(("family", "fewer"), [("qwen", False), ("codellama", True)])
def test_greedy_speculation_writes_the_greedy_fill_through_the_cli(
    folders: dict[str, Path], family: str, fewer: bool
) -> None:
    """`--decoder assd --temperature 0` (lookup drafts) and `--decoder sequential --temperature 0` write the same
    fill, the speculative one in no more passes (this Code Llama model repeats a token, and the lookup copies it)."""
    source = "a b c d a b c d a b c d\n" * 9
    out = {}
    for decoder in ("sequential", "assd"):
        args = ["-", "--stdin-filename", "x.txt", "--span", "5:6", "--tokens", "24", "--format", "json", "--model"]
        code, stdout, err = fill(
            *args,
            str(folders[family]),
            "--decoder",
            decoder,
            "--temperature",
            "0",
            "--allow-syntax-errors",
            input=source,
        )
        assert code == 0, err
        out[decoder] = json.loads(stdout)
    (seq,), (spec,) = out["sequential"]["edits"], out["assd"]["edits"]
    assert spec["text"] == seq["text"] and spec["score"] == pytest.approx(seq["score"], abs=1e-4)
    passes = out["assd"]["stats"]["nfe"], out["sequential"]["stats"]["nfe"]
    assert passes[0] < passes[1] if fewer else passes[0] <= passes[1]


def test_the_family_is_read_from_the_tokenizer() -> None:
    from infill.errors import ModelError
    from infill.models.fim import find_fim

    def lookup(vocab: list[str]) -> Any:
        return lambda token: vocab.index(token) if token in vocab else None

    codellama = find_fim(lookup(["<s>", "<PRE>", "<SUF>", "<MID>", "<EOT>"]))  # the spelling without "▁"
    assert codellama is not None and codellama.family == "codellama" and codellama.ids == (1, 2, 3)
    assert find_fim(lookup(["<s>", "a", "<MID>"])) is None  # one look-alike is an ordinary token
    with pytest.raises(ModelError, match="starcoder fill-in-the-middle tokens but not <fim_middle>"):
        find_fim(lookup(["<fim_prefix>", "<fim_suffix>"]))


def sentencepiece_tokenizer_folder(folder: Path) -> Path:
    """A Llama-style sentencepiece tokenizer.json (a BPE over "▁"-spelled pieces with byte fallback, whose
    normalizer puts "▁" before every text, as Llama's and Code Llama's do) with Code Llama's FIM tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    space = "\u2581"
    merges = [(space, space), (space * 2, space * 2), ("d", "e"), ("de", "f"), (space, "def"), (space, "f")]
    merges += [(space, "x"), ("r", "e"), ("re", "t"), ("ret", "u"), ("retu", "r"), ("retur", "n")]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for piece in [space, *"deftrunx():", *(a + b for a, b in merges)]:
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(space), normalizers.Replace(" ", space)])
    tok.decoder = decoders.Sequence([decoders.Replace(space, " "), decoders.ByteFallback(), decoders.Fuse()])
    fim = [AddedToken(space + t, special=True, normalized=False) for t in ("<PRE>", "<SUF>", "<MID>", "<EOT>")]
    tok.add_special_tokens([*fim, AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_a_sentencepiece_tokenizer_puts_no_space_before_a_suffix(tmp_path: Path) -> None:
    """A Llama-style tokenizer puts "▁" before every text it encodes: the suffix after <SUF> (or the text between
    two spans) began with a space the file does not have, which Code Llama never saw there. Text that follows
    other text now round-trips exactly; the prefix, which starts the prompt, keeps the space (`encode_start`)."""
    from infill.models.hf_folder import load_tokenizer

    tok = load_tokenizer(sentencepiece_tokenizer_folder(tmp_path / "spm"))
    for text in ["\n    return x\n", "def f(x):", " x", "x", "  "]:
        assert b"".join(tok.token_bytes(t) for t in tok.encode(text)) == text.encode(), text
    assert tok.hf.convert_ids_to_tokens(tok.encode("def f")) == ["def", "\u2581f"]
    assert tok.hf.convert_ids_to_tokens(tok.encode_start("def f")) == ["\u2581def", "\u2581f"]


def test_a_cut_prefix_keeps_its_start_while_the_user_types() -> None:
    """A prompt longer than the window loses the start of its prefix. For a left-to-right model (whose cache keeps
    a prompt up to its first changed token) the cut starts at a multiple of a step of tokens, so that typing at the
    end of the prefix keeps its first tokens: the cut moves once per step typed, not at every keystroke (which
    made llama.cpp evaluate the whole prompt again for every key in a long file). The AS-ARM kind, whose prompt
    is bidirectional, keeps cutting as late as the room allows."""
    from fixtures_cli import ByteTokenizer

    from infill.config import FillOptions
    from infill.core.kinds.ar import Autoregressive
    from infill.core.plan import STEADY_CUT, Window, plan_regions
    from infill.models.registry import LoadedModel
    from infill.spans import LineIndex, Span

    body = "".join(f"value_{i} = compute({i}, {i + 1})\n" for i in range(400))
    starts: dict[int, list[int]] = {0: [], 64: []}
    for typed in range(300):
        text = body + "total = " + "x" * typed
        data = (text + "\nprint(total)\n").encode()
        cursor = len(text.encode())
        for step in starts:
            window = Window(1024, has_bos=False, has_pad=True, groups_spans=False, steady_cut=step)
            span = Span(cursor, cursor, one_line=True)
            (region,) = plan_regions(data, [span], ByteTokenizer(), window, FillOptions(), [], LineIndex(data))
            kept = bytes(region.prefix_ids).decode()
            assert text.endswith(kept) and region.truncated
            starts[step].append(len(text) - len(kept))
    assert len(set(starts[0])) == 300  # as late as the room allows: a new first token at every key
    assert len(set(starts[64])) <= -(-300 // 64) + 1  # a multiple of 64: it moves every 64 keys (any phase)
    # at most a step less context, and the budget rounded up to a unit (64 here: infill.core.plan._steady_room)
    assert max(b - a for a, b in zip(starts[0], starts[64], strict=True)) < 64 + 64
    network = type("Causal", (), {"max_length": 4096, "bos_id": None, "pad_id": 0})()
    loaded = LoadedModel("m", "ar", network, ByteTokenizer(), {})
    assert Autoregressive().window(loaded).steady_cut == STEADY_CUT
