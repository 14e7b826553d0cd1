"""What the docs show exists: every `infill ...` flag they use is an option of that command and every command line
of a code block parses, every relative link, #anchor and repository path resolves, the server protocol sample has
the shape the server answers with, and the tables and samples a user copies (the server's methods and error codes,
the LSP settings, the docstrings configuration, the Neovim plugin's setup, the environment variables) are the
code's."""

from __future__ import annotations

import functools
import json
import re
import shlex
import typing
from pathlib import Path
from typing import Any

import click
import pytest

from infill.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "infill" / "weights").glob("*/README.md")),
]


def logical_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) with shell continuations (a trailing backslash) joined into one line."""
    raw = path.read_text(encoding="utf-8").splitlines()
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(raw):
        start, line = i + 1, raw[i]
        while line.rstrip().endswith("\\") and i + 1 < len(raw):
            i += 1
            line = line.rstrip()[:-1] + " " + raw[i].strip()
        out.append((start, line))
        i += 1
    return out


def resolve(words: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The (sub)command `infill WORDS` names, its path and the words after it."""
    ctx = click.Context(main)
    command: click.Command = main
    path = ["infill"]
    rest = list(words)
    while isinstance(command, click.Group) and rest:
        if rest[0].startswith("-"):  # a group option, such as --threads N
            rest.pop(0)
            continue
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            break
        command, path = sub, [*path, rest.pop(0)]
    return command, path, rest


