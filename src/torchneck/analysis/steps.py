"""Steps: the repeating unit of a training or inference loop, and where each step's time goes."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..sites import LINE_PREFIX
from ..trace.table import Cat, EventTable, in_categories
from .intervals import claim_by_priority_in_windows

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
_COMM = re.compile(r"nccl|rccl|^gloo:|^c10d::|record_param_comms|^ProcessGroup", re.IGNORECASE)
_DATALOADER = re.compile(r"DataLoader|_MultiProcessingDataLoaderIter|_SingleProcessDataLoaderIter")

BREAKDOWN_CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader",
                        "cpu_exec", "other")
"""Step-time categories in claiming priority, as the TensorBoard profiler plugin defined them:
an instant covered by a kernel counts as kernel even if the CPU was also busy, and so on down."""


@dataclass
class Step:
    index: int  # the N of ProfilerStep#N, or a running count
    start: float  # µs
    end: float  # µs
    source: str  # "ProfilerStep", "optimizer", "window"

    @property
    def duration(self) -> float:
        return self.end - self.start


def is_communication(name: str) -> bool:
    """Collective / point-to-point communication, by kernel or op name (NCCL, RCCL, gloo, c10d);
    never torchneck's own line spans, whose file path may contain such a word."""
    return not name.startswith(LINE_PREFIX) and bool(_COMM.search(name))


def find_steps(table: EventTable) -> list[Step]:
    """The steps of the trace.

    1. `ProfilerStep#N` annotations (emitted by `torch.profiler.profile.step()`, and by torchneck's
       own capture), one per N: the earliest start and the latest end among its copies.
    2. Else the spans between consecutive ends of `Optimizer.step#...` annotations.
    3. Else one step covering the whole trace (the window).
    """
    if not len(table):
        return []
    host = in_categories(table.cat, (Cat.USER_ANNOTATION, Cat.CPU_OP))
    by_index: dict[int, list[float]] = {}
    step_ids = np.flatnonzero(table.names_matching(lambda s: s.startswith("ProfilerStep#")))
    if len(step_ids):
        rows = np.flatnonzero(host & np.isin(table.name, step_ids))
        for r in rows.tolist():
            m = _PROFILER_STEP.match(table.strings[table.name[r]])
            if not m:
                continue
            n = int(m.group(1))
            s, e = float(table.ts[r]), float(table.ts[r] + table.dur[r])
            span = by_index.setdefault(n, [s, e])
            span[0] = min(span[0], s)
            span[1] = max(span[1], e)
    if by_index:
        return [Step(n, s, e, "ProfilerStep") for n, (s, e) in sorted(by_index.items())]
    opt = table.rows_with_name(lambda s: bool(_OPTIMIZER_STEP.match(s))) & host
    ends = np.sort((table.ts[opt] + table.dur[opt]).astype(np.float64))
    if len(ends) >= 2:
        return [Step(i, float(a), float(b), "optimizer") for i, (a, b) in enumerate(zip(ends[:-1], ends[1:]))]
    lo = float(table.ts.min())
    hi = float((table.ts + table.dur).max())
    return [Step(0, lo, hi, "window")]


def step_breakdown(table: EventTable, steps: list[Step]) -> list[dict[str, float]]:
    """Per step, µs spent in each of `BREAKDOWN_CATEGORIES`, claimed in that priority so that
    the categories add up to the step's duration. Definitions:

    - kernel: GPU kernels other than communication; memcpy / memset: GPU copies and fills;
    - communication: NCCL/RCCL kernels, and gloo / c10d collectives on the CPU;
    - runtime: CUDA/HIP runtime and driver calls (launches, syncs, allocations);
    - dataloader: DataLoader `__next__` spans; cpu_exec: any other CPU op or annotation;
    - other: time in the step covered by none of these (Python between ops, idle).
    """
    if not steps:
        return []
    comm_names = table.names_matching(is_communication)
    dl_names = table.names_matching(lambda s: bool(_DATALOADER.search(s)))
    step_names = table.names_matching(lambda s: s.startswith("ProfilerStep#"))
    is_comm = comm_names[table.name] if len(comm_names) else np.zeros(len(table), bool)
    is_dl = dl_names[table.name] if len(dl_names) else np.zeros(len(table), bool)
    is_step = step_names[table.name] if len(step_names) else np.zeros(len(table), bool)
    cat = table.cat
    host = in_categories(cat, (Cat.CPU_OP, Cat.USER_ANNOTATION)) & ~is_step
    masks = [
        (cat == Cat.KERNEL) & ~is_comm,
        cat == Cat.GPU_MEMCPY,
        cat == Cat.GPU_MEMSET,
        ((cat == Cat.KERNEL) & is_comm) | (host & is_comm),
        in_categories(cat, (Cat.RUNTIME, Cat.DRIVER, Cat.SYNC)),
        host & is_dl,
        host & ~is_dl & ~is_comm,
    ]
    ts = table.ts
    lo_all = min(s.start for s in steps)
    hi_all = max(s.end for s in steps)
    near = (ts <= hi_all) & (ts + table.dur >= lo_all)

    def spans():  # one category's spans at a time, in priority order
        for m in masks:
            rows = np.flatnonzero(m & near)
            start = ts[rows]
            yield start, start + table.dur[rows]

    starts = np.array([s.start for s in steps])
    ends = np.array([s.end for s in steps])
    parts = claim_by_priority_in_windows(spans(), starts, ends, len(masks))
    return [dict(zip(BREAKDOWN_CATEGORIES, map(float, row))) for row in parts]
