"""PTP decoding (infill.decoding.ptp) on tiny random models: path identity with autoregressive inverse-CDF
sampling for any drafter, iteration counts, exactness by enumeration, the adapter's gating, the fill path."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from infill.config import DecodeConfig, ModelSpec
from infill.decoding import ptp
from infill.decoding.blockfill import fill_middle, generate
from infill.decoding.coupling import draw_u, pick
from infill.decoding.sampling import probs
from infill.errors import DecodeError, InputError
from infill.models.blockdiff import BlockDiffModel, load_folder
from infill.models.ptp import ADAPTER_FILE, PTPAdapter, load_adapter
from infill.models.tiny import tiny_blockdiff_checkpoint as tiny_checkpoint
from tests.fixtures_bd import END, MASK, V, tiny_backend, tiny_causal_lm
from tests.fixtures_stats import mixture_power, pooled_p_value

torch.set_num_threads(1)
PROMPT = torch.tensor([3, 7, 11, 5, 2, 9])
P = int(PROMPT.numel())
CONFIGS = {
    "T1": DecodeConfig(decoder="ptp"),
    "T0.8-topk5-topp0.9": DecodeConfig(decoder="ptp", temperature=0.8, top_k=5, top_p=0.9),
    "greedy": DecodeConfig(decoder="ptp", temperature=0.0),
}


def random_adapter(bk: BlockDiffModel, slots: int = 4, scale: float = 0.3, seed: int = 0) -> PTPAdapter:
    """An adapter with every weight random (not the zero start): its slots really differ from the teacher."""
    ad = PTPAdapter.for_teacher(bk.model, rank=4, slots=slots)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for prm in ad.parameters():
            prm.copy_(torch.randn(prm.shape, generator=g) * scale)
    return ad


def ar_reference(bk: BlockDiffModel, n: int, u: torch.Tensor, cfg: DecodeConfig) -> list[int]:
    """Autoregressive inverse-CDF sampling with full causal forwards and no cache: position j is a mask token
    seeing the tokens before it; token = pick(u[j], q_j). Stops after an end token (which it includes)."""
    ids = PROMPT.tolist()
    for j in range(n):
        inp = torch.tensor([*ids, MASK])
        with torch.no_grad():
            logits = bk.model(input_ids=inp[None], position_ids=torch.arange(len(inp))[None]).logits[0, -1]
        logits[MASK] = float("-inf")
        ids.append(int(pick(u[j], probs(logits[None], cfg.temperature, cfg.top_k, cfg.top_p)[0])))
        if ids[-1] in bk.end_ids:
            break
    return ids[P:]


def drafters(ref: list[int]) -> dict[str, ptp.DraftFn]:
    """Draft functions (position i, u (n,)) -> drafts for positions i+1..i+n-1, given the reference path."""

    def oracle(i: int, u: torch.Tensor) -> torch.Tensor:
        got = ref[i - P + 1 : i - P + u.numel()]
        return torch.tensor(got + [0] * (u.numel() - 1 - len(got)), dtype=torch.long)

    def wrong(i: int, u: torch.Tensor) -> torch.Tensor:
        return (oracle(i, u) + 1) % (V - 2)  # never the reference token, never the mask

    gen = torch.Generator().manual_seed(7)

    def rand(i: int, u: torch.Tensor) -> torch.Tensor:
        return torch.randint(0, 6, (u.numel() - 1,), generator=gen)  # small ids: some drafts are right

    return {"oracle": oracle, "always-wrong": wrong, "random": rand}


@pytest.fixture(scope="module")
def backend() -> BlockDiffModel:
    return tiny_backend("qwen3", end=False)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_path_identity_for_every_drafter(backend: BlockDiffModel, name: str) -> None:
    """Same u -> the same tokens as autoregressive inverse-CDF sampling, for the adapter and for an oracle,
    a random and an always-wrong drafter; 2 forwards per iteration, never more forwards than tokens."""
    n = 17
    for seed in range(3):
        cfg = CONFIGS[name]
        ref = ar_reference(backend, n, draw_u(n, torch.Generator().manual_seed(seed)), cfg)
        runs = {k: dict(draft_fn=fn) for k, fn in drafters(ref).items()}
        ptp.attach(backend, random_adapter(backend, seed=seed))
        runs["adapter"] = {}
        for label, kw in runs.items():
            out, st = ptp.decode(backend, PROMPT, n, cfg, torch.Generator().manual_seed(seed), **kw)  # type: ignore[arg-type]
            assert out.tolist() == ref, (label, seed)
            assert st.tokens == n and st.nfe <= st.tokens
            fw, iterations = st.extra["forwards"], st.extra["iterations"]
            assert fw["prefill"] == 1 and fw["prefill"] + fw["draft"] == iterations  # one F1 per iteration
            assert iterations - 1 <= fw["verify"] <= iterations  # one F2, but not when 1 token is left
            assert st.nfe == sum(fw.values())
    ptp.attach(backend, None)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_oracle_gives_n_plus_one_and_always_wrong_exactly_two_per_iteration(backend: BlockDiffModel, k: int) -> None:
    cfg = DecodeConfig(decoder="ptp", k=k)
    n = 3 * (k + 1)  # three whole oracle iterations
    ref = ar_reference(backend, n, draw_u(n, torch.Generator().manual_seed(5)), cfg)
    fns = drafters(ref)
    _, st = ptp.decode(backend, PROMPT, n, cfg, torch.Generator().manual_seed(5), draft_fn=fns["oracle"])
    assert st.extra["iterations"] == 3 and st.extra["drafts_accepted"] == [k - 1] * 3 and st.nfe == 6
    assert st.accepted == [k + 1] * 3  # tokens made final: t_i, the k - 1 drafts, the bonus token
    assert st.extra["tokens_per_iteration"] == k + 1
    n_even = 2 * (n // 2)  # whole always-wrong iterations
    _, st = ptp.decode(backend, PROMPT, n_even, cfg, torch.Generator().manual_seed(5), draft_fn=fns["always-wrong"])
    assert st.extra["iterations"] == n_even // 2 and st.extra["drafts_accepted"] == [0] * (n_even // 2)
    assert st.accepted == [2] * (n_even // 2)
    assert st.nfe == n_even == st.tokens  # 2 forwards, 2 tokens: t_i from the teacher row, then the correction


def test_greedy_ptp_is_greedy_ar(backend: BlockDiffModel) -> None:
    ptp.attach(backend, random_adapter(backend))
    ar_cfg = DecodeConfig(decoder="confidence", block_size=1, temperature=0.0)
    ar, _ = generate(backend, PROMPT, 12, ar_cfg, torch.Generator())
    out, st = generate(backend, PROMPT, 12, DecodeConfig(decoder="ptp", temperature=0.0), torch.Generator())
    assert out.tolist() == ar.tolist() and st.decoder == "ptp"
    assert st.extra["drafter"] == "independent"  # at T = 0 u carries nothing: the drafter runs without it
    ptp.attach(backend, None)


def test_stops_at_the_end_token_like_ar() -> None:
    bk = tiny_backend("qwen3", seed=2)  # END is an end token
    ptp.attach(bk, random_adapter(bk, slots=6))
    stopped = 0
    for seed in range(6):
        cfg = DecodeConfig(decoder="ptp", temperature=2.0)  # flat: END comes up within 30 tokens
        ref = ar_reference(bk, 30, draw_u(30, torch.Generator().manual_seed(seed)), cfg)
        out, st = ptp.decode(bk, PROMPT, 30, cfg, torch.Generator().manual_seed(seed))
        ended = ref[-1] == END
        assert out.tolist() == (ref[:-1] if ended else ref) and st.extra["ended"] == ended
        assert st.tokens == len(ref) and st.nfe <= st.tokens
        stopped += ended
    assert stopped >= 2  # the end path was exercised


def test_teacher_rows_are_untouched_by_the_adapter(backend: BlockDiffModel) -> None:
    """F1's teacher row equals a plain commit + mask row (the adapter is gated off there), and a
    zero-initialised adapter's slots are the teacher's own bidirectional mask-block draft."""
    u = draw_u(4, torch.Generator().manual_seed(0))
    plain_state = backend.new_state()
    plain = backend.commit(plain_state, PROMPT, 1, draft_ids=torch.tensor([MASK]))
    session = ptp.KVSession(backend, adapter=random_adapter(backend))
    q0, drafts = session.propose(PROMPT, u)
    assert plain is not None and torch.allclose(q0, plain[0], atol=1e-5)
    assert session.state.length == P and session.state.cache.get_seq_length() == P
    zero = ptp.KVSession(backend, adapter=PTPAdapter.for_teacher(backend.model, slots=4))
    _, zdrafts = zero.propose(PROMPT, u)
    block = backend.commit(backend.new_state(), PROMPT, 1, draft_ids=torch.full((4,), MASK))  # (4, V)
    assert block is not None and zdrafts.tolist() == block[1:].argmax(-1).tolist()  # the block draft
    assert drafts.shape == (3,)


def test_adapter_file_round_trip_and_missing_adapter(tmp_path: Path) -> None:
    folder = tiny_checkpoint(tmp_path / "m", seed=0)
    loaded = load_folder(folder, ModelSpec(device="cpu", bf16=False))
    with pytest.raises(InputError, match="ptp_adapter.safetensors"):
        fill_middle(loaded, "x = ", "\n", 4, DecodeConfig(decoder="ptp"), torch.Generator())
    ad = random_adapter(loaded.model)
    ad.save(folder / ADAPTER_FILE, provenance={"test": True})
    back = load_adapter(folder / ADAPTER_FILE, loaded.model.model)
    assert back.cfg.provenance == {"test": True} and back.cfg.slots == 4
    for (n1, p1), (n2, p2) in zip(ad.state_dict().items(), back.state_dict().items(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)
    text, st = fill_middle(loaded, "x = ", "\n", 6, DecodeConfig(decoder="ptp"), torch.Generator().manual_seed(1))
    assert isinstance(text, str) and st.decoder == "ptp" and 1 <= st.tokens <= 6
    other = tiny_backend("qwen3")  # another shape: a clear error, not a crash
    with pytest.raises(Exception, match="trained for"):
        load_adapter(folder / ADAPTER_FILE, other.model)
    shifted = tiny_backend("qwen2", shifted=True)
    with pytest.raises(InputError, match="position-aligned"):
        ptp.decode(shifted, PROMPT, 4, DecodeConfig(decoder="ptp"), torch.Generator(), draft_fn=lambda i, u: u.long())
    with pytest.raises(DecodeError, match="block size 1"):
        ptp.decode(loaded.model, PROMPT, 4, DecodeConfig(decoder="ptp", block_size=4), torch.Generator())


def test_infill_fill_with_decoder_ptp(tmp_path: Path) -> None:
    from infill.cli import main

    folder = tiny_checkpoint(tmp_path / "m", seed=1)
    src = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
    path = tmp_path / "ex.py"
    path.write_text(src)
    args = ["fill", str(path), "--model", str(folder), "--span", "2:2", "--no-syntax-check", "-o", "-"]
    args += ["--allow-syntax-errors", "--decoder", "ptp", "--daemon", "off"]
    missing = CliRunner().invoke(main, args)
    assert missing.exit_code == 2 and "infill train ptp" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    loaded = load_folder(folder, ModelSpec(device="cpu", bf16=False))
    random_adapter(loaded.model).save(folder / ADAPTER_FILE)
    from infill import api

    api.clear_model_cache()
    result = CliRunner().invoke(main, [*args, "--stats"])
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines(keepends=True)
    assert out[0] == "def add(a, b):\n" and "".join(out[-3:]) == "\n\nprint(add(1, 2))\n"
    assert "decoder=ptp" in result.stderr
    result = CliRunner().invoke(main, [*args[:-4], "--decoder", "ptp", "--daemon", "off", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stats"]["decoder"] == "ptp"
    # the server's fill request takes the same path
    from infill.server.dispatch import Dispatcher, ModelCache, ServerContext

    server = Dispatcher(context=ServerContext(ModelCache()))
    params = {"text": src, "span": "2:2", "model": str(folder), "decoder": "ptp", "syntax_check": False}
    line = json.dumps({"id": 1, "method": "fill", "params": {**params, "allow_syntax_errors": True}})
    reply = json.loads(server.handle_line(line.encode() + b"\n"))
    assert reply["stats"]["decoder"] == "ptp" and reply["edits"][0]["start_line"] == 2, reply
    api.clear_model_cache()


# ---- exactness by enumeration: the loop against the exact joint of a tiny teacher -------------------------------

V_REAL, E_MASK, M_POS = 5, 5, 4
Filling = tuple[int, ...]
E_PROMPT = (1, 3)


@cache
def _enum_model() -> torch.nn.Module:
    # peaky conditionals that depend strongly on the context (the seed and scale were picked for it): drafts
    # from the first slot's distribution are then often wrong, and the negative control is far from the joint
    model: torch.nn.Module = tiny_causal_lm(seed=0, vocab=V_REAL + 1, width=(16, 2, 1, 32), positions=32, scale=14.0)
    return model


@cache
def teacher_logits(seq: tuple[int, ...]) -> torch.Tensor:
    """The teacher's logits (V,) at the position after `seq` (a mask token there), memoized: at most
    1 + 5 + 25 + 125 prefixes are ever computed."""
    inp = torch.tensor([*seq, E_MASK])
    with torch.no_grad():
        logits = _enum_model()(input_ids=inp[None], position_ids=torch.arange(len(inp))[None]).logits[0, -1]
    logits[E_MASK] = float("-inf")
    return logits


class MemoSession:
    """ptp.Session over the memoized teacher; drafts from a function of (committed tokens, u). With
    `rubber_stamp`, verify claims the drafts are exactly the teacher's picks (accepting without verification:
    the negative control)."""

    def __init__(self, drafter: Callable[[tuple[int, ...], torch.Tensor], torch.Tensor], rubber_stamp: bool) -> None:
        self.seq: tuple[int, ...] = ()
        self.drafter, self.rubber_stamp = drafter, rubber_stamp
        self.clean: list[int] = []
        self.drafts = torch.zeros(0, dtype=torch.long)
        self._counts = {"draft": 0, "verify": 0}

    @property
    def nfe(self) -> int:
        return sum(self._counts.values())

    @property
    def counts(self) -> dict[str, int]:
        return self._counts

    def propose(self, pending: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self._counts["draft"] += 1
        self.seq += tuple(pending.tolist())
        self.drafts = self.drafter(self.seq, u)
        return teacher_logits(self.seq), self.drafts

    def verify(self, clean: torch.Tensor, m: int) -> torch.Tensor:
        self._counts["verify"] += 1
        self.clean = clean.tolist()
        rows = [teacher_logits(self.seq + tuple(self.clean[: r + 1])) for r in range(m)]
        if self.rubber_stamp:
            for r in range(min(m, int(self.drafts.numel()))):
                rows[r] = torch.full((V_REAL + 1,), float("-inf"))
                rows[r][int(self.drafts[r])] = 0.0  # one-hot at the draft: pick returns it for any u
        return torch.stack(rows)

    def keep(self, kept: int) -> None:
        self.seq += tuple(self.clean[:kept])


def context_drafter(cfg: DecodeConfig) -> Callable[[tuple[int, ...], torch.Tensor], torch.Tensor]:
    """Drafts every later slot with its own u from the distribution at the FIRST slot (the context only): a
    coupled but wrong guess that is right often enough to exercise partial acceptance."""

    memo: dict[tuple[int, ...], torch.Tensor] = {}

    def draft(seq: tuple[int, ...], u: torch.Tensor) -> torch.Tensor:
        if seq not in memo:
            memo[seq] = probs(teacher_logits(seq)[None], cfg.temperature, cfg.top_k, cfg.top_p)  # (1, V)
        return pick(u[1:], memo[seq].expand(u.numel() - 1, -1))

    return draft


def conditional(cfg: DecodeConfig, seq: tuple[int, ...]) -> list[float]:
    """The teacher's sampling distribution (V,) after `seq` under cfg's temperature, top-k and top-p."""
    return _conditional(seq, cfg.temperature, cfg.top_k, cfg.top_p)


@cache
def _conditional(seq: tuple[int, ...], temperature: float, top_k: int, top_p: float) -> list[float]:
    return [float(p) for p in probs(teacher_logits(seq)[None], temperature, top_k, top_p)[0]]


def exact_joint(cfg: DecodeConfig) -> dict[tuple[int, ...], float]:
    joint = {}
    for x in itertools.product(range(V_REAL), repeat=M_POS):
        pr = 1.0
        for j in range(M_POS):
            pr *= conditional(cfg, E_PROMPT + x[:j])[x[j]]
        joint[x] = pr
    assert abs(sum(joint.values()) - 1.0) < 1e-9  # the chain rule covers all 5^4 fillings
    return joint


def control_joint(cfg: DecodeConfig) -> dict[tuple[int, ...], float]:
    """The distribution the rubber-stamping verifier samples (the negative control), by enumeration: the first
    iteration keeps the teacher's token, both drafts unverified (each from the first slot's distribution, with
    its own u) and the bonus token from the teacher after them; its 4 tokens fill all M_POS positions."""
    q0 = conditional(cfg, E_PROMPT)
    out = {}
    for x in itertools.product(range(V_REAL), repeat=M_POS):
        out[x] = q0[x[0]] * q0[x[1]] * q0[x[2]] * conditional(cfg, E_PROMPT + x[:3])[x[3]]
    return out


def sample_counts(cfg: DecodeConfig, samples: int, rubber_stamp: bool = False) -> tuple[Counter[Filling], float]:
    """(counts of the fillings, mean tokens per iteration) of `samples` decodes of M_POS tokens with 3 slots."""
    gen = torch.Generator().manual_seed(2024)
    counts: Counter[tuple[int, ...]] = Counter()
    iters = 0
    drafter = context_drafter(cfg)
    for _ in range(samples):
        session = MemoSession(drafter, rubber_stamp)
        u = draw_u(M_POS, gen)
        tokens, st = ptp.run(session, torch.tensor(E_PROMPT), M_POS, u, cfg, slots=3)
        counts[tuple(tokens)] += 1
        iters += st.extra["iterations"]
    return counts, samples * M_POS / iters


def on_support(joint: dict[tuple[int, ...], float]) -> dict[tuple[int, ...], float]:
    return {x: pr for x, pr in joint.items() if pr > 0}


EXACT = {
    "T1": DecodeConfig(decoder="ptp"),
    "T1.2-topk4-topp0.9": DecodeConfig(decoder="ptp", temperature=1.2, top_k=4, top_p=0.9),
}
EXACT_SAMPLES = 1_500  # test_the_control_is_far_enough: power >= 0.99 at a third of the way to the control


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_by_enumeration(name: str) -> None:
    cfg = EXACT[name]
    joint = on_support(exact_joint(cfg))
    counts, per_iter = sample_counts(cfg, EXACT_SAMPLES)
    assert set(counts) <= set(joint)  # never the mask, never a token top-k / top-p removed
    assert pooled_p_value(counts, joint) > 1e-4
    assert 2.0 < per_iter < 4.0  # drafts were accepted sometimes and rejected sometimes


@pytest.mark.parametrize("name", sorted(EXACT))
def test_the_control_is_far_enough(name: str) -> None:
    """A sampler a third of the way from the exact joint to the negative control's distribution fails the
    chi-square test of `EXACT_SAMPLES` draws with probability >= 0.99 (the control's mass outside the joint's
    support, which the support assertion catches on its own, is left out)."""
    cfg = EXACT[name]
    joint = on_support(exact_joint(cfg))
    assert mixture_power(joint, control_joint(cfg), EXACT_SAMPLES, eps=1 / 3) >= 0.99


def test_accepting_drafts_without_verification_fails() -> None:
    """The negative control: the same drafter with a verifier that rubber-stamps every draft samples
    `control_joint` (so the power computed from it is the power against this bug), which is visibly not the
    joint."""
    cfg = EXACT["T1"]
    counts, _ = sample_counts(cfg, 1_000, rubber_stamp=True)
    assert pooled_p_value(counts, on_support(control_joint(cfg))) > 1e-4
    assert pooled_p_value(counts, on_support(exact_joint(cfg))) < 1e-6


def test_packaged_adapter_fits_the_packaged_model_and_decodes_exactly() -> None:
    """The shipped adapter loads onto the packaged block-diffusion model, records that it beat the
    independent-slot baseline on held-out text, and decodes the same tokens as k = 1 (autoregressive
    inverse-CDF sampling, no drafts) with fewer passes than tokens."""
    from infill.decoding.blockfill import build_prompt
    from infill.models.loading import WEIGHTS_DIR

    loaded = load_folder(WEIGHTS_DIR / "blockdiff", ModelSpec(name="blockdiff", device="cpu", bf16=False))
    adapter = ptp.adapter_of(loaded.model)
    measured = adapter.cfg.provenance["heldout_tokens_per_iteration"]
    assert adapter.cfg.slots == 8 and measured["ptp"] > measured["independent"]
    ids, _, _ = build_prompt(loaded.tokenizer, "def mean(values):\n    total = sum(values)\n", "\n", None)
    prompt = torch.tensor(ids)
    cfg = DecodeConfig(decoder="ptp", seed=1)
    ar, st_ar = ptp.decode(loaded.model, prompt, 16, replace(cfg, k=1), torch.Generator().manual_seed(1))
    out, st = ptp.decode(loaded.model, prompt, 16, cfg, torch.Generator().manual_seed(1))
    assert out.tolist() == ar.tolist() and st.tokens == st_ar.tokens == st_ar.nfe
    assert st.nfe <= st.tokens and st.extra["drafter"] == "ptp"
