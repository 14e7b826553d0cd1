"""Token healing by enumeration (infill.decoding.healing; docs/decoding.md, "Token healing").

A tiny random XLNet over 5 tokens whose texts overlap ("a", "b", "ab", "ba", "bab") fills 3 positions that must
begin with a given text. The exact conditional p(fill | prompt, the fill's text begins with r) is the exact joint
(chain rule over all 5^3 fills, one oracle pass each) restricted to the fills that begin with r and renormalised.
Every exact sampler must match it by chi-square; two samplers must fail the same test: the unconstrained fill
(the negative control the brief names) and the tempting shortcut of renormalising over the consistent tokens at
every step, which is not the conditional (a first token that spells only part of r is over-weighted); each case draws
as many fills as catching a sampler a third of the way to the shortcut needs (test_each_case_has_power). Greedy
decoding takes the best consistent token at every step; a wide beam finds the conditional's argmax. The same
holds for a left-to-right FIM model (infill.models.autoregressive.CausalFim).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from fixtures_bd import tiny_causal_lm
from test_decoding_exactness import MASK, V_REAL, exact_joint

from infill.config import DecodeConfig
from infill.decoding import decode
from infill.decoding.sampling import probs, sample
from infill.errors import DecodeError
from infill.models.autoregressive import CausalFim
from infill.models.base import FillProblem, Healing, Pieces
from infill.models.fim import FimTokens
from tests.fixtures_decode import Memo, tiny_xlnet
from tests.fixtures_stats import mixture_power, pooled_p_value

torch.set_num_threads(1)

PIECES = Pieces([b"a", b"b", b"ab", b"ba", b"bab", b""])  # id 5 is <mask>: no text
SAMPLES = 3_000  # the negative controls' draws: the whole shortcut fails at p < 1e-6
LAYOUTS: dict[str, list[int | None]] = {
    "empty-suffix": [2, 3, None, None, None],
    "with-suffix": [1, None, None, None, 0],
}
HEALS = (b"ab", b"aba", b"b")
# each exactness test's case: a layout, the text the fill must begin with, the sampling transform and the draws,
# as many as its power needs: a sampler a third of the way from the conditional to the step-wise shortcut fails
# with probability >= 0.99 (test_each_case_has_power). "with-suffix" with "aba" is the case where the shortcut
# is nearest (0.17 in total variation): 4k draws; the others are 0.3 away and 1.5k draws are plenty
CASES: dict[str, tuple[str, bytes, DecodeConfig, int]] = {
    "empty-suffix": ("empty-suffix", b"aba", DecodeConfig(), 1_500),
    "with-suffix": ("with-suffix", b"aba", DecodeConfig(), 4_000),
    "transformed": ("empty-suffix", b"ab", DecodeConfig(temperature=1.4, top_k=4), 1_500),
}
SAMPLERS = [
    DecodeConfig(decoder="sequential"),
    DecodeConfig(decoder="assd", k=3, draft="model"),
    DecodeConfig(decoder="assd", k=4, draft="lookup"),
]


@pytest.fixture(scope="module")
def model() -> Memo:
    """Seed 5: a model whose step-wise shortcut is far from the conditional (test_the_shortcut_...)."""
    return Memo(tiny_xlnet(V_REAL + 1, n_layer=2, d_model=16, seed=5, init_scale=0.3))


def problem_of(layout: list[int | None], heal: bytes | None) -> FillProblem:
    ids = torch.tensor([MASK if t is None else t for t in layout])
    masked = torch.tensor([i for i, t in enumerate(layout) if t is None])
    return FillProblem(ids=ids, masked=masked, heal=None if heal is None else Healing(heal, PIECES))


def conditional(model: object, problem: FillProblem, cfg: DecodeConfig, heal: bytes) -> dict[tuple[int, ...], float]:
    """The exact joint restricted to the fills whose text begins with `heal`, renormalised."""
    joint = exact_joint(model, problem, cfg)  # type: ignore[arg-type]
    kept = {x: p for x, p in joint.items() if PIECES.text(list(x)).startswith(heal) and p > 0}
    total = sum(kept.values())
    return {x: p / total for x, p in kept.items()}


Draw = Callable[[object, FillProblem, torch.Generator], tuple[int, ...]]


def decoder_draw(cfg: DecodeConfig) -> Draw:
    def draw(model: object, problem: FillProblem, g: torch.Generator) -> tuple[int, ...]:
        tokens, stats = decode(model, problem, cfg, g)  # type: ignore[arg-type]
        assert "heal_lossy" not in stats.extra  # the exact rejection never ran out of tries
        return tuple(tokens.tolist())

    return draw


def stepwise_draw(model: object, problem: FillProblem, g: torch.Generator) -> tuple[int, ...]:
    """The shortcut: every step renormalised over the tokens consistent with what remains of the text."""
    assert problem.heal is not None
    ids, masked = problem.ids.clone(), problem.masked
    written = b""
    for n in range(masked.shape[0]):
        pr = probs(model.draft(ids, masked, n, masked[n : n + 1]))[0]  # type: ignore[attr-defined]
        rest = problem.heal.rest(written)
        if rest:
            pr = pr * problem.heal.mask(rest, pr.shape[0])
        x = int(sample((pr / pr.sum())[None, :], g)[0])
        ids[masked[n]] = x
        written += PIECES.pieces[x]
    return tuple(ids[masked].tolist())


def p_value(
    model: object, problem: FillProblem, cfg: DecodeConfig, heal: bytes, draw: Draw, samples: int = SAMPLES
) -> float:
    target = conditional(model, problem, cfg, heal)
    g = torch.Generator().manual_seed(4321)
    counts = Counter(draw(model, problem, g) for _ in range(samples))
    outside = sum(c for x, c in counts.items() if x not in target)
    if outside:  # a fill that does not begin with the text: the cell the conditional gives no mass
        return 0.0
    return pooled_p_value(counts, target, samples)


def case_p_value(model: object, case: str, cfg: DecodeConfig) -> float:
    """`cfg`'s draws for one of CASES against its conditional (`cfg` carries the case's transform)."""
    layout, heal, _, samples = CASES[case]
    return p_value(model, problem_of(LAYOUTS[layout], heal), cfg, heal, decoder_draw(cfg), samples)


def shortcut_joint(
    model: object, problem: FillProblem, target: dict[tuple[int, ...], float], cfg: DecodeConfig, pieces: Pieces
) -> dict[tuple[int, ...], float]:
    """The step-wise shortcut's probability of each fill of `target`, by the chain rule of its steps (with
    `cfg`'s temperature and top-k/p)."""
    assert problem.heal is not None
    step: dict[tuple[int, ...], float] = {}
    for x in target:
        ids, p, written = problem.ids.clone(), 1.0, b""
        for n, t in enumerate(x):
            logits = model.draft(ids, problem.masked, n, problem.masked[n : n + 1])  # type: ignore[attr-defined]
            pr = probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)[0]
            rest = problem.heal.rest(written)
            if rest:
                pr = pr * problem.heal.mask(rest, pr.shape[0])
            p *= float(pr[t] / pr.sum())
            ids[problem.masked[n]] = t
            written += pieces.pieces[t]
        step[x] = p
    return step


