"""`record_function` labels as first-class: how long each took, and how much of that torch ran.

The profiler recipe wraps each part of a model in `record_function("LABEL")` and reads the
labels' rows of the key_averages table. A label's own row there says little about the question
that matters: is the time under the label spent in torch ops, or in Python, NumPy, a sleep, a
lock (time no op covers)? The tutorial's "MASK INDICES" covers 99 % of the profiled time and
nearly all of it is NumPy's `argwhere` on a mask copied off the device, outside any op.

Per label (instances of one name, the outermost when one nests in another of its name):
`total_us`, `pct` of the window, `ops_us` (time covered by torch: the ops and runtime calls
directly under it, or under labels nested in it), `outside_ops_us` (the rest: Python, NumPy, other
libraries, waits), `self_us` (the duration less its direct children's, key_averages' Self CPU
without the Python frames of `with_stack` traces), `ops` (CPU ops run under it at any depth),
`top_ops` (by self time, the ops whose innermost label it is) and `where` (the user's lines
whose torch calls ran under it, by the ops' self time).

`inside` names the label around it (its first instance's).
What the time outside ops is: `other_threads_us`, the part of it during which torch ops ran on
another thread of the process (autograd's device threads run a backward pass while the thread
that called it waits under its label); `runs_backward`, a backward pass runs while it is open, on its
thread or another (its time outside ops is then mostly the wait for the engine's threads, whose
ops a filtered trace may lack);
`calls` (`with_stack` traces), the calls made under it outside torch ops, the largest first:
NumPy's `argwhere`, a tokenizer, `time.sleep`.

Which annotations are labels: user annotations other than torch's and torchneck's own
(`INTERNAL_LABELS`: profiler steps, the optimizer's, compiled regions, DataLoader, collectives,
torchneck's per-line spans), which are reported by their own analyses.

For the diagnosis rules: `innermost_labels` names the label around any rows of the table;
`label_for_ops` finds, in a report's label table, the label a finding's ops ran under,
`label_of` the label a finding lies in (by its ops or its lines), and `label_phrase` says it
in a sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from ..sites import LINE_PREFIX
from ..trace.table import Cat, EventTable, Trace, in_categories
from .nesting import Nesting, Rows, host_nesting
from .ops import has_line_marks, row_blocks
from .trace_stacks import (
    describe_site,
    enclosing_user_frames,
    has_call_stacks,
    is_user_frame_file,
    parse_frame_name,
    user_code_of,
)

INTERNAL_LABELS = re.compile(
    r"^(ProfilerStep#|Optimizer\.\w+#|Torch-Compiled Region|CompiledFunction|## Call CompiledFxGraph|"
    r"enumerate\(DataLoader\)#|DataLoader|nccl:|gloo:|c10d::|record_param_comms|DistributedDataParallel\.|"
    r"autograd::|" + re.escape(LINE_PREFIX) + ")")
"""Annotations torch (or torchneck) writes itself: not the user's labels."""

COVERING_CATS = (Cat.CPU_OP, Cat.RUNTIME, Cat.DRIVER, Cat.SYNC)
"""Host events whose time counts as torch's: ops, and the runtime calls (a device sync under a
label is torch waiting, not Python). Under `torchneck run`, torchneck's span around each torch
call counts too: what it adds to the op is torch's Python-side dispatch (and torchneck's), not
the user's Python."""

TOP_OPS = 25
"""Ops listed per label (by self time): enough for a rule to find the ops of its finding."""
WHERE_LINES = 3
CALLS = 3
"""Calls listed per label: the one that explains its time outside ops, and the next two."""
CALLS_MIN_SHARE = 0.05
"""Calls are looked for under labels whose time outside ops is at least 5 % of the window: below,
no rule reads them, and a `with_stack` trace's Python events are many."""
CALLS_MAX_INSTANCES = 256
"""Instances of one label whose Python calls are read (the first ones): a label run each step
repeats the same calls."""
BACKWARD_OP = "autograd::engine::evaluate_function"
"""The autograd engine's op around each backward function: under a label, a backward pass."""
MAX_PLACED_ROWS = 1 << 17
"""Op rows kept to place the labels' time in the user's code (1 MB): beyond, the rest of the
ops go unplaced (their time is still counted). None are kept when the trace cannot place ops."""


