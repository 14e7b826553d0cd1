"""Typing through `infill lsp` as an editor would: keystrokes saved, not requests answered.

Lines of code the model never saw (files of an installed package that no corpus manifest under infill/weights
names; pygls by default) are typed, one at a time, into the file they come from, with the line itself emptied to
its indentation, through one `infill lsp` server over stdio (INFILL_THREADS=1) with the given settings:

  pauses   the user types a word, then pauses: each character is one didChange (no request: the editor waits
           for a pause), and at the start of the line and after every word the editor asks for an inline
           completion and waits for the answer. A suggestion that completes the line exactly is accepted (the
           characters it supplies are saved, the line is done); any other suggestion shown is wrong. The keys
           come all at once, unless --typing-ms spaces them as a person types: then the editor asks
           DELAY_MS after the last key (as the Neovim plugin does), and the server has had the typing's time.
  keys     a key every --key-ms (150 ms): every key is a didChange and an inline completion request, and a
           request still unanswered when the next key comes is cancelled ($/cancelRequest), as editors do.
           After the last key of each word the user pauses; the answer to that key's request counts as in time
           when it arrives within 300 ms of the key (an item or none). Suggestions are accepted as above.
  blocks   positions after a block opener whose body (up to --block-lines lines) is emptied to one blank line:
           the exact match of the whole block (the "lines" setting at --block-lines), and of its first line
           with the setting at 1, on the same positions.

Printed per mode: characters saved / typed, suggestions shown, right, wrong per line, request latency p50/p95
(model fills and typeahead answers apart) and, for keys, the share of pauses answered in time. The pauses mode
also prints what the figures would be at other thresholds (--thresholds), replayed from the confidences of the
items shown at --threshold (with --through, every line typed to its end). That is a rough estimate only: at a
higher threshold a hidden suggestion is not kept for typeahead, the model is asked again at the next pause, and
its answer there may differ; compare thresholds with --variants, which types every line with each setting.

    python benchmarks/typing.py                                    # pygls, 40 lines, both typing modes
    python benchmarks/typing.py --mode pauses --variants '[{"threshold": 0.3}, {"threshold": 0.4}]'
    python benchmarks/typing.py --mode blocks --blocks 40

(benchmarks/typing.py runs this module: see there why the code lives here.)
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the protocol client of the tests (tests/fixtures_lsp.py)

IN_TIME = 0.3  # seconds from the last key to the answer
DELAY_MS = 75.0  # pauses with --typing-ms: the editor asks this long after the last key (editors/nvim's delay)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def manifest_packages() -> set[str]:
    """Every package a corpus manifest of the embedded models names (normalised: lower case, - as _)."""
    names: set[str] = set()

    def add(part: dict[str, Any]) -> None:  # a manifest, and the corpora it nests (a GPU machine's)
        for entry in part.get("packages", []):
            if isinstance(entry, dict):  # a package trained on (an exclusion list names packages left out)
                names.add(str(entry.get("package", "")).lower().replace("-", "_"))
        for value in part.values():
            if isinstance(value, dict):
                add(value)

    for manifest in (REPO / "infill" / "weights").glob("*/manifest.json"):
        add(json.loads(manifest.read_text(encoding="utf-8")))
    return names


def package_files(package: str) -> list[Path]:
    if package.lower().replace("-", "_") in manifest_packages():
        raise SystemExit(f"{package} is named by a corpus manifest: the model saw it")
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{package} is not installed")
    return sorted(Path(spec.origin).parent.rglob("*.py"))


def docstring_lines(tree: ast.AST) -> set[int]:
    """1-based numbers of lines inside string statements (docstrings)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return found


@dataclass
class Line:
    path: Path
    text: str  # the whole file
    number: int  # 0-based
    indent: str
    content: str  # the line without its indentation


def chosen_lines(files: list[Path], count: int, seed: int) -> list[Line]:
    """`count` code lines of 8 to 100 characters (no comments, docstrings or decorators), drawn at random."""
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            skip = docstring_lines(ast.parse(text))
        except SyntaxError:
            continue
        for i, line in enumerate(text.split("\n")):
            body = line.strip()
            if i + 1 in skip or not 8 <= len(body) <= 100 or body.startswith(("#", "@")) or "\t" in line:
                continue
            found.append(Line(path, text, i, line[: len(line) - len(line.lstrip())], body))
    return random.Random(seed).sample(found, min(count, len(found)))


