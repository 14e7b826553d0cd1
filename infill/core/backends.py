"""The two model kinds behind one interface (Backend): which decoders each runs, how a fill's window is laid
out, how one candidate is sampled and scored, and whether retrieved lines can be ranked. infill.core.pipeline calls
these instead of branching on the kind (docs/decoding.md, docs/blockdiff.md).

- "asarm" (the any-subset XLNet, infill.models.xlnet): several spans share one sequence; fills are scored by
  an exact oracle pass; lines of the user's code can be ranked with the samples.
- "blockdiff" (infill.models.blockdiff): one span per sequence, filled through a FIM or chat prompt
  (infill.decoding.blockfill); the decoder's own log-probability is the score.
- "ar" (a left-to-right code model, infill.models.autoregressive): the any-subset kind with one span per
  sequence, decoded in order; scored and ranked with retrieved lines as "asarm" is.
- "remote" (a left-to-right code model on a server, infill.models.remote): one span per prompt; the server
  samples each candidate with its tokens' log-probabilities; retrieved lines are scored by the server (`echo`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from infill.config import DRAFTS, DecodeConfig, DecoderName, FillOptions, ModelKind, decoders_for, drafts_for
from infill.core.plan import Region, SpanPlan, Window
from infill.core.tokens import cut_at_pad, token_pieces, token_sets
from infill.errors import DecodeError, InputError
from infill.models.registry import LoadedModel

if TYPE_CHECKING:
    import torch

    from infill.decoding.stats import DecodeStats
    from infill.models.base import FillProblem, Tokenizer

ProgressCallback = Callable[[dict[str, Any]], None]


@dataclass
class Fill:
    """One span's fill in a candidate."""

    raw: str  # the model's text (LF), cut at the first pad
    score: float
    tokens: int
    worst: float = 0.0  # the lowest log-probability of a scored token (the fill's weakest point)


@dataclass
class Totals:
    """Decoding counts over every sample of one fill."""

    nfe: int = 0
    tokens: int = 0
    accepted: list[int] = field(default_factory=list)
    nbest: dict[int, list[list[int]]] = field(default_factory=dict)  # beam: region -> fills, best first
    nbest_scores: dict[int, list[float]] = field(default_factory=dict)  # beam: region -> their log-likelihoods

    def add(self, stats: DecodeStats) -> None:
        """Count one decoder run."""
        self.nfe += int(stats.nfe)
        self.tokens += int(stats.tokens)
        self.accepted += list(stats.accepted)


@dataclass
class Run:
    """One fill's decoding: the model, its settings, the one generator every sample draws from, the counts."""

    loaded: LoadedModel
    cfg: DecodeConfig
    generator: torch.Generator
    totals: Totals = field(default_factory=Totals)
    on_progress: ProgressCallback | None = None
    # beam search: whether a region's finished fill may be returned (the caller's syntax check); see FillProblem
    accept: Callable[[Region, list[Fill]], bool] | None = None


class Backend(Protocol):
    """What the fill core needs from a model kind. Both kinds tokenize through `loaded.tokenizer`
    (infill.models.base.Tokenizer)."""

    kind: ModelKind

    def decode_config(self, cfg: DecodeConfig, loaded: LoadedModel) -> DecodeConfig:
        """`cfg` as this kind runs it; InputError for a decoder it does not run."""
        ...

    def window(self, loaded: LoadedModel) -> Window:
        """How a fill's sequence is laid out for this model (planning: infill.core.plan)."""
        ...

    def sample(self, region: Region, run: Run, attempt: int) -> list[Fill]:
        """One candidate fill of every span of `region`, each with its score (a log-likelihood)."""
        ...

    def ranked_lines(self, regions: list[Region], run: Run, options: FillOptions) -> list[Fill]:
        """Lines of the user's code as scored fills, ranked with the samples (none where the kind cannot score
        a given text)."""
        ...


KIND_NAMES: dict[ModelKind, str] = {
    "asarm": "an any-subset (AS-ARM)",
    "blockdiff": "a block-diffusion",
    "ar": "a left-to-right (autoregressive)",
    "remote": "a model server's",
}


def _check_decoder(cfg: DecodeConfig, loaded: LoadedModel) -> None:
    allowed: tuple[DecoderName, ...] = decoders_for(loaded.kind)
    if cfg.decoder not in allowed:
        needs = " or ".join(name for kind, name in KIND_NAMES.items() if cfg.decoder in decoders_for(kind))
        raise InputError(
            f"--decoder {cfg.decoder} needs {needs} model, but {loaded.name!r} is {KIND_NAMES[loaded.kind]} model; "
            f"use one of: {', '.join(allowed)}"
        )


