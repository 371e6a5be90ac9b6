"""The work of one task: rank trace files in, their `RankSummary`s out (msgpack bytes).

Runs on a Dask worker (or in this process): fetch the file when remote, load it, run every
one-rank analysis and rule, keep the summary and let the events go. A trace that cannot be read
becomes a `RankFailure` (returned, not raised: retrying cannot help it); anything else that goes
wrong is raised so that Dask retries the task (a network error, a worker lost).
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec
import numpy as np

from ..analysis.key_averages import TableOptions
from ..errors import TraceError
from ..model.analysis import RankAnalysis
from ..model.findings import Finding
from ..trace.metadata import rank_from_path
from .remote import host_of, local_copy
from .summary import (
    CollectiveGroup,
    CollectiveType,
    Comm,
    DeviceTime,
    FullRank,
    KernelTime,
    OpTime,
    RankFailure,
    RankResult,
    RankSummary,
    Skipped,
    StepStats,
    TaskTimes,
    encode,
)

TOP_OPS = 10
"""Ops and kernels kept per rank: the few that matter for comparing ranks (the main rank's
report keeps its full tables)."""
CALLS_MAX = 512
"""Calls of one collective group kept per rank, in time order (~4.5 KB): enough to line the
ranks' calls up over many steps; a 10,000-rank job keeps ~45 MB of them per group at most."""


class RankItem(msgspec.Struct, frozen=True):
    """One rank file to summarise."""

    path: str  # local path or URL
    host: str | None = None  # from the job's layout; else the file's name tells, or nobody does
    full: bool = False  # also return the whole analysis (the report's main rank)


class TaskOptions(msgspec.Struct, frozen=True):
    rank: int | None = None  # only this rank (`analyze --rank`): the others are `Skipped`
    one_lane: bool = False  # one thread per task: the worker's other cores run other tasks
    tables: TableOptions | None = None  # the key_averages table's options (`analyze --sort-by ...`)


def summarise_batch(items: list[RankItem], options: TaskOptions) -> bytes:
    """A Dask task: several ranks (fewer round trips than one task a rank), msgpack out."""
    if options.one_lane:
        os.environ["TORCHNECK_ANALYSIS_THREADS"] = "1"
    return encode([summarise_rank(item, options) for item in items])


def summarise_rank(item: RankItem, options: TaskOptions) -> RankResult:
    times = TaskTimes()
    t = time.perf_counter()
    with local_copy(item.path) as local:
        times.fetch_s = time.perf_counter() - t
        return _summarise_local(item, options, local, times)


def _summarise_local(item: RankItem, options: TaskOptions, local, times: TaskTimes) -> RankResult:
    from ..analysis.run import ops_by_user_line
    from ..analysis.summary import analyze_with_nesting
    from ..diagnose.engine import diagnose
    from ..diagnose.facts import Facts
    from ..model.base import to_builtins
    from ..pipeline import op_lines, trace_views
    from ..trace.loader import load_trace
    from .sizes import Kept, collective_sizes, sizes_in

    t = time.perf_counter()
    kept = Kept()
    try:
        trace = load_trace(local, workers=1 if options.one_lane else None, tap=kept)
    except TraceError as exc:
        return RankFailure(path=item.path, rank=rank_from_path(local), status="unreadable",
                           error=str(exc).replace(str(local), item.path))
    times.load_s = time.perf_counter() - t
    rank = trace.meta.rank
    if options.rank is not None and rank is not None and rank != options.rank:
        return Skipped(path=item.path, rank=rank)
    t = time.perf_counter()
    try:
        analysis, nesting = analyze_with_nesting(trace, tables=options.tables, lean=not item.full)
        if str(local) != item.path:  # a remote file's local copy: the report names the URL
            tr = analysis.trace
            tr.path, tr.warnings = item.path, [w.replace(str(local), item.path) for w in tr.warnings]
        ops_lines = op_lines(ops_by_user_line(trace, None, None, nesting))  # with_stack traces: by function
        findings = diagnose(Facts(analysis=analysis, ops_by_line=[to_builtins(e) for e in ops_lines]))
        for f in findings:
            f.rank = rank
        full = None
        if item.full:
            full = FullRank(analysis=analysis, views=trace_views(trace, nesting), ops_by_line=ops_lines)
        times.analyse_s = time.perf_counter() - t
        t = time.perf_counter()
        sizes: dict = {}
        if analysis.comm.present:
            data = kept.data(trace.meta.uncompressed_bytes)
            sizes = sizes_in(data) if data is not None else collective_sizes(local)
        del kept
        groups = collective_groups(trace, sizes)
        times.sizes_s = time.perf_counter() - t
    except Exception as exc:  # a bug met on this rank's data: the rank is listed, the job goes on
        if os.environ.get("TORCHNECK_DEBUG"):
            raise
        return RankFailure(path=item.path, rank=rank, status="error",
                           error=f"analysis failed ({type(exc).__name__}: {exc})")
    return summary_of(analysis, findings, rank=rank, path=item.path,
                      host=item.host or host_of(item.path), groups=groups, full=full, times=times)


