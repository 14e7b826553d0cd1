"""The Neovim plugin (editors/nvim) in a real Neovim driven over its RPC channel, with keys typed in insert mode
as a person types them, against a real `infill lsp`: a suggestion is shown after a pause, typing what it says
keeps the rest without a new request, <Tab> accepts it, <M-Right> accepts one word, <C-]> dismisses. Neovim
0.7.2 is Debian's; `.ci/run` installs it, and in CI ($INFILL_REQUIRE_NVIM) a missing `nvim` fails the test."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "editors" / "nvim"


def _nvim_path() -> str:
    found = shutil.which("nvim")
    if found is None:
        if os.environ.get("INFILL_REQUIRE_NVIM"):
            pytest.fail("nvim is not installed (.ci/run installs Debian's neovim)")
        pytest.skip("nvim is not installed")
    return found


@pytest.fixture
def nvim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    pynvim = pytest.importorskip("pynvim") if not os.environ.get("INFILL_REQUIRE_NVIM") else __import__("pynvim")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("INFILL_ENGINE", "torch")
    monkeypatch.chdir(tmp_path)
    argv = [_nvim_path(), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "--cmd", f"set rtp^={PLUGIN}"]
    session = pynvim.attach("child", argv=argv)
    try:
        yield session
    finally:
        session.command("qall!", async_=True)
        session.close()


def _wait(what: Callable[[], Any], seconds: float = 90.0) -> Any:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = what()
        if value:
            return value
        time.sleep(0.05)
    return what()


@pytest.mark.slow
def test_ghost_text_typeahead_and_accept(nvim: Any, tmp_path: Path) -> None:
    source = tmp_path / "calc.py"
    source.write_text("def add(first, second):\n    return\n\n\nprint(add(1, 2))\n")
    nvim.exec_lua(
        "require('infill').setup({cmd = ..., settings = {threshold = 0, tokens = 8}, debounce_ms = 10})",
        [sys.executable, "-m", "infill", "lsp"],
    )
    nvim.command("filetype on")
    nvim.command(f"edit {source}")
    state = "return require('infill')"
    attached = (
        "local c = vim.lsp.get_client_by_id(require('infill').state.client_id or -1) return c ~= nil and c.initialized"
    )
    assert _wait(lambda: nvim.exec_lua(attached)), "the language server did not start"
    assert nvim.exec_lua("return vim.version().minor") >= 7

    def suggestion() -> str | None:
        return nvim.exec_lua(f"{state}.suggestion()")  # type: ignore[no-any-return]

    def line() -> str:
        return nvim.current.buffer[1]  # type: ignore[no-any-return]

    nvim.command("call cursor(2, 1)")
    nvim.input("A ")  # at the end of "    return", a space, a pause: a request
    shown = _wait(suggestion)
    assert shown and len(shown) >= 2, nvim.exec_lua("return vim.inspect(require('infill').state.last)")
    asked = nvim.exec_lua(f"{state}.state.requests")
    nvim.input(shown[0])  # typing what it says keeps the rest, without asking again
    assert _wait(lambda: line() == "    return " + shown[0])
    time.sleep(0.3)
    assert suggestion() == shown[1:]
    assert nvim.exec_lua(f"{state}.state.requests") == asked
    nvim.input("<Tab>")
    assert _wait(lambda: line() == "    return " + shown), line()
    # a fresh suggestion, one word at a time, then dismissed
    nvim.input("<Esc>")
    nvim.current.buffer[1] = "    return"
    nvim.command("call cursor(2, 1)")
    nvim.input("A ")
    full = _wait(suggestion)
    assert full
    nvim.input("<M-Right>")
    assert _wait(lambda: line() != "    return ")
    inserted = line()[len("    return ") :]
    assert inserted and full.startswith(inserted) and inserted.strip()
    assert (suggestion() or "") == full[len(inserted) :]
    nvim.input("<C-]>")
    assert _wait(lambda: suggestion() is None, 5)
    nvim.input("<Esc>")
    # text of several bytes a character before the cursor: positions go in the encoding the client and the
    # server agreed on (the plugin offers UTF-8, Neovim's own byte columns, as Neovim 0.10 and later do)
    client = "vim.lsp.get_client_by_id(require('infill').state.client_id)"
    assert nvim.exec_lua(f"return {client}.offset_encoding") == "utf-8"
    nvim.exec_lua(
        f"local c = {client} local request = c.request "
        "c.request = function(method, params, ...) _G.infill_sent = params return request(method, params, ...) end"
    )
    wide = '    label = "東京 → 大阪 ✓"; total = first +'
    nvim.input("<Esc>")
    nvim.current.buffer[1] = wide
    nvim.command("call cursor(2, 1)")
    nvim.input("A ")
    shown = _wait(suggestion)
    assert shown, nvim.exec_lua("return vim.inspect(require('infill').state.last)")
    sent = nvim.exec_lua("return _G.infill_sent.position")
    assert sent == {"line": 1, "character": len((wide + " ").encode())}, sent
    nvim.input("<Tab>")
    assert _wait(lambda: line() == wide + " " + shown), line()
    nvim.input("<Esc>")


# --- the plugin's keys, without a server: a suggestion put on screen as the plugin keeps it ------------------------


@pytest.fixture
def plugin(nvim: Any) -> Any:
    """The plugin set up for no filetype (no server starts), a buffer with two lines, insert mode at the end of
    the first."""
    nvim.exec_lua("require('infill').setup({filetypes = {}})")
    nvim.current.buffer[:] = ["name = ", "other = 2"]
    nvim.command("call cursor(1, 1)")
    nvim.input("A")
    assert _wait(lambda: nvim.api.get_mode()["mode"] == "i", 5)
    return nvim


def _show(nvim: Any, text: str) -> None:
    """A suggestion of `text` at the cursor, as the plugin records the one it shows."""
    nvim.exec_lua(
        "local pos = vim.api.nvim_win_get_cursor(0) local buf = vim.api.nvim_get_current_buf() "
        "require('infill').state.suggestion = {buf = buf, row = pos[1] - 1, col = pos[2], text = ..., "
        "tick = vim.api.nvim_buf_get_changedtick(buf), win = vim.api.nvim_get_current_win()}",
        text,
    )


def test_accepting_a_word_never_splits_a_character(plugin: Any) -> None:
    _show(plugin, "東京 + 1")
    plugin.input("<M-Right>")
    assert _wait(lambda: plugin.current.buffer[0] != "name = ", 5)
    assert plugin.current.buffer[0] == "name = 東京"  # the whole word, not its first byte
    assert plugin.exec_lua("return require('infill').suggestion()") == " + 1"


def test_a_suggestion_left_behind_by_the_cursor_is_not_inserted_there(plugin: Any) -> None:
    _show(plugin, "(bar)")
    plugin.input("<Down>")  # the cursor moves without typing: the suggestion belonged to the other place
    assert _wait(lambda: plugin.exec_lua("return require('infill').suggestion()") is None, 5)
    plugin.input("<Tab>")  # a plain <Tab> now
    assert _wait(lambda: plugin.current.buffer[1] != "other = 2", 5)
    assert plugin.current.buffer[:] == ["name = ", "other =\t 2"]  # at the cursor, column 8


def test_a_suggestion_with_crlf_breaks_inserts_lines_without_carriage_returns(plugin: Any) -> None:
    # the server writes the document's own line breaks: "\r\n" in a file Neovim reads with fileformat=dos
    _show(plugin, "1\r\nvalue = 2")
    plugin.input("<Tab>")
    assert _wait(lambda: plugin.current.buffer[0] != "name = ", 5)
    assert plugin.current.buffer[:] == ["name = 1", "value = 2", "other = 2"]


STUB_CLIENT = """
local M = require('infill')
M.state.client_id = 1
_G.sent, _G.answers = 0, {}
local client = {
  id = 1,
  offset_encoding = "utf-8",
  request = function(method, params, handler)
    _G.sent = _G.sent + 1
    local item = _G.reply or {insertText = "ghost"}
    table.insert(_G.answers, function() handler(nil, {items = {item}}) end)
    return true, _G.sent
  end,
  cancel_request = function() end,
}
vim.lsp.get_client_by_id = function() return client end
vim.lsp.buf_is_attached = function() return true end
"""


@pytest.fixture
def stubbed(nvim: Any) -> Any:
    """The plugin with a stand-in client that answers each request when the test says (_G.answers[n]())."""
    nvim.exec_lua("require('infill').setup({filetypes = {'stub'}, debounce_ms = 20})")
    nvim.exec_lua(STUB_CLIENT)
    nvim.command("noautocmd setlocal filetype=stub")  # one of the plugin's filetypes (not attached by it)
    nvim.current.buffer[:] = ["x = 1"]
    nvim.command("call cursor(1, 1)")
    nvim.input("A")
    assert _wait(lambda: nvim.api.get_mode()["mode"] == "i", 5)
    return nvim


SUGGESTION = "return require('infill').suggestion()"


def _shown_once_answered(nvim: Any, expected: str) -> bool:
    """Answers every request sent so far, again at each poll, until the suggestion is `expected`: on a loaded
    machine a key of the test's input can reach the plugin after the pause, so a second request follows the
    first one, which is then stale (and its answer rightly dropped)."""

    def answered() -> bool:
        for answer in range(1, nvim.exec_lua("return _G.sent") + 1):
            nvim.exec_lua(f"_G.answers[{answer}]()")
        return bool(nvim.exec_lua(SUGGESTION) == expected)

    return bool(_wait(lambda: nvim.exec_lua("return _G.sent") >= 1, 5)) and bool(_wait(answered, 5))


def test_an_answer_that_comes_after_dismiss_is_not_shown(stubbed: Any) -> None:
    stubbed.input(" ")
    assert _wait(lambda: stubbed.exec_lua("return _G.sent") == 1, 5)
    stubbed.input("<C-]>")  # dismissed while the request is on its way
    time.sleep(0.1)
    stubbed.exec_lua("_G.answers[1]()")
    time.sleep(0.1)
    assert stubbed.exec_lua(SUGGESTION) is None
    stubbed.input("y")  # a new pause, answered: shown (the stand-in works)
    assert _wait(lambda: stubbed.exec_lua("return _G.sent") >= 2, 5)
    assert _shown_once_answered(stubbed, "ghost")


def test_no_ghost_text_in_normal_mode_after_esc_before_the_pause_ends(stubbed: Any) -> None:
    stubbed.input("<CR><Esc>")  # a key, then <Esc> within the pause; the cursor stays at column 0
    assert _wait(lambda: stubbed.api.get_mode()["mode"] == "n", 5)
    time.sleep(0.2)  # the pause (20 ms) is long over
    for answer in range(1, stubbed.exec_lua("return _G.sent") + 1):
        stubbed.exec_lua(f"_G.answers[{answer}]()")
    time.sleep(0.1)
    assert stubbed.exec_lua(SUGGESTION) is None
    namespace = "vim.api.nvim_create_namespace('infill')"
    assert stubbed.exec_lua(f"return #vim.api.nvim_buf_get_extmarks(0, {namespace}, 0, -1, {{}})") == 0


@pytest.mark.slow
def test_a_second_unnamed_buffer_does_not_take_the_first_ones_place_on_the_server(nvim: Any) -> None:
    # Neovim's LSP client names every unnamed buffer "file://": a second one opened on the server replaced the
    # first one's text there (its suggestions then came from the other buffer's text)
    nvim.exec_lua(
        "require('infill').setup({cmd = ..., settings = {threshold = 0}})", [sys.executable, "-m", "infill", "lsp"]
    )
    nvim.command("filetype on")
    attached = "return vim.lsp.buf_is_attached(..., require('infill').state.client_id or -1)"

    def new_buffer(name: str) -> int:
        buf = nvim.api.create_buf(True, False)
        nvim.api.set_current_buf(buf)
        if name:
            nvim.command(f"file {name}")
        nvim.command("set filetype=python")
        return buf.number  # type: ignore[no-any-return]

    first = new_buffer("")
    assert _wait(lambda: nvim.exec_lua(attached, first))
    second, named = new_buffer(""), new_buffer("named.py")
    assert _wait(lambda: nvim.exec_lua(attached, named))  # a named buffer is attached as before
    assert not nvim.exec_lua(attached, second)
    assert nvim.exec_lua(attached, first)


def test_a_multi_line_suggestion_is_accepted_line_by_line(plugin: Any) -> None:
    _show(plugin, "compute(\n    first,\n)")
    plugin.input("<M-Down>")
    assert _wait(lambda: plugin.current.buffer[0] != "name = ", 5)
    assert plugin.current.buffer[:] == ["name = compute(", "other = 2"]
    assert plugin.exec_lua("return require('infill').suggestion()") == "\n    first,\n)"
    plugin.input("<M-Down>")  # at the end of a line: its break and the next line
    assert _wait(lambda: len(plugin.current.buffer) == 3, 5)
    assert plugin.current.buffer[:] == ["name = compute(", "    first,", "other = 2"]
    plugin.input("<Tab>")
    assert _wait(lambda: len(plugin.current.buffer) == 4, 5)
    assert plugin.current.buffer[:] == ["name = compute(", "    first,", ")", "other = 2"]


def test_a_whole_line_that_dedents_is_shown_and_replaces_the_indentation(stubbed: Any) -> None:
    # on a blank line the server writes the whole line, indentation included, in place of the blank line: a
    # line less indented than the editor's automatic indentation was not shown at all
    stubbed.input("<Esc>")
    stubbed.current.buffer[:] = ["def f(x):", "    if x:", "        return 1", "        "]
    stubbed.exec_lua(
        "_G.reply = {insertText = '    return 0', "
        "range = {start = {line = 3, character = 0}, ['end'] = {line = 3, character = 8}}}"
    )
    stubbed.command("call cursor(4, 1)")
    stubbed.input("A <BS>")  # a change, then the pause: a request at the end of the blank line
    assert _shown_once_answered(stubbed, "    return 0")
    stubbed.input("<M-Right>")  # one word: it replaces the indentation too
    assert _wait(lambda: stubbed.current.buffer[3] != "        ", 5)
    assert stubbed.current.buffer[3] == "    return"
    assert stubbed.exec_lua(SUGGESTION) == " 0"
    stubbed.input("<Tab>")
    assert _wait(lambda: stubbed.current.buffer[3] != "    return", 5)
    assert stubbed.current.buffer[:] == ["def f(x):", "    if x:", "        return 1", "    return 0"]
    assert tuple(stubbed.current.window.cursor) == (4, len("    return 0"))


EXTMARK = "return vim.api.nvim_buf_get_extmarks(0, vim.api.nvim_create_namespace('infill'), 0, -1, {details = true})"


@pytest.mark.parametrize(("column", "typed"), [(0, ""), (0, "  "), (4, "")])
def test_a_whole_line_accepted_inside_a_blank_lines_indentation_replaces_it(
    stubbed: Any, column: int, typed: str
) -> None:
    # the cursor at the start (or inside) of a blank line's indentation: the server writes the whole line over
    # the indentation; the blanks after the cursor were left behind the accepted line (trailing whitespace), and
    # Neovim 0.7 showed the suggestion after them, at the end of the line (the indentation twice, on screen)
    stubbed.input("<Esc>")
    stubbed.current.buffer[:] = ["def f(x):", "    if x:", "        ", "    return 0"]
    stubbed.exec_lua(
        "_G.reply = {insertText = '        return 1', "
        "range = {start = {line = 2, character = 0}, ['end'] = {line = 2, character = 8}}}"
    )
    stubbed.command(f"call cursor(3, {column + 1})")
    stubbed.input("ix<BS>")  # a change, then the pause: a request with the cursor inside the indentation
    shown = "        return 1"[column:]
    assert _shown_once_answered(stubbed, shown)
    ((_, row, col, details),) = stubbed.exec_lua(EXTMARK)  # on screen: over the blanks it replaces
    # (before Neovim 0.10 the first line is drawn at the mark by a decoration provider, in one window)
    drawn = stubbed.exec_lua("return require('infill').state.suggestion.first") or details
    assert (row, col, drawn["virt_text_pos"], drawn["virt_text"][0][0]) == (2, column, "overlay", shown)
    if typed:
        stubbed.input(typed)  # typing what it says keeps the rest, still in place of the blanks
        assert _wait(lambda: stubbed.exec_lua(SUGGESTION) == shown[len(typed) :], 5)
    stubbed.input("<Tab>")
    assert _wait(lambda: stubbed.current.buffer[2] != "        " + typed, 5)
    assert stubbed.current.buffer[:] == ["def f(x):", "    if x:", "        return 1", "    return 0"]
    assert tuple(stubbed.current.window.cursor) == (3, len("        return 1"))


def _answer_all(nvim: Any) -> None:
    for answer in range(1, nvim.exec_lua("return _G.sent") + 1):
        nvim.exec_lua(f"_G.answers[{answer}]()")


def _shown_at_the_end_of(nvim: Any, line: str, text: str) -> bool:
    """Whether, the buffer being the one `line` and the stand-in answering `text`, `A` and a pause show `text`."""
    nvim.input("<Esc>")
    nvim.current.buffer[:] = [line]
    nvim.exec_lua("_G.reply = {insertText = ...}", text)
    nvim.command("call cursor(1, 1)")
    nvim.input("A")
    return _shown_once_answered(nvim, text)


def _nothing_shown_after(nvim: Any, keys: str) -> bool:
    """Whether typing `keys` and pausing shows nothing, whatever requests went out are answered."""
    nvim.input(keys)
    time.sleep(0.1)  # the pause (20 ms) is long over
    _answer_all(nvim)
    return bool(nvim.exec_lua(SUGGESTION) is None and nvim.exec_lua(EXTMARK) == [])


def test_no_ghost_text_while_the_completion_menu_is_open(stubbed: Any) -> None:
    # as Copilot hides its suggestion during completion: the menu's keys (<Tab> among them) are the menu's, and
    # a suggestion accepted under it was glued to the menu's item with the menu still open
    stubbed.input("<Esc>")
    stubbed.current.buffer[:] = ["counter = 1", "country = 2", ""]
    stubbed.command("set completeopt=menu")
    stubbed.command("call cursor(3, 1)")
    stubbed.input("icou")
    assert _shown_once_answered(stubbed, "ghost")  # shown before the menu (the stand-in works)
    stubbed.input("<C-n>")  # the menu opens on "counter"
    assert _wait(lambda: stubbed.call("pumvisible") == 1, 5)
    assert _wait(lambda: stubbed.exec_lua(SUGGESTION) is None, 5)
    time.sleep(0.1)  # the pause (20 ms) is long over
    _answer_all(stubbed)  # any request answered: still nothing shown under the menu
    assert stubbed.exec_lua(SUGGESTION) is None
    assert stubbed.exec_lua(EXTMARK) == []
    stubbed.input("<Tab>")  # what <Tab> does without the plugin
    assert _wait(lambda: stubbed.current.buffer[2] != "counter", 5)
    assert stubbed.current.buffer[2] == "counter\t"


def test_no_ghost_text_with_paste_set(stubbed: Any) -> None:
    # 'paste' turns insert-mode mappings off: a suggestion could never be accepted, and it covered pasted text
    stubbed.input("<Esc>")
    stubbed.command("set paste")
    stubbed.command("call cursor(1, 1)")
    assert _nothing_shown_after(stubbed, "A y")
    stubbed.input("<Esc>")
    stubbed.command("set nopaste")
    stubbed.input("A z")  # without 'paste': asked and shown (the stand-in works)
    assert _shown_once_answered(stubbed, "ghost")


@pytest.mark.slow
def test_a_server_that_dies_is_told_once_and_typing_goes_on(nvim: Any, tmp_path: Path) -> None:
    # the server killed mid-session: one line of the plugin's says so and how to get it back (Neovim's own says
    # only "Client 1 quit"), no error follows any key, <Tab> is a plain <Tab>, and :edit starts it again
    import signal

    source = tmp_path / "calc.py"
    source.write_text("def f(values):\n    total = 0\n    return total\n")
    tests = str(Path(__file__).resolve().parent)
    cmd = ["env", f"PYTHONPATH={ROOT}{os.pathsep}{tests}", "INFILL_LSP_PLUGINS=fixtures_lsp:install"]
    nvim.exec_lua(
        "require('infill').setup({cmd = ..., settings = {model = 'scripted-lsp', threshold = 0}, debounce_ms = 10})",
        [*cmd, sys.executable, "-m", "infill", "lsp"],
    )
    nvim.command("filetype on")
    nvim.command(f"edit {source}")
    attached = (
        "local c = vim.lsp.get_client_by_id(require('infill').state.client_id or -1) return c ~= nil and c.initialized"
    )
    assert _wait(lambda: nvim.exec_lua(attached)), "the language server did not start"
    pid = nvim.exec_lua("return vim.lsp.get_client_by_id(require('infill').state.client_id).rpc.pid")
    nvim.command("call cursor(2, 1)")
    nvim.input("A")
    os.kill(pid, signal.SIGKILL)
    assert _wait(lambda: not nvim.exec_lua(attached), 30)
    for key in ["<CR>", *"x = 1", "<CR>", *"y = 2"]:
        nvim.input(key)
        time.sleep(0.03)  # a key, then a pause longer than the plugin's: each one a request, were there a server
    nvim.input("<Tab>")
    assert _wait(lambda: nvim.current.buffer[3] == "    y = 2\t", 5), nvim.current.buffer[:]
    assert nvim.current.buffer[:] == ["def f(values):", "    total = 0", "    x = 1", "    y = 2\t", "    return total"]
    assert nvim.api.get_mode()["mode"] == "i"
    messages = nvim.api.exec("messages", True)
    assert messages.count("infill: the language server stopped (signal 9)") == 1, messages
    assert "E5108" not in messages and "Error" not in messages and nvim.api.get_vvar("errmsg") == "", messages
    nvim.input("<Esc>")
    nvim.command("write")
    nvim.command("edit")  # the way back the message gives
    assert _wait(lambda: nvim.exec_lua(attached)), "the language server did not start again"


def test_an_accepted_suggestion_is_part_of_the_insert_for_undo_and_repeat(plugin: Any) -> None:
    # as with Copilot: the accepted text is typed into the insert, so `.` repeats it (it repeated only what was
    # typed around it) and one `u` takes the insert away, accepted text included
    plugin.input("<Esc>")
    plugin.current.buffer[:] = ["a", "b", "c"]
    plugin.command("call cursor(1, 1)")
    plugin.input("A = ")
    assert _wait(lambda: plugin.current.buffer[0] == "a = ", 5)
    _show(plugin, "f(1)")
    plugin.input("<Tab>")
    assert _wait(lambda: plugin.current.buffer[0] == "a = f(1)", 5)
    plugin.input(" + 2<Esc>")
    assert _wait(lambda: plugin.api.get_mode()["mode"] == "n", 5)
    plugin.input("j.")
    assert _wait(lambda: plugin.current.buffer[1] != "b", 5)
    assert plugin.current.buffer[:] == ["a = f(1) + 2", "b = f(1) + 2", "c"]
    plugin.input("u")
    assert _wait(lambda: plugin.current.buffer[1] == "b", 5)
    plugin.input("u")
    assert _wait(lambda: plugin.current.buffer[0] == "a", 5)
    assert plugin.current.buffer[:] == ["a", "b", "c"]


def test_keys_typed_right_after_an_accept_go_after_the_accepted_text(plugin: Any) -> None:
    # a fast typist's next keys are already waiting when <Tab> is handled: they come after what it accepts
    _show(plugin, "f(1)")
    plugin.input("<Tab> + 2")
    assert _wait(lambda: plugin.current.buffer[0] == "name = f(1) + 2", 5), plugin.current.buffer[0]


def test_keys_typed_right_after_a_plain_tab_go_after_it(plugin: Any) -> None:
    # no suggestion: <Tab> is a plain <Tab>, in its place among the keys typed (it came after those typed next)
    plugin.input("<Tab>x")
    assert _wait(lambda: plugin.current.buffer[0] != "name = ", 5)
    assert _wait(lambda: plugin.current.buffer[0] == "name = \tx", 5), plugin.current.buffer[0]


def test_entering_insert_mode_asks_for_a_suggestion(stubbed: Any) -> None:
    # as Copilot: `A` (or i, o, cc...) and a pause ask, whatever was done before; Neovim's TextChangedI comes on
    # entering insert mode only when the buffer changed in normal mode since the last insert
    stubbed.input("<Esc>")
    assert _wait(lambda: stubbed.api.get_mode()["mode"] == "n", 5)
    for keys in ["A", "<Esc>", "A", "<Esc>"]:  # no change in normal mode between these inserts
        stubbed.input(keys)
        time.sleep(0.1)  # the pause (20 ms) is long over
    asked = stubbed.exec_lua("return _G.sent")
    stubbed.input("A")
    assert _wait(lambda: stubbed.exec_lua("return _G.sent") > asked, 5)
    assert _shown_once_answered(stubbed, "ghost")


def test_no_suggestion_while_a_macro_is_recorded_so_its_replay_does_the_same(stubbed: Any) -> None:
    # a register records the keys typed: a suggestion taken with <Tab> while recording was replayed as a plain
    # <Tab> (the accepted text is not among the keys), so the replay did something else than the recording
    stubbed.input("<Esc>")
    stubbed.current.buffer[:] = ["a = ", "b = "]
    stubbed.command("call cursor(1, 1)")
    stubbed.exec_lua("_G.reply = {insertText = 'f(1)'}")
    assert _nothing_shown_after(stubbed, "qaAx")
    stubbed.input("<Tab><Esc>q")
    assert _wait(lambda: stubbed.current.buffer[0] == "a = x\t", 5), stubbed.current.buffer[0]
    stubbed.input("j@a")
    assert _wait(lambda: stubbed.current.buffer[1] != "b = ", 5)
    assert stubbed.current.buffer[:] == ["a = x\t", "b = x\t"]


@pytest.mark.parametrize(
    ("mapping", "typed"),
    [
        ("inoremap <Tab> <C-r>='[jump]'<CR>", "name = [jump]"),  # a plain mapping
        ("inoremap <expr> <Tab> col('.') > 3 ? '[far]' : '[near]'", "name = [far]"),  # an expression
        (
            "lua vim.keymap.set('i', '<Tab>', function() vim.api.nvim_put({'[lua]'}, 'c', false, true) end)",
            "name = [lua]",
        ),
        ("imap <Tab> <Plug>(jump)|inoremap <Plug>(jump) [plug]", "name = [plug]"),  # mapped again
    ],
)
def test_the_users_own_tab_mapping_works_when_there_is_no_suggestion(nvim: Any, mapping: str, typed: str) -> None:
    # the plugin's <Tab> took the place of the user's own (a snippet jump, a menu key): with no suggestion it
    # typed a plain tab instead of doing what the user's mapping does (copilot.vim falls back to it too)
    nvim.command(mapping)
    nvim.exec_lua("require('infill').setup({filetypes = {}})")
    nvim.exec_lua("require('infill').setup({filetypes = {}})")  # a second setup keeps the user's mapping
    nvim.current.buffer[:] = ["name = "]
    nvim.command("call cursor(1, 1)")
    nvim.input("A<Tab>")
    assert _wait(lambda: nvim.current.buffer[0] != "name = ", 5)
    assert _wait(lambda: nvim.current.buffer[0] == typed, 5), nvim.current.buffer[0]
    _show(nvim, "f(1)")  # a suggestion shown: <Tab> accepts it
    nvim.input("<Tab>")
    assert _wait(lambda: nvim.current.buffer[0] == typed + "f(1)", 5), nvim.current.buffer[0]


def test_no_request_once_the_filetype_is_one_the_plugin_is_not_set_up_for(stubbed: Any) -> None:
    # a buffer attached as Python and then set to another filetype (:set ft=markdown) went on asking
    stubbed.input("<Esc>")
    stubbed.command("setlocal filetype=markdown")
    time.sleep(0.1)
    asked = stubbed.exec_lua("return _G.sent")
    assert _nothing_shown_after(stubbed, "A more words")
    assert stubbed.exec_lua("return _G.sent") == asked
    stubbed.input("<Esc>")
    stubbed.command("noautocmd setlocal filetype=stub")
    stubbed.input("A and")  # its filetype back: asked and shown (the stand-in works)
    assert _shown_once_answered(stubbed, "ghost")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8"])
def test_wide_characters_before_the_cursor_in_each_position_encoding(stubbed: Any, encoding: str) -> None:
    # é (2 bytes, 1 UTF-16 unit), 中 (3 bytes, 1 unit), 😀 (4 bytes, 2 units): the request points at the cursor and
    # an answer that heals the word being typed (its range starts before the cursor) lands in its column
    stubbed.input("<Esc>")
    stubbed.exec_lua(f"vim.lsp.get_client_by_id(1).offset_encoding = '{encoding}'")
    stubbed.exec_lua(
        "local c = vim.lsp.get_client_by_id(1) local request = c.request "
        "c.request = function(method, params, ...) _G.position = params.position "
        "return request(method, params, ...) end"
    )
    before = 's = "é中😀" + '
    stubbed.current.buffer[:] = [before + "na"]

    def units(text: str) -> int:
        return {"utf-8": len(text.encode()), "utf-16": len(text.encode("utf-16-le")) // 2}.get(encoding, len(text))

    start, cursor = units(before), units(before + "na")
    stubbed.exec_lua(
        "_G.reply = {insertText = 'name', range = {start = {line = 0, character = ...}, "
        "['end'] = {line = 0, character = select(2, ...)}}}",
        start,
        cursor,
    )
    stubbed.command("call cursor(1, 1)")
    stubbed.input("A")
    assert _shown_once_answered(stubbed, "me")
    assert stubbed.exec_lua("return _G.position") == {"line": 0, "character": cursor}
    stubbed.input("<Tab>")
    assert _wait(lambda: stubbed.current.buffer[0] == before + "name", 5), stubbed.current.buffer[0]
    assert tuple(stubbed.current.window.cursor) == (1, len((before + "name").encode()))


def test_the_rest_of_a_word_accepted_right_before_esc_is_not_shown_later(stubbed: Any) -> None:
    # <M-Right><Esc> typed together: the rest of the suggestion was kept for the change that shows it, which never
    # came; entering insert mode again at that column (after a normal-mode change) showed it there, stale
    assert _shown_at_the_end_of(stubbed, "x = ", "foo(bar, baz)")
    stubbed.input("<M-Right><Esc>")
    assert _wait(lambda: stubbed.current.buffer[0] == "x = foo" and stubbed.api.get_mode()["mode"] == "n", 5)
    stubbed.input("rX")  # the buffer changes in normal mode; the cursor stays on the column
    assert _wait(lambda: stubbed.current.buffer[0] == "x = foX", 5)
    asked = stubbed.exec_lua("return _G.sent")
    stubbed.input("a")
    assert _wait(lambda: stubbed.exec_lua("return _G.sent") > asked, 5)  # a new request, not the old rest
    assert stubbed.exec_lua(SUGGESTION) is None


@pytest.mark.parametrize("fileformat", ["dos", "mac"])
def test_a_suggestion_with_the_files_own_line_breaks_is_accepted_as_lines(stubbed: Any, fileformat: str) -> None:
    # the server writes the document's own line breaks: "\r" alone with fileformat=mac went into the buffer as a
    # literal ^M (and <M-Down> took the whole suggestion as one line)
    stubbed.input("<Esc>")
    stubbed.command(f"set fileformat={fileformat}")
    brk = {"dos": "\r\n", "mac": "\r"}[fileformat]
    stubbed.current.buffer[:] = ["a = ", "b"]
    stubbed.exec_lua("_G.reply = {insertText = ...}", f"f({brk}    1,{brk})")
    stubbed.command("call cursor(1, 1)")
    stubbed.input("A")
    assert _wait(lambda: _nothing_shown_after(stubbed, "") is False, 5)
    stubbed.input("<M-Down>")
    assert _wait(lambda: stubbed.current.buffer[0] != "a = ", 5)
    assert stubbed.current.buffer[:] == ["a = f(", "b"]
    stubbed.input("<Tab>")
    assert _wait(lambda: len(stubbed.current.buffer) == 4, 5)
    assert stubbed.current.buffer[:] == ["a = f(", "    1,", ")", "b"]


def test_a_normal_command_run_while_a_suggestion_shows_does_not_accept_it(stubbed: Any) -> None:
    # another plugin's timer runs `:normal A<Tab>` while you are in insert mode with a suggestion on screen: its
    # <Tab> accepted the suggestion (no InsertLeave came before its `A`), where the command meant a <Tab>
    assert _shown_at_the_end_of(stubbed, "a = ", "f(1)")
    stubbed.exec_lua("vim.defer_fn(function() vim.cmd('exe \"normal 0A\\\\<Tab>\"') end, 1)")
    assert _wait(lambda: stubbed.current.buffer[0] != "a = ", 5)
    assert stubbed.current.buffer[:] == ["a = \t"]


def test_no_suggestion_in_a_buffer_that_cannot_be_changed(stubbed: Any) -> None:
    # 'nomodifiable' set while in insert mode (<C-o>:setlocal nomodifiable, or by another plugin): a suggestion
    # was shown and <Tab> failed with a Lua error and its stack trace
    stubbed.input("<Esc>")
    stubbed.current.buffer[:] = ["a = ", "b"]
    stubbed.exec_lua("_G.reply = {insertText = 'f(\\n  1)'}")
    stubbed.command("call cursor(1, 1)")
    stubbed.input("A<C-o>:setlocal nomodifiable<CR>")
    assert _wait(lambda: stubbed.api.get_mode()["mode"] == "i" and not stubbed.eval("&modifiable"), 5)
    assert _nothing_shown_after(stubbed, "x")  # (the x itself: E21, as without the plugin)
    stubbed.input("<Tab>")
    time.sleep(0.1)
    assert "E5108" not in stubbed.api.exec("messages", True)
    assert stubbed.current.buffer[:] == ["a = ", "b"]


def test_a_suggestion_accepted_in_replace_mode_is_inserted_not_written_over_the_text(plugin: Any) -> None:
    # <Insert> turns insert mode into Replace mode: an accept went in as typed keys, which in Replace mode write
    # over the text after the cursor. As copilot.vim, the suggestion shown stays and goes in as an insertion
    plugin.input("<Esc>")
    plugin.current.buffer[0] = "name = xyz"
    plugin.command("call cursor(1, 8)")
    plugin.input("i")
    assert _wait(lambda: plugin.api.get_mode()["mode"] == "i", 5)
    _show(plugin, "f(1)")
    plugin.input("<Insert>")
    assert _wait(lambda: plugin.api.get_mode()["mode"] == "R", 5)
    plugin.input("<Tab>")
    assert _wait(lambda: plugin.current.buffer[0] != "name = xyz", 5)
    assert plugin.current.buffer[0] == "name = f(1)xyz"
    plugin.input("ab")  # still Replace mode: what is typed next writes over the text as Replace mode does
    assert _wait(lambda: plugin.current.buffer[0] == "name = f(1)abz", 5), plugin.current.buffer[0]
    plugin.input("<Esc>")  # `.` repeats it (it was left at the expression register's prompt, in Replace mode)
    plugin.current.buffer.append("more = xyz")
    plugin.command("call cursor(3, 8)")
    plugin.input(".")
    assert _wait(lambda: plugin.current.buffer[2] == "more = f(1)abz", 5), plugin.current.buffer[:]
    assert plugin.api.get_mode()["mode"] == "n"


def _screen(nvim: Any, rows: range) -> list[str]:
    """The text of screen rows `rows` (1-based) as drawn (a UI must be attached)."""
    nvim.command("redraw")
    width = nvim.eval("&columns")
    return ["".join(nvim.funcs.screenstring(row, col) for col in range(1, width + 1)).rstrip() for row in rows]


def test_ghost_text_shows_only_in_the_window_with_the_cursor(stubbed: Any) -> None:
    # one buffer in two windows (:split): an extmark belongs to the buffer, so the suggestion was drawn in both,
    # next to a line the other window's cursor is not on; and after moving to the other window it stayed there
    stubbed.api.ui_attach(40, 12, {"ext_linegrid": True})
    stubbed.input("<Esc>")
    stubbed.current.buffer[:] = ["a = ", "b = 2"]
    stubbed.command("call cursor(1, 1)")
    stubbed.command("split")  # the window above (rows 1-5) has the cursor; the one below starts at row 7
    stubbed.exec_lua("_G.reply = {insertText = 'f(1)'}")
    stubbed.input("A")
    assert _shown_once_answered(stubbed, "f(1)")
    assert _screen(stubbed, range(1, 3)) == ["a = f(1)", "b = 2"]
    assert _screen(stubbed, range(7, 9)) == ["a =", "b = 2"]
    # a click in the other window (insert mode goes on there), its cursor at the same place: not its suggestion,
    # and taken away from the window left
    stubbed.api.set_current_win(stubbed.windows[1])
    assert stubbed.api.get_mode()["mode"] == "i"
    assert stubbed.exec_lua(SUGGESTION) is None
    assert _screen(stubbed, range(1, 3)) == ["a =", "b = 2"]


OLD_NVIM_BLOCK = "g(1,\n  2,\n  3)"


def _block_shown(nvim: Any) -> bool:
    """Whether `A` on line 1 of ["a = ", "b = 2"] and a pause show the stand-in's block OLD_NVIM_BLOCK."""
    nvim.input("<Esc>")
    nvim.current.buffer[:] = ["a = ", "b = 2"]
    nvim.exec_lua("_G.reply = {insertText = ...}", OLD_NVIM_BLOCK)
    nvim.command("call cursor(1, 1)")
    nvim.input("A")
    return _shown_once_answered(nvim, OLD_NVIM_BLOCK)


