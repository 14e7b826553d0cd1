"""The XLNet backend builds the conditional independences the decoders rely on (docs/decoding.md, "The model")."""

from __future__ import annotations

import pytest
import torch

from infill.models.xlnet import XLNetAnySubset
from tests.fixtures_decode import tiny_xlnet

torch.set_num_threads(1)

MASK = 7
# positions 0 1 2 3 4 5 6 7: prompt at 0, 1, 4, 7; masked 2, 3, 5, 6 (decoding order)
IDS = torch.tensor([0, 1, MASK, MASK, 2, MASK, MASK, 3])
MASKED = torch.tensor([2, 3, 5, 6])


@pytest.fixture(params=[True, False], ids=["cached", "full-forward"])
def model(request: pytest.FixtureRequest) -> XLNetAnySubset:
    """Both paths: the prompt/KV cache and the full forward."""
    return tiny_xlnet(8, n_layer=2, d_model=16, seed=5, init_scale=0.5, cache=request.param)


def with_content(**pos_tok: int) -> torch.Tensor:
    ids = IDS.clone()
    for pos, tok in pos_tok.items():
        ids[int(pos[1:])] = tok
    return ids


def test_draft_targets_do_not_see_each_other(model: XLNetAnySubset) -> None:
    m = model
    targets = MASKED[1:]  # n = 1: position 2 decoded, targets 3, 5, 6
    base = m.draft(with_content(p2=4), MASKED, 1, targets)
    other = m.draft(with_content(p2=4, p3=5, p5=6, p6=0), MASKED, 1, targets)  # other targets' content
    assert torch.allclose(base, other, atol=1e-6)
    changed = m.draft(with_content(p2=5), MASKED, 1, targets)  # the decoded token is seen
    assert not torch.allclose(base, changed, atol=1e-4)


def test_verify_sees_only_earlier_targets(model: XLNetAnySubset) -> None:
    m = model
    targets = MASKED[1:]  # 3, 5, 6
    base = m.verify(with_content(p2=4, p3=1, p5=2, p6=3), MASKED, 1, targets)
    later = m.verify(with_content(p2=4, p3=1, p5=6, p6=0), MASKED, 1, targets)  # change 5 and 6
    assert torch.allclose(base[0], later[0], atol=1e-6)  # target 3 sees neither
    # target 5 sees neither its own content nor 6 (same 2 and 3, different 5 and 6):
    assert torch.allclose(base[1], m.verify(with_content(p2=4, p3=1, p5=6, p6=6), MASKED, 1, targets)[1], atol=1e-6)
    assert not torch.allclose(base[2], later[2], atol=1e-4)  # target 6 sees the draft at 5
    own = m.verify(with_content(p2=4, p3=1, p5=2, p6=5), MASKED, 1, targets)  # change 6's own content
    assert torch.allclose(base[2], own[2], atol=1e-6)  # never its own content
    earlier = m.verify(with_content(p2=4, p3=6, p5=2, p6=3), MASKED, 1, targets)
    assert not torch.allclose(base[1], earlier[1], atol=1e-4)  # target 5 sees the draft at 3


def test_lemma1_first_draft_equals_oracle(model: XLNetAnySubset) -> None:
    m = model
    for n in range(4):
        ids = with_content(p2=4, p3=1, p5=2, p6=3)
        ids[MASKED[n:]] = MASK
        targets = MASKED[n:]
        p = m.draft(ids, MASKED, n, targets)
        ids[targets] = torch.tensor([1, 2, 3, 4][: targets.shape[0]])
        q = m.verify(ids, MASKED, n, targets)
        assert torch.allclose(p[0], q[0], atol=1e-5)
        assert torch.isinf(p[:, MASK]).all() and torch.isinf(q[:, MASK]).all()  # <mask> logit is -inf


def test_undecoded_positions_outside_the_window_are_invisible(model: XLNetAnySubset) -> None:
    m = model
    a = m.verify(with_content(p2=4, p3=1), MASKED, 0, MASKED[:2])
    b = m.verify(with_content(p2=4, p3=1, p5=6, p6=0), MASKED, 0, MASKED[:2])
    assert torch.allclose(a, b, atol=1e-6)


def test_prompt_rows_never_see_masked_content(model: XLNetAnySubset) -> None:
    """The prompt's content-stream states are identical whatever the masked positions hold (prompt cache)."""
    m = model
    masked_bool = torch.zeros(1, IDS.shape[0], dtype=torch.bool)
    masked_bool[0, MASKED] = True
    prompt = ~masked_bool[0]

    prompt_pos = prompt.nonzero().squeeze(-1)

    def prompt_rows(ids: torch.Tensor) -> torch.Tensor:
        # query-stream rows at prompt positions see only the prompt's content states, at every layer
        return m.net.train_hidden(ids[None], masked_bool, prompt_pos[None])

    a = prompt_rows(with_content(p2=4, p3=1, p5=2, p6=3))
    b = prompt_rows(with_content(p2=0, p3=6, p5=5, p6=1))
    assert torch.allclose(a, b, atol=1e-6)
    c = prompt_rows(with_content(p0=3, p2=4, p3=1, p5=2, p6=3))  # negative control: a prompt token changes them
    assert not torch.allclose(a, c, atol=1e-3)


def test_nfe_counts_every_forward(model: XLNetAnySubset) -> None:
    m = model
    m.draft(IDS, MASKED, 0, MASKED)
    m.verify(IDS, MASKED, 0, MASKED)
    assert m.nfe == 2
