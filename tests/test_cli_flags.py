"""Every decoding and model flag of `infill fill` reaches the frozen request that the API and daemon receive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import infill.commands.fill as fill_module
from infill.cli import main
from infill.commands.fill import FillRequest


def test_flags_reach_the_request(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[FillRequest] = []

    def fake_run_fill(request: Any, on_progress: Any = None) -> dict[str, Any]:
        seen.append(FillRequest.from_dict(request) if isinstance(request, dict) else request)
        return {"exit_code": 0, "stdout": "", "stderr": [], "result": None}

    monkeypatch.setattr(fill_module, "run_fill", fake_run_fill)
    monkeypatch.setenv("INFILL_NO_DAEMON", "1")
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    args = [
        "fill",
        str(src),
        "--span",
        "1:1",
        "--decoder",
        "s2d2",
        "--draft",
        "ngram",
        "--epsilon",
        "0.05",
        "--block-size",
        "8",
        "--threshold",
        "0.8",
        "--unmask-per-step",
        "2",
        "--routing",
        "hysteresis",
        "--gamma",
        "0.5",
        "--revision",
        "code",
        "--mask-token",
        "<|MASK|>",
        "--precision",
        "fp32",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (req,) = seen
    d, m = req.decode, req.model
    assert (d.decoder, d.draft, d.epsilon, d.block_size, d.threshold) == ("s2d2", "ngram", 0.05, 8, 0.8)
    assert (d.unmask_per_step, d.routing, d.gamma) == (2, "hysteresis", 0.5)
    assert (m.revision, m.mask_token, m.bf16) == ("code", "<|MASK|>", False)
    # the request survives the JSON round trip the daemon uses
    assert FillRequest.from_dict(req.to_dict()) == req


def test_max_context_crops_what_the_model_sees(tmp_path: Path) -> None:
    """--max-context: the model sees at most that many tokens around the span, and -v says so; below 32 is a
    usage error."""
    path = tmp_path / "long.py"
    path.write_text("".join(f"value_{i} = {i}\n" for i in range(60)))
    base = ["fill", str(path), "--span", "30", "-o", "-", "-v", "--daemon", "off", "--no-retrieve"]
    r = CliRunner().invoke(main, [*base, "--max-context", "40"])
    assert r.exit_code == 0, r.stderr
    assert "context truncated to --max-context 40 tokens" in r.stderr
    full = CliRunner().invoke(main, base)
    assert full.exit_code == 0 and "truncated" not in full.stderr
    bad = CliRunner().invoke(main, [*base, "--max-context", "31"])
    assert bad.exit_code == 2 and "--max-context" in bad.stderr
