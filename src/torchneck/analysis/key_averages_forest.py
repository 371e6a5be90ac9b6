"""The forest of function events behind `key_averages.py`'s table, and torch's parent of each.

The host events (and in `with_stack` traces the Python calls) as positions in a table sorted by
start, each with its walk parent (`Forest`); torch's parent of each function event (`Parents`):
the walk parent looking through events that are not function events, corrected where an event
sticks out of its parent (`fix_overhangs`) and redirected past the nodes torch's
`_remove_dup_nodes` merges away (`merge_duplicates`). Also the row kinds and block size the
other `key_averages_*` modules share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..sites import LINE_PREFIX
from ..trace.table import Cat, EventTable, SparseColumn, Trace
from .groups import positions_in
from .intervals import ROW_BLOCK as TABLE_BLOCK
from .intervals import merge
from .nesting import Nesting, host_nesting

ROW_BLOCK = TABLE_BLOCK // 4
"""Rows read at once here: a quarter of the other analyses' blocks, since this table is built on
the analysis thread beside them and glibc keeps that thread's peak in its own arena (16k rows:
the passes' ~20 temporaries stay ~3 MB; 4x more blocks cost ~20 ms a GB)."""

TORCH_DROPPED = frozenset({
    "[memory]", "[OutOfMemory]", "profiler::_record_function_enter", "profiler::_record_function_enter_new",
    "profiler::_record_function_exit", "aten::is_leaf", "aten::output_nr", "aten::_version",
})
"""Names `torch.autograd.profiler_util._filter_name` drops before building the table."""

OVERHANG_US = 0.01
"""An event sticks out of its parent when it ends this much after it (or `OVERHANG_REL` of the
parent's duration, if more): less is the rounding of the exported times (ns printed as µs with
3 decimals, durations kept as float32), not an event that really outlasts its parent."""
OVERHANG_REL = 2.5e-7

KIND_CPU, KIND_LABEL, KIND_PYTHON, KIND_DEVICE, KIND_DEVICE_LABEL, KIND_MEMORY = range(6)
KIND_NAMES = ("cpu", "label", "python", "device", "device_label", "memory")
"""A row's kind. torch keys rows on (name, device type, is_user_annotation): a label and an op
of one name are two rows, as are a CPU and a GPU event."""

KIND_OF_CAT = np.full(len(Cat), -1, dtype=np.int8)
for _cat, _kind in ((Cat.CPU_OP, KIND_CPU), (Cat.RUNTIME, KIND_CPU), (Cat.DRIVER, KIND_CPU),
                    (Cat.USER_ANNOTATION, KIND_LABEL), (Cat.PYTHON_FUNCTION, KIND_PYTHON),
                    (Cat.KERNEL, KIND_DEVICE), (Cat.GPU_MEMCPY, KIND_DEVICE), (Cat.GPU_MEMSET, KIND_DEVICE),
                    (Cat.GPU_USER_ANNOTATION, KIND_DEVICE_LABEL)):
    KIND_OF_CAT[int(_cat)] = _kind
_HOST_KIND_OF_CAT = np.where(KIND_OF_CAT <= KIND_PYTHON, KIND_OF_CAT, -1).astype(np.int8)
HOST_KINDS = (KIND_CPU, KIND_LABEL, KIND_PYTHON)