def user_label_names(table: EventTable) -> np.ndarray:
    """Boolean mask over string ids: names of the user's labels."""
    return table.names_matching(lambda s: not INTERNAL_LABELS.match(s))


def innermost_labels(table: EventTable, nesting: Nesting, rows: np.ndarray) -> np.ndarray:
    """Per row, the row of the innermost user label enclosing it (itself excluded), or -1.
    Climbs the host nesting a level at a time for all rows at once."""
    rows = np.asarray(rows, dtype=np.int64)
    is_label_name = user_label_names(table)
    out = np.full(len(rows), -1, dtype=np.int64)
    up = nesting.parent[rows].astype(np.int64)
    todo = np.flatnonzero(up >= 0)
    while len(todo):
        a = up[todo]
        hit = (table.cat[a] == Cat.USER_ANNOTATION) & is_label_name[table.name[a]]
        out[todo[hit]] = a[hit]
        todo = todo[~hit]
        up[todo] = nesting.parent[up[todo]]
        todo = todo[up[todo] >= 0]
    return out


def label_table(trace: Trace, nesting: Nesting, rows: Rows, window_us: float, top: int = 20) -> list[dict]:
    """The user's labels among `rows` (the profiled window), most time first (see the module doc)."""
    t = trace.events
    is_label_name = user_label_names(t)
    labels = np.concatenate([b[(t.cat[b] == Cat.USER_ANNOTATION) & is_label_name[t.name[b]]]
                             for b in _index_blocks(rows)] or [np.empty(0, dtype=np.int64)])
    if not len(labels):
        return []
    n = len(labels)
    dur = t.dur[labels].astype(np.float64)
    # Among the labels: each one's enclosing label (through ops and spans), and whether a
    # covering event (an op) lies between them.
    outer, outer_covered, outer_direct = _climb_to_label(t, nesting, labels, labels)
    covered = np.zeros(n)  # time of top-level torch work directly under each label
    children = np.zeros(n)  # direct children's time
    op_count = np.zeros(n, dtype=np.int64)
    names = t.name[labels].astype(np.int64)
    label_names, label_rank = np.unique(names, return_inverse=True)
    ops_by_label = _OpTotals(len(label_names), len(t.strings))
    place_labels, place_ops = [], []
    placed = 0 if _can_place(trace) else MAX_PLACED_ROWS
    span = _span_names(t)
    at = _LabelAt(t, labels, outer)
    busy = _Busy()
    is_backward = t.names_matching(lambda s: s.startswith(BACKWARD_OP))
    backward_at: list[np.ndarray] = []
    for block in _index_blocks(rows):
        work = block[_covering(t, block, span)]
        if not len(work):
            continue
        backward_at.append(t.ts[work[is_backward[t.name[work]]]])
        up = nesting.parent[work]
        outermost = up < 0  # not inside other torch work: the intervals `busy` merges
        outermost[~outermost] = ~_covering(t, up[~outermost].astype(np.int64), span)
        busy.add(t, work[outermost])
        lab = at(work)
        under = lab >= 0
        work, lab = work[under], lab[under]
        if not len(work):
            continue
        d = t.dur[work].astype(np.float64)
        parent = nesting.parent[work].astype(np.int64)
        direct = parent == labels[lab]
        top_level = _top_level(t, nesting, span, parent, labels[lab])
        covered += np.bincount(lab[top_level], weights=d[top_level], minlength=n)
        children += np.bincount(lab[direct], weights=d[direct], minlength=n)
        is_op = t.cat[work] == Cat.CPU_OP
        op_count += np.bincount(lab[is_op], minlength=n)
        ops, op_label = work[is_op], lab[is_op]
        ops_by_label.add(label_rank[op_label], t.name[ops], nesting.self_time(ops))
        if placed < MAX_PLACED_ROWS:
            place_labels.append(op_label.astype(np.int32))
            place_ops.append(ops.astype(np.int32 if len(t) < 2**31 else np.int64))
            placed += len(ops)
    op_rows = _rows_by_label(n, place_labels, place_ops)
    covered = np.minimum(covered, dur)
    # Nested labels: their time is a direct child's of the label around them, their torch time
    # covers it too (unless an op between covers them already), their ops are under it.
    children += np.bincount(outer[outer_direct], weights=dur[outer_direct], minlength=n)
    covered_total = covered.copy()
    depth = _depths(outer)
    for level in range(int(depth.max(initial=0)), 0, -1):
        inner = np.flatnonzero((depth == level) & (outer >= 0))
        add = inner[~outer_covered[inner]]
        np.add.at(covered_total, outer[add], covered_total[add])
        np.add.at(op_count, outer[inner], op_count[inner])
        for i in inner.tolist():
            op_rows[int(outer[i])].extend(op_rows[i])
    by_op = ops_by_label.result(label_names)
    elsewhere = busy.elsewhere(t, labels, dur)
    backward = np.sort(np.concatenate(backward_at or [np.empty(0)]))
    in_backward = np.searchsorted(backward, t.ts[labels] + dur) > np.searchsorted(backward, t.ts[labels])
    return _by_name(trace, nesting, labels, outer, dur, covered_total, children, op_count, by_op, op_rows,
                    window_us, top, elsewhere, busy, in_backward)


