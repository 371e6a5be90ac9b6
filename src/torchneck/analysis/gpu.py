"""GPU activity: busy/idle, temporal breakdown, idle causes, kernel families, launch statistics.

Definitions follow Holistic Trace Analysis (HTA) where it has one, so numbers can be compared.
"""

from __future__ import annotations

import re

import numpy as np

from ..trace.table import GPU_CATEGORIES, Cat, EventTable, in_categories
from .groups import distinct, totals_by_id
from .intervals import ROW_BLOCK, ascending, merge, overlapping_rows, union_length
from .steps import is_communication

KERNEL_WAIT_US = 30.0
"""A gap between consecutive kernels on one stream shorter than this, with work already queued,
is launch overhead ('kernel wait' in HTA, same 30 µs threshold)."""

SHORT_KERNEL_US = 10.0
"""Kernels shorter than this finish faster than a CPU can launch them (~5-10 µs per launch):
a stream of them is the launch-bound signature."""

_FAMILIES = [
    ("triton", re.compile(r"^triton_|triton", re.IGNORECASE)),
    ("nccl", re.compile(r"nccl|rccl", re.IGNORECASE)),
    ("gemm", re.compile(r"gemm|cutlass|xmma|cublas|matmul|_mm_|hipblaslt|Cijk_", re.IGNORECASE)),
    ("conv", re.compile(r"conv|cudnn|implicit_convolve|winograd|miopen", re.IGNORECASE)),
    ("flash_attention", re.compile(r"flash|fmha|attention|sdpa", re.IGNORECASE)),
    ("reduction", re.compile(r"reduce_kernel|softmax|norm|Reduce", re.IGNORECASE)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|at::native", re.IGNORECASE)),
]


def kernel_family(name: str) -> str:
    """Coarse family of a kernel by name: triton (inductor), nccl, gemm, conv, ... or other."""
    for family, pattern in _FAMILIES:
        if pattern.search(name):
            return family
    return "other"


def gpu_summary(table: EventTable, lo: float, hi: float) -> dict:
    """Everything GPU-side within [lo, hi]. `present` is False for traces without GPU activity."""
    rows = overlapping_rows(table.ts, table.dur, lo, hi, mask=in_categories(table.cat, GPU_CATEGORIES))
    if not len(rows):
        return {"present": False}
    span = hi - lo
    _launch_index(table)  # built now, before the per-device arrays exist: a lower peak
    devices = []
    for dev in distinct(table.device[rows]).tolist():
        drows = rows[table.device[rows] == dev]
        devices.append(_device_summary(table, drows, lo, hi, span, dev))
    kernels = rows[table.cat[rows] == Cat.KERNEL]
    families: dict[str, dict] = {}
    # Classify each distinct kernel name once, then sum per name with bincount.
    by_name = totals_by_id(table.name[kernels], table.dur[kernels].astype(np.float64))
    names, count_per_name, time_per_name = by_name
    for name_id, t_us, n in zip(names.tolist(), time_per_name.tolist(), count_per_name.tolist()):
        fam = kernel_family(table.strings[name_id])
        f = families.setdefault(fam, {"family": fam, "count": 0, "time_us": 0.0})
        f["count"] += int(n)
        f["time_us"] += t_us
    memcpy_rows = rows[table.cat[rows] == Cat.GPU_MEMCPY]
    if len(memcpy_rows):
        families["memcpy"] = {"family": "memcpy", "count": int(len(memcpy_rows)),
                              "time_us": float(table.dur[memcpy_rows].astype(np.float64).sum())}
    memset_rows = rows[table.cat[rows] == Cat.GPU_MEMSET]
    if len(memset_rows):
        families["memset"] = {"family": "memset", "count": int(len(memset_rows)),
                              "time_us": float(table.dur[memset_rows].sum())}
    return {
        "present": True,
        "window_us": span,
        "devices": devices,
        "kernel_families": sorted(families.values(), key=lambda f: -f["time_us"]),
        "top_kernels": _top_kernels(table, by_name),
        "launch": launch_statistics(table, kernels),
        "memcpy": memcpy_summary(table, memcpy_rows),
    }


def _device_summary(table: EventTable, rows: np.ndarray, lo: float, hi: float, span: float,
                    dev: int) -> dict:
    ts = table.ts[rows]
    end = ts + table.dur[rows]
    busy = union_length(ts, end, lo, hi)
    comm_ids = table.names_matching(is_communication)
    is_comm = comm_ids[table.name[rows]] & (table.cat[rows] == Cat.KERNEL)
    is_compute = (table.cat[rows] == Cat.KERNEL) & ~is_comm
    # HTA temporal breakdown: compute, then communication not overlapping compute, then memory.
    compute = union_length(ts[is_compute], end[is_compute], lo, hi)
    comm_any = union_length(ts[is_comm], end[is_comm], lo, hi)
    is_compute |= is_comm
    compute_or_comm = union_length(ts[is_compute], end[is_compute], lo, hi)
    del ts, end, is_comm, is_compute
    communication = compute_or_comm - compute
    memory = busy - compute_or_comm
    overlap = compute + comm_any - compute_or_comm
    streams = []
    for stream in distinct(table.stream[rows]).tolist():
        srows = rows[table.stream[rows] == stream]
        s_busy = union_length(table.ts[srows], table.ts[srows] + table.dur[srows], lo, hi)
        streams.append({"stream": int(stream), "events": int(len(srows)), "busy_us": s_busy,
                        "busy_pct": 100 * s_busy / span if span else 0.0})
    return {
        "device": int(dev),
        "busy_us": busy,
        "busy_pct": 100 * busy / span if span else 0.0,
        "idle_us": span - busy,
        "temporal": {"compute_us": compute, "communication_us": communication,
                     "memory_us": memory, "idle_us": span - busy},
        "comm_overlap_pct": 100 * overlap / comm_any if comm_any else 0.0,
        "idle_breakdown": idle_breakdown(table, rows, lo, hi),
        "streams": sorted(streams, key=lambda s: -s["busy_us"]),
    }


def idle_breakdown(table: EventTable, rows: np.ndarray, lo: float, hi: float) -> dict:
    """Idle time of one device within [lo, hi], split by cause as HTA does:

    - host_wait: the work after the gap was launched (its runtime call started) only after the
      device went idle: the GPU waited for the CPU to enqueue work;
    - kernel_wait: work was already queued, and the gap is shorter than `KERNEL_WAIT_US`
      (launch latency between consecutive kernels);
    - other: longer gaps with work queued (waits on events, other streams, the host);
    - edges: idle before the first and after the last GPU event of the window.
    The four add up to the device's idle time in the window.
    """
    if not len(rows):
        return {"host_wait_us": 0.0, "kernel_wait_us": 0.0, "other_us": 0.0, "edges_us": hi - lo}
    ts = table.ts[rows]
    order = rows
    if not ascending(ts):  # rows of the loaded (sorted) table come in start order already
        by_start = np.argsort(ts, kind="stable")
        order, ts = rows[by_start], ts[by_start]
        del by_start
    run_end = ts + table.dur[order]
    np.clip(ts, lo, hi, out=ts)
    np.clip(run_end, lo, hi, out=run_end)
    np.maximum.accumulate(run_end, out=run_end)
    edges = float((ts[0] - lo) + (hi - run_end[-1]))
    np.subtract(ts[1:], run_end[:-1], out=ts[1:])  # ts[1:] now holds the gap before each event
    idx = np.flatnonzero(ts[1:] > 0)
    gap = ts[1:][idx]
    idle_from = run_end[idx]
    del ts, run_end
    launcher = launching_rows(table, order[idx + 1])
    del idx
    launched = np.where(launcher >= 0, table.ts[np.maximum(launcher, 0)], np.nan)
    del launcher
    hw = launched > idle_from  # launched after the device went idle (as HTA: strictly after)
    kw = ~hw & (gap < KERNEL_WAIT_US)
    return {
        "host_wait_us": float(gap[hw].sum()),
        "kernel_wait_us": float(gap[kw].sum()),
        "other_us": float(gap[~hw & ~kw].sum()),
        "edges_us": edges,
    }


def end_of_launched_work(table: EventTable, lo: float, hi: float) -> float:
    """When the work launched in [lo, hi) is done: `hi`, or later when GPU events launched by
    runtime calls in that span end after it. A GPU-bound program's CPU runs ahead of its GPU
    (by up to ~1000 queued launches), so its profiled steps end on the CPU long before the
    GPU has run them; measured on the CPU's span alone, such a GPU would look mostly idle."""
    gpu = np.flatnonzero(in_categories(table.cat, GPU_CATEGORIES))
    if not len(gpu):
        return hi
    launcher = launching_rows(table, gpu)
    linked = launcher >= 0
    gpu, launcher = gpu[linked], launcher[linked]
    inside = (table.ts[launcher] >= lo) & (table.ts[launcher] < hi)
    if not inside.any():
        return hi
    rows = gpu[inside]
    return max(hi, float((table.ts[rows] + table.dur[rows]).max()))


def launching_rows(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """For GPU events `rows`: the runtime/driver call that launched each (same correlation id;
    the last such call if an id repeats), or -1 (also for rows that are no GPU event)."""
    gpu, launcher = _launch_index(table)
    out = np.full(len(rows), -1, dtype=launcher.dtype)
    if not len(gpu) or not len(rows):
        return out
    at = np.minimum(np.searchsorted(gpu, rows), len(gpu) - 1)
    found = gpu[at] == rows
    out[found] = launcher[at[found]]
    return out


def _launch_index(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """(GPU event rows ascending, the row of the runtime/driver call that launched each or -1),
    built once per table: three analyses and the timeline look launches up. Kept per GPU event
    rather than as the calls sorted by id, the index the lookup is made from: a trace has ~3
    runtime calls for each GPU event (cudaLaunchKernel, but also allocations, syncs, event
    records), so that index was ~3x larger (19 MB at 3 GB, now 7)."""
    cached = getattr(table, "_launch_index", None)
    if cached is not None:
        return cached
    keys, calls = _calls_by_correlation(table)
    index = np.int32 if len(table) < 2**31 else np.int64
    gpu = np.flatnonzero(in_categories(table.cat, GPU_CATEGORIES)).astype(index)
    launcher = np.full(len(gpu), -1, dtype=calls.dtype)
    for a in range(0, len(gpu), ROW_BLOCK):  # a block at a time: no row-long intp temporaries
        wanted = table.correlation[gpu[a:a + ROW_BLOCK]]
        at = np.searchsorted(keys, wanted, side="right") - 1
        ok = (at >= 0) & (wanted >= 0)
        ok[ok] = keys[at[ok]] == wanted[ok]
        launcher[a:a + ROW_BLOCK][ok] = calls[at[ok]]
    table._launch_index = (gpu, launcher)
    return table._launch_index


def _calls_by_correlation(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """(correlation ids, runtime/driver rows) sorted by id, the last call of a repeated id last.

    Where ids and rows fit 31 bits (always, but for a foreign trace's huge ids), each call is
    one int64, id above row, sorted in place: no argsort order and no gathered copies beside
    it, and the two halves are read back through an int32 view of it."""
    is_call = in_categories(table.cat, (Cat.RUNTIME, Cat.DRIVER))
    n = len(table)
    corr = table.correlation
    if n < 2**31 and (corr.dtype.itemsize <= 4 or int(corr.max(initial=-1)) < 2**31):
        parts = []
        for a in range(0, n, ROW_BLOCK):
            c = corr[a:a + ROW_BLOCK]
            r = np.flatnonzero(is_call[a:a + ROW_BLOCK] & (c >= 0))
            parts.append((c[r].astype(np.int64) << 32) | (r + a))
        del is_call
        packed = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        del parts
        packed.sort(kind="stable")  # by id, then row (timsort: ids come nearly in order)
        halves = packed.view(np.int32)  # little-endian: row, id of each call in turn
        lo, hi = (0, 1) if np.little_endian else (1, 0)
        return halves[hi::2].copy(), halves[lo::2].copy()
    rt = np.flatnonzero(is_call & (corr >= 0))  # ids beyond 31 bits: an order and two gathers
    del is_call
    keys = corr[rt]
    order = np.argsort(keys, kind="stable")
    return keys[order], rt[order]


def launch_statistics(table: EventTable, kernels: np.ndarray) -> dict:
    """Kernel launches: how long the CPU spends launching vs how long kernels run.

    launch_delay: kernel start minus the start of the runtime call that launched it (queueing);
    cpu_launch_mean_us: mean duration of those runtime calls, each call counted once;
    kernels_per_launch: linked kernels per distinct launching call (1 for plain launches, the
    graph's size for CUDA-graph replays, whose one cudaGraphLaunch starts every kernel).
    `short_share` is the fraction of kernels shorter than `SHORT_KERNEL_US`.
    """
    if not len(kernels):
        return {"kernels": 0}
    kdur = table.dur[kernels].astype(np.float64)
    short = int((kdur < SHORT_KERNEL_US).sum())
    out = {
        "kernels": int(len(kernels)),
        "kernel_mean_us": float(kdur.mean()),
        "kernel_median_us": float(np.median(kdur, overwrite_input=True)),
        "short_kernels": short,
        "short_share": short / len(kernels),
    }
    del kdur
    launch_rows = launching_rows(table, kernels)
    linked = launch_rows >= 0
    out["linked_launches"] = int(linked.sum())
    if linked.any():
        lr = launch_rows[linked]
        del launch_rows
        delay = table.ts[kernels[linked]] - table.ts[lr]
        del linked
        out["launch_delay_median_us"] = float(np.median(delay, overwrite_input=True))  # reorders only
        out["launch_delay_p90_us"] = float(np.percentile(delay, 90, overwrite_input=True))
        del delay
        calls = distinct(lr)
        out["cpu_launch_mean_us"] = float(table.dur[calls].astype(np.float64).mean())
        out["launch_calls"] = int(len(calls))
        out["kernels_per_launch"] = float(len(lr) / len(calls))
    return out


def _top_kernels(table: EventTable, by_name: tuple[np.ndarray, np.ndarray, np.ndarray], top: int = 20) -> list[dict]:
    """The kernels with the most time, from (name ids, counts, µs) per kernel name."""
    uniq, count, total = by_name
    out = []
    for g in np.argsort(-total, kind="stable")[:top].tolist():
        name = table.strings[uniq[g]]
        out.append({"name": name, "family": kernel_family(name), "count": int(count[g]),
                    "time_us": float(total[g]), "mean_us": float(total[g] / count[g])})
    return out


def memcpy_summary(table: EventTable, rows: np.ndarray) -> dict:
    """Copies by direction (HtoD, DtoH, DtoD, ...) from the memcpy kernel names."""
    out: dict[str, dict] = {}
    names, inverse = np.unique(table.name[rows], return_inverse=True)
    time_us = np.bincount(inverse, weights=table.dur[rows].astype(np.float64), minlength=len(names))
    nbytes = np.bincount(inverse, weights=table.nbytes[rows].astype(np.float64), minlength=len(names))
    count = np.bincount(inverse, minlength=len(names))
    for g, name_id in enumerate(names.tolist()):
        name = table.strings[name_id]
        m = re.search(r"(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD)", name)
        kind = m.group(1) if m else "other"
        if "Pageable" in name or "pageable" in name:
            kind += " (pageable)"
        d = out.setdefault(kind, {"count": 0, "time_us": 0.0, "bytes": 0})
        d["count"] += int(count[g])
        d["time_us"] += float(time_us[g])
        d["bytes"] += int(nbytes[g])
    return out


def busy_intervals(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals when any GPU was busy (used by tests and the timeline)."""
    gpu = in_categories(table.cat, GPU_CATEGORIES)
    return merge(table.ts[gpu], table.ts[gpu] + table.dur[gpu])