def test_a_block_suggestion_shows_in_the_cursors_window_only(stubbed: Any) -> None:
    # Neovim before 0.10 draws virtual lines in every window of their buffer (they cannot be drawn for one window
    # only): a suggestion's lines after the first showed in a split of the same buffer too, between lines of that
    # window where its user's cursor is not. There the first line shows with a hint of the rest, in one window
    # (80 columns: in a screen 36 to 49 columns wide an <Esc> right after an accept stops at a hit-enter prompt)
    stubbed.api.ui_attach(80, 12, {"ext_linegrid": True})
    new = stubbed.call("has", "nvim-0.10")
    assert _block_shown(stubbed)  # one window: the whole block
    assert _screen(stubbed, range(1, 5)) == ["a = g(1,", "  2,", "  3)", "b = 2"]
    stubbed.input("<Esc>")
    stubbed.command("split")  # the window above (rows 1-5) has the cursor; the one below starts at row 7
    assert _block_shown(stubbed)
    if not new:
        assert _screen(stubbed, range(1, 3)) == ["a = g(1, … +2 lines", "b = 2"]
        assert _screen(stubbed, range(7, 10)) == ["a =", "b = 2", "~"]
    stubbed.input("<Tab>")  # the whole block goes in, as part of the insert (`.` repeats it, `u` undoes it)
    accepted = ["a = g(1,", "  2,", "  3)", "b = 2"]
    assert _wait(lambda: stubbed.current.buffer[:] == accepted, 5), stubbed.current.buffer[:]
    stubbed.input("<Esc>")
    assert _wait(lambda: stubbed.api.get_mode()["mode"] == "n", 5)
    stubbed.command("call cursor(4, 1)")
    stubbed.input(".")
    repeated = [*accepted[:3], "b = 2g(1,", "  2,", "  3)"]
    assert _wait(lambda: stubbed.current.buffer[:] == repeated, 5), stubbed.current.buffer[:]
    stubbed.input("u")
    assert _wait(lambda: stubbed.current.buffer[:] == accepted, 5), stubbed.current.buffer[:]


