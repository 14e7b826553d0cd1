"""A model on a team's server in the editor (`infill lsp` with `--model URL#MODEL`): what the server is sent from
key to key. A left-to-right model's server keeps a prompt in its cache up to the first change (llama-server's
cache_prompt, vLLM's prefix caching, Ollama's), so the language server sends it what it sends a local GGUF model:
the text after the cursor bounded (`fill.max_suffix`), and the prefix cut to the window at a steady start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures_remote import FakeServer, fake, healthy

from infill.models.fim import family_named

QWEN = family_named("qwen")
assert QWEN is not None
PRE, SUF, MID = QWEN.prefix[-1], QWEN.suffix[-1], QWEN.middle[-1]
URI = "file:///project/long.py"
# a file longer than the model's window before the cursor (4,096 tokens where the server does not say; a
# server without a tokenizer endpoint is planned in words, spaces and signs: about 12 to a line here), and about
# 2,400 after it
BEFORE = "".join(f"value_{i} = compute({i}, {i + 1})\n" for i in range(600)) + "def area(r):\n    "
AFTER = "\n" + "".join(f"other_{i} = compute({i}, {i + 2})\n" for i in range(200))
TYPED = "total = r * r * math.pi "


def keys() -> Iterator[str]:
    """The line typed so far at each word boundary of TYPED (where an editor asks for a suggestion)."""
    for at in range(1, len(TYPED) + 1):
        if TYPED[at - 1] == " ":
            yield TYPED[:at]


@pytest.fixture
def server() -> Iterator[FakeServer]:
    yield from fake(healthy)


def prompts(server: FakeServer) -> list[str]:
    return [str(s[3]["prompt"]) for s in server.seen if s[1].endswith("/v1/completions") and s[3]]


def typed_in_the_editor(server: FakeServer) -> list[str]:
    """The first prompt the server got at each word boundary of TYPED, typed through `infill lsp`, and last at
    the last one again with `"fill": {"max_suffix": 0}`."""
    pytest.importorskip("pygls")
    from fixtures_lsp import LspClient

    client = LspClient()
    out = []
    try:
        client.initialize({"model": server.url + "#qwen-fake", "threshold": 0, "fill": {"retrieve": False}})
        client.open(URI, BEFORE + AFTER)
        line = BEFORE.count("\n")
        typed = list(keys())
        for version, text in enumerate([*typed, typed[-1]], start=2):
            if version == len(typed) + 2:
                client.configure({"fill": {"retrieve": False, "max_suffix": 0}})
            client.change(URI, version, [{"text": BEFORE + text + AFTER}])
            server.seen.clear()
            response = client.inline(URI, line, 4 + len(text))
            assert "error" not in response, response
            out.append(prompts(server)[0])
    finally:
        assert client.close() == 0
    return out


def suffix_of(prompt: str) -> str:
    return prompt.split(SUF, 1)[1].split(MID, 1)[0]


def test_the_server_is_sent_the_same_bounded_suffix_and_prefix_start_at_every_key(server: FakeServer) -> None:
    from infill.models.remote import TextPieces

    *sent, uncapped = typed_in_the_editor(server)
    assert len(sent) == len(list(keys())) > 5
    suffixes = {suffix_of(p) for p in sent}
    assert len(suffixes) == 1  # typing before the cursor leaves the text after it as it was
    (suffix,) = suffixes
    assert AFTER.startswith(suffix) and suffix.endswith("\n")  # whole lines from the cursor on
    assert len(TextPieces().encode(suffix)) <= 256 < len(TextPieces().encode(AFTER))  # the editor's cap
    # the prefix was cut to the window (its first line is not sent), at a start that stays while the user types,
    # so the server's cache keeps everything up to the cursor
    assert all(p.startswith(PRE) and not p.startswith(PRE + "value_0 ") for p in sent)
    starts = {p.split(PRE, 1)[1][:200] for p in sent}
    assert len(starts) == 1, starts
    # `"fill": {"max_suffix": 0}` turns the cap off: all that fits the window (its quarter) is sent
    assert AFTER.startswith(suffix_of(uncapped)) and len(TextPieces().encode(suffix_of(uncapped))) > 900


def test_the_remote_kind_plans_as_a_left_to_right_model() -> None:
    from fixtures_cli import ByteTokenizer

    from infill.core.kinds.ar import Autoregressive
    from infill.core.kinds.remote import Remote
    from infill.core.plan import STEADY_CUT
    from infill.models.registry import LoadedModel
    from infill.models.remote import RemoteFim

    network = type("Causal", (), {"max_length": 4096, "bos_id": None, "pad_id": 0})()
    local = Autoregressive().window(LoadedModel("m", "ar", network, ByteTokenizer(), {}))
    served = RemoteFim(None, None, "m", QWEN, (PRE, SUF, MID), QWEN.ends, max_length=4096)  # type: ignore[arg-type]
    window = Remote().window(LoadedModel("u", "remote", served, ByteTokenizer(), {}))
    assert window.steady_cut == local.steady_cut == STEADY_CUT and window.rereads_suffix and local.rereads_suffix


# a server that does not say its model's context (llama-cpp-python's /v1/models has no n_ctx) and refuses a
# prompt longer than it, saying how long it is, as llama-cpp-python and vLLM do (llama-server: its error's n_ctx)
SAID = "This model's maximum context length is {n} tokens, however you requested {asked} tokens. Please reduce."


def small_context(n: int, says: bool = True, llama_server: bool = False) -> Any:
    from fixtures_remote import FakeHandler, completion

    from infill.models.remote import TextPieces

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/completions") and body is not None:
            text = str(body["prompt"])
            fim = sum(text.count(t) for t in (PRE, SUF, MID))  # one token each for the server
            asked = len(TextPieces().encode(text.replace(PRE, "").replace(SUF, "").replace(MID, ""))) + fim
            asked += int(body["max_tokens"])
            if asked > n:
                said = SAID.format(n=n, asked=asked) if says else "the request exceeds the available context size"
                error: dict[str, Any] = {"code": 400, "message": said, "type": "invalid_request_error"}
                if llama_server:
                    error.update(message="the request exceeds the available context size", n_ctx=n)
                handler.send(400, {"error": error})
            else:
                handler.send(200, completion("x = 1"))
        else:
            healthy(handler, path, body)

    return answer


def fill_long_file(tmp_path: Path, url: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from infill import api
    from infill.cli import main

    path = tmp_path / "long.py"
    path.write_text(BEFORE + "\n" + AFTER)
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", str(path), "--span", str(BEFORE.count("\n") + 1), "--model", url])
    return r.exit_code, r.stderr


@pytest.mark.parametrize("llama_server", [False, True])
def test_a_server_with_a_smaller_context_than_assumed_is_planned_for_the_context_it_says(
    tmp_path: Path, llama_server: bool
) -> None:
    """A prompt planned for the assumed window (4,096 tokens) was refused at every fill ("maximum context length
    is 512 tokens"): in the editor, every key answered an error until the user found `fill.max_context`. The
    refusal says the context: the fill is planned again for it, and so is every later one."""
    from infill.models.remote import TextPieces

    for server in fake(small_context(512, llama_server=llama_server)):
        code, err = fill_long_file(tmp_path, server.url + "#qwen-fake")
        assert code == 0, err
        sent = prompts(server)
        sizes = [len(TextPieces().encode(p)) for p in sent]
        assert sizes[0] > 512 and len(sizes) > 1 and max(sizes[1:]) < 512, sizes  # refused once, then fits
        assert "x = 1" in (tmp_path / "long.py").read_text()


def test_a_server_that_does_not_say_its_context_gets_one_request_and_a_clear_error(tmp_path: Path) -> None:
    for server in fake(small_context(512, says=False)):
        code, err = fill_long_file(tmp_path, server.url + "#qwen-fake")
        assert code == 123 and len(err.splitlines()) == 1, err
        assert "exceeds the available context size" in err and "--max-context N" in err
        assert len(prompts(server)) == 1  # not sent again in the OpenAI API's fields: it is not a refused field
        assert (tmp_path / "long.py").read_text() == BEFORE + "\n" + AFTER


def llama_cpp_python(handler: Any, path: str, body: dict[str, Any] | None) -> None:
    """llama-cpp-python's server as the tool sees it: its /extras/tokenize (the FIM tokens one each, any other
    character its code point) and `echo` answered with the prompt's log-probabilities."""
    from fixtures_remote import completion

    special = (PRE, SUF, MID)
    if path == "/extras/tokenize":
        text, ids = str((body or {})["input"]), []
        while text:
            hit = next((i for i, s in enumerate(special) if text.startswith(s)), None)
            ids.append(ord(text[0]) if hit is None else 1000 + hit)
            text = text[1:] if hit is None else text[len(special[hit]) :]
        handler.send(200, {"tokens": ids})
    elif path == "/extras/detokenize":
        ids = (body or {})["tokens"]
        handler.send(200, {"text": "".join(special[i - 1000] if i >= 1000 else chr(i) for i in ids)})
    elif path.endswith("/v1/completions") and body and body.get("echo"):
        text = str(body["prompt"])
        handler.send(200, completion(text + "x", [-0.5] * (len(text) + 1)))
    elif path.endswith("/v1/completions"):
        handler.send(200, completion("x = 1"))
    elif path.endswith("/v1/models"):
        handler.send(200, {"data": [{"id": "qwen-fake", "object": "model", "owned_by": "me"}]})
    else:
        handler.send(404, {"detail": "Not Found"})


