"""Regenerate the golden reports (only on purpose: when a change of the reports is intended).

    python tests/golden/regenerate.py

For every trace in tests/data, `torchneck analyze TRACE --json`, and for every run directory there,
`torchneck report` of a copy of it: written here as <name>.json, normalised (see `normalise`).
tests/test_golden.py compares fresh reports against these files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"


def sources() -> list[tuple[str, list[str], Path | None]]:
    """(golden name, torchneck arguments, run directory to copy) for every bundled input."""
    out: list[tuple[str, list[str], Path | None]] = []
    for trace in sorted(DATA.glob("*.json.gz")):
        out.append((trace.name.removesuffix(".json.gz"), ["analyze", str(trace), "--quiet"], None))
    for run_dir in sorted(p for p in DATA.iterdir() if (p / "run.json").exists()):
        out.append((f"run__{run_dir.name}", ["report", "--quiet"], run_dir))
    return out


def normalise(report: dict) -> dict:
    """Drop what depends on where and with which version the report was made, not on the input."""
    report = json.loads(json.dumps(report))
    report.pop("tool", None)
    for rank in report.get("ranks") or []:
        if rank and rank.get("trace"):
            rank["trace"]["path"] = Path(rank["trace"]["path"]).name
    if report.get("run"):
        report["run"].pop("run_dir", None)
    return report


def make_report(args: list[str], run_dir: Path | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        if run_dir is not None:  # `report` writes into the run directory: work on a copy
            copy = Path(tmp) / run_dir.name
            shutil.copytree(run_dir, copy)
            args = [args[0], str(copy), *args[1:]]
        proc = subprocess.run([sys.executable, "-m", "torchneck", *args, "--json", str(out)],
                              capture_output=True, text=True, cwd=tmp)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"torchneck {' '.join(args)}: exit {proc.returncode}: {proc.stderr[-500:]}")
        return normalise(json.loads(out.read_text()))


def main() -> None:
    for name, args, run_dir in sources():
        (HERE / f"{name}.json").write_text(json.dumps(make_report(args, run_dir), indent=1, sort_keys=True) + "\n")
        print(name)


if __name__ == "__main__":
    main()
