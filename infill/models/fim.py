"""Fill-in-the-middle prompts: each code-model family's FIM tokens, the one prompt layout they share, and the one
split of a context too long for the model between prefix and suffix (every fill uses it: infill.core.plan).

Every family below is trained in the prefix-suffix-middle order: PREFIX_TOKEN prefix SUFFIX_TOKEN suffix
MIDDLE_TOKEN, after which the model writes the middle and then an end token. Only the token names differ; a
folder's tokenizer says which family it is (the first family whose three tokens it all has).

Importing this module does not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from infill.errors import ModelError

PREFIX_SHARE = 0.75  # share of the free context given to the prefix (the suffix gets the rest)
T = TypeVar("T")


@dataclass(frozen=True)
class FimFamily:
    """One family's FIM tokens; each entry lists the spellings tokenizers use for it."""

    name: str
    prefix: tuple[str, ...]
    suffix: tuple[str, ...]
    middle: tuple[str, ...]
    ends: tuple[str, ...] = ()  # tokens that end the middle, besides the folder's own end-of-text tokens
    # the pre-tokenizer of the family's models (llama.cpp's name, infill.models.tokenizer.PRE_TOKENIZERS), for
    # token healing where only the server knows the vocabulary (infill.models.remote); None: not healed there
    pre: str | None = None


FAMILIES: tuple[FimFamily, ...] = (
    # Qwen2.5-Coder (and the block-diffusion models `infill train block-diffusion` writes); CodeGemma spells its
    # FIM tokens the same and ends a file with <|file_separator|>
    FimFamily(
        "qwen",
        ("<|fim_prefix|>",),
        ("<|fim_suffix|>",),
        ("<|fim_middle|>",),
        ("<|fim_pad|>", "<|file_sep|>", "<|file_separator|>"),
        "qwen2",
    ),
    # StarCoder, StarCoder2, SantaCoder
    FimFamily("starcoder", ("<fim_prefix>",), ("<fim_suffix>",), ("<fim_middle>",), ("<file_sep>",), "starcoder"),
    # Code Llama: sentencepiece spells them with a leading "▁"; converted tokenizers sometimes without
    FimFamily("codellama", ("▁<PRE>", "<PRE>"), ("▁<SUF>", "<SUF>"), ("▁<MID>", "<MID>"), ("▁<EOT>", "<EOT>")),
    # DeepSeek-Coder: begin = before the prefix, hole = where the middle goes, end = before the middle
    FimFamily(
        "deepseek",
        ("<｜fim▁begin｜>",),
        ("<｜fim▁hole｜>",),
        ("<｜fim▁end｜>",),
        ("<|EOT|>", "<｜end▁of▁sentence｜>"),
        "deepseek-coder",
    ),
)


@dataclass(frozen=True)
class FimTokens:
    """A tokenizer's FIM token ids (and the family they come from)."""

    family: str
    prefix: int
    suffix: int
    middle: int
    ends: tuple[str, ...] = ()

    @property
    def ids(self) -> tuple[int, int, int]:
        return self.prefix, self.suffix, self.middle


def find_fim(token_id: Callable[[str], int | None], where: str = "the tokenizer") -> FimTokens | None:
    """The FIM tokens of a tokenizer (`token_id`: a token's id, or None), or None when it has none of them.
    ModelError when it has two of a family's three tokens: that tokenizer was cut or edited."""

    def first(spellings: tuple[str, ...]) -> int | None:
        return next((i for i in map(token_id, spellings) if i is not None), None)

    for family in FAMILIES:
        found = [first(family.prefix), first(family.suffix), first(family.middle)]
        if all(i is not None for i in found):
            pre, suf, mid = (int(i) for i in found if i is not None)
            return FimTokens(family.name, pre, suf, mid, family.ends)
        if sum(i is not None for i in found) == 2:  # one alone may be an ordinary token that looks like it
            missing = [
                s[0] for s, i in zip((family.prefix, family.suffix, family.middle), found, strict=True) if i is None
            ]
            raise ModelError(
                f"{where} has some of the {family.name} fill-in-the-middle tokens but not {', '.join(missing)}"
            )
    return None


def fim_layout(pre: T, prefix: Sequence[T], suf: T, suffix: Sequence[T], mid: T) -> list[T]:
    """The one prompt layout of every family: PREFIX_TOKEN prefix SUFFIX_TOKEN suffix MIDDLE_TOKEN, over token ids
    (a model run here) or text (a model on a server, which tokenizes the prompt itself)."""
    return [pre, *prefix, suf, *suffix, mid]


def fim_prompt(fim: FimTokens, prefix: Sequence[int], suffix: Sequence[int]) -> list[int]:
    """PREFIX_TOKEN prefix SUFFIX_TOKEN suffix MIDDLE_TOKEN: the model writes the middle next."""
    return fim_layout(fim.prefix, prefix, fim.suffix, suffix, fim.middle)


def fim_text(spelled: tuple[str, str, str], prefix: str, suffix: str) -> str:
    """The FIM prompt as text, its three tokens spelled as the server's tokenizer knows them (infill.models.remote):
    the server turns their text into the special tokens."""
    return "".join(fim_layout(spelled[0], [prefix], spelled[1], [suffix], spelled[2]))


# words in a model's name that say its family, for a server that cannot tokenize for us (Ollama)
NAME_HINTS: tuple[tuple[str, str], ...] = (
    ("qwen", "qwen"),
    ("starcoder", "starcoder"),
    ("santacoder", "starcoder"),
    ("codellama", "codellama"),
    ("code-llama", "codellama"),
    ("deepseek", "deepseek"),
)


def family_named(name: str) -> FimFamily | None:
    """The family called `name` (qwen, starcoder, codellama, deepseek), or None."""
    return next((f for f in FAMILIES if f.name == name), None)


def family_of_model_name(model: str) -> FimFamily | None:
    """The family a model's name says (qwen2.5-coder:1.5b -> qwen), or None."""
    lowered = model.lower()
    return next((family_named(family) for hint, family in NAME_HINTS if hint in lowered), None)


def split_context(free: int, prefix: int, suffix: int) -> tuple[int, int]:
    """Prefix / suffix tokens to keep in `free` slots: 3/4 : 1/4; an unused share goes to the other side."""
    if prefix + suffix <= free:
        return prefix, suffix
    pre_share = math.ceil(free * PREFIX_SHARE)
    suf_share = free - pre_share
    if prefix < pre_share:
        suf_share += pre_share - prefix
        pre_share = prefix
    if suffix < suf_share:
        pre_share = min(prefix, pre_share + suf_share - suffix)
        suf_share = suffix
    return pre_share, suf_share
