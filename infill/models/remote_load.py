"""Loading a model on a server (`--model URL#MODEL`, infill.models.remote): what may leave the machine is checked
first, then the server is asked for its models, its tokenizer and the model's FIM family."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from infill import environment
from infill.config import ModelSpec
from infill.errors import InputError, RemoteError
from infill.models.fim import FimFamily, family_named, family_of_model_name, find_fim
from infill.models.remote import (
    EXTRAS_ECHO_TOKENS,
    MIN_CONTEXT,
    WINDOW,
    RemoteFim,
    ServerTokenizer,
    TextPieces,
)
from infill.models.remote_http import HTTP_ENV, Client, Target, api_key, loopback, parse, read_timeout

if TYPE_CHECKING:
    from infill.models.registry import LoadedModel


def _models(client: Client) -> list[dict[str, Any]] | None:
    """The models the server lists (None where it has no /v1/models); RemoteError for an answer without its list."""
    answer = client.get("/v1/models", absent_ok=True)
    if answer is None:
        return None
    data = answer.get("data")
    if not isinstance(data, list):
        raise RemoteError(f"model server {client.target.base} answered malformed JSON to /v1/models (no data)")
    return [m for m in data if isinstance(m, dict)]


def _props_context(client: Client) -> int | None:
    """The context llama.cpp's llama-server serves with (GET /props: default_generation_settings.n_ctx), which its
    /v1/models does not say; None where the server has no such endpoint or answers without it."""
    try:
        answer = client.get("/props", absent_ok=True)
    except RemoteError:  # a server that refuses the path is not llama-server; the default window applies
        return None
    settings = answer.get("default_generation_settings") if answer is not None else None
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    return n_ctx if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0 else None


def _dialect(listed: list[dict[str, Any]], model: str) -> str:
    """How the server reads the sampling fields (infill.models.remote.DIALECTS): vLLM lists its models as owned by
    "vllm"; every other server takes llama.cpp's fields or ignores them."""
    owners = [m.get("owned_by") for m in listed if m.get("id") == model]
    return "vllm" if "vllm" in owners else "llama.cpp"


# vLLM's first version that takes `structured_outputs` (0.12 dropped `guided_regex`)
STRUCTURED_OUTPUTS = (0, 10, 2)


def _constrains(client: Client, dialect: str, tok: ServerTokenizer | None) -> str | None:
    """How the server is told what a completion begins with, for token healing (infill.models.remote.CONSTRAINTS):
    vLLM by its version (GET /version; one that does not say is taken as a recent one), a server with llama.cpp's
    or llama-cpp-python's tokenizer endpoint by a GBNF grammar; None without a tokenizer endpoint (Ollama, which
    takes no grammar either: it is not healed). A server that refuses or ignores the field is asked again
    without it, and the model keeps to that (RemoteFim.complete)."""
    if tok is None:
        return None
    if dialect != "vllm":
        return "gbnf"
    try:
        answer = client.get("/version", absent_ok=True)
    except RemoteError:
        answer = None
    said = str((answer or {}).get("version", ""))
    parts = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", said)
    if parts is None:
        return "structured_outputs"
    version = tuple(int(p or 0) for p in parts.groups())
    return "structured_outputs" if version >= STRUCTURED_OUTPUTS else "guided_regex"


# fields of a /v1/models entry that change between two answers of one server (vLLM's and llama-server's
# `created` is the time of the request; vLLM's permission has a fresh id each time)
VOLATILE = frozenset({"created", "permission", "permissions", "status"})


def _identity(
    client: Client, model: str, tok: ServerTokenizer | None, spelled: tuple[str, ...], props: bool
) -> tuple[Any, ...]:
    """What says which model the server serves under `model` (infill.models.remote.RemoteFim.replaced): its
    /v1/models entry less what changes at each answer (vLLM's path and max_model_len, llama-server's meta: vocabulary,
    parameters, size), the ids the server's tokenizer gives the family's FIM tokens (llama-cpp-python's entry
    says nothing of the model; other weights tokenize them differently) and, where the window came from
    llama-server's /props (`props`), the context it serves with (a restart with another -c). Two or three
    requests, made at most every REVALIDATE seconds."""
    entry = next((m for m in _models(client) or [] if m.get("id") == model), None)
    kept = sorted((k, repr(v)) for k, v in (entry or {}).items() if k not in VOLATILE)
    ids = tuple(tok._raw_encode("".join(spelled))) if tok is not None else ()
    return (entry is not None, tuple(kept), ids, _props_context(client) if props else None)