def assert_power(target: dict[tuple[int, ...], float], step: dict[tuple[int, ...], float], samples: int) -> None:
    """The shortcut is well away from the conditional, and `samples` draws catch a sampler a third of the way
    there with probability >= 0.99."""
    tv = 0.5 * sum(abs(target[x] - step[x]) for x in target)
    power = mixture_power(target, step, samples, eps=1 / 3)
    print(f"shortcut at {tv:.3f} in total variation; {samples} draws catch 1/3 of the way with probability {power:.4f}")
    assert tv >= 0.15
    assert power >= 0.99


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_case_has_power(model: Memo, case: str) -> None:
    """Power: renormalising at every step over-weights a first token that spells part of the text; the total
    variation from the conditional is printed and kept well above the chi-square test's resolution, and the
    case's draws catch a sampler a third of the way from the conditional to the shortcut."""
    layout, heal, cfg, samples = CASES[case]
    problem = problem_of(LAYOUTS[layout], heal)
    target = conditional(model, problem, cfg, heal)
    assert_power(target, shortcut_joint(model, problem, target, cfg, PIECES), samples)


@pytest.mark.parametrize("case", ["empty-suffix", "with-suffix"])
def test_sequential_sampling_follows_the_conditional(model: Memo, case: str) -> None:
    assert case_p_value(model, case, SAMPLERS[0]) > 1e-4


