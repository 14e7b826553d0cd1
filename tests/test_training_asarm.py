"""AS-ARM training: mask layouts, end-of-fill pads, the joint loss, learning, resuming, export."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from infill.errors import InputError
from infill.training.asarm import (
    Batches,
    LayoutSampler,
    ModelShape,
    TrainConfig,
    build_model,
    collate,
    joint_loss,
    line_break_ids,
    token_strings,
    tokenize_stream,
    train,
)
from infill.training.checkpoints import export_model, load_checkpoint_model, read_checkpoint
from infill.training.measure import evaluate
from infill.training.tokenizer import BOS_ID, PAD_ID, save_tokenizer
from tests.fixtures_train import sample_texts, tiny_tokenizer, write_corpus  # noqa: F401

SHAPE = ModelShape(vocab_size=400, d_model=32, n_layer=2, n_head=2, d_inner=64)


def _sampler(tok, seed: int = 0) -> LayoutSampler:  # type: ignore[no-untyped-def]
    return LayoutSampler(token_strings(tok), line_break_ids(tok), np.random.default_rng(seed))


def _examples(tok, count: int = 300, seq_len: int = 96):  # type: ignore[no-untyped-def]
    stream = tokenize_stream(tok, sample_texts(8))
    batches = Batches(stream, _sampler(tok), seq_len, 1)
    return [batches.sampler.example(batches.window(), seq_len) for _ in range(count)]


def test_pads_only_end_spans_and_bos_stays_visible(tiny_tokenizer) -> None:  # noqa: F811
    examples = _examples(tiny_tokenizer)
    assert {ex.layout for ex in examples} == set(LayoutSampler.LAYOUTS)
    saw_pads = 0
    for ex in examples:
        assert ex.tokens[0] == BOS_ID and not ex.masked[0]
        assert len(ex.tokens) == len(ex.masked) == len(ex.weight) == len(ex.span) <= 96
        for t, m in zip(ex.tokens, ex.masked, strict=True):
            assert not (t == BOS_ID and m), "file separators are never masked"
            assert t != PAD_ID or m, "pads exist only inside masked spans"
        for s in set(ex.span) - {-1}:
            pos = [j for j, x in enumerate(ex.span) if x == s]
            assert pos == list(range(pos[0], pos[-1] + 1)), "a span is contiguous"
            toks = [ex.tokens[j] for j in pos]
            weights = [ex.weight[j] for j in pos]
            if PAD_ID in toks:
                first = toks.index(PAD_ID)
                saw_pads += 1
                assert all(t == PAD_ID for t in toks[first:]), "after a pad, only pads"
                assert weights == [1] * (first + 1) + [0] * (len(toks) - first - 1)
            else:
                assert weights == [1] * len(toks)
    assert saw_pads > 50


def test_line_layout_masks_line_aligned_text(tiny_tokenizer) -> None:  # noqa: F811
    for ex in _examples(tiny_tokenizer):
        if ex.layout != "line":
            continue
        for s in set(ex.span) - {-1}:
            pos = [j for j, x in enumerate(ex.span) if x == s]
            content = [ex.tokens[j] for j in pos if ex.tokens[j] != PAD_ID]
            text = tiny_tokenizer.decode(content)
            before = tiny_tokenizer.decode([t for t in ex.tokens[1 : pos[0]] if t != PAD_ID])
            assert "\n" not in text.rstrip("\r\n"), "one line at most"
            # the span starts at a line start or after the line's indentation
            assert before == "" or before.endswith(("\n", "\r")) or before.split("\n")[-1].strip() == ""


def test_docstring_layout_masks_between_quotes(tiny_tokenizer) -> None:  # noqa: F811
    seen = 0
    for ex in _examples(tiny_tokenizer):
        if ex.layout != "docstring" or '"""' not in tiny_tokenizer.decode(ex.tokens[1:]):
            continue
        for s in set(ex.span) - {-1}:
            pos = [j for j, x in enumerate(ex.span) if x == s]
            if pos[-1] + 1 >= len(ex.tokens):
                continue  # cut by the sequence end
            content = tiny_tokenizer.decode([ex.tokens[j] for j in pos if ex.tokens[j] != PAD_ID])
            if '"""' in tiny_tokenizer.decode([ex.tokens[pos[0] - 1]]):
                seen += 1
                assert '"""' not in content
                assert '"""' in tiny_tokenizer.decode([ex.tokens[pos[-1] + 1]])
    assert seen > 0


