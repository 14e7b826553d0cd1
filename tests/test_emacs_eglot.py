"""`infill lsp` in a real Emacs with eglot, when `emacs` is on PATH and eglot loads (Debian: `emacs-nox
elpa-eglot`); skipped otherwise. CI does not install Emacs: the server-side tests in tests/test_lsp_server.py
guard the same behaviour (one-line items, no filterText, `$` in JavaScript words, code actions, a command
answered when its fill starts).

`emacs --batch` opens each file with eglot against the tests' scripted models, calls `completion-at-point` (the
default completion UI: no company, no corfu) and `eglot-code-actions`, and writes what the buffer became.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_lsp import SLOW_MODEL, SLOW_SECONDS, lsp_env

pytestmark = pytest.mark.slow

# each case: a file, the model, and the text typed at the end of a line (the cursor stays after it)
DRIVER = r"""
(require 'eglot)
(require 'json)
(setq eglot-server-programs
      `(((python-mode js-mode) . (,(getenv "INFILL_PYTHON") "-m" "infill" "lsp"
                                  :initializationOptions (:threshold 0 :model ,(getenv "INFILL_MODEL"))))))
(setq eglot-sync-connect 120 eglot-connect-timeout 180 eglot-confirm-server-initiated-edits nil)
(setq last-nonmenu-event ?a) ; a key, not a mouse click: one action is picked without a menu
(let ((results nil) (file (getenv "INFILL_FILE")))
  (find-file file)
  (if (string-suffix-p ".js" file) (js-mode) (python-mode))
  (apply #'eglot (eglot--guess-contact))
  (goto-char (point-min))
  (forward-line (string-to-number (getenv "INFILL_LINE")))
  (end-of-line)
  (insert (getenv "INFILL_TYPED"))
  (backward-char (string-to-number (or (getenv "INFILL_BACK") "0")))
  (unless (getenv "INFILL_ACTION") (completion-at-point))
  (push (cons "completed" (buffer-substring-no-properties (line-beginning-position) (line-end-position))) results)
  (when (getenv "INFILL_ACTION")
    (goto-char (point-min))
    (when (getenv "INFILL_TIMEOUT") ; the model loaded and the actions asked once, then eglot waits less
      (jsonrpc-request (eglot-current-server) :test/idle nil)
      (eglot-code-actions (point) (point) (getenv "INFILL_ACTION"))
      (setq jsonrpc-default-request-timeout (string-to-number (getenv "INFILL_TIMEOUT"))))
    (condition-case err
        (eglot-code-actions (point) (point) (getenv "INFILL_ACTION") t)
      (error (push (cons "error" (error-message-string err)) results)))
    (let ((deadline (+ (float-time) 60)))
      (while (and (< (float-time) deadline) (not (buffer-modified-p))) (accept-process-output nil 0.1))))
  (eglot--signal-textDocument/didChange)
  (let ((copy (jsonrpc-request (eglot-current-server) :test/document
                               (list :uri (eglot--path-to-uri (buffer-file-name))))))
    (push (cons "server" (plist-get copy :text)) results))
  (push (cons "buffer" (buffer-substring-no-properties (point-min) (point-max))) results)
  (with-temp-file (getenv "INFILL_OUT") (insert (json-encode results)))
  (eglot-shutdown (eglot-current-server)))
"""


def _emacs() -> str:
    found = shutil.which("emacs")
    if found is None:
        pytest.skip("emacs is not installed (Debian: apt-get install emacs-nox elpa-eglot)")
    loads = subprocess.run([found, "--batch", "--eval", "(require 'eglot)"], capture_output=True, timeout=60)
    if loads.returncode != 0:
        pytest.skip("eglot does not load in this Emacs")
    return found


def _run(
    tmp_path: Path,
    name: str,
    text: str,
    model: str,
    line: int,
    typed: str,
    action: str = "",
    back: int = 0,
    timeout: int = 0,
) -> dict[str, str]:
    emacs = _emacs()
    source = tmp_path / name
    source.write_text(text)
    driver = tmp_path / "driver.el"
    driver.write_text(DRIVER)
    out = tmp_path / "out.json"
    env = lsp_env(
        INFILL_PYTHON=sys.executable,
        INFILL_MODEL=model,
        INFILL_FILE=str(source),
        INFILL_LINE=str(line),
        INFILL_TYPED=typed,
        INFILL_OUT=str(out),
        INFILL_BACK=str(back),
        INFILL_NO_DAEMON="1",
        HOME=str(tmp_path),  # no user init, no eglot settings of the machine's user
    )
    if action:
        env["INFILL_ACTION"] = action
    if timeout:
        env["INFILL_TIMEOUT"] = str(timeout)
    done = subprocess.run([emacs, "--batch", "-l", str(driver)], env=env, capture_output=True, timeout=300)
    assert out.exists(), done.stderr.decode("utf-8", "replace")[-3000:]
    result: dict[str, str] = json.loads(out.read_text())
    assert result["server"] == result["buffer"]  # eglot's didChange after the edits kept the server in step
    return result


def test_eglot_completes_one_line_of_a_block(tmp_path: Path) -> None:
    text = "def mean(values):\n    return 0\n"
    result = _run(tmp_path, "stats.py", text, "scripted-block", 2, "\ndef median(values):\n    ")
    assert result["completed"] == "    total = sum(values)"  # the block's first line, no more
    assert result["buffer"].endswith("def median(values):\n    total = sum(values)")


def test_eglot_leaves_no_blanks_after_a_completion_inside_a_blank_lines_indentation(tmp_path: Path) -> None:
    """The cursor in the middle of a blank line's indentation: the item's edit replaces the blanks after the
    cursor too (to the line's end), so the line is the model's line and nothing trails it."""
    text = "def mean(values):\n    return 0\n"
    result = _run(tmp_path, "stats.py", text, "scripted-block", 2, "\ndef median(values):\n        ", back=4)
    assert result["completed"] == "    total = sum(values)"


def test_eglot_completes_after_a_dollar_word_in_javascript(tmp_path: Path) -> None:
    text = "const $total = 1;\nfunction f() {\n  return 1;\n}\n"
    result = _run(tmp_path, "app.js", text, "scripted-word", 2, "\n  const x = $tot")
    assert result["completed"] == "  const x = $total / len(values)"


def test_eglot_code_action_adds_a_docstring(tmp_path: Path) -> None:
    text = "def mean(values):\n    total = sum(values)\n    return total / len(values)\n"
    result = _run(tmp_path, "stats.py", text, "scripted-lsp", 1, "", action="refactor.rewrite")
    assert "error" not in result
    assert result["buffer"].startswith('def mean(values):\n    """')


def test_eglot_applies_a_code_action_slower_than_its_request_timeout(tmp_path: Path) -> None:
    """eglot gives up on a request after `jsonrpc-default-request-timeout` (10 s; 1 s here) with "Timed out":
    the command is answered when its fill starts, and the edit the slow fill makes is applied when it comes."""
    assert SLOW_SECONDS > 1
    text = "def mean(values):\n    total = sum(values)\n    return total / len(values)\n"
    result = _run(tmp_path, "stats.py", text, SLOW_MODEL, 1, "", action="refactor.rewrite", timeout=1)
    assert "error" not in result, result["error"]
    assert result["buffer"].startswith('def mean(values):\n    """')