@pytest.mark.parametrize("cfg", SAMPLERS[1:], ids=lambda c: c.draft)
def test_speculative_sampling_follows_the_conditional(model: Memo, cfg: DecodeConfig) -> None:
    """ASSD with each draft, from where healing ended; "aba" takes up to three tokens and the most restarts."""
    assert case_p_value(model, "with-suffix", cfg) > 1e-4


def test_transformed_sampling_follows_the_transformed_conditional(model: Memo) -> None:
    transform = CASES["transformed"][2]
    cfg = DecodeConfig(decoder="sequential", temperature=transform.temperature, top_k=transform.top_k)
    assert case_p_value(model, "transformed", cfg) > 1e-4


def test_negative_controls_fail(model: Memo) -> None:
    """The unconstrained fill, and the step-wise shortcut, fail the test the samplers pass; the shortcut's draws
    are the distribution the power tests enumerate for it (shortcut_joint)."""
    layout = LAYOUTS["with-suffix"]
    cfg = DecodeConfig(decoder="sequential")
    assert p_value(model, problem_of(layout, None), cfg, b"ab", decoder_draw(cfg)) < 1e-6
    problem = problem_of(layout, b"ab")
    target = conditional(model, problem, cfg, b"ab")
    g = torch.Generator().manual_seed(4321)
    counts = Counter(stepwise_draw(model, problem, g) for _ in range(SAMPLES))
    assert set(counts) <= set(target)
    assert pooled_p_value(counts, target, SAMPLES) < 1e-6
    assert pooled_p_value(counts, shortcut_joint(model, problem, target, cfg, PIECES), SAMPLES) > 1e-4


@pytest.mark.parametrize("heal", HEALS)
def test_greedy_takes_the_best_consistent_token_and_a_wide_beam_the_argmax(model: Memo, heal: bytes) -> None:
    problem = problem_of(LAYOUTS["with-suffix"], heal)
    ids, written = problem.ids.clone(), b""
    for n in range(problem.masked.shape[0]):  # greedy, by hand
        logits = model.draft(ids, problem.masked, n, problem.masked[n : n + 1])[0]
        rest = problem.heal.rest(written) if problem.heal is not None else b""
        if rest:
            logits = logits.masked_fill(~problem.heal.mask(rest, logits.shape[0]), float("-inf"))  # type: ignore[union-attr]
        ids[problem.masked[n]] = int(logits.argmax())
        written += PIECES.text([int(logits.argmax())])
    g = torch.Generator().manual_seed(0)
    for cfg in (DecodeConfig(decoder="sequential", temperature=0), DecodeConfig(decoder="assd", temperature=0)):
        tokens, _ = decode(model, problem, cfg, g)
        assert tokens.tolist() == ids[problem.masked].tolist()
    target = conditional(model, problem, DecodeConfig(), heal)
    writing = [x for x in target if len(PIECES.text(list(x))) > len(heal)]  # beam search wants some text written
    best = max(writing, key=lambda x: target[x])
    tokens, stats = decode(model, problem, DecodeConfig(decoder="beam", beam=V_REAL**3), g)
    assert tuple(tokens.tolist()) == best
    assert all(PIECES.text(f).startswith(heal) for _, f in stats.extra["nbest"])  # every hypothesis kept to it


def test_a_text_no_token_can_begin_is_an_error(model: Memo) -> None:
    problem = problem_of(LAYOUTS["with-suffix"], b"c")
    with pytest.raises(DecodeError, match="no token can begin"):
        decode(model, problem, DecodeConfig(decoder="sequential"), torch.Generator().manual_seed(0))