def collective_groups(trace, sizes: dict) -> list[CollectiveGroup]:
    """The rank's collective calls in its steps, grouped by (type, message size), each group's
    durations in time order. On the host side only the outermost of nested collective spans
    counts (`c10d::allreduce_` holds `record_param_comms` holds `nccl:all_reduce`), and a call
    takes the size recorded by any span inside it."""
    from ..analysis.distributed import collective_rows
    from ..analysis.steps import find_steps

    t = trace.events
    steps = find_steps(t)
    rows, side, kinds, codes = collective_rows(t, steps)
    if not len(rows):
        return []
    starts = t.ts[rows]
    ends = starts + t.dur[rows]
    if side == "host":
        outer = starts >= np.maximum.accumulate(np.concatenate(([-np.inf], ends[:-1])))
        rows, codes, starts, ends = rows[outer], codes[outer], starts[outer], ends[outer]
    sized_ts = np.array(sorted(sizes), dtype=np.float64)
    groups: dict[tuple, CollectiveGroup] = {}
    for kind_code, s, e in zip(codes.tolist(), starts.tolist(), ends.tolist()):
        size = None
        if len(sized_ts):
            at = int(np.searchsorted(sized_ts, s))
            if at < len(sized_ts) and sized_ts[at] <= (s if side == "device" else e):
                size = sizes[float(sized_ts[at])]
        key = (kinds[kind_code], size.dtype if size else "", size.nelems if size else 0,
               size.group_size if size else 0)
        g = groups.get(key)
        if g is None:
            g = groups[key] = CollectiveGroup(type=key[0], dtype=key[1], nelems=key[2], group_size=key[3])
        g.calls += 1
        if len(g.durations_us) < CALLS_MAX:
            g.durations_us.append(round(e - s, 3))
    return sorted(groups.values(), key=lambda g: -sum(g.durations_us))


def summary_of(analysis: RankAnalysis | None, findings: list[Finding], *, rank: int | None, path: str,
               groups: list[CollectiveGroup] | None = None, **extra: Any) -> RankSummary:
    """A rank's summary from its analysis (`analysis.summary.analyze_trace`) and findings:
    what tasks return, and what a job's per-rank reports are turned into for the merge."""
    if analysis is None:
        return RankSummary(rank=rank, path=path, findings=findings, **extra)
    st = analysis.steps
    steps = StepStats(source=str(st.source), count=st.count, median_us=st.median_us, mean_us=st.mean_us,
                      min_us=st.min_us, max_us=st.max_us, window_us=st.window_us,
                      breakdown_us=dict(st.breakdown_total_us))
    c = analysis.comm
    comm = Comm()
    if c.present:
        comm = Comm(present=True, side=c.side, time_us=c.time_us, per_step_us=c.per_step_us, steps=c.steps,
                    by_type=[CollectiveType(type=t.type, count=t.count, time_us=t.time_us, per_step_us=t.per_step_us)
                             for t in c.by_type], groups=groups or [])
    gpu = analysis.gpu
    devices = [DeviceTime(device=int(d.device), busy_pct=d.busy_pct, idle_us=d.idle_us,
                          compute_us=d.temporal.compute_us, communication_us=d.temporal.communication_us,
                          comm_overlap_pct=d.comm_overlap_pct or 0.0, host_wait_us=d.idle_breakdown.host_wait_us,
                          kernel_wait_us=d.idle_breakdown.kernel_wait_us, other_idle_us=d.idle_breakdown.other_us)
               for d in gpu.devices]
    ops = [OpTime(name=o.name, count=o.count, self_us=o.self_us, total_us=o.total_us)
           for o in analysis.ops.by_name[:TOP_OPS]]
    kernels = [KernelTime(name=k.name, family=k.family, count=k.count, time_us=k.time_us)
               for k in gpu.top_kernels[:TOP_OPS]]
    tr = analysis.trace
    return RankSummary(rank=rank, path=path, world_size=tr.world_size, events=tr.events, bytes=tr.bytes,
                       steps=steps, comm=comm, devices=devices, ops=ops, kernels=kernels, findings=findings,
                       warnings=list(tr.warnings), **extra)