def option_names(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        names.update(param.opts)
        names.update(param.secondary_opts)
    return names


def shown_commands() -> list[tuple[str, list[str], list[str], click.Command]]:
    """(where, command path, its words, the command) of each `infill SUBCOMMAND ...` in the docs, code and prose.
    Words after a `$(` or `#` belong to another command or a comment and are cut off."""
    found = []
    for doc in DOCS:
        for number, line in logical_lines(doc):
            for m in re.finditer(r"(?:^|[\s`(|;&])infill\s+([a-z][^`|;&#)]*)", line):
                text = m.group(1).split("$(")[0]
                try:
                    words = shlex.split(text)
                except ValueError:
                    words = text.split()
                command, path, rest = resolve(words)
                if len(path) > 1:
                    found.append((f"{doc.relative_to(ROOT)}:{number}", path, rest, command))
    return found


def test_the_docs_show_commands() -> None:
    paths = {" ".join(path) for _, path, _, _ in shown_commands()}
    assert {"infill fill", "infill docstrings", "infill train asarm", "infill eval heldout-exact"} <= paths


def test_every_flag_the_docs_show_is_an_option_of_its_command() -> None:
    unknown = []
    for where, path, rest, command in shown_commands():
        known = option_names(command) | option_names(main)
        for word in rest:
            flag = word.split("=")[0]
            if flag.startswith("-") and flag != "-" and not re.fullmatch(r"-\d.*", flag) and flag not in known:
                unknown.append(f"{where}: {' '.join(path)} {flag}")
    assert not unknown, unknown


def test_every_choice_the_docs_give_a_flag_is_one_of_its_choices() -> None:
    """`--decoder s2d2`, `--engine onnx`, `--style numpy`: a value shown for a flag with fixed choices is one of them
    (placeholders are skipped: capitals such as RULE, and contributing.md's `mydecoder` / `mydraft`)."""
    wrong = []
    checked = 0
    for where, path, rest, command in shown_commands():
        choices = {
            opt: param.type.choices
            for param in command.params
            if isinstance(param.type, click.Choice)
            for opt in param.opts
        }
        for flag, value in zip(rest, rest[1:], strict=False):
            if flag in choices and not value.startswith(("-", "my")) and not value.isupper():
                checked += 1
                if value not in choices[flag]:
                    wrong.append(f"{where}: {' '.join(path)} {flag} {value}")
    assert checked >= 20
    assert not wrong, wrong


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#+\s+(.*)", line)):
            s = slug(m.group(1))
            seen[s] = seen.get(s, -1) + 1
            found.add(s if seen[s] == 0 else f"{s}-{seen[s]}")
    return found


def test_slug_is_githubs() -> None:
    assert slug("Protocol (`infill serve --stdio`, `infill serve --socket PATH`)") == (
        "protocol-infill-serve---stdio-infill-serve---socket-path"
    )


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for doc in [*DOCS, *sorted((ROOT / "editors").glob("**/*.md"))]:
        text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (doc.parent / file).resolve() if file else doc
            if not linked.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def shape(value: Any) -> Any:
    """The keys of a JSON value, recursively; leaves become their JSON type (null stays apart from a number)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    if value is None or isinstance(value, bool):
        return value
    return type(value).__name__.replace("int", "float")


def test_the_server_sample_has_the_servers_shapes() -> None:
    """docs/server.md: "the shapes are exact"; an error is exactly what the server answers."""
    from infill.server.dispatch import Dispatcher

    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    sample = text[text.index("## Protocol") :].split("```text\n")[1].split("```")[0].splitlines()
    requests = [line[3:] for line in sample if line.startswith("-> ")]
    shown = [json.loads(line[3:]) for line in sample if line.startswith("<- ")]
    assert len(requests) == len(shown) == 2
    server = Dispatcher()
    for request, expected in zip(requests, shown, strict=True):
        answer = json.loads(server.handle_line(request.encode()))
        if "error" in expected:
            assert answer == expected
        else:
            assert shape(answer) == shape(expected), (answer, expected)


@pytest.mark.parametrize("value", [{"a": 1, "b": [{"c": None}]}, [1.5], "x"])
def test_shape_keeps_keys(value: Any) -> None:
    assert shape(value) == shape(json.loads(json.dumps(value)))
    assert shape({"a": 1}) != shape({"a": 1, "b": None})


def all_commands() -> list[tuple[str, click.Command]]:
    """Every command and subcommand of `infill`, with its name."""
    found: list[tuple[str, click.Command]] = []
    pending: list[tuple[str, click.Command]] = [("infill", main)]
    while pending:
        name, command = pending.pop()
        found.append((name, command))
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for sub in command.list_commands(ctx):
                pending.append((f"{name} {sub}", command.get_command(ctx, sub)))  # type: ignore[arg-type]
    return found


def test_the_help_names_pages_that_exist_and_no_readme_section() -> None:
    """A help text points to a docs page that exists; the README is short and has no Neovim or VS Code set-up."""
    from click.testing import CliRunner

    pointers = []
    for name, _ in all_commands():
        text = CliRunner().invoke(main, [*name.split()[1:], "--help"]).output
        pointers += [(name, page) for page in re.findall(r"docs/[\w-]+\.md", text)]
        assert "see the README" not in text, name
    assert ("infill serve", "docs/server.md") in pointers
    assert all((ROOT / page).exists() for _, page in pointers), pointers


# --- docs/architecture.md: the names a newcomer follows exist --------------------------------------------------

CODE_DIRS = ("infill", "tests", "benchmarks")
# names the doc uses that are not the project's but typing's
TYPING_NAMES = ("TYPE_CHECKING", "Callable")
# `A`, `B` and `C` in `path.py` (also "of", and "/" or "or" between names)
NAMED_IN = re.compile(r"((?:`[\w.]+`(?:, | and | / | or ))*`[\w.]+`),? (?:in|of) `([\w/.]+\.py)`")


# what a line of Python defines or sets, read as text (ast.parse of the whole project takes seconds): a function or
# class, an assigned or annotated name or attribute, a keyword argument or parameter default, an import, a string
DEFINES = re.compile(
    r"\b(?:def|class)\s+(\w+)"
    r"|^[ \t]*(?:\w+\.)*(\w+)[ \t]*(?::[^\n=]*)?=(?!=)"
    r"|^[ \t]*(\w+)[ \t]*:[ \t]*[\w\"']"
    r"|[(,][ \t]*(\w+)[ \t]*[:=]"
    r"|\b(\w+)=(?!=)"
    r"|\bimport[ \t]+(\w+)|\bas[ \t]+(\w+)"
    r"|[\"'](\w[\w.-]*)[\"']",
    re.M,
)


def defined_names(source: str) -> set[str]:
    """What a module defines or sets (DEFINES), and the classes and functions of the source a test writes out."""
    return {name for match in DEFINES.findall(source) for name in match if name}


@functools.cache
def defined_in(file: str) -> set[str]:
    """The names a Python file of the project (relative path) defines or sets; empty for any other file."""
    return defined_names((ROOT / file).read_text(encoding="utf-8")) if file.endswith(".py") else set()


@functools.cache
def code_words() -> set[str]:
    """Every word of the project's Python code, and every dotted name it quotes (an entry-point group): what a
    name the doc gives without its file must be."""
    words: set[str] = set()
    for file in project_files():
        if file.endswith(".py") and file != "tests/test_docs_consistency.py":  # not this test's made-up names
            source = (ROOT / file).read_text(encoding="utf-8")
            words.update(re.findall(r"\w+", source), re.findall(r"[\"']([\w.]+)[\"']", source))
    return words


@functools.cache
def project_files() -> frozenset[str]:
    return frozenset(
        str(p.relative_to(ROOT)) for folder in (*CODE_DIRS, "docs", ".ci") for p in (ROOT / folder).rglob("*")
    )


def files_named(path: str) -> list[str]:
    """The project's files a doc means by `path`: itself, else those that end with it (`patch.py`,
    `commands/evaluate.py`), else none. `<kind>` stands for any kind and `*` for any name."""
    path = path.rstrip("/")
    if path in project_files():
        return [path]
    pattern = re.compile(rf"(?:.*/)?{re.escape(path)}".replace("<kind>", r"\w+").replace(r"\*", r"[^/]*"))
    return [p for p in project_files() if pattern.fullmatch(p)]


def module_has(parts: list[str]) -> bool:
    """Whether `infill.a.b.name` is a module of the project, or names defined in one (the longest module first)."""
    for cut in range(len(parts), 0, -1):
        base = "/".join(parts[:cut])
        for file in (f"{base}.py", f"{base}/__init__.py"):
            if (ROOT / file).is_file():
                return all(p in defined_in(file) for p in parts[cut:])
    return False


def unknown_names(text: str) -> list[str]:
    """The paths, `code names` and `name` in `file.py` claims of a doc that the code does not have."""
    everywhere = code_words()
    unknown = []
    paths = r"(?<![\w/.<-])((?:infill|tests|benchmarks|docs|\.ci)/[\w/*.<>-]*\w|[\w/]*\w\.py)\b"
    unknown += [f"no such file: {path}" for path in set(re.findall(paths, text)) if not files_named(path)]
    for code in set(re.findall(r"`([^`\n]+)`", text)):
        if "/" in code or re.search(r"\.(?:py|md|toml)$", code):
            continue  # a path (above), a protocol method, an HTTP path
        m = re.fullmatch(r"([A-Za-z_]\w*)((?:\.\w+)*)(?:\(.*\))?", code)
        if m is None:
            continue  # a flag, a command line, an expression
        parts = [m.group(1), *filter(None, m.group(2).split("."))]
        if parts[0] == "infill":  # a module and names in it, or the entry-point group infill.kinds
            if not (code in everywhere or module_has(parts)):
                unknown.append(f"no such module or name: {code}")
        elif parts[0] in TYPING_NAMES:
            if not hasattr(typing, code):
                unknown.append(f"not in typing: {code}")
        elif not all(p in everywhere or files_named(f"{p}.py") for p in parts):
            unknown.append(f"defined nowhere: {code}")
    for listed, path in NAMED_IN.findall(text):
        files = files_named(path)
        for name in re.findall(r"`([\w.]+)`", listed):
            if files and not any(all(p in defined_in(f) for p in name.split(".")) for f in files):
                unknown.append(f"not in {path}: {name}")
    return sorted(unknown)


def test_every_name_the_architecture_doc_gives_exists_where_it_says() -> None:
    """docs/architecture.md is a newcomer's map: every file it names exists, every `name` is defined in the code,
    and a `name` said to be in (or of) `file.py` is defined there."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert len(NAMED_IN.findall(text)) >= 30  # the claims are found at all
    assert unknown_names(text) == []


