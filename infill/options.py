"""The decoding options, declared once: one table from which `infill fill`'s and `infill eval`'s Click options
and the server's `fill` parameters (infill.server.params) are generated (docs/decoding.md describes what each
option does).

Defaults are not restated here: they are read from infill.config (DecodeConfig, FillOptions, ModelSpec, and
TOOL_DECODE for the tool's decoder), so changing a default is a one-line change there. A request parameter is
named after the config field it sets (`top_k`, `ssmd_passes`), except `model` (ModelSpec.name) and
`precision` (ModelSpec.bf16); on the command line the flags keep their own names (`--causal-passes`).

This module imports Click but neither torch nor the server: `infill --help` imports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

import click

from infill.clitypes import SEED, TEXT, FiniteFloatRange, IntRange, NonEmptyPath
from infill.config import (
    DECODERS,
    DRAFTS,
    MAX_GAMMA,
    TOOL_DECODE,
    DecodeConfig,
    DeviceName,
    EngineName,
    FillOptions,
    ModelSpec,
    choose_decoder,
)
from infill.errors import InputError

Section = Literal["decode", "options", "model"]
F = TypeVar("F", bound=Callable[..., Any])
CONFIGS: dict[Section, Any] = {"decode": DecodeConfig, "options": FillOptions, "model": ModelSpec}
PRECISIONS = ("bf16", "fp32")
# Work one request may ask for, on the command line and from the server alike (each option's range below says it)
MAX_SAMPLES = 100  # "candidates", "max_resample" and "beam": 100,000 ran out of memory or for minutes
MAX_RESCUE = 8  # a rescue search is beam x rescue_width wide


@dataclass(frozen=True)
class Option:
    """One decoding option: the config field it sets, its request parameter, and its command-line flag."""

    section: Section
    field: str  # the DecodeConfig / FillOptions / ModelSpec field
    flags: tuple[str, ...]  # on the command line; the Click parameter (and the request parameter) is `key`
    help: str = ""
    type: Any = None  # Click type; None = Click's default for the default value
    key: str = ""  # request parameter name; "" = the field's name
    metavar: str | None = None
    show_default: bool = True
    multiple: bool = False
    choices: tuple[str, ...] = ()  # checked at the server boundary too (an unknown one would fail deep inside)

    @property
    def name(self) -> str:
        return self.key or self.field

    def default(self, decode: DecodeConfig) -> Any:
        """The command line's default: the config's value, in the flag's own form."""
        if self.name in ("beam", "decoder"):
            return None  # not given: config.choose_decoder picks (beam search unless --temperature > 0)
        if self.name == "precision":
            return "bf16" if ModelSpec.bf16 else "fp32"
        if self.name == "syntax_check":
            return FillOptions.syntax_check
        if self.name == "context":
            return ()
        source = decode if self.section == "decode" else CONFIGS[self.section]
        return getattr(source, self.field)