def word_ends(content: str) -> list[int]:
    """Where the user pauses in `content`: at its start and after every word (letters, digits, _)."""
    ends = [0]
    for j in range(1, len(content)):
        if (content[j - 1].isalnum() or content[j - 1] == "_") and not (content[j].isalnum() or content[j] == "_"):
            ends.append(j)
    return ends


@dataclass
class Pause:
    line: int  # index in the benchmark's lines
    typed: int  # characters of the content typed before it
    left: int  # characters of the content still to type
    seconds: float  # request to answer (pauses), last key to answer (keys)
    typeahead: bool  # answered without a model call
    text: str | None  # the suggestion, None when none was shown
    confidence: float | None
    right: bool  # it completes the line exactly


@dataclass
class Totals:
    pauses: list[Pause] = field(default_factory=list)
    after: list[Pause] = field(default_factory=list)  # pauses after the line's right suggestion (--through)
    typed: int = 0  # characters of the lines' content
    saved: int = 0


def completes(item: dict[str, Any], line: Line, typed: int) -> bool:
    """Whether the item, applied to the line as it stands (indentation + `typed` characters), gives the line."""
    current = line.indent + line.content[:typed]
    a, b = item["range"]["start"]["character"], item["range"]["end"]["character"]
    if item["range"]["start"]["line"] != item["range"]["end"]["line"]:
        return False
    return current[:a] + item["insertText"] + current[b:] == line.indent + line.content


class Typist:
    """One server, and the documents it types into."""

    def __init__(self, settings: dict[str, Any], source: Path | None = None) -> None:
        """A server with `settings`, running this checkout's infill, or that of the checkout at `source`."""
        import os

        from fixtures_lsp import LspClient, lsp_env

        env = lsp_env(INFILL_THREADS="1")
        if source is not None:  # its infill first on the path, and not the working directory's (`-m` puts it first)
            env["PYTHONPATH"] = os.pathsep.join([str(source), env["PYTHONPATH"]])
            env["PYTHONSAFEPATH"] = "1"
        self.client = LspClient(env)
        self.client.initialize(settings)
        self.version = 0

    def fills(self) -> int:
        return len(self.client.result("test/fills"))

    def open(self, line: Line) -> str:
        uri = f"file://{line.path}"
        lines = line.text.split("\n")
        lines[line.number] = line.indent
        self.version += 1
        self.client.open(uri, "\n".join(lines), version=self.version)
        return uri

    def key(self, uri: str, line: Line, at: int) -> None:
        """Type content[at] (one didChange)."""
        self.version += 1
        column = len(line.indent) + at
        change = {"range": _range(line.number, column, column), "text": line.content[at]}
        self.client.change(uri, self.version, [change])

    def close(self, uri: str) -> None:
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def _range(line: int, a: int, b: int) -> dict[str, Any]:
    return {"start": {"line": line, "character": a}, "end": {"line": line, "character": b}}


def _item(reply: dict[str, Any]) -> dict[str, Any] | None:
    if "error" in reply:
        raise SystemExit(f"error from the server: {reply['error']}")
    result = reply.get("result")
    return result["items"][0] if result and result.get("items") else None


def type_with_pauses(
    typist: Typist, lines: list[Line], totals: Totals, first: int = 0, through: bool = False, typing_ms: float = 0
) -> Totals:
    """Type `lines` (numbered from `first`) with a pause and a request at every word's end, into `totals`; with
    `through`, every line to its end, a right suggestion or not (the pauses after it are recorded for
    `replayed`, not counted). With `typing_ms`, a key every `typing_ms` and the request DELAY_MS after the
    last one. A pause counts as a typeahead answer when no fill started after its last key (a fill the server
    started on that key itself, a prefetch, is the model's answer)."""
    from fixtures_lsp import inline_params

    for index, line in enumerate(lines, start=first):
        uri = typist.open(line)
        typist.client.result("test/idle")  # the model is loaded and nothing else runs
        totals.typed += len(line.content)
        typed, done = 0, False
        for end in word_ends(line.content):
            before = typist.fills()
            while typed < end:
                if typing_ms:
                    time.sleep(typing_ms / 1000)
                if typed == end - 1:
                    before = typist.fills()
                typist.key(uri, line, typed)
                typed += 1
            if typing_ms and end:
                time.sleep(DELAY_MS / 1000)
            started = time.perf_counter()
            reply = typist.client.request(
                "textDocument/inlineCompletion", inline_params(uri, line.number, len(line.indent) + typed)
            )
            seconds = time.perf_counter() - started
            item = _item(reply)
            right = item is not None and completes(item, line, typed)
            pause = Pause(
                index,
                typed,
                len(line.content) - typed,
                seconds,
                typist.fills() == before,
                None if item is None else item["insertText"],
                None if item is None else item.get("confidence"),
                right,
            )
            (totals.after if done else totals.pauses).append(pause)
            if done:
                continue
            if right:
                totals.saved += len(line.content) - typed
                done = True
                if not through:
                    break
        typist.close(uri)
    return totals


