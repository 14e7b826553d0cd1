"""`infill eval calibrate`: fit a model's calibrated confidence on held-out evaluation reports and judge it on
others (infill.evaluation.confidence). Attached to the `eval` group by infill/commands/evaluate.py."""

from __future__ import annotations

import json
from pathlib import Path

import click

from infill.clitypes import FiniteFloatRange, NonEmptyPath, value_option
from infill.errors import InputError

REPORT = NonEmptyPath(exists=True, dir_okay=False, path_type=Path)


@click.command("calibrate")
@click.argument("fit_reports", nargs=-1, required=True, type=REPORT)
@click.option("--test", "test_reports", multiple=True, type=REPORT, help="A report to judge it on (repeatable).")
@click.option(
    "--out",
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="Write the calibration here (a model folder's calibration.json is read by infill fill).",
)
@value_option(
    "--threshold",
    FiniteFloatRange(0.0, 1.0),
    0.5,
    "The confidence to report coverage and precision at (the editor's default threshold).",
)
@value_option(
    "--test-share",
    FiniteFloatRange(0.0, 0.9),
    0.0,
    "Keep this share of the fit reports' files (by a hash of their names) out of the fit, to judge on.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the judgements as JSON.")
def calibrate(
    fit_reports: tuple[Path, ...],
    test_reports: tuple[Path, ...],
    out: Path | None,
    threshold: float,
    test_share: float,
    as_json: bool,
) -> None:
    """Fit the calibrated confidence of fills on heldout-exact reports (written with -o); judge it on --test
    reports (held-out lines the fit never saw, HumanEval): ECE, reliability table, precision at coverage."""
    from infill.evaluation.confidence import fit_reports as fit
    from infill.evaluation.confidence import judge, read_report, render

    fitted, held = [], []
    for report in (read_report(p) for p in fit_reports):
        part, rest = report.split(test_share) if test_share else (report, None)
        fitted.append(part)
        held += [rest] if rest is not None else []
    calibrator = fit(fitted, {"threshold": threshold, "test_share": test_share})
    others = held + [read_report(p) for p in test_reports]
    judgements = [judge(calibrator, r, threshold) for r in fitted + others]
    if out is not None:
        if out.is_dir():
            raise InputError(f"--out {out}: a folder; give the file, e.g. {out / 'calibration.json'}")
        calibrator.save(out)
    if as_json:
        click.echo(json.dumps({"calibration": calibrator.to_json(), "judgements": judgements}, indent=1))
        return
    click.echo(
        f"fitted on {calibrator.meta['fitted_on']['fills']} held-out fills ({calibrator.meta['decoder']}): "
        + ", ".join(f"{f} {w:+.3f}" for f, w in zip(calibrator.features, calibrator.weights, strict=True))
        + f", bias {calibrator.bias:+.3f}"
    )
    for j in judgements:
        for line in render(j):
            click.echo(line)
    if out is not None:
        click.echo(f"wrote {out}")
