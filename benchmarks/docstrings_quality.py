"""Quality of `infill docstrings` on held-out code: are its sentences true of the code, and close to a person's?

Held-out definitions that have a docstring (functions, methods, classes and modules of the training corpus's
held-out split, `<corpus>/heldout.jsonl`, written by `infill train corpus`; never evaluation data) lose their
docstring and are filled again by `infill docstrings` with the real model. Each slot is compared five ways:

- `model`: the model's text, cleaned as before the monitor existed (neutral text where cleaning fails);
- `monitored`: the model's text where the monitor lets it through, else the names-only sentence;
- `names`: sentences built from the names and the code alone (infill.docstrings.names);
- `neutral`: the neutral text (infill.docstrings.text.fallback_*);
- `default`: what `infill docstrings` writes by default (monitor, then the calibrated choice).

Measures: ROUGE-L (F1 of the longest common word subsequence) of the first sentence of the summary, and of
each parameter description, against the docstring a person wrote; the share of docstrings with a sentence the
monitor finds contradicting the code; the share of the people's own first sentences the checks would refuse
(how often the checks are wrong); ruff's D rules on what is written; the calibration's ECE and precision.

Files are split in two by their hash: `--split fit` is for fitting the calibration (`--fit PATH` writes it,
with the cut that defines "right" and the threshold that maximises the mean ROUGE-L of the summaries written),
`--split report` (the default) for the figures (other files). Draw a sample with --limit and --seed:

    python benchmarks/docstrings_quality.py --corpus runs/corpus --split fit --limit 160 \\
        --fit infill/weights/default/docstring_calibration.json
    python benchmarks/docstrings_quality.py --corpus runs/corpus --limit 160 --examples 20

Prints a Markdown report and writes the raw results to --out (JSON).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import random
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infill.core import calibration  # noqa: E402
from infill.docstrings import confidence, monitor, names, text  # noqa: E402
from infill.docstrings.config import DocstringConfig  # noqa: E402
from infill.docstrings.engine import process_source, skeleton_and_facts  # noqa: E402
from infill.docstrings.facts import parse_python  # noqa: E402
from infill.docstrings.finder import find_definitions  # noqa: E402
from infill.docstrings.similarity import first_sentence, rouge_l  # noqa: E402
from infill.docstrings.skeleton import Slot  # noqa: E402
from infill.docstrings.styles import RUFF_CONVENTION  # noqa: E402

if TYPE_CHECKING:
    from infill.api import FillResult
    from infill.spans import Span

CHOICES = ("model", "monitored", "names", "neutral", "default")
RIGHT_CUT = 0.4  # a model summary is "right" when its first sentence's ROUGE-L against the person's is at least this
MARGIN = 0.005  # mean ROUGE-L a threshold other than 0.5 must gain on the fit split to be chosen
KINDS = ("function", "method", "class", "module")  # the order of the report's columns


@dataclass
class Item:
    """One held-out definition: its code without the docstring, and the docstring a person wrote."""

    file: str
    kind: str
    name: str  # qualified name in `code`
    path: str  # the name the code is filled under (a module's summary reads its file name)
    code: str
    original: str
    settings: dict[str, Any] = field(default_factory=dict)  # DocstringConfig fields: fill only this definition


def _split_of(sha: str) -> str:
    return "fit" if int(hashlib.sha256(sha.encode()).hexdigest()[0], 16) % 2 else "report"


def _without(source: bytes, start: int, end: int) -> bytes:
    """`source` without the lines [start, end) of a docstring (and the blank lines right after it)."""
    line_start = source.rfind(b"\n", 0, start) + 1
    line_end = source.find(b"\n", end)
    line_end = len(source) if line_end < 0 else line_end + 1
    while source[line_end : line_end + 1] == b"\n":
        line_end += 1
    return source[:line_start] + source[line_end:]


def held_out_items(corpus: Path, split: str) -> list[Item]:
    """Every public definition with a docstring in the held-out files of `split`, as a fill problem."""
    rows_path = corpus / "heldout.jsonl"
    if not rows_path.is_file():
        raise SystemExit(f"no {rows_path}; run `infill train corpus` first")
    items: list[Item] = []
    for line in rows_path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if _split_of(row["sha256"]) != split:
            continue
        items += _items_of(row["text"], Path(row["path"]).name, row["sha256"][:12])
    return items


def _items_of(source_text: str, file_name: str, file_id: str) -> list[Item]:
    source = source_text.encode("utf-8")
    try:
        definitions = find_definitions(source, file_name, DocstringConfig())
        ast.parse(source_text)
    except Exception:  # noqa: BLE001 - a file either parser rejects is simply not used
        return []
    out: list[Item] = []
    for d in definitions:
        if d.skip or d.docstring is None:
            continue
        original = source[d.docstring[0] : d.docstring[1]].decode("utf-8", "replace")
        if d.kind == "module":
            code = _without(source, *d.docstring).decode("utf-8")
            out.append(Item(file_id, "module", d.name, file_name, code, original, {"ignore_regex": (".",)}))
            continue
        if d.parent is not None and d.parent.kind not in ("module", "class"):
            continue
        if d.kind == "class" and d.parent is not None and d.parent.kind != "module":
            continue
        body = d.node.child_by_field_name("body")
        if len(body.named_children) < 2:
            continue
        start = source.rfind(b"\n", 0, d.start_byte) + 1
        snippet = _without(source[: d.node.end_byte], *d.docstring)[start:] + b"\n"
        try:
            code = textwrap.dedent(snippet.decode("utf-8"))
            settings: dict[str, Any] = {"ignore_module": True}
            if d.kind == "method" and d.parent is not None:  # keep it a method: self stays undocumented
                code = f"class {d.parent.name}:\n" + textwrap.indent(code, "    ")
                settings["ignore_regex"] = (f"^{re.escape(d.parent.name)}$",)
            if d.kind == "class":
                settings["ignore_regex"] = (f"^{re.escape(d.name)}\\.",)  # its methods
            compile(code, "<f>", "exec")
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        out.append(Item(file_id, d.kind, d.qualname, "snippet.py", code, original, settings))
    return out


def sample(items: list[Item], limit: int, seed: int, kinds: Sequence[str]) -> list[Item]:
    """`limit` items of each kind in `kinds` (methods count with functions), drawn with `seed`."""
    rng = random.Random(seed)
    out: list[Item] = []
    for kind in kinds:
        pool = [i for i in items if (i.kind in ("function", "method") if kind == "function" else i.kind == kind)]
        rng.shuffle(pool)
        out += pool[:limit]
    return out


@dataclass
class Capture:
    """A SlotFiller that records the raw text and score of every slot the model wrote, by definition."""

    filler: Callable[..., FillResult]
    calls: dict[str, confidence.ModelText] = field(default_factory=dict)

    def __call__(self, text_: str, spans: Sequence[Span], *, language: str, monitor: Any = None) -> FillResult:
        result = self.filler(text_, spans, language=language, monitor=monitor)
        by_start = {e.start_byte: e for e in result.edits}
        for span in spans:
            key, _, qualname = (span.label or "").partition("|")
            model = self.calls.setdefault(qualname, confidence.ModelText())
            edit = by_start.get(span.start_byte)
            if edit is not None:
                model.raw[key], model.scores[key] = edit.text, (edit.score, edit.tokens)
        return result


def documented_params(docstring: str) -> dict[str, str]:
    """Parameter -> the first sentence of its description, in a google, numpy or sphinx docstring."""
    out: dict[str, str] = {}
    for match in re.finditer(r":param\s+(?:[^:]*\s)?\*{0,2}(\w+):\s*(.+?)(?=\n\s*:|\n\s*\n|\Z)", docstring, re.S):
        out[match.group(1)] = first_sentence(match.group(2))
    lines = docstring.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        google = stripped in ("Args:", "Arguments:", "Parameters:", "Keyword Args:")
        numpy = stripped == "Parameters" and i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}
        if not (google or numpy):
            continue
        indent = len(line) - len(line.lstrip())
        entry_indent: int | None = None
        name, parts = None, []
        for body_line in lines[i + (2 if numpy else 1) :]:
            if not body_line.strip():
                if google:
                    continue
                continue
            depth = len(body_line) - len(body_line.lstrip())
            if depth < indent or (google and depth == indent) or (numpy and re.match(r"^\s*-{3,}", body_line)):
                break
            if entry_indent is None:
                entry_indent = depth
            if depth == entry_indent:
                if name and parts:
                    out.setdefault(name, first_sentence(" ".join(parts)))
                pattern = r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$" if google else r"^\*{0,2}(\w+)\b.*$"
                match = re.match(pattern, body_line.strip())
                name = match.group(1) if match else None
                parts = [match.group(2)] if match and google and match.group(2) else []
            elif name:
                parts.append(body_line.strip())
        if name and parts:
            out.setdefault(name, first_sentence(" ".join(parts)))
    return out


def measure(item: Item, filler: Callable[..., FillResult], cfg: DocstringConfig) -> dict[str, Any] | None:
    """Fill one item and compare the choices for each of its slots."""
    capture = Capture(filler)
    item_cfg = replace(cfg, **item.settings)
    t0 = time.perf_counter()
    result = process_source(item.code, item.path, item_cfg, capture)
    seconds = time.perf_counter() - t0
    outcome = next((o for o in result.outcomes if o.name == item.name), None)
    model = capture.calls.get(item.name)
    if outcome is None or model is None or outcome.docstring is None:
        return None
    source = item.code.encode("utf-8")
    definitions = find_definitions(source, item.path, item_cfg)
    d = next(d for d in definitions if d.qualname == item.name)
    by_node = {x.node.id: x for x in definitions if x.kind != "module"}
    skeleton, known = skeleton_and_facts(d, item_cfg, by_node, parse_python(item.code))
    slots = skeleton.slots()
    limit = 80
    verdicts = monitor.judge_all(skeleton, known, model.raw, limit)
    names_texts = names.texts(known, slots)
    neutral = {
        s.key: text.fallback_summary(skeleton.kind, skeleton.name, skeleton.returns is not None)
        if s.kind == "summary"
        else text.fallback_description(s.kind, s.subject)
        for s in slots
    }
    cleaned: dict[str, str] = {}
    for s in slots:
        raw = model.raw.get(s.key, "")
        is_function = known.is_function and not known.is_property
        value = (
            text.clean_summary(raw, name=skeleton.name, is_function=is_function, limit=limit)
            if s.kind == "summary"
            else text.clean_description(raw, subject=s.subject)
        )
        cleaned[s.key] = value if value is not None else neutral[s.key]
    monitored = {k: v.text if v.text is not None else names_texts[k] for k, v in verdicts.items()}
    chosen = confidence.choose(verdicts, names_texts, model, item_cfg.model, item_cfg.min_probability)
    choices = {"model": cleaned, "monitored": monitored, "names": names_texts, "neutral": neutral}
    choices["default"] = chosen.texts
    reference = first_sentence(item.original)
    params = documented_params(item.original)
    row: dict[str, Any] = {
        "file": item.file,
        "kind": item.kind,
        "name": item.name,
        "original": reference,
        "docstring": outcome.docstring,
        "probability": outcome.probability,
        "refused": outcome.refused,
        "seconds": seconds,
        "written": result.text,
        "docstring_row": result.text.count("\n", 0, max(result.text.find(outcome.docstring), 0)) + 1,
        "fallbacks": outcome.fallbacks,
        "confidence": outcome.confidence,
        "code": item.code,
    }
    for choice, texts in choices.items():
        summary = first_sentence(texts["summary"])
        if choice == "default":
            summary = first_sentence(outcome.docstring)
        contradictions = {
            key: reason
            for key, value in texts.items()
            if (reason := monitor.contradiction(Slot.from_key(key), value, known))
        }
        row[choice] = {
            "summary": summary,
            "rouge": rouge_l(summary, reference),
            "contradictions": contradictions,
            "params": {
                p: rouge_l(texts[f"param:{p}"], params[p])
                for p in (s.subject.lstrip("*") for s in slots if s.kind == "param")
                if p in params and f"param:{p}" in texts
            },
        }
    row["original_refused"] = monitor.contradiction(Slot("summary"), reference, known) if reference else None
    row["model_raw"] = " ".join(model.raw.get("summary", "").split())
    if verdicts["summary"].text is not None:
        row["features"] = confidence.features(model, verdicts, names_texts["summary"])
        row["model_summary"] = verdicts["summary"].text
        row["model_rouge"] = rouge_l(first_sentence(verdicts["summary"].text), reference)
        row["names_rouge"] = rouge_l(first_sentence(names_texts["summary"]), reference)
    return row


def ruff_violations(rows: list[dict[str, Any]], convention: str) -> None:
    """Each row's "ruff": the D-rule violations ruff reports at the docstring written (other docstrings of the
    code, and the rules about missing ones, left out)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i, r in enumerate(rows):
            (folder / f"f{i}.py").write_text(r["written"])
        done = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "D",
             "--ignore", "D100,D101,D102,D103,D104,D105,D106,D107",
             "--config", f'lint.pydocstyle.convention="{convention}"',
             "--output-format", "json", str(folder)],
            capture_output=True, text=True,
        )  # fmt: skip
        found: dict[tuple[str, int], list[str]] = {}
        for v in json.loads(done.stdout or "[]"):
            where = (Path(v["filename"]).name, v["location"]["row"])
            found.setdefault(where, []).append(f"{v['code']} {v['message']}")
    for i, r in enumerate(rows):
        r["ruff"] = found.get((f"f{i}.py", r["docstring_row"]), [])


