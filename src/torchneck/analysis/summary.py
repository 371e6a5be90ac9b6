"""One pass of every analysis over a loaded trace, producing the JSON-ready `analysis` section."""

from __future__ import annotations

import numpy as np

from ..trace.table import Cat, Trace
from .compiled import compiled_summary
from .distributed import collectives
from .gpu import end_of_launched_work, gpu_summary
from .groups import totals_by_id
from .memory import memory_summary
from .ops import (
    Nesting,
    annotations,
    conv_bias_before_batch_norm,
    dispatch_overhead,
    enclosing_sites,
    float64_ops,
    host_nesting,
    in_windows,
    op_table,
)
from .patterns import filled_then_copied_to_gpu, unaligned_half_matmuls
from .steps import BREAKDOWN_CATEGORIES, find_steps, step_breakdown
from .syncs import host_syncs


def analyze_trace(trace: Trace, nesting: Nesting | None = None) -> dict:
    """All analyses of one trace (one rank). Times are µs; the window is the steps' span.
    `nesting` may be passed when the caller already computed it for this table."""
    t = trace.events
    steps = find_steps(t)
    lo = min(s.start for s in steps)
    cpu_hi = max(s.end for s in steps)
    hi = end_of_launched_work(t, lo, cpu_hi)  # the steps' GPU work may finish after their CPU side
    span = hi - lo
    breakdown = step_breakdown(t, steps)
    if nesting is None:
        nesting = host_nesting(t)
    rows = np.flatnonzero(in_windows(t, [(lo, cpu_hi)])).astype(np.int32)  # host events of the profiled steps
    durations = np.array([s.duration for s in steps])
    totals = {k: float(sum(b[k] for b in breakdown)) for k in BREAKDOWN_CATEGORIES}
    main_thread = _busiest_cpu_thread(t, rows)
    return {
        "trace": {
            "path": trace.meta.path,
            "rank": trace.meta.rank,
            "world_size": trace.meta.world_size,
            "events": len(t),
            "python_events": len(trace.python),
            "memory_events": len(trace.memory),
            "devices": [d.get("name") for d in trace.meta.devices],
            "device_memory_bytes": {str(d.get("id", i)): d["totalGlobalMem"] for i, d in enumerate(trace.meta.devices)
                                    if isinstance(d.get("totalGlobalMem"), int)},
            "warnings": list(trace.meta.warnings),
            "bytes": trace.meta.uncompressed_bytes,
        },
        "steps": {
            "source": steps[0].source,
            "count": len(steps),
            "window_us": span,
            "gpu_tail_us": hi - cpu_hi,
            "mean_us": float(durations.mean()),
            "median_us": float(np.median(durations)),
            "min_us": float(durations.min()),
            "max_us": float(durations.max()),
            "items": [
                {"index": s.index, "start_us": s.start, "duration_us": s.duration, "breakdown_us": b}
                for s, b in zip(steps, breakdown)
            ],
            "breakdown_total_us": totals,
        },
        "ops": {
            "by_name": op_table(t, nesting, rows),
            "by_shape": op_table(t, nesting, rows, by_shape=True, top=20),
            "dispatch": dispatch_overhead(t, nesting, rows, span, len(steps)),
            "annotations": annotations(t, rows),
            "float64": float64_ops(t, nesting, rows),
            "conv_bias_bn": conv_bias_before_batch_norm(t, nesting, rows),
            "half_matmul_unaligned": unaligned_half_matmuls(t, nesting, rows),
            "filled_then_copied": filled_then_copied_to_gpu(t, nesting, rows),
            "main_thread": main_thread,
        },
        "gpu": gpu_summary(t, lo, hi),
        "syncs": host_syncs(t, nesting, rows),
        "memory": memory_summary(t, trace.memory, lo, hi, nesting, sites=enclosing_sites(t, nesting)),
        "compiled": compiled_summary(t, nesting, rows, lo, cpu_hi),
        "comm": collectives(t, steps),
    }


def _busiest_cpu_thread(t, rows) -> dict:
    cpu = rows[t.cat[rows] == Cat.CPU_OP]
    if not len(cpu):
        return {}
    threads, counts, _ = totals_by_id(t.thread[cpu])
    th = int(threads[np.argmax(counts)])
    return {"pid": t.threads.pid[th], "tid": t.threads.tid[th], "ops": int(counts.max())}