class AnySubset:
    """The any-subset (AS-ARM) kind: infill.models.base.AnySubsetModel behind infill.decoding."""

    kind: ModelKind = "asarm"
    groups_spans = True  # several spans share one sequence

    def decode_config(self, cfg: DecodeConfig, loaded: LoadedModel) -> DecodeConfig:
        _check_decoder(cfg, loaded)
        return cfg

    def window(self, loaded: LoadedModel) -> Window:
        model = loaded.asarm
        has_bos, has_pad = model.bos_id is not None, model.pad_id is not None
        return Window(model.max_length or 1 << 30, has_bos, has_pad, groups_spans=self.groups_spans)

    def sample(self, region: Region, run: Run, attempt: int) -> list[Fill]:
        """One candidate fill of every span of `region` (beam search: the attempt-th best beam)."""
        import torch

        from infill.decoding import decode, score

        loaded, cfg, totals, on_progress = run.loaded, run.cfg, run.totals, run.on_progress
        model = loaded.asarm
        problem = _problem(region, loaded)
        if run.accept is not None and cfg.decoder == "beam":
            check, bare = run.accept, problem
            problem = replace(problem, accept=lambda tokens: check(region, _fills(region, bare, loaded, tokens, None)))

        def on_step(decoded: int, total: int) -> None:
            if on_progress is not None:
                on_progress({"event": "step", "tokens": totals.tokens + decoded, "base": totals.tokens, "nfe": 0})

        if cfg.decoder == "beam" and id(region) in totals.nbest:  # a later candidate: the next best beam
            ranked = totals.nbest[id(region)]
            tokens = torch.tensor(ranked[min(attempt, len(ranked) - 1)], dtype=torch.long)
        else:
            tokens, stats = decode(model, problem, cfg, run.generator, on_step=on_step)  # (M,)
            totals.add(stats)
            if cfg.decoder == "beam":
                totals.nbest[id(region)] = [fill for _, fill in stats.extra["nbest"]]
                totals.nbest_scores[id(region)] = [float(score) for score, _ in stats.extra["nbest"]]
        # log q of each token under the oracle, up to the end of the last span's fill (the rows after it are pads)
        ends = _fills(region, problem, loaded, tokens.tolist(), None)
        length = sum(p.budget for p in region.spans[:-1]) + min(ends[-1].tokens + 1, region.spans[-1].budget)
        before = getattr(model, "nfe", None)
        logq = score(model, problem, tokens, length)  # (length,)
        after = getattr(model, "nfe", None)
        totals.nfe += after - before if isinstance(before, int) and isinstance(after, int) else 1  # its passes
        return _fills(region, problem, loaded, tokens.tolist(), logq.tolist())

    def ranked_lines(self, regions: list[Region], run: Run, options: FillOptions) -> list[Fill]:
        """Lines from the user's code (infill.retrieval) as fills of a lone one-line span, each scored by its
        exact log-likelihood in the span (one oracle pass) the way sampled fills are: tokens plus the ending
        pad."""
        import torch

        from infill.decoding import score
        from infill.retrieval import line_candidates

        loaded = run.loaded
        model = loaded.asarm
        pad = model.pad_id
        if pad is None or not retrieves(regions, options):
            return []
        region, plan = regions[0], regions[0].spans[0]
        problem = _problem(region, loaded)
        out = []
        for text in line_candidates(plan.prefix, plan.suffix, options.context):
            if text.strip() == plan.replaced.strip():
                continue  # refilling a line with itself changes nothing
            ids = loaded.tokenizer.encode(text)
            if len(ids) >= plan.budget:
                continue
            if run.on_progress is not None:  # between passes, so a cancelled request stops here too
                run.on_progress({"event": "score", "nfe": run.totals.nfe})
            # the line's tokens and the pad that ends it: only those rows are computed (a code model's batched
            # rows cost nearly what single passes do on a CPU)
            kept = score(model, problem, torch.tensor(ids + [pad] * (plan.budget - len(ids))), len(ids) + 1)
            run.totals.nfe += 1
            out.append(Fill(text, float(kept.sum()), len(ids), float(kept.min())))
        return out


def retrieves(regions: list[Region], options: FillOptions) -> bool:
    """Whether lines of the user's code are ranked with the samples: retrieval on, one region of one span that is
    one whole line (not healed: the line starts at the span)."""
    if not options.retrieve or len(regions) != 1 or len(regions[0].spans) != 1:
        return False
    plan = regions[0].spans[0]
    return plan.span.one_line and not plan.heal and plan.at_line_start