def test_a_block_suggestion_follows_windows_of_its_buffer_opened_or_closed_while_it_shows(stubbed: Any) -> None:
    # a window that shows the buffer, opened by a plugin without autocommands (or a float opened without entering
    # it): no WinLeave says so, and the block was drawn there; the suggestion is shown again as beside any other
    # window of the buffer
    stubbed.api.ui_attach(40, 12, {"ext_linegrid": True})
    assert _block_shown(stubbed)
    stubbed.exec_lua("vim.cmd('noautocmd belowright split') vim.cmd('noautocmd wincmd p')")  # rows 7-11, below
    assert stubbed.api.get_mode()["mode"] == "i"

    def without_the_block() -> list[str] | None:
        rows = _screen(stubbed, range(1, 12))
        return None if {"  2,", "  3)"} & set(rows) else rows

    if not stubbed.call("has", "nvim-0.10"):  # (0.10 draws the lines below the first in each window: as before)
        screen = _wait(without_the_block, 5)
        assert screen and screen[:2] == ["a = g(1, … +2 lines", "b = 2"] and screen.count("a =") == 1, screen
    assert stubbed.exec_lua(SUGGESTION) == OLD_NVIM_BLOCK
    stubbed.api.win_close(stubbed.windows[1], True)  # the other window closed (by a plugin): the whole block again
    whole = ["a = g(1,", "  2,", "  3)", "b = 2"]
    assert _wait(lambda: _screen(stubbed, range(1, 5)) == whole, 5), _screen(stubbed, range(1, 5))
    stubbed.input("<Tab>")
    assert _wait(lambda: stubbed.current.buffer[:] == whole, 5), stubbed.current.buffer[:]


