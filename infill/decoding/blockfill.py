"""Fill the middle between a prefix and a suffix with a block-diffusion model: the entry the api uses for
LoadedModel(kind="blockdiff").

Prompt formats:
- "fim": the tokenizer has a family's fill-in-the-middle tokens (infill.models.fim; Qwen's and the project
  models' <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>): <|fim_prefix|> prefix <|fim_suffix|> suffix
  <|fim_middle|>, then the model writes the middle;
- "chat": otherwise an instruction through the tokenizer's chat template (a code fence around the reply is
  stripped).
Generation ends at an end token or after max_tokens, or, for a caller that passes `done` (a one-line fill), after
the token that makes the text written so far satisfy it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from infill.decoding.problem import BlockCallback, Generation, StopRule
from infill.errors import ModelError
from infill.models.fim import fim_prompt, find_fim, split_context

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.stats import DecodeStats
    from infill.models.blockdiff import BlockDiffModel, HFTokenizer
    from infill.models.registry import LoadedModel

HOLE = "<FILL>"
INSTRUCTION = (
    "Complete the code: replace {hole} with the missing text, so that the code before and after it fits.\n"
    "Reply with the missing text only, nothing else.\n\n{prefix}{hole}{suffix}"
)
_FENCE = re.compile(r"^\s*```[\w+-]*\n(.*?)\n?```\s*$", re.DOTALL)


def generate(
    model: BlockDiffModel, prompt: torch.Tensor, max_tokens: int, cfg: DecodeConfig, generator: torch.Generator
) -> tuple[torch.Tensor, DecodeStats]:
    """Run cfg.decoder on a prompt (P,) long -> (generated tokens (n,) long without the end token, stats):
    "confidence" (Algorithms 1-2), "s2d2" (Algorithm 3), "ssmd" (infill.decoding.ssmd) or "ptp" (parallel token
    prediction, infill.decoding.ptp). DecodeError for a decoder of another model kind or a prompt the model
    cannot take."""
    return run_decoder(Generation(model, prompt, max_tokens, cfg, generator))


def run_decoder(job: Generation) -> tuple[torch.Tensor, DecodeStats]:
    """job.cfg.decoder's function (infill.config.DECODERS) on `job`."""
    from infill.decoding.registry import decoder_function

    function = decoder_function(job.cfg, "block")
    tokens, stats = function(job)
    return tokens, stats


def build_prompt(
    tokenizer: HFTokenizer,
    prefix: str | Sequence[int],
    suffix: str | Sequence[int],
    max_prompt: int | None = None,
) -> tuple[list[int], str, bool]:
    """-> (prompt ids, format "fim" | "chat", truncated). `prefix` and `suffix` are texts or, from a fill that
    already tokenized them, token ids (used as they are). When the prompt would exceed `max_prompt` tokens, the
    prefix loses its beginning and the suffix its end, split as every fill splits its context
    (infill.models.fim.split_context)."""
    pre_ids = tokenizer.encode(prefix) if isinstance(prefix, str) else list(prefix)
    suf_ids = tokenizer.encode(suffix) if isinstance(suffix, str) else list(suffix)
    fim = find_fim(tokenizer.token_id)
    if fim is not None:
        overhead = 3
    elif tokenizer.chat_template:
        overhead = len(tokenizer.chat_prompt(INSTRUCTION.format(hole=HOLE, prefix="", suffix="")))
    else:
        raise ModelError("this block-diffusion model's tokenizer has neither FIM tokens nor a chat template")
    truncated = False
    if max_prompt is not None and overhead + len(pre_ids) + len(suf_ids) > max_prompt:
        keep_pre, keep_suf = split_context(max(0, max_prompt - overhead), len(pre_ids), len(suf_ids))
        pre_ids, suf_ids, truncated = pre_ids[len(pre_ids) - keep_pre :], suf_ids[:keep_suf], True
    if fim is not None:
        return fim_prompt(fim, pre_ids, suf_ids), "fim", truncated
    text = INSTRUCTION.format(hole=HOLE, prefix=tokenizer.decode(pre_ids), suffix=tokenizer.decode(suf_ids))
    return tokenizer.chat_prompt(text), "chat", truncated


def text_stop(tokenizer: HFTokenizer, done: Callable[[str], bool]) -> StopRule:
    """The StopRule that ends a generation after the first token whose text, with every token before it, makes
    `done` true (`done` must stay true for every longer text: infill.textops.line_done)."""

    def stop(tokens: list[int]) -> int | None:
        if not tokens or not done(tokenizer.decode(tokens)):
            return None
        return next(i for i in range(len(tokens)) if done(tokenizer.decode(tokens[: i + 1])))

    return stop


def fill_middle(
    loaded: LoadedModel,
    prefix: str | Sequence[int],
    suffix: str | Sequence[int],
    max_tokens: int,
    cfg: DecodeConfig,
    generator: torch.Generator,
    on_step: BlockCallback | None = None,
    done: Callable[[str], bool] | None = None,
    start: Sequence[int] = (),
) -> tuple[str, DecodeStats]:
    """The text between `prefix` and `suffix` (texts, or token ids of the model's tokenizer; see build_prompt)
    without the end token, and the decoding stats. A prompt too long for the model keeps the end of the prefix
    and the start of the suffix. With `done`, a test on the text written so far that no later text can undo,
    a FIM prompt's generation ends after the token that makes it true (a chat reply is fenced: not cut there).
    `start`: tokens the middle begins with, already decided (token healing's, infill.core.kinds.blockdiff): they follow
    the FIM prompt, the decoder writes at most `max_tokens` after them, and the text returned begins with them."""
    import torch

    model = loaded.blockdiff  # ModelError for an any-subset model
    tokenizer = cast("HFTokenizer", loaded.tokenizer)  # block-diffusion folders load an HFTokenizer
    limit = model.max_positions
    room = None if limit is None else limit - max_tokens - len(start)
    ids, fmt, truncated = build_prompt(tokenizer, prefix, suffix, room)
    if start and fmt != "fim":
        raise ModelError("a chat-prompted block-diffusion model cannot begin its reply with given tokens")
    prompt = torch.tensor([*ids, *start], dtype=torch.long)  # (P,)
    stop = text_stop(tokenizer, done) if done is not None and fmt == "fim" else None
    tokens, stats = run_decoder(Generation(model, prompt, max_tokens, cfg, generator, on_step, stop))
    from infill.models.tokenizer import fill_text

    text = fill_text(tokenizer, [*start, *tokens.tolist()])
    if fmt == "chat":
        fenced = _FENCE.match(text)
        text = fenced.group(1) if fenced else text
    stats.extra.update({"prompt_format": fmt, "prompt_tokens": len(ids), "prompt_truncated": truncated})
    return text, stats