@pytest.mark.parametrize("lines", [2, 40])
def test_llama_cpp_pythons_echo_scores_lines_only_for_short_prompts(tmp_path: Path, lines: int) -> None:
    """llama-cpp-python's `echo` costs its one worker a vocabulary sort and a detokenization per prompt token (tens
    of seconds for an editor's prompt, every later fill waiting): retrieved lines are ranked there only for a prompt
    of up to 256 tokens; the control, a short file, is still ranked."""
    from click.testing import CliRunner

    from infill import api
    from infill.cli import main

    head = "".join(f"def helper_{i}(xs):\n    return sum(xs) + {i}\n\n\n" for i in range(lines))
    source = head + "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n"
    (tmp_path / "m.py").write_text(source)
    (tmp_path / "other.py").write_text("def mean(ys):\n    total = len(ys)\n")  # its line 2: a candidate
    line = str(source.splitlines().index("    total = sum(xs)") + 1)
    for server in fake(llama_cpp_python):
        api.clear_model_cache()
        args = ["fill", str(tmp_path / "m.py"), "--span", line, "--context", str(tmp_path / "other.py")]
        r = CliRunner().invoke(main, [*args, "--model", server.url + "#qwen-fake"])
        assert r.exit_code == 0, r.stderr
        echoed = [s for s in server.seen if s[3] and s[3].get("echo")]
        assert bool(echoed) == (len(source) < 256), (len(source), len(echoed))