def _top_level(t: EventTable, nesting: Nesting, span: np.ndarray, parent: np.ndarray, label_row: np.ndarray
               ) -> np.ndarray:
    """Whether no torch work (`_covering`) lies between each row (given by its parent) and its
    label: the climb passes only other annotations, so it is a step or two."""
    a = parent.copy()
    top = np.ones(len(a), dtype=bool)
    todo = np.flatnonzero((a >= 0) & (a != label_row))
    while len(todo):
        cov = _covering(t, a[todo], span)
        top[todo[cov]] = False
        todo = todo[~cov]
        a[todo] = nesting.parent[a[todo]]
        todo = todo[(a[todo] >= 0) & (a[todo] != label_row[todo])]
    return top


def _can_place(trace: Trace) -> bool:
    """Whether the trace says where in the user's code ops ran (`trace_stacks.user_code_of`)."""
    return bool(len(trace.python)) or has_line_marks(trace.events) or has_call_stacks(trace)


def _span_names(t: EventTable) -> np.ndarray:
    return t.names_matching(lambda s: s.startswith(LINE_PREFIX))


def _covering(t: EventTable, rows: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Which rows are torch's work (`COVERING_CATS`, torchneck's per-call spans)."""
    cat = t.cat[rows]
    return in_categories(cat, COVERING_CATS) | ((cat == Cat.USER_ANNOTATION) & span[t.name[rows]])


class _LabelAt:
    """The innermost label open at each row's start on the row's thread (an index into
    `labels`, or -1): a binary search among the thread's labels, then up through the labels
    around it (`outer`) while the one found ended by then. Labels nest like the calls they wrap,
    so this is the label the row's call chain leads to, found without climbing that chain."""

    def __init__(self, t: EventTable, labels: np.ndarray, outer: np.ndarray):
        self.t = t
        self.outer = outer
        self.start = t.ts[labels]
        self.end = self.start + t.dur[labels]
        thread = t.thread[labels]
        self.by_thread = {int(th): np.flatnonzero(thread == th) for th in np.unique(thread).tolist()}

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        out = np.full(len(rows), -1, dtype=np.int64)
        thread = self.t.thread[rows]
        start = self.t.ts[rows]
        present = np.unique(thread) if len(self.by_thread) > 1 else list(self.by_thread)
        for th in np.asarray(present).tolist():
            mine = self.by_thread.get(int(th))
            if mine is None:
                continue
            at = np.flatnonzero(thread == th)
            j = np.searchsorted(self.start[mine], start[at], side="right") - 1
            found = np.where(j >= 0, mine[np.maximum(j, 0)], -1)
            while True:
                closed = found >= 0
                closed[closed] = self.end[found[closed]] <= start[at][closed]
                if not closed.any():
                    break
                found[closed] = self.outer[found[closed]]
            out[at] = found
        return out