def test_golden_ratio_rates_are_even(tiny_tokenizer) -> None:  # noqa: F811
    sampler = _sampler(tiny_tokenizer)
    rates = np.array([sampler.rate(0.05, 0.6) for _ in range(1000)])
    assert rates.min() >= 0.05 and rates.max() < 0.6
    counts, _ = np.histogram(rates, bins=10, range=(0.05, 0.6))
    assert counts.min() >= 95 and counts.max() <= 105  # low discrepancy: far more even than iid sampling


def test_joint_loss_uses_shared_masks_and_hides_targets(tiny_tokenizer) -> None:  # noqa: F811
    torch.manual_seed(0)
    model = build_model(SHAPE, 32).eval()
    examples = _examples(tiny_tokenizer, count=4, seq_len=32)
    batch = collate(examples, 32)
    loss, count = joint_loss(model, batch, bf16=False)
    assert count == int(sum(sum(ex.weight) for ex in examples))
    # Changing the token at a masked position changes no logit at or before its rank (it is hidden from itself
    # and from earlier targets), exactly as the permuted-causal mask of infill.models.masks promises.
    ids, masked = batch["ids"][:1], batch["masked"][:1]
    pos = masked[0].nonzero().flatten()
    last = int(pos[-1])

    def logits(x: torch.Tensor) -> torch.Tensor:
        return model.lm_loss(model.train_hidden(x, masked, pos[None, :]))

    with torch.no_grad():
        a = logits(ids)
        ids2 = ids.clone()
        ids2[0, last] = (ids2[0, last] + 7) % SHAPE.vocab_size
        b = logits(ids2)
    assert torch.allclose(a, b, atol=1e-5)
    if len(pos) > 1:
        first = int(pos[0])
        ids3 = ids.clone()
        ids3[0, first] = (ids3[0, first] + 7) % SHAPE.vocab_size
        with torch.no_grad():
            c = logits(ids3)
        assert torch.allclose(a[0], c[0], atol=1e-5)  # a target never sees itself
        assert not torch.allclose(a[1:], c[1:], atol=1e-5)  # later targets see it