OPTIONS: tuple[Option, ...] = (
    Option(
        "options",
        "tokens",
        ("--tokens",),
        "Tokens per span (see length policy).",
        IntRange(min=1),
        show_default=False,
    ),
    Option(
        "decode",
        "decoder",
        ("--decoder",),
        "Default: beam search (see --beam), or assd with --temperature above 0. "
        + "; ".join(f"{name}: {entry.summary}" for name, entry in DECODERS.items() if entry.flag)
        + ".",
        click.Choice([name for name, entry in DECODERS.items() if entry.flag]),
    ),
    Option("decode", "k", ("-k",), "Speculation width (tokens drafted per step).", IntRange(min=1)),
    Option(
        "decode",
        "temperature",
        ("--temperature",),
        "Above 0: sample (with assd unless --decoder says otherwise). 0: the most likely fill (beam search; "
        "greedy with --decoder or --beam 0).",
        FiniteFloatRange(min=0.0),
    ),
    Option("decode", "top_k", ("--top-k",), "0 = off.", IntRange(min=0)),
    Option("decode", "top_p", ("--top-p",), "1 = off.", FiniteFloatRange(min=0.0, max=1.0, min_open=True)),
    Option("decode", "seed", ("--seed",), "Fixed by default: reproducible.", SEED),
    Option(
        "decode",
        "draft",
        ("--draft",),
        "Where assd's drafts come from: "
        + "; ".join(f"{name}: {entry.summary}" for name, entry in DRAFTS.items())
        + ".",
        click.Choice(list(DRAFTS)),
    ),
    Option(
        "decode",
        "epsilon",
        ("--epsilon",),
        "LOSSY: accept drafts if r < q/p + EPSILON. 0 keeps sampling exact.",
        FiniteFloatRange(min=0.0),
    ),
    Option(
        "decode",
        "block_size",
        ("--block-size",),
        "Block-diffusion models: block size (0 = the model's own, 1 = autoregressive).",
        IntRange(min=0),
    ),
    Option(
        "decode",
        "threshold",
        ("--threshold",),
        "Block-diffusion models: confidence threshold tau of dynamic decoding.",
        FiniteFloatRange(min=0.0, max=1.0),
    ),
    Option(
        "decode",
        "unmask_per_step",
        ("--unmask-per-step",),
        "Block-diffusion models: tokens per step (0 = dynamic, by --threshold).",
        IntRange(min=0),
    ),
    Option(
        "decode",
        "routing",
        ("--routing",),
        "S2D2 routing: always, never, min-span, score-static, score-dynamic, hysteresis, ucb (opts as POLICY:k=v,..).",
        metavar="POLICY",
    ),
    Option(
        "decode",
        "gamma",
        ("--gamma",),
        "S2D2 tempering of q/p; values below 1 are LOSSY.",
        FiniteFloatRange(min=0.0, max=MAX_GAMMA, min_open=True),
    ),
    Option(
        "decode",
        "ssmd_passes",
        ("--causal-passes",),
        "SSMD: causal-head passes K per full forward (each verifies drafts up to one rejection).",
        IntRange(min=1),
    ),
    Option(
        "decode",
        "ssmd_window",
        ("--window",),
        "SSMD: positions drafted per full forward (0 = a cosine schedule over the block).",
        IntRange(min=0),
    ),
    Option(
        "decode",
        "beam",
        ("--beam",),
        f"Beam search of width N for the most likely fill (AS-ARM models; the default, at width "
        f"{TOOL_DECODE.beam}; 0 = use --decoder).",
        IntRange(min=0, max=MAX_SAMPLES),
    ),
    Option(
        "options",
        "max_context",
        ("--max-context",),
        "Tokens of the file the model sees at most, around the spans (default: the model's window; fewer: a "
        "faster first pass, less context).",
        IntRange(min=32),
        metavar="TOKENS",
        show_default=False,
    ),
    Option(
        "options",
        "max_suffix",
        ("--max-suffix",),
        "Tokens after the span a left-to-right model reads at most, cut at a line end (default: all that fits; "
        "0: all). Its prompt puts them after the prefix, so a change before the span makes it read them again.",
        IntRange(min=0),
        metavar="TOKENS",
        show_default=False,
    ),
    Option(
        "options",
        "candidates",
        ("-n", "--candidates"),
        "Sample N candidates; keep the most likely.",
        IntRange(min=1, max=MAX_SAMPLES),
    ),
    Option(
        "options",
        "max_resample",
        ("--max-resample",),
        "Extra samples when a candidate adds syntax errors.",
        IntRange(min=0, max=MAX_SAMPLES),
    ),
    Option(
        "options",
        "rescue_width",
        ("--rescue-width",),
        "When every fill found is rejected: beam search searches again N times wider, then it (or a greedy "
        "decoder) draws 2N samples at temperature 0.7 (1 = never).",
        IntRange(min=1, max=MAX_RESCUE),
    ),
    Option(
        "options",
        "monitor",
        ("--monitor",),
        "Python: refuse fills that add a static-analysis message of these rules (comma-separated: undefined, "
        "unused, redefined; binds: a fill must bind a name the lines after it read and nothing defines; "
        "none = off).",
        metavar="RULES",
    ),
    Option(
        "options",
        "min_confidence",
        ("--min-confidence",),
        "Write nothing (exit 4) when the best fill's calibrated confidence (the probability it is right) is "
        "below P; 0 = off.",
        FiniteFloatRange(0.0, 1.0),
        metavar="P",
    ),
    Option(
        "options",
        "syntax_check",
        ("--no-syntax-check",),
        "Accept candidates that add tree-sitter errors.",
        show_default=False,
    ),
    Option(
        "options",
        "retrieve",
        ("--retrieve/--no-retrieve",),
        "For a one-line fill, also rank lines of your own code that sit between similar lines (from the file "
        "and --context files) by the model's likelihood, next to its samples.",
    ),
    Option(
        "options",
        "context",
        ("--context",),
        "Another file to take candidate lines from (repeatable).",
        NonEmptyPath(exists=True, dir_okay=False),
        metavar="FILE",
        show_default=False,
        multiple=True,
    ),
    Option(
        "options",
        "allow_syntax_errors",
        ("--allow-syntax-errors",),
        "When no candidate parses, use the most likely one anyway (default: exit 3 and write nothing).",
        show_default=False,
    ),
    Option(
        "model",
        "name",
        ("--model",),
        "Model name, folder, .gguf file, Ollama name, or a model server: URL#MODEL (docs/server.md).",
        TEXT,
        key="model",
        metavar="NAME|PATH|URL",
    ),
    Option(
        "model",
        "api_key_file",
        ("--api-key-file",),
        "Model servers: read the API key from this file (or set INFILL_API_KEY; never on the command line).",
        TEXT,  # not empty: `--api-key-file "$UNSET"` sent no key, and the server's 401 said to give this flag
        metavar="PATH",
        show_default=False,
    ),
    Option(
        "model",
        "allow_http",
        ("--allow-http",),
        "Model servers: allow plain http:// to another machine (the file's text leaves unencrypted).",
        show_default=False,
    ),
    Option("model", "device", ("--device",), "", click.Choice(get_args(DeviceName)), choices=get_args(DeviceName)),
    Option(
        "model",
        "engine",
        ("--engine",),
        "AS-ARM models: what runs the forward passes (onnx: ONNX Runtime, exact, needs the `onnx` extra; "
        "onnx-int8: int8 weights, faster, not exact; auto: onnx when installed, on the CPU; auto-int8: auto with "
        "onnx-int8 for onnx).",
        click.Choice(get_args(EngineName)),
        choices=get_args(EngineName),
    ),
    Option(
        "model",
        "revision",
        ("--revision",),
        "HF-cache revision of --model (e.g. code, nlp).",
        metavar="REV",
        show_default=False,
    ),
    Option(
        "model",
        "mask_token",
        ("--mask-token",),
        "Block-diffusion models: mask token override.",
        metavar="TOKEN",
        show_default=False,
    ),
    Option(
        "model",
        "bf16",
        ("--precision",),
        "Compute precision (bf16: autocast over fp32 weights; left-to-right code models load bf16 weights).",
        click.Choice(PRECISIONS),
        key="precision",
        choices=PRECISIONS,
    ),
)
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}


