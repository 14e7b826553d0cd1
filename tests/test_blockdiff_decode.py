"""Block-wise decoding end to end on tiny random models: AR equivalences, stopping, NFE, fill_middle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.decoding.blockfill import fill_middle, generate
from infill.decoding.confidence import _end_of_generation
from infill.errors import DecodeError, ModelError
from infill.models.blockdiff import BlockDiffModel, load_folder
from infill.models.registry import LoadedModel
from infill.models.tiny import tiny_blockdiff_checkpoint as tiny_checkpoint
from tests.fixtures_bd import END, MASK, V, memoize_forwards, tiny_backend
from tests.fixtures_stats import mixture_power, pooled_p_value

torch.set_num_threads(1)
PROMPT = torch.tensor([3, 7, 11, 5, 2, 9])  # 6 tokens: one full block of 4 plus a tail, at B = 4


def greedy(**kw: object) -> DecodeConfig:
    return DecodeConfig(temperature=0.0, **kw)  # type: ignore[arg-type]


def ar_reference(bk: BlockDiffModel, prompt: torch.Tensor, n: int, logprob: list[float] | None = None) -> list[int]:
    """Greedy AR decoding by full causal forwards without a cache (a mask token at the predicted position for
    position-aligned models; the last row for right-shifted ones)."""
    ids = prompt.tolist()
    for _ in range(n):
        inp = ids + ([] if bk.shifted else [MASK])
        t = torch.tensor(inp)
        with torch.no_grad():
            logits = bk.model(input_ids=t[None], position_ids=torch.arange(len(inp))[None]).logits[0, -1]
        logits[MASK] = float("-inf")
        ids.append(int(logits.argmax()))
        if logprob is not None:
            logprob.append(float(torch.log_softmax(logits.double(), -1)[ids[-1]]))
    return ids[len(prompt) :]


@pytest.mark.parametrize(("arch", "shifted"), [("qwen3", False), ("qwen2", True)])
@pytest.mark.parametrize("decoder", ["confidence", "s2d2"])
def test_block_size_one_is_ar(arch: str, shifted: bool, decoder: str) -> None:
    bk = tiny_backend(arch, shifted=shifted, end=False)
    out, stats = generate(bk, PROMPT, 7, greedy(decoder=decoder, block_size=1), torch.Generator().manual_seed(0))
    logprob: list[float] = []
    assert out.tolist() == ar_reference(bk, PROMPT, 7, logprob)
    assert stats.extra["logprob"] == pytest.approx(sum(logprob), abs=1e-4)  # the score of the fill
    assert stats.nfe == 7  # one prefill fused with the first draft, then one commit+draft per token
    assert stats.nfe == sum(stats.extra["forwards"].values())


@pytest.mark.parametrize("block", [2, 4, 8])
def test_s2d2_always_verifying_is_greedy_ar_for_right_shifted(block: int) -> None:
    """With causal clean attention the verifier IS the AR model, so greedy S2D2 that always verifies the
    first masked span reproduces greedy AR decoding, whatever the block size."""
    bk = tiny_backend("qwen2", shifted=True, end=False)
    cfg = greedy(decoder="s2d2", block_size=block, routing="always")
    out, stats = generate(bk, PROMPT, 10, cfg, torch.Generator().manual_seed(0))
    assert out.tolist() == ar_reference(bk, PROMPT, 10)
    assert stats.extra["verifications"] == len(stats.extra["drafts_accepted"]) > 0
    assert len(stats.accepted) == stats.extra["steps"] and sum(stats.accepted) == 10  # tokens made final per step
    assert stats.nfe == sum(stats.extra["forwards"].values())


def test_nfe_accounting_dynamic_and_static() -> None:
    bk = tiny_backend("qwen3", end=False)
    gen = torch.Generator().manual_seed(0)
    # threshold 0: every masked position of a block is unmasked in its first step
    _, st = generate(bk, PROMPT, 10, greedy(decoder="confidence", block_size=4, threshold=0.0), gen)
    # blocks [4,8) (2 generated), [8,12), [12,16): prefill+draft, step; commit+draft, step; commit+draft, step
    assert st.nfe == 3 and st.extra["steps"] == 3 and st.extra["forwards"]["commit"] == 2
    # threshold 1: one token per step (the argmax): a draft forward per token after each block's first
    _, st = generate(bk, PROMPT, 10, greedy(decoder="confidence", block_size=4, threshold=1.0), gen)
    assert st.extra["steps"] == 10 and st.nfe == 1 + 2 + 7
    # static, 2 per step: 2 + 4 + 4 generated positions -> 1 + 2 + 2 steps
    _, st = generate(bk, PROMPT, 10, greedy(decoder="confidence", block_size=4, unmask_per_step=2), gen)
    assert st.extra["steps"] == 5 and st.extra["mode"] == "static"
    assert st.tokens == 10 and st.nfe == sum(st.extra["forwards"].values())


def test_stops_at_end_token() -> None:
    bk = tiny_backend("qwen3")
    head = torch.nn.Linear(bk.model.config.hidden_size, V, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[END] = 5.0  # the end token is every position's argmax
    bk.model.lm_head = head
    out, st = generate(bk, PROMPT, 12, greedy(decoder="s2d2", block_size=4), torch.Generator().manual_seed(0))
    assert out.numel() == 0 and st.tokens == 1 and st.extra["ended"]
    assert st.extra["forwards"]["commit"] == 0  # nothing after the first block is computed


def test_end_detection_needs_everything_before_it_decoded() -> None:
    seq = torch.tensor([1, 2, 3, 4, END, MASK])
    assert _end_of_generation(seq, 2, 6, MASK, (END,)) == (4, 5)  # output [2, 4), the end token scored
    assert _end_of_generation(torch.tensor([1, 2, MASK, END, 5]), 2, 5, MASK, (END,)) is None
    assert _end_of_generation(seq, 2, 6, MASK, ()) is None


def test_bad_inputs_are_decode_errors() -> None:
    bk = tiny_backend("qwen3")
    gen = torch.Generator()
    with pytest.raises(DecodeError, match="block size"):
        generate(bk, PROMPT, 4, DecodeConfig(decoder="confidence", block_size=-1), gen)
    with pytest.raises(DecodeError, match="mask token"):
        generate(bk, torch.tensor([1, MASK]), 4, DecodeConfig(decoder="confidence"), gen)
    with pytest.raises(DecodeError, match="exceeds"):
        generate(bk, PROMPT, 1000, DecodeConfig(decoder="confidence"), gen)
    with pytest.raises(DecodeError, match="does not run block-diffusion"):
        generate(bk, PROMPT, 4, DecodeConfig(decoder="assd"), gen)
    out, st = generate(bk, PROMPT, 0, DecodeConfig(decoder="s2d2"), gen)
    assert out.numel() == 0 and st.nfe == 0


@pytest.fixture(scope="module")
def fim_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("fim"), seed=1)


@pytest.fixture(scope="module")
def fim_model(fim_folder: Path) -> LoadedModel:
    return load_folder(fim_folder, ModelSpec(name="tiny-fim", device="cpu", bf16=False))


@pytest.mark.parametrize("decoder", ["confidence", "s2d2"])
def test_fill_middle_end_to_end(fim_model: LoadedModel, decoder: str) -> None:
    cfg = DecodeConfig(decoder=decoder, block_size=4, temperature=1.0, routing="score-dynamic")
    text, st = fill_middle(fim_model, "def add(a, b):\n    return ", "\n", 9, cfg, torch.Generator().manual_seed(3))
    assert st.extra["prompt_format"] == "fim"
    mask_text = fim_model.tokenizer.decode([fim_model.model.mask_id])
    assert st.tokens <= 9 and st.nfe >= 1 and mask_text not in text  # a fill never contains the mask token
    # same seed, same text: one generator drives everything
    again, _ = fill_middle(fim_model, "def add(a, b):\n    return ", "\n", 9, cfg, torch.Generator().manual_seed(3))
    assert again == text


def test_fill_middle_without_fim_tokens_uses_the_chat_template(tmp_path: Path) -> None:
    folder = tiny_checkpoint(tmp_path / "chat", fim=False)
    loaded = load_folder(folder, ModelSpec(device="cpu", bf16=False))
    text, st = fill_middle(loaded, "x = ", "\n", 5, greedy(decoder="s2d2"), torch.Generator().manual_seed(0))
    assert st.extra["prompt_format"] == "chat" and st.tokens <= 5
    assert loaded.tokenizer.decode([loaded.model.mask_id]) not in text
    not_bd = LoadedModel(name="x", kind="asarm", model=None, tokenizer=None)
    with pytest.raises(ModelError):
        fill_middle(not_bd, "a", "b", 3, greedy(), torch.Generator())


def verifier_logits(bk: BlockDiffModel, ids: list[int], block: int) -> torch.Tensor:
    """(V,) logits for position j = len(ids), without a cache, in the AR view S2D2 verifies with: complete
    blocks before j's block block-causal (as committed), j's block causal up to j, a mask AT j."""
    j = len(ids)
    start = (j // block) * block
    t = torch.tensor(ids + [MASK])
    q = torch.arange(j + 1)[:, None]
    k = torch.arange(j + 1)[None, :]
    allowed = torch.where(q < start, k // block <= q // block, k <= q)
    with torch.no_grad():
        out = bk.model(input_ids=t[None], position_ids=torch.arange(j + 1)[None], attention_mask=allowed[None, None])
    logits = out.logits[0, -1]
    logits[MASK] = float("-inf")
    return logits


def draft_pass_logits(bk: BlockDiffModel, ids: list[int], n: int, block: int) -> torch.Tensor:
    """(n, V) logits of one draft pass for the n positions after `ids`, without a cache: every position sees
    the complete blocks before its own and its whole block (the masks of the draft see each other)."""
    t = torch.tensor(ids + [MASK] * n)
    q = torch.arange(len(t))[:, None]
    k = torch.arange(len(t))[None, :]
    with torch.no_grad():
        out = bk.model(
            input_ids=t[None],
            position_ids=torch.arange(len(t))[None],
            attention_mask=(k // block <= q // block)[None, None],
        )
    logits = out.logits[0, len(ids) :]
    logits[:, MASK] = float("-inf")
    return logits


def verifier_reference(bk: BlockDiffModel, prompt: torch.Tensor, n: int, block: int) -> list[int]:
    """Greedy decoding with `verifier_logits`."""
    ids = prompt.tolist()
    for _ in range(n):
        ids.append(int(verifier_logits(bk, ids, block).argmax()))
    return ids[len(prompt) :]


def test_memoized_forwards_decode_as_fresh_ones() -> None:
    """The enumeration test's memoized backend (fixtures_bd.memoize_forwards) draws what the plain one draws, pass
    for pass: the same fills and the same forward counts from the same generator, for S2D2 (prefill, drafts,
    verifies, commits) and for confidence decoding, replays included (the second round)."""
    plain, memo = tiny_backend("qwen3", end=False), memoize_forwards(tiny_backend("qwen3", end=False))
    base = dict(block_size=4, temperature=1.0, top_k=3)
    configs = [DecodeConfig(decoder="s2d2", routing="always", **base), DecodeConfig(decoder="confidence", **base)]  # type: ignore[arg-type]
    for cfg in configs:
        runs = []
        for bk in (plain, memo, memo):
            g = torch.Generator().manual_seed(5)
            runs.append([generate(bk, PROMPT[:6], 6, cfg, g) for _ in range(8)])
        for fresh, *replayed in zip(*runs, strict=True):
            for again in replayed:
                assert torch.equal(fresh[0], again[0])
                assert (fresh[1].nfe, fresh[1].extra["forwards"]) == (again[1].nfe, again[1].extra["forwards"])


def test_s2d2_sampling_follows_the_verifiers_joint_by_enumeration() -> None:
    """S2D2 verifying every step samples the block-size-1 verifier's joint exactly (top-k 3 keeps the support
    small enough to enumerate: 3^3 fillings); static two-tokens-per-step confidence decoding, which samples
    two positions independently from one draft pass, fails the same test. Power: a sampler that commits one
    unverified draft pass a third of the time (the pass's product of marginals, enumerated; its mass outside
    the joint's support, which the support check catches on its own, left out) fails with probability >= 0.99."""
    from collections import Counter

    from infill.decoding.sampling import probs

    bk = memoize_forwards(tiny_backend("qwen3", end=False))  # thousands of decodes, a few hundred passes
    prompt, n, block, samples = PROMPT[:4], 3, 4, 1000
    joint: dict[tuple[int, ...], float] = {}

    def expand(prefix: tuple[int, ...], pr: float) -> None:
        if len(prefix) == n:
            joint[prefix] = pr
            return
        q = probs(verifier_logits(bk, prompt.tolist() + list(prefix), block)[None], 1.0, 3)[0]  # (V,)
        for x in q.nonzero().squeeze(-1).tolist():
            expand((*prefix, x), pr * float(q[x]))

    expand((), 1.0)
    assert len(joint) == 27 and abs(sum(joint.values()) - 1) < 1e-9
    draft = probs(draft_pass_logits(bk, prompt.tolist(), n, block), 1.0, 3)  # (n, V)
    unverified = {x: float(draft[0, x[0]] * draft[1, x[1]] * draft[2, x[2]]) for x in joint}
    assert mixture_power(joint, unverified, samples, eps=1 / 3) >= 0.99

    def p_value(cfg: DecodeConfig, samples: int) -> float:
        g = torch.Generator().manual_seed(5)
        counts = Counter(tuple(generate(bk, prompt, n, cfg, g)[0].tolist()) for _ in range(samples))
        if not set(counts) <= set(joint):
            return 0.0  # a filling the joint gives probability 0
        return pooled_p_value(counts, joint)

    base = dict(block_size=block, temperature=1.0, top_k=3)
    assert p_value(DecodeConfig(decoder="s2d2", routing="always", **base), samples) > 1e-4  # type: ignore[arg-type]
    control = DecodeConfig(decoder="confidence", unmask_per_step=2, **base)  # type: ignore[arg-type]
    assert p_value(control, 500) < 1e-6


@pytest.mark.parametrize("block", [2, 4])
def test_s2d2_always_verifying_follows_the_2l_verifier_for_position_aligned(block: int) -> None:
    bk = tiny_backend("qwen3", end=False)
    cfg = greedy(decoder="s2d2", block_size=block, routing="always")
    out, _ = generate(bk, PROMPT, 9, cfg, torch.Generator().manual_seed(0))
    assert out.tolist() == verifier_reference(bk, PROMPT, 9, block)


def test_long_prompts_keep_the_end_of_the_prefix_and_start_of_the_suffix(fim_model: LoadedModel) -> None:
    prefix = "".join(f"x{i} = {i}\n" for i in range(200))  # far more than the model's 256 positions
    suffix = "".join(f"y{i} = {i}\n" for i in range(200))
    _, st = fill_middle(fim_model, prefix, suffix, 16, greedy(decoder="confidence"), torch.Generator())
    assert st.extra["prompt_truncated"] and st.extra["prompt_tokens"] <= 256 - 16
    from infill.decoding.blockfill import build_prompt

    ids, fmt, truncated = build_prompt(fim_model.tokenizer, prefix, suffix, 100)
    text = fim_model.tokenizer.decode(ids)
    assert truncated and fmt == "fim" and len(ids) <= 100
    assert "x199 = 199\n<|fim_suffix|>y0 = 0\n" in text  # the parts next to the hole survive
    tok = fim_model.tokenizer
    pre, suf = tok.encode(prefix), tok.encode(suffix)
    assert build_prompt(tok, pre, suf, 100) == (ids, fmt, truncated)  # token ids in: the same prompt
    from infill.core.plan import split_context

    keep_pre, keep_suf = split_context(100 - 3, len(pre), len(suf))  # the fill's one context split
    assert ids == [ids[0], *pre[len(pre) - keep_pre :], ids[keep_pre + 1], *suf[:keep_suf], ids[-1]]


def test_infill_fill_command_with_a_block_diffusion_model(fim_folder: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from infill.cli import main

    src = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
    path = tmp_path / "ex.py"
    path.write_text(src)
    args = ["fill", str(path), "--model", str(fim_folder), "--span", "2:2", "--no-syntax-check", "-o", "-"]
    args.append("--allow-syntax-errors")  # a random model's fill may split a UTF-8 character (else: exit 3)
    for decoder in ("s2d2", "confidence", "assd"):  # assd, the default, means s2d2 on block-diffusion models
        result = CliRunner().invoke(main, [*args, "--decoder", decoder, "--stats"])
        assert result.exit_code == 0, result.output
        out = result.stdout.splitlines(keepends=True)
        assert out[0] == "def add(a, b):\n" and "".join(out[-3:]) == "\n\nprint(add(1, 2))\n"
        assert f"decoder={'s2d2' if decoder == 'assd' else decoder}" in result.stderr
    assert path.read_text() == src
    # at block size 1 the model is a left-to-right FIM model: sequential (and beam search) run it there
    at_one = CliRunner().invoke(main, [*args, "--decoder", "sequential", "--stats"])
    assert at_one.exit_code == 0, at_one.output
    assert "decoder=sequential" in at_one.stderr
    wrong = CliRunner().invoke(main, [*args, "--decoder", "parallel"])
    assert wrong.exit_code == 2 and "block-diffusion" in wrong.stderr


def test_block_size_zero_means_the_models_own() -> None:
    bk = tiny_backend("qwen3")
    cfg = DecodeConfig(decoder="confidence", temperature=0.0, block_size=0)
    _, st = generate(bk, PROMPT, 6, cfg, torch.Generator().manual_seed(0))
    assert st.extra["block_size"] == bk.block_size


def test_block_diffusion_fills_report_their_steps_so_a_cancel_check_can_stop_them(fim_folder: Path) -> None:
    """fill_text's progress events reach the block-diffusion decoders too (a server cancels a fill by raising
    from them); the first step's event stops the fill there."""
    from infill.api import fill_text
    from infill.spans import Span

    text = "def add(a, b):\n    return \n"
    at = text.index(" \n") + 1
    spec = ModelSpec(name=str(fim_folder), device="cpu", bf16=False)
    cfg = DecodeConfig(decoder="confidence", block_size=4)
    events: list[dict[str, Any]] = []
    loose = FillOptions(allow_syntax_errors=True, max_resample=0)  # a random tiny model writes anything
    fill_text(text, [Span(at, at, "s", 8)], model=spec, decode=cfg, options=loose, on_progress=events.append)
    steps = [e for e in events if e["event"] == "step"]
    assert steps and all(e["tokens"] >= 1 for e in steps)

    class Stop(Exception):
        pass

    def stop(event: dict[str, Any]) -> None:
        if event["event"] == "step":
            raise Stop

    with pytest.raises(Stop):
        fill_text(text, [Span(at, at, "s", 8)], model=spec, decode=cfg, options=loose, on_progress=stop)