def test_a_long_line_beside_another_window_of_its_buffer_ends_with_a_hint_in_view(stubbed: Any) -> None:
    # the rest of a line that wraps is a virtual line too: beside another window of the buffer the first row is
    # cut where the hint still fits in the window
    stubbed.api.ui_attach(40, 12, {"ext_linegrid": True})
    stubbed.command("split")
    line, text = "a = " + "b" * 30, " + some_long_function_name(argument_one)"
    assert _shown_at_the_end_of(stubbed, line, text)
    if not stubbed.call("has", "nvim-0.10"):
        assert _screen(stubbed, range(1, 3)) == [line + text[:4] + " …", "~"]
        assert _screen(stubbed, range(7, 9)) == [line, "~"]
    stubbed.input("<Tab>")
    assert _wait(lambda: stubbed.current.buffer[0] == line + text, 5), stubbed.current.buffer[0]


@pytest.mark.parametrize(
    ("options", "lines", "text"),
    [
        ("autoindent", ["def f():", "    a = ", "    b = "], "g(1,\n        2)"),  # not indented twice
        ("autoindent formatoptions+=r comments=:#", ["# a", "# b", ""], "bc\n# de"),  # no second leader
        ("autoindent formatoptions+=r comments=:#", ["# a", "b", "# c"], "\n# de"),  # a leader only there
        ("autoindent", ["    a = ", "    b = "], "f()\n"),  # ends with a line break
    ],
)
def test_a_multi_line_suggestion_is_part_of_the_insert_for_repeat_and_undo(
    plugin: Any, options: str, lines: list[str], text: str
) -> None:
    # a suggestion of several lines was put in the buffer beside the insert: `.` repeated only what was typed around
    # it. Now it is typed into the insert as its lines say (Neovim's own indentation or comment leader on each new
    # line taken away), so `.` repeats it and one `u` takes the repeat away
    plugin.input("<Esc>")
    plugin.command(f"set {options}")
    plugin.current.buffer[:] = lines
    row = len(lines) - 2
    plugin.command(f"call cursor({row + 1}, 1)")
    plugin.input("A")
    assert _wait(lambda: plugin.api.get_mode()["mode"] == "i", 5)
    _show(plugin, text)
    plugin.input("<Tab><Esc>")
    accepted = text.split("\n")
    expected = [*lines[:row], lines[row] + accepted[0], *accepted[1:], lines[row + 1]]
    assert _wait(lambda: plugin.current.buffer[:] == expected, 5), plugin.current.buffer[:]
    plugin.command(f"call cursor({len(expected)}, 1)")
    plugin.input(".")  # on the last line: the same lines after it
    repeated = [*expected[:-1], lines[row + 1] + accepted[0], *accepted[1:]]
    assert _wait(lambda: plugin.current.buffer[:] == repeated, 5), plugin.current.buffer[:]
    plugin.input("u")
    assert _wait(lambda: plugin.current.buffer[:] == expected, 5), plugin.current.buffer[:]