def fit_calibration(rows: list[dict[str, Any]], out: Path, args: argparse.Namespace) -> None:
    """Fit the docstring calibration on `rows` (the fit split) and choose its threshold and kinds."""
    usable = [r for r in rows if "features" in r]
    labels = [r["model_rouge"] >= RIGHT_CUT for r in usable]
    if not usable or len(set(labels)) < 2:
        raise SystemExit(f"cannot fit: {len(usable)} usable rows, labels {set(labels)}")
    fitted = calibration.fit([r["features"] for r in usable], labels, confidence.FEATURES)
    probs = [fitted.predict(r["features"]) for r in usable]
    for r, p in zip(usable, probs, strict=True):
        r["fit_probability"] = p

    def written(threshold: float) -> float:
        """Mean ROUGE-L of the summaries written over all rows, with the model's where p >= threshold."""
        total = 0.0
        for r in rows:
            use = "fit_probability" in r and r["fit_probability"] >= threshold
            total += r["model_rouge"] if use else r["names"]["rouge"]
        return total / len(rows)

    grid = [round(0.05 * k, 2) for k in range(1, 20)]
    best = max(grid, key=written)
    # 0.5 ("more likely right than not") unless another threshold writes clearly closer summaries
    threshold = best if written(best) - written(0.5) >= MARGIN else 0.5
    meta = {
        "what": "probability that the model's docstring summary is right: first-sentence ROUGE-L against the "
        f"docstring a person wrote >= {RIGHT_CUT}",
        "right_cut": RIGHT_CUT,
        "threshold": threshold,
        "mean_rouge_fit": {"names": round(written(1.01), 4), "at_threshold": round(written(threshold), 4)},
        "fitted_on": f"{len(usable)} held-out definitions (fit split of {args.corpus.name}/heldout.jsonl, "
        f"{args.limit} per kind, seed {args.seed}); {len(rows) - len(usable)} more whose summary the monitor refused",
        "ece_fit": round(calibration.expected_calibration_error(probs, labels), 4),
        "right_share_fit": round(sum(labels) / len(labels), 4),
    }
    final = calibration.Calibrator(fitted.features, fitted.weights, fitted.bias, fitted.mean, fitted.scale, meta)
    final.save(out)
    print(f"wrote {out}: threshold {threshold}, ECE on the fit split {meta['ece_fit']}, {json.dumps(meta)}")