@dataclass
class Forest:
    """Function events as positions in a table sorted by start (longer first on ties), each
    with its walk parent. Without Python events the positions are the trace's own rows (no
    copy); with them, a combined table of host and Python events (`combined_forest`)."""

    table: EventTable
    parent: np.ndarray  # walk parent per position (-1: none), `ops.host_nesting`'s
    is_python: np.ndarray | None  # per position, in the combined table
    event_pos: Callable[[np.ndarray], np.ndarray]  # trace event rows -> positions (-1: not here)
    dropped_name: np.ndarray  # per string id: not a function event (torch drops it, or a torchneck span)
    looked_through: bool = True  # whether some host event is not a function event (a parent to climb past)

    def __len__(self) -> int:
        return len(self.table)

    def __post_init__(self) -> None:
        self.any_dropped = bool(self.dropped_name.any())

    def kinds(self, pos: np.ndarray | slice) -> np.ndarray:
        """`KIND_*` (int8) per position; -1 for rows that are not host function events (device
        events, and those looked through)."""
        k = _HOST_KIND_OF_CAT[self.table.cat[pos]]
        if self.any_dropped:
            k[self.dropped_name[self.table.name[pos]]] = -1
        return k

    def end(self, pos: np.ndarray) -> np.ndarray:
        return self.table.ts[pos] + self.table.dur[pos]

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions, kinds) of host function events, a block at a time, ascending."""
        for a in range(0, len(self.table), ROW_BLOCK):
            k = self.kinds(slice(a, a + ROW_BLOCK))
            keep = np.flatnonzero(k >= 0)
            yield keep + a, k[keep]


def _dropped_names(table: EventTable) -> np.ndarray:
    return table.names_matching(lambda s: s in TORCH_DROPPED or s.startswith(LINE_PREFIX))


def host_forest(trace: Trace, nesting: Nesting) -> Forest:
    t = trace.events
    dropped = _dropped_names(t)
    sync = any(bool((t.cat[a:a + ROW_BLOCK] == Cat.SYNC).any()) for a in range(0, len(t), ROW_BLOCK))
    return Forest(t, nesting.parent, None, lambda rows: np.asarray(rows, dtype=np.int64), dropped,
                   looked_through=bool(dropped.any()) or sync)


def combined_forest(trace: Trace) -> Forest:
    """Host function events and Python calls in one table sorted by start, walked as one call
    stack per thread (Python calls filed as labels for the walk, remembered apart)."""
    t, py = trace.events, trace.python
    dropped = _dropped_names(t)
    host = []
    for a in range(0, len(t), ROW_BLOCK):
        rows = np.arange(a, min(a + ROW_BLOCK, len(t)), dtype=np.int64)
        k = KIND_OF_CAT[t.cat[rows]]
        host.append(rows[((k == KIND_CPU) | (k == KIND_LABEL)) & ~dropped[t.name[rows]]])
    h = np.concatenate(host) if host else np.empty(0, dtype=np.int64)
    ts = np.concatenate([t.ts[h], py.ts])
    dur = np.concatenate([t.dur[h], py.dur])
    order = np.lexsort((-dur, ts))
    src = np.concatenate([h, -1 - np.arange(len(py), dtype=np.int64)])[order]
    is_python = src < 0
    from_host, from_py = src[~is_python], -1 - src[is_python]

    def column(name: str) -> np.ndarray:
        out = np.empty(len(src), dtype=getattr(t, name).dtype)
        out[~is_python] = getattr(t, name)[from_host]
        out[is_python] = getattr(py, name)[from_py]
        return out

    cat = column("cat")
    walk_cat = np.where(is_python, np.int8(Cat.USER_ANNOTATION), cat).astype(np.int8)
    n = len(src)

    def empty_sparse(fill: int = 0) -> SparseColumn:
        return SparseColumn(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32), n, fill)

    args = column("args")
    args[is_python] = -1
    combined = EventTable(ts=ts[order], dur=dur[order], cat=cat, name=column("name"), thread=column("thread"),
                          correlation=None, device=np.full(n, -1, np.int16), stream=np.full(n, -1, np.int32),
                          args=args, nbytes=empty_sparse(), call_stack=empty_sparse(), launcher=empty_sparse(-1),
                          arg_pairs=t.arg_pairs, strings=t.strings, threads=t.threads)
    parent = host_nesting(replace(combined, cat=walk_cat)).parent
    host_pos = np.flatnonzero(~is_python)
    by_row = np.argsort(from_host, kind="stable")
    sorted_rows, sorted_pos = from_host[by_row], host_pos[by_row]

    def event_pos(rows: np.ndarray) -> np.ndarray:
        at = positions_in(sorted_rows, np.asarray(rows, dtype=sorted_rows.dtype))
        return np.where(at >= 0, sorted_pos[np.maximum(at, 0)], -1)

    return Forest(combined, parent, is_python, event_pos, dropped, looked_through=False)


def _overhang(end_child: np.ndarray, end_parent: np.ndarray, dur_parent: np.ndarray) -> np.ndarray:
    return end_child - end_parent > np.maximum(OVERHANG_US, OVERHANG_REL * dur_parent.astype(np.float64))


class Parents:
    """torch's parent of each function event: the walk parent, looking through events that are
    not function events, corrected where an event sticks out of its parent, and redirected past
    the nodes `_remove_dup_nodes` merges away. Corrections and merges are few: kept sparse."""

    def __init__(self, forest: Forest):
        self.f = forest
        self.fixed_rows = np.empty(0, dtype=np.int64)  # positions whose parent was corrected, ascending
        self.fixed_parent = np.empty(0, dtype=np.int64)
        self.merged = np.empty(0, dtype=np.int64)  # positions merged into their parent, ascending
        self.merged_into = np.empty(0, dtype=np.int64)
        self.merged_set = _RowSet(np.empty(0, dtype=np.int64), len(forest))

    def walk(self, pos: np.ndarray) -> np.ndarray:
        """Walk parent, through non-function events (looked-through spans, dropped utility ops)."""
        f = self.f
        p = f.parent[pos].astype(np.int64)
        if not f.looked_through:
            return p
        for _ in range(64):
            through = p >= 0
            through[through] = f.kinds(p[through]) < 0
            if not through.any():
                break
            p[through] = f.parent[p[through]]
        return p

    def corrected(self, pos: np.ndarray) -> np.ndarray:
        p = self.walk(pos)
        if len(self.fixed_rows):
            at = positions_in(self.fixed_rows, pos)
            p = np.where(at >= 0, self.fixed_parent[np.maximum(at, 0)], p)
        return p

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        """Final parent of each position (never a merged node)."""
        p = self.corrected(pos)
        if len(self.merged):
            hit = self.merged_set.contains(p)
            if hit.any():
                p[hit] = self.merged_into[positions_in(self.merged, p[hit])]
        return p

    def is_merged(self, pos: np.ndarray) -> np.ndarray:
        return self.merged_set.contains(pos)


class _RowSet:
    """Membership of positions in a set, as a bitset (an eighth of a byte a position): tested
    for every row of a block, where a binary search in the set would cost more."""

    def __init__(self, members: np.ndarray, size: int):
        members = np.asarray(members, dtype=np.int64)
        self.bits = np.zeros((max(size, 1) + 7) // 8, dtype=np.uint8)
        np.bitwise_or.at(self.bits, members >> 3, (1 << (members & 7)).astype(np.uint8))
        self.empty = not len(members)

    def contains(self, pos: np.ndarray) -> np.ndarray:
        if self.empty:
            return np.zeros(len(pos), dtype=bool)
        ok = pos >= 0
        safe = np.where(ok, pos, 0)
        return ok & ((self.bits[safe >> 3] >> (safe & 7)) & 1).astype(bool)


@dataclass
class _Scan:
    """What one pass over the function events finds: events sticking out of their walk parent
    (and that parent), events with their walk parent's name, and the names present."""

    overhang: np.ndarray
    overhang_parent: np.ndarray
    same_name: np.ndarray
    present: np.ndarray  # bool per canonical string id