def _tiny_cfg(**kw: object) -> TrainConfig:
    base = TrainConfig(
        seq_len=48,
        batch_size=8,
        lr=3e-3,
        warmup_steps=2,
        steps=4,
        checkpoint_minutes=1e9,
        log_every=1000,
        eval_sequences=8,
        threads=1,
        bf16=False,
        shape=SHAPE,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.fixture()
def tiny_corpus(tmp_path: Path, tiny_tokenizer):  # type: ignore[no-untyped-def]  # noqa: F811
    corpus = write_corpus(tmp_path / "corpus", sample_texts(30), sample_texts(40)[30:])
    save_tokenizer(tiny_tokenizer, tmp_path / "tokenizer.json")
    return corpus, tmp_path / "tokenizer.json"


def test_few_steps_reduce_heldout_loss(tiny_corpus, tmp_path: Path, tiny_tokenizer) -> None:  # noqa: F811
    corpus, tok_path = tiny_corpus
    cfg = _tiny_cfg(steps=40)
    state = train(corpus, tok_path, tmp_path / "run", cfg, resume=False)
    assert state.step == 40 and state.tokens_seen == 40 * 8 * 48
    torch.manual_seed(cfg.seed)
    fresh = build_model(SHAPE, 48)
    trained, _, _ = load_checkpoint_model(tmp_path / "run")
    from infill.training.asarm import heldout_batches

    held = heldout_batches(tiny_tokenizer, corpus, cfg, cfg.eval_sequences)
    before, after = evaluate(fresh, held, bf16=False), evaluate(trained, held, bf16=False)
    assert after < before - 1.0, (before, after)
    assert state.last_eval == pytest.approx(after, rel=1e-4)


def test_resume_continues_identically(tiny_corpus, tmp_path: Path) -> None:
    corpus, tok_path = tiny_corpus
    train(corpus, tok_path, tmp_path / "straight", _tiny_cfg(steps=4), resume=False)
    train(corpus, tok_path, tmp_path / "resumed", _tiny_cfg(steps=2), resume=False)
    state = train(corpus, tok_path, tmp_path / "resumed", _tiny_cfg(steps=4), resume=True)
    assert state.step == 4
    a = read_checkpoint(tmp_path / "straight" / "last.pt")
    b = read_checkpoint(tmp_path / "resumed" / "last.pt")
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert a["rng"] == b["rng"] and a["counter"] == b["counter"]


def test_export_writes_a_model_folder(tiny_corpus, tmp_path: Path) -> None:
    corpus, tok_path = tiny_corpus
    train(corpus, tok_path, tmp_path / "run", _tiny_cfg(steps=1, eval_sequences=0), resume=False)
    model, cfg, state = load_checkpoint_model(tmp_path / "run")
    out = tmp_path / "model"
    export_model(model, tok_path, out, cfg.seq_len, {"steps": state.step})
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "xlnet" and config["attn_type"] == "bi"
    assert config["infill"] == {
        "mask_id": 1,
        "pad_id": 0,
        "bos_id": 2,
        "max_length": 48,
        "tokenizer": "byte-bpe",
        "provenance": {"steps": 1},
    }
    assert (out / "tokenizer.json").read_bytes() == tok_path.read_bytes()
    from transformers import XLNetLMHeadModel

    loaded = XLNetLMHeadModel.from_pretrained(str(out), dtype=torch.float32)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def test_exported_model_loads_and_inference_scores_match_training(tiny_corpus, tmp_path: Path, tiny_tokenizer) -> None:  # noqa: F811
    """The project loader reads the export, and the inference oracle pass gives the log-probabilities the
    training loss used for the same masked positions (same masks: infill.models.masks)."""
    from infill.config import ModelSpec
    from infill.core.kinds import load
    from infill.decoding import score
    from infill.models.base import FillProblem

    corpus, tok_path = tiny_corpus
    train(corpus, tok_path, tmp_path / "run", _tiny_cfg(steps=3, eval_sequences=0), resume=False)
    model, cfg, state = load_checkpoint_model(tmp_path / "run")
    out = tmp_path / "model"
    export_model(model, tok_path, out, cfg.seq_len, {"steps": state.step})
    loaded = load(ModelSpec(name=str(out), device="cpu", bf16=False))
    assert loaded.kind == "asarm" and loaded.info["provenance"] == {"steps": 3}
    m = loaded.model
    assert (m.mask_id, m.pad_id, m.bos_id, m.max_length) == (1, 0, 2, 48)
    text = "def add(a, b):\n    return a + b\n"
    assert loaded.tokenizer.encode(text) == tiny_tokenizer.encode(text, add_special_tokens=False).ids

    ex = next(e for e in _examples(tiny_tokenizer, count=50, seq_len=48) if e.layout == "line")
    batch = collate([ex], 48)
    masked_pos = batch["masked"][0].nonzero().flatten()  # (M,)
    ids = batch["ids"][0].clone()
    truth = ids[masked_pos].clone()
    ids[masked_pos] = m.mask_id
    logq = score(m, FillProblem(ids=ids, masked=masked_pos), truth)  # (M,)
    with torch.no_grad():
        logits = model.lm_loss(model.train_hidden(batch["ids"], batch["masked"], masked_pos[None, :]))  # (M, V)
    logits[:, m.mask_id] = float("-inf")
    expected = torch.log_softmax(logits, -1).gather(1, truth[:, None])[:, 0]
    assert torch.allclose(logq, expected, atol=1e-4)


def test_init_from_exported_weights(tiny_corpus, tmp_path: Path) -> None:
    import time

    corpus, tok_path = tiny_corpus
    train(corpus, tok_path, tmp_path / "a", _tiny_cfg(steps=2, eval_sequences=0), resume=False)
    model, cfg, state = load_checkpoint_model(tmp_path / "a")
    export_model(model, tok_path, tmp_path / "m", cfg.seq_len, {})
    cfg0 = _tiny_cfg(until=time.time() - 1, eval_sequences=0, seed=5)  # stops before the first step
    train(corpus, tok_path, tmp_path / "b", cfg0, resume=False, init_from=tmp_path / "m")
    again, _, state_b = load_checkpoint_model(tmp_path / "b")
    assert state_b.step == 0
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, again.state_dict()[name]), name


