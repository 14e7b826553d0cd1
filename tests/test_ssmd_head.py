"""The SSMD head and decoder outside exactness: zero-initialisation identity, causality of the head, the
hidden-state forward, loading, the window schedule, pass counting, errors, and `infill fill --decoder ssmd`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import infill.decoding.ssmd as ssmd
from infill.config import DecodeConfig, ModelSpec
from infill.decoding.blockfill import generate
from infill.decoding.sampling import probs, sample
from infill.errors import DecodeError, ModelError
from infill.models.blockdiff import load_folder
from infill.models.ssmd import HEAD_FILE, causal_logits, identity_gap, read_head, save_head
from tests.fixtures_ssmd import MASK, folder_with_head, random_head, tiny_backend

torch.set_num_threads(1)
PROMPT = torch.tensor([0, 3, 1, 4, 2, 1])


def window_inputs(bk: object, n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (n, V), hidden (n, D)) of a real draft forward over a block of n masks."""
    st = bk.new_state()  # type: ignore[attr-defined]
    st.want_hidden = True
    bk.commit(st, PROMPT[:4], 4)  # type: ignore[attr-defined]
    logits = bk.draft(st, torch.full((n,), MASK))  # type: ignore[attr-defined]
    return logits, st.hidden


def test_zero_initialised_head_gives_p_nc_exactly() -> None:
    bk = tiny_backend(seed=1, memo=False)
    inner = bk.model
    emb, lm = inner.get_input_embeddings(), inner.get_output_embeddings()
    fresh = random_head(scale=0.0)
    assert identity_gap(fresh, lm, emb) == 0.0
    logits, hidden = window_inputs(bk)
    tokens = torch.tensor([1, 0, 4, 2])
    assert torch.equal(causal_logits(fresh, emb, lm, tokens, hidden, torch.arange(4), logits), logits)
    trained = random_head(scale=1.0)  # a nonzero output projection moves p_C away from p_NC ...
    moved = causal_logits(trained, emb, lm, tokens, hidden, torch.arange(4), logits)
    assert torch.equal(moved[0], logits[0]) and (moved[1:, :MASK] - logits[1:, :MASK]).abs().max() > 0.1
    assert identity_gap(trained, lm, emb) == 0.0  # ... and the check zeroes a copy, leaving the head as it was
    assert trained.out.weight.abs().max() > 0


def test_zero_initialised_decoding_reveals_the_factorized_draft() -> None:
    """With p_C == p_NC every draft is accepted: the window is the factorized sample itself."""
    bk = tiny_backend(seed=1, memo=False)
    inner, head = bk.model, random_head(scale=0.0)
    logits, hidden = window_inputs(bk)
    cfg = DecodeConfig(decoder="ssmd")

    def causal(tok: torch.Tensor) -> torch.Tensor:
        emb, lm = inner.get_input_embeddings(), inner.get_output_embeddings()
        return causal_logits(head, emb, lm, tok, hidden, torch.arange(4), logits)

    for seed in range(20):
        tokens, _, passes = ssmd.speculate_window(logits, causal, cfg, torch.Generator().manual_seed(seed), 1)
        assert passes == 1
        assert torch.equal(tokens, sample(probs(logits, 1.0), torch.Generator().manual_seed(seed)))


def test_causal_row_depends_only_on_earlier_tokens() -> None:
    bk = tiny_backend(seed=1, memo=False)
    inner, head = bk.model, random_head(scale=1.0)
    emb, lm = inner.get_input_embeddings(), inner.get_output_embeddings()
    logits, hidden = window_inputs(bk)
    a = causal_logits(head, emb, lm, torch.tensor([1, 2, 3, 4]), hidden, torch.arange(4), logits)
    b = causal_logits(head, emb, lm, torch.tensor([1, 2, 0, 0]), hidden, torch.arange(4), logits)
    assert torch.allclose(a[:3], b[:3], atol=1e-6) and not torch.allclose(a[3], b[3], atol=1e-3)


def test_hidden_state_forward_gives_the_same_logits() -> None:
    """want_hidden runs the base model and the LM head as two calls; the logits are those of one call."""
    bk = tiny_backend(seed=3, memo=False)
    outs = []
    for want in (False, True):
        st = bk.new_state()
        st.want_hidden = want
        drafted = bk.commit(st, PROMPT[:4], 4, draft_ids=torch.full((4,), MASK))
        outs.append((drafted, bk.draft(st, torch.tensor([2, MASK, MASK, 1])), st.hidden))
    assert torch.allclose(outs[0][0], outs[1][0], atol=1e-6) and torch.allclose(outs[0][1], outs[1][1], atol=1e-6)
    assert outs[0][2] is None and outs[1][2] is not None and outs[1][2].shape == (4, 16)
    lm = bk.model.get_output_embeddings()
    recomputed = lm(outs[1][2]).detach()  # the kept hidden rows are what the LM head read
    recomputed[:, MASK] = float("-inf")
    assert torch.allclose(recomputed, outs[1][1], atol=1e-5)


