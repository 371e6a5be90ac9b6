"""How `torchneck analyze DIR` scales with the number of ranks: in one process, and on 1 and 2
local Dask worker processes.

Rank sets are copies of a real NCCL rank trace (tests/data/nccl_parser_config__nccl_data), one
profiled step each (~9,000 events, ~130-170 KB gzipped: `torchneck.cluster.replicas`), rank 37
1.5x slower: issue 26's set. For each number of ranks, `torchneck analyze DIR --quiet --json
FILE --workers N` runs in a child process (OMP_NUM_THREADS=1), the modes interleaved and repeated
so the machine's drift hits them alike. Printed: median wall, speed-up over the one-process path,
the client's peak RSS and the largest worker's, and whether the slow rank was named a straggler;
then the measured per-rank task costs (on the workers) and the reducer's cost for up to 10,000
ranks, the inputs of the cluster model in docs/scale.md. `--against REV` adds git revision REV's
`analyze DIR` (its own default engine) to the interleaving.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from trace_speed import checkout  # benchmarks/, this script's folder

from torchneck.cluster.replicas import make_rank_set

HERE = Path(__file__).resolve().parent

SOURCE = HERE.parent / "tests" / "data" / "nccl_parser_config__nccl_data.json.gz"
OUT = HERE / "_out" / "ranks"
SLOW_RANK = 37
SLOW_FACTOR = 1.5

CHILD = ("import resource, sys; from torchneck.cli import main; code = main(sys.argv[1:]); "
         "me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN); "
         "print('RSS', me.ru_maxrss, kids.ru_maxrss, me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, "
         "file=sys.stderr); sys.exit(code)")
"""The command line in a child; it reports its peak RSS and CPU seconds, and its children's (the
Dask worker processes: the largest one's peak RSS, all their CPU)."""


def rank_set(n: int) -> Path:
    folder = OUT / f"nccl-step-{n}-slow{SLOW_RANK}"
    if len(list(folder.glob("*.json.gz"))) != n:
        for old in folder.glob("*.json.gz"):
            old.unlink()
        make_rank_set(SOURCE, folder, n, {SLOW_RANK: SLOW_FACTOR}, window="step")
    return folder


def run_once(folder: Path, mode: str, out: Path, other_src: Path | None) -> dict:
    args = ["analyze", str(folder), "--quiet", "--json", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if mode == "against":
        env["PYTHONPATH"] = str(other_src)
    else:
        args += ["--workers", "0" if mode == "single" else mode]
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{mode} on {folder}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    line = [x for x in proc.stderr.splitlines() if x.startswith("RSS")][-1].split()
    report = json.loads(out.read_text())
    named = [f.get("rank") for f in report["findings"] if f["kind"] == "straggler"]
    return {"wall_s": wall, "client_mb": int(line[1]) / 1024, "worker_mb": int(line[2]) / 1024,
            "client_cpu_s": float(line[3]), "workers_cpu_s": float(line[4]),
            "found": named == [SLOW_RANK], "cost_s": (report.get("distributed") or {}).get("cost_s")}


def reducer_cost(counts: list[int]) -> list[tuple[int, float, float]]:
    """Seconds and MB of the merge for `n` ranks' summaries (one real rank's, renumbered)."""
    import resource

    import msgspec

    from torchneck.cluster.reduce import reduce_ranks
    from torchneck.cluster.summary import RankSummary, decode
    from torchneck.cluster.tasks import RankItem, TaskOptions, summarise_batch

    [one] = decode(summarise_batch([RankItem(str(next(rank_set(128).glob("*.json.gz"))))], TaskOptions()))
    assert isinstance(one, RankSummary)
    size = len(msgspec.msgpack.encode(one))
    out = []
    for n in counts:
        summaries = [msgspec.structs.replace(one, rank=i) for i in range(n)]
        t = time.perf_counter()
        reduce_ranks(summaries)
        out.append((n, time.perf_counter() - t, n * size / 1e6))
    print(f"reducer process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="128,512,2048", help="rank counts, comma-separated")
    parser.add_argument("--modes", default="single,1,2", help="single (one process) and/or worker counts")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="also run git revision REV's analyze DIR, interleaved")
    args = parser.parse_args()
    counts = [int(x) for x in args.ranks.split(",")]
    modes = args.modes.split(",") + (["against"] if args.against else [])
    print(f"cores: {os.cpu_count()}; source {SOURCE.name}, one step a rank, rank {SLOW_RANK} x{SLOW_FACTOR} slower")
    with checkout(args.against) if args.against else nullcontext() as other_src:
        for n in counts:
            folder = rank_set(n)
            mb = sum(p.stat().st_size for p in folder.glob("*.json.gz")) / 1e6
            runs: dict[str, list[dict]] = {m: [] for m in modes}
            for _ in range(args.repeat):
                for m in modes:
                    runs[m].append(run_once(folder, m, OUT / f"report-{n}-{m}.json", other_src))
            base = statistics.median(r["wall_s"] for r in runs[modes[0]])
            print(f"\n{n} ranks ({mb:.0f} MB gzip):")
            for m, rs in runs.items():
                wall = statistics.median(r["wall_s"] for r in rs)
                label = {"single": "one process", "against": f"{args.against} (its default)"}.get(m, f"{m} worker(s)")
                client_cpu = statistics.median(r["client_cpu_s"] for r in rs)
                workers_cpu = statistics.median(r["workers_cpu_s"] for r in rs)
                print(f"  {label:>24s}: wall {wall:6.2f} s  ({1e3 * wall / n:5.1f} ms a rank, x{base / wall:.2f} "
                      f"vs {modes[0]})  client RSS {max(r['client_mb'] for r in rs):4.0f} MB  largest worker "
                      f"{max(r['worker_mb'] for r in rs):4.0f} MB  straggler named: "
                      f"{all(r['found'] for r in rs)}  walls " + ", ".join(f"{r['wall_s']:.2f}" for r in rs))
                print(f"  {'':>24s}  CPU: client {client_cpu:.2f} s, workers {workers_cpu:.2f} s "
                      f"({1e3 * (client_cpu + workers_cpu) / n:.1f} ms a rank in all)")
            cost = next((r["cost_s"] for m in modes for r in runs[m] if r["cost_s"]), None)
            if cost:
                print("  per-rank task on a worker, p50 (p90): " + ", ".join(
                    f"{k[:-2]} {1e3 * v['p50']:.1f} ({1e3 * v['p90']:.1f}) ms" for k, v in cost.items() if v))
    print()
    for n, seconds, mb in reducer_cost([512, 2048, 10_000]):
        print(f"reducer: {n:>6} ranks' summaries ({mb:.0f} MB as msgpack) merged in {seconds:.2f} s")


if __name__ == "__main__":
    main()
