"""An SDAR-layout checkpoint loads into the stock Qwen3 class from a local folder, without ever running remote
code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from infill.config import ModelSpec
from infill.errors import InputError, ModelError
from infill.models.blockdiff import BlockDiffModel, load_folder
from infill.models.tiny import tiny_blockdiff_checkpoint as tiny_checkpoint

torch.set_num_threads(1)
CPU = dict(device="cpu", bf16=False)


@pytest.fixture(scope="module")
def sdar_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tiny_checkpoint(tmp_path_factory.mktemp("sdar"), block_size=8)
    sentinel = folder / "REMOTE_CODE_RAN"
    trap = f"open({str(sentinel)!r}, 'w').write('ran')\nraise RuntimeError('remote code executed')\n"
    (folder / "modeling_sdar.py").write_text(trap)
    (folder / "configuration_sdar.py").write_text(trap)
    return folder


def test_sdar_folder_loads_into_stock_qwen3(sdar_folder: Path) -> None:
    raw = json.loads((sdar_folder / "config.json").read_text())
    assert raw["model_type"] == "sdar" and "auto_map" in raw  # really the SDAR layout
    loaded = load_folder(sdar_folder, ModelSpec(name="tiny-sdar", **CPU))
    assert not (sdar_folder / "REMOTE_CODE_RAN").exists()
    assert loaded.kind == "blockdiff" and loaded.name == "tiny-sdar"
    bk = loaded.model
    assert isinstance(bk, BlockDiffModel)
    assert type(bk.model).__name__ == "Qwen3ForCausalLM" and type(bk.model).__module__.startswith("transformers.")
    assert not bk.shifted and bk.block_size == 8 and loaded.info["block_size"] == 8
    assert bk.mask_id == loaded.tokenizer.token_id("<|MASK|>")
    assert loaded.tokenizer.token_id("<|endoftext|>") in bk.end_ids
    saved = load_file(str(sdar_folder / "model.safetensors"))
    state = bk.model.state_dict()
    for name, tensor in saved.items():  # Qwen3 tensor names, same values
        assert torch.equal(state[name], tensor), name
    text = "def f(x):\n    return <|MASK|> + x  # é\n"
    ids = loaded.tokenizer.encode(text)
    assert bk.mask_id not in ids  # user text never becomes a special token
    assert loaded.tokenizer.decode(ids) == text


def test_flags_override_config(sdar_folder: Path) -> None:
    loaded = load_folder(sdar_folder, ModelSpec(**CPU), mask_token="<|im_end|>", block_size=2, shifted=True)
    assert loaded.model.mask_id == loaded.tokenizer.token_id("<|im_end|>")
    assert loaded.model.mask_id not in loaded.model.end_ids
    assert loaded.model.block_size == 2 and loaded.model.shifted
    with pytest.raises(InputError, match="not in the tokenizer"):
        load_folder(sdar_folder, ModelSpec(**CPU), mask_token="<|nope|>")


def test_mask_token_found_without_infill_section(tmp_path: Path) -> None:
    """A released SDAR config has no "infill" section: the mask token comes from the tokenizer."""
    folder = tiny_checkpoint(tmp_path / "m")
    raw = json.loads((folder / "config.json").read_text())
    del raw["infill"]
    raw["model_type"] = "sdar"
    (folder / "config.json").write_text(json.dumps(raw))
    loaded = load_folder(folder, ModelSpec(**CPU))
    assert loaded.model.mask_id == loaded.tokenizer.token_id("<|MASK|>")
    assert loaded.model.block_size == 4  # the default when nothing says otherwise


def test_bad_folders_are_model_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        load_folder(tmp_path / "missing", ModelSpec(**CPU))
    folder = tiny_checkpoint(tmp_path / "m")
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "model_type": "mamba"}))
    with pytest.raises(ModelError, match="unsupported model_type"):
        load_folder(folder, ModelSpec(**CPU))
    (folder / "config.json").write_text(json.dumps(raw))
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelError):
        load_folder(folder, ModelSpec(**CPU))