def test_a_suggestion_longer_than_textwidth_goes_in_as_shown(plugin: Any) -> None:
    # 'textwidth' broke an accepted line of code where the width ends, as it does text typed (copilot.vim's accept
    # puts it in as shown); the width is back for what is typed next
    plugin.command("setlocal textwidth=20")
    _show(plugin, "first_name + second_name + third")
    plugin.input("<Tab><Esc>")
    assert _wait(lambda: plugin.api.get_mode()["mode"] == "n", 5)
    assert plugin.current.buffer[:] == ["name = first_name + second_name + third", "other = 2"]
    assert plugin.eval("&textwidth") == 20


def test_no_suggestion_with_the_cursor_past_the_end_of_the_line(stubbed: Any) -> None:
    # 'virtualedit' lets the cursor stand past the end of the line: the suggestion was asked for and shown at the
    # end of the text, and <Tab> put it at the cursor after a run of blanks Neovim filled in
    stubbed.input("<Esc>")
    stubbed.command("set virtualedit=all")
    stubbed.command("call cursor(1, 1)")
    assert _nothing_shown_after(stubbed, "12|i")
    stubbed.input("<Tab>")  # a plain <Tab> there
    assert _wait(lambda: stubbed.current.buffer[0] != "x = 1", 5)
    assert stubbed.current.buffer[0] == "x = 1      \t"
    assert _shown_once_answered(stubbed, "ghost")  # typed there, the cursor is at the end of the text: asked