def _fills(
    region: Region, problem: FillProblem, loaded: LoadedModel, tokens: list[int], logq: list[float] | None
) -> list[Fill]:
    """The fill of every span of `region` from its M decoded tokens, cut at each span's end (scored with `logq`,
    the tokens' log-probabilities, when given; 0 otherwise)."""
    fills = []
    at = 0
    ends = problem.ends or (None,) * len(region.spans)
    for plan, stops, end in zip(region.spans, problem.stops or (), ends, strict=True):
        piece = tokens[at : at + plan.budget]
        piece_q = logq[at : at + plan.budget] if logq is not None else None
        kept, n, s, worst = cut_at_pad(piece, piece_q, loaded.asarm.pad_id, stops, problem.blank, end)
        fills.append(Fill(loaded.tokenizer.decode(kept), s, n, worst))
        at += plan.budget
    return fills


def _problem(region: Region, loaded: LoadedModel) -> FillProblem:
    import torch

    from infill.models.base import FillProblem, Healing

    model = loaded.asarm
    ids: list[int] = [model.bos_id] if model.bos_id is not None else []
    ids += region.prefix_ids
    masked: list[int] = []
    span_of: list[int] = []
    for j, plan in enumerate(region.spans):
        if j:
            ids += region.between_ids[j - 1]
        masked += range(len(ids), len(ids) + plan.budget)
        span_of += [j] * plan.budget
        ids += [model.mask_id] * plan.budget
    ids += region.suffix_ids
    if len(masked) >= len(ids):
        raise DecodeError("no visible token: the input has no context around the span and the model has no <bos>")
    breaks, blank = token_sets(loaded.tokenizer, int(model.vocab_size))
    heal = region.spans[0].heal  # token healing: only a region's first span is healed (infill.core.plan)
    healing = Healing(heal.encode("utf-8"), token_pieces(loaded.tokenizer, int(model.vocab_size))) if heal else None
    return FillProblem(
        torch.tensor(ids, dtype=torch.long),  # (N,)
        torch.tensor(masked, dtype=torch.long),  # (M,)
        torch.tensor(span_of, dtype=torch.long),  # (M,)
        stops=tuple(breaks if plan.span.one_line else frozenset() for plan in region.spans),  # one line back
        blank=blank,
        ends=tuple(_block_end(plan, loaded.tokenizer) for plan in region.spans),
        heal=healing,
    )


def _block_end(plan: SpanPlan, tokenizer: Tokenizer) -> Callable[[list[int]], bool] | None:
    """A block span's end test on its tokens (infill.textops.block_done), or None for other spans."""
    if not plan.span.block_lines:
        return None
    from infill.textops import block_done

    prefix, lines = plan.prefix, plan.span.block_lines
    return lambda tokens: block_done(tokenizer.decode(tokens), prefix, lines)


class Autoregressive(AnySubset):
    """The left-to-right kind: a causal code model with FIM tokens (infill.models.autoregressive.CausalFim) is an
    any-subset model that fills one span per sequence in order. It runs the any-subset decoders that ask for
    positions in order; its fills and retrieved lines are scored by the same one-pass log-likelihood."""

    kind: ModelKind = "ar"
    groups_spans = False  # one FIM prompt has one hole

    def decode_config(self, cfg: DecodeConfig, loaded: LoadedModel) -> DecodeConfig:
        _check_decoder(cfg, loaded)
        if cfg.decoder == "assd" and self.kind not in DRAFTS[cfg.draft].kinds:
            raise InputError(
                f"--draft {cfg.draft} drafts several positions at once, which the left-to-right model "
                f"{loaded.name!r} cannot: use --draft {' or '.join(drafts_for(self.kind))}"
            )
        return cfg

    def sample(self, region: Region, run: Run, attempt: int) -> list[Fill]:
        from infill.models.autoregressive import CausalFim

        model, tok = run.loaded.model, run.loaded.tokenizer
        if isinstance(model, CausalFim) and model.fim is None and tok.decode(region.suffix_ids).strip():
            raise InputError(
                f"{run.loaded.name!r} has no fill-in-the-middle tokens, so it can only write at the end of the "
                "text: select a span with nothing but blank lines after it, or use a model with FIM tokens"
            )
        if not isinstance(model, CausalFim):
            return super().sample(region, run, attempt)
        with model.remembering():  # the fill's score reads the rows its decoding computed: no pass of its own
            return super().sample(region, run, attempt)