def test_init_from_a_folder_of_another_shape_names_the_flags(tiny_corpus, tmp_path: Path) -> None:
    """`--init infill/weights/default` with the default shape flags was an internal error from load_state_dict;
    it is an input error (exit 2) naming the flags the folder's shape needs."""
    import time

    corpus, tok_path = tiny_corpus
    train(corpus, tok_path, tmp_path / "a", _tiny_cfg(steps=1, eval_sequences=0), resume=False)
    model, cfg, _ = load_checkpoint_model(tmp_path / "a")
    export_model(model, tok_path, tmp_path / "m", cfg.seq_len, {})
    wider = replace(SHAPE, d_inner=SHAPE.d_inner * 2)  # the same tensors, other sizes: load_state_dict's error
    cfg0 = _tiny_cfg(until=time.time() - 1, eval_sequences=0, shape=wider)
    with pytest.raises(InputError, match=rf"--d-inner {SHAPE.d_inner} \(asked {SHAPE.d_inner * 2}\)"):
        train(corpus, tok_path, tmp_path / "b", cfg0, resume=False, init_from=tmp_path / "m")


def test_the_init_command_trains_the_folders_shape_when_no_shape_flag_is_given(tiny_corpus, tmp_path: Path) -> None:
    """`infill train asarm --init FOLDER` without shape flags trains in the folder's shape (the docs' example with
    the shipped model needed four flags to say what the folder already says); a flag given still wins, and one that
    disagrees is the error above."""
    from click.testing import CliRunner

    from infill.cli import main

    corpus, tok_path = tiny_corpus
    wider = replace(SHAPE, d_inner=SHAPE.d_inner * 2)
    train(corpus, tok_path, tmp_path / "a", _tiny_cfg(steps=1, eval_sequences=0, shape=wider), resume=False)
    model, cfg, _ = load_checkpoint_model(tmp_path / "a")
    export_model(model, tok_path, tmp_path / "m", cfg.seq_len, {})
    common = ["train", "asarm", "--corpus", str(corpus), "--tokenizer", str(tok_path), "--init", str(tmp_path / "m")]
    common += ["--until", "2000-01-01T00:00:00+00:00", "--seq-len", str(cfg.seq_len), "--eval-sequences", "0"]
    r = CliRunner().invoke(main, [*common, "--run-dir", str(tmp_path / "b"), "--no-resume"])
    assert r.exit_code == 0, r.output
    _, trained, _ = load_checkpoint_model(tmp_path / "b")
    assert (trained.shape.n_layer, trained.shape.d_model, trained.shape.d_inner) == (
        wider.n_layer,
        wider.d_model,
        wider.d_inner,
    )
    r = CliRunner().invoke(main, [*common, "--run-dir", str(tmp_path / "c"), "--d-inner", str(SHAPE.d_inner)])
    assert r.exit_code == 2 and f"--d-inner {wider.d_inner} (asked {SHAPE.d_inner})" in r.output, r.output


def test_pad_counts_cover_inference_budgets(tiny_tokenizer) -> None:  # noqa: F811
    """infill's length policy masks len(replaced) + max(8, len/4) tokens, or 32 at an insertion point."""
    sampler = _sampler(tiny_tokenizer)
    five = [sampler.extra_pads(5) for _ in range(400)]
    assert 0 in five and 27 in five and max(five) <= 27
    assert sum(8 <= e <= 12 for e in five) > 40  # the usual slack of a short line
    empty = [sampler.extra_pads(0) for _ in range(400)]
    assert min(empty) == 1 and max(empty) == 32
    long = [sampler.extra_pads(100) for _ in range(400)]
    assert max(long) <= 50 and 0 in long


