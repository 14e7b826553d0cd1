"""The llama.cpp engine (infill.models.llamacpp.LlamaEngine) under the tool's own decoders, on tiny random networks
written as f32 GGUF files (tests/fixtures_llamacpp.py), so llama.cpp runs the very weights eager PyTorch runs:

- its logits are the network's (those of transformers on the same weights), for Qwen2, Llama and StarCoder2;
- its cache (slots sharing a unified KV cache, prefixes reused, rejected drafts removed) returns what a fresh pass
  returns, and a batch of sequences returns what each alone returns;
- lookup speculation on it follows the model's joint exactly, by enumeration (chi-square), in a layout where the
  drafts are often rejected, and the same drafts taken without the acceptance test visibly do not (the negative
  control);
- greedy decoding on it writes torch's greedy fill token for token, and lookup speculation and beam search of width
  1 write the same; beam search of width 4 in one batched pass per step finds what one pass per hypothesis finds.
"""

from __future__ import annotations

import _thread
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from fixtures_bd import tiny_causal_lm
from fixtures_decode import Memo, OnePassPerHypothesis, repeats_problems
from fixtures_llamacpp import END, VOCAB, engine_of, fim_pair, network_gguf
from fixtures_stats import mixture_power
from test_ar_exactness import (
    LAYOUTS,
    MASK,
    assert_cache_is_fresh,
    draw_counts,
    problem_of,
    unverified_draw,
    unverified_joint,
)
from test_decoding_exactness import exact_joint, pooled_p_value

from infill.config import DecodeConfig
from infill.decoding import decode
from infill.models import llamacpp
from infill.models.autoregressive import CausalFim
from infill.models.llamacpp import LlamaEngine
from infill.progress import Cancelled

torch.set_num_threads(1)

SAMPLES = 3_000  # a sampler a fifth of the way to the negative control fails with probability >= 0.99 (asserted)
LOOKUP = DecodeConfig(decoder="assd", draft="lookup", k=4)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[CausalFim, CausalFim]:
    return fim_pair(tmp_path_factory.mktemp("gguf"))


@pytest.mark.parametrize(("arch", "tolerance"), [("qwen2", 1e-4), ("llama", 1e-4), ("starcoder2", 2e-3)])
def test_the_logits_are_the_networks(tmp_path: Path, arch: str, tolerance: float) -> None:
    """Every verify row of random sequences equals transformers' on the same weights (StarCoder2's GELU is a table
    in ggml: 1e-3)."""
    llama, eager = fim_pair(tmp_path, seed=4, arch=arch)
    rng = random.Random(0)
    for _ in range(10):
        layout: list[int | None] = [rng.randrange(5) for _ in range(rng.randrange(1, 8))]
        layout += [None] * 4 + [rng.randrange(5) for _ in range(rng.randrange(0, 5))]
        problem = problem_of(layout)
        ids = problem.ids.clone()
        ids[problem.masked] = torch.tensor([rng.randrange(5) for _ in range(4)])
        got = llama.verify(ids, problem.masked, 0, problem.masked)[:, :5]  # (4, 5): the tokens it may write
        want = eager.verify(ids, problem.masked, 0, problem.masked)[:, :5]
        assert torch.allclose(got, want, atol=tolerance), (got - want).abs().max()


def test_the_cache_returns_what_a_fresh_pass_returns(tmp_path: Path) -> None:
    cached, _ = fim_pair(tmp_path, seed=2, ends=(END,))
    fresh, _ = fim_pair(tmp_path, seed=2, ends=(END,))
    assert_cache_is_fresh(cached, fresh, fresh.engine.forget)


def test_a_batch_returns_what_each_sequence_returns_alone(tmp_path: Path) -> None:
    """Beam-like batches (children of the last batch's rows, a new prefix, duplicates, more sequences than slots)
    against fresh single passes."""
    network = tiny_causal_lm("qwen2", seed=6, vocab=VOCAB)
    path = network_gguf(tmp_path / "m.gguf", network)
    batched, alone = engine_of(path), engine_of(path)
    rng = random.Random(3)
    prompt = [6, 0, 1, 2, 7, 3, 8]
    rows = [prompt]
    for step in range(12):
        width = 20 if step == 6 else 4  # more than the 16 slots: two passes
        rows = [rng.choice(rows) + [rng.randrange(5)] for _ in range(width)]
        if step == 8:
            rows = [[6, 4, 4, 7, 8] + r[7:] for r in rows]  # another prompt
        if step == 9:
            rows[1] = list(rows[0])
        k = 1 if step % 3 else 2
        got = batched.rows(rows, k)  # (B, k, V)
        for b, seq in enumerate(rows):
            alone.forget()
            want = alone.rows([seq], k)[0]
            assert torch.allclose(got[b], want, atol=1e-5), (step, b)


