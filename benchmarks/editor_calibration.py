"""Fit the language server's confidence on the requests an editor makes, and judge it.

The shipped calibration (calibration.json) was fitted on whole-line fills; most editor requests are mid-line. This
script asks the language server's own fill path (infill.lsp.fills: the settings' decoder, token healing, the
completion's span) for completions on lines of held-out files, three kinds per line, as the user types it:

  blank   the line emptied to its indentation, the cursor at its end (the whole line is the answer);
  word    the line typed up to the end of one of its words, the rest of it not yet there;
  inside  the line typed up to a point inside one of its words (token healing).

A completion is right when it completes the line exactly. The features are the fill's (infill.api.fill_features)
and the request's (infill.lsp.fills.REQUEST_FEATURES). The fit uses one part of the files (by a hash of their
names) and is judged on the rest; --test-package judges it too on lines of an installed package no corpus
manifest names. --out writes the calibration (a model folder's editor_calibration.json).

    python benchmarks/editor_calibration.py --corpus ../runs/corpus --lines 300 \
        --out infill/weights/default/editor_calibration.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import zlib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

KINDS = ("blank", "word", "inside")


def requests_of(line: str, rng: random.Random) -> list[tuple[str, int]]:
    """(kind, characters of the content typed) for one line's content."""
    words = [(m.start(), m.end()) for m in __import__("re").finditer(r"\w+", line)]
    out = [("blank", 0)]
    ends = [b for _, b in words if b < len(line)]
    if ends:
        out.append(("word", rng.choice(ends)))
    inside = [k for a, b in words for k in range(a + 1, b)]
    if inside:
        out.append(("inside", rng.choice(inside)))
    return out


def sampled_lines(texts: list[tuple[str, str]], count: int, seed: int) -> list[tuple[str, str, int]]:
    """(file name, text, 0-based line) of code lines of 8 to 100 characters (no comments), at random."""
    found = []
    for name, text in texts:
        for i, line in enumerate(text.split("\n")):
            body = line.strip()
            if 8 <= len(body) <= 100 and not body.startswith(("#", "@", '"', "'")) and "\t" not in line:
                found.append((name, text, i))
    return random.Random(seed).sample(found, min(count, len(found)))


def run(texts: list[tuple[str, str]], count: int, seed: int, quiet: bool) -> list[dict[str, Any]]:
    """Every request's features, kind, file and whether it was right."""
    from infill.lsp import fills
    from infill.lsp.documents import Document

    settings = fills.Settings()
    rng = random.Random(seed)
    rows = []
    lines = sampled_lines(texts, count, seed)
    started = time.perf_counter()
    for n, (name, text, number) in enumerate(lines):
        split = text.split("\n")
        line = split[number]
        indent = line[: len(line) - len(line.lstrip())]
        content = line.strip()
        for kind, typed in requests_of(content, rng):
            split[number] = indent + content[:typed]
            document = Document(f"file:///{name}", "python", 1, "\n".join(split))
            offset = sum(len(s) + 1 for s in split[:number]) + len(indent) + typed
            target = fills.cursor_target(document, offset, 1)
            if target is None:
                continue
            filled = fills.fill(document, target, settings)
            if filled is None or "features" not in filled.stats:
                continue
            after = document.text[: filled.start] + filled.text + document.text[filled.end :]
            right = after.split("\n")[number] == line
            request = fills.request_features(document, target)
            rows.append(
                {
                    "file": name,
                    "kind": kind,
                    "right": right,
                    "text": filled.text,
                    **filled.stats["features"],
                    **request,
                    "healed": float(filled.stats.get("healed", 0)),
                }
            )
        split[number] = line
        if not quiet and (n + 1) % 25 == 0:
            right = sum(r["right"] for r in rows)
            print(
                f"  {n + 1}/{len(lines)} lines, {len(rows)} fills, {right} right, {time.perf_counter() - started:.0f} s"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True, help="a corpus folder (its held-out files are used)")
    parser.add_argument("--lines", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--test-share", type=float, default=0.5, help="share of the files kept out of the fit")
    parser.add_argument("--test-package", default="pygls", help="an installed package to judge on ('' for none)")
    parser.add_argument("--test-lines", type=int, default=150)
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--rows", type=Path, help="write the requests' rows here (JSON)")
    parser.add_argument("--from-rows", type=Path, help="fit on rows written before instead of filling again")
    parser.add_argument("--out", type=Path, help="write the calibration here")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from infill.config import TOOL_DECODE, decode_label
    from infill.core.calibration import fit
    from infill.evaluation.confidence import FEATURES, Labelled, judge, render
    from infill.lsp.fills import REQUEST_FEATURES

    if args.from_rows:
        data = json.loads(args.from_rows.read_text(encoding="utf-8"))
    else:
        heldout = [json.loads(line) for line in (args.corpus / "heldout.jsonl").read_text().splitlines()]
        texts = [(Path(d["path"]).name + "-" + d["sha256"][:8], d["text"]) for d in heldout]
        data = {"corpus": run(texts, args.lines, args.seed, args.quiet)}
        if args.test_package:
            sys.path.insert(0, str(REPO / "benchmarks"))
            from importlib.util import find_spec

            spec = find_spec(args.test_package)
            assert spec is not None and spec.origin is not None
            files = sorted(Path(spec.origin).parent.rglob("*.py"))
            package = [(f"{args.test_package}/{f.name}", f.read_text(encoding="utf-8")) for f in files]
            data["package"] = run(package, args.test_lines, args.seed, args.quiet)
        if args.rows:
            args.rows.write_text(json.dumps(data) + "\n", encoding="utf-8")
    features = (*FEATURES, *REQUEST_FEATURES)
    corpus = data["corpus"]
    test = [zlib.crc32(r["file"].encode()) % 1000 < args.test_share * 1000 for r in corpus]
    fitted = [r for r, t in zip(corpus, test, strict=True) if not t]
    held = [r for r, t in zip(corpus, test, strict=True) if t]
    label = decode_label(TOOL_DECODE)
    meta = {
        "decoder": label,
        "requests": "editor: blank lines, after a word, inside a word (benchmarks/editor_calibration.py)",
        "fitted_on": {"fills": len(fitted), "right": sum(r["right"] for r in fitted), "seed": args.seed},
    }
    calibrator = fit([{f: r[f] for f in features} for r in fitted], [r["right"] for r in fitted], features, meta=meta)

    def labelled(name: str, rows: list[dict[str, Any]]) -> Labelled:
        return Labelled(
            name,
            "editor",
            label,
            [{f: r[f] for f in features} for r in rows],
            [r["right"] for r in rows],
            [r["file"] for r in rows],
        )

    parts = [("fit part", fitted), ("held-out part", held)] + (
        [("package", data["package"])] if "package" in data else []
    )
    for name, rows in parts:
        if not rows:
            continue
        for line in render(judge(calibrator, labelled(name, rows), args.threshold)):
            print(line)
        for kind in ("blank", "word", "inside"):
            some = [r for r in rows if r["kind"] == kind]
            if some:
                j = judge(calibrator, labelled(f"{name}, {kind}", some), args.threshold)
                print(
                    f"  {kind:6}: {j['fills']} fills, {j['right']} right; at >= {args.threshold:g}: "
                    f"{j['coverage_at_threshold']:.1%} shown, {j['precision_at_threshold']:.1%} of them right"
                )
    if args.out:
        calibrator.save(args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