def report(rows: list[dict[str, Any]], args: argparse.Namespace, elapsed: float, cfg: DocstringConfig) -> None:
    kinds = sorted({r["kind"] for r in rows}, key=KINDS.index)
    print(f"## Docstring quality ({args.style}, model {args.model!r}, {len(rows)} held-out definitions, ")
    print(f"split {args.split}, up to {args.limit} per kind, seed {args.seed})\n")
    print("First-sentence ROUGE-L against the docstring a person wrote (mean), and the share of docstrings with a")
    print("sentence that contradicts the code (the monitor's checks):\n")
    print("| choice | " + " | ".join(f"ROUGE-L {k} (n={sum(r['kind'] == k for r in rows)})" for k in kinds))
    print(" | ROUGE-L all | parameter ROUGE-L | contradictions |")
    print("|---" * (len(kinds) + 4) + "|")
    for choice in CHOICES:
        cells = [f"{mean(r[choice]['rouge'] for r in rows if r['kind'] == k):.3f}" for k in kinds]
        overall = mean(r[choice]["rouge"] for r in rows)
        param_scores = [v for r in rows for v in r[choice]["params"].values()]
        params = f"{mean(param_scores):.3f} (n={len(param_scores)})" if param_scores else "-"
        bad = sum(bool(r[choice]["contradictions"]) for r in rows) / len(rows)
        print(f"| {choice} | " + " | ".join(cells) + f" | {overall:.3f} | {params} | {bad:.1%} |")
    refused_originals = [r for r in rows if r["original_refused"]]
    print(f"\nPeople's own first sentences the checks would refuse: {len(refused_originals)} / {len(rows)}")
    for r in refused_originals[:5]:
        print(f"- `{r['name']}`: {r['original']!r}: {r['original_refused']}")
    reasons: dict[str, int] = {}
    for r in rows:
        for reason in r["model"]["contradictions"].values():
            kind = re.sub(r"`[^`]*`|\b[A-Z]\w*(Error|Exception)\b", "X", reason)
            reasons[kind] = reasons.get(kind, 0) + 1
    print("\nContradictions in the model's cleaned text, by kind (slots):\n")
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"- {count}: {reason}")
    passing = sum(not r["ruff"] for r in rows)
    print(f"\nWritten docstrings passing ruff's D rules ({RUFF_CONVENTION[args.style]}): {passing} / {len(rows)}")
    model_used = [r for r in rows if "summary" not in r["fallbacks"]]
    print(f"Docstrings whose summary is the model's by default: {len(model_used)} / {len(rows)}")
    print(f"Seconds per docstring (one thread, this machine): {elapsed / max(len(rows), 1):.2f}\n")
    calibrated = [r for r in rows if r["probability"] is not None and "model_rouge" in r]
    if calibrated:
        probs = [r["probability"] for r in calibrated]
        labels = [r["model_rouge"] >= RIGHT_CUT for r in calibrated]
        ece = calibration.expected_calibration_error(probs, labels)
        print(f"Calibration on {len(calibrated)} model summaries the monitor let through (right: ROUGE-L >= ")
        print(f"{RIGHT_CUT}; {sum(labels)} right): ECE {ece:.3f}; precision at coverage:")
        for coverage, precision, cut in calibration.precision_at_coverage(probs, labels):
            print(f"- top {coverage:.0%}: {precision:.1%} right (p >= {cut:.2f})")
        threshold = confidence.threshold(confidence.calibrator_for(args.model), cfg.min_probability)
        cover, precision = calibration.at_threshold(probs, labels, threshold)
        print(f"- at the threshold {threshold:.2f}: {cover:.1%} of them written, {precision:.1%} right\n")
    if args.examples:
        print(f"### {args.examples} examples (drawn with seed {args.seed})\n")
        rng = random.Random(args.seed)
        for r in rng.sample(rows, min(args.examples, len(rows))):
            why = r["refused"].get("summary")
            model_text = r.get("model_summary") or repr(r["model_raw"])  # the raw text when nothing was usable
            print(f"`{r['name']}` ({r['kind']}); ROUGE-L default {r['default']['rouge']:.2f}, "
                  f"model {r['model']['rouge']:.2f}")  # fmt: skip
            print(f"- person: {r['original']}")
            print(f"- written: {r['default']['summary']}")
            print(f"- model: {model_text}" + (f" (refused: {why})" if why else ""))
            print(f"- names only: {r['names']['summary']}")
            print()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=Path("runs/corpus"))
    parser.add_argument("--model", default="default")
    parser.add_argument("--style", default="google", choices=["google", "numpy", "sphinx"])
    parser.add_argument("--split", default="report", choices=["report", "fit"])
    parser.add_argument("--limit", type=int, default=100, help="definitions per kind (function, class, module)")
    parser.add_argument("--kinds", default="function,class,module")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=0)
    parser.add_argument("--fit", type=Path, default=None, help="fit the calibration on this split; write it here")
    parser.add_argument("--out", type=Path, default=Path("runs/docstrings_quality.json"))
    args = parser.parse_args()

    from infill.docstrings.run import model_filler_for

    cfg = DocstringConfig(style=args.style, model=args.model, seed=args.seed)
    filler = model_filler_for(cfg)
    items = sample(held_out_items(args.corpus, args.split), args.limit, args.seed, args.kinds.split(","))
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for i, item in enumerate(items):
        row = measure(item, filler, cfg)
        if row is not None:
            rows.append(row)
        print(f"\r{i + 1}/{len(items)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    elapsed = time.perf_counter() - started
    ruff_violations(rows, RUFF_CONVENTION[args.style])
    if args.fit is not None:
        fit_calibration(rows, args.fit, args)
    else:
        report(rows, args, elapsed, cfg)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