@pytest.mark.parametrize("name", ["qwen2.5-7b-chat", "llama-3-8b"])
def test_a_model_whose_tokenizer_has_no_fim_tokens_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    """A server whose tokenizer knows no FIM tokens serves a model that was not trained to fill in the middle:
    its name's family (qwen2.5-7b-chat says qwen) was used, the FIM tokens sent as plain text and whatever the
    model wrote after them filled the span. Refused at load, as llama-server's /infill refuses such a model;
    `;fim=` still names the family where the server's tokenizer is not the model's."""
    from click.testing import CliRunner
    from fixtures_remote import completion

    from infill import api
    from infill.cli import main

    def answer(handler: Any, path: str, body: dict[str, Any] | None) -> None:
        if path == "/tokenize":  # llama-server's: every character its code point, no special token
            handler.send(200, {"tokens": [ord(c) for c in str((body or {})["content"])]})
        elif path.endswith("/v1/models"):
            handler.send(200, {"data": [{"id": name, "object": "model", "owned_by": "me"}]})
        elif path.endswith("/v1/completions"):
            handler.send(200, completion("    x = 1"))
        else:
            handler.send(404, {"error": "not found"})

    source = "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n"
    path = tmp_path / "m.py"
    for server in fake(answer):
        for model, code in ((f"{server.url}#{name}", 2), (f"{server.url}#{name};fim=qwen", 0)):
            path.write_text(source)
            api.clear_model_cache()
            r = CliRunner().invoke(main, ["fill", str(path), "--span", "2", "--model", model])
            assert r.exit_code == code, r.stderr
            if code:
                assert len(r.stderr.splitlines()) == 1 and "has no fill-in-the-middle tokens" in r.stderr
                assert path.read_text() == source
                assert not [s for s in server.seen if s[1].endswith("/completions")]


def test_a_fill_of_another_budget_at_the_cursor_keeps_the_prefixs_start() -> None:
    """The room the prefix is cut to is the window less the fill's budget: a new line (96 tokens for a block, 32
    for a line) moved the steady cut a step at about every second Enter, and back at the next line, two re-reads
    of the whole prompt (measured: 3,802 and 4,062 tokens at 2 of 8 word boundaries). The budget is rounded up to
    a unit for the cut, so both budgets cut at the same start; the room left goes to the text after the cursor."""
    from fixtures_cli import ByteTokenizer

    from infill.config import FillOptions
    from infill.core.plan import STEADY_CUT, Window, left_to_right, plan_regions
    from infill.spans import LineIndex, Span

    window = left_to_right(Window(4096, has_bos=False, has_pad=True, groups_spans=False))
    assert window.steady_cut == STEADY_CUT
    moved = 0
    for typed in range(0, 400, 23):
        text = BEFORE + "x" * typed
        data = (text + AFTER).encode()
        span = Span(len(text.encode()), len(text.encode()), one_line=True)
        starts, rooms = set(), []
        for budget in (32, 96):
            options = FillOptions(tokens=budget, max_suffix=256)
            (region,) = plan_regions(data, [span], ByteTokenizer(), window, options, [], LineIndex(data))
            assert region.truncated and text.endswith(bytes(region.prefix_ids).decode())
            starts.add(len(text) - len(region.prefix_ids))
            rooms.append(len(region.prefix_ids) + len(region.suffix_ids) + budget)
        moved += len(starts) > 1
        assert all(room <= 4096 for room in rooms)
    assert moved == 0