class _OpTotals:
    """Self time and calls per (label name, op name), totalled a block at a time: into a dense
    array when the pairs are few, else by sorting each block's keys."""

    DENSE = 1 << 20

    def __init__(self, label_names: int, strings: int):
        self.width = strings + 1
        self.size = label_names * self.width
        self.dense = self.size <= self.DENSE
        self.sums = np.zeros(self.size if self.dense else 0)
        self.counts = np.zeros(self.size if self.dense else 0, dtype=np.int64)
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, label: np.ndarray, op_name: np.ndarray, self_us: np.ndarray) -> None:
        key = label.astype(np.int64) * self.width + op_name
        w = self_us.astype(np.float64)
        if self.dense:
            self.sums += np.bincount(key, weights=w, minlength=self.size)
            self.counts += np.bincount(key, minlength=self.size)
            return
        uniq, inverse = np.unique(key, return_inverse=True)
        inverse = inverse.reshape(-1)
        self.parts.append((uniq, np.bincount(inverse, weights=w), np.bincount(inverse)))

    def result(self, label_names: np.ndarray) -> dict[tuple[int, int], list[float]]:
        """{(label name id, op name id): [self µs, calls]}."""
        sums: np.ndarray
        counts: np.ndarray
        if self.dense:
            keys = np.flatnonzero(self.counts)
            sums, counts = self.sums[keys], self.counts[keys]
        elif self.parts:
            all_keys = np.concatenate([p[0] for p in self.parts])
            keys, inverse = np.unique(all_keys, return_inverse=True)
            inverse = inverse.reshape(-1)
            sums = np.bincount(inverse, weights=np.concatenate([p[1] for p in self.parts]))
            counts = np.bincount(inverse, weights=np.concatenate([p[2] for p in self.parts])).astype(np.int64)
        else:
            return {}
        label, op = np.divmod(keys, self.width)
        return {(int(label_names[lab]), int(o)): [float(s), int(c)]
                for lab, o, s, c in zip(label.tolist(), op.tolist(), sums.tolist(), counts.tolist())}


def _rows_by_label(n: int, labels: list[np.ndarray], ops: list[np.ndarray]) -> list[list[np.ndarray]]:
    """The op rows kept for placing each label's time, grouped by label (one sort)."""
    out: list[list[np.ndarray]] = [[] for _ in range(n)]
    if not ops:
        return out
    lab, rows = np.concatenate(labels), np.concatenate(ops)
    order = np.argsort(lab, kind="stable")
    lab, rows = lab[order], rows[order]
    bounds = np.flatnonzero(np.diff(lab)) + 1
    for part_lab, part in zip(np.split(lab, bounds), np.split(rows, bounds)):
        if len(part):
            out[int(part_lab[0])].append(part)
    return out


def _index_blocks(rows: Rows):
    for block in row_blocks(rows):
        yield np.arange(block.start, block.stop, dtype=np.int64) if isinstance(block, slice) \
            else np.asarray(block, dtype=np.int64)