def test_cosine_window_grows_and_covers_the_block() -> None:
    for total in (3, 4, 8, 16, 32):
        masked, windows = total, []
        while masked:
            w = ssmd.cosine_window(masked, total)
            assert min(2, masked) <= w <= masked
            windows.append(w)
            masked -= w
        assert len(windows) <= max(1, -(-total // 3)) + 1  # about ceil(total / 3) full forwards
        assert windows[0] <= max(windows)
    assert [ssmd.cosine_window(m, 16) for m in (16, 14, 11, 7, 3)] == [2, 3, 4, 4, 3]


def test_decode_counts_passes_both_ways() -> None:
    bk = tiny_backend(seed=4, head=random_head(scale=1.0))
    cfg = DecodeConfig(decoder="ssmd", block_size=8, ssmd_passes=3, ssmd_window=6)
    tokens, st = generate(bk, PROMPT, 14, cfg, torch.Generator().manual_seed(0))
    assert tokens.numel() == 14 and int((tokens == MASK).sum()) == 0
    ex = st.extra
    assert st.nfe == sum(ex["forwards"].values()) and ex["windows"] == len(st.accepted) == ex["steps"]
    assert sum(st.accepted) == 14 and min(st.accepted) >= 1
    assert ex["head_passes"] >= ex["windows"] - st.accepted.count(1)
    extra = ex["nfe_plain"] - st.nfe - ex["windows"] + st.accepted.count(1)  # head passes after the first
    assert ex["nfe_plain"] == st.nfe + ex["head_passes"]
    assert ex["nfe_paper"] == pytest.approx(st.nfe + max(extra, 0) / 3)  # L = 2 base layers + the head


def test_errors() -> None:
    bare = tiny_backend(seed=0, head=None)
    with pytest.raises(DecodeError, match="needs an SSMD head"):
        generate(bare, PROMPT, 4, DecodeConfig(decoder="ssmd"), torch.Generator())
    with_head = tiny_backend(seed=0, head=random_head(max_block=8))
    with pytest.raises(DecodeError, match="at most 8"):
        generate(with_head, PROMPT, 4, DecodeConfig(decoder="ssmd", block_size=16), torch.Generator())


def test_loader_attaches_checks_and_rejects(tmp_path: Path) -> None:
    folder = folder_with_head(tmp_path / "m")
    loaded = load_folder(folder, ModelSpec(name=str(folder), device="cpu", bf16=False))
    assert loaded.model.ssmd_head is not None and loaded.info["ssmd_head"] > 0
    head, prov = read_head(folder / HEAD_FILE)
    assert prov == {"random": True}
    with torch.no_grad():
        head.inp.weight.fill_(float("nan"))  # a corrupt head fails the zero-initialisation check
    save_head(folder / HEAD_FILE, head)
    with pytest.raises(ModelError, match="does not reproduce p_NC"):
        load_folder(folder, ModelSpec(name=str(folder), device="cpu", bf16=False))
    (folder / HEAD_FILE).write_bytes(b"not safetensors")
    with pytest.raises(ModelError, match="not an SSMD head file"):
        load_folder(folder, ModelSpec(name=str(folder), device="cpu", bf16=False))
    (folder / HEAD_FILE).unlink()
    assert load_folder(folder, ModelSpec(name=str(folder), device="cpu", bf16=False)).model.ssmd_head is None


def test_infill_fill_with_decoder_ssmd(tmp_path: Path) -> None:
    from infill.cli import main

    folder = folder_with_head(tmp_path / "m")
    src = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
    path = tmp_path / "ex.py"
    path.write_text(src)
    args = ["fill", str(path), "--model", str(folder), "--span", "2:2", "--no-syntax-check", "-o", "-"]
    args += ["--allow-syntax-errors", "--decoder", "ssmd", "--stats", "--tokens", "12"]
    result = CliRunner().invoke(main, [*args, "--causal-passes", "2", "--window", "3"])
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines(keepends=True)
    assert out[0] == "def add(a, b):\n" and "".join(out[-3:]) == "\n\nprint(add(1, 2))\n"
    assert "decoder=ssmd" in result.stderr
    bare = folder_with_head(tmp_path / "bare")
    (bare / HEAD_FILE).unlink()  # a separate folder: the first one stays loaded, with its head, in this process
    missing = CliRunner().invoke(main, [*args[:3], str(bare), *args[4:]])
    assert missing.exit_code == 2
    lines = [line for line in missing.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs an SSMD head" in lines[0]


def test_server_fill_request_with_decoder_ssmd(tmp_path: Path) -> None:
    """The server's flat fill params carry the SSMD fields to the same fill path."""
    from infill.commands.fill import run_fill
    from infill.server.handlers import fill_request

    folder = folder_with_head(tmp_path / "m")
    params = {"text": "x = 1\n\ny = 2\n", "span": "2:2", "decoder": "ssmd", "ssmd_passes": 1, "ssmd_window": 3}
    params |= {"tokens": 8, "model": str(folder), "device": "cpu", "syntax_check": False, "temperature": 0}
    request = fill_request(params)
    assert request["decode"]["ssmd_passes"] == 1 and request["decode"]["ssmd_window"] == 3
    request["options"]["allow_syntax_errors"] = True  # a random model's fill may split a UTF-8 character
    out = run_fill(request)
    assert out["exit_code"] == 0, out["stderr"]
    assert out["result"]["stats"]["decoder"] == "ssmd" and out["result"]["stats"]["nfe"] > 0


def test_packaged_model_ships_its_head() -> None:
    """--model blockdiff loads with its head; the head's recorded held-out causal cross-entropy is below the
    non-causal one (the reason it ships), and it decodes."""
    from infill.api import load_model

    loaded = load_model(ModelSpec(name="blockdiff", device="cpu", bf16=False))
    head = loaded.model.ssmd_head
    assert head is not None and loaded.info["ssmd_head"] == head.parameters_count < 2_000_000
    _, prov = read_head(Path(str(loaded.info["path"])) / HEAD_FILE)
    held = prov["heldout"]["all"]
    assert held["targets"] > 1000 and held["causal"] < held["noncausal"] - 0.1
    prompt = torch.tensor(loaded.tokenizer.encode("def add(a, b):\n    return"))
    tokens, st = generate(loaded.model, prompt, 8, DecodeConfig(decoder="ssmd", temperature=0.0), torch.Generator())
    assert tokens.numel() <= 8 and st.tokens > 0 and st.extra["head_passes"] > 0