# --- a left-to-right FIM model ----------------------------------------------------------------------------------
END, PRE, SUF, MID = 5, 6, 7, 8
AR_VOCAB = 9
AR_PIECES = Pieces([b"a", b"b", b"ab", b"ba", b"bab", b"", b"", b"", b""])


@pytest.fixture(scope="module")
def fim() -> Memo:
    network = tiny_causal_lm("qwen2", seed=3, vocab=AR_VOCAB)
    return Memo(CausalFim(network, fim=FimTokens("qwen", PRE, SUF, MID), banned={END, PRE, SUF, MID}))


# a fill that begins with the token "bab" (4) repeats the prompt's "4 0 1 2", so the lookup drafts fire; the shortcut
# is far from the conditional here (the layout [0, 1, 2, _, _, _, 3] with "ab" would need 5k+ draws)
FIM_LAYOUT: list[int | None] = [4, 0, 1, 2, None, None, None, 3]
FIM_HEAL = b"bab"
FIM_SAMPLES = 2_500  # a sampler a third of the way to the shortcut fails with probability >= 0.99


def fim_problem() -> FillProblem:
    ids = torch.tensor([AR_VOCAB if t is None else t for t in FIM_LAYOUT])
    masked = torch.tensor([i for i, t in enumerate(FIM_LAYOUT) if t is None])
    return FillProblem(ids=ids, masked=masked, heal=Healing(FIM_HEAL, AR_PIECES))


def fim_conditional(fim: Memo, problem: FillProblem) -> dict[tuple[int, ...], float]:
    """The left-to-right model's joint over the fills that begin with FIM_HEAL, renormalised."""
    masked = problem.masked
    joint: dict[tuple[int, ...], float] = {}
    for x in ((a, b, c) for a in range(5) for b in range(5) for c in range(5)):
        if not AR_PIECES.text(list(x)).startswith(FIM_HEAL):
            continue
        filled = problem.ids.clone()
        filled[masked] = torch.tensor(x)
        q = probs(fim.verify(filled, masked, 0, masked))
        joint[x] = float(torch.prod(q[torch.arange(3), torch.tensor(x)]))
    total = sum(joint.values())
    return {x: p / total for x, p in joint.items()}


def test_a_left_to_right_model_has_power(fim: Memo) -> None:
    problem = fim_problem()
    target = fim_conditional(fim, problem)
    assert_power(target, shortcut_joint(fim, problem, target, DecodeConfig(), AR_PIECES), FIM_SAMPLES)


def test_a_left_to_right_model_follows_the_conditional(fim: Memo) -> None:
    cfg = SAMPLERS[2]  # lookup drafts, the sampler such a model runs
    problem = fim_problem()
    target = fim_conditional(fim, problem)
    g = torch.Generator().manual_seed(5)
    drafted = 0

    def draw() -> tuple[int, ...]:
        nonlocal drafted
        tokens, stats = decode(fim, problem, cfg, g)
        assert "heal_lossy" not in stats.extra
        drafted += stats.extra["drafted"]
        return tuple(tokens.tolist())

    counts = Counter(draw() for _ in range(FIM_SAMPLES))
    assert set(counts) <= set(target)
    assert pooled_p_value(counts, target, FIM_SAMPLES) > 1e-4
    assert drafted > FIM_SAMPLES // 20  # the lookup proposed drafts (else this tests only sequential steps)


