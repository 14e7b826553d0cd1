"""The remote engine (`--model URL#MODEL`, infill.models.remote) against a real server: llama-cpp-python's own
OpenAI-compatible server on 127.0.0.1 with tiny GGUF models, started once for the module. Greedy fills equal the
in-process llama.cpp engine's on the same file, token-healed or not; the family is found through the server's
tokenizer; retrieved lines are scored by the server (`echo`); sampling is reproducible by --seed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_remote import LlamaServer, require_server_extra

require_server_extra()

from fixtures_bd import tiny_causal_lm  # noqa: E402
from fixtures_llamacpp import NINE, VOCAB, network_gguf  # noqa: E402

from infill import api  # noqa: E402
from infill.cli import main  # noqa: E402
from infill.config import TOOL_DECODE, ModelSpec  # noqa: E402
from infill.models.llamacpp import GGUFTokenizer  # noqa: E402
from infill.models.remote import Sampling, ServerTokenizer  # noqa: E402
from infill.models.tiny_gguf import tiny_gguf  # noqa: E402
from infill.spans import Selection, resolve  # noqa: E402

LETTERS = "abcdeabcdeabcdeabcde"  # the nine-token vocabulary has no line break
SOURCE = "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n\n\ndef first(xs):\n    return xs[0]\n"


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One server with two models: "nine" (a random network over a, b, c, d, e, one end token and the three FIM
    tokens: the server's greedy distribution is the tool's, as no other special token exists to ban or merge) and
    "qwen" (the tiny Qwen2.5-Coder-layout model of infill.models.tiny_gguf)."""
    base = tmp_path_factory.mktemp("remote")
    nine = network_gguf(base / "nine.gguf", tiny_causal_lm("qwen2", seed=3, vocab=VOCAB), NINE)
    qwen = tiny_gguf(base / "qwen.gguf", "qwen")
    server = LlamaServer({"nine": nine, "qwen": qwen})
    server.start(base / "server.log")
    try:
        yield server
    finally:
        server.stop()


def run(tmp_path: Path, name: str, text: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / name
    path.write_text(text)
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", str(path), *args])
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("span", ["1:3-1:9", "1:1-1:6", "1:12-1:21"])
def test_greedy_fills_equal_the_in_process_engines(
    llama: LlamaServer, tmp_path: Path, span: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same weights on the server and in this process, the same file and span, neither token-healed: the same
    prompt, the same diff."""
    assert llama.models["nine"].is_file()
    args = ["--span", span, "--diff", "--decoder", "sequential", "--temperature", "0"]
    monkeypatch.setattr(GGUFTokenizer, "pretoken_start", lambda self, text: None)
    monkeypatch.setattr(ServerTokenizer, "pretoken_start", lambda self, text: None)
    here = run(tmp_path, "l.txt", LETTERS, *args, "--model", str(llama.models["nine"]))
    there = run(tmp_path, "l.txt", LETTERS, *args, "--model", f"{llama.url}#nine")
    assert here[0] == 1 and here[1].startswith("---"), here
    assert there == here


@pytest.mark.parametrize("span", ["1:3-1:9", "1:7-1:12", "1:9-1:15"])
def test_a_span_inside_a_word_is_healed_on_the_server_as_in_this_process(
    llama: LlamaServer, tmp_path: Path, span: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The span starts inside a word (the nine-token vocabulary's letters are one pre-token under Qwen's
    pre-tokenizer, which its GGUF names and the family's models use): the server is told by a GBNF grammar that
    the fill begins with the word's start, and its greedy fill is the in-process engine's own greedy healing, the
    most likely consistent token at each step. The control: unhealed, the fill is another."""
    args = ["--span", span, "--diff", "--decoder", "sequential", "--temperature", "0"]
    here = run(tmp_path, "l.txt", LETTERS, *args, "--model", str(llama.models["nine"]))
    there = run(tmp_path, "l.txt", LETTERS, *args, "--model", f"{llama.url}#nine")
    assert here[0] == 1 and here[1].startswith("---"), here
    assert there == here
    monkeypatch.setattr(GGUFTokenizer, "pretoken_start", lambda self, text: None)
    unhealed = run(tmp_path, "l.txt", LETTERS, *args, "--model", str(llama.models["nine"]))
    assert unhealed[0] == 1 and unhealed != here


@pytest.mark.parametrize("text", [' "a\\b"', "\tx", "é(🙂", "a.b*c+d?[e]{f}|g^h$i/j"])
def test_the_server_reads_the_grammar_of_any_text(llama: LlamaServer, text: str) -> None:
    """The GBNF grammar that begins a fill with `text`, quotes, backslashes, a tab and non-ASCII in it: the server
    takes it and its fill begins with the text (llama-cpp-python's server dies of a grammar it cannot read)."""
    api.clear_model_cache()
    model = api.load_model(ModelSpec(name=f"{llama.url}#qwen")).remote
    got = model.complete("x = ", "\n", 24, Sampling(0.0, 0, 1.0, None), [], text)
    assert model.constrains == "gbnf" and model.nfe == 1 and got.text.startswith(text), got


def test_the_family_comes_from_the_servers_tokenizer_and_lines_are_scored_by_it(
    llama: LlamaServer, tmp_path: Path
) -> None:
    """The tiny Qwen model: FIM tokens found by tokenizing them on the server; the tool's defaults (beam search,
    which a server runs as greedy) fill a Python line, retrieved lines of the file ranked beside the sample."""
    api.clear_model_cache()
    loaded = api.load_model(ModelSpec(name=f"{llama.url}#qwen"))
    assert loaded.kind == "remote" and loaded.info["fim"] == "qwen" and loaded.info["tokenizer"] == "server"
    assert loaded.remote.spelled == ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
    code, out, err = run(tmp_path, "m.py", SOURCE, "--span", "7", "--model", f"{llama.url}#qwen", "--format", "json")
    doc = json.loads(out)
    assert code == 0, err
    assert doc["stats"]["decoder"] == "sequential" and len(doc["edits"]) == 1
    spans = resolve(SOURCE.encode(), (Selection("span", "7"),), "python", "m.py")
    result = api.fill_text(SOURCE, spans, language="python", model=loaded, decode=TOOL_DECODE)
    assert result.stats["retrieved"] >= 1  # the file's other lines, each scored by one request with echo
    assert loaded.remote.scores_prompts is True  # llama.cpp returns the prompt's log-probabilities


def test_samples_are_reproducible_by_seed(llama: LlamaServer, tmp_path: Path) -> None:
    args = ["--span", "1:3-1:9", "--diff", "--temperature", "1", "-n", "3", "--model", f"{llama.url}#nine"]
    first = run(tmp_path, "l.txt", LETTERS, *args, "--seed", "7")
    again = run(tmp_path, "l.txt", LETTERS, *args, "--seed", "7")
    assert first[0] == 1 and first == again
