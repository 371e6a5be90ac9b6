"""Host call nesting: which host event directly encloses each one, and the CPU ops' self time.

Events on one thread nest like a call stack (an op inside the annotation or op that called it,
a runtime call inside its op), so one walk in start order, a stack per thread, gives every
event's parent; an op's self time is its duration less its direct children's. The walk is done in
C (`_nest.c`) when it is built, else vectorised with numpy where events nest properly and by an
explicit stack where they do not: the same arrays either way (tests/test_trace.py). Every walk
here is a loop over an explicit stack or a level at a time, never recursion, so a stack of any
depth nests.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..trace import spill
from ..trace.table import Cat, EventTable, in_categories, search_sorted
from .groups import positions_in
from .intervals import ROW_BLOCK

try:  # the optional C walk (setup.py); without it the numpy path gives the same nesting
    from . import _nest  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - built without a C compiler
    _nest = None
if os.environ.get("TORCHNECK_PURE_PYTHON"):
    _nest = None


HOST_CATEGORIES = (Cat.CPU_OP, Cat.USER_ANNOTATION, Cat.RUNTIME, Cat.DRIVER, Cat.SYNC)


Rows = np.ndarray | slice
"""Rows of a table: an index array, or a slice of the start-sorted table. The events starting
in a window are one range of it, and a slice reads each column as a view where an index array
would gather a copy: at 7 M events, the window's row list alone was 29 MB, each gather of a
column through it up to as much again."""


@dataclass
class Nesting:
    """Per row of the table, the directly enclosing host event (or -1); per CPU op, its self
    time in µs. Self time is kept for the ops alone, the only rows any analysis weighs by it:
    a float for every event was 28 MB at 3 GB. `ops` also serves the analyses as the CPU-op
    rows of a window (`ops_in`), a view rather than a copy."""

    parent: np.ndarray  # int32, per row
    ops: np.ndarray  # int32 (int64 past 2**31 rows): the CPU-op rows, ascending
    op_self_time: np.ndarray  # float32, per entry of `ops` (sums are taken in float64)
    _sites: np.ndarray | None = field(default=None, repr=False)  # `ops.enclosing_sites`, once asked for

    def ops_in(self, rows: Rows) -> np.ndarray:
        """The CPU ops among `rows`, ascending: a view of `ops` for a range of rows."""
        if isinstance(rows, slice):
            a, b = search_sorted(self.ops, [rows.start or 0, rows.stop if rows.stop is not None else 2**62])
            return self.ops[a:b]
        rows = np.asarray(rows)
        return rows[positions_in(self.ops, rows) >= 0]

    def self_time(self, rows: np.ndarray) -> np.ndarray:
        """Self time (float32 µs) of each of `rows`, CPU ops (other rows read 0). Where `rows`
        is a run of `ops` itself (what `ops_in` gives, and its blocks), a slice of the times;
        else found by binary search."""
        rows = np.asarray(rows)
        ops = self.ops
        if rows.ndim == 1 and len(rows) and rows.dtype == ops.dtype and rows.strides == ops.strides \
                and np.may_share_memory(rows, ops):
            start, rem = divmod(rows.__array_interface__["data"][0] - ops.__array_interface__["data"][0],
                                ops.itemsize)
            if not rem and 0 <= start and start + len(rows) <= len(ops):
                return self.op_self_time[start:start + len(rows)]
        at = positions_in(ops, rows)
        return np.where(at >= 0, self.op_self_time[np.maximum(at, 0)], np.float32(0))


def innermost_open(candidates: np.ndarray, starts: np.ndarray, t: np.ndarray,
                   end_of: Callable[[np.ndarray], np.ndarray],
                   up: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """For each instant in `t`, the innermost of nested spans open at it, or -1. `candidates`
    are the spans' ids in start order (`starts`, parallel and ascending): the latest starting at
    or before the instant is tried first and, while it ended before the instant (`end_of`),
    its enclosing span (`up`, -1 at the top) instead; spans nest like a call stack, so the
    first one still open is the innermost. All instants climb together, one level a step."""
    j = np.searchsorted(starts, t, side="right") - 1
    found = np.where(j >= 0, candidates[np.maximum(j, 0)], -1)
    while True:
        closed = found >= 0
        closed[closed] = end_of(found[closed]) < t[closed]
        if not closed.any():
            return found
        found[closed] = up(found[closed])


def depth_of(nesting: Nesting, rows: np.ndarray) -> np.ndarray:
    """How many host events enclose each of `rows` (0: top level). Not kept per row of the
    table (2 bytes an event) since only a few thousand drawn rows need it: climbed here, all
    of them one level at a time."""
    depth = np.zeros(len(rows), dtype=np.int32)
    up = nesting.parent[np.asarray(rows, dtype=np.intp)]
    while True:
        climbing = np.flatnonzero(up >= 0)
        if not len(climbing):
            return depth
        depth[climbing] += 1
        up[climbing] = nesting.parent[up[climbing]]


def host_nesting(table: EventTable) -> Nesting:
    """Parent of host events (ops, annotations, runtime calls), per thread, and the CPU ops'
    self time.

    Events on one thread nest like a call stack; an event's self time is its duration minus
    its direct children's. Non-host rows get parent -1.
    The answer is the call-stack walk's (`_nest_by_stack`): done in C over all threads at once
    when the extension is built (`_nest.c`; in row order with a stack per thread on a table in
    start order, as loaded), else vectorised where events nest properly
    (`_nest_thread`), one block of a thread at a time (`_thread_blocks`). Both give the same
    arrays (tests/test_trace.py).
    """
    n = len(table)
    parent = spill.full(n, -1, np.int32)  # in a spill file with a table too large for memory
    in_order = _sorted_by_start(table)
    if in_order:
        found = _native_table_walk(table, parent)
        if found is not None:
            return found
    self_time = table.dur.astype(np.float32)
    if in_order:  # the loader's order: grouping by thread keeps it per thread
        rows = _host_rows_by_thread(table)
    else:
        host = np.flatnonzero(in_categories(table.cat, HOST_CATEGORIES)).astype(np.int32)
        rows = host[np.lexsort((-table.dur[host], table.ts[host], table.thread[host]))]
        del host
    if not len(rows):
        return _with_op_self_times(table, parent, self_time)
    thread_sorted = table.thread[rows]
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(thread_sorted)) + 1, [len(rows)])).astype(np.int64)
    del thread_sorted
    if _native_walk(table, rows, bounds, parent, self_time):
        return _with_op_self_times(table, parent, self_time)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        for seg, ts, end in _thread_blocks(table, rows[a:b]):
            dur = table.dur[seg].astype(np.float64)
            par_pos, _, child = _nest_thread(ts, dur, end)
            has = par_pos >= 0
            parent[seg[has]] = seg[par_pos[has]]
            self_time[seg] = np.maximum(dur - child, 0.0)
    return _with_op_self_times(table, parent, self_time)


def _with_op_self_times(table: EventTable, parent: np.ndarray, self_time: np.ndarray) -> Nesting:
    """The `Nesting` of a walk that wrote every row's self time: the CPU ops' kept."""
    ops = np.flatnonzero(table.cat == Cat.CPU_OP).astype(np.int32 if len(table) < 2**31 else np.int64)
    return Nesting(parent, ops, self_time[ops])


THREADS_BY_MASK = 16
"""Up to this many host threads, host rows are grouped by thread a block and a thread at a time
(int32 rows only); with more, by one stable sort (an int64 order as long as the host rows)."""


def _host_rows_by_thread(table: EventTable) -> np.ndarray:
    """Host rows (int32 when they fit), grouped by thread in thread order, in table order within
    a thread: `host[np.argsort(table.thread[host], kind="stable")]` without its temporaries."""
    n = len(table)
    blocks = range(0, n, ROW_BLOCK)
    counts = np.zeros(len(table.threads.pid), dtype=np.int64)
    for a in blocks:
        host = in_categories(table.cat[a:a + ROW_BLOCK], HOST_CATEGORIES)
        counts += np.bincount(table.thread[a:a + ROW_BLOCK][host], minlength=len(counts))[:len(counts)]
    threads = np.flatnonzero(counts).tolist()
    index = np.int32 if n < np.iinfo(np.int32).max else np.int64
    if len(threads) > THREADS_BY_MASK or int(table.thread.max(initial=-1)) >= len(counts):
        host = np.flatnonzero(in_categories(table.cat, HOST_CATEGORIES)).astype(index)
        return host[np.argsort(table.thread[host], kind="stable")]
    # Each thread's rows go straight to their place in the output (its counts say where), so
    # no list of parts is held beside their concatenation (25 MB each at 3 GB).
    out = np.empty(int(counts.sum()), dtype=index)
    at = dict(zip(threads, np.concatenate(([0], np.cumsum(counts[threads])[:-1])).tolist()))
    for a in blocks:
        host = in_categories(table.cat[a:a + ROW_BLOCK], HOST_CATEGORIES)
        thread = table.thread[a:a + ROW_BLOCK]
        for th in threads:
            found = np.flatnonzero(host & (thread == th))
            out[at[th]:at[th] + len(found)] = found + a
            at[th] += len(found)
    return out


_HOST_BY_CAT_BYTE = np.zeros(256, dtype=np.uint8)
_HOST_BY_CAT_BYTE[[int(c) for c in HOST_CATEGORIES]] = 1


def _native_table_walk(table: EventTable, parent: np.ndarray) -> Nesting | None:
    """The call-stack walk in C over a table in start order, a stack per thread (`_nest.c`
    `walk_table`): no host rows grouped by thread are built for it (25 MB at 3 GB), and self
    time is written for the CPU ops alone. None (`parent` untouched) when it is not built or
    the columns are not the loader's types."""
    if _nest is None or not hasattr(_nest, "walk_table") or table.ts.dtype != np.float64 \
            or table.dur.dtype != np.float32 or table.cat.dtype != np.int8 \
            or table.thread.dtype.itemsize not in (1, 2, 4) or table.thread.dtype.kind != "i" \
            or len(table) >= np.iinfo(np.int32).max:
        return None
    n_ops = sum(int(np.count_nonzero(table.cat[a:a + ROW_BLOCK] == Cat.CPU_OP))
                for a in range(0, len(table), ROW_BLOCK))
    ops = spill.empty(n_ops, np.int32, rows=len(table))
    op_self_time = spill.empty(n_ops, np.float32, rows=len(table))
    _nest.walk_table(np.ascontiguousarray(table.ts), np.ascontiguousarray(table.dur),
                     np.ascontiguousarray(table.cat), np.ascontiguousarray(table.thread), _HOST_BY_CAT_BYTE,
                     int(Cat.CPU_OP), parent, ops, op_self_time)
    return Nesting(parent, ops, op_self_time)


