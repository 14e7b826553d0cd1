"""`infill train block-diffusion`: the 2N layout matches inference, FIM examples, a few-step smoke run."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from infill.commands.train_blockdiff import block_diffusion
from infill.config import DecodeConfig, ModelSpec
from infill.decoding.blockfill import fill_middle
from infill.models.blockdiff import BlockDiffModel, load_folder
from infill.models.blockdiff_folder import ModelShape, build_model, build_tokenizer
from infill.training.blockdiff import Specials, fim_example, noise, two_stream_mask

torch.set_num_threads(1)
TINY = ModelShape(hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_length=64)


def test_two_stream_mask_structure() -> None:
    m = two_stream_mask(6, 2).int()  # blocks {0,1} {2,3} {4,5}; rows/cols [noisy 0..5 ; clean 0..5]
    assert m[2, :6].tolist() == [0, 0, 1, 1, 0, 0]  # noisy row sees its own noisy block
    assert m[2, 6:].tolist() == [1, 1, 0, 0, 0, 0]  # ... and earlier clean blocks only
    assert m[6 + 2, :6].sum() == 0  # clean rows never see noisy tokens
    assert m[6 + 2, 6:].tolist() == [1, 1, 1, 1, 0, 0]  # clean rows: block-causal
    ar = two_stream_mask(4, 1).int()  # block size 1: the noisy stream is AR with a mask at the target
    assert ar[2, :4].tolist() == [0, 0, 1, 0] and ar[2, 4:].tolist() == [1, 1, 0, 0]


def test_training_view_equals_inference_view() -> None:
    """The noisy stream's predictions in the one-forward 2N layout equal the decoder's draft of that block
    over a KV cache holding the clean earlier blocks."""
    model = build_model(50, TINY, seed=3).eval()
    mask_id, block, length = 49, 4, 12
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 48, (1, length), generator=gen)
    xt, _ = noise(x0, torch.tensor([2]), block, mask_id, 0.3, gen)
    ids = torch.cat([xt, x0], dim=1)
    pos = torch.cat([torch.arange(length), torch.arange(length)])[None]
    with torch.no_grad():
        h = model.model(input_ids=ids, position_ids=pos, attention_mask=two_stream_mask(length, block)[None, None])
        train_logits = model.lm_head(h.last_hidden_state[0, :length])  # (L, V)
    bk = BlockDiffModel(model, mask_id=mask_id)
    for b in range(length // block):
        state = bk.new_state()
        if b:
            bk.commit(state, x0[0, : b * block], block, kind="prefill")
        got = bk.draft(state, xt[0, b * block : (b + 1) * block])
        want = train_logits[b * block : (b + 1) * block]
        assert (got - want)[:, :mask_id].abs().max() <= 1e-5


def test_fim_example_layout_and_noise_spares_the_prompt() -> None:
    sp = Specials(end=0, mask=1, fim_prefix=2, fim_suffix=3, fim_middle=4)
    rng = random.Random(0)
    doc = list(range(10, 60))
    for _ in range(20):
        seq, resp = fim_example(doc, sp, 32, rng, fim_rate=1.0, max_middle=8)
        assert len(seq) == 32 and seq[0] == sp.fim_prefix and seq[resp - 1] == sp.fim_middle
        middle_and_end = seq[resp:]
        assert sp.end in middle_and_end
        n_mid = middle_and_end.index(sp.end)
        assert 1 <= n_mid <= 8 and all(t == sp.end for t in middle_and_end[n_mid:])
        pre, suf = seq[1 : seq.index(sp.fim_suffix)], seq[seq.index(sp.fim_suffix) + 1 : resp - 1]
        window = pre + middle_and_end[:n_mid] + suf  # the document window, put back together
        assert window == list(range(window[0], window[0] + len(window)))
        x0 = torch.tensor([seq])
        xt, w = noise(x0, torch.tensor([resp]), 4, sp.mask, 0.5, torch.Generator().manual_seed(1))
        assert torch.equal(xt[0, :resp], x0[0, :resp]) and w[0, :resp].sum() == 0
        assert torch.equal(w[0] > 0, xt[0] == sp.mask)


def test_train_command_smoke(tmp_path: Path) -> None:
    data = tmp_path / "src"
    data.mkdir()
    (data / "a.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n" * 3)
    (data / "b.py").write_text("for i in range(10):\n    print(i * i)\n" * 4)
    asarm_tok = build_tokenizer([(data / "a.py").read_text()], vocab_size=280)  # stands in for the AS-ARM's
    tok_path = tmp_path / "tokenizer.json"
    asarm_tok.save(str(tok_path))
    out = tmp_path / "model"
    args = ["--data", str(data), "--out", str(out), "--tokenizer", str(tok_path), "--steps", "3"]
    args += ["--batch-size", "2", "--seq-len", "32", "--hidden", "32", "--layers", "1", "--heads", "2"]
    args += ["--kv-heads", "1", "--log-every", "1", "--block-sizes", "1,4"]
    result = CliRunner().invoke(block_diffusion, args)
    assert result.exit_code == 0, result.output
    provenance = json.loads((out / "config.json").read_text())["infill"]["provenance"]
    assert provenance["steps"] == 3 and provenance["tokens_seen"] == 3 * 2 * 32
    loaded = load_folder(out, ModelSpec(device="cpu", bf16=False))
    assert loaded.tokenizer.token_id("def") == asarm_tok.token_to_id("def")  # the reused vocabulary is kept
    cfg = DecodeConfig(decoder="s2d2", block_size=4, temperature=0.0)
    text, stats = fill_middle(loaded, "def add(a, b):\n    return ", "\n", 6, cfg, torch.Generator())
    assert stats.tokens <= 6 and loaded.tokenizer.decode([loaded.model.mask_id]) not in text
    bad = CliRunner().invoke(block_diffusion, ["--data", str(data), "--out", str(out), "--block-sizes", "0"])
    assert bad.exit_code != 0
    # --warmup: the learning rate of step 1 rises over that many steps (without it, over a tenth of --steps: 1)
    rates = []
    for warmup in ([], ["--warmup", "3"]):
        again = CliRunner().invoke(block_diffusion, [*args, "--out", str(tmp_path / "again"), "--lr", "0.003", *warmup])
        assert again.exit_code == 0, again.output
        rates.append(float(re.search(r"step 1/3 .* lr (\S+)", again.output).group(1)))  # type: ignore[union-attr]
    assert rates[1] == pytest.approx(rates[0] / 3, rel=0.02)


def test_line_middles_are_whole_lines_and_loss_on_all_noises_the_prompt() -> None:
    """--line-rate cuts the middle at line breaks (as `--span N:M` replaces 1-3 whole lines without the last
    break); --loss-on all makes every token after <fim_prefix> a response token."""
    sp = Specials(end=0, mask=1, fim_prefix=2, fim_suffix=3, fim_middle=4)
    nl = 5
    doc = [t for i in range(12) for t in (10 + i, 30 + i, 50 + i, nl)]  # 12 lines of three tokens and a break
    rng = random.Random(0)
    for _ in range(20):
        seq, resp = fim_example(doc, sp, 64, rng, 1.0, 16, loss_on="all", line_rate=1.0, newlines=frozenset({nl}))
        assert resp == 1
        middle = seq[seq.index(sp.fim_middle) + 1 : seq.index(sp.end, seq.index(sp.fim_middle))]
        prefix = seq[1 : seq.index(sp.fim_suffix)]
        suffix = seq[seq.index(sp.fim_suffix) + 1 : seq.index(sp.fim_middle)]
        assert middle and middle[-1] != nl and middle.count(nl) <= 2  # 1-3 lines, the last break left out
        assert not prefix or prefix[-1] == nl  # the middle starts a line
        assert suffix[:1] == [nl]  # ... and ends one
        x0 = torch.tensor([seq])
        xt, w = noise(x0, torch.tensor([resp]), 4, sp.mask, 1.0, torch.Generator().manual_seed(1))
        assert bool((xt[0, 1:] == sp.mask).all()) and int(xt[0, 0]) == sp.fim_prefix  # t = 1: all but the first


def test_init_and_resume_continue_a_run(tmp_path: Path) -> None:
    """--init starts from a folder's weights; --run-dir resumes a stopped run at its step, with its optimizer
    (Adam's step count goes on from 2 to 4 instead of restarting) and its provenance."""
    from infill.training.checkpoints import read_checkpoint

    data = tmp_path / "src"
    data.mkdir()
    (data / "a.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n" * 3)
    tok_path = tmp_path / "tokenizer.json"
    build_tokenizer([(data / "a.py").read_text()], vocab_size=280).save(str(tok_path))
    common = ["--data", str(data), "--batch-size", "2", "--seq-len", "32", "--log-every", "1", "--block-sizes", "1,4"]
    first = tmp_path / "first"
    shape = ["--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1"]
    ok = CliRunner().invoke(
        block_diffusion, [*common, *shape, "--tokenizer", str(tok_path), "--out", str(first), "--steps", "1"]
    )
    assert ok.exit_code == 0, ok.output
    run, out = tmp_path / "run", tmp_path / "continued"
    init_weights = load_folder(first, ModelSpec(device="cpu", bf16=False)).model.model.state_dict()
    outputs, steps_seen = [], []
    for steps in (2, 4):
        args = [*common, "--init", str(first), "--out", str(out), "--steps", str(steps), "--run-dir", str(run)]
        result = CliRunner().invoke(block_diffusion, args)
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
        ckpt = read_checkpoint(run / "last.pt")
        steps_seen.append((ckpt["step"], int(next(iter(ckpt["optimizer"]["state"].values()))["step"])))
    assert "resumed" not in outputs[0] and "at step 2" in outputs[1]
    assert steps_seen == [(2, 2), (4, 4)]
    after = load_folder(out, ModelSpec(device="cpu", bf16=False)).model.model.state_dict()
    assert any(not torch.equal(after[k], v) for k, v in init_weights.items())
    prov = json.loads((out / "config.json").read_text())["infill"]["provenance"]
    assert prov["steps"] == 4 and prov["prior_steps"] == 1 and prov["init"] == str(first)


def test_training_from_a_pack_in_bf16_shards(tmp_path: Path) -> None:
    """The GPU recipe's pieces on CPU: `infill train pack` (the AS-ARM tokenizer) feeds the block-diffusion
    trainer the corpus's own training documents; the model is saved as bf16 shards that load for fills and as
    --init of a further run. A pack from another tokenizer, a pack beside other data, or a pack without a
    tokenizer is one clear error; so is --device cuda where torch has no GPU."""
    from infill.models.weight_files import INDEX, read_weights
    from infill.training.blockdiff import pack_documents, with_specials
    from infill.training.corpus import balanced_records
    from infill.training.streams import pack_streams
    from infill.training.tokenizer import encode_documents, save_tokenizer, train_tokenizer
    from tests.fixtures_train import sample_texts, write_corpus

    corpus = write_corpus(tmp_path / "corpus", sample_texts(30), sample_texts(40)[30:])
    tok = train_tokenizer(sample_texts(), vocab_size=400)  # the AS-ARM's kind: <pad> <mask> <bos> first
    tok_path = tmp_path / "tokenizer.json"
    save_tokenizer(tok, tok_path)
    pack = tmp_path / "pack.npz"
    pack_streams(tok, tok_path, corpus, pack, 6_000_000, max_mb=1.0)

    extended = with_specials(train_tokenizer(sample_texts(), vocab_size=400))  # + the block-diffusion specials
    docs = pack_documents(pack, extended)
    texts = [r["text"] for r in balanced_records(corpus, "train", 6_000_000)]
    assert sorted(map(list, docs)) == sorted(map(list, encode_documents(extended, texts, min_tokens=2)))

    out = tmp_path / "model"
    args = ["--data", str(pack), "--out", str(out), "--tokenizer", str(tok_path), "--steps", "2"]
    args += ["--batch-size", "2", "--seq-len", "32", "--hidden", "32", "--layers", "1", "--heads", "2"]
    args += ["--kv-heads", "1", "--block-sizes", "1,4", "--save-dtype", "bfloat16", "--shard-mb", "0.08"]
    result = CliRunner().invoke(block_diffusion, args)
    assert result.exit_code == 0, result.output
    shards = sorted(out.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 2 and (out / INDEX).is_file() and not (out / "model.safetensors").exists()
    assert all(s.stat().st_size <= 0.08e6 for s in shards)
    from safetensors import safe_open

    with safe_open(str(shards[0]), "pt") as f:
        assert all(f.get_tensor(k).dtype == torch.bfloat16 for k in f.keys())  # noqa: SIM118
    prov = json.loads((out / "config.json").read_text())["infill"]["provenance"]
    assert prov["pack"] == str(pack) and prov["documents"] == len(docs)
    loaded = load_folder(out, ModelSpec(device="cpu", bf16=False))
    weights = read_weights(out)
    loaded_embed = next(v for k, v in loaded.model.model.state_dict().items() if k.endswith("embed_tokens.weight"))
    assert torch.equal(loaded_embed, weights["model.embed_tokens.weight"])  # the shards are what loads
    again_args = ["--data", str(pack), "--init", str(out), "--out", str(tmp_path / "m2"), "--steps", "1"]
    again = CliRunner().invoke(block_diffusion, [*again_args, "--batch-size", "2", "--seq-len", "32"])
    assert again.exit_code == 0, again.output

    from infill.cli import main

    def one_line_error(extra: list[str]) -> str:
        result = CliRunner().invoke(main, ["train", "block-diffusion", *extra])
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
        return errors[0]

    other = train_tokenizer(["x = 1\n" * 50, "y = [2]\n" * 50], vocab_size=300)
    other_path = tmp_path / "other.json"
    save_tokenizer(other, other_path)
    assert "another tokenizer" in one_line_error([*args[:4], "--tokenizer", str(other_path), "--steps", "1"])
    assert "only --data" in one_line_error(["--data", str(pack), "--data", str(tok_path), *args[2:]])
    assert "--tokenizer" in one_line_error(["--data", str(pack), "--out", str(out)])
    if not torch.cuda.is_available():
        assert "no CUDA device" in one_line_error([*args, "--device", "cuda"])


def test_a_signal_stops_a_run_with_its_folder_and_checkpoint(tmp_path: Path) -> None:
    """Ctrl-C, SIGTERM or SIGUSR1 end a block-diffusion run after the current step and save what it learnt, as
    `infill train asarm` does; the run was lost whole (no --out folder, no --run-dir checkpoint to resume)."""
    import os
    import signal
    import threading
    import time

    from infill.training.checkpoints import read_checkpoint

    data = tmp_path / "src"
    data.mkdir()
    (data / "a.py").write_text("def add(a, b):\n    return a + b\n" * 3)

    sent: list[bool] = []

    def send_when_listening() -> None:  # the default action of SIGUSR1 would end the test process
        for _ in range(2000):
            if signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGUSR1)
                sent.append(True)
                return
            time.sleep(0.01)

    # --time-limit only ends a run that listens to no signal (half a minute)
    args = ["--data", str(data), "--batch-size", "2", "--seq-len", "32", "--steps", "100000", "--time-limit", "0.5"]
    args += ["--vocab-size", "512"]
    args += ["--hidden", "16", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--log-every", "100000"]
    sender = threading.Thread(target=send_when_listening)
    sender.start()
    try:
        result = CliRunner().invoke(
            block_diffusion, [*args, "--out", str(tmp_path / "m"), "--run-dir", str(tmp_path / "r")]
        )
    finally:
        sender.join()
    assert result.exit_code == 0 and sent, result.output  # the run listened, and stopped when told
    assert "time limit" not in result.output, result.output
    step = int(read_checkpoint(tmp_path / "r" / "last.pt")["step"])
    assert 0 < step < 100_000
    assert json.loads((tmp_path / "m" / "config.json").read_text())["infill"]["provenance"]["steps"] == step
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the handler is restored
