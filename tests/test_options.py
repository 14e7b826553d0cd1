"""Decoding options and decoder names are declared once: the commands, the server and the dispatchers are
generated from infill.options and infill.config, so a new setting or a changed default reaches all of them."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import click
import pytest

from infill import options
from infill.config import (
    DECODERS,
    DRAFTS,
    EVAL_DECODE,
    TOOL_DECODE,
    DecodeConfig,
    FillOptions,
    ModelSpec,
    Sampling,
    check_decode,
    choose_decoder,
    decoder_options,
)
from infill.core.kinds import KINDS
from infill.errors import DecodeError, InputError
from infill.server import params as server_params


def _params(command: click.Command) -> dict[str, click.Parameter]:
    return {p.name: p for p in command.params if p.name is not None}


def test_every_config_field_has_exactly_one_option() -> None:
    for section, config in (("decode", DecodeConfig), ("options", FillOptions), ("model", ModelSpec)):
        declared = [o.field for o in options.OPTIONS if o.section == section]
        assert len(declared) == len(set(declared)), section
        expected = {f.name for f in fields(config)} - {"extra"}  # FillOptions.extra is for callers, not flags
        assert set(declared) == expected, section


def test_fill_flags_take_their_defaults_from_the_config() -> None:
    from infill.commands.fill import fill

    params = _params(fill)
    for option in options.OPTIONS:
        default = params[option.name].default
        if option.name in ("beam", "decoder"):
            assert default is None  # not given: config.choose_decoder picks
        elif option.name == "precision":
            assert default == ("bf16" if ModelSpec.bf16 else "fp32")
        elif option.name == "context":
            assert default in ((), None)
        else:
            config = {"decode": TOOL_DECODE, "options": FillOptions, "model": ModelSpec}[option.section]
            assert default == getattr(config, option.field), option.name


def test_eval_shares_fills_flags_with_its_own_decoding_defaults() -> None:
    from infill.commands.evaluate import humaneval_single_line
    from infill.commands.fill import fill

    ours, fills = _params(humaneval_single_line), _params(fill)
    for name in ("model", "device", "decoder", "k", "temperature", "seed", "beam", "candidates", "retrieve"):
        assert ours[name].opts == fills[name].opts and type(ours[name].type) is type(fills[name].type), name
    assert ours["temperature"].default == EVAL_DECODE.temperature == 0.0


def test_decoders_and_drafts_are_registered_once_and_every_list_derives_from_the_record() -> None:
    from infill.commands.evaluate import humaneval_single_line
    from infill.commands.fill import fill
    from infill.decoding.drafts import DRAFT_SOURCES
    from infill.decoding.registry import DECODER_FUNCTIONS, decoder_function, draft_source

    # the settings (infill.config) and the code (infill.decoding) are registered under the same names
    assert list(DECODER_FUNCTIONS) == list(DECODERS) and list(DRAFT_SOURCES) == list(DRAFTS)
    for name, entry in DECODERS.items():  # each registration names code that exists
        assert callable(decoder_function(DecodeConfig(decoder=name), entry.family)), name
    for name in DRAFTS:
        assert callable(draft_source(name).propose), name
    # every decoder runs on some kind, and a kind names only registered decoders and drafts (infill.core.kinds)
    assert {d for kind in KINDS.values() for d in kind.decoders} == set(DECODERS)
    assert all(set(kind.drafts) <= set(DRAFTS) for kind in KINDS.values())
    assert KINDS["ar"].decoders == ("assd", "sequential", "beam") and KINDS["ar"].drafts == ("lookup",)
    flagged = tuple(name for name, entry in DECODERS.items() if entry.flag)
    draft = _params(fill)["draft"].type
    assert isinstance(draft, click.Choice) and tuple(draft.choices) == tuple(DRAFTS)
    for command in (fill, humaneval_single_line):
        params = _params(command)
        choice = params["decoder"].type
        assert isinstance(choice, click.Choice) and tuple(choice.choices) == flagged
        for name in flagged:
            assert f"{name}: {DECODERS[name].summary}" in " ".join((params["decoder"].help or "").split())


def _doc_table(heading: str) -> set[str]:
    """The names in the first column of the first table under `heading` in docs/decoding.md."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "decoding.md").read_text(encoding="utf-8")
    lines = text.split(f"\n{heading}\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = lines[start : next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))]
    return {m.group(1) for line in table if (m := re.match(r"\| `(\w+)`", line))}


def test_the_docs_tables_name_every_registered_decoder_and_draft() -> None:
    assert _doc_table("## Decoders") == set(DECODERS)
    assert _doc_table("### Drafts") == set(DRAFTS)


@pytest.mark.parametrize(
    ("decoder", "family", "message"),
    [("confidence", "any-subset", "not an any-subset decoder"), ("assd", "block", "does not run block-diffusion")],
)
def test_a_decoder_of_the_other_family_is_refused(decoder: str, family: Any, message: str) -> None:
    from infill.decoding.registry import decoder_function

    with pytest.raises(DecodeError, match=message):
        decoder_function(DecodeConfig(decoder=decoder), family)


def test_flags_become_the_three_configs() -> None:
    decode, fill_options, model = options.from_flags(
        {"decoder": "sequential", "beam": 3, "k": 4, "syntax_check": False, "precision": "fp32", "model": "m"}
    )
    assert decode == DecodeConfig(decoder="beam", beam=3, k=4, temperature=0.0)  # --beam N picks beam search
    assert fill_options == FillOptions(syntax_check=False)
    assert model == ModelSpec(name="m", bf16=False)
    assert options.from_flags({"decoder": "sequential", "beam": 0})[0] == DecodeConfig(
        decoder="sequential", temperature=0.0
    )
    assert options.from_flags({"decoder": None, "beam": None, "temperature": 0.0})[0] == TOOL_DECODE


@pytest.mark.parametrize(
    ("given", "decoder", "temperature"),
    [
        ({}, TOOL_DECODE.decoder, TOOL_DECODE.temperature),  # nothing said: the tool's default (beam search)
        ({"decoder": None, "beam": None}, "beam", 0.0),  # Click's "not given"
        ({"temperature": 0.0}, "beam", 0.0),
        ({"temperature": 0.7}, "assd", 0.7),  # asking for a temperature asks for samples
        ({"beam": 0}, "assd", 0.0),  # no beam search: the library's decoder, greedy
        ({"beam": 0, "temperature": 1.0}, "assd", 1.0),
        ({"beam": 8, "decoder": "sequential"}, "beam", 0.0),  # a width wins
        ({"decoder": "sequential"}, "sequential", 0.0),
        ({"decoder": "s2d2", "temperature": 1.0}, "s2d2", 1.0),
    ],
)
def test_the_decoder_is_chosen_from_what_was_given(given: dict[str, Any], decoder: str, temperature: float) -> None:
    chosen = choose_decoder(given)
    assert (chosen["decoder"], chosen["temperature"]) == (decoder, temperature)
    assert chosen.get("beam", TOOL_DECODE.beam) == (given.get("beam") or TOOL_DECODE.beam)
    DecodeConfig(**chosen)  # every result builds a config


def test_server_params_are_checked_by_the_same_table() -> None:
    parts = server_params.from_params(
        {"top_k": 3, "temperature": 1, "context": ["a"], "precision": "bf16", "text": "x"}
    )
    assert parts == {
        "decode": {"top_k": 3, "temperature": 1.0, "decoder": "assd"},  # a temperature above 0 samples
        "options": {"context": ("a",)},
        "model": {"bf16": True},
    }
    with pytest.raises(InputError, match='"device" must be "auto", "cpu" or "cuda"'):
        server_params.from_params({"device": "tpu"})
    with pytest.raises(InputError, match='"k" must be an integer'):
        server_params.from_params({"k": "10"})


def test_each_decoder_reads_its_own_options_with_the_requests_defaults() -> None:
    flat = {f.name: f.default for f in fields(DecodeConfig)}
    classes = [entry.options for entry in DECODERS.values()]
    for kind in (Sampling, *classes):
        for f in fields(kind):  # every option is a request field, with one default
            assert f.name in flat and f.default == flat[f.name], (kind.__name__, f.name)
    taken = {f.name for kind in (Sampling, *classes) for f in fields(kind)}
    assert taken == set(flat) - {"decoder"}  # and every request field belongs to someone
    for decoder, entry in DECODERS.items():
        opts = decoder_options(DecodeConfig(decoder=decoder, k=3, beam=2, ssmd_passes=5))
        assert type(opts) is entry.options
        assert {f.name: getattr(opts, f.name) for f in fields(opts)}.items() <= {
            **flat,
            "k": 3,
            "beam": 2,
            "ssmd_passes": 5,
        }.items()


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (DecodeConfig(decoder="assd", draft="model", k=1), "k must be at least 2"),
        (DecodeConfig(decoder="parallel", k=0), "chunk size k >= 1"),
        (DecodeConfig(decoder="beam", beam=0), "beam width"),
        (DecodeConfig(decoder="confidence", threshold=1.5), "threshold"),
        (DecodeConfig(decoder="s2d2", gamma=0.0), "gamma"),
        (DecodeConfig(decoder="ssmd", ssmd_window=-1), "ssmd_window"),
        (DecodeConfig(decoder="ptp", block_size=4), "block size 1"),
        (DecodeConfig(decoder="sequential", top_p=0.0), "top-p"),
    ],
)
def test_a_decoders_bad_option_is_refused_at_the_boundary(cfg: DecodeConfig, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decoder_options(cfg) if cfg.decoder != "sequential" else Sampling(top_p=cfg.top_p)
    with pytest.raises(InputError, match=message):  # what fill_text, the CLI and the server call first
        check_decode(cfg)


def test_options_another_decoder_reads_are_checked_only_against_every_decoder() -> None:
    check_decode(DecodeConfig(decoder="beam", threshold=0.5, draft="model", k=1))  # no error: beam reads neither
    check_decode(DecodeConfig(decoder="beam", block_size=4))  # valid for confidence decoding, though not for ptp
    check_decode(DecodeConfig(decoder="assd", draft="lookup", k=1))  # a one-token lookup draft is valid
    for wrong, message in (
        ({"gamma": 0.0}, "gamma"),
        ({"threshold": 1.5}, "threshold"),
        ({"k": 0}, "k must be at least 1"),
    ):
        with pytest.raises(InputError, match=message):  # a value no decoder can use is refused all the same
            check_decode(DecodeConfig(decoder="beam", **wrong))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="finite"):  # and every field is a finite value of its type
        check_decode(DecodeConfig(decoder="beam", threshold=float("nan")))