class BlockDiffusion:
    """The block-diffusion kind: infill.models.blockdiff behind infill.decoding.blockfill, one span per prompt."""

    kind: ModelKind = "blockdiff"

    def decode_config(self, cfg: DecodeConfig, loaded: LoadedModel) -> DecodeConfig:
        """Beam search (the tool's default) and sequential sampling run the model at block size 1 when its
        tokenizer has FIM tokens (`select` hands those to the left-to-right kind); the library's default, ASSD
        sampling, becomes the self-speculative decoder at the same temperature, as beam search does for a model
        prompted through its chat template."""
        from infill.models.fim import find_fim

        token_id = getattr(loaded.tokenizer, "token_id", None)  # HF tokenizers have one
        if cfg.decoder in ("beam", "sequential") and token_id is not None and find_fim(token_id) is not None:
            return cfg
        if cfg.decoder in ("assd", "beam"):
            cfg = replace(cfg, decoder="s2d2")
        _check_decoder(cfg, loaded)
        return cfg

    def window(self, loaded: LoadedModel) -> Window:
        # no limit here: infill.decoding.blockfill fits the prompt to the model's positions; token healing where
        # the model has a block-size-1 view (FIM tokens) to draw the healing tokens from
        from infill.models.fim import find_fim

        token_id = getattr(loaded.tokenizer, "token_id", None)
        heals = token_id is not None and find_fim(token_id) is not None
        return Window(1 << 30, has_bos=False, has_pad=False, groups_spans=False, heals=heals)

    def sample(self, region: Region, run: Run, attempt: int) -> list[Fill]:
        from functools import partial

        from infill.decoding.blockfill import fill_middle
        from infill.textops import block_done, line_done

        (plan,) = region.spans  # block-diffusion regions hold one span each
        tok = run.loaded.tokenizer
        on_progress, base = run.on_progress, run.totals.tokens

        def on_step(info: dict[str, Any]) -> None:
            """The decoder's step (after each block's passes) as the fill's progress event."""
            if on_progress is not None:
                decoded = int(info.get("tokens", 0))
                on_progress({"event": "step", "tokens": base + decoded, "base": base, "nfe": int(info.get("nfe", 0))})

        start = self._healed(region, run) if plan.heal else []
        text, stats = fill_middle(
            run.loaded,
            region.prefix_ids,  # tokenized once, by the planner; not decoded and encoded again
            region.suffix_ids,
            plan.budget - len(start),
            run.cfg,
            run.generator,
            on_step,
            # a one-line span keeps the fill's first line only, a block its lines up to the dedent (the pipeline
            # cuts them): stop decoding there
            partial(line_done, at_line_start=plan.at_line_start)
            if plan.span.one_line
            else partial(block_done, prefix=plan.prefix, max_lines=plan.span.block_lines)
            if plan.span.block_lines
            else None,
            start=start,
        )  # (decoded text, stats); the score is the decoder's own log-probability where it reports one, else 0
        run.totals.add(stats)
        score = float(stats.extra.get("logprob", 0.0)) if isinstance(stats.extra, dict) else 0.0
        return [Fill(text, score, len(tok.encode(text)) if text else 0)]

    def _healed(self, region: Region, run: Run) -> list[int]:
        """Token healing's first tokens, drawn exactly from the model's block-size-1 (left-to-right) conditional
        given that the fill begins with the healed text (infill.decoding.healing); the block decoder goes on
        after them."""
        from infill.decoding import decode_healing
        from infill.models.block_one import block_size_one

        view = block_size_one(run.loaded)
        if view is None:  # Window.heals is False without FIM tokens: never healed
            raise DecodeError(f"{run.loaded.name!r} has no fill-in-the-middle tokens to heal a span with")
        tokens, stats = decode_healing(view.asarm, _problem(region, view), run.cfg, run.generator)
        run.totals.add(stats)
        return tokens

    def ranked_lines(self, regions: list[Region], run: Run, options: FillOptions) -> list[Fill]:
        return []  # no exact likelihood of a given text: retrieval is for any-subset models


