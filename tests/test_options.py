"""Decoding options and decoder names are declared once: the commands, the server and the dispatchers are
generated from infill.options and infill.config, so a new setting or a changed default reaches all of them."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, get_args

import click
import pytest

from infill import options
from infill.config import (
    CHOOSABLE_DECODERS,
    DECODER_KIND,
    EVAL_DECODE,
    TOOL_DECODE,
    DecodeConfig,
    DecoderName,
    FillOptions,
    ModelSpec,
    choose_decoder,
    decoders_for,
)
from infill.errors import DecodeError, InputError


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


def test_decoder_names_are_listed_once() -> None:
    from infill.commands.evaluate import humaneval_single_line
    from infill.commands.fill import fill
    from infill.decoding.registry import FUNCTIONS

    names = get_args(DecoderName)
    assert set(DECODER_KIND) == set(FUNCTIONS) == set(names)
    assert decoders_for("asarm") + decoders_for("blockdiff") == tuple(
        sorted(names, key=lambda n: (DECODER_KIND[n] != "asarm", names.index(n)))
    )
    for command in (fill, humaneval_single_line):
        choice = _params(command)["decoder"].type
        assert isinstance(choice, click.Choice) and tuple(choice.choices) == CHOOSABLE_DECODERS


@pytest.mark.parametrize(
    ("decoder", "kind", "message"),
    [("confidence", "asarm", "not an any-subset decoder"), ("assd", "blockdiff", "does not run block-diffusion")],
)
def test_a_decoder_of_the_other_kind_is_refused(decoder: str, kind: Any, message: str) -> None:
    from infill.decoding.registry import decoder_function

    with pytest.raises(DecodeError, match=message):
        decoder_function(DecodeConfig(decoder=decoder), kind)  # type: ignore[arg-type]


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
    parts = options.from_params({"top_k": 3, "temperature": 1, "context": ["a"], "precision": "bf16", "text": "x"})
    assert parts == {
        "decode": {"top_k": 3, "temperature": 1.0, "decoder": "assd"},  # a temperature above 0 samples
        "options": {"context": ("a",)},
        "model": {"bf16": True},
    }
    with pytest.raises(InputError, match='"device" must be "auto", "cpu" or "cuda"'):
        options.from_params({"device": "tpu"})
    with pytest.raises(InputError, match='"k" must be a int'):
        options.from_params({"k": "10"})