def click_options(
    names: Iterable[str] | None = None,
    *,
    decode: DecodeConfig = TOOL_DECODE,
    help: Mapping[str, str] | None = None,  # noqa: A002 (Click's own word)
    unset: bool = False,
) -> Callable[[F], F]:
    """A decorator adding the Click options of `names` (all, in table order, when None) to a command. Each value
    reaches the command as the keyword argument named after the option (Option.name); `decode` supplies the
    defaults of the decoding fields (config.TOOL_DECODE unless given), `help` replaces texts.
    With `unset`, an option not given is None (for commands whose defaults come from a settings file)."""
    chosen = [BY_NAME[n] for n in names] if names is not None else list(OPTIONS)
    texts = dict(help or {})

    def decorate(function: F) -> F:
        for option in reversed(chosen):
            default = None if unset else option.default(decode)
            function = _click_option(option, default, texts.get(option.name, option.help), unset)(function)
        return function

    return decorate


def _click_option(option: Option, default: Any, text: str, unset: bool = False) -> Callable[[F], F]:
    kwargs: dict[str, Any] = {"help": text or None}
    if option.name == "syntax_check":  # the flag turns the check off
        return click.option(
            *option.flags, option.name, is_flag=True, flag_value=False, default=default, show_default=False, **kwargs
        )
    if isinstance(default, bool) and "/" not in option.flags[0]:
        return click.option(*option.flags, option.name, is_flag=True, default=default, **kwargs)
    kwargs.update(default=default, show_default=option.show_default and not unset, multiple=option.multiple)
    if option.type is not None:
        kwargs["type"] = option.type
    if option.metavar is not None:
        kwargs["metavar"] = option.metavar
    return click.option(*option.flags, option.name, **kwargs)


MAX_CONTEXT_BYTES = 8 << 20  # --context files together: they only supply candidate lines for a one-line fill


def read_context(paths: Iterable[str]) -> tuple[str, ...]:
    """The texts of --context files (undecodable bytes replaced: they only supply candidate lines). InputError
    (exit 2) for a file that cannot be read, that is not a regular file (a device such as /dev/zero never ends,
    a named pipe may never deliver; neither is opened for reading), or when the files hold more than
    MAX_CONTEXT_BYTES together."""
    import stat

    texts: list[str] = []
    limit = left = MAX_CONTEXT_BYTES
    for path in paths:
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise InputError("--context file is not a regular file", path=path)
            with open(path, "rb", opener=_without_blocking) as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced since the stat
                    raise InputError("--context file is not a regular file", path=path)
                data = f.read(left + 1)
        except OSError as exc:
            raise InputError(f"cannot read --context file: {exc.strerror or exc}", path=path) from None
        if len(data) > left:
            raise InputError(f"--context files hold more than {limit >> 20} MiB together", path=path)
        left -= len(data)
        texts.append(data.decode("utf-8", errors="replace"))
    return tuple(texts)


def _without_blocking(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def from_flags(values: Mapping[str, Any]) -> tuple[DecodeConfig, FillOptions, ModelSpec]:
    """Parsed Click values (keyword arguments named after the options) -> the three config objects. Options
    a command does not have keep the config's defaults; the decoder is chosen by config.choose_decoder."""
    given = {name: value for name, value in values.items() if name in BY_NAME}
    if "context" in given:
        given["context"] = read_context(given["context"])
    if "precision" in given:
        given["precision"] = given["precision"] == "bf16"
    return _build(given)


def _build(given: Mapping[str, Any]) -> tuple[DecodeConfig, FillOptions, ModelSpec]:
    parts: dict[Section, dict[str, Any]] = {"decode": {}, "options": {}, "model": {}}
    for name, value in given.items():
        option = BY_NAME[name]
        parts[option.section][option.field] = value
    return DecodeConfig(**choose_decoder(parts["decode"])), FillOptions(**parts["options"]), ModelSpec(**parts["model"])