@pytest.mark.parametrize("trainer", ["asarm", "block-diffusion", "ptp", "ssmd"])
def test_every_trainer_takes_the_corpus_and_time_budget_under_either_name(trainer: str, tmp_path: Path) -> None:
    """`--corpus` / `--data` and `--minutes` / `--time-limit` are one flag each, in every trainer: a recipe written
    for one trainer's names works with another's."""
    from infill.commands.train import train

    command = train.get_command(click.Context(train), trainer)
    assert command is not None
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.jsonl").write_text("{}\n")
    required = {"asarm": ["--tokenizer", str(corpus / "train.jsonl")], "block-diffusion": ["--out", str(tmp_path)]}
    required |= {"ptp": ["--out", str(tmp_path)], "ssmd": ["--out", str(tmp_path)]}
    parsed = []
    for corpus_flag, time_flag in (("--corpus", "--minutes"), ("--data", "--time-limit")):
        args = [corpus_flag, str(corpus), time_flag, "7.5", *required[trainer]]
        with command.make_context(trainer, args) as ctx:
            parsed.append(ctx.params)
    assert parsed[0] == parsed[1]
    assert 7.5 in parsed[0].values() and any(str(corpus) in str(v) for v in parsed[0].values())


def test_ptp_training_resumes_by_default_as_the_other_trainers_do() -> None:
    """An interrupted run started again with the same command continues; `--no-resume` starts over."""
    from infill.commands.train import train

    for trainer in ("asarm", "ptp", "ssmd"):
        command = train.get_command(click.Context(train), trainer)
        assert command is not None
        resume = _params(command)["resume"]
        assert resume.default is True and resume.secondary_opts == ["--no-resume"], trainer  # type: ignore[attr-defined]
