"""The block-diffusion kind (infill.models.blockdiff): one span per prompt, filled through a FIM or chat prompt
by infill.decoding.blockfill; the decoder's own log-probability is the score. With FIM tokens the model also runs
at block size 1 as a left-to-right model (infill.models.block_one), for beam search, sequential sampling and token
healing.

Its folders: a diffusion model_type, or a Qwen3 / Qwen2 / Llama config that names a mask token or a block size
(in config.json, its "infill" section or generation_config.json), or an architecture only block diffusion runs.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from infill.config import DecodeConfig, FillOptions, ModelSpec, decoders_of
from infill.core.backends import Fill, Kind, Run
from infill.core.kinds.asarm import fill_problem
from infill.core.plan import Region, Window
from infill.errors import DecodeError
from infill.models.autoregressive import AR_ARCHITECTURES
from infill.models.blockdiff import ARCHITECTURES
from infill.models.registry import LoadedModel


class BlockDiffusion:
    """The block-diffusion kind: infill.models.blockdiff behind infill.decoding.blockfill, one span per prompt."""

    def prepare(self, cfg: DecodeConfig, loaded: LoadedModel) -> tuple[LoadedModel, DecodeConfig]:
        """Beam search (the tool's default) and sequential sampling run the model at block size 1 when its
        tokenizer has FIM tokens: a left-to-right FIM model (infill.models.block_one.BlockOneFim, kind "ar").
        The library's default, ASSD sampling, becomes the self-speculative decoder at the same temperature, as
        beam search does for a model prompted through its chat template."""
        if cfg.decoder in ("beam", "sequential") and _has_fim(loaded):
            from infill.models.block_one import block_size_one

            view = block_size_one(loaded)
            if view is None:  # _has_fim said the tokenizer has FIM tokens
                raise DecodeError(f"{loaded.name!r} has no fill-in-the-middle tokens to run --decoder {cfg.decoder}")
            return view, cfg
        if cfg.decoder in ("assd", "beam"):
            cfg = replace(cfg, decoder="s2d2")
        return loaded, cfg

    def window(self, loaded: LoadedModel) -> Window:
        # no limit here: infill.decoding.blockfill fits the prompt to the model's positions; token healing where
        # the model has a block-size-1 view (FIM tokens) to draw the healing tokens from
        return Window(1 << 30, has_bos=False, has_pad=False, groups_spans=False, heals=_has_fim(loaded))

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
            else partial(block_done, prefix=plan.prefix, max_lines=plan.span.block_lines, indent=plan.span.body_indent)
            if plan.span.block
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
        tokens, stats = decode_healing(view.asarm, fill_problem(region, view), run.cfg, run.generator)
        run.totals.add(stats)
        return tokens

    def ranked_lines(self, regions: list[Region], run: Run, options: FillOptions) -> list[Fill]:
        return []  # no exact likelihood of a given text: retrieval is for any-subset models


def _has_fim(loaded: LoadedModel) -> bool:
    """Whether the model's tokenizer has fill-in-the-middle tokens (HF tokenizers have `token_id`)."""
    from infill.models.fim import find_fim

    token_id = getattr(loaded.tokenizer, "token_id", None)
    return token_id is not None and find_fim(token_id) is not None


# Marks of a block-diffusion folder: a diffusion model_type, or a mask token or block size in config.json, its
# "infill" section or generation_config.json. A left-to-right model has none of them.
DIFFUSION_TYPES = frozenset({"sdar", "fast_dllm_v2", "fast_dllm_qwen"})
DIFFUSION_KEYS = ("mask_token_id", "mask_token", "mask_id", "block_size", "bd_size", "block_length")


def is_block_diffusion(cfg: dict[str, Any], folder: Path | None) -> bool:
    """A diffusion model_type; an architecture both kinds run with a mark of diffusion; or an architecture only
    block diffusion runs. Reads generation_config.json, no weights."""
    model_type = str(cfg.get("model_type", "")).lower()
    if model_type in DIFFUSION_TYPES:
        return True
    if model_type not in ARCHITECTURES:
        return False
    if model_type not in AR_ARCHITECTURES:
        return True
    generation: Any = None
    if folder is not None:
        try:
            generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            generation = None
    section = cfg["infill"] if isinstance(cfg.get("infill"), dict) else {}
    sources = (cfg, section, generation if isinstance(generation, dict) else {})
    return any(key in source for source in sources for key in DIFFUSION_KEYS)


def load_folder(folder: Path, spec: ModelSpec, cfg: dict[str, Any], provenance: str) -> LoadedModel:
    from infill.models import blockdiff

    return blockdiff.load_folder(folder, spec, mask_token=spec.mask_token)


KIND = Kind(
    name="blockdiff",
    label="a block-diffusion",
    decoders=decoders_of("block"),  # every block-diffusion decoder
    backend=BlockDiffusion(),
    detect=is_block_diffusion,
    load=load_folder,
    model_types=tuple(ARCHITECTURES),
)
