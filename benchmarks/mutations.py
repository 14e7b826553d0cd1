"""Do the tests notice a broken guard? Each mutation names a file of infill/, a piece of its code, what replaces
it (the bug), and the tests that should then fail. The script copies the project to a temporary folder (this
checkout is never touched), runs those tests there as they are (they must pass), applies the mutation, runs them
again against the copy, and reports whether they caught the bug. A mutation whose code is no longer in the file
is reported as stale: edit its entry.

    python benchmarks/mutations.py                      # every mutation
    python benchmarks/mutations.py qualified-name-last-part-only docstrings-write-guard
    python benchmarks/mutations.py --list

Exit status: 0 when every mutation run was caught, 1 otherwise (missed, stale, broken or error), 2 for a wrong
argument. Add an experiment by adding an entry to MUTATIONS; a test that catches it belongs next to the code it
guards."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("infill", "tests", "grammars", "docs", "examples", "completions", "README.md", "pyproject.toml", ".ci")


@dataclass(frozen=True)
class Mutation:
    path: str  # relative to the project
    code: str  # what the file holds (exactly once)
    bug: str  # what replaces it
    tests: tuple[str, ...]  # pytest arguments that should fail with the bug
    why: str = ""


MUTATIONS: dict[str, Mutation] = {
    "qualified-name-last-part-only": Mutation(
        "infill/spans.py",
        "if full[-len(wanted) :] == wanted and len(full) >= len(wanted):",
        "if full[-1:] == wanted[-1:]:",
        ("tests/test_spans_select.py",),
        "--function A.f also selects B.f",
    ),
    "docstrings-write-guard": Mutation(
        "infill/docstrings/run.py",
        "if result.changed and breaks_syntax(",
        "if False and breaks_syntax(",
        ("tests/test_docstrings_cli.py",),
        "infill docstrings writes a file its new docstrings make unparseable",
    ),
    "speculative-accepts-every-draft": Mutation(
        "infill/decoding/speculative.py",
        "if not r < min(1.0, ratio + rule.epsilon):",
        "if False:",
        ("tests/test_speculative.py", "tests/test_decoding_exactness.py", "-k", "not layouts_have_power"),
        "drafts are kept without the ratio test: not the model's distribution",
    ),
    "span-first-draws-as-tested": Mutation(
        "infill/decoding/speculative.py",
        'if rule.order == "span-first" else None',
        "if False else None",
        ("tests/test_speculative.py",),
        "S2D2 and SSMD draw their uniforms in ASSD's order: other fills for the same seed",
    ),
    "lookup-forgets-the-bonus-row": Mutation(
        "infill/decoding/lookup.py",
        "return Proposal(torch.tensor(drafts), None, bonus=True)",
        "return Proposal(torch.tensor(drafts), None, bonus=False)",
        ("tests/test_decoding_exactness.py", "-k", "lookup"),
        "lookup asks no bonus row: a pass that accepts every draft yields no extra token (slower)",
    ),
    "syntax-check-skipped": Mutation(
        "infill/api.py",
        "return syntax.rejection(patched, edits) if syntax is not None else None",
        "return None",
        ("tests/test_fill_compiles.py", "tests/test_cli_golden.py"),
        "a fill that breaks the file's syntax is written",
    ),
    "import-back-up-a-layer": Mutation(
        "infill/decoding/sampling.py",
        "from typing import TYPE_CHECKING\n",
        "from typing import TYPE_CHECKING\n\nimport infill.api  # noqa: F401\n",
        ("tests/test_layers.py",),
        "a decoder imports the fill core above it",
    ),
}


def copy_project(dest: Path) -> None:
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            skip = ("__pycache__", ".hypothesis", "weights") if name == "infill" else ("__pycache__", ".hypothesis")
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns(*skip))
        elif source.exists():
            shutil.copy2(source, dest / name)
    if (ROOT / "infill" / "weights").exists():  # the shipped models, read only: linked, not copied
        os.symlink(ROOT / "infill" / "weights", dest / "infill" / "weights")


def pytest(dest: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    """Run pytest on `tests` in the copy at `dest`, importing infill from the copy: (exit status, summary line)."""
    env = {**os.environ, "PYTHONPATH": str(dest), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    result = subprocess.run(argv, cwd=dest, env=env, capture_output=True, text=True)
    return result.returncode, (result.stdout.strip().splitlines() or [""])[-1]


def run(mutation: Mutation, baseline: bool) -> tuple[str, str]:
    """The verdict and pytest's summary line. Verdicts: 'caught' (the tests failed, or could not even be
    collected, with the bug), 'missed' (they passed), 'stale' (the code to mutate is not in the file exactly
    once), 'broken' (the tests already fail without the bug, so failing with it proves nothing) or 'error'
    (pytest could not run them: a wrong test path, no test selected)."""
    with tempfile.TemporaryDirectory(prefix="infill-mutation-") as tmp:
        dest = Path(tmp)
        copy_project(dest)
        target = dest / mutation.path
        text = target.read_text(encoding="utf-8")
        if text.count(mutation.code) != 1:
            return "stale", f"{mutation.code!r} is not in {mutation.path} exactly once"
        if baseline:
            status, summary = pytest(dest, mutation.tests)
            if status != 0:
                return ("broken" if status == 1 else "error"), f"without the bug: {summary}"
        target.write_text(text.replace(mutation.code, mutation.bug), encoding="utf-8")
        status, summary = pytest(dest, mutation.tests)
        return {0: "missed", 1: "caught", 2: "caught"}.get(status, "error"), f"pytest exit {status}: {summary}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("-q", "--quiet", action="store_true", help="only the verdicts, not pytest's summaries")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the run of each mutation's tests without the bug (faster; a test already failing then reads "
        "as caught)",
    )
    args = parser.parse_args()
    if args.list:
        for name, mutation in MUTATIONS.items():
            print(f"{name:34} {mutation.path:32} {mutation.why}")
        return 0
    unknown = [n for n in args.names if n not in MUTATIONS]
    if unknown:
        parser.error(f"unknown mutation(s): {', '.join(unknown)} (see --list)")
    verdicts = {}
    for name in args.names or list(MUTATIONS):
        start = time.perf_counter()
        verdicts[name], summary = run(MUTATIONS[name], not args.no_baseline)
        print(f"{verdicts[name]:7} {name:34} {time.perf_counter() - start:6.1f} s  {MUTATIONS[name].why}", flush=True)
        if not args.quiet:
            print(f"{'':7} {summary}", flush=True)
    caught = sum(v == "caught" for v in verdicts.values())
    print(f"{caught} of {len(verdicts)} mutations caught")
    return 0 if caught == len(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
