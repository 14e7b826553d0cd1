"""infill's two-stream XLNet forward against transformers' XLNetLMHeadModel on random weights."""

from __future__ import annotations

import pytest
import torch

from infill.models import masks
from infill.models.twostream import TwoStreamXLNet, XLNetShape

SHAPE = XLNetShape(vocab_size=300, d_model=64, n_layer=3, n_head=4, d_inner=128)


@pytest.fixture(scope="module")
def pair() -> tuple[torch.nn.Module, TwoStreamXLNet]:
    from transformers import XLNetConfig, XLNetLMHeadModel

    torch.manual_seed(0)
    config = SHAPE.hf_config(pad_id=0, bos_id=2)
    hf = XLNetLMHeadModel(XLNetConfig(**{k: v for k, v in config.items() if k != "architectures"})).eval()
    with torch.no_grad():  # random biases and norms too, so every parameter matters
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    ours = TwoStreamXLNet(XLNetShape.from_config(config)).eval()
    ours.load_file_state({k: v for k, v in hf.state_dict().items() if k != "lm_loss.weight"})
    return hf, ours


def _batch(seed: int, B: int = 3, N: int = 40) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, SHAPE.vocab_size, (B, N), generator=g)
    masked = torch.rand(B, N, generator=g) < 0.4
    masked[:, 0] = False  # <bos> stays visible
    rows = [masked[b].nonzero().squeeze(-1) for b in range(B)]
    targets = torch.full((B, max(len(r) for r in rows) + 2), -1)  # padded target rows, as collate makes them
    for b, r in enumerate(rows):
        targets[b, : len(r)] = r
    labels = torch.where(targets >= 0, ids.gather(1, targets.clamp(min=0)), torch.full_like(targets, -100))
    return {"ids": ids, "masked": masked, "targets": targets, "labels": labels}


def _hf_nll(hf: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    N = batch["ids"].shape[1]
    out = hf(
        input_ids=batch["ids"],
        perm_mask=masks.perm_mask(batch["masked"]),
        target_mapping=masks.target_mapping(batch["targets"], N),
        use_mems=False,
    )
    logits = out.logits
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=-100, reduction="none"
    )
    return nll.reshape(batch["labels"].shape)


@pytest.mark.parametrize("packed", [True, False])  # per sequence (CPU) and padded in one product (GPU)
@pytest.mark.parametrize("seed", [0, 1])
def test_loss_and_gradients_match_transformers(
    pair: tuple[torch.nn.Module, TwoStreamXLNet], seed: int, packed: bool
) -> None:
    hf, ours = pair
    batch = _batch(seed)
    hf.zero_grad()
    ours.zero_grad()
    a, b = _hf_nll(hf, batch), ours.target_nll(batch, packed=packed)
    assert a.abs().sum() > 10  # real losses, not padding
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)
    a.sum().backward()
    b.sum().backward()
    theirs = dict(hf.named_parameters())
    checked = 0
    for name, p in ours.named_parameters():
        if theirs[name].grad is None:  # segment parameters: unused by both
            assert p.grad is None or not p.grad.any(), name
            continue
        assert torch.allclose(p.grad, theirs[name].grad, atol=1e-5, rtol=1e-4), name
        checked += 1
    assert checked >= 3 * 11 + 3  # every layer's weights, the embeddings, mask_emb and the head


def test_logits_match_with_one_long_sequence(pair: tuple[torch.nn.Module, TwoStreamXLNet]) -> None:
    """A different length than the other tests: the relative-distance table is built per length."""
    hf, ours = pair
    batch = _batch(7, B=1, N=97)
    with torch.no_grad():
        assert torch.allclose(_hf_nll(hf, batch), ours.target_nll(batch), atol=1e-5, rtol=1e-5)


def test_negative_control_a_wrong_mask_is_detected(pair: tuple[torch.nn.Module, TwoStreamXLNet]) -> None:
    """The comparison has power: letting targets see their own token changes the loss far beyond tolerance."""
    hf, ours = pair
    batch = _batch(3)
    leaky = dict(batch, masked=torch.zeros_like(batch["masked"]))  # every position "prompt": targets see themselves
    with torch.no_grad():
        assert not torch.allclose(_hf_nll(hf, batch), ours.target_nll(leaky), atol=1e-2)
