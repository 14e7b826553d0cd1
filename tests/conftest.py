"""Test-session settings: `--daemon auto` must not start per-user daemons from the test suite (tests that
exercise the daemon build their own environment without this variable: fixtures_serve.plugin_env)."""

from __future__ import annotations

import os

os.environ["INFILL_NO_DAEMON"] = "1"