def type_keys(typist: Typist, lines: list[Line], key_seconds: float, totals: Totals, first: int = 0) -> Totals:
    """Every key a request, the previous one cancelled; after each word's last key the user waits (module
    docstring). The blank line itself came from a key (Enter): its request is the first."""
    from fixtures_lsp import inline_params

    client = typist.client
    for index, line in enumerate(lines, start=first):
        uri = typist.open(line)
        client.result("test/idle")
        totals.typed += len(line.content)
        pauses = set(word_ends(line.content))
        typed = 0
        last_key = time.perf_counter()
        request = client.start("textDocument/inlineCompletion", inline_params(uri, line.number, len(line.indent)))
        pending: int | None = request
        while True:
            if typed in pauses:  # the user stops after this word and waits for the suggestion
                reply = client.wait(request)
                seconds = time.perf_counter() - last_key
                pending = None
                item = _item(reply)
                right = item is not None and completes(item, line, typed)
                text = None if item is None else item["insertText"]
                confidence = None if item is None else item.get("confidence")
                left = len(line.content) - typed
                totals.pauses.append(Pause(index, typed, left, seconds, False, text, confidence, right))
                if right:
                    totals.saved += left
                    break
            if typed >= len(line.content):
                break
            time.sleep(max(0.0, last_key + key_seconds - time.perf_counter()))
            if pending is not None:  # the editor cancels the request the new key made stale
                client.notify("$/cancelRequest", {"id": pending})
            typist.key(uri, line, typed)
            last_key = time.perf_counter()
            typed += 1
            request = client.start(
                "textDocument/inlineCompletion", inline_params(uri, line.number, len(line.indent) + typed)
            )
            pending = request
        if pending is not None:
            client.notify("$/cancelRequest", {"id": pending})
            client.wait(pending)
        typist.close(uri)
    return totals


def report(name: str, totals: Totals, lines: int, threshold: float | None = None) -> dict[str, Any]:
    shown = [p for p in totals.pauses if p.text is not None and (threshold is None or (p.confidence or 0) >= threshold)]
    right = sum(p.right for p in shown)
    model = [p.seconds for p in totals.pauses if not p.typeahead]
    ahead = [p.seconds for p in totals.pauses if p.typeahead]
    return {
        "mode": name,
        "lines": lines,
        "typed": totals.typed,
        "saved": totals.saved,
        "saved_share": totals.saved / totals.typed if totals.typed else 0.0,
        "shown": len(shown),
        "right": right,
        "right_share": right / len(shown) if shown else 0.0,
        "wrong_per_line": (len(shown) - right) / lines if lines else 0.0,
        "pauses": len(totals.pauses),
        "p50": statistics.median(model) if model else float("nan"),
        "p95": percentile(model, 0.95),
        "typeahead_answers": len(ahead),
        "typeahead_p50": statistics.median(ahead) if ahead else float("nan"),
        "in_time": sum(p.seconds <= IN_TIME for p in totals.pauses) / len(totals.pauses) if totals.pauses else 0.0,
    }


def replayed(totals: Totals, lines: int, threshold: float, oracle: bool = False) -> dict[str, Any]:
    """The pauses' figures had the threshold been `threshold`: a pause's suggestion is shown when its confidence
    reaches it; the first right one shown ends its line. Only as good as the pauses recorded: without --through a
    line ended at a right suggestion the threshold would hide, and its later pauses are missing (an optimistic
    estimate); and a suggestion hidden would not have been kept for typeahead."""
    saved = shown = right = 0
    done: set[int] = set()
    for p in sorted(totals.pauses + totals.after, key=lambda p: (p.line, p.typed)):
        if p.line in done or p.text is None or (p.confidence or 0.0) < threshold or (oracle and not p.right):
            continue
        shown += 1
        if p.right:
            right += 1
            done.add(p.line)
            saved += p.left
    return {
        "threshold": threshold,
        "saved_share": saved / totals.typed if totals.typed else 0.0,
        "shown": shown,
        "right_share": right / shown if shown else 0.0,
        "wrong_per_line": (shown - right) / lines,
    }


