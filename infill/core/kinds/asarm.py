"""The any-subset kind (AS-ARM: the any-subset XLNet, infill.models.xlnet): several spans share one sequence;
fills are scored by an exact oracle pass; lines of the user's code can be ranked with the samples. Its folders
are XLNet ones (model_type "xlnet"), loaded by infill.models.loading.load_xlnet_folder.

The sequence layout and the cut of decoded tokens into fills (`problem`, `fills`) serve every kind whose model is
an infill.models.base.AnySubsetModel: the left-to-right kind (infill.core.kinds.ar) and token healing of the
block-diffusion kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from infill.config import DecodeConfig, EngineName, FillOptions, decoders_of
from infill.core.backends import Fill, Kind, Run, retrieves
from infill.core.plan import Region, SpanPlan, Window
from infill.core.tokens import cut_at_pad, token_pieces, token_sets
from infill.errors import DecodeError
from infill.models.loading import load_xlnet_folder
from infill.models.registry import LoadedModel
from infill.models.tokenizer import fill_text

if TYPE_CHECKING:
    from infill.models.base import FillProblem, Tokenizer


class AnySubset:
    """The any-subset (AS-ARM) kind: infill.models.base.AnySubsetModel behind infill.decoding."""

    groups_spans = True  # several spans share one sequence

    def prepare(self, cfg: DecodeConfig, loaded: LoadedModel) -> tuple[LoadedModel, DecodeConfig]:
        adopt = getattr(loaded.asarm, "adopt_made_engine", None)  # a graph made in the background is ready
        if adopt is not None:
            adopt()
        return loaded, cfg

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
        problem = fill_problem(region, loaded)
        if problem.heal is not None and id(region) in totals.heal_stepwise:  # an earlier draw ran out of tries
            problem = replace(problem, heal=replace(problem.heal, stepwise=True))
        if run.accept is not None and cfg.decoder == "beam":
            check, bare = run.accept, problem
            problem = replace(
                problem, accept=lambda tokens: check(region, cut_fills(region, bare, loaded, tokens, None))
            )

        def on_step(decoded: int, total: int) -> None:
            if on_progress is not None:
                on_progress({"event": "step", "tokens": totals.tokens + decoded, "base": totals.tokens, "nfe": 0})

        if cfg.decoder == "beam" and id(region) in totals.nbest:  # a later candidate: the next best beam
            ranked = totals.nbest[id(region)]
            tokens = torch.tensor(ranked[min(attempt, len(ranked) - 1)], dtype=torch.long)
        else:
            tokens, stats = decode(model, problem, cfg, run.generator, on_step=on_step)  # (M,)
            totals.add(stats)
            if stats.extra.get("heal_lossy"):
                totals.heal_stepwise.add(id(region))
            if cfg.decoder == "beam":
                totals.nbest[id(region)] = [fill for _, fill in stats.extra["nbest"]]
                totals.nbest_scores[id(region)] = [float(score) for score, _ in stats.extra["nbest"]]
        # log q of each token under the oracle, up to the end of the last span's fill (the rows after it are pads)
        ends = cut_fills(region, problem, loaded, tokens.tolist(), None)
        length = sum(p.budget for p in region.spans[:-1]) + min(ends[-1].tokens + 1, region.spans[-1].budget)
        before = getattr(model, "nfe", None)
        logq = score(model, problem, tokens, length)  # (length,)
        after = getattr(model, "nfe", None)
        totals.nfe += after - before if isinstance(before, int) and isinstance(after, int) else 1  # its passes
        return cut_fills(region, problem, loaded, tokens.tolist(), logq.tolist())

    def ranked_lines(self, regions: list[Region], run: Run, options: FillOptions) -> list[Fill]:
        """Lines from the user's code (infill.retrieval) as fills of a lone one-line span, each scored by its
        exact log-likelihood in the span (one oracle pass) the way sampled fills are: tokens plus the ending
        pad."""
        import torch

        from infill.decoding import score_many
        from infill.retrieval import line_candidates

        loaded = run.loaded
        model = loaded.asarm
        pad = model.pad_id
        if pad is None or not retrieves(regions, options):
            return []
        region, plan = regions[0], regions[0].spans[0]
        lines = []
        for text in line_candidates(plan.prefix, plan.suffix, options.context):
            if text.strip() == plan.replaced.strip():
                continue  # refilling a line with itself changes nothing
            ids = loaded.tokenizer.encode(text)
            if len(ids) < plan.budget:
                lines.append((text, ids))
        if not lines:
            return []

        def before_pass() -> None:
            if run.on_progress is not None:  # between passes, so a cancelled request stops here too
                run.on_progress({"event": "score", "nfe": run.totals.nfe})
            run.totals.nfe += 1

        # each line's tokens and the pad that ends it: only those rows are computed, several lines a pass where
        # the model batches them (infill.decoding.score_many)
        fills = [torch.tensor(ids + [pad] * (plan.budget - len(ids))) for _, ids in lines]
        scored = score_many(model, fill_problem(region, loaded), fills, [len(ids) + 1 for _, ids in lines], before_pass)
        pairs = zip(lines, scored, strict=True)
        return [Fill(text, float(kept.sum()), len(ids), float(kept.min())) for (text, ids), kept in pairs]


def cut_fills(
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
        fills.append(Fill(fill_text(loaded.tokenizer, kept), s, n, worst))
        at += plan.budget
    return fills


def fill_problem(region: Region, loaded: LoadedModel) -> FillProblem:
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
    if not plan.span.block:
        return None
    from infill.textops import block_done

    prefix, lines, indent = plan.prefix, plan.span.block_lines, plan.span.body_indent
    return lambda tokens: block_done(tokenizer.decode(tokens), prefix, lines, indent)


def is_xlnet(cfg: dict[str, Any], folder: Path | None) -> bool:
    return str(cfg.get("model_type", "")).lower() == "xlnet"


KIND = Kind(
    name="asarm",
    label="an any-subset (AS-ARM)",
    decoders=decoders_of("any-subset"),  # every any-subset decoder
    backend=AnySubset(),
    drafts=("model", "ngram", "lookup"),
    detect=is_xlnet,
    load=load_xlnet_folder,
    model_types=("xlnet",),
    engines=get_args(EngineName),
)
