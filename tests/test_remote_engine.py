"""The remote engine (`--model URL#MODEL`, infill.models.remote) against a real server: llama-cpp-python's own
OpenAI-compatible server on 127.0.0.1 with tiny GGUF models, started once for the module. Greedy fills equal the
in-process llama.cpp engine's on the same file, token-healed or not; the family is found through the server's
tokenizer; retrieved lines are scored by the server (`echo`); sampling is reproducible by --seed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fixtures_remote import LlamaServer, require_server_extra

require_server_extra()

from fixtures_bd import tiny_causal_lm  # noqa: E402
from fixtures_llamacpp import END, FIM, NINE, VOCAB, engine_of, network_gguf  # noqa: E402

from infill import api  # noqa: E402
from infill.cli import main  # noqa: E402
from infill.config import TOOL_DECODE, ModelSpec  # noqa: E402
from infill.models.autoregressive import CausalFim  # noqa: E402
from infill.models.llamacpp import GGUFTokenizer  # noqa: E402
from infill.models.remote import Sampling, ServerTokenizer  # noqa: E402
from infill.models.remote_http import Client  # noqa: E402
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


def test_the_servers_score_is_over_the_whole_vocabulary_and_the_tools_over_what_it_may_write(
    llama: LlamaServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same greedy fill (1:9-1:15, unhealed: 14 tokens, ended by the budget, so no end token is in either
    score) scored token by token: the server's log-probability of each token is the network's over all nine
    tokens (llama-cpp-python's, from the logits before `logit_bias`), the tool's is renormalised over the six it
    may write (the FIM tokens banned; docs/server.md). The scores differ by that and by nothing else: no token of
    the fill is counted twice or missed on either side."""
    monkeypatch.setattr(GGUFTokenizer, "pretoken_start", lambda self, text: None)
    monkeypatch.setattr(ServerTokenizer, "pretoken_start", lambda self, text: None)
    answers: list[dict[str, Any]] = []
    post = Client.post

    def recorded(self: Client, path: str, body: dict[str, Any], **kw: Any) -> dict[str, Any] | None:
        answer = post(self, path, body, **kw)
        if path.endswith("/completions") and answer is not None:
            answers.append(answer)
        return answer

    monkeypatch.setattr(Client, "post", recorded)
    args = ["--span", "1:9-1:15", "--format", "json", "--decoder", "sequential", "--temperature", "0"]
    here = run(tmp_path, "l.txt", LETTERS, *args, "--model", str(llama.models["nine"]))
    there = run(tmp_path, "l.txt", LETTERS, *args, "--model", f"{llama.url}#nine")
    local, remote = (json.loads(r[1])["edits"][0] for r in (here, there))
    (answer,) = answers
    reported = answer["choices"][0]["logprobs"]["token_logprobs"]
    fill = [ord(c) - ord("a") for c in remote["text"]]  # the nine-token vocabulary: "a".."e" are tokens 0..4
    assert local["text"] == remote["text"] and len(fill) == len(reported) == 14

    letters = [ord(c) - ord("a") for c in LETTERS]
    fim = CausalFim(engine_of(llama.models["nine"]), fim=FIM, end_ids=(END,))
    seq = fim.prompt(letters[:8], letters[14:]) + fill[:-1]
    logits = fim.engine.rows([seq], len(fill))[0].double()  # (14, 9): the network's, nothing banned
    whole = logits.log_softmax(-1)[range(len(fill)), fill]
    logits[:, list(FIM.ids)] = float("-inf")
    writable = logits.log_softmax(-1)[range(len(fill)), fill]
    assert reported == pytest.approx(whole.tolist(), abs=1e-3)  # float32 passes of other batch shapes
    assert remote["score"] == pytest.approx(float(whole.sum()), abs=1e-2)
    assert local["score"] == pytest.approx(float(writable.sum()), abs=1e-2)
    assert local["score"] - remote["score"] > 3  # the FIM tokens hold a quarter of this random network's mass


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
