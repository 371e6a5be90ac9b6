"""GPU activity: busy/idle, temporal breakdown, idle causes, kernel families, launch statistics.

Definitions follow Holistic Trace Analysis (HTA) where it has one, so numbers can be compared.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from ..model.analysis import (
    Device,
    Gpu,
    IdleBreakdown,
    KernelFamily,
    KernelRow,
    LaunchStats,
    MemcpyDirection,
    StreamBusy,
    Temporal,
)
from ..trace.table import GPU_CATEGORIES, Cat, EventTable, in_categories
from .groups import distinct, totals_by_id
from .intervals import ROW_BLOCK, UnionLength, ascending, overlapping_rows
from .steps import NAMES_CACHED, is_communication

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


@lru_cache(maxsize=NAMES_CACHED)  # the same kernels in every rank of a job
def kernel_family(name: str) -> str:
    """Coarse family of a kernel by name: triton (inductor), nccl, gemm, conv, ... or other."""
    for family, pattern in _FAMILIES:
        if pattern.search(name):
            return family
    return "other"


def gpu_summary(table: EventTable, lo: float, hi: float) -> Gpu:
    """Everything GPU-side within [lo, hi]. `present` is False for traces without GPU activity."""
    rows = _in_start_order(table, _gpu_rows_overlapping(table, lo, hi))
    if not len(rows):
        return Gpu(present=False)
    span = hi - lo
    devices = []
    for dev in distinct(table.device[rows]).tolist():
        on_device = table.device[rows] == dev
        drows = rows if on_device.all() else rows[on_device]
        del on_device
        devices.append(_device_summary(table, drows, lo, hi, span, dev))
        del drows
    kernels = rows[table.cat[rows] == Cat.KERNEL]
    families: dict[str, KernelFamily] = {}
    # Classify each distinct kernel name once, then sum per name with bincount.
    by_name = totals_by_id(table.name[kernels], table.dur[kernels].astype(np.float64))
    names, count_per_name, time_per_name = by_name
    for name_id, t_us, n in zip(names.tolist(), time_per_name.tolist(), count_per_name.tolist()):
        fam = kernel_family(table.strings[name_id])
        f = families.setdefault(fam, KernelFamily(family=fam, count=0, time_us=0.0))
        f.count += int(n)
        f.time_us += t_us
    memcpy_rows = rows[table.cat[rows] == Cat.GPU_MEMCPY]
    if len(memcpy_rows):
        families["memcpy"] = KernelFamily(family="memcpy", count=int(len(memcpy_rows)),
                                          time_us=float(table.dur[memcpy_rows].astype(np.float64).sum()))
    memset_rows = rows[table.cat[rows] == Cat.GPU_MEMSET]
    if len(memset_rows):
        families["memset"] = KernelFamily(family="memset", count=int(len(memset_rows)),
                                          time_us=float(table.dur[memset_rows].sum()))
    return Gpu(present=True, window_us=span, devices=devices,
               kernel_families=sorted(families.values(), key=lambda f: -f.time_us),
               top_kernels=_top_kernels(table, by_name), launch=launch_statistics(table, kernels),
               memcpy=memcpy_summary(table, memcpy_rows))


def _in_start_order(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """`rows` ordered by start: as given on a table sorted by start (as loaded), checked a block
    at a time; else sorted (tables built by hand), since the GPU analyses stream over rows in
    start order."""
    if all(ascending(table.ts[block]) for block in _blocks_with_next(rows)):
        return rows
    return rows[np.argsort(table.ts[rows], kind="stable")]


def _blocks_with_next(rows: np.ndarray):
    for a in range(0, max(len(rows) - 1, 0), ROW_BLOCK):
        yield rows[a:a + ROW_BLOCK + 1]


def _device_summary(table: EventTable, rows: np.ndarray, lo: float, hi: float, span: float,
                    dev: int) -> Device:
    """One device's busy time, HTA's temporal breakdown (compute, then communication not
    overlapping compute, then memory), per-stream busy time and idle causes. `rows` are in start
    order; every union is summed over `ROW_BLOCK` of them at a time (`UnionLength`), so the
    device's events are never gathered whole (four float64 arrays as long as them, 12 MB each
    for the 1.5 M GPU events of a 3 GB trace)."""
    comm_ids = table.names_matching(is_communication)
    busy, compute, comm_any, kernel_any = (UnionLength(lo, hi) for _ in range(4))
    streams: dict[int, UnionLength] = {}
    stream_events: dict[int, int] = {}
    for block in (rows[a:a + ROW_BLOCK] for a in range(0, len(rows), ROW_BLOCK)):
        ts = table.ts[block]
        end = ts + table.dur[block]
        busy.add(ts, end)
        is_kernel = table.cat[block] == Cat.KERNEL
        is_comm = comm_ids[table.name[block]] & is_kernel
        comm_any.add(ts[is_comm], end[is_comm])
        kernel_any.add(ts[is_kernel], end[is_kernel])  # compute or communication
        is_kernel &= ~is_comm
        compute.add(ts[is_kernel], end[is_kernel])
        stream = table.stream[block]
        for st in distinct(stream).tolist():
            on = stream == st
            streams.setdefault(st, UnionLength(lo, hi)).add(ts[on], end[on])
            stream_events[st] = stream_events.get(st, 0) + int(np.count_nonzero(on))
    communication = kernel_any.total - compute.total
    memory = busy.total - kernel_any.total
    overlap = compute.total + comm_any.total - kernel_any.total
    return Device(
        device=int(dev), busy_us=busy.total, busy_pct=100 * busy.total / span if span else 0.0,
        idle_us=span - busy.total,
        temporal=Temporal(compute_us=compute.total, communication_us=communication, memory_us=memory,
                          idle_us=span - busy.total),
        comm_overlap_pct=100 * overlap / comm_any.total if comm_any.total else 0.0,
        idle_breakdown=idle_breakdown(table, rows, lo, hi),
        streams=sorted((StreamBusy(stream=int(st), events=stream_events[st], busy_us=u.total,
                                   busy_pct=100 * u.total / span if span else 0.0) for st, u in streams.items()),
                       key=lambda d: -d.busy_us))


def idle_breakdown(table: EventTable, rows: np.ndarray, lo: float, hi: float) -> IdleBreakdown:
    """Idle time of one device within [lo, hi], split by cause as HTA does:

    - host_wait: the work after the gap was launched (its runtime call started) only after the
      device went idle: the GPU waited for the CPU to enqueue work;
    - kernel_wait: work was already queued, and the gap is shorter than `KERNEL_WAIT_US`
      (launch latency between consecutive kernels);
    - other: longer gaps with work queued (waits on events, other streams, the host);
    - edges: idle before the first and after the last GPU event of the window.
    The four add up to the device's idle time in the window. Spans clipped to the window; a
    gap is an event's start past the running end of the events before it. Read `ROW_BLOCK`
    rows at a time, the running end carried over.
    """
    if not len(rows):
        return IdleBreakdown(edges_us=hi - lo)
    rows = _in_start_order(table, rows)
    host_wait = kernel_wait = other = 0.0
    first_start = float(np.clip(table.ts[rows[0]], lo, hi))
    covered_to = first_start  # before the first event: no gap, the edge counts it
    for block in (rows[a:a + ROW_BLOCK] for a in range(0, len(rows), ROW_BLOCK)):
        ts = table.ts[block]
        run_end = np.clip(ts + table.dur[block], lo, hi)
        np.clip(ts, lo, hi, out=ts)
        before = np.empty_like(run_end)  # the running end before each event
        before[0] = covered_to
        run_end[0] = max(run_end[0], covered_to)
        np.maximum.accumulate(run_end, out=run_end)
        before[1:] = run_end[:-1]
        covered_to = float(run_end[-1])
        del run_end
        np.subtract(ts, before, out=ts)  # ts now holds the gap before each event
        idx = np.flatnonzero(ts > 0)
        gap, idle_from = ts[idx], before[idx]
        launcher = launching_rows(table, block[idx])
        launched = np.where(launcher >= 0, table.ts[np.maximum(launcher, 0)], np.nan)
        hw = launched > idle_from  # launched after the device went idle (as HTA: strictly after)
        kw = ~hw & (gap < KERNEL_WAIT_US)
        host_wait += float(gap[hw].sum())
        kernel_wait += float(gap[kw].sum())
        other += float(gap[~hw & ~kw].sum())
    return IdleBreakdown(host_wait_us=host_wait, kernel_wait_us=kernel_wait, other_us=other,
                         edges_us=float((first_start - lo) + (hi - covered_to)))


def end_of_launched_work(table: EventTable, lo: float, hi: float) -> float:
    """When the work launched in [lo, hi) is done: `hi`, or later when GPU events launched by
    runtime calls in that span end after it. A GPU-bound program's CPU runs ahead of its GPU
    (by up to ~1000 queued launches), so its profiled steps end on the CPU long before the
    GPU has run them; measured on the CPU's span alone, such a GPU would look mostly idle."""
    link = table.launcher
    end = hi
    for a in range(0, len(link.rows), ROW_BLOCK):  # the linked GPU events, a block at a time
        rows, calls = link.rows[a:a + ROW_BLOCK], link.values[a:a + ROW_BLOCK]
        started = table.ts[calls]
        rows = rows[(started >= lo) & (started < hi)]
        if len(rows):
            end = max(end, float((table.ts[rows] + table.dur[rows]).max()))
    return end


