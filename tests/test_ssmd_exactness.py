"""SSMD exactness by enumeration, on a tiny block-diffusion model (5 tokens + mask) with a random causal head
whose output projection is far from zero (so p_C and p_NC differ).

1. Inner loop, h frozen: the tokens one window reveals follow the head's causal joint over the window,
   p_NC(x_0) p_C(x_1 | x_0) p_C(x_2 | x_0, x_1), for K = 2 and K = 3 passes (3 positions, 125 cells).
2. The full sampler (`infill.decoding.ssmd.decode`, K = 1, w = 2) against a brute-force recursion over its
   full forwards and inner loops: its output is path-dependent, and the recursion computes exactly that.
3. Negative controls, which must fail the same tests: the inner loop with its ratio test skipped (every
   draft accepted), and the full sampler revealing each whole window from p_NC.

Chi-square tests at a fixed seed; cells with small expected counts are pooled. Sample counts are sized for
the run time: the controls are far off (non-centrality about 0.6 to 1.8 per sample), so 1,500 samples make
them fail by a wide margin. Forwards and causal passes are memoized (deterministic; a replay returns what a
fresh computation returns); the samplers' own logic runs on every sample.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest
import torch

import infill.decoding.ssmd as ssmd
import infill.models.ssmd as ssmd_head
from infill.config import DecodeConfig
from infill.decoding.sampling import probs
from infill.models.blockdiff import BlockDiffModel
from infill.models.ssmd import SSMDHead, causal_logits
from tests.fixtures_ssmd import MASK, V_REAL, random_head, tiny_backend
from tests.fixtures_stats import pooled_p_value

torch.set_num_threads(1)

CFG = DecodeConfig(decoder="ssmd", temperature=1.0)
PROMPT = torch.tensor([0, 3, 1, 4, 2])  # 5 tokens: block [4, 8) holds the prompt's tail and 3 masked positions
BLOCK = 4
Joint = dict[tuple[int, ...], float]


def chi_square_p(counts: Counter[tuple[int, ...]], joint: Joint) -> float:
    support = {x: p for x, p in joint.items() if p > 0}
    assert set(counts) <= set(support), set(counts) - set(support)  # never a mask or an impossible filling
    return pooled_p_value(counts, support)


def full_pass(bk: BlockDiffModel, block: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft logits (B, V) and last hidden states (B, D) of the current block after the prompt's complete
    first block."""
    st = bk.new_state()
    st.want_hidden = True
    bk.commit(st, PROMPT[:BLOCK], BLOCK)
    logits = bk.draft(st, block)
    assert st.hidden is not None
    return logits, st.hidden