def test_shipped_default_model() -> None:
    """The embedded default: weight files of at most 40 MB each (bf16 shards), loads offline through the registry,
    records its provenance."""
    folder = Path(__file__).resolve().parent.parent / "infill" / "weights" / "default"
    weights = sorted(folder.glob("model*.safetensors"))
    assert weights, f"the shipped weights are missing from {folder}"
    from infill.config import ModelSpec
    from infill.core.kinds import load

    assert all(w.stat().st_size <= 40 * 2**20 for w in weights)
    loaded = load(ModelSpec(name="default", device="cpu"))
    assert loaded.kind == "asarm" and loaded.model.max_length == 512
    prov = loaded.info["provenance"]
    assert prov["steps"] > 0 and prov["heldout"]["nll_per_token"] > 0 and prov["corpus"]["files"] > 1000
    text = "def f(x):\r\n\treturn x  \n"
    assert loaded.tokenizer.decode(loaded.tokenizer.encode(text)) == text


def test_packed_training_set_and_sharded_bf16_export(tiny_corpus, tmp_path: Path, tiny_tokenizer) -> None:  # noqa: F811
    """The GPU recipe's pieces on CPU: a size-capped pack of the corpus trains like the corpus, and an export in
    bf16 shards (with HF's index file) loads in infill and in transformers with the same weights."""
    from infill.config import ModelSpec
    from infill.core.kinds import load
    from infill.models.weight_files import INDEX, read_weights
    from infill.training.asarm import pack_streams

    corpus, tok_path = tiny_corpus
    pack = tmp_path / "pack.npz"
    meta = pack_streams(tiny_tokenizer, tok_path, corpus, pack, 6_000_000, max_mb=1.0)
    assert pack.stat().st_size <= 1e6 and meta["train_tokens"] == meta["train_tokens_available"] > 1000
    state = train(pack, tok_path, tmp_path / "run", _tiny_cfg(steps=3, eval_sequences=8), resume=False)
    assert state.step == 3 and state.last_eval is not None  # the held-out loss came from the pack
    model, cfg, _ = load_checkpoint_model(tmp_path / "run")
    out = tmp_path / "model"
    export_model(model, tok_path, out, cfg.seq_len, {}, dtype=torch.bfloat16, shard_mb=0.1)
    shards = sorted(out.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 2 and all(s.stat().st_size <= 0.1e6 for s in shards) and (out / INDEX).is_file()
    weights = read_weights(out)
    for name, tensor in model.state_for_file().items():
        assert torch.equal(weights[name], tensor.to(torch.bfloat16).float()), name  # bf16 round trip
    assert load(ModelSpec(name=str(out), device="cpu", bf16=False)).kind == "asarm"
    from transformers import XLNetLMHeadModel

    hf = XLNetLMHeadModel.from_pretrained(str(out), dtype=torch.float32)
    assert torch.equal(
        hf.state_dict()["transformer.word_embedding.weight"], weights["transformer.word_embedding.weight"]
    )
    tiny = pack_streams(tiny_tokenizer, tok_path, corpus, tmp_path / "small.npz", 6_000_000, max_mb=0.001)
    assert tiny["train_tokens"] < meta["train_tokens"]  # the cap cuts the training stream


def test_a_signal_stops_training_with_a_checkpoint(tiny_corpus, tmp_path: Path) -> None:
    """SIGUSR1 (or SIGTERM / Ctrl-C) ends the run after the current step with a checkpoint, so a long run can be
    restarted with other settings without losing work."""
    import os
    import signal
    import threading
    import time

    corpus, tok_path = tiny_corpus

    def send_when_listening() -> None:  # the default action of SIGUSR1 would end the test process
        for _ in range(6000):
            if signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGUSR1)
                return
            time.sleep(0.01)

    sender = threading.Thread(target=send_when_listening)
    sender.start()
    try:
        state = train(corpus, tok_path, tmp_path / "run", _tiny_cfg(steps=100_000, eval_sequences=0), resume=False)
    finally:
        sender.join()
    assert 0 < state.step < 100_000
    _, _, saved = load_checkpoint_model(tmp_path / "run")
    assert saved.step == state.step
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the handler is restored