def launching_rows(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """For GPU events `rows`: the runtime/driver call that launched each (same correlation id;
    the last such call if an id repeats; resolved at load, `trace.launches`), or -1 (also for
    rows that are no GPU event)."""
    return table.launcher[np.asarray(rows)]


def _gpu_rows_overlapping(table: EventTable, lo: float, hi: float) -> np.ndarray:
    """GPU events overlapping [lo, hi], ascending, found `ROW_BLOCK` rows at a time."""
    return overlapping_rows(table.ts, table.dur, lo, hi,
                            mask=lambda block: in_categories(table.cat[block], GPU_CATEGORIES))


def launch_statistics(table: EventTable, kernels: np.ndarray) -> LaunchStats:
    """Kernel launches: how long the CPU spends launching vs how long kernels run.

    launch_delay: kernel start minus the start of the runtime call that launched it (queueing);
    cpu_launch_mean_us: mean duration of those runtime calls, each call counted once;
    kernels_per_launch: linked kernels per distinct launching call (1 for plain launches, the
    graph's size for CUDA-graph replays, whose one cudaGraphLaunch starts every kernel).
    `short_share` is the fraction of kernels shorter than `SHORT_KERNEL_US`.
    """
    if not len(kernels):
        return LaunchStats()
    kdur = table.dur[kernels].astype(np.float64)
    short = int((kdur < SHORT_KERNEL_US).sum())
    out = LaunchStats(kernels=int(len(kernels)), kernel_mean_us=float(kdur.mean()),
                      kernel_median_us=float(np.median(kdur, overwrite_input=True)), short_kernels=short,
                      short_share=short / len(kernels))
    del kdur
    launch_rows = launching_rows(table, kernels)
    linked = launch_rows >= 0
    out.linked_launches = int(linked.sum())
    if linked.any():
        lr = launch_rows[linked]
        del launch_rows
        delay = table.ts[kernels[linked]] - table.ts[lr]
        del linked
        out.launch_delay_median_us = float(np.median(delay, overwrite_input=True))  # reorders only
        out.launch_delay_p90_us = float(np.percentile(delay, 90, overwrite_input=True))
        del delay
        calls = distinct(lr)
        out.cpu_launch_mean_us = float(table.dur[calls].astype(np.float64).mean())
        out.launch_calls = int(len(calls))
        out.kernels_per_launch = float(len(lr) / len(calls))
    return out


def _top_kernels(table: EventTable, by_name: tuple[np.ndarray, np.ndarray, np.ndarray],
                 top: int = 20) -> list[KernelRow]:
    """The kernels with the most time, from (name ids, counts, µs) per kernel name."""
    uniq, count, total = by_name
    out = []
    for g in np.argsort(-total, kind="stable")[:top].tolist():
        name = table.strings[uniq[g]]
        out.append(KernelRow(name=name, family=kernel_family(name), count=int(count[g]), time_us=float(total[g]),
                             mean_us=float(total[g] / count[g])))
    return out


def memcpy_summary(table: EventTable, rows: np.ndarray) -> dict[str, MemcpyDirection]:
    """Copies by direction (HtoD, DtoH, DtoD, ...) from the memcpy kernel names."""
    out: dict[str, MemcpyDirection] = {}
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
        d = out.setdefault(kind, MemcpyDirection())
        d.count += int(count[g])
        d.time_us += float(time_us[g])
        d.bytes += int(nbytes[g])
    return out
