"""Model folders: the tiny checkpoint builder, offline loading, model_type dispatch, clear ModelErrors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from infill.config import DecodeConfig, ModelSpec
from infill.core.kinds import load
from infill.decoding import decode
from infill.errors import ModelError
from infill.models import loading
from infill.models.base import FillProblem
from infill.models.registry import LoadedModel
from infill.models.tiny import build_tiny_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model", seed=2, init_scale=0.5)


def test_tiny_checkpoint_folder_format(tiny: Path) -> None:
    assert {p.name for p in tiny.iterdir()} == {"config.json", "model.safetensors", "tokenizer.json"}
    cfg = json.loads((tiny / "config.json").read_text())
    assert cfg["model_type"] == "xlnet"
    assert cfg["infill"]["tokenizer"] == "byte-bpe"
    assert (cfg["infill"]["pad_id"], cfg["infill"]["mask_id"], cfg["infill"]["bos_id"]) == (0, 1, 2)


def test_load_folder_and_fill_end_to_end(tiny: Path) -> None:
    lm = load(ModelSpec(name=str(tiny), device="cpu", bf16=False))
    assert lm.kind == "asarm" and lm.info["parameters"] > 0 and "random tiny XLNet" in lm.info["provenance"]
    tok, model = lm.tokenizer, lm.model
    prefix, suffix = tok.encode("def mean(values):\n    total = "), tok.encode("\n    return total\n")
    ids = torch.tensor([tok.bos_id, *prefix, *[tok.mask_id] * 6, *suffix])
    masked = torch.arange(len(prefix) + 1, len(prefix) + 7)
    problem = FillProblem(ids, masked, span_of=torch.zeros(6, dtype=torch.long))
    tokens, stats = decode(model, problem, DecodeConfig(k=4), torch.Generator().manual_seed(0))
    assert tokens.shape == (6,) and stats.tokens == 6 and 1 <= stats.nfe <= 6
    assert isinstance(tok.decode(tokens.tolist()), str)


def test_bf16_autocast_runs_and_stays_close(tiny: Path) -> None:
    from infill.hardware import fast_bf16

    fp32 = load(ModelSpec(name=str(tiny), device="cpu", bf16=False)).model
    bf16 = load(ModelSpec(name=str(tiny), device="cpu", bf16=True)).model
    assert bf16.bf16 == fast_bf16("cpu")  # asked for, used only where bf16 is fast (AMX / AVX512-BF16)
    ids = torch.tensor([2, 40, 41, 1, 1, 1, 42])
    masked = torch.tensor([3, 4, 5])
    a = torch.softmax(fp32.verify(ids, masked, 0, masked), -1)
    b = torch.softmax(bf16.verify(ids, masked, 0, masked), -1)
    assert b.dtype == torch.float32 and next(bf16.net.parameters()).dtype == torch.float32  # fp32 weights
    assert (a - b).abs().max() < 0.05


def test_corrupt_weights_are_a_model_error(tiny: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tiny, bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelError, match="cannot load XLNet weights"):
        load(ModelSpec(name=str(bad), device="cpu"))


def test_missing_default_is_a_model_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(loading, "WEIGHTS_DIR", tmp_path)
    with pytest.raises(ModelError, match="default model is missing"):
        load(ModelSpec(name="default"))


def test_default_loads_from_the_packaged_folder(monkeypatch: pytest.MonkeyPatch, tiny: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny, tmp_path / "default")
    monkeypatch.setattr(loading, "WEIGHTS_DIR", tmp_path)
    lm = load(ModelSpec(name="default", device="cpu"))
    assert lm.info["source"] == "packaged default"


@pytest.mark.parametrize("name", ["./no/such/folder", "nobody-xyz/no-such-model-1234"])
def test_unknown_names_never_download(name: str) -> None:
    with pytest.raises(ModelError):
        load(ModelSpec(name=name, device="cpu"))


def test_not_a_model_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no config.json"):
        load(ModelSpec(name=str(tmp_path)))


@pytest.mark.parametrize(
    ("config", "module", "kind"),
    [
        ('{"model_type": "qwen3", "block_size": 4}', "blockdiff", "blockdiff"),  # a block size: block diffusion
        ('{"model_type": "sdar"}', "blockdiff", "blockdiff"),
        ('{"model_type": "qwen3"}', "autoregressive", "ar"),  # no mark of diffusion: a left-to-right model
    ],
)
def test_other_model_types_go_to_their_backend(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, config: str, module: str, kind: str
) -> None:
    import importlib

    (tmp_path / "config.json").write_text(config)
    calls: list[Path] = []

    def load_folder(path: Path, spec: ModelSpec, **options: object) -> LoadedModel:
        calls.append(path)
        return LoadedModel(name=spec.name, kind=kind, model=None, tokenizer=None)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.import_module(f"infill.models.{module}"), "load_folder", load_folder)
    assert load(ModelSpec(name=str(tmp_path))).kind == kind
    assert calls == [tmp_path]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_a_model_error(tiny: Path) -> None:
    with pytest.raises(ModelError, match="no CUDA device"):
        load(ModelSpec(name=str(tiny), device="cuda"))