@pytest.fixture(scope="module")
def memo(pair: tuple[CausalFim, CausalFim]) -> Memo:
    """llama.cpp's passes, each computed once for the tests that draw thousands of fills."""
    return Memo(pair[0])


@pytest.mark.parametrize("layout", ["match-in-suffix"])
def test_lookup_speculation_on_llama_cpp_follows_the_joint(memo: Memo, layout: str) -> None:
    """Chi-square against the exact joint over all 5^3 fills, computed by the chain rule from llama.cpp's verify
    pass; the drafts (copied from after the span) are rejected often here, so the acceptance test matters."""
    model = memo
    problem = problem_of(LAYOUTS[layout])
    drafted = rejected = 0

    def draw(m: Any, p: Any, g: torch.Generator) -> list[int]:
        nonlocal drafted, rejected
        tokens, stats = decode(m, p, LOOKUP, g)
        drafted += stats.extra["drafted"]
        rejected += stats.extra["rejections"]
        return [int(t) for t in tokens]

    counts = draw_counts(model, problem, draw, SAMPLES)
    joint = exact_joint(model, problem, LOOKUP)
    assert pooled_p_value(counts, joint, SAMPLES) > 1e-4
    assert drafted > SAMPLES and rejected > SAMPLES // 2  # drafts proposed, and the target refuses many


def test_the_same_drafts_without_the_acceptance_test_fail(memo: Memo) -> None:
    """Power: copying the drafts as they are is visibly not the joint, and SAMPLES draws would catch a sampler
    that copied them one time in five (the control's distribution enumerated)."""
    problem = problem_of(LAYOUTS["match-in-suffix"])
    joint = exact_joint(memo, problem, LOOKUP)
    counts = draw_counts(memo, problem, unverified_draw, SAMPLES)
    assert pooled_p_value(counts, joint, SAMPLES) < 1e-6
    assert mixture_power(joint, unverified_joint(memo, problem), SAMPLES, eps=1 / 5) >= 0.99


def test_greedy_on_llama_cpp_is_torchs_greedy_and_lookup_and_beam_1_agree(tmp_path: Path) -> None:
    """Temperature 0 on f32 weights: llama.cpp's greedy fill is eager PyTorch's, token for token, and lookup drafts
    and beam search of width 1 on llama.cpp write it too, for random texts full of repeats."""
    llama, eager = fim_pair(tmp_path, seed=11, ends=(END,))
    greedy = DecodeConfig(decoder="sequential", temperature=0)
    lookup = DecodeConfig(decoder="assd", draft="lookup", k=6, temperature=0)
    beam1 = DecodeConfig(decoder="beam", beam=1, temperature=0)
    drafted = rejected = 0
    for problem in repeats_problems(MASK):
        g = torch.Generator().manual_seed(0)
        want, _ = decode(eager, problem, greedy, g)
        got, _ = decode(llama, problem, greedy, g)
        spec, stats = decode(llama, problem, lookup, g)
        best, _ = decode(llama, problem, beam1, g)
        assert got.tolist() == want.tolist() == spec.tolist() == best.tolist()
        drafted += stats.extra["drafted"]
        rejected += stats.extra["rejections"]
    assert drafted > 50 and rejected > 0


@pytest.mark.parametrize("engine", ["llama.cpp", "torch"])
def test_batched_beam_search_finds_what_one_pass_per_hypothesis_finds(
    pair: tuple[CausalFim, CausalFim], engine: str
) -> None:
    """Beam 4: the same n-best fills and scores, in one pass per step instead of one per live hypothesis."""
    model = pair[0] if engine == "llama.cpp" else pair[1]
    ended = CausalFim(
        model.engine, fim=model.fim, end_ids=(END,), banned=set(model._banned.tolist()) - {END}
    )  # the same network with its end token, so hypotheses finish at different steps
    beam = DecodeConfig(decoder="beam", beam=4, temperature=0)
    rng = random.Random(5)
    for _ in range(8):
        text = [rng.randrange(5) for _ in range(rng.randrange(3, 9))]
        cut = rng.randrange(1, len(text))
        problem = problem_of([*text[:cut], *([None] * 6), *text[cut:]], span=True)
        g = torch.Generator().manual_seed(0)
        batched, stats = decode(ended, problem, beam, g)
        single, reference = decode(OnePassPerHypothesis(ended), problem, beam, g)  # type: ignore[arg-type]
        assert batched.tolist() == single.tolist()
        got, want = stats.extra["nbest"], reference.extra["nbest"]
        assert [f for _, f in got] == [f for _, f in want]
        assert [s for s, _ in got] == pytest.approx([s for s, _ in want], abs=1e-4)
        assert stats.nfe < reference.nfe  # one pass per step