class Remote:
    """The model-server kind (infill.models.remote): the tool plans the fill and builds the family's FIM prompt,
    the server samples. Beam search (the tool's default) and ASSD become the server's own sampling at the same
    temperature (greedy at 0): neither can run over HTTP without the model's logits at every step."""

    kind: ModelKind = "remote"

    def decode_config(self, cfg: DecodeConfig, loaded: LoadedModel) -> DecodeConfig:
        if cfg.decoder in ("beam", "assd"):
            cfg = replace(cfg, decoder="sequential")
        _check_decoder(cfg, loaded)
        return cfg

    def window(self, loaded: LoadedModel) -> Window:
        # not healed: a server cannot be told that a fill must begin with given text (docs/server.md)
        return Window(loaded.remote.max_length, has_bos=False, has_pad=True, groups_spans=False, heals=False)

    def sample(self, region: Region, run: Run, attempt: int) -> list[Fill]:
        """One sample of the region's one span from the server (greedy at temperature 0), scored by the
        log-probabilities of the tokens that wrote its text. A one-line span stops at the line break; a sample
        whose first line came back blank is asked again without that stop (the same sample: a stop only cuts)."""
        import torch

        (plan,) = region.spans
        from infill.models.remote import Sampling

        model, tok, cfg = run.loaded.remote, run.loaded.tokenizer, run.cfg
        prompt = model.prompt(tok.decode(region.prefix_ids), tok.decode(region.suffix_ids))
        seed = None if cfg.temperature == 0 else int(torch.randint(0, 2**31 - 1, (1,), generator=run.generator))
        stops = [*model.ends[:3], "\n"] if plan.span.one_line else list(model.ends[:4])
        if run.on_progress is not None:
            run.on_progress({"event": "step", "tokens": run.totals.tokens, "base": run.totals.tokens, "nfe": 0})
        sampling = Sampling(cfg.temperature, cfg.top_k, cfg.top_p, seed)
        got = model.complete(prompt, plan.budget, sampling, stops)
        if plan.span.one_line and got.finish == "stop" and not got.text.strip():
            got = model.complete(prompt, plan.budget, sampling, list(model.ends[:4]))
        run.totals.nfe += 1
        run.totals.tokens += len(got.logprobs)
        score = float(sum(got.logprobs))
        return [Fill(got.text, score, len(got.logprobs), min(got.logprobs, default=0.0))]

    def ranked_lines(self, regions: list[Region], run: Run, options: FillOptions) -> list[Fill]:
        """Lines from the user's code, each scored by the server in one request (`echo` with `logprobs`: the
        log-probabilities of the line's tokens after the prompt); none where the server does not return them."""
        from infill.retrieval import line_candidates

        if not retrieves(regions, options):
            return []
        region, plan = regions[0], regions[0].spans[0]
        model, tok = run.loaded.remote, run.loaded.tokenizer
        prompt = model.prompt(tok.decode(region.prefix_ids), tok.decode(region.suffix_ids))
        before = len(tok.encode(prompt))
        out = []
        for text in line_candidates(plan.prefix, plan.suffix, options.context):
            if text.strip() == plan.replaced.strip():
                continue
            count = len(tok.encode(prompt + text)) - before
            if count < 1 or count >= plan.budget:
                continue
            if run.on_progress is not None:
                run.on_progress({"event": "score", "nfe": run.totals.nfe})
            logq = model.score_tail(prompt, text, count)
            run.totals.nfe += 1
            if logq is None:
                return []
            out.append(Fill(text, float(sum(logq)), count, min(logq)))
        return out


BACKENDS: dict[ModelKind, Backend] = {
    "asarm": AnySubset(),
    "blockdiff": BlockDiffusion(),
    "ar": Autoregressive(),
    "remote": Remote(),
}


def backend_of(loaded: LoadedModel) -> Backend:
    return BACKENDS[loaded.kind]


def substitution(asked: DecoderName, loaded: LoadedModel, ran: DecoderName) -> str:
    """Why `loaded` runs --decoder `ran` where `asked` was asked for (`select`): the note -v shows."""
    return (
        f"--decoder {asked} ran as --decoder {ran}: {loaded.name!r} is {KIND_NAMES[loaded.kind]} model, which runs "
        f"{asked} as {ran} (--decoder {' '.join(decoders_for(loaded.kind))} run as named)"
    )


def select(loaded: LoadedModel, cfg: DecodeConfig) -> tuple[LoadedModel, Backend, DecodeConfig]:
    """The model as `cfg`'s decoder runs it, its kind's backend, and `cfg` as that kind runs it
    (Backend.decode_config). A block-diffusion model asked for an any-subset decoder (beam search, sequential)
    is run at block size 1, where it is a left-to-right FIM model (infill.models.block_one.BlockOneFim)."""
    backend = backend_of(loaded)
    cfg = backend.decode_config(cfg, loaded)
    if loaded.kind == "blockdiff" and cfg.decoder in decoders_for("ar"):
        from infill.models.block_one import block_size_one

        view = block_size_one(loaded)
        if view is None:  # decode_config keeps these decoders only for a tokenizer with FIM tokens
            raise DecodeError(f"{loaded.name!r} has no fill-in-the-middle tokens to run --decoder {cfg.decoder}")
        loaded, backend = view, backend_of(view)
        cfg = backend.decode_config(cfg, loaded)
    return loaded, backend, cfg
