"""How `torchneck analyze DIR` scales with the number of ranks.

Makes N per-rank copies of a real GPU rank trace (tests/data/timeline_analysis__sampled_rank-0,
each copy with its own `distributedInfo.rank` and a per-rank stretch of its NCCL kernels so that
the ranks differ), then runs `torchneck analyze DIR --quiet --json FILE` in a child process
(OMP_NUM_THREADS=1) for 1 rank and for N ranks, interleaved and repeated. Prints per-rank wall
time, the peak RSS of the parent and of the largest worker, and the size of one rank's summary
(what the merge reads) against the trace size. The 1-rank run is the baseline of the ratios.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "tests" / "data" / "timeline_analysis__sampled_rank-0.json.gz"
OUT = HERE / "_out" / "ranks"


def make_ranks(n: int, source: Path = SOURCE) -> Path:
    folder = OUT / f"{source.name.split('.')[0]}-world-{n}"
    if len(list(folder.glob("*.json.gz"))) == n:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    data = json.loads(gzip.open(source).read())
    for rank in range(n):
        copy = dict(data)
        copy["distributedInfo"] = dict(data.get("distributedInfo") or {}, rank=rank, world_size=n)
        stretch = 1.0 + 0.02 * rank
        copy["traceEvents"] = [dict(e, dur=e["dur"] * stretch)
                               if e.get("cat") == "kernel" and "nccl" in e.get("name", "") and "dur" in e else e
                               for e in data["traceEvents"]]
        with gzip.open(folder / f"rank-{rank}.pt.trace.json.gz", "wt", compresslevel=1) as f:
            json.dump(copy, f)
    return folder


def run_once(folder: Path, out: Path) -> dict:
    cmd = [sys.executable, "-c",
           "import resource, sys; from torchneck.cli import main; code = main(sys.argv[1:]); "
           "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
           "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)",
           "analyze", str(folder), "--quiet", "--json", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    line = [x for x in proc.stderr.splitlines() if x.startswith("RSS")][-1].split()
    return {"wall_s": wall, "parent_kb": int(line[1]), "worker_kb": int(line[2])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--source", type=Path, default=SOURCE, help="the rank trace to copy (.json.gz)")
    args = parser.parse_args()
    one, many = make_ranks(1, args.source), make_ranks(args.ranks, args.source)
    trace_mb = sum(p.stat().st_size for p in many.glob("*.json.gz")) / 1e6 / args.ranks
    raw_mb = len(gzip.open(args.source).read()) / 1e6
    results: dict[str, list[dict]] = {"1": [], str(args.ranks): []}
    for _ in range(args.repeat):  # interleaved: the machine's noise hits both alike
        results["1"].append(run_once(one, OUT / "one.json"))
        results[str(args.ranks)].append(run_once(many, OUT / "many.json"))
    report = json.loads((OUT / "many.json").read_text())
    summary = json.dumps(report["distributed"]["ranks"][0])
    base = statistics.median(r["wall_s"] for r in results["1"])
    print(f"one rank's trace: {trace_mb:.2f} MB gzip, {raw_mb:.1f} MB JSON; cores: {os.cpu_count()}")
    for key, rs in results.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        n = int(key)
        print(f"{n:>4} rank(s): wall {wall:.2f} s ({wall / n:.2f} s per rank; x{wall / base:.2f} the 1-rank run), "
              f"parent peak RSS {max(r['parent_kb'] for r in rs) / 1024:.0f} MB, "
              f"largest worker {max(r['worker_kb'] for r in rs) / 1024:.0f} MB")
    print(f"one rank's summary for the merge: {len(summary)} bytes; straggler: {report['distributed']['straggler']}")


if __name__ == "__main__":
    main()