class _RunsCode:
    """Unpickling this calls os.system: what a crafted checkpoint would do."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, ("touch " + os.environ["INFILL_TEST_PWNED"],))


@pytest.mark.parametrize("kind", ["crafted", "truncated", "foreign"])
def test_resume_never_unpickles_code(tiny_corpus, tmp_path: Path, monkeypatch, kind: str) -> None:
    """`infill train asarm` resumes by default: a last.pt that would run code when unpickled (or a truncated or
    foreign file) is one InputError naming the file, and nothing runs."""
    corpus, tok_path = tiny_corpus
    marker = tmp_path / "pwned"
    monkeypatch.setenv("INFILL_TEST_PWNED", str(marker))
    run = tmp_path / "run"
    run.mkdir()
    if kind == "crafted":
        torch.save({"model": _RunsCode()}, run / "last.pt")
    elif kind == "truncated":
        train(corpus, tok_path, run, _tiny_cfg(steps=1), resume=False)
        data = (run / "last.pt").read_bytes()
        (run / "last.pt").write_bytes(data[: len(data) // 2])
    else:
        (run / "last.pt").write_text("not a checkpoint")
    with pytest.raises(InputError, match="last.pt"):
        train(corpus, tok_path, run, _tiny_cfg(steps=2), resume=True)
    with pytest.raises(InputError, match="last.pt"):
        load_checkpoint_model(run)  # what `infill train export` reads
    assert not marker.exists()


def test_another_tokenizer_is_refused_on_resume_and_export(tiny_corpus, tmp_path: Path) -> None:
    """A run resumed, or exported, with a tokenizer of another vocabulary: one input error naming both sizes.
    Resuming indexed past the embedding (an internal error, exit 123); exporting wrote a model folder whose
    tokenizer does not match its weights, and said it succeeded."""
    from click.testing import CliRunner

    from infill.cli import main

    corpus, tok_path = tiny_corpus
    run = tmp_path / "run"
    train(corpus, tok_path, run, _tiny_cfg(steps=1, eval_sequences=0), resume=False)
    other = Path(__file__).resolve().parent.parent / "infill" / "weights" / "default" / "tokenizer.json"
    with pytest.raises(InputError, match="8192 tokens.*trained with 400"):
        train(corpus, other, run, _tiny_cfg(steps=2, eval_sequences=0), resume=True)
    args = ["train", "export", "--run-dir", str(run), "--corpus", str(corpus), "--out", str(tmp_path / "m")]
    r = CliRunner().invoke(main, [*args, "--tokenizer", str(other)])
    assert r.exit_code == 2 and "8192 tokens" in r.stderr and "trained with 400" in r.stderr, r.stderr
    assert not (tmp_path / "m").exists()
    r = CliRunner().invoke(main, [*args, "--tokenizer", str(tok_path)])
    assert r.exit_code == 0 and (tmp_path / "m" / "tokenizer.json").read_bytes() == tok_path.read_bytes(), r.stderr


def test_resuming_says_which_asked_settings_the_checkpoint_overrides(tiny_corpus, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A resumed run trains the checkpoint's shape whatever the flags say; it said only "resumed at step N"."""
    corpus, tok_path = tiny_corpus
    run = tmp_path / "run"
    train(corpus, tok_path, run, _tiny_cfg(steps=1, eval_sequences=0), resume=False)
    capsys.readouterr()
    train(corpus, tok_path, run, _tiny_cfg(steps=2, eval_sequences=0), resume=True)
    assert "note: resuming keeps" not in capsys.readouterr().out  # the same command: nothing to say
    bigger = replace(SHAPE, n_layer=SHAPE.n_layer + 1)
    state = train(corpus, tok_path, run, _tiny_cfg(steps=3, eval_sequences=0, shape=bigger, seed=7), resume=True)
    out = capsys.readouterr().out
    (note,) = [line for line in out.splitlines() if line.startswith("note: resuming keeps")]
    assert f"--layers {SHAPE.n_layer} (asked {SHAPE.n_layer + 1})" in note and "--seed 0 (asked 7)" in note, note
    assert state.step == 3
