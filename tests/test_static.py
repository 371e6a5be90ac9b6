"""The code's own checks, run like any test so CI fails on them: ruff (lint, 120-column lines)
and mypy (the types between stages are the contracts; see pyproject.toml for both configs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_ruff_is_clean():
    p = _run("ruff", "check", "src", "tests", "benchmarks")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def test_mypy_is_clean():
    p = _run("mypy")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


MAX_MODULE_LINES = 700
"""The project's rule (issue 23): a module longer than this is split by job."""


def test_no_module_over_700_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "src" / "torchneck").rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"