def test_the_servers_tokenizer_detokenizes_the_same_ids_once() -> None:
    """A slice of encoded text (the prefix cut to the window, the suffix's cap) was detokenized by the server at
    every decode: 4 round trips a fill, 2 of them the same ids again (each sample; the unchanged text after the
    cursor at the next key). The answer is kept as the tool's own encodings are."""
    from infill.models.remote import ServerTokenizer
    from infill.models.remote_http import Client, parse

    for server in fake(llama_cpp_python):
        tok = ServerTokenizer(Client(parse(server.url + "#qwen-fake"), lambda: None, 30.0), "extras", "qwen-fake")
        ids = tok.encode("def mean(xs):\n    return sum(xs)\n")
        for _ in range(3):
            assert tok.decode(ids[4:]) == "mean(xs):\n    return sum(xs)\n"
        assert sum(s[1] == "/extras/detokenize" for s in server.seen) == 1


def test_typing_a_line_tokenizes_the_text_before_it_once() -> None:
    """At each new word the prompt's prefix (the whole text before the cursor, less token healing's cut) was sent
    to the server's /tokenize again, and where it was cut to the window, the cut detokenized again: on a real
    llama-cpp-python server, 6 of each in 20 keys of one line. The prefix is the text up to the line's start (kept
    after its first request) and the line so far (kept from healing's check), joined where the pre-tokenizer splits
    there; the cut is the kept text's from its start to the line's, and the line."""
    from infill.config import FillOptions
    from infill.core.plan import Window, left_to_right, plan_regions
    from infill.models.remote import ServerTokenizer
    from infill.models.remote_http import Client, parse
    from infill.spans import LineIndex, Span

    before = "".join(f"value_{i} = compute({i})\n" for i in range(40)) + "def area(r):\n"
    line = "    radius = r * math.pi"
    window = left_to_right(Window(512, has_bos=False, has_pad=True, groups_spans=False, heals=True))
    for server in fake(llama_cpp_python):
        tok = ServerTokenizer(Client(parse(server.url + "#qwen-fake"), lambda: None, 30.0), "extras", "qwen-fake")
        tok.pre = "qwen2"
        heals, prefixes = set(), set()
        for typed in range(5, len(line) + 1):
            data = (before + line[:typed] + "\n").encode()
            span = Span(len(data) - 1, len(data) - 1, one_line=True)
            (region,) = plan_regions(data, [span], tok, window, FillOptions(tokens=16), [], LineIndex(data))
            heals.add(region.spans[0].heal)
            prefix = tok.decode(region.prefix_ids)  # as the remote kind sends it
            assert region.truncated and (before + line[:typed]).endswith(prefix + region.spans[0].heal)
            assert region.prefix_ids == [ord(c) for c in prefix]  # the server's own tokens
            prefixes.add(prefix)
        sent = [str(s[3]["input"]) for s in server.seen if s[1] == "/extras/tokenize"]
        assert len(prefixes) > 5 and len(heals) > 5  # healed, at more than five words
        assert [text for text in sent if text.startswith(before[:5])] == [before]
        assert sum(s[1] == "/extras/detokenize" for s in server.seen) == 1


def test_the_servers_tokenizer_joins_lines_only_where_the_pre_tokenizer_splits() -> None:
    """Text whose line start the pre-tokenizer does not split at (a blank line joins the line breaks around it
    into one pre-token), or a tokenizer without a known pre-tokenizer: the whole text is sent."""
    from infill.models.remote import ServerTokenizer
    from infill.models.remote_http import Client, parse

    for pre in ("qwen2", None):
        for server in fake(llama_cpp_python):
            tok = ServerTokenizer(Client(parse(server.url + "#qwen-fake"), lambda: None, 30.0), "extras", "qwen-fake")
            tok.pre = pre
            tok.encode("x = 1\n")
            tok.encode("\ny = 2")
            tok.encode("z")
            assert tok.encode("x = 1\n\ny = 2") == [ord(c) for c in "x = 1\n\ny = 2"]
            assert tok.encode("x = 1\nz") == [ord(c) for c in "x = 1\nz"]
            sent = [s[3]["input"] for s in server.seen if s[1] == "/extras/tokenize"]
            assert "x = 1\n\ny = 2" in sent
            assert ("x = 1\nz" in sent) == (pre is None)