def _native_walk(table: EventTable, rows: np.ndarray, bounds: np.ndarray, parent: np.ndarray,
                 self_time: np.ndarray) -> bool:
    """The call-stack walk in C (`_nest.c`), straight into the output arrays; False (outputs
    untouched for the numpy path) when it is not built or the columns are not the loader's
    types."""
    if _nest is None or table.ts.dtype != np.float64 or table.dur.dtype != np.float32 \
            or len(table) >= np.iinfo(np.int32).max:
        return False
    _nest.walk(np.ascontiguousarray(table.ts), np.ascontiguousarray(table.dur), rows.astype(np.int32, copy=False),
               bounds, parent, self_time)
    return True


NESTING_BLOCK = 1 << 16
"""Events nested at once: the vectorised pass holds ~15 arrays of this length, so blocks keep
its memory at a few MB on traces of any size."""


def _thread_blocks(table: EventTable, thread_rows: np.ndarray):
    """Cut one thread's rows (sorted by start) into blocks of about `NESTING_BLOCK` at points
    where every earlier event has ended (the call stack is empty), so each block nests on its
    own; yields (rows, starts, ends) of each. Only a block's worth of the thread is read at once,
    unless no such point comes for longer (one event open across it: the block grows)."""
    m, pos = len(thread_rows), 0
    while pos < m:
        size = NESTING_BLOCK
        while True:
            hi = min(pos + size, m)
            seg = thread_rows[pos:hi]
            ts = table.ts[seg]
            end = ts + table.dur[seg]
            if hi == m:
                cut = hi - pos
                break
            free = np.flatnonzero(ts[1:] >= np.maximum.accumulate(end)[:-1])
            if len(free):
                cut = int(free[-1]) + 1
                break
            size *= 2
        yield seg[:cut], ts[:cut], end[:cut]
        pos += cut