def print_report(r: dict[str, Any]) -> None:
    line = (
        f"{r['mode']:7} {r['lines']} lines: saved {r['saved']}/{r['typed']} characters ({r['saved_share']:.1%}); "
        f"shown {r['shown']}, right {r['right']} ({r['right_share']:.0%}), wrong per line {r['wrong_per_line']:.2f}; "
        f"model answers p50 {1000 * r['p50']:.0f} ms, p95 {1000 * r['p95']:.0f} ms"
    )
    if r["typeahead_answers"]:
        line += f"; typeahead {r['typeahead_answers']} answers, p50 {1000 * r['typeahead_p50']:.1f} ms"
    if r["mode"] == "keys":
        line += f"; pauses answered within {1000 * IN_TIME:.0f} ms of the last key: {r['in_time']:.0%}"
    print(line, flush=True)


# --- blocks -------------------------------------------------------------------------------------------------------


@dataclass
class Block:
    path: Path
    text: str
    opener: int  # 0-based line of the opener
    body: list[str]  # the body's lines


def chosen_blocks(files: list[Path], count: int, seed: int, most: int) -> list[Block]:
    """Function, loop and branch bodies of 1 to `most` lines (no docstring, no blank line), at random."""
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.split("\n")
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if not isinstance(body, list) or not body or isinstance(node, ast.Module | ast.ClassDef):
                continue
            if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                continue  # a docstring first
            first, last = body[0].lineno - 1, (body[-1].end_lineno or body[-1].lineno) - 1
            opener = first - 1
            if not lines[opener].rstrip().endswith(":") or last - first + 1 > most:
                continue
            block = lines[first : last + 1]
            if any(not b.strip() or "\t" in b for b in block) or "#" in "".join(block):
                continue
            found.append(Block(path, text, opener, block))
    return random.Random(seed).sample(found, min(count, len(found)))


def run_blocks(args: argparse.Namespace, settings: dict[str, Any], blocks: list[Block]) -> None:
    from fixtures_lsp import inline_params

    results: dict[int, list[str | None]] = {}
    for lines in (args.block_lines, 1):
        typist = Typist({**settings, "lines": lines})
        try:
            found: list[str | None] = []
            for block in blocks:
                uri = f"file://{block.path}"
                text = block.text.split("\n")
                indent = block.body[0][: len(block.body[0]) - len(block.body[0].lstrip())]
                text[block.opener + 1 : block.opener + 1 + len(block.body)] = [indent]
                typist.version += 1
                typist.client.open(uri, "\n".join(text), version=typist.version)
                typist.client.result("test/idle")
                reply = typist.client.request(
                    "textDocument/inlineCompletion", inline_params(uri, block.opener + 1, len(indent))
                )
                item = _item(reply)
                found.append(None if item is None else item["insertText"])
                typist.close(uri)
            results[lines] = found
        finally:
            typist.client.close()
    n = len(blocks)
    whole = sum(s is not None and _same(s, b.body) for s, b in zip(results[args.block_lines], blocks, strict=True))
    first = sum(s is not None and _same(s.split("\n")[0], b.body[:1]) for s, b in zip(results[1], blocks, strict=True))
    first_of_block = sum(
        s is not None and _same(s.split("\n")[0], b.body[:1])
        for s, b in zip(results[args.block_lines], blocks, strict=True)
    )
    multi = [b for b in blocks if len(b.body) > 1]
    whole_multi = sum(
        s is not None and _same(s, b.body)
        for s, b in zip(results[args.block_lines], blocks, strict=True)
        if len(b.body) > 1
    )
    shown = sum(s is not None for s in results[args.block_lines])
    print(
        f"blocks  {n} positions ({len(multi)} with bodies of 2+ lines): whole block exact {whole}/{n} "
        f"({whole / n:.1%}; of the 2+ line bodies {whole_multi}/{len(multi)}), shown {shown}; its first line exact "
        f"{first_of_block}/{n}; one-line setting: first line exact {first}/{n} ({first / n:.1%})"
    )