def test_a_multi_line_suggestion_above_a_closed_fold_leaves_the_fold_on_screen(stubbed: Any) -> None:
    # Neovim 0.7 draws virtual lines below a line that a closed fold follows as one blank line in place of the
    # fold's: the suggestion's lines after the first were not shown and the fold's line vanished
    stubbed.api.ui_attach(40, 8, {"ext_linegrid": True})
    stubbed.input("<Esc>")
    stubbed.current.buffer[:] = ["a = ", "def f():", "    return 1", "b"]
    stubbed.command("2,3fold")
    stubbed.exec_lua("_G.reply = {insertText = 'g(1,\\n  2)'}")
    stubbed.command("call cursor(1, 1)")
    stubbed.input("A")
    expected = "g(1,\n  2)" if stubbed.call("has", "nvim-0.10") else "g(1,"
    assert _shown_once_answered(stubbed, expected)
    screen = [row for row in _screen(stubbed, range(1, 6)) if row != "~"]
    assert screen[-2].startswith("+--  2 lines: def f():") and screen[-1] == "b", screen
    assert screen[:-2] == ["a = g(1,", *(["  2)"] if "\n" in expected else [])], screen
    stubbed.input("<Tab>")
    assert _wait(lambda: stubbed.current.buffer[0] != "a = ", 5)
    assert stubbed.current.buffer[:] == ["a = " + expected, "def f():", "    return 1", "b"]