# --- the planner and the pipeline, for every model kind --------------------------------------------------------
PARTIAL = "def mean(values):\n    total = sum(values)\n    return total / len(valu"
TEXT = PARTIAL + "\n"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random checkpoints of each kind, their byte-level BPE trained on text like TEXT."""
    from infill.models.tiny import build_tiny_checkpoint, tiny_ar_checkpoint, tiny_blockdiff_checkpoint

    root = tmp_path_factory.mktemp("healing")
    texts = [TEXT.replace("valu", "values)") * 3, "for value in values:\n    print(value)\n" * 3]
    return {
        "asarm": build_tiny_checkpoint(root / "asarm", texts=texts, seed=1, init_scale=0.5),
        "ar": tiny_ar_checkpoint(root / "ar", texts=texts, seed=1),
        "blockdiff": tiny_blockdiff_checkpoint(root / "bd", texts=texts, seed=1),
        "blockdiff-chat": tiny_blockdiff_checkpoint(root / "bd-chat", texts=texts, seed=1, fim=False),
    }


def test_heal_text_backs_up_to_the_last_pre_token(folders: dict[str, Path]) -> None:
    from infill.core.plan import heal_text
    from infill.models.tokenizer import load_tokenizer
    from tests.fixtures_cli import ByteTokenizer

    tok = load_tokenizer(folders["asarm"])
    assert heal_text("    return len(valu", tok) == "valu"
    assert heal_text("    x = ", tok) == " "  # byte BPE glues the space to the next word
    assert heal_text("    retu", tok) == " retu"
    assert heal_text("x = 1\n", tok) == ""  # a span at the start of a line
    assert heal_text("    x = " + "a" * 40, tok) == ""  # longer than MAX_HEAL
    assert heal_text("    return len(valu", ByteTokenizer()) == ""  # one token per byte: a prompt may end anywhere


def test_healing_never_takes_the_whole_prompt_of_a_model_with_nothing_else_to_read(folders: dict[str, Path]) -> None:
    """`alone` (no <bos>, no text after the span): a cut that would leave nothing before the span is not made."""
    from infill.core.plan import heal_text
    from infill.models.tokenizer import load_tokenizer

    tok = load_tokenizer(folders["asarm"])
    assert heal_text("retu", tok) == "retu"  # something else shows the model where it is
    assert heal_text("retu", tok, alone=True) == ""  # else the word stays in the prompt, unhealed
    assert heal_text("x\nretu", tok, alone=True) == "retu"  # a line before it is left
    assert heal_text("x = retu", tok, alone=True) == " retu"


@pytest.mark.parametrize(
    ("kind", "decoder"),
    [
        ("asarm", "beam"),
        ("asarm", "assd"),
        ("ar", "beam"),
        ("ar", "assd"),
        ("blockdiff", "s2d2"),
        ("blockdiff", "confidence"),
        ("blockdiff", "beam"),
    ],
)
def test_a_span_inside_a_word_is_healed_by_every_kind(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch, kind: str, decoder: str
) -> None:
    """`infill fill` at the end of `len(valu`: the model's prompt stops before `valu`, its fill begins with
    `valu`, and what is written is the rest of it (whatever the random model makes of the rest)."""
    from infill.api import fill_text
    from infill.config import FillOptions, ModelSpec
    from infill.core.kinds.asarm import AnySubset
    from infill.core.kinds.blockdiff import BlockDiffusion
    from infill.spans import Span

    raws: list[tuple[str, str]] = []  # (the healed text, the model's fill)
    for cls in (AnySubset, BlockDiffusion):
        real = cls.sample

        def sample(self: Any, region: Any, run: Any, attempt: int, real: Any = real) -> Any:
            heal = region.spans[0].heal  # "valu", or "(valu" where the tokenizer's pre-tokens glue "(" to a word
            assert heal in ("valu", "(valu")
            seen = run.loaded.tokenizer.decode(region.prefix_ids)
            assert PARTIAL.endswith(seen + heal)  # the prompt stops where the healed text begins
            fills = real(self, region, run, attempt)
            raws.extend((heal, f.raw) for f in fills)
            return fills

        monkeypatch.setattr(cls, "sample", sample)
    at = len(PARTIAL)
    options = FillOptions(allow_syntax_errors=True, retrieve=False, max_resample=0, tokens=6)
    for seed in range(3):
        cfg = DecodeConfig(decoder=decoder, temperature=0 if decoder == "beam" else 1.0, seed=seed)
        result = fill_text(
            TEXT,
            [Span(at, at, "cursor", one_line=True)],
            model=ModelSpec(str(folders[kind])),
            decode=cfg,
            options=options,
        )
        heal, raw = raws[-1]
        assert raw.startswith(heal)
        assert result.edits[0].text == raw[len(heal) :].split("\n", 1)[0]


def test_only_a_chat_prompted_model_is_not_healed(folders: dict[str, Path]) -> None:
    """A block-diffusion model without FIM tokens is prompted through its chat template, with the text before the
    hole as it is: nothing to back up."""
    from infill.api import load_model
    from infill.config import ModelSpec
    from infill.core.kinds import kind_of

    for kind, heals in (("blockdiff-chat", False), ("blockdiff", True), ("ar", True), ("asarm", True)):
        loaded = load_model(ModelSpec(str(folders[kind])))
        assert kind_of(loaded).backend.window(loaded).heals is heals, kind


@pytest.mark.parametrize(
    "partial",
    [
        "class Item:\n    def __init__(self, quantity, price):\n        self.quantity = quantity\n"
        "        self.price = price\n\n\ndef total(item):\n    return item.price * item.qu",
        "def mean(values):\n    if not values:\n        return 0\n    return sum(values) / len(valu",
        "def mean(values):\n    total = 0\n    for v in va",
    ],
    ids=["item.qu", "len(valu", "in va"],
)
def test_the_shipped_model_completes_the_word_being_typed(partial: str) -> None:
    """The issue's cases (the shipped model without healing wrote `quad`, `)` and `s)`): the word at the cursor,
    completed by the fill, is one the file defines."""
    import re

    from infill.api import fill_text
    from infill.config import TOOL_DECODE, ModelSpec
    from infill.lsp.fills import LSP_OPTIONS
    from infill.spans import Span

    at = len(partial.encode())
    result = fill_text(
        partial + "\n",
        [Span(at, at, "cursor", one_line=True)],
        language="python",
        model=ModelSpec(),
        decode=TOOL_DECODE,
        options=LSP_OPTIONS,
    )
    typed = re.search(r"\w+$", partial)
    assert typed is not None
    word = typed.group(0) + re.match(r"\w*", result.edits[0].text).group(0)  # type: ignore[union-attr]
    assert word in set(re.findall(r"\w+", partial[: -len(typed.group(0))]))


def test_a_fill_whose_healing_ran_out_of_tries_imposes_it_step_by_step_in_later_draws(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text the model hardly ever writes by itself (`qzxwv`, letters its tokenizer never saw together) costs
    the exact rejection its MAX_TRIES tries, a model pass or more each; the later draws of the same fill
    (resamples, a rescue's samples) would spend them again to end the same way, so they impose the text step by
    step at once: one try, one pass per healed token. The first draw is unchanged."""
    from infill.api import fill_text
    from infill.config import FillOptions, ModelSpec
    from infill.decoding import assd
    from infill.decoding.healing import MAX_TRIES
    from infill.errors import NoValidFillError
    from infill.spans import Span

    tries: list[int] = []
    real = assd.heal

    def heal(run: Any) -> int:
        n = real(run)
        tries.append(run.stats.extra["heal_tries"])
        return n

    monkeypatch.setattr(assd, "heal", heal)
    text = "def mean(values):\n    total = sum(values)\n    return total / len(qzxwv\n    x = [\n"
    at = text.index("qzxwv") + 5
    options = FillOptions(retrieve=False, max_resample=3, tokens=6)  # the fills break the file: 4 draws
    with contextlib.suppress(NoValidFillError):  # whether a draw passes does not matter here
        fill_text(
            text,
            [Span(at, at, "cursor", one_line=True)],
            model=ModelSpec(str(folders["asarm"])),
            decode=DecodeConfig(decoder="sequential", temperature=1.0, seed=0),
            options=options,
        )
    assert len(tries) >= 2 and tries[0] > MAX_TRIES, tries  # the first draw ran out of tries
    assert tries[1:] == [1] * (len(tries) - 1), tries  # the later ones took one try each