def _same(suggestion: str, body: list[str]) -> bool:
    return [s.rstrip() for s in suggestion.split("\n")] == [b.rstrip() for b in body]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", default="pygls", help="an installed package no corpus manifest names [pygls]")
    parser.add_argument("--lines", type=int, default=40, help="lines typed [40]")
    parser.add_argument("--seed", type=int, default=0, help="which lines [0]")
    parser.add_argument("--mode", default="pauses,keys", help="pauses, keys and/or blocks, comma-separated")
    parser.add_argument("--model", default="default")
    parser.add_argument("--threshold", type=float, default=None, help="the server's threshold [its default]")
    parser.add_argument(
        "--thresholds",
        default="",
        help="thresholds to replay the pauses at (comma-separated); 'oracle': a confidence that knew which "
        "suggestions are right (the most a threshold could save; with --threshold 0 --through)",
    )
    parser.add_argument("--settings", default="{}", help="more settings, as JSON (e.g. '{\"context\": false}')")
    parser.add_argument(
        "--variants",
        default="",
        help="a JSON list of settings to compare, each merged over the others given: one server each, every line "
        'typed by each in turn (e.g. \'[{}, {"fill": {"beam": 2}}]\')',
    )
    parser.add_argument(
        "--through",
        action="store_true",
        help="pauses: type every line to its end, recording the pauses after a right suggestion (for --thresholds)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout of infill (e.g. the main branch): every setting is also typed by a server running "
        "its code, in the same run, line by line in turn",
    )
    parser.add_argument("--key-ms", type=float, default=150.0, help="keys: milliseconds between keys [150]")
    parser.add_argument(
        "--typing-ms",
        type=float,
        default=0.0,
        help=f"pauses: milliseconds between keys, and the request {DELAY_MS:g} ms after the last [0: all at once]",
    )
    parser.add_argument("--blocks", type=int, default=30, help="block positions [30]")
    parser.add_argument("--block-lines", type=int, default=6, help="lines of a block at most [6]")
    parser.add_argument("--json", type=Path, help="write every pause's record here")
    args = parser.parse_args()

    files = package_files(args.package)
    settings: dict[str, Any] = {"model": args.model, **json.loads(args.settings)}
    if args.threshold is not None:
        settings["threshold"] = args.threshold
    modes = args.mode.split(",")
    print(f"{args.package}: {len(files)} files; model {args.model}; settings {json.dumps(settings)}; INFILL_THREADS=1")
    records: dict[str, Any] = {}
    variants = [{**settings, **v} for v in json.loads(args.variants)] if args.variants else [settings]
    sources: list[Path | None] = [None] * len(variants)
    if args.against is not None:
        sources += [args.against.resolve()] * len(variants)
        variants = variants + variants
    if "pauses" in modes or "keys" in modes:
        lines = chosen_lines(files, args.lines, args.seed)
        # one server each; the lines are typed by each in turn
        typists = [Typist(v, source) for v, source in zip(variants, sources, strict=True)]
        try:
            for mode in ("pauses", "keys"):
                if mode not in modes:
                    continue
                totals = [Totals() for _ in variants]
                for i, line in enumerate(lines):
                    for typist, into in zip(typists, totals, strict=True):
                        if mode == "pauses":
                            type_with_pauses(typist, [line], into, i, args.through, args.typing_ms)
                        else:
                            type_keys(typist, [line], args.key_ms / 1000, into, i)
                for variant, source, into in zip(variants, sources, totals, strict=True):
                    r = report(mode, into, len(lines))
                    if len(variants) > 1:
                        print(f"settings {json.dumps(variant)}{'' if source is None else f' (code of {source})'}:")
                    print_report(r)
                    label = f"{json.dumps(variant)}{'' if source is None else ' against'}"
                    key = mode if len(variants) == 1 else f"{mode} {label}"
                    records[key] = {"report": r, "pauses": [p.__dict__ for p in into.pauses]}
                    if mode == "pauses":
                        for t in (x for x in args.thresholds.split(",") if x):
                            e = (
                                replayed(into, len(lines), 0.0, True)
                                if t == "oracle"
                                else replayed(into, len(lines), float(t))
                            )
                            records.setdefault("replayed", []).append({**e, "settings": variant, "at": t})
                            print(
                                f"  replayed at threshold {t}: saved {e['saved_share']:.1%}, shown {e['shown']}, "
                                f"right {e['right_share']:.0%}, wrong per line {e['wrong_per_line']:.2f}"
                            )
        finally:
            for typist in typists:
                typist.client.close()
    if "blocks" in modes:
        run_blocks(args, settings, chosen_blocks(files, args.blocks, args.seed, args.block_lines))
    if args.json is not None:
        args.json.write_text(json.dumps(records, indent=1, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