def _sorted_by_start(table: EventTable) -> bool:
    """True when rows are ordered by start, longer first on ties (as `load_trace` leaves them)."""
    ts, dur = table.ts, table.dur
    for a in range(0, max(len(ts) - 1, 0), ROW_BLOCK):  # a block (and the row after it) at a time
        t, d = ts[a:a + ROW_BLOCK + 1], dur[a:a + ROW_BLOCK + 1]
        if not np.all((t[1:] > t[:-1]) | ((t[1:] == t[:-1]) & (d[1:] <= d[:-1]))):
            return False
    return True


def _nest_thread(ts: np.ndarray, dur: np.ndarray, end: np.ndarray):
    """One thread's events, sorted by (start, longest first) -> (parent position or -1, depth,
    children's total duration per event), as the call-stack walk gives them.

    Vectorised: an event's depth is the number of earlier events still open at its start
    (end > start), its parent the last earlier event one level up. That is the walk's answer
    wherever every event lies inside its parent. Top-level stretches (depth-0 event up to the
    next one) are independent, so a stretch where some event sticks out of its parent (clock
    rounding, compile-time spans) is redone by the walk alone."""
    n = len(ts)
    pos = np.arange(n)
    closed = np.searchsorted(np.sort(end), ts, side="right")  # events with end <= ts[i] ...
    zero = end <= ts  # zero-length as computed: at 1.7e15 µs (epoch clocks) a 0.1 µs event ends where it starts
    if zero.any():
        # ... less those at or after i in order: zero-length events starting at ts[i], the only
        # later ones that can end by then (they sort last among equal starts).
        first_of_group = np.empty(n, dtype=bool)
        first_of_group[0] = True
        np.not_equal(ts[1:], ts[:-1], out=first_of_group[1:])
        group_last = (np.append(np.flatnonzero(first_of_group)[1:], n) - 1)[np.cumsum(first_of_group) - 1]
        zeros_upto = np.cumsum(zero)
        closed -= zeros_upto[group_last] - zeros_upto + zero
    depth = pos - closed
    del closed
    par_pos = np.full(n, -1, dtype=np.int64)
    bad = depth < 0
    nested = np.flatnonzero(depth > 0)
    if len(nested):
        stride = np.int64(n + 1)
        by_level = np.sort(depth.astype(np.int64) * stride + pos)
        wanted = (depth[nested] - 1).astype(np.int64) * stride + nested
        at = np.maximum(np.searchsorted(by_level, wanted, side="left") - 1, 0)
        cand = by_level[at]
        p = cand % stride
        wrong = ((cand // stride) != depth[nested] - 1) | (end[p] <= ts[nested]) | (end[nested] > end[p])
        bad[nested[wrong]] = True
        par_pos[nested] = p
    depth = depth.astype(np.int32)
    if bad.any():
        stretch = np.cumsum(depth <= 0) - 1
        starts = np.flatnonzero(depth <= 0)
        stops = np.append(starts[1:], n)
        for k in np.unique(stretch[bad]).tolist():
            a, b = int(starts[k]), int(stops[k])
            p_walk, d_walk, _ = _nest_by_stack(ts[a:b], dur[a:b], end[a:b])
            par_pos[a:b] = np.where(p_walk >= 0, p_walk + a, -1)
            depth[a:b] = d_walk
    has = par_pos >= 0
    child = np.bincount(par_pos[has], weights=dur[has], minlength=n)
    return par_pos, depth, child


def _nest_by_stack(ts: np.ndarray, dur: np.ndarray, end: np.ndarray):
    """The reference: walk one thread's sorted events with a call stack, popping events that
    ended by the next one's start."""
    ts_l, end_l, dur_l = ts.tolist(), end.tolist(), dur.tolist()
    n = len(ts_l)
    par = [-1] * n
    dep = [0] * n
    child = [0.0] * n
    stack: list[int] = []
    for i in range(n):
        s = ts_l[i]
        while stack and end_l[stack[-1]] <= s:
            stack.pop()
        if stack:
            p = stack[-1]
            par[i] = p
            dep[i] = dep[p] + 1
            child[p] += dur_l[i]
        stack.append(i)
    return np.array(par, dtype=np.int64), np.array(dep, dtype=np.int32), np.array(child)
