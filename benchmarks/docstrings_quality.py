"""Quality of `infill docstrings` on held-out functions, for the README.

Measures the share of generated docstrings passing ruff's D rules and the mean token log-probability, and
prints examples (best and worst by confidence).

Held-out functions come from the training corpus's held-out split (`<corpus>/heldout/*.py`, written by
`infill train corpus`), so the model never saw them. Each chosen function had a docstring; it is removed, the
function is written alone to a file, and `infill docstrings` fills it again with the real model. The original
docstring is printed next to the generated one in the examples.

    python benchmarks/docstrings_quality.py --corpus runs/corpus --model default --limit 100 --style google

Prints a Markdown report and writes the raw results to --out (JSON).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infill.docstrings.config import DocstringConfig  # noqa: E402
from infill.docstrings.engine import process_source  # noqa: E402
from infill.docstrings.finder import find_definitions  # noqa: E402
from infill.docstrings.styles import RUFF_CONVENTION  # noqa: E402


def held_out_functions(corpus: Path, limit: int, seed: int) -> list[dict[str, str]]:
    """Public top-level functions and methods with a docstring and at least one other statement."""
    files = sorted((corpus / "heldout").glob("*.py"))
    if not files:
        raise SystemExit(f"no held-out files under {corpus / 'heldout'}; run `infill train corpus` first")
    found: list[dict[str, str]] = []
    for path in files:
        source = path.read_bytes()
        try:
            defs = find_definitions(source, str(path), DocstringConfig())
        except Exception:  # noqa: BLE001 - a file tree-sitter cannot parse is simply not used
            continue
        for d in defs:
            if d.kind not in ("function", "method") or d.skip or d.docstring is None:
                continue
            body = d.node.child_by_field_name("body")
            if len(body.named_children) < 2:
                continue
            start = source.rfind(b"\n", 0, d.start_byte) + 1
            doc_line = source.rfind(b"\n", 0, d.docstring[0]) + 1
            doc_end = source.find(b"\n", d.docstring[1])
            doc_end = len(source) if doc_end < 0 else doc_end + 1
            without = source[start:doc_line] + source[doc_end : d.node.end_byte] + b"\n"
            try:
                code = textwrap.dedent(without.decode("utf-8"))
                if d.kind == "method" and d.parent is not None:  # keep it a method: self stays undocumented
                    code = f"class {d.parent.name}:\n" + textwrap.indent(code, "    ")
                compile(code, "<f>", "exec")
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            original = source[d.docstring[0] : d.docstring[1]].decode("utf-8", "replace")
            found.append({"file": path.name, "name": d.qualname, "code": code, "original": original})
    random.Random(seed).shuffle(found)
    return found[:limit]


def ruff_violations(folder: Path, convention: str) -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "D",
         "--ignore", "D100,D104,D105,D107", "--config", f'lint.pydocstyle.convention="{convention}"',
         "--output-format", "json", str(folder)],
        capture_output=True, text=True,
    )  # fmt: skip
    out: dict[str, list[str]] = {}
    for item in json.loads(done.stdout or "[]"):
        out.setdefault(Path(item["filename"]).name, []).append(f"{item['code']} {item['message']}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=Path("runs/corpus"))
    parser.add_argument("--model", default="default")
    parser.add_argument("--style", default="google", choices=["google", "numpy", "sphinx"])
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("runs/docstrings_quality.json"))
    args = parser.parse_args()

    from infill.core.docstrings import model_filler_for as _real_filler

    cfg = DocstringConfig(style=args.style, model=args.model, ignore_module=True, seed=args.seed)
    filler = _real_filler(cfg)
    functions = held_out_functions(args.corpus, args.limit, args.seed)
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i, item in enumerate(functions):
            t0 = time.perf_counter()
            result = process_source(item["code"], f"f{i}.py", cfg, filler)
            short = item["name"].rsplit(".", 1)[-1]  # for a method, not its wrapper class's outcome
            outcome = next((o for o in result.outcomes if o.name.rsplit(".", 1)[-1] == short), None)
            (folder / f"f{i}.py").write_text(result.text)
            results.append(
                {
                    **item,
                    "file_id": f"f{i}.py",
                    "generated": outcome.docstring if outcome else None,
                    "status": outcome.status if outcome else "none",
                    "confidence": outcome.confidence if outcome else None,
                    "fallbacks": outcome.fallbacks if outcome else [],
                    "seconds": time.perf_counter() - t0,
                }
            )
            print(f"\r{i + 1}/{len(functions)}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        violations = ruff_violations(folder, RUFF_CONVENTION[args.style])
    for r in results:
        r["ruff"] = violations.get(r["file_id"], [])
    elapsed = time.perf_counter() - started
    report(results, args, elapsed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


def report(results: list[dict[str, Any]], args: argparse.Namespace, elapsed: float) -> None:
    written = [r for r in results if r["generated"]]
    confident = [r["confidence"] for r in written if r["confidence"] is not None]
    passing = sum(not r["ruff"] for r in written)
    print(f"## Docstring quality ({args.style}, model {args.model!r}, {len(results)} held-out functions)\n")
    print("| measure | value |\n|---|---|")
    print(f"| docstrings written | {len(written)} / {len(results)} |")
    convention = RUFF_CONVENTION[args.style]
    print(f"| pass ruff D rules ({convention} convention) | {passing / max(len(written), 1):.1%} |")
    if confident:
        print(f"| mean token log-probability | {sum(confident) / len(confident):.2f} |")
    fallback = sum(bool(r["fallbacks"]) for r in written)
    print(f"| docstrings with a neutral fallback slot | {fallback / max(len(written), 1):.1%} |")
    print(f"| seconds per docstring (this machine) | {elapsed / max(len(results), 1):.2f} |\n")
    ranked = sorted((r for r in written if r["confidence"] is not None), key=lambda r: -r["confidence"])
    for title, chosen in (("Best", ranked[: args.examples]), ("Worst", ranked[-args.examples :])):
        print(f"### {title} by confidence\n")
        for r in chosen:
            print(f"`{r['name']}` (mean log-prob {r['confidence']:.2f}); original: {r['original'][:120]!r}\n")
            lines = r["code"].splitlines()
            first = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async ")))
            last = next(i for i in range(first, len(lines)) if lines[i].rstrip().endswith(":"))
            indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
            header = "\n".join(line[len(indent) :] for line in lines[first : last + 1])
            indent += "    "
            docstring = r["generated"].replace("\n" + indent, "\n    ")  # shown as a top-level function
            print(f"```python\n{header}\n    {docstring}\n```\n")


if __name__ == "__main__":
    main()