def window_causal(
    bk: BlockDiffModel, head: SSMDHead, logits: torch.Tensor, hidden: torch.Tensor, win: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The causal pass over the window `win` (block offsets), memoized on the window's tokens."""
    inner = bk.model
    memo: dict[tuple[int, ...], torch.Tensor] = {}

    def causal(tokens: torch.Tensor) -> torch.Tensor:
        key = tuple(tokens.tolist())
        if key not in memo:
            emb, lm = inner.get_input_embeddings(), inner.get_output_embeddings()
            memo[key] = causal_logits(head, emb, lm, tokens, hidden[win], win, logits[win])
        return memo[key]

    return causal


@pytest.fixture(scope="module")
def setup() -> tuple[BlockDiffModel, SSMDHead]:
    head = random_head(seed=1, scale=1.0)
    return tiny_backend(seed=2, head=head), head


# ---- 1. the inner loop -----------------------------------------------------------------------------------


def causal_joint(nc: torch.Tensor, causal: Callable[[torch.Tensor], torch.Tensor]) -> Joint:
    """p_NC(x_0) * prod_j p_C(x_j | x_<j) over all V^w windows, from the causal pass with x written in."""
    w = int(nc.shape[0])
    joint: Joint = {}
    for x in itertools.product(range(V_REAL), repeat=w):
        pc = probs(causal(torch.tensor(x)), CFG.temperature)  # (w, V); row 0 = p_NC
        joint[x] = float(torch.prod(pc[torch.arange(w), torch.tensor(x)]))
    assert abs(sum(joint.values()) - 1.0) < 1e-9
    return joint


def inner_setup(setup: tuple[BlockDiffModel, SSMDHead]) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    bk, head = setup
    block = torch.cat([PROMPT[BLOCK:], torch.full((3,), MASK)])
    logits, hidden = full_pass(bk, block)
    win = torch.tensor([1, 2, 3])
    return logits[win], window_causal(bk, head, logits, hidden, win)


@pytest.mark.parametrize(("passes", "samples"), [(2, 4_000), (3, 2_000)])
def test_inner_loop_follows_the_causal_joint(setup: tuple[BlockDiffModel, SSMDHead], passes: int, samples: int) -> None:
    nc, causal = inner_setup(setup)
    joint = causal_joint(nc, causal)
    g = torch.Generator().manual_seed(11)
    counts: Counter[tuple[int, ...]] = Counter()
    used: Counter[int] = Counter()
    for _ in range(samples):
        tokens, decided, n_passes = ssmd.speculate_window(nc, causal, CFG, g, passes)
        assert tokens.numel() == 3 and decided.shape == (3, V_REAL + 1)  # K >= 2 reveals a window of 3
        counts[tuple(tokens.tolist())] += 1
        used[n_passes] += 1
    assert chi_square_p(counts, joint) > 1e-4
    assert used[2] > samples // 10  # the second pass really ran (a rejection in the first)


def test_inner_loop_without_the_ratio_test_fails(
    setup: tuple[BlockDiffModel, SSMDHead], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every draft accepted: the window is revealed from the factorized p_NC."""
    nc, causal = inner_setup(setup)
    joint = causal_joint(nc, causal)
    monkeypatch.setattr(ssmd, "accept_prefix", lambda p, q, drafts, g, gamma=1.0: (int(drafts.numel()), None))
    g = torch.Generator().manual_seed(11)
    counts = Counter(tuple(ssmd.speculate_window(nc, causal, CFG, g, 2)[0].tolist()) for _ in range(1_500))
    assert chi_square_p(counts, joint) < 1e-6


# ---- 2. the full sampler -----------------------------------------------------------------------------------


def residual(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    r = torch.clamp(q - p, min=0.0)
    return r / r.sum()


def inner_outcomes(nc: torch.Tensor, causal: Callable[[torch.Tensor], torch.Tensor], passes: int) -> Joint:
    """Exact distribution of what one inner loop reveals: every draft vector, every accept / reject branch,
    every resampled token."""
    w = int(nc.shape[0])
    p_nc = probs(nc, CFG.temperature)  # (w, V)
    out: Joint = defaultdict(float)

    def branch(tokens: list[int], drafts: tuple[int, ...], pos: int, used: int, prob: float) -> None:
        if pos == w or used == passes:
            out[tuple(tokens[:pos])] += prob
            return
        p_c = probs(causal(torch.tensor(tokens)), CFG.temperature)
        for j in range(pos, w):
            a = min(1.0, float(p_c[j, drafts[j]] / p_nc[j, drafts[j]]))
            if a < 1.0:
                res = residual(p_c[j], p_nc[j])
                for v in range(V_REAL):
                    if res[v] > 0:
                        fixed = list(tokens)
                        fixed[j] = v
                        branch(fixed, drafts, j + 1, used + 1, prob * (1 - a) * float(res[v]))
            prob *= a
            if prob == 0.0:
                return
        out[tuple(tokens)] += prob

    for drafts in itertools.product(range(V_REAL), repeat=w):
        pd = float(torch.prod(p_nc[torch.arange(w), torch.tensor(drafts)]))
        if pd == 0.0:
            continue
        if w == 1:
            out[drafts] += pd
        else:
            branch(list(drafts), drafts, 0, 0, pd)
    return out


def exact_sampler(bk: BlockDiffModel, head: SSMDHead, n_gen: int, passes: int, window: int) -> Joint:
    """Brute-force recursion over the sampler's steps for one block: each full forward, its window's inner
    loop outcomes, then the next full forward on the block with those tokens written in."""

    def rec(block: torch.Tensor) -> Joint:
        masked = (block == MASK).nonzero().squeeze(-1)
        if masked.numel() == 0:
            return {tuple(block[BLOCK - n_gen :].tolist()): 1.0}
        logits, hidden = full_pass(bk, block)
        win = masked[: min(window, int(masked.numel()))]
        outcome = inner_outcomes(logits[win], window_causal(bk, head, logits, hidden, win), passes)
        result: Joint = defaultdict(float)
        for revealed, pr in outcome.items():
            nxt = block.clone()
            nxt[win[: len(revealed)]] = torch.tensor(revealed, dtype=torch.long)
            for x, q in rec(nxt).items():
                result[x] += pr * q
        return result

    joint = rec(torch.cat([PROMPT[BLOCK:], torch.full((n_gen,), MASK)]))
    assert abs(sum(joint.values()) - 1.0) < 1e-9
    return joint


@pytest.fixture
def memo_causal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memoize the decoder's causal passes on (window tokens, hidden states, offsets)."""
    memo: dict[tuple[object, ...], torch.Tensor] = {}
    real = ssmd_head.causal_logits

    def cached(
        head: SSMDHead,
        embed: object,
        lm: object,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        offsets: torch.Tensor,
        nc: torch.Tensor,
    ) -> torch.Tensor:
        key = (tuple(tokens.tolist()), hidden.numpy().tobytes(), tuple(offsets.tolist()), nc.numpy().tobytes())
        if key not in memo:
            memo[key] = real(head, embed, lm, tokens, hidden, offsets, nc)  # type: ignore[arg-type]
        return memo[key]

    monkeypatch.setattr(ssmd_head, "causal_logits", cached)


def sampler_counts(bk: BlockDiffModel, cfg: DecodeConfig, samples: int) -> Counter[tuple[int, ...]]:
    g = torch.Generator().manual_seed(5)
    counts: Counter[tuple[int, ...]] = Counter()
    for _ in range(samples):
        tokens, stats = ssmd.decode(bk, PROMPT, 3, cfg, g)
        counts[tuple(tokens.tolist())] += 1
    assert stats.extra["mode"] == "ssmd" and stats.nfe == 2  # two full forwards: windows of 2, then 1
    return counts


FULL = DecodeConfig(decoder="ssmd", ssmd_passes=1, ssmd_window=2, block_size=BLOCK)


def test_full_sampler_matches_its_recursion(setup: tuple[BlockDiffModel, SSMDHead], memo_causal: None) -> None:
    bk, head = setup
    joint = exact_sampler(bk, head, 3, passes=1, window=2)
    assert chi_square_p(sampler_counts(bk, FULL, 2_000), joint) > 1e-4


def test_full_sampler_revealing_windows_from_p_nc_fails(
    setup: tuple[BlockDiffModel, SSMDHead], memo_causal: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    bk, head = setup
    joint = exact_sampler(bk, head, 3, passes=1, window=2)
    monkeypatch.setattr(ssmd, "accept_prefix", lambda p, q, drafts, g, gamma=1.0: (int(drafts.numel()), None))
    assert chi_square_p(sampler_counts(bk, FULL, 1_500), joint) < 1e-6


def test_recursion_is_path_dependent(setup: tuple[BlockDiffModel, SSMDHead]) -> None:
    """With K = 1 and w = 3 a rejection leaves the last position to the next full forward: the recursion
    differs from the K = 3 one (which always reveals the whole window), so it is not one fixed joint."""
    bk, head = setup
    one, three = exact_sampler(bk, head, 3, 1, 3), exact_sampler(bk, head, 3, 3, 3)
    assert max(abs(one[x] - three.get(x, 0.0)) for x in one) > 1e-3
