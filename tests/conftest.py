import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
SCRIPTS = ROOT / "scripts"
DATA = ROOT / "data"


def planted_line(script: Path, marker: str = "# PLANTED") -> int:
    for i, line in enumerate(script.read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"no {marker!r} marker in {script}")


def torchneck(*args, cwd=None, timeout=300, module=False, env=None):
    """Run the real CLI in a subprocess (`env`: extra environment variables)."""
    cmd = [sys.executable, "-m", "torchneck", *args] if module else \
        [sys.executable, "-c", "import sys; from torchneck.cli import main; sys.exit(main())", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="100", **(env or {}))
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


SCHEMA = json.loads((ROOT.parent / "docs" / "report.schema.json").read_text())


def validate_report(report) -> dict:
    """Every report the tests read is checked against the published JSON Schema. A typed
    `Report` is checked as report.json would hold it, and returned so."""
    import jsonschema

    if not isinstance(report, dict):
        from torchneck.model.base import to_builtins

        report = to_builtins(report)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    return report


def read_report(run_dir: Path) -> dict:
    path = run_dir if run_dir.suffix == ".json" else run_dir / "report.json"
    return validate_report(json.loads(path.read_text()))


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path / "run"