def _climb_to_label(t: EventTable, nesting: Nesting, labels: np.ndarray, rows: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row: the index (in `labels`) of the innermost label above it, or -1; whether a
    covering event (op, runtime call, torchneck span) lies between the two; whether the label
    is its parent."""
    span = _span_names(t)
    found = np.full(len(rows), -1, dtype=np.int64)
    between = np.zeros(len(rows), dtype=bool)
    direct = np.zeros(len(rows), dtype=bool)
    first_hop = np.ones(len(rows), dtype=bool)  # no event passed yet
    up = nesting.parent[rows].astype(np.int64)
    todo = np.flatnonzero(up >= 0)
    while len(todo):
        a = up[todo]
        at = np.searchsorted(labels, a)
        hit = (at < len(labels)) & (labels[np.minimum(at, len(labels) - 1)] == a)
        found[todo[hit]] = at[hit]
        direct[todo[hit]] = first_hop[todo[hit]]
        rest = todo[~hit]
        a = a[~hit]
        between[rest] |= in_categories(t.cat[a], COVERING_CATS) | ((t.cat[a] == Cat.USER_ANNOTATION) & span[t.name[a]])
        first_hop[rest] = False
        up[rest] = nesting.parent[a]
        todo = rest[up[rest] >= 0]
    return found, between, direct


def _depths(outer: np.ndarray) -> np.ndarray:
    """Nesting depth of each label among the labels (0: in no other)."""
    depth = np.zeros(len(outer), dtype=np.int64)
    up = outer.copy()
    while (up >= 0).any():
        has = up >= 0
        depth[has] += 1
        up[has] = outer[up[has]]
    return depth


def _by_name(trace: Trace, nesting: Nesting, labels: np.ndarray, outer: np.ndarray, dur: np.ndarray,
             covered: np.ndarray, children: np.ndarray, op_count: np.ndarray,
             by_op: dict[tuple[int, int], list[float]], op_rows: list[list[np.ndarray]], window_us: float,
             top: int, elsewhere: np.ndarray, busy: _Busy, in_backward: np.ndarray) -> list[dict]:
    """Instances grouped by name. Totals over the outermost instances of a name (a label nested
    in one of its own name is inside its time already); counts over all."""
    t = trace.events
    name = t.name[labels].astype(np.int64)
    outermost = np.ones(len(labels), dtype=bool)
    up = outer.copy()
    while (up >= 0).any():
        has = np.flatnonzero(up >= 0)
        outermost[has[name[up[has]] == name[has]]] = False
        up[has] = outer[up[has]]
    instance_of: dict[int, list[int]] = {}
    for i, nid in enumerate(name.tolist()):
        instance_of.setdefault(nid, []).append(i)
    where_frames = enclosing_user_frames(trace, labels) if len(trace.python) else None
    out: list[dict] = []
    for nid, idx in instance_of.items():
        idx_arr = np.asarray(idx)
        top_idx = idx_arr[outermost[idx_arr]]
        total = float(dur[top_idx].sum())
        ops_us = float(covered[top_idx].sum())
        mine = sorted(((s, c, op) for (lab, op), (s, c) in by_op.items() if lab == nid), key=lambda x: (-x[0], x[2]))
        top_ops = [{"name": t.strings[op], "self_us": s, "count": int(c)} for s, c, op in mine[:TOP_OPS]]
        outside = max(total - ops_us, 0.0)
        rows = [r for i in top_idx.tolist() for r in op_rows[i]]
        placed = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)  # each op under one instance
        where = user_code_of(trace, nesting, placed, top=WHERE_LINES) if len(placed) else []
        opened_at = None
        if where_frames is not None:
            first = [int(where_frames[i]) for i in idx if where_frames[i] >= 0]
            opened_at = describe_site(t.strings[first[0]]) if first else None
        out.append({
            "name": t.strings[nid],
            "count": len(idx),
            "total_us": total,
            "pct": 100.0 * total / window_us if window_us > 0 else 0.0,
            "self_us": float(dur[top_idx].sum() - children[top_idx].sum()),
            "ops_us": ops_us,
            "outside_ops_us": outside,
            "outside_ops_pct": 100.0 * outside / total if total > 0 else 0.0,
            "ops": int(op_count[top_idx].sum()),
            "top_ops": top_ops,
            "where": where,
            "opened_at": opened_at,
            "inside": _inside(t, labels, outer, top_idx),
            "other_threads_us": min(float(elsewhere[top_idx].sum()), outside),
            "runs_backward": bool(in_backward[idx_arr].any()),
            "calls": _calls(trace, labels[top_idx[:CALLS_MAX_INSTANCES]], busy)
            if len(trace.python) and outside >= CALLS_MIN_SHARE * window_us else [],
        })
    out.sort(key=lambda r: (-r["total_us"], r["name"]))
    return out[:top]


def _inside(t: EventTable, labels: np.ndarray, outer: np.ndarray, instances: np.ndarray) -> str | None:
    """The name of the label around the first of these instances, if any."""
    up = int(outer[instances[0]]) if len(instances) else -1
    return t.strings[int(t.name[labels[up]])] if up >= 0 else None


class _Busy:
    """Where each thread runs torch work: the intervals of its top-level covering events (ops,
    runtime calls), merged per thread, so that the time a span overlaps them is two binary
    searches."""

    def __init__(self) -> None:
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._merged: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def add(self, t: EventTable, rows: np.ndarray) -> None:
        thread = t.thread[rows]
        for th in np.unique(thread).tolist():
            mine = rows[thread == th]
            self.parts.setdefault(int(th), []).append((t.ts[mine], t.ts[mine] + t.dur[mine]))

    def merged(self, threads: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The union of these threads' intervals: starts, ends, and the length before each."""
        if threads not in self._merged:
            parts = [p for th in threads for p in self.parts.get(th, [])]
            start = np.concatenate([p[0] for p in parts] or [np.empty(0)])
            end = np.concatenate([p[1] for p in parts] or [np.empty(0)])
            order = np.argsort(start, kind="stable")
            start, end = start[order], np.maximum.accumulate(end[order]) if len(end) else end
            new = np.ones(len(start), dtype=bool)
            new[1:] = start[1:] > end[:-1]  # an interval starting after all before it ended
            first = np.flatnonzero(new)
            last = np.append(first[1:], len(start)) - 1
            s, e = start[first], end[last]
            self._merged[threads] = (s, e, np.concatenate([[0.0], np.cumsum(e - s)]))
        return self._merged[threads]

    def overlap(self, threads: tuple[int, ...], start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per span [start, end), the time the threads' torch work covers of it."""
        s, e, before = self.merged(threads)
        if not len(s):
            return np.zeros(len(start))
        i = np.searchsorted(e, start, side="right")  # the first interval ending after the span starts
        j = np.searchsorted(s, end, side="left")  # intervals starting before it ends: [0, j)
        out = before[j] - before[np.minimum(i, j)]
        has = j > i
        out[has] -= np.maximum(start[has] - s[i[has]], 0.0) + np.maximum(e[j[has] - 1] - end[has], 0.0)
        return np.maximum(out, 0.0)

    def elsewhere(self, t: EventTable, labels: np.ndarray, dur: np.ndarray) -> np.ndarray:
        """Per label, the time torch work ran on the process's other threads while it was open."""
        out = np.zeros(len(labels))
        pid_of = t.threads.pid
        thread = t.thread[labels]
        for th in np.unique(thread).tolist():
            others = tuple(o for o in self.parts if o != th and pid_of[o] == pid_of[th])
            if not others:
                continue
            at = np.flatnonzero(thread == th)
            start = t.ts[labels[at]]
            out[at] = self.overlap(others, start, start + dur[at])
        return out


HEX_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>?$")


def _calls(trace: Trace, instances: np.ndarray, busy: _Busy) -> list[dict]:
    """The calls made under these label instances outside torch ops, the largest first: Python
    events on the label's thread that are not the user's frames, made by the user's code (or by
    the frame that opened the label), each weighed by its time that no torch op of the thread
    covers. `share` is that time over the instances' time outside ops."""
    t, py = trace.events, trace.python
    acc: dict[tuple[str, str, int], list[float]] = {}
    outside_total = 0.0
    for row in instances.tolist():
        th, start, end = int(t.thread[row]), float(t.ts[row]), float(t.ts[row] + t.dur[row])
        outside_total += (end - start) - float(busy.overlap((th,), np.array([start]), np.array([end]))[0])
        lo, hi = np.searchsorted(py.ts, [start, end])
        rows = np.arange(lo, hi)[py.thread[lo:hi] == th]
        if not len(rows):
            continue
        sub = py.select(rows)
        parent = host_nesting(replace(sub, cat=np.full(len(sub), int(Cat.USER_ANNOTATION), dtype=np.int8))).parent
        names = [sub.strings[int(n)] for n in sub.name.tolist()]
        frames = [parse_frame_name(n) for n in names]
        users = np.array([f is not None and is_user_frame_file(f[2]) for f in frames], dtype=bool)
        by_user = (parent < 0) | users[np.maximum(parent, 0)]
        pick = np.flatnonzero(by_user & ~users & (sub.ts + sub.dur <= end))
        if not len(pick):
            continue
        s = sub.ts[pick]
        e = s + sub.dur[pick]
        free = (e - s) - busy.overlap((th,), s, e)
        for k, us in zip(pick.tolist(), free.tolist()):
            f = frames[k]
            key = (f[0], f[2], f[1]) if f else (HEX_ADDRESS.sub("", names[k]).strip("<>"), "", 0)
            slot = acc.setdefault(key, [0.0, 0])
            slot[0] += us
            slot[1] += 1
    ranked = sorted(acc.items(), key=lambda kv: (-kv[1][0], kv[0]))[:CALLS]
    return [{"name": name, "file": file, "line": line, "outside_ops_us": us, "count": int(n),
             "share": 100.0 * us / outside_total if outside_total > 0 else 0.0}
            for (name, file, line), (us, n) in ranked if us > 0]


def label_for_ops(labels: list[dict], ops: Iterable[str]) -> dict | None:
    """The label (a row of a report's label table) under which most of the self time of the
    named ops ran; None when those ops ran under no label."""
    wanted = set(ops)
    best, best_us = None, 0.0
    for lab in labels or []:
        us = sum(o["self_us"] for o in lab.get("top_ops") or [] if o["name"] in wanted)
        if us > best_us:
            best, best_us = lab, us
    return best


OPS_UNDER_LABEL = 0.5
"""A finding's ops are inside a label when at least half their self time ran under it: a matmul
run once under a label and a thousand times outside is not that label's."""


def label_of(labels: list[dict], ops: Iterable[str], lines: Iterable[tuple[str, int]],
             op_self_us: dict[str, float]) -> dict | None:
    """The label (a row of a report's label table) a finding lies in, or None: the one its ops
    ran under (`label_for_ops`), when that holds `OPS_UNDER_LABEL` of their self time over the
    window (`op_self_us`, by op name); else the label whose ops were called from one of its lines,
    when the trace places calls at their line (`torchneck run`; a `with_stack` frame names a
    whole function, which may run ops under several labels and outside them). Of nested labels,
    the innermost."""
    ops = list(ops)
    if ops:
        found = label_for_ops(labels, ops)
        if found is not None:
            under = sum(o["self_us"] for o in found.get("top_ops") or [] if o["name"] in ops)
            known = [n for n in ops if n in op_self_us]
            if known and under >= OPS_UNDER_LABEL * sum(op_self_us[n] for n in known):
                return found
    wanted = set(lines)
    hits = [lab for lab in labels or [] if any((w["file"], w["line"]) in wanted
                                              for w in lab.get("where") or [] if w.get("source") == "trace")]
    innermost = [lab for lab in hits if not any(o.get("inside") == lab["name"] for o in hits)]
    if len(innermost) == 1 and all(_encloses(labels, lab["name"], innermost[0]) for lab in hits):
        return innermost[0]
    return None


def _encloses(labels: list[dict], outer: str, label: dict) -> bool:
    """Whether the label named `outer` is `label` or one around it."""
    by_name = {lab["name"]: lab for lab in labels}
    seen: set[str] = set()
    at: dict | None = label
    while at is not None and at["name"] not in seen:
        if at["name"] == outer:
            return True
        seen.add(at["name"])
        at = by_name.get(at.get("inside") or "")
    return False


def label_phrase(label: dict) -> str:
    """A finding's words for the label it falls in: "MASK INDICES: 99 % of the time, 97 % of it
    outside torch ops"."""
    text = f"{label['name']}: {label['pct']:.0f} % of the time"
    if label.get("total_us"):
        text += f", {label['outside_ops_pct']:.0f} % of it outside torch ops"
    return text
