"""Overhead of `torchneck run` (default options) against the bare script, wall time, CPU time and
peak memory.

Workloads: training loops (an MLP with a DataLoader, tiny ops with an optimizer), an inference
loop of an nn.Module, and programs without any step clock: a loop of tiny tensor ops, a pure
Python loop, one big function of large ops, a generator pipeline, functional inference without
modules, plus a torch.compile'd model and the profiler tutorial's example. Each runs bare and
under torchneck, in pairs back to back (bare then torchneck, then the other way round), in child
processes of this one with OMP_NUM_THREADS=1; each child's CPU time and peak RSS come from
os.wait4 (its own rusage, not a running total). Times and memory are medians over the repeats;
a ratio is the median of the pairs' ratios. The table gives the ratios and the targets: median
wall ratio <= 1.15, every workload <= 1.3, peak RSS <= bare + 300 MB.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOADS = sorted((HERE / "workloads").glob("*.py")) + [HERE.parent / "examples" / "tutorial_mask.py"]

TARGET_MEDIAN = 1.15
TARGET_EACH = 1.3
TARGET_RSS_MB = 300.0


def measured(cmd: list[str], env: dict) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one child process."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace")[-3000:]
            raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n{tail}")
    rss_mb = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / 2**20
    return wall, usage.ru_utime + usage.ru_stime, rss_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", nargs="*", metavar="NAME", help="workloads whose file name contains NAME")
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # torchneck's modules byte-compiled, as `pip install` leaves them: an editable install run
    # with PYTHONDONTWRITEBYTECODE=1 (this project's CI) compiles its ~90 modules from source on
    # every run, 0.15 s that no installed copy pays.
    import torchneck

    compileall.compile_dir(Path(torchneck.__file__).parent, quiet=1)
    workloads = [w for w in WORKLOADS if not args.only or any(n in w.name for n in args.only)]
    rows = []
    print(f"{'workload':22s} {'bare s':>7s} {'tn s':>7s} {'wall x':>7s} {'cpu x':>6s} "
          f"{'RSS bare':>9s} {'RSS tn':>8s} {'+RSS MB':>8s}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for script in workloads:
            bare, run = [], []
            for i in range(args.repeat):
                out = Path(tmp) / f"{script.stem}-{i}"
                bare_cmd = [sys.executable, str(script)]
                run_cmd = [sys.executable, "-m", "torchneck", "run", "--quiet", "--out", str(out), str(script)]
                if i % 2:  # every other pair the other way round: a machine slowing down favours neither
                    run.append(measured(run_cmd, env))
                    bare.append(measured(bare_cmd, env))
                else:
                    bare.append(measured(bare_cmd, env))
                    run.append(measured(run_cmd, env))
            bw, bc, br = (statistics.median(m[k] for m in bare) for k in range(3))
            rw, rc, rr = (statistics.median(m[k] for m in run) for k in range(3))
            # Ratios of the pairs, each measured back to back on the same machine state; their
            # median. A ratio of medians mixes runs seconds apart, and this shared VM's speed
            # swings by tens of percent between them.
            wall_x = statistics.median(r[0] / b[0] for r, b in zip(run, bare))
            cpu_x = statistics.median(r[1] / b[1] for r, b in zip(run, bare))
            rows.append((script.name, bw, rw, wall_x, cpu_x, br, rr, rr - br))
            print(f"{script.name:22s} {bw:7.2f} {rw:7.2f} {wall_x:7.2f} {cpu_x:6.2f} "
                  f"{br:9.0f} {rr:8.0f} {rr - br:8.0f}", flush=True)
    median = statistics.median(r[3] for r in rows)
    worst = max(rows, key=lambda r: r[3])
    rss = max(rows, key=lambda r: r[7])
    print(f"median wall x{median:.2f} (target <= {TARGET_MEDIAN}): {'met' if median <= TARGET_MEDIAN else 'MISSED'}")
    print(f"worst wall x{worst[3]:.2f} ({worst[0]}; target <= {TARGET_EACH} each): "
          f"{'met' if worst[3] <= TARGET_EACH else 'MISSED'}")
    print(f"largest peak RSS increase {rss[7]:.0f} MB ({rss[0]}; target <= {TARGET_RSS_MB:.0f} MB each): "
          f"{'met' if rss[7] <= TARGET_RSS_MB else 'MISSED'}")
    print(f"median cpu x{statistics.median(r[4] for r in rows):.2f}")


if __name__ == "__main__":
    main()