def load_remote(spec: ModelSpec) -> LoadedModel:
    """The model `spec.name` names on its server, kind "remote" (module docstring). Checks what may leave the
    machine before anything is sent: InputError (exit 2) for plain http to another machine without the opt-in;
    RemoteError (exit 123) when the server does not answer."""
    from infill.environment import data_dir
    from infill.models.registry import LoadedModel

    target = parse(spec.name)
    if not target.https and not loopback(target.host) and not (spec.allow_http or environment.enabled(HTTP_ENV)):
        raise InputError(
            f"--model {target.base}: plain http to another machine sends the file's text unencrypted; use https, or "
            f"opt in with --allow-http or {HTTP_ENV}=1"
        )
    if spec.revision is not None or spec.mask_token is not None:
        flag = "--revision" if spec.revision is not None else "--mask-token"
        raise InputError(f"{flag} applies to model folders; {target.base} is a model server")
    if spec.engine != "auto":  # the language server's auto-int8 arrives as auto (infill.core.kinds._as_run_by)
        raise InputError(f"--engine {spec.engine} runs models on this machine; {target.base} is a model server")
    client = Client(target, lambda: api_key(spec), read_timeout())
    found = _models(client)
    listed = found or []
    # every server this works with lists its models: one that has no /v1/models is likely another path or program
    unlisted = "" if found is not None else f"; {target.base}/models is not found: is that the API's base URL?"
    model = target.model
    if model is None:
        names = [str(m.get("id")) for m in listed if m.get("id")]
        if len(names) != 1:
            raise InputError(
                f"--model {target.base}: name the model after # ({', '.join(names) or 'the server lists none'})"
                + unlisted
            )
        model = names[0]
    lengths = [m.get(k) for m in listed if m.get("id") == model for k in ("max_model_len", "n_ctx")]
    told = [n for n in lengths if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    served = None if told else _props_context(client)
    max_length = told[0] if told else served or WINDOW
    if max_length < MIN_CONTEXT:
        raise RemoteError(
            f"model server {target.base} says {model}'s context is {max_length} tokens; a fill needs at least "
            f"{MIN_CONTEXT}"
        )
    dialect = _dialect(listed, model)
    server_tok = ServerTokenizer.probe(client, model, vllm=dialect == "vllm")
    tokenizer: ServerTokenizer | TextPieces = server_tok if server_tok is not None else TextPieces()
    family, spelled, banned = _family(target, model, server_tok, unlisted)
    lead = len(server_tok.lead) if server_tok is not None else 0
    if server_tok is not None:
        server_tok.pre = family.pre
    remote = RemoteFim(
        client,
        target,
        model,
        family,
        spelled,
        family.ends,
        banned,
        max_length=min(max_length, WINDOW) - 3 - lead,
        reserve=3 + lead,
        echo_tokens=EXTRAS_ECHO_TOKENS if server_tok is not None and server_tok.dialect == "extras" else None,
        dialect=dialect,
        constrains=_constrains(client, dialect, server_tok),
    )
    remote.identify = lambda: _identity(client, model, server_tok, spelled, props=served is not None)
    remote.identity = remote.identify()
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{target.host}-{target.port}-{model}")
    info = {
        "source": f"model server {target.base}",
        "provenance": f"model server {target.base}",
        "engine": "remote",
        "server": target.base,
        "remote_model": model,
        "fim": family.name,
        "tokenizer": "server" if server_tok is not None else "text pieces",
        "max_length": remote.max_length,
        "calibration": str(data_dir() / "calibration" / f"remote-{safe}.json"),
    }
    return LoadedModel(name=spec.name, kind="remote", model=remote, tokenizer=tokenizer, info=info)


def _family(
    target: Target, model: str, tok: ServerTokenizer | None, hint: str = ""
) -> tuple[FimFamily, tuple[str, str, str], dict[str, float]]:
    """The FIM family (given, else the one whose tokens the server's tokenizer knows, else the one the model's
    name says), its tokens as the server spells them, and the logit_bias that keeps them out of fills. `hint`
    ends the error's line where there is none."""
    from infill.errors import ModelError

    given = family_named(target.family) if target.family else None
    if tok is not None:
        try:
            found = find_fim(tok.token_id, f"the tokenizer of {model!r} on {target.base}")
        except ModelError as exc:
            raise RemoteError(exc.message) from None
        if found is not None and (given is None or given.name == found.family):
            family = family_named(found.family)
            assert family is not None
            ids = found.ids
            spelled = tuple(
                next(s for s in spellings if tok.token_id(s) == i)
                for spellings, i in zip((family.prefix, family.suffix, family.middle), ids, strict=True)
            )
            return family, (spelled[0], spelled[1], spelled[2]), {str(i): -100.0 for i in ids}
        if found is None and given is None:
            # the model's own tokenizer has no family's tokens (a chat or base model, even of a code family whose
            # name says one): they would reach it as plain text and it would write whatever follows that text.
            # As llama-server's /infill refuses a model without them; `;fim=` still overrides.
            raise InputError(
                f"--model {target.base}#{model}: the model has no fill-in-the-middle tokens (its server's tokenizer "
                "knows none of them), so it cannot fill a span: use a code model trained to fill in the middle, or "
                "add ;fim=FAMILY if the server's tokenizer is not the model's"
            )
    family = given or family_of_model_name(model)
    if family is None:
        raise InputError(
            f"--model {target.base}#{model}: cannot tell the model's fill-in-the-middle family (its server has no "
            "tokenizer endpoint, or does not know the tokens); add ;fim=FAMILY (qwen, starcoder, codellama, deepseek)"
            + hint
        )
    return family, (family.prefix[-1], family.suffix[-1], family.middle[-1]), {}
