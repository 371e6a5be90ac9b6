"""Verify that every zoo plant is real: the fixed program must be at least 1.7x faster.

    OMP_NUM_THREADS=1 python benchmarks/zoo_verify.py [--only NAME ...] [--repeat 3] [--write]

For each planted program (see zoo_lib.py for the manifests), runs, interleaved and `--repeat`
times: `python -c "import torch"` (the start-up every program pays), the program as planted,
and the program with its `fixed_args`. The medians give:

- work: wall time minus the start-up baseline (importing torch is not the program's work);
- speedup: planted work / fixed work (target >= 1.7);
- saving share: (planted - fixed) / planted work, the part of the program's work the fix saves
  (what zoo_score.py compares torchneck's estimate with: torchneck's run clock starts after its
  own import of torch, so its "share of the run" is a share of this work), and
  (planted - fixed) / planted wall, the part of the whole process, start-up included.

`--write` stores the figures in the manifest entry (`measured`); zoo_score.py compares them with
the top finding's estimate. Exit code 1 when a plant is under the target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from zoo_lib import ZOO, ZooProgram, load_programs, save_measurement

MIN_SPEEDUP = 1.7


def wall(cmd: list[str], env: dict, timeout: float) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ZOO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {proc.returncode}: {tail}")
    return took


def measure(prog: ZooProgram, repeat: int, env: dict, timeout: float) -> dict:
    base, planted, fixed = [], [], []
    for _ in range(repeat):
        base.append(wall([sys.executable, "-c", "import torch"], env, timeout))
        planted.append(wall(prog.command(sys.executable), env, timeout))
        fixed.append(wall(prog.command(sys.executable, fixed=True), env, timeout))
    b, p, f = (statistics.median(x) for x in (base, planted, fixed))
    work_p, work_f = max(p - b, 1e-3), max(f - b, 1e-3)
    return {"planted_s": round(p, 3), "fixed_s": round(f, 3), "startup_s": round(b, 3),
            "speedup": round(work_p / work_f, 2), "saving_share_of_work": round((p - f) / work_p, 3),
            "saving_share_of_run": round((p - f) / p, 3), "repeat": repeat,
            "date": time.strftime("%Y-%m-%d"), **device_of_run()}


def device_of_run() -> dict:
    """The GPU the figures were measured on, when there is one (they hold for that card only)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="only these programs (names or file stems)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for one run")
    ap.add_argument("--write", action="store_true", help="store the figures in the manifests")
    ns = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    bad = 0
    print(f"{'program':34s} {'planted s':>9s} {'fixed s':>8s} {'start s':>7s} {'speedup':>7s} "
          f"{'saves (work)':>12s}")
    for prog in load_programs(ns.only):
        if not prog.expect:
            continue
        if why := prog.unavailable():
            print(f"{prog.name:34s} skipped: {why}")
            continue
        try:
            m = measure(prog, ns.repeat, env, ns.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            bad += 1
            print(f"{prog.name:34s} FAILED: {exc}")
            continue
        ok = m["speedup"] >= MIN_SPEEDUP
        bad += not ok
        print(f"{prog.name:34s} {m['planted_s']:9.2f} {m['fixed_s']:8.2f} {m['startup_s']:7.2f} "
              f"{m['speedup']:6.2f}x {100 * m['saving_share_of_work']:11.0f}%" + ("" if ok else "  UNDER TARGET"),
              flush=True)
        if ns.write:
            save_measurement(prog, m)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