def scan_forest(forest: Forest, parents: Parents, canon_name: np.ndarray) -> _Scan:
    t = forest.table
    over, over_parent, same = [], [], []
    present = np.zeros(len(canon_name), dtype=bool)
    for pos, _ in forest.blocks():
        names = canon_name[t.name[pos]]
        present[names] = True
        p = parents.walk(pos)
        has = p >= 0
        c, q = pos[has], p[has]
        out = _overhang(forest.end(c), forest.end(q), t.dur[q])
        over.append(c[out])
        over_parent.append(q[out])
        same.append(c[names[has] == canon_name[t.name[q]]])

    def joined(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    return _Scan(joined(over), joined(over_parent), joined(same), present)


def fix_overhangs(parents: Parents, killers: np.ndarray, killer_parents: np.ndarray) -> None:
    """torch pops an open event once a later one does not fit inside it: an event X that a
    descendant D sticks out of is nobody's parent from D on. Find those (few) and move the
    events the walk put under them to their nearest ancestor still open and containing."""
    f = parents.f
    if not len(killers):
        return
    # Every ancestor a killer sticks out of dies at the killer's position.
    dead, dead_at = [], []
    a, y = killer_parents.copy(), killers.copy()
    while len(a):
        out = _overhang(f.end(y), f.end(a), f.table.dur[a])
        dead.append(a[out])
        dead_at.append(y[out])
        a, y = parents.walk(a[out]), y[out]
        keep = a >= 0
        a, y = a[keep], y[keep]
    dead_all, dead_pos = np.concatenate(dead), np.concatenate(dead_at)
    order = np.lexsort((dead_pos, dead_all))
    dead_all, dead_pos = dead_all[order], dead_pos[order]
    first = np.ones(len(dead_all), dtype=bool)
    first[1:] = dead_all[1:] != dead_all[:-1]
    dead_rows, killed_at = dead_all[first], dead_pos[first]  # each dead event, killed from here on

    def alive(anc: np.ndarray, at: np.ndarray) -> np.ndarray:
        k = positions_in(dead_rows, anc)
        return (k < 0) | (killed_at[np.maximum(k, 0)] > at)

    fixed_rows, fixed_parent = [], []
    for pos, _ in f.blocks():
        p = parents.walk(pos)
        k = positions_in(dead_rows, np.where(p >= 0, p, -1))
        hit = (k >= 0) & (killed_at[np.maximum(k, 0)] <= pos)
        if not hit.any():
            continue
        e, a = pos[hit], p[hit]
        end_e, ts_e = f.end(e), f.table.ts[e]
        while True:
            ok = a < 0
            ok[~ok] = alive(a[~ok], e[~ok]) & ~_overhang(end_e[~ok], f.end(a[~ok]), f.table.dur[a[~ok]]) \
                & (f.end(a[~ok]) > ts_e[~ok])
            if ok.all():
                break
            a[~ok] = parents.walk(a[~ok])
        fixed_rows.append(e)
        fixed_parent.append(a)
    if fixed_rows:
        parents.fixed_rows = np.concatenate(fixed_rows)
        parents.fixed_parent = np.concatenate(fixed_parent)


def _positions_within(f: Forest, spans: np.ndarray) -> Iterator[np.ndarray]:
    """Function-event positions that start inside one of the events `spans` (where their
    children lie), about a block at a time; every position when those stretches are most of
    the table."""
    lo = spans + 1
    hi = np.searchsorted(f.table.ts, f.end(spans), side="right")
    if int((hi - lo).clip(0).sum()) > len(f) // 2:
        for pos, _ in f.blocks():
            yield pos
        return
    starts, ends = merge(lo.astype(np.float64), hi.astype(np.float64))
    starts, ends = starts.astype(np.int64), ends.astype(np.int64)
    pieces = np.maximum(-(-(ends - starts) // ROW_BLOCK), 0)  # stretches cut to at most a block
    first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)
    starts = np.repeat(starts, pieces) + (np.arange(int(pieces.sum())) - first_piece) * ROW_BLOCK
    ends = np.minimum(starts + ROW_BLOCK, np.repeat(ends, pieces))
    length = ends - starts
    done = np.concatenate(([0], np.cumsum(length)))
    first = 0
    while first < len(starts):  # as many stretches as fit in a block, at least one
        last = max(int(np.searchsorted(done, done[first] + ROW_BLOCK, side="right")) - 1, first + 1)
        n = length[first:last]
        pos = np.arange(int(n.sum())) - np.repeat(done[first:last] - done[first], n) + np.repeat(starts[first:last], n)
        yield pos[f.kinds(pos) >= 0]
        first = last


def _sorted_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(values, return_counts=True)` by one sort: numpy's hash-based unique took
    0.1 s for 100k positions."""
    s = np.sort(values)
    if not len(s):
        return s, np.empty(0, dtype=np.int64)
    first = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    return s[first], np.diff(np.append(first, len(s)))


def merge_duplicates(parents: Parents, canon_name: np.ndarray, walk_same: np.ndarray) -> None:
    """torch's `_remove_dup_nodes`: an event with its parent's name that is the parent's only
    child is merged away (repeatedly). `walk_same`: the events with their walk parent's name;
    rechecked where an overhang moved an event to another parent. Their parents' other children
    are found in one more pass, only when there are candidates; the merging runs on those few."""
    f = parents.f
    names = f.table.name
    moved = _sorted_counts(np.concatenate([walk_same, parents.fixed_rows]))[0]
    if len(parents.fixed_rows):
        p = parents.corrected(moved)
        ok = p >= 0
        ok[ok] = canon_name[names[moved[ok]]] == canon_name[names[p[ok]]]
        c = moved[ok]
    else:
        c = walk_same
    if not len(c):
        return
    watched = _sorted_counts(np.concatenate([c, parents.corrected(c)]))[0]  # the candidates and their parents
    watch = _RowSet(watched, len(f))
    kids, kid_parent = [], []
    index = np.int32 if len(f) < 2**31 else np.int64  # the children can be a few % of the table
    c = c.astype(index)
    for pos in _positions_within(f, watched):
        p = parents.corrected(pos)
        keep = watch.contains(p)
        kids.append(pos[keep].astype(index))
        kid_parent.append(p[keep].astype(index))
    kid = np.concatenate(kids)
    par = np.concatenate(kid_parent)
    merged = np.zeros(len(kid), dtype=bool)
    is_cand = positions_in(c, kid) >= 0
    while True:
        live = ~merged
        parents_live, counts = _sorted_counts(par[live])
        only_child = np.zeros(len(kid), dtype=bool)
        at = positions_in(parents_live, par)
        only_child[at >= 0] = counts[at[at >= 0]] == 1
        new = live & is_cand & only_child
        if not new.any():
            break
        merged |= new
        gone, gone_into = kid[new], par[new]
        order = np.argsort(gone)
        gone, gone_into = gone[order], gone_into[order]
        for _ in range(len(gone)):  # re-parent the merged nodes' children (chains: a few rounds)
            at = positions_in(gone, par)
            moved = at >= 0
            if not moved.any():
                break
            par[moved] = gone_into[at[moved]]
    gone = kid[merged]
    into = par[merged]
    order = np.argsort(gone)
    parents.merged, parents.merged_into = gone[order], into[order]
    parents.merged_set = _RowSet(parents.merged, len(f))
