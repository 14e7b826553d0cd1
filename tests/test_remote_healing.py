"""Token healing on a model server (infill.models.remote.begins_with; docs/server.md, "What the tool does on its
side"): a standard-library fake server (tests/fixtures_remote.py) with llama.cpp's /tokenize, told in its own way
that a fill begins with the word the cursor cuts, and one that refuses or ignores being told. The real server's
healed fills against the in-process engine's: tests/test_remote_engine.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fixtures_remote import FakeHandler, FakeServer, completion, running, tokens

from infill import api
from infill.cli import main
from infill.config import DecodeConfig, ModelSpec
from infill.errors import RemoteError
from infill.models.remote import begins_with
from infill.spans import Selection, resolve

SOURCE = "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n"
SPAN = "2:8-2:20"  # the cursor after `    tot`: Qwen's pre-tokenizer glues the space to the word, " tot" is moved
FILLED = "def mean(xs):\n    total = 1\n    return total / len(xs)\n"
QWEN = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>")
TOLD = ("grammar", "structured_outputs", "guided_regex")


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFILL_REMOTE_TIMEOUT", "2")
    monkeypatch.delenv("INFILL_API_KEY", raising=False)


class Healer:
    """A server with a tokenizer endpoint whose model writes ` total = 1` after a prompt cut before ` tot` when
    told that the fill begins so, `al = 1` after `    tot`, and `x = 1` otherwise. `way`: what it does when told
    (takes it, "refuses" it with a 400, "ignores" it; "down": a 500 to every completion); `owner` and `version`:
    what /v1/models and vLLM's /version say."""

    def __init__(self, way: str = "takes", owner: str = "llamacpp", version: str | None = None) -> None:
        self.way, self.owner, self.version = way, owner, version

    def __call__(self, handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        body = body or {}
        if path.endswith("/v1/models"):
            handler.send(200, {"data": [{"id": "team-model", "owned_by": self.owner}]})
        elif path == "/version" and self.version is not None:
            handler.send(200, {"version": self.version})
        elif path == "/tokenize":
            handler.send(200, {"tokens": tokens(body.get("content", body.get("prompt", "")), QWEN)})
        elif path.endswith("/v1/completions"):
            told = set(TOLD) & set(body)
            prompt = str(body["prompt"]).split("<|fim_suffix|>")[0]
            if self.way == "down":
                handler.send(500, {"error": {"message": "Loading model"}})
            elif told and self.way == "refuses":
                handler.send(400, {"error": {"message": f"unknown field: {sorted(told)}"}})
            elif told and self.way == "takes":
                handler.send(200, completion(" total = 1"))
            else:
                handler.send(200, completion("al = 1" if prompt.endswith("    tot") else "x = 1"))
        else:
            handler.send(404, {"error": "not found"})


def fill(path: Path, model: str, *args: str) -> tuple[int, str]:
    path.write_text(SOURCE)
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", str(path), "--span", SPAN, "--model", model, *args])
    return r.exit_code, r.stderr


def completions(server: FakeServer) -> list[dict[str, Any]]:
    return [s[3] for s in server.seen if s[1].endswith("/v1/completions")]


@pytest.mark.parametrize(
    ("owner", "version", "field"),
    [("llamacpp", None, "grammar"), ("vllm", "0.11.0", "structured_outputs"), ("vllm", "0.9.2", "guided_regex")],
)
@pytest.mark.parametrize("temperature", ["0", "0.8"])
def test_the_server_is_told_what_a_fill_inside_a_word_begins_with(
    tmp_path: Path, owner: str, version: str | None, field: str, temperature: str
) -> None:
    """The cursor inside `total`: the prompt stops before ` tot` and one request tells the server that the fill
    begins with it, in the server's own field (llama.cpp's GBNF grammar; vLLM's regex by its version); the answer
    keeps the word and the text before the cursor is written once."""
    for server in running(FakeServer(Healer(owner=owner, version=version))):
        code, err = fill(tmp_path / "m.py", server.url + "#team-model", "--temperature", temperature)
        assert code == 0 and (tmp_path / "m.py").read_text() == FILLED, err
        (body,) = completions(server)
        assert body["prompt"].startswith("<|fim_prefix|>def mean(xs):\n   <|fim_suffix|>"), body["prompt"]
        assert set(TOLD) & set(body) == {field}
        if field == "grammar":
            assert body["grammar"] == 'root ::= " tot" rest\nrest ::= [^\\x00]*\n'
        else:
            regex = body[field]["regex"] if field == "structured_outputs" else body[field]
            assert re.fullmatch(regex, " total = 1\n") and not re.fullmatch(regex, " to")


@pytest.mark.parametrize("way", ["refuses", "ignores"])
def test_a_server_that_will_not_be_told_gets_the_word_in_the_prompt(tmp_path: Path, way: str) -> None:
    """A server that refuses the grammar (an error answer) or ignores it (its answer does not begin with the
    word): the fill is asked again unhealed, the cut word at the prompt's end, and the model keeps to that: the
    next fill sends no grammar and plans no healing."""
    for server in running(FakeServer(Healer(way))):
        loaded = api.load_model(ModelSpec(name=server.url + "#team-model"))
        spans = resolve(SOURCE.encode(), (Selection("span", SPAN),), "python", "m.py")
        greedy = DecodeConfig(decoder="sequential", temperature=0.0)
        first = api.fill_text(SOURCE, spans, language="python", model=loaded, decode=greedy)
        assert first.text == FILLED and first.stats["healed"] == 4
        assert loaded.remote.constrains is None
        again = api.fill_text(SOURCE, spans, language="python", model=loaded, decode=greedy)
        assert again.text == FILLED and again.stats["healed"] == 0
        bodies = completions(server)
        assert ["grammar" in b for b in bodies] == [True, False, False], bodies
        assert [b["prompt"].split("<|fim_suffix|>")[0][-7:] for b in bodies] == ["s):\n   ", "    tot", "    tot"]


def test_a_server_that_fails_without_the_grammar_too_is_still_told(tmp_path: Path) -> None:
    """A 500 to the healed request and to the unhealed one (a server restarting): the fill fails (exit 123), and
    the grammar was not what the server refused, so the next fill is healed again."""
    for server in running(FakeServer(Healer("down"))):
        loaded = api.load_model(ModelSpec(name=server.url + "#team-model"))
        spans = resolve(SOURCE.encode(), (Selection("span", SPAN),), "python", "m.py")
        with pytest.raises(RemoteError, match="Loading model"):
            api.fill_text(SOURCE, spans, language="python", model=loaded, decode=DecodeConfig(temperature=0.0))
        assert loaded.remote.constrains == "gbnf"
        assert ["grammar" in b for b in completions(server)] == [True, False]


def test_a_server_without_a_tokenizer_is_not_healed(tmp_path: Path) -> None:
    """Ollama has no tokenizer endpoint and takes no grammar: the prompt ends inside the word, as before."""

    def ollama(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path == "/tokenize":
            handler.send(404, {"error": "not found"})
        else:
            Healer()(handler, path, body)

    for server in running(FakeServer(ollama)):
        code, err = fill(tmp_path / "m.py", server.url + "#team-model;fim=qwen")
        assert code == 0 and (tmp_path / "m.py").read_text() == FILLED, err
        (body,) = completions(server)
        assert not set(TOLD) & set(body) and body["prompt"].split("<|fim_suffix|>")[0].endswith("    tot")


@pytest.mark.parametrize("text", [' "a\\b"', "\tx", "é(", "a.b*c+d?[e]{f}|g^h$i/j\\k"])
def test_the_constraint_spells_any_text_literally(text: str) -> None:
    """Quotes, backslashes, tabs, regex signs and non-ASCII: the regex matches the text and what follows it, and
    only that; the GBNF literal reads back as the text (llama.cpp's own parser: tests/test_remote_engine.py)."""
    regex = begins_with(text, "guided_regex")["guided_regex"]
    assert re.fullmatch(regex, text + "\nmore") and not re.fullmatch(regex, "x" + text)
    grammar = begins_with(text, "gbnf")["grammar"]
    literal = grammar.split("\n")[0].removeprefix('root ::= "').removesuffix('" rest')
    unescaped = re.sub(r"\\(x[0-9a-f]{2}|.)", lambda m: _unescape(m.group(1)), literal)
    assert unescaped == text


def _unescape(code: str) -> str:
    return chr(int(code[1:], 16)) if code.startswith("x") else {"t": "\t", "r": "\r", "n": "\n"}.get(code, code)


def test_a_rejected_greedy_fill_is_asked_of_the_server_once(tmp_path: Path) -> None:
    """At temperature 0 the server writes the same fill every time: when the checks reject it (a syntax error
    here), the pipeline's next draw must not send the same request again; the rescue's hotter samples still go."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/completions") and body is not None:
            handler.send(200, completion(" total = (" if body["temperature"] == 0 else " total = 1"))
        else:
            Healer()(handler, path, body)

    for server in running(FakeServer(answer)):
        loaded = api.load_model(ModelSpec(name=server.url + "#team-model"))
        spans = resolve(SOURCE.encode(), (Selection("span", SPAN),), "python", "m.py")
        greedy = DecodeConfig(decoder="sequential", temperature=0.0)
        result = api.fill_text(SOURCE, spans, language="python", model=loaded, decode=greedy)
        assert result.text == FILLED
        temperatures = [b["temperature"] for b in completions(server)]
        assert temperatures.count(0) == 1 and len(temperatures) >= 2, temperatures
