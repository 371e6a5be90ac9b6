"""Score torchneck's diagnosis on the zoo: programs with one planted cause each, and clean ones.

    OMP_NUM_THREADS=1 python benchmarks/zoo_score.py [--only NAME ...] [--keep DIR] [--jobs N]
    python benchmarks/zoo_score.py --rediagnose DIR   # today's rules on the runs a --keep DIR left

Runs `torchneck run --json` on every program of benchmarks/zoo/manifest*.json (see zoo_lib.py)
and prints, per program, the expected kind, the top finding (kind, line), whether both are
right, and the top finding's estimated saving (its share of the run) beside the saving measured
by removing the plant (`measured.saving_share_of_work`, written by zoo_verify.py). torchneck's run
clock starts after it has imported torch, so its share of the run is a share of the program's
work, and the measured share is taken of the same: the planted run minus a bare `import torch`
(the share of the whole process, start-up included, is smaller by that start-up). Then the score
per kind and overall: `top-1 correct (kind and planted line) N/M, kind right N/M, false high
findings K, estimates within 30% of the measured saving E/M`. A clean program (expect null) is correct when it has no
`high` finding. A cause no kind names yet (expect "new:<name>") is correct when the top finding
points at the planted line and its fix contains one of the entry's `fix_mentions`. A program that
fails under `torchneck run` (an exit code other than 0) is wrong whatever its findings. Exit code 1
when the top-1 score is under 95% or a clean program has a high finding.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from zoo_lib import ZOO, ZooProgram, load_programs

TARGET = 0.95
ESTIMATE_TOLERANCE = 0.30
"""The top finding's estimated saving must be within 30 % (relative) of the measured saving."""


def run_one(prog: ZooProgram, out: Path, rediagnose: Path | None = None) -> tuple[dict | None, float, str]:
    """Run the program under `torchneck run`, or with `rediagnose`, re-analyse its kept run
    directory there (`torchneck report`: today's rules on that run's recorded evidence)."""
    report = out / f"{prog.name}.json"
    t0 = time.perf_counter()
    if rediagnose is not None:
        cmd = ["report", "--quiet", "--json", str(report), str(rediagnose / prog.name)]
    else:
        cmd = ["run", "--quiet", "--json", str(report), "--out", str(out / prog.name), *prog.torchneck_run_args(),
               prog.script, *prog.args]
    proc = subprocess.run([sys.executable, "-m", "torchneck", *cmd],
                          capture_output=True, text=True, cwd=ZOO, env=dict(os.environ, OMP_NUM_THREADS="1"))
    wall = time.perf_counter() - t0
    if not report.exists():
        return None, wall, (proc.stderr.strip().splitlines() or ["no report"])[-1]
    return json.loads(report.read_text()), wall, ""


def _places(finding: dict) -> list[tuple[str, int]]:
    """The lines of the user's code a finding points at."""
    return [(w["file"], w["line"]) for w in finding.get("where") or []]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="score only these programs (names or file stems)")
    ap.add_argument("--keep", help="keep run directories and reports here")
    ap.add_argument("--jobs", type=int, default=1, help="programs run at once (default 1: timings stay clean)")
    ap.add_argument("--rediagnose", metavar="DIR",
                    help="do not run the programs: re-analyse the run directories a --keep DIR run left there "
                         "with the current rules (fast, for work on the rules; the runs' timings are kept)")
    ns = ap.parse_args()
    programs = []
    for prog in load_programs(ns.only):
        if (why := prog.unavailable()) and not ns.rediagnose:
            print(f"{prog.name}: skipped ({why})")
        else:
            programs.append(prog)
    again = Path(ns.rediagnose) if ns.rediagnose else None
    out = Path(ns.keep) if ns.keep else Path(tempfile.mkdtemp(prefix="torchneck-zoo-"))
    if again is not None and out.resolve() == again.resolve():
        out = Path(tempfile.mkdtemp(prefix="torchneck-zoo-rediagnosed-"))  # keep the runs' own reports
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max(ns.jobs, 1)) as pool:
        results = list(pool.map(lambda p: run_one(p, out, again), programs))
    by_kind: dict[str, list[bool]] = defaultdict(list)
    top_ok = kind_ok = false_high = estimates_ok = estimated = 0
    planted = [p for p in programs if p.expect]
    print(f"{'program':34s} {'expected':24s} {'':6s} {'est.':>5s} {'meas.':>5s}  top finding")
    for prog, (report, wall, error) in zip(programs, results):
        # the program must run under torchneck as it does alone: the findings of a failed run count for nothing
        crashed = bool(report) and (report.get("run") or {}).get("exit_code") not in (0, None)
        findings = report["findings"] if report and not crashed else []
        top = findings[0] if findings else None
        highs = [f for f in findings if f["severity"] == "high"]
        est = meas = None
        if prog.expect is None:
            ok_kind, ok_line = not highs and not crashed, True
            false_high += len(highs)
            got = ", ".join(f"{f['kind']}(high)" for f in highs) or "no high finding"
        else:
            line = prog.planted_line()
            at_line = bool(top) and any(ln == line and file.endswith(prog.planted or prog.script)
                                        for file, ln in _places(top))
            if prog.expect.startswith("new:"):  # no kind names it: the line and a fitting fix do
                fix = (top or {}).get("fix", "").lower()
                ok_kind = ok_line = at_line and any(w.lower() in fix for w in prog.fix_mentions)
            else:
                ok_kind = bool(top) and top["kind"] == prog.expect
                ok_line = ok_kind and at_line
            real = {a.get("kind") for a in prog.also}  # other causes measured real in the program
            false_high += len([f for f in highs if f["kind"] != prog.expect and f["kind"] not in real
                               and not (f is top and ok_kind)])
            got = f"{top['kind']} @ {','.join(str(w['line']) for w in top['where'][:3]) or '-'}" if top else "none"
            got += f"  [planted line {line}]"
            if ok_kind and prog.measured:
                est, meas = top.get("saving_pct", 0.0) / 100, prog.measured.get("saving_share_of_work")
                if meas:
                    estimated += 1
                    estimates_ok += abs(est - meas) <= ESTIMATE_TOLERANCE * meas
            top_ok += ok_kind and ok_line  # the measure: the right kind at the planted line
            kind_ok += ok_kind
        if crashed:
            got += f"  CRASHED under torchneck: {(report.get('run') or {}).get('error')}"
        by_kind[prog.expect or "(clean)"].append(ok_kind and ok_line)
        mark = "ok" if ok_kind and ok_line else "WRONG"
        e = f"{100 * est:4.0f}%" if est is not None else "    -"
        m = f"{100 * meas:4.0f}%" if meas else "    -"
        print(f"{prog.name:34s} {prog.expect or '(clean)':24s} {mark:6s} {e} {m}  {got}"
              + (f"  ERROR {error}" if error else "") + f"  ({wall:.0f} s)", flush=True)
    print()
    for kind, oks in sorted(by_kind.items()):
        print(f"  {kind:28s} {sum(oks)}/{len(oks)}")
    print()
    share = top_ok / len(planted) if planted else 1.0
    print(f"top-1 correct (kind and planted line) {top_ok}/{len(planted)} ({100 * share:.0f}%), "
          f"kind right {kind_ok}/{len(planted)}, "
          f"false high findings {false_high}, estimates within {100 * ESTIMATE_TOLERANCE:.0f}% of the measured "
          f"saving {estimates_ok}/{estimated}")
    print(f"(reports in {out})")
    return 0 if share >= TARGET and not false_high else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
