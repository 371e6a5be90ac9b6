"""Score torchneck's diagnosis on the zoo: scripts with one planted bottleneck each.

    OMP_NUM_THREADS=1 python benchmarks/zoo_score.py [--only NAME ...] [--keep DIR]

Runs `torchneck run --json` on every script of benchmarks/zoo/manifest.json and prints, per
script, the expected kind, the top finding (kind, line) and whether both are right, then
`top-1 correct N/M, line correct N/M, false high findings K`. A clean script (expect null) is
correct when it has no `high` finding. Exit code 1 when anything is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ZOO = Path(__file__).resolve().parent / "zoo"


def planted_line(script: Path) -> int | None:
    for i, line in enumerate(script.read_text().splitlines(), 1):
        if "# PLANTED" in line:
            return i
    return None


def run_one(script: Path, out: Path) -> tuple[dict | None, float, str]:
    report = out / f"{script.stem}.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "torchneck", "run", "--quiet", "--json", str(report),
                           "--out", str(out / script.stem), str(script)],
                          capture_output=True, text=True, cwd=ZOO)
    wall = time.perf_counter() - t0
    if not report.exists():
        return None, wall, (proc.stderr.strip().splitlines() or ["no report"])[-1]
    return json.loads(report.read_text()), wall, ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="score only these scripts (file stems)")
    ap.add_argument("--keep", help="keep run directories and reports here")
    ns = ap.parse_args()
    manifest = json.loads((ZOO / "manifest.json").read_text())["scripts"]
    if ns.only:
        manifest = [m for m in manifest if Path(m["script"]).stem in ns.only]
    out = Path(ns.keep) if ns.keep else Path(tempfile.mkdtemp(prefix="torchneck-zoo-"))
    out.mkdir(parents=True, exist_ok=True)
    planted = [m for m in manifest if m["expect"]]
    top_ok = line_ok = false_high = 0
    rows = []
    for m in manifest:
        script = ZOO / m["script"]
        report, wall, error = run_one(script, out)
        findings = report["findings"] if report else []
        top = findings[0] if findings else None
        highs = [f for f in findings if f["severity"] == "high"]
        if m["expect"] is None:
            ok_kind = not highs
            ok_line = True
            false_high += len(highs)
            got = ", ".join(f"{f['kind']}(high)" for f in highs) or "no high finding"
        else:
            line = planted_line(script)
            ok_kind = bool(top) and top["kind"] == m["expect"]
            ok_line = ok_kind and any(w["line"] == line and w["file"].endswith(script.name) for w in top["where"])
            false_high += len([f for f in highs if f["kind"] != m["expect"]])
            got = f"{top['kind']} @ {','.join(str(w['line']) for w in top['where'][:3]) or '-'}" if top else "none"
            got += f"  [planted line {line}]"
        top_ok += ok_kind and m["expect"] is not None
        line_ok += ok_line and m["expect"] is not None
        rows.append((m["script"], m["expect"] or "(clean)", got + (f"  ERROR {error}" if error else ""),
                     "ok" if ok_kind and ok_line else "WRONG", wall))
        print(f"{rows[-1][0]:<30} {rows[-1][1]:<24} {rows[-1][3]:<6} {wall:5.1f}s  {rows[-1][2]}", flush=True)
    print()
    print(f"top-1 correct {top_ok}/{len(planted)}, line correct {line_ok}/{len(planted)}, "
          f"false high findings {false_high}")
    print(f"(reports in {out})")
    return 0 if top_ok == line_ok == len(planted) and not false_high else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