def test_a_suggestion_past_the_windows_edge_goes_on_below_as_wrapped_text(stubbed: Any) -> None:
    # Neovim before 0.10 does not wrap virtual text: the end of a suggestion past the window's edge was cut off,
    # though <Tab> put all of it in; with 'wrap' it goes on on the row below, as the line will once accepted
    stubbed.api.ui_attach(40, 8, {"ext_linegrid": True})
    line, text = "a = " + "b" * 30, " + some_long_function_name(argument_one)"
    assert _shown_at_the_end_of(stubbed, line, text)
    assert _screen(stubbed, range(1, 3)) == [line + text[:6], text[6:]]
    stubbed.input("<Tab>")
    assert _wait(lambda: stubbed.current.buffer[0] == line + text, 5), stubbed.current.buffer[0]


# --- Neovim's own LSP client (no plugin): the code actions ---------------------------------------------------------

NVIM_CLIENT = r"""
local cmd, env, path = ...
vim.cmd("edit " .. path)
_G.infill_test = {answered = {}, progress = {}}
local handlers = vim.lsp.handlers
for _, method in ipairs({"workspace/executeCommand", "$/progress", "window/showMessage"}) do
  local builtin = handlers[method]
  handlers[method] = function(err, result, ctx, config)
    table.insert(_G.infill_test.answered, {method = method, err = err, result = result})
    return builtin(err, result, ctx, config)
  end
end
vim.ui.select = function(items, opts, on_choice)  -- picks the action named in _G.infill_test.wanted
  for index, item in ipairs(items) do
    if opts.format_item(item) == _G.infill_test.wanted then return on_choice(item, index) end
  end
  on_choice(nil, nil)
end
local id = vim.lsp.start_client({
  name = "infill", cmd = cmd, cmd_env = env, root_dir = vim.fn.fnamemodify(path, ":h"),
  init_options = {threshold = 0, model = "gated-lsp", fill = {decoder = "sequential"}},
})
vim.lsp.buf_attach_client(0, id)
_G.infill_test.id = id
"""


