"""Steps: the repeating unit of a training or inference loop, and where each step's time goes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..sites import LINE_PREFIX
from ..trace.table import Cat, EventTable, in_categories
from .intervals import (
    ROW_BLOCK,
    ascending,
    claim_by_priority_in_windows,
    overlapping_rows,
    union_of_rows,
)

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
_COMM = re.compile(r"nccl|rccl|^gloo:|^c10d::|record_param_comms|^ProcessGroup", re.IGNORECASE)
_DATALOADER = re.compile(r"DataLoader|_MultiProcessingDataLoaderIter|_SingleProcessDataLoaderIter")

BREAKDOWN_CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader",
                        "cpu_exec", "other")
"""Step-time categories in claiming priority, as the TensorBoard profiler plugin defined them:
an instant covered by a kernel counts as kernel even if the CPU was also busy, and so on down."""


@dataclass(frozen=True)
class Step:
    index: int  # the N of ProfilerStep#N, or a running count
    start: float  # µs
    end: float  # µs
    source: str  # "ProfilerStep", "optimizer", "window"

    @property
    def duration(self) -> float:
        return self.end - self.start


NAMES_CACHED = 1 << 16
"""Distinct names whose classification a process remembers: one rank trace holds hundreds, and a
worker analysing hundreds of ranks of one job sees the same ones again (the regular expressions
cost ~10 ms a small rank otherwise); bounded for processes that read many unrelated traces."""


@lru_cache(maxsize=NAMES_CACHED)
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
    cached = table._steps  # the analyses and the views both ask
    if cached is None:
        cached = table._steps = tuple(_find_steps(table))
    return list(cached)


def _find_steps(table: EventTable) -> list[Step]:
    if not len(table):
        return []
    host = in_categories(table.cat, (Cat.USER_ANNOTATION, Cat.CPU_OP))
    by_index: dict[int, list[float]] = {}
    is_step = table.names_matching(lambda s: s.startswith("ProfilerStep#"))
    if is_step.any():
        rows = np.flatnonzero(host & is_step[table.name])
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
    hi = max(float((table.ts[a:a + ROW_BLOCK] + table.dur[a:a + ROW_BLOCK]).max())
             for a in range(0, len(table), ROW_BLOCK))
    return [Step(0, lo, hi, "window")]


STEP_BATCH_ROWS = 1 << 16
"""Steps are broken down a batch at a time, each batch holding about this many rows (or one
step, however many it has): the unions of kernels and runtime calls, which do not shrink when
merged, then stay a few MB instead of one array per category as long as the trace."""


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
    names = _BreakdownNames(table)
    starts = np.array([s.start for s in steps], dtype=np.float64)
    ends = np.array([s.end for s in steps], dtype=np.float64)
    out = np.zeros((len(steps), len(BREAKDOWN_CATEGORIES)))
    for which, rows in _step_batches(table, starts, ends):
        out[which] = claim_by_priority_in_windows(names.spans(table, rows), starts[which], ends[which])
    return [dict(zip(BREAKDOWN_CATEGORIES, map(float, row))) for row in out]


class _BreakdownNames:
    """Which interned names are communication, DataLoader and ProfilerStep spans."""

    def __init__(self, table: EventTable):
        self.comm = table.names_matching(is_communication)
        self.dataloader = table.names_matching(lambda s: bool(_DATALOADER.search(s)))
        self.step = table.names_matching(lambda s: s.startswith("ProfilerStep#"))

    def spans(self, table: EventTable, rows: np.ndarray):
        """The union of each category's spans among `rows`, in priority order, one at a time."""
        cat = table.cat[rows]
        name = table.name[rows]
        none = np.zeros(len(rows), bool)
        is_comm = self.comm[name] if len(self.comm) else none
        is_dl = self.dataloader[name] if len(self.dataloader) else none
        host = in_categories(cat, (Cat.CPU_OP, Cat.USER_ANNOTATION))
        if len(self.step):
            host &= ~self.step[name]
        del name
        masks = (
            lambda: (cat == Cat.KERNEL) & ~is_comm,
            lambda: cat == Cat.GPU_MEMCPY,
            lambda: cat == Cat.GPU_MEMSET,
            lambda: ((cat == Cat.KERNEL) & is_comm) | (host & is_comm),
            lambda: in_categories(cat, (Cat.RUNTIME, Cat.DRIVER, Cat.SYNC)),
            lambda: host & is_dl,
            lambda: host & ~is_dl & ~is_comm,
        )
        for mask in masks:
            yield union_of_rows(table.ts, table.dur, rows[mask()])


def _step_batches(table: EventTable, starts: np.ndarray, ends: np.ndarray):
    """Yield (step positions, rows overlapping those steps' span: `ts <= end and ts + dur >=
    start`) for batches of consecutive steps of about `STEP_BATCH_ROWS` rows. On a table
    sorted by start (as loaded) the rows starting inside a batch are one slice, and the rows
    still open when it begins are carried over from the batches before; otherwise one batch."""
    ts, dur = table.ts, table.dur
    order = np.argsort(starts, kind="stable")
    if not ascending(ts):
        yield order, overlapping_rows(ts, dur, float(starts.min()), float(ends.max()), strict=False)
        return
    index = np.int32 if len(ts) < np.iinfo(np.int32).max else np.int64
    first_row = np.searchsorted(ts, starts[order], side="left")
    last_row = np.searchsorted(ts, ends[order], side="right")
    span_end = np.maximum.accumulate(ends[order])  # a batch of steps a..b-1 spans to span_end[b-1]
    span_last = np.maximum.accumulate(last_row)
    lo = float(starts[order[0]])
    open_rows = overlapping_rows(ts[:first_row[0]], dur[:first_row[0]], lo, np.inf, strict=False)
    a = 0
    while a < len(order):
        b = a + 1
        while b < len(order) and span_last[b] - first_row[a] <= STEP_BATCH_ROWS:
            b += 1
        lo, hi = float(starts[order[a]]), float(span_end[b - 1])
        i0, i1 = int(first_row[a]), int(np.searchsorted(ts, hi, side="right"))
        yield order[a:b], np.concatenate([open_rows, np.arange(i0, i1, dtype=index)])
        if b == len(order):
            return
        # Rows open when the next batch begins: still-open ones so far, and those starting since.
        nxt = float(starts[order[b]])
        j = int(first_row[b])
        later = overlapping_rows(ts[i0:j], dur[i0:j], nxt, np.inf, strict=False) + i0
        still = open_rows[ts[open_rows] + dur[open_rows] >= nxt]
        open_rows = np.concatenate([still, later.astype(index)])
        a = b
