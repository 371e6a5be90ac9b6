"""Speed and memory of `torchneck analyze` on large traces.

Generates traces of the requested sizes by replicating a real GPU trace
(tests/data/trace_diff__control__control.json.gz) with shifted timestamps and ids, then runs
`torchneck analyze --quiet` on each in a child process (OMP_NUM_THREADS=1), repeated, and prints
wall time, MB/s and the child's peak RSS. With --hta, also loads the smallest file with Holistic
Trace Analysis (installed into benchmarks/_out/hta-venv: HolisticTraceAnalysis, pandas<3, psutil)
in the same run and prints the ratios. Each size is also timed with TORCHNECK_PURE_PYTHON=1 (the
msgspec decoder, numpy sort and nesting, without the C extensions), interleaved, as the baseline of
their gain. With --against REV, the same runs of git revision REV (checked out in a temporary
worktree, its C extensions built there) are interleaved with this checkout's and the ratio
printed: this VM's speed drifts by a quarter within minutes, so only runs taken turn about
compare two versions fairly. Targets: 1 GB in <= 2.5 s and <= 200 MB RSS; 3 GB (--sizes 3000)
in <= 300 MB; 8 GB (--sizes 8000: ~20 M events, past `spill.SPILL_ROWS`, so the table and the
host nesting live in temporary files under a watched ceiling) in <= 300 MB. With --workers N, `analyze --workers N`
(the byte ranges decoded by N local Dask workers, the columns merged by the client: the path a
cluster takes for one huge trace) is interleaved with them. A run that fails (a
revision that runs out of memory) is reported as such, with its last line of error. With
--source, another trace is replicated instead (e.g. the CPU-only
../shared/traces/rank_non_gpu__rank_non_gpu.json.gz: nearly every event a CPU op, the heaviest
case for the host analyses).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "tests" / "data" / "trace_diff__control__control.json.gz"
OUT = HERE / "_out"


def generate(size_mb: int, path: Path, source: Path = SOURCE) -> None:
    if path.exists() and path.stat().st_size >= size_mb * 1e6 * 0.95:
        return
    data = json.loads(gzip.open(source).read())
    events = data.pop("traceEvents")
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(e.get("ts", 0) for e in events)
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        written, copy, first = 0, 0, True
        while written < size_mb * 1e6:
            shift = copy * (span + 1000)
            for e in events:
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = e2["ts"] + shift
                args = e2.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    for k in ("correlation", "External id"):
                        if isinstance(args.get(k), int):
                            args[k] += copy * 10_000_000
                    if isinstance(e2.get("name"), str) and e2["name"].startswith("ProfilerStep#"):
                        e2["name"] = f"ProfilerStep#{int(e2['name'][13:]) + copy * 100}"
                    e2["args"] = args
                line = ("" if first else ",\n") + json.dumps(e2)
                first = False
                f.write(line)
                written += len(line)
            copy += 1
        f.write('\n], "traceName": "replicated"}\n')


RSS_TARGET_MB = 300
"""The ceiling every size must stay under (issue 25: whatever the input's size)."""


class Failed(Exception):
    """A measured run that did not end with exit code 0."""


def measure(cmd: list[str], **extra_env: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process; raises `Failed` with its last line
    of error when it fails."""
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra_env)
    t0 = time.perf_counter()
    proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", *cmd], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    lines = err.strip().splitlines()
    if proc.returncode != 0:
        reason = next((ln for ln in reversed(lines[:-1]) if ln.strip() and not ln.startswith("Command ")), "?")
        raise Failed(f"exit code {proc.returncode} after {wall:.0f} s, {int(lines[-1]) / 1024:.0f} MB: {reason}")
    return wall, int(lines[-1]) / 1024


def _attempt(cmd: list[str], **extra_env: str) -> tuple[float, float] | str:
    """`measure`, or the reason it failed (for the revision compared with, which may)."""
    try:
        return measure(cmd, **extra_env)
    except Failed as exc:
        return str(exc)


@contextmanager
def checkout(rev: str):
    """The `src` folder of git revision `rev` in a temporary worktree, its C extensions built
    in place and its bytecode compiled; removed afterwards."""
    repo = HERE.parent
    where = Path(tempfile.mkdtemp(prefix="torchneck-against-"))
    tree = where / "tree"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
    try:
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "src")], check=True,
                       stdout=subprocess.DEVNULL)
        yield tree / "src"
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(where, ignore_errors=True)


def hta_python() -> Path:
    venv = OUT / "hta-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "HolisticTraceAnalysis", "pandas<3", "psutil"],
                       check=True)
    return py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000",
                        help="trace sizes in MB (default 100,1000; add 3000 and 8000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hta", action="store_true", help="also time HTA on the smallest trace")
    parser.add_argument("--no-pure", action="store_true",
                        help="skip the interleaved baseline without the native scanner")
    parser.add_argument("--source", type=Path, default=SOURCE,
                        help="the .json.gz trace to replicate (default: tests/data/trace_diff__control__control)")
    parser.add_argument("--workers", type=int, default=0, metavar="N",
                        help="also time `analyze --workers N` (the trace's byte ranges decoded by N local Dask "
                             "worker processes, merged by the client), interleaved")
    parser.add_argument("--against", metavar="REV",
                        help="also time git revision REV (e.g. HEAD~3, a tag), interleaved, and print the ratio")
    args = parser.parse_args()
    with checkout(args.against) if args.against else nullcontext() as other_src:
        run(args, other_src)


def run(args: argparse.Namespace, other_src: Path | None) -> None:
    OUT.mkdir(exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    files = {}
    for mb in sizes:
        stem = "" if args.source == SOURCE else args.source.name.split(".")[0] + "-"
        path = OUT / f"replicated-{stem}{mb}MB.json"
        generate(mb, path, args.source)
        files[mb] = path
    from torchneck.trace import decode

    if decode._scan is None:
        print("note: the native scanner (torchneck.trace._scan) is not built; both rows use msgspec")
    from torchneck.analysis import nesting

    if nesting._nest is None:
        print("note: the native nesting walk (torchneck.analysis._nest) is not built; both rows use numpy")
    # As `pip install` leaves it: bytecode compiled. An editable checkout run under
    # PYTHONDONTWRITEBYTECODE=1 (this workplace sets it) would otherwise compile every module
    # again on each run, ~0.1 s of every timing below.
    import torchneck

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(torchneck.__file__).parent)], check=True)
    results = {}
    for mb, path in files.items():
        cmd = [sys.executable, "-m", "torchneck", "analyze", "--quiet", str(path)]
        runs, pure, other, split = [], [], [], []
        for _ in range(args.repeat):  # interleaved: with the C extensions, then without, then REV
            runs.append(measure(cmd))
            if args.workers:
                split.append(measure([*cmd, "--workers", str(args.workers)]))
            if not args.no_pure:
                pure.append(measure(cmd, TORCHNECK_PURE_PYTHON="1"))
            if other_src is not None:
                other.append(_attempt(cmd, PYTHONPATH=str(other_src)))
        wall = statistics.median(r[0] for r in runs)
        rss = max(r[1] for r in runs)
        real_mb = path.stat().st_size / 1e6
        results[mb] = (wall, rss)
        verdict = "within" if rss <= RSS_TARGET_MB else "OVER"
        print(f"{real_mb:7.0f} MB  torchneck analyze  {wall:6.2f} s  {real_mb / wall:6.0f} MB/s  "
              f"peak RSS {rss:6.0f} MB ({verdict} {RSS_TARGET_MB} MB; per run "
              f"{' '.join(f'{w:.2f} s/{r:.0f} MB' for w, r in runs)})", flush=True)
        if split:
            swall = statistics.median(r[0] for r in split)
            print(f"{real_mb:7.0f} MB  on {args.workers} Dask workers {swall:6.2f} s  {real_mb / swall:6.0f} MB/s  "
                  f"largest process peak RSS {max(r[1] for r in split):6.0f} MB  (x{wall / swall:.2f} the one-process "
                  f"path; per run {' '.join(f'{w:.2f} s' for w, _ in split)})", flush=True)
        if pure:
            pwall = statistics.median(r[0] for r in pure)
            prss = max(r[1] for r in pure)
            print(f"{real_mb:7.0f} MB  without C (msgspec, numpy) {pwall:6.2f} s  peak RSS {prss:6.0f} MB  "
                  f"(native code x{pwall / wall:.2f} faster)", flush=True)
        failed = [r for r in other if isinstance(r, str)]
        if failed:
            print(f"{real_mb:7.0f} MB  {args.against:>17s}  failed in {len(failed)} of {len(other)} runs: "
                  f"{failed[0]}", flush=True)
        other = [r for r in other if not isinstance(r, str)]
        if other:
            owall = statistics.median(r[0] for r in other)
            orss = max(r[1] for r in other)
            pairs = " ".join(f"{a[0]:.2f}/{b[0]:.2f} s {a[1]:.0f}/{b[1]:.0f} MB" for a, b in zip(runs, other))
            print(f"{real_mb:7.0f} MB  {args.against:>17s}  {owall:6.2f} s  {real_mb / owall:6.0f} MB/s  "
                  f"peak RSS {orss:6.0f} MB  (this checkout: time x{wall / owall:.2f}, memory x{rss / orss:.2f}; "
                  f"per run {pairs})", flush=True)
    if args.hta:
        mb = min(sizes)
        py = hta_python()
        trace_dir = OUT / "hta-trace"
        trace_dir.mkdir(exist_ok=True)
        target = trace_dir / "rank-0.json"
        if not target.exists():
            target.symlink_to(files[mb])
        code = f"from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir={str(trace_dir)!r})"
        ours = results[mb]
        hta = measure([str(py), "-c", code])
        print(f"{mb} MB: HTA load {hta[0]:.2f} s, {hta[1]:.0f} MB RSS; torchneck analyze is "
              f"x{hta[0] / ours[0]:.1f} faster and uses x{hta[1] / ours[1]:.1f} less memory")


if __name__ == "__main__":
    main()