def test_a_made_up_name_in_the_architecture_doc_is_caught() -> None:
    made_up = (
        "`fill_text` in `infill/core/pipeline.py`, `fill_text` in `infill/core/plan.py`, `NoSuchThing`, "
        "`Pool.no_such_method`, infill/no_such_module.py, `infill.no_such_module`, `select` in `kinds/nowhere.py`, "
        "`infill.api.no_such_name`"
    )
    assert unknown_names(made_up) == [
        "defined nowhere: NoSuchThing",
        "defined nowhere: Pool.no_such_method",
        "no such file: infill/no_such_module.py",
        "no such file: kinds/nowhere.py",
        "no such module or name: infill.api.no_such_name",
        "no such module or name: infill.no_such_module",
        "not in infill/core/plan.py: fill_text",
    ]


# --- the command lines of the docs' code blocks parse ------------------------------------------------------------


def code_block_lines(path: Path) -> list[tuple[int, str]]:
    """The logical lines inside a doc's fenced code blocks (shell continuations joined)."""
    found = []
    in_code = False
    for number, line in logical_lines(path):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif in_code:
            found.append((number, line))
    return found


def shell_words(text: str) -> list[str]:
    """The words of the command a shell line starts with, as the shell splits them (quotes kept together): up to a
    pipe, a redirection, a closing parenthesis or a comment."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|;&<>()")
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if word and set(word) <= set("|;&<>()"):  # an operator ('' is an empty argument)
            break
        words.append(word)
    return words


def block_commands() -> list[tuple[str, list[str], list[str], click.Command]]:
    """(where, command path, its words, the command) of each `infill SUBCOMMAND ...` a code block runs. A line
    that elides its flags (`...`) or a YAML key (a pre-commit hook's `entry:`, whose files pre-commit gives) is left
    out, and so is an optional part written `[--flag value]`; words after a pipe, a redirection or a comment are
    another command's."""
    found = []
    for doc in DOCS:
        for number, line in code_block_lines(doc):
            if "..." in line or re.match(r"\s*(?:- )?\w+: ", line):  # elided, or a YAML key
                continue
            for m in re.finditer(r"(?:^|[\s(|;&!])infill\s+([a-z].*)", line):
                command, path, rest = resolve(shell_words(re.sub(r"\[[^\]]*\]", "", m.group(1))))
                if len(path) > 1:
                    found.append((f"{doc.relative_to(ROOT)}:{number}", path, rest, command))
    return found


def unparsed(commands: list[tuple[str, list[str], list[str], click.Command]]) -> list[str]:
    """Each command line Click refuses (a missing argument or required option, a value of the wrong type, an extra
    argument), with Click's reason. Paths are not looked up: the docs name files of the reader's."""
    refused = []
    for where, path, rest, command in commands:
        try:
            command.make_context(" ".join(path), list(rest))
        except click.exceptions.Exit:  # --help
            pass
        except click.ClickException as exc:
            refused.append(f"{where}: {' '.join([*path, *rest])}: {exc.format_message()}")
    return refused


def test_every_command_line_of_the_docs_code_blocks_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag that exists is not enough: `infill train asarm --corpus DIR` without its required --tokenizer, or
    `--tokens nine`, fails as the reader pastes it."""
    monkeypatch.setattr(click.Path, "convert", lambda self, value, param, ctx: value)
    monkeypatch.setattr(click.File, "convert", lambda self, value, param, ctx: value)
    commands = block_commands()
    assert len(commands) >= 100
    assert {"infill train asarm", "infill lsp", "infill fill", "infill eval calibrate"} <= {
        " ".join(path) for _, path, _, _ in commands
    }
    assert unparsed(commands) == []


def test_shell_words_splits_as_the_shell() -> None:
    line = "fill '' --marker '<FILL>' --until \"$(date -u)\" x.py < in.py | head -1  # a comment"
    assert shell_words(line) == ["fill", "", "--marker", "<FILL>", "--until", "$(date -u)", "x.py"]
    assert shell_words("serve --stdio) &") == ["serve", "--stdio"]


def test_a_command_line_the_cli_refuses_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(click.Path, "convert", lambda self, value, param, ctx: value)
    wrong = [
        ["train", "asarm", "--corpus", "runs/corpus"],
        ["fill", "x.py", "--span", "9", "--tokens", "nine"],
        ["models", "extra"],
    ]
    commands = [("doc:1", *resolve(words)) for words in wrong]
    refused = unparsed([(where, path, rest, command) for where, command, path, rest in commands])
    assert [line.split(": ", 2)[2].split("'")[0] for line in refused] == [
        "Missing option ",
        "Invalid value for ",
        "Got unexpected extra argument (extra)",
    ]


# --- docs/editors.md: the language server's settings table is the code's -------------------------------------------


def settings_rows(text: str) -> dict[str, tuple[str, str]]:
    """`setting` -> (its default cell, its meaning cell), from the table under "### Settings"."""
    table = text[text.index("### Settings") :].split("\n#")[0]
    return {
        m.group(1): (m.group(2).strip(), m.group(3).strip())
        for m in re.finditer(r"^\| `([\w.]+)` \|([^|]*)\|(.*)\|$", table, re.M)
    }


def literal(cell: str) -> Any:
    """What a default cell shows: a JSON value in backticks (`0.35`, `true`, `{}`), else the text in them."""
    text = cell.strip("`")
    try:
        return json.loads(text)
    except ValueError:
        return text


def test_the_lsp_settings_table_is_the_codes() -> None:
    """Every setting `infill lsp` takes is in the table and no other; a default shown as a value is the code's
    (and what the setting parses to); the ranges are the ones the server enforces."""
    from infill.lsp.fills import KEYS, MAX_LINES, MAX_TOKENS, Settings
    from infill.options import BY_NAME

    rows = settings_rows((ROOT / "docs" / "editors.md").read_text(encoding="utf-8"))
    assert {name for name in rows if "." not in name} == set(KEYS)
    assert all(name.split(".")[0] == "fill" and name.split(".")[1] in BY_NAME for name in rows if "." in name)
    default = Settings()
    code = {
        "model": default.model.name,
        "threshold": default.threshold,
        "fill": {},
        "fill.engine": default.model.engine,
        "fill.max_suffix": default.options.max_suffix,
        "lines": default.lines,
        "context": default.context,
        "prefetch": default.prefetch,
    }
    shown = {name: literal(cell) for name, (cell, _) in rows.items() if cell.startswith("`")}
    assert shown == code
    for name, value in shown.items():
        head, _, sub = name.partition(".")
        assert Settings.parse({"fill": {sub: value}} if sub else {head: value}) == default, name
    assert default.options.tokens is None and rows["tokens"][0] == "the length policy"
    assert default.decode.decoder == "beam" and rows["decoder"][0] == "beam search"
    assert f"1 to {MAX_TOKENS}" in rows["tokens"][1] and f"1 to {MAX_LINES}" in rows["lines"][1]


def test_a_settings_row_with_another_default_is_caught() -> None:
    text = "### Settings\n\n| setting | default | meaning |\n| --- | --- | --- |\n| `threshold` | `0.4` | x |\n"
    assert {name: literal(cell) for name, (cell, _) in settings_rows(text).items()} == {"threshold": 0.4}
    assert literal("`auto-int8`") == "auto-int8" and literal("`{}`") == {}


# --- environment variables: the docs name those the code reads ------------------------------------------------------

# read outside infill.environment: the model server's key (infill.models.remote_http), and the tests' switch that
# turns a missing extra from a skip into a failure (.ci/run)
OTHER_VARIABLES = {"INFILL_API_KEY", "INFILL_API_KEY_FILE", "INFILL_REQUIRE_EXTRAS"}


def named_variables(text: str) -> set[str]:
    """The INFILL_* variables a text names; `INFILL_DAEMON_*` stands for each declared one it matches."""
    import fnmatch

    from infill.environment import BY_NAME

    names = set()
    for name in re.findall(r"INFILL_[A-Z0-9_]*\*?", text):
        names |= set(fnmatch.filter(BY_NAME, name)) if name.endswith("*") else {name}
    return names


def test_the_docs_name_the_environment_variables_the_code_reads() -> None:
    """Each variable the docs name is read (a declared one of infill.environment, or OTHER_VARIABLES, each of which
    the code or CI names), and each declared one is named; docs/server.md's list of the client's own variables (which
    never restart a daemon) is exactly those declared client-only."""
    from infill.environment import BY_NAME, VARIABLES
    from infill.models import remote_http

    assert {remote_http.KEY_ENV, remote_http.KEY_FILE_ENV} < OTHER_VARIABLES
    assert "INFILL_REQUIRE_EXTRAS=1" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    named = set().union(*(named_variables(doc.read_text(encoding="utf-8")) for doc in DOCS))
    assert named - set(BY_NAME) - OTHER_VARIABLES == set()
    assert set(BY_NAME) | OTHER_VARIABLES <= named
    server = " ".join((ROOT / "docs" / "server.md").read_text(encoding="utf-8").split())
    own = re.search(r"The client's own variables \(([^)]*)\) never restart a daemon", server)
    assert own is not None
    assert named_variables(own.group(1)) == {v.name for v in VARIABLES if v.client_only}


def test_named_variables_expands_a_pattern() -> None:
    assert named_variables("`INFILL_DAEMON_*`, INFILL_DEBUG=1") == {
        "INFILL_DAEMON_TIMEOUT",
        "INFILL_DAEMON_IDLE_TIMEOUT",
        "INFILL_DAEMON_DEBUG",
        "INFILL_DEBUG",
    }


# --- docs/docstrings.md: the pyproject.toml sample is what the loader reads ----------------------------------------


def test_the_docstrings_configuration_sample_is_read_and_shows_the_defaults(tmp_path: Path) -> None:
    """The sample loads as written (no unknown key, no wrong type), names every setting, and each value is the
    default, except those marked `e.g.` or whose comment gives the default."""
    from dataclasses import fields

    from infill.docstrings.config import DocstringConfig, read_pyproject

    text = (ROOT / "docs" / "docstrings.md").read_text(encoding="utf-8")
    sample = text.split("```toml\n")[1].split("```")[0]
    (tmp_path / "pyproject.toml").write_text(sample, encoding="utf-8")
    read = read_pyproject(tmp_path / "pyproject.toml")
    assert set(read) == {f.name for f in fields(DocstringConfig)}
    examples = {
        m.group(1).replace("-", "_") for m in re.finditer(r"^([\w-]+) = .*# (?:e\.g\.|.*\(default: )", sample, re.M)
    }
    assert examples == {"min_confidence", "min_probability", "ignore_regex"}
    default = DocstringConfig()
    assert {k: v for k, v in read.items() if k not in examples} == {
        k: getattr(default, k) for k in read if k not in examples
    }


# --- docs/server.md: the methods table and the error codes are the server's -----------------------------------------


def method_rows(text: str) -> dict[str, str]:
    """`method` -> its params cell, from the table of docs/server.md's protocol."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \|([^|]*)\|", text, re.M)}


def server_error_codes() -> set[str]:
    """Every code the server's errors can carry: the protocol's own, each InfillError class's, internal_error."""
    from infill import errors
    from infill.server import protocol

    def subclasses(cls: type[errors.InfillError]) -> list[type[errors.InfillError]]:
        return [cls, *(c for sub in cls.__subclasses__() for c in subclasses(sub))]

    own = {protocol.PARSE_ERROR, protocol.INVALID_REQUEST, protocol.UNKNOWN_METHOD, protocol.TOO_LARGE}
    return own | {protocol.CANCELLED, errors.INTERNAL_ERROR} | {c.code for c in subclasses(errors.InfillError)}


def test_the_server_methods_and_error_codes_are_the_documented_ones() -> None:
    """The methods table lists every method a client calls (the daemon's own `*_command` ones apart), the `fill`
    row every fill parameter, the `docstrings` row exactly the parameters the method takes; the error codes listed
    are every code an error can carry."""
    from infill.options import BY_NAME
    from infill.server import handlers
    from infill.server.dispatch import Dispatcher

    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    rows = method_rows(text[text.index("| method | params | result |") :])
    methods = {m for m in Dispatcher().methods if not m.endswith("_command")}
    assert set(rows) == methods
    fill = set(re.findall(r"`(\w+)`", rows["fill"]))
    assert set(BY_NAME) <= fill
    assert set(re.findall(r"`(\w+)`", rows["docstrings"])) == {
        "path", "text", "filename", "cwd", "ignore_regex", "config", *handlers._DOC_SETTINGS, *handlers._DOC_SWITCHES
    }  # fmt: skip
    flat = " ".join(text.split())
    listed = flat[flat.index("Errors are `{") : flat.index("Responses are ASCII JSON")]
    words = {"code", "failed", "min_confidence"}  # the field named, and where a refused fill's error keeps it
    assert server_error_codes() == set(re.findall(r"`([a-z_]+)`", listed)) - words


# --- docs/editors.md: the Neovim plugin's setup() example shows its defaults ---------------------------------------


def lua_fields(block: str) -> dict[str, str]:
    """`name = value` of a Lua table written one field a line (the value up to its trailing comma; comments cut)."""
    return {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^  (\w+) = (.*?),?[ \t]*(?:--.*)?$", block, re.M)
        if not m.group(2).rstrip().endswith("(")
    }


def test_the_plugin_setup_example_shows_every_option_and_its_default() -> None:
    """The by-hand setup() names every option of the plugin's M.config, each with its default, but `settings`
    (an example of a setting)."""
    plugin = (ROOT / "editors" / "nvim" / "lua" / "infill" / "init.lua").read_text(encoding="utf-8")
    config = lua_fields(plugin[plugin.index("M.config = {") :].split("\n}")[0])
    text = (ROOT / "docs" / "editors.md").read_text(encoding="utf-8")
    start = text.rindex('require("infill").setup({', 0, text.index("  debounce_ms = "))  # the by-hand one
    shown = lua_fields(text[start:].split("\n})")[0])
    assert set(config) >= {"cmd", "filetypes", "settings", "debounce_ms", "keys"}
    assert set(shown) == set(config)
    assert {k: v for k, v in shown.items() if k != "settings"} == {k: v for k, v in config.items() if k != "settings"}
    assert config["settings"] == "{}" and "(default {})" in text


# --- every file of the repository a doc names exists ---------------------------------------------------------------

REPO_PATH = re.compile(r"(?<![\w/.<-])((?:infill|tests|benchmarks|docs|\.ci|editors|examples|completions)/[\w/.*-]*\w)")
# the files docs/contributing.md has a reader write (a draft, a decoder, a model kind `mdm`, and their tests)
NEW_FILE = re.compile(r"(?:^|/)(?:test_)?(?:my\w*|mdm)\.py$")


def missing_paths(text: str) -> list[str]:
    """The repository paths a text names that are no file or folder of the repository (`<kind>`, `*` and the
    like are read as patterns, by files_named)."""
    return sorted(
        {
            path
            for path in re.findall(REPO_PATH, text)
            if not NEW_FILE.search(path) and not (ROOT / path).exists() and not files_named(path)
        }
    )


def test_every_repository_path_the_docs_name_exists() -> None:
    missing = [f"{doc.relative_to(ROOT)}: {path}" for doc in DOCS for path in missing_paths(doc.read_text("utf-8"))]
    assert missing == []


def test_a_renamed_path_is_caught() -> None:
    assert missing_paths("see benchmarks/typing.py and benchmarks/typng.py, editors/nvim/lua") == [
        "benchmarks/typng.py"
    ]
