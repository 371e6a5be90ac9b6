"""Overhead of `torchneck run` (default mode) against the bare script.

Each workload runs bare and under torchneck, interleaved (bare, run, bare, run, ...), in child
processes of this one with OMP_NUM_THREADS=1. Wall time and CPU time (the children's user+sys)
are medians over the repeats; the ratios are printed per workload and their median at the end.
Target: median wall ratio <= 1.15.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOADS = sorted((HERE / "workloads").glob("*.py")) + [HERE.parent / "examples" / "tutorial_mask.py"]


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for script in WORKLOADS:
            bare, run = [], []
            for i in range(args.repeat):
                bare.append(timed([sys.executable, str(script)], env))
                out = Path(tmp) / f"{script.stem}-{i}"
                run.append(timed([sys.executable, "-m", "torchneck", "run", "--quiet", "--out", str(out),
                                  str(script)], env))
            bw = statistics.median(w for w, _ in bare)
            bc = statistics.median(c for _, c in bare)
            rw = statistics.median(w for w, _ in run)
            rc = statistics.median(c for _, c in run)
            rows.append((script.name, bw, rw, rw / bw, bc, rc, rc / bc))
            print(f"{script.name:22s} bare {bw:6.2f} s  torchneck {rw:6.2f} s  wall x{rw / bw:.2f}  "
                  f"cpu {bc:6.2f} -> {rc:6.2f} s  cpu x{rc / bc:.2f}", flush=True)
    print(f"median wall ratio x{statistics.median(r[3] for r in rows):.2f}  "
          f"median cpu ratio x{statistics.median(r[6] for r in rows):.2f}  (target wall <= 1.15)")


if __name__ == "__main__":
    main()