@pytest.mark.slow
def test_neovims_own_client_applies_both_code_actions(nvim: Any, tmp_path: Path) -> None:
    """Neovim 0.7's built-in client (vim.lsp.buf.range_code_action and code_action, an action picked through
    vim.ui.select): the command is answered while the fill waits on its first forward pass, the fill shows as
    work-done progress (begin, then end), and Neovim's own workspace/applyEdit handler applies the edit that
    follows; the server's copy of the document is the buffer after both."""
    from fixtures_lsp import release, started

    source = tmp_path / "stats.py"
    source.write_text("def mean(values):\n    total = 0\n    return total / len(values)\n")
    gate = tmp_path / "gate"
    gate.mkdir()
    tests = str(Path(__file__).resolve().parent)
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{tests}", "INFILL_LSP_PLUGINS": "fixtures_lsp:install"}
    env["INFILL_TEST_GATE"] = str(gate)
    nvim.exec_lua(NVIM_CLIENT, [sys.executable, "-m", "infill", "lsp"], env, str(source))
    client = "vim.lsp.get_client_by_id(_G.infill_test.id)"
    assert _wait(lambda: nvim.exec_lua(f"local c = {client} return c ~= nil and c.initialized")), "no server"

    def answered(method: str) -> list[Any]:
        seen = nvim.exec_lua("return _G.infill_test.answered")
        return [a for a in seen if a["method"] == method]

    nvim.exec_lua("_G.infill_test.wanted = 'Fill selection with infill'")
    nvim.exec_lua("vim.lsp.buf.range_code_action(nil, {2, 4}, {2, 12})")  # `total = 0`
    assert _wait(lambda: started(gate) == 1), "the fill did not start"
    assert _wait(lambda: answered("workspace/executeCommand"))[0].get("err") is None  # while pass 1 waits
    begin = _wait(lambda: answered("$/progress"))[0]["result"]["value"]
    assert begin == {"kind": "begin", "title": "infill: fill selection", "cancellable": True}
    for number in range(1, 400):
        release(gate, number)
    assert _wait(lambda: nvim.current.buffer[1].startswith("    x = 123")), nvim.current.buffer[:]
    assert [a["result"]["value"]["kind"] for a in answered("$/progress")] == ["begin", "end"]

    nvim.command("call cursor(1, 1)")
    nvim.exec_lua("_G.infill_test.wanted = 'Add docstring to mean (infill)'")
    nvim.exec_lua("vim.lsp.buf.code_action()")
    assert _wait(lambda: nvim.current.buffer[1].startswith('    """')), nvim.current.buffer[:]
    assert len(answered("workspace/executeCommand")) == 2 and answered("window/showMessage") == []
    text = "\n".join(nvim.current.buffer[:]) + "\n"
    uri = source.as_uri()
    # the buffer's number, not 0: Neovim 0.7 sends a debounced didChange before a request only for a buffer
    # it knows by number (its changetracking has no buffer 0), and the edit's didChange waits 150 ms when the
    # last one went out less than that before (a quick docstring fill)
    ask = f"return {client}.request_sync('test/document', {{uri = ...}}, 10000, vim.api.nvim_get_current_buf())"
    copy = nvim.exec_lua(ask + ".result", uri)
    assert copy["text"] == text


@pytest.mark.parametrize("columns", [40, 80])
def test_an_accept_on_a_narrow_screen_leaves_no_prompt(plugin: Any, columns: int) -> None:
    """On a screen 36-49 columns wide, the expressions an accept types (the expression register's command line)
    beside 'showcmd''s column overflowed the one-line command area: the <Esc> after <Tab> stopped at a "Press
    ENTER" prompt. 'showcmd' is off while the accept's keys go in, and back after."""
    plugin.api.ui_attach(columns, 12, {"ext_linegrid": True})
    assert plugin.eval("&showcmd") == 1
    _show(plugin, "g(1)")
    plugin.input("<Tab>")
    assert _wait(lambda: plugin.current.buffer[0] == "name = g(1)", 5)
    plugin.input("<Esc>")
    assert _wait(lambda: plugin.api.get_mode() == {"mode": "n", "blocking": False}, 5), plugin.api.get_mode()
    assert plugin.eval("&showcmd") == 1
