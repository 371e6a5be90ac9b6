"""Does torchneck's GPU idle breakdown agree with Holistic Trace Analysis on the same traces?

    python benchmarks/hta_agreement.py [--write] [TRACE ...]

(default: tests/data/gpu_h100__*.json.gz and the GPU zoo's kept runs, gpu_h100_zoo__*/)

torchneck reports GPU time over the CPU step window; HTA over its own window: the GPU events
launched before the last ProfilerStep starts (the last step is dropped), from the first such
event's start to the last one's end, with times rounded to whole µs. So, for each trace, this
script computes torchneck's `idle_breakdown` over HTA's events and window, and prints it beside
HTA's `get_temporal_breakdown` and `get_idle_time_breakdown` (HTA runs in benchmarks/_out/hta-venv,
set up as trace_speed.py does), once as is and once ("µs-cut") with every event first cut to whole
µs as HTA's parser does: that rounding is what separates the two.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from trace_speed import OUT, hta_python  # noqa: E402

from torchneck.analysis.gpu import idle_breakdown, launching_rows  # noqa: E402
from torchneck.analysis.intervals import union_length  # noqa: E402
from torchneck.trace.loader import load_trace  # noqa: E402
from torchneck.trace.table import GPU_CATEGORIES, in_categories  # noqa: E402

HTA_CODE = """
import json, sys, warnings
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
out = {}
try:
    tb = ta.get_temporal_breakdown(visualize=False).iloc[0]
    out["span_us"] = float(tb["kernel_time(us)"]); out["idle_us"] = float(tb["idle_time(us)"])
except Exception as exc:
    out["temporal_error"] = f"{type(exc).__name__}: {exc}"
# the trace's own rank (a job's rank-1 trace is rank 1 to HTA); idle time summed over streams
idle = ta.get_idle_time_breakdown(ranks=sorted(ta.t.traces)[:1], visualize=False)
idle = idle[0] if isinstance(idle, tuple) else idle
out["categories_us"] = {}
for _, r in idle.iterrows():
    out["categories_us"][r["idle_category"]] = out["categories_us"].get(r["idle_category"], 0.0) + float(r["idle_time"])
out["streams"] = int(idle["stream"].nunique())
print(json.dumps(out))
"""


def torchneck_over_hta_window(path: Path, rounded: bool = False) -> dict:
    """torchneck's idle breakdown over the events and window HTA analyses; `rounded`: with every
    event first cut to whole µs as HTA's parser does (start rounded up, end rounded down)."""
    t = load_trace(path).events
    if rounded:
        end = np.floor(t.ts + t.dur)
        t.ts = np.ceil(t.ts)
        t.dur = np.maximum(end - t.ts, 0).astype(t.dur.dtype)
    step_rows = np.flatnonzero(t.names_matching(lambda s: s.startswith("ProfilerStep#"))[t.name]
                               & ~in_categories(t.cat, GPU_CATEGORIES))
    last_start = t.ts[step_rows].max()
    gpu = np.flatnonzero(in_categories(t.cat, GPU_CATEGORIES))
    launcher = launching_rows(t, gpu)
    keep = (launcher >= 0) & (t.ts[np.maximum(launcher, 0)] < last_start)
    rows = gpu[keep]
    lo = float(t.ts[rows].min())
    hi = float((t.ts[rows] + t.dur[rows]).max())
    busy = union_length(t.ts[rows], t.ts[rows] + t.dur[rows])
    cats = idle_breakdown(t, rows, lo, hi)
    return {"span_us": hi - lo, "idle_us": hi - lo - busy,
            "categories_us": {"host_wait": cats.host_wait_us, "kernel_wait": cats.kernel_wait_us,
                              "other": cats.other_us}}


def hta(path: Path, py: Path) -> dict:
    trace_dir = OUT / "hta-agreement" / trace_key(path).split(".")[0].replace("/", "__")
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir(parents=True)
    (trace_dir / "rank-0.json").write_bytes(gzip.decompress(path.read_bytes()))
    r = subprocess.run([str(py), "-c", HTA_CODE, str(trace_dir)], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


DATA = HERE.parent / "tests" / "data"
REFERENCE = DATA / "gpu_h100__hta_reference.json"
"""HTA's numbers for the bundled H100 traces (`--write`), which tests/test_gpu_traces.py checks
torchneck against without HTA installed."""


def bundled_traces() -> list[Path]:
    """The H100 traces in tests/data: the recorded workloads and the GPU zoo's runs (each rank's)."""
    return sorted(DATA.glob("gpu_h100__*.json.gz")) + sorted(DATA.glob("gpu_h100_zoo__*/**/trace.json.gz"))


def trace_key(path: Path) -> str:
    """A bundled trace's name in the reference: its path under tests/data (a run's trace files
    are all called trace.json.gz)."""
    path = path.resolve()
    return str(path.relative_to(DATA)) if path.is_relative_to(DATA) else path.name


def main() -> None:
    write = "--write" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--write"]
    paths = [Path(p) for p in args] or bundled_traces()
    py = hta_python()
    reference = {}
    print(f"{'trace (under tests/data)':28s} {'':9s} {'span µs':>9s} {'idle µs':>9s} {'host_wait':>10s} "
          f"{'kernel_wait':>12s} {'other':>8s}")
    for path in paths:
        rows = (("torchneck", torchneck_over_hta_window(path)),
                ("  µs-cut", torchneck_over_hta_window(path, rounded=True)), ("HTA", hta(path, py)))
        reference[trace_key(path)] = rows[2][1]
        for who, r in rows:
            if "error" in r:
                print(f"{trace_key(path)[-28:]:28s} {who:9s} failed: {r['error'][:80]}")
                continue
            c = r.get("categories_us", {})
            span = f"{r['span_us']:9.0f}" if "span_us" in r else f"{'-':>9s}"
            idle = f"{r['idle_us']:9.0f}" if "idle_us" in r else f"{'-':>9s}"
            print(f"{trace_key(path)[-28:]:28s} {who:9s} {span} {idle} {c.get('host_wait', 0):10.0f} "
                  f"{c.get('kernel_wait', 0):12.0f} {c.get('other', 0):8.0f}"
                  + (f"  ({r['temporal_error'][:60]})" if "temporal_error" in r else ""))
    if write:
        REFERENCE.write_text(json.dumps({"hta": "HolisticTraceAnalysis 0.5 (benchmarks/hta_agreement.py --write)",
                                         "traces": reference}, indent=1) + "\n")
        print(f"wrote {REFERENCE}")


if __name__ == "__main__":
    main()
