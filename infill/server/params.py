"""The server's `fill` parameters: the decoding options of infill.options' table, as JSON request parameters,
checked for type and range as their flags are."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import click

from infill.clitypes import Text
from infill.config import choose_decoder
from infill.errors import InputError, a_kind
from infill.options import CONFIGS, OPTIONS, Option
from infill.server.protocol import INVALID_REQUEST, ProtocolError

_JSON_KINDS: dict[str, type] = {"int": int, "int | None": int, "float": float, "bool": bool, "tuple[str, ...]": list}


def json_kind(option: Option) -> type:
    """The JSON type a request gives for `option`: int, float, bool, list, or str (strings and name literals)."""
    if option.name == "precision":
        return str
    field_type = {f.name: str(f.type) for f in fields(CONFIGS[option.section])}[option.field]
    return _JSON_KINDS.get(field_type, str)


def typed(name: str, value: Any, kind: type) -> Any:
    """`value` of request parameter `name` checked against `kind`; InputError (exit 2) when it is not one."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value) if abs(value) < 2**1023 else math.inf
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InputError(f'"{name}" must be {a_kind(kind)}')
    if isinstance(value, float) and not math.isfinite(value):  # 1e999 parses as inf
        raise ProtocolError(INVALID_REQUEST, f'"{name}" must be a finite number')
    return value


def within(option: Option, value: Any) -> None:
    """A request's `value` for `option` checked against the option's own range (the one its flag has): above
    it, the request asks for more work than any command may (ProtocolError invalid_request); below it,
    InputError, as for the flag."""
    bounds = option.type
    if not isinstance(bounds, click.IntRange | click.FloatRange) or isinstance(value, bool):
        return
    if bounds.max is not None and (value > bounds.max or (bounds.max_open and value == bounds.max)):
        raise ProtocolError(INVALID_REQUEST, f'"{option.name}" must be at most {bounds.max}')
    if bounds.min is not None and (value < bounds.min or (bounds.min_open and value == bounds.min)):
        raise InputError(f'"{option.name}" must be {"above" if bounds.min_open else "at least"} {bounds.min}')


def from_params(params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The decoding parameters of a server request -> the FillRequest sections they set, checked for type
    (and, for device and precision, for value). Parameters that are not options are ignored here."""
    parts: dict[str, dict[str, Any]] = {"decode": {}, "options": {}, "model": {}}
    for option in OPTIONS:
        if option.name not in params:
            continue
        value = typed(option.name, params[option.name], json_kind(option))
        within(option, value)
        if isinstance(option.type, Text):  # what the flag refuses: an empty name, text that is no UTF-8
            try:
                option.type.convert(value, None, None)
            except click.BadParameter as exc:
                raise InputError(f'"{option.name}" {exc.message}') from None
        if option.choices and value not in option.choices:
            quoted = [f'"{c}"' for c in option.choices]
            raise InputError(f'"{option.name}" must be {", ".join(quoted[:-1])} or {quoted[-1]}')
        if option.name == "context":
            if not all(isinstance(c, str) for c in value):
                raise InputError('"context" must be a list of strings (texts of other files)')
            value = tuple(value)
        elif option.name == "precision":
            value = value == "bf16"
        parts[option.section][option.field] = value
    parts["decode"] = choose_decoder(parts["decode"])
    return parts