@pytest.mark.parametrize("engine", ["llama.cpp", "torch"])
def test_a_decoded_fill_is_scored_from_the_rows_its_decoding_computed(
    pair: tuple[CausalFim, CausalFim], engine: str
) -> None:
    """Within `remembering`, the score pass after sequential, lookup or beam decoding reads the kept rows: no pass,
    and the log-probabilities a fresh pass gives."""
    from infill.decoding import score

    model = pair[0] if engine == "llama.cpp" else pair[1]
    problem = problem_of([0, 1, 2, 3, 0, 1, None, None, None, None, 2, 3])
    for cfg in (LOOKUP, DecodeConfig(decoder="sequential"), DecodeConfig(decoder="beam", beam=3, temperature=0)):
        with model.remembering():
            tokens, _ = decode(model, problem, cfg, torch.Generator().manual_seed(1))
            before = model.nfe
            kept = score(model, problem, tokens)
            assert model.nfe == before, cfg.decoder
        model.engine.forget()
        fresh = score(model, problem, tokens)
        assert model.nfe == before + 1 and torch.allclose(kept, fresh, atol=1e-5)


def test_ctrl_c_during_a_prompts_pass_stops_llama_cpp_and_leaves_the_cache_sound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt's pass is one llama_decode call; Python raised the KeyboardInterrupt of a Ctrl-C only once it had
    returned (77 s for a file of 4,096 tokens on the 0.5B model here). Now the pass runs where the signal does not
    wait for it: the interrupt arrives while llama.cpp computes, llama.cpp stops (llama_decode returns 2:
    aborted), the interrupt goes on, and the next pass over the same tokens gives a fresh pass's logits."""
    engine = engine_of(network_gguf(tmp_path / "q.gguf", tiny_causal_lm("qwen2", seed=3, vocab=VOCAB)))
    seq = [random.Random(0).randrange(5) for _ in range(100)]
    fresh = engine.rows([seq], 2)
    engine.forget()
    real = engine.lib.llama_decode
    codes: list[int] = []

    def interrupted(ctx: Any, batch: Any) -> int:
        _thread.interrupt_main()  # Ctrl-C, while llama.cpp computes
        deadline = time.monotonic() + 30
        while not engine._abort.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        codes.append(int(real(ctx, batch)))
        return codes[-1]

    monkeypatch.setattr(engine.lib, "llama_decode", interrupted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, whatever ran before
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.rows([seq], 2)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert codes == [2]
    monkeypatch.setattr(engine.lib, "llama_decode", real)
    assert torch.equal(engine.rows([seq], 2), fresh)
    assert engine.rows([seq[:10]], 1).shape == (1, 1, VOCAB)  # a short pass (no worker, no callback) after it


@pytest.fixture
def chunked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LlamaEngine:
    """An engine whose passes go to llama.cpp in chunks of 32 tokens (a prompt of 100: 32, 32, 32, 4)."""
    monkeypatch.setattr(llamacpp, "CHUNK", 32)
    return engine_of(network_gguf(tmp_path / "q.gguf", tiny_causal_lm("qwen2", seed=3, vocab=VOCAB)))


def wait_for_abort(engine: LlamaEngine) -> None:
    deadline = time.monotonic() + 30
    while not engine._abort.is_set() and time.monotonic() < deadline:
        time.sleep(0.001)


@pytest.mark.parametrize("when", ["during a chunk", "between chunks", "ctrl-c during a chunk"])
def test_an_interrupted_prompt_keeps_the_chunks_it_finished(
    chunked: LlamaEngine, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A prompt's pass goes in chunks; interrupt_passes (a superseded fill in the language server) stops it with
    Cancelled (Ctrl-C with KeyboardInterrupt) in the chunk it is in, whose cells are removed, while those of the
    chunks done stay: the next pass over the prompt (and over the prompt and one more token) evaluates only the
    rest, and its logits are those of a pass from an empty cache."""
    engine = chunked
    seq = [random.Random(0).randrange(5) for _ in range(100)]
    fresh = engine.rows([seq, seq + [1]], 1)
    engine.forget()
    real, calls, armed = engine.lib.llama_decode, [], [True]

    def decode(ctx: Any, batch: Any) -> int:
        calls.append(int(batch.n_tokens))
        stop = 2 if when == "between chunks" else 3
        if armed[0] and len(calls) == stop:
            armed[0] = False
            if when.startswith("ctrl-c"):
                _thread.interrupt_main()  # Ctrl-C, while llama.cpp computes
            else:
                llamacpp.interrupt_passes()  # as the server's thread does for a superseded fill
            wait_for_abort(engine)
        return int(real(ctx, batch))

    if when == "between chunks":  # chunk 2 runs without the abort callback: it ends, and chunk 3 never starts
        monkeypatch.setattr(llamacpp, "LONG_PASS", 64)
    monkeypatch.setattr(engine.lib, "llama_decode", decode)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, whatever ran before
    try:
        with pytest.raises(KeyboardInterrupt if when.startswith("ctrl-c") else Cancelled):
            engine.rows([seq], 1)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert calls == ([32, 32] if when == "between chunks" else [32, 32, 32])
    done = 32 * (len(calls) - (0 if when == "between chunks" else 1))
    assert [h for h in engine._held if h] == [seq[:done]]
    for slot in range(engine.slots):  # the cells are exactly the chunks done (llama.cpp's own record)
        assert engine.lib.llama_memory_seq_pos_max(engine._memory, slot) == len(engine._held[slot]) - 1
    calls.clear()
    got = engine.rows([seq, seq + [1]], 1)
    assert sum(calls) == (100 - done) + (101 - done)
    assert torch.allclose(got, fresh, atol=1e-5), (got - fresh).abs().max()


def test_the_language_server_interrupts_a_gguf_models_prompt_pass(
    chunked: LlamaEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A superseded fill's Job.interrupt (infill.lsp.server) reaches llama.cpp: the pass running on the worker
    thread stops with Cancelled instead of running to its end."""
    pytest.importorskip("pygls")
    from infill.lsp.server import Job

    engine = chunked
    real, calls = engine.lib.llama_decode, []

    def decode(ctx: Any, batch: Any) -> int:
        calls.append(int(batch.n_tokens))
        wait_for_abort(engine)  # a long chunk: it runs until it is interrupted (30 s at most)
        return int(real(ctx, batch))

    monkeypatch.setattr(engine.lib, "llama_decode", decode)
    job, failed = Job("file:///m.py", completion=True), []

    def fill() -> None:
        try:
            engine.rows([[random.Random(0).randrange(5) for _ in range(100)]], 1)
        except BaseException as exc:  # noqa: BLE001 - what the pass raised is the test's subject
            failed.append(exc)

    job.start()
    worker = threading.Thread(target=fill)
    worker.start()
    while not calls and worker.is_alive():
        time.sleep(0.001)
    job.cancel("superseded by a newer request")
    job.interrupt()
    worker.join(60)
    job.stop()
    assert not worker.is_alive() and calls == [32] and len(failed) == 1 and isinstance(failed[0], Cancelled)
    assert not any(engine._held)


def test_a_prompt_that_fits_alone_is_evaluated_when_other_slots_fill_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache holds the window and some headroom for the other slots' tails. When other slots hold other
    prompts (another document's, an older fill's beams after an edit near the top of a long file), a new prompt
    that fits alone finds no room: their cells are freed and it is evaluated (it was an error, "N tokens do not
    fit in llama.cpp's context", for a prompt shorter than the model's window), and its logits are a fresh
    pass's."""
    monkeypatch.setattr(llamacpp, "HEADROOM", 64)
    path = network_gguf(tmp_path / "q.gguf", tiny_causal_lm("qwen2", seed=3, vocab=VOCAB))
    from infill.models.gguf import read_header

    header = read_header(path)
    engine, fresh = (LlamaEngine(path, header, threads=1, window=256) for _ in range(2))
    cells = int(engine.lib.llama_n_ctx(engine._ctx))
    rng = random.Random(1)
    prompts = [[rng.randrange(5) for _ in range(250)] for _ in range(cells // 250 + 2)]
    for prompt in prompts:  # each one alone fits; together they are more than the cache holds
        got = engine.rows([prompt], 1)
        fresh.forget()
        assert torch.allclose(got, fresh.rows([prompt], 1), atol=1e-5)
    assert prompts[-1] in engine._held
