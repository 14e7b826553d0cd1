"""Errors that reach the top of the `infill` group become one line on stderr and a documented exit code."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from infill.cli import main


def test_input_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["train", "block-diffusion", "--data", str(empty), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"infill: error: no training text found in {empty} (pattern *.py)"]
    assert not (tmp_path / "o").exists()


def test_unexpected_exception_is_one_line_and_exit_123(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import infill.training.blockdiff as bd

    def boom(*_args: object, **_kwargs: object) -> list[str]:
        raise RuntimeError("kaput")

    monkeypatch.setattr(bd, "load_texts", boom)
    monkeypatch.delenv("INFILL_DEBUG", raising=False)
    args = ["train", "block-diffusion", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 123
    assert result.stderr.strip() == "infill: internal error: RuntimeError: kaput (INFILL_DEBUG=1 shows where)"
    assert "Traceback" not in result.stderr


def test_debug_env_shows_the_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import infill.training.blockdiff as bd

    def boom(*_args: object, **_kwargs: object) -> list[str]:
        raise RuntimeError("kaput")

    monkeypatch.setattr(bd, "load_texts", boom)
    monkeypatch.setenv("INFILL_DEBUG", "1")
    args = ["train", "block-diffusion", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert isinstance(result.exception, RuntimeError)


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (RuntimeError("kaput\n  at layer 3\n"), 123, "infill: internal error: RuntimeError: kaput (INFILL_DEBUG=1"),
        (ValueError("\nshape mismatch: [2, 3]\nvs [3, 2]"), 123, "infill: internal error: ValueError: shape mismatch"),
        (OSError("disk full\nwhile writing"), 2, "infill: error: disk full"),
    ],
)
def test_multi_line_messages_are_cut_to_one_line(
    error: Exception, code: int, line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception whose message spans lines (torch quotes tensors, JSON errors quote input) still gives the
    one stderr line every error promises: its first non-blank line."""
    import infill.training.blockdiff as bd

    def boom(*_args: object, **_kwargs: object) -> list[str]:
        raise error

    monkeypatch.setattr(bd, "load_texts", boom)
    monkeypatch.delenv("INFILL_DEBUG", raising=False)
    args = ["train", "block-diffusion", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code
    (printed,) = result.stderr.splitlines()
    assert printed.startswith(line), printed
