"""torch.profiler's `key_averages()` table, computed from a loaded trace.

The profiler recipe teaches `prof.key_averages(group_by_input_shape=..., group_by_stack_n=N)
.table(sort_by=..., row_limit=...)`; here the same rows come from the columnar table of any
trace, a file the user only has on disk included. What torch does (`_parse_kineto_results` in
torch/autograd/profiler.py, `EventList` in profiler_util.py) and how it is done here:

- Function events: every host event (ops, `record_function` labels, runtime and driver calls,
  and in `with_stack` traces the Python calls), less a few utility ops torch drops
  (`TORCH_DROPPED`) and torchneck's own per-line spans, which are looked through. GPU events
  (kernels, copies, fills, GPU-side labels) are rows of their own with device time only.
- A row's children: torch sorts a thread's events by (start, -end) and keeps a stack, popping
  every open event the next one does not fit inside. That equals the host call-stack walk
  (`ops.host_nesting`: parent = innermost event not ended by the start), corrected where an
  event sticks out of its parent (`_fix_overhangs`): an event is then no longer a parent of
  anything that comes after the one that stuck out. Self time is the duration less the
  direct children's.
- `_remove_dup_nodes`: a child with its parent's name that is the parent's only child is
  merged into it (`aten::sum` calling `aten::sum`): not a row, its children the parent's.
- Memory: the bytes of every `[memory]` record inside an event's [start, end] on any thread
  (prefix sums over the records in time order), self memory less the children's; records
  inside no event form torch's `[memory]` row.
- Device time: a kernel counts for the op (or label) that launched it (its launching runtime
  call's parent) as self device time, and for every enclosing event as device time.
- Stacks (`group_by_stack_n`): the Python calls open at an event's start, innermost first,
  read from the trace's `python_function` events (the same frames torch records as each op's
  stack, which it exports only with `_ExperimentalConfig(verbose=True)`), or from the ops'
  `Call stack` argument in traces without Python events (PyTorch 1.8-1.11).

Where the result differs from torch of necessity: ops run by autograd's backward pass get the
stack of the `.backward()` call, where torch gives them their forward op's stack (matched by
sequence numbers the loader does not keep; the report's `notes` say so). And torch links a kernel
to the op recorded with its launch (the trace's "External id", which the loader does not keep
either); the launching call's enclosing op is the same op on the H100 and MI250 traces of
tests/data except for kernels replayed from a CUDA graph outside any op (torch: no op), under
inductor's "## Call CompiledFxGraph" spans (torch: the compiled region around them) and NCCL's
(torch: `record_param_comms`).

Every pass goes through the table a block of rows at a time (`ROW_BLOCK`) and totals by group,
so the temporaries stay a few MB on traces of any size; only `with_stack` traces,
whose Python calls must be nested with the host events, get one combined table of those events.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..errors import TorchneckError
from ..sites import LINE_PREFIX
from ..trace.table import Cat, EventTable, SparseColumn, Trace, in_categories
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

STACK_DROPPED = (
    ("autograd/__init__", "_make_grads"), ("autograd/__init__", "backward"), ("torch/tensor", "backward"),
    ("_internal/common_utils", "prof_callable"), ("_internal/common_utils", "prof_func_call"),
    ("_internal/common_utils", "prof_meth_call"),
)
"""Stack frames torch leaves out of an event's stack (`_filter_stack_entry`): a frame whose
text holds both parts of a pair."""

CPU_MEMORY_DEVICES = (0, 2, 5)
"""`[memory]` record device types counted as CPU memory by torch: CPU, MKLDNN, IDEEP."""
DEVICE_MEMORY_DEVICES = (1, 6, 12, 20)
"""... and as device memory: CUDA, HIP, XPU, PrivateUse1."""

DEFAULT_SORT = "self_cpu_time_total"
DEFAULT_ROW_LIMIT = 25
"""Rows kept in the report when no `--row-limit` is given: the recipe prints 5-10; the HTML table
sorts the kept rows by any column."""

OVERHANG_US = 0.01
"""An event sticks out of its parent when it ends this much after it (or `OVERHANG_REL` of the
parent's duration, if more): less is the rounding of the exported times (ns printed as µs with
3 decimals, durations kept as float32), not an event that really outlasts its parent."""
OVERHANG_REL = 2.5e-7

KIND_CPU, KIND_LABEL, KIND_PYTHON, KIND_DEVICE, KIND_DEVICE_LABEL, KIND_MEMORY = range(6)
KIND_NAMES = ("cpu", "label", "python", "device", "device_label", "memory")
"""A row's kind. torch keys rows on (name, device type, is_user_annotation): a label and an op
of one name are two rows, as are a CPU and a GPU event."""

_KIND_OF_CAT = np.full(len(Cat), -1, dtype=np.int8)
for _cat, _kind in ((Cat.CPU_OP, KIND_CPU), (Cat.RUNTIME, KIND_CPU), (Cat.DRIVER, KIND_CPU),
                    (Cat.USER_ANNOTATION, KIND_LABEL), (Cat.PYTHON_FUNCTION, KIND_PYTHON),
                    (Cat.KERNEL, KIND_DEVICE), (Cat.GPU_MEMCPY, KIND_DEVICE), (Cat.GPU_MEMSET, KIND_DEVICE),
                    (Cat.GPU_USER_ANNOTATION, KIND_DEVICE_LABEL)):
    _KIND_OF_CAT[int(_cat)] = _kind
_HOST_KIND_OF_CAT = np.where(_KIND_OF_CAT <= KIND_PYTHON, _KIND_OF_CAT, -1).astype(np.int8)
HOST_KINDS = (KIND_CPU, KIND_LABEL, KIND_PYTHON)
FRONTEND_CATS = (Cat.CPU_OP, Cat.USER_ANNOTATION)
"""Events a kernel can belong to: torch links a kernel to the op or label (a RecordFunction)
open when it was launched, never to the runtime call or a Python frame."""
DEVICE_CATS = (Cat.KERNEL, Cat.GPU_MEMCPY, Cat.GPU_MEMSET, Cat.GPU_USER_ANNOTATION)

_SUMS = ("count", "cpu_time_total", "child_cpu", "cpu_memory_usage", "child_cpu_memory", "device_memory_usage",
         "child_device_memory", "self_device_time_total", "device_time_total")
"""What is totalled per group; self figures are a total less the children's."""
_S = {name: i for i, name in enumerate(_SUMS)}

SORT_KEYS = ("self_cpu_time_total", "cpu_time_total", "cpu_time", "self_device_time_total", "device_time_total",
             "device_time", "self_cpu_memory_usage", "cpu_memory_usage", "self_device_memory_usage",
             "device_memory_usage", "count")
"""`--sort-by` values: key_averages' attribute names (with `cuda`, `xpu` or `privateuse1` in
place of `device`, as `table(sort_by=...)` accepts). `cpu_time`/`device_time` are averages."""
_DEVICE_ALIASES = ("cuda", "xpu", "privateuse1", "mtia", "hpu")


def sort_key(name: str) -> str:
    """The canonical column for a `sort_by` name (`self_cuda_time_total` -> `self_device_time_total`);
    TorchneckError naming the valid ones otherwise."""
    canon = name.strip().lower()
    for alias in _DEVICE_ALIASES:
        canon = canon.replace(alias, "device")
    if canon not in SORT_KEYS:
        raise TorchneckError(f"--sort-by {name!r}: not a key_averages column; use one of "
                             + ", ".join(SORT_KEYS) + " (cuda_* for device_*)")
    return canon


@dataclass(frozen=True)
class TableOptions:
    """What `key_averages(...).table(...)` was asked for. `requested`: the user gave one of the
    options, so the terminal shows the table (it is always in the JSON and the HTML)."""

    sort_by: str = DEFAULT_SORT
    row_limit: int = DEFAULT_ROW_LIMIT  # -1: every row, as torch's row_limit=-1
    group_by_input_shape: bool = False
    group_by_stack_n: int = 0
    requested: bool = False

    @classmethod
    def make(cls, sort_by: str | None = None, row_limit: int | None = None, group_by_shape: bool = False,
             group_by_stack: int | None = None) -> TableOptions:
        """Validated options from the command line or the API (TorchneckError: one clear line)."""
        if row_limit is not None and (row_limit == 0 or row_limit < -1):
            raise TorchneckError("--row-limit must be a positive number of rows (-1 for all)")
        if group_by_stack is not None and group_by_stack < 0:
            raise TorchneckError("--group-by-stack must be a number of frames, 0 or more")
        return cls(sort_by=sort_key(sort_by) if sort_by is not None else DEFAULT_SORT,
                   row_limit=row_limit if row_limit is not None else DEFAULT_ROW_LIMIT,
                   group_by_input_shape=bool(group_by_shape), group_by_stack_n=int(group_by_stack or 0),
                   requested=sort_by is not None or row_limit is not None or bool(group_by_shape)
                   or bool(group_by_stack))

    def to_dict(self) -> dict:
        return {"sort_by": self.sort_by, "row_limit": self.row_limit,
                "group_by_input_shape": self.group_by_input_shape, "group_by_stack_n": self.group_by_stack_n,
                "requested": self.requested}


# -- the forest of function events ------------------------------------------------------------


@dataclass
class _Forest:
    """Function events as positions in a table sorted by start (longer first on ties), each
    with its walk parent. Without Python events the positions are the trace's own rows (no
    copy); with them, a combined table of host and Python events (`_combined_forest`)."""

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


def _host_forest(trace: Trace, nesting: Nesting) -> _Forest:
    t = trace.events
    dropped = _dropped_names(t)
    sync = any(bool((t.cat[a:a + ROW_BLOCK] == Cat.SYNC).any()) for a in range(0, len(t), ROW_BLOCK))
    return _Forest(t, nesting.parent, None, lambda rows: np.asarray(rows, dtype=np.int64), dropped,
                   looked_through=bool(dropped.any()) or sync)


def _combined_forest(trace: Trace) -> _Forest:
    """Host function events and Python calls in one table sorted by start, walked as one call
    stack per thread (Python calls filed as labels for the walk, remembered apart)."""
    t, py = trace.events, trace.python
    dropped = _dropped_names(t)
    host = []
    for a in range(0, len(t), ROW_BLOCK):
        rows = np.arange(a, min(a + ROW_BLOCK, len(t)), dtype=np.int64)
        k = _KIND_OF_CAT[t.cat[rows]]
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

    return _Forest(combined, parent, is_python, event_pos, dropped, looked_through=False)


def _overhang(end_child: np.ndarray, end_parent: np.ndarray, dur_parent: np.ndarray) -> np.ndarray:
    return end_child - end_parent > np.maximum(OVERHANG_US, OVERHANG_REL * dur_parent.astype(np.float64))


class _Parents:
    """torch's parent of each function event: the walk parent, looking through events that are
    not function events, corrected where an event sticks out of its parent, and redirected past
    the nodes `_remove_dup_nodes` merges away. Corrections and merges are few: kept sparse."""

    def __init__(self, forest: _Forest):
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


def _scan(forest: _Forest, parents: _Parents, canon_name: np.ndarray) -> _Scan:
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


def _fix_overhangs(parents: _Parents, killers: np.ndarray, killer_parents: np.ndarray) -> None:
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


def _positions_within(f: _Forest, spans: np.ndarray) -> Iterator[np.ndarray]:
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


def _merge_duplicates(parents: _Parents, canon_name: np.ndarray, walk_same: np.ndarray) -> None:
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


# -- grouping keys ---------------------------------------------------------------------------


DENSE_KEYS = 1 << 17
"""Up to this many possible groups, totals go straight into arrays indexed by the group (one
`np.bincount` a column and a block); beyond, a block's keys are sorted and merged (`_Totals`)."""


class _Keys:
    """Each row's group as one int64: (name, kind[, input shapes][, stack]), the name as its rank
    among the names present, so that the usual groupings index small dense arrays."""

    def __init__(self, forest: _Forest, trace: Trace, options: TableOptions, canon_name: np.ndarray,
                 present: np.ndarray):
        t = forest.table
        self.forest, self.canon_name = forest, canon_name
        self.names = np.flatnonzero(present)  # canonical name ids present, ascending
        rank = np.full(len(present), -1, dtype=np.int64)
        rank[self.names] = np.arange(len(self.names))
        self.name_key = rank[canon_name] * len(KIND_NAMES)  # per string id
        self.shapes_text: list[str] = ["[]"]
        self.shape_of_args = np.zeros(len(t.arg_pairs), dtype=np.int64)
        if options.group_by_input_shape:
            self.shape_of_args, self.shapes_text = _canonical_shapes(t)
        self.stacks = _StackKeys(forest, trace, options.group_by_stack_n)
        self.n_kinds = len(KIND_NAMES)
        self.n_shapes = len(self.shapes_text)
        self.n_stacks = max(self.stacks.count, 1)
        self.size = max(len(self.names), 1) * self.n_kinds * self.n_shapes * self.n_stacks
        if self.size >= 2**62:
            raise TorchneckError("too many distinct stacks to group by (use a smaller --group-by-stack)")

    def of(self, pos: np.ndarray, kinds: np.ndarray, table: EventTable | None = None) -> np.ndarray:
        """Keys of `pos` (positions of the forest, or rows of `table`: device rows) of `kinds`."""
        t = table if table is not None else self.forest.table
        key = self.name_key[t.name[pos]] + kinds
        if self.n_shapes > 1:
            key = key * self.n_shapes + self.shape_of_args[t.args[pos]]
        if self.n_stacks > 1:
            stack = self.stacks.of(pos) if table is None else np.zeros(len(pos), dtype=np.int64)
            key = key * self.n_stacks + stack
        return key

    def split(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(name string id, kind, shapes index, stack key) of each key."""
        stack = keys % self.n_stacks
        rest = keys // self.n_stacks
        shape = rest % self.n_shapes
        rest //= self.n_shapes
        return self.names[rest // self.n_kinds], rest % self.n_kinds, shape, stack

    def totals(self) -> _Totals | _DenseTotals:
        return _DenseTotals(self.size) if self.size <= DENSE_KEYS else _Totals()


def _canonical_shapes(table: EventTable) -> tuple[np.ndarray, list[str]]:
    """Per args id, an index into the distinct `str(input_shapes)` texts torch groups by: a
    tensor's sizes, `[]` for anything else (a scalar, or a TensorList, which the trace's
    "Input Dims" spell out per tensor but torch's `input_shapes` leaves empty)."""
    texts: dict[str, int] = {"[]": 0}
    out = np.zeros(len(table.arg_pairs), dtype=np.int64)
    parsed: dict[int, int] = {}
    for i, shapes_id in enumerate(table.arg_pairs[:, 0].tolist()):
        if shapes_id < 0:
            continue
        if shapes_id not in parsed:
            try:
                dims = json.loads(table.strings[shapes_id])
            except (ValueError, IndexError):
                dims = []
            if not isinstance(dims, list):
                dims = []
            canon = [d if isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in d)
                     else [] for d in dims]
            parsed[shapes_id] = texts.setdefault(str(canon), len(texts))
        out[i] = parsed[shapes_id]
    return out, list(texts)


def _stack_entry_kept(frame: str) -> bool:
    return all(not (a in frame and b in frame) for a, b in STACK_DROPPED)


class _StackKeys:
    """Per position, an id of its first `n` stack frames (0: no stack), and the frames of an id.

    From Python events: a position's stack starts at the innermost Python call open at its
    start; each frame's next is the Python call open around it. Ids are built for the Python
    calls a level at a time (their name, then the id of the next frame's shorter stack), so
    equal frame sequences get one id without hashing tuples per event. From "Call stack" args:
    one id per distinct stack text."""

    def __init__(self, forest: _Forest, trace: Trace, n: int):
        self.forest, self.n = forest, n
        self.count = 1
        self.source: str | None = None
        self.frames_of: list[list[str]] = [[]]
        self._first: np.ndarray | None = None
        self._by_call_stack: tuple[np.ndarray, np.ndarray] | None = None
        if n <= 0:
            return
        if forest.is_python is not None:
            self.source = "python_function"
            self._from_python_events()
        elif len(trace.events.call_stack.rows):
            self.source = "call_stack"
            self._from_call_stacks(trace.events)

    def _open_python_ancestor(self, pos: np.ndarray, kept: np.ndarray) -> np.ndarray:
        """The innermost kept Python call enclosing each position and open at its start."""
        f = self.forest
        assert f.is_python is not None
        ts = f.table.ts[pos]
        a = f.parent[pos].astype(np.int64)
        while True:
            climb = a >= 0
            sub = a[climb]
            climb[climb] = ~(kept[sub] & (f.end(sub) >= ts[climb]))
            if not climb.any():
                return a
            a[climb] = f.parent[a[climb]]

    def _from_python_events(self) -> None:
        f = self.forest
        t = f.table
        assert f.is_python is not None
        frame_ok = t.names_matching(_stack_entry_kept)
        kept = f.is_python & frame_ok[t.name]
        frames = np.flatnonzero(kept)
        nxt = np.full(len(t), -1, dtype=np.int64)
        nxt[frames] = self._open_python_ancestor(frames, kept)
        self._first = np.empty(len(t), dtype=np.int64)
        for a in range(0, len(t), ROW_BLOCK):
            pos = np.arange(a, min(a + ROW_BLOCK, len(t)), dtype=np.int64)
            self._first[pos] = self._open_python_ancestor(pos, kept)
        name_rank = np.searchsorted(np.unique(t.name[frames]), t.name[frames]).astype(np.int64) + 1
        key = np.zeros(len(t), dtype=np.int64)  # per frame: id of its stack of `level` frames
        level_key = np.zeros(len(frames), dtype=np.int64)
        for _ in range(self.n):
            up = nxt[frames]
            below = np.where(up >= 0, key[np.maximum(up, 0)], 0)
            pair = name_rank * (int(level_key.max(initial=0)) + int(below.max(initial=0)) + 2) + below
            _, level_key = np.unique(pair, return_inverse=True)
            level_key = level_key.reshape(-1).astype(np.int64) + 1
            key[frames] = level_key
        self._frame_key = key
        self.count = int(level_key.max(initial=0)) + 1
        representative = np.full(self.count, -1, dtype=np.int64)
        representative[level_key[::-1]] = frames[::-1]
        self.frames_of = [[]]
        for k in range(1, self.count):
            fr, out = int(representative[k]), list[str]()
            while fr >= 0 and len(out) < self.n:
                out.append(t.strings[int(t.name[fr])])
                fr = int(nxt[fr])
            self.frames_of.append(out)

    def _from_call_stacks(self, table: EventTable) -> None:
        ids = np.unique(table.call_stack.values).astype(np.int64)
        ids = ids[ids > 0]
        seen: dict[tuple[str, ...], int] = {(): 0}
        keys = np.empty(len(ids), dtype=np.int64)
        for i, sid in enumerate(ids.tolist()):
            frames = tuple(x for x in table.strings[sid - 1].split(";") if x and _stack_entry_kept(x))[: self.n]
            keys[i] = seen.setdefault(frames, len(seen))
        self._by_call_stack = (ids, keys)
        self.count = len(seen)
        self.frames_of = [list(fr) for fr in seen]

    def of(self, pos: np.ndarray) -> np.ndarray:
        if self._first is not None:
            first = self._first[pos]
            return np.where(first >= 0, self._frame_key[np.maximum(first, 0)], 0)
        if self._by_call_stack is not None:
            ids, keys = self._by_call_stack
            at = positions_in(ids, self.forest.table.call_stack[pos].astype(np.int64))
            return np.where(at >= 0, keys[np.maximum(at, 0)], 0)
        return np.zeros(len(pos), dtype=np.int64)


# -- totals ----------------------------------------------------------------------------------


class _Totals:
    """Sums of `_SUMS` per int64 key, fed in parts (a block's rows, or their parents) and merged
    when read: no array as long as the table. Also each key's earliest start (torch lists
    groups in order of first occurrence: the tie-break of the sort)."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, keys: np.ndarray, columns: dict[str, np.ndarray | None], starts: np.ndarray | None = None) -> None:
        """`columns`: the weights of each summed column; None for a count (weight one a row)."""
        if not len(keys):
            return
        uniq, inverse = np.unique(keys, return_inverse=True)
        inverse = inverse.reshape(-1)
        self.parts.append((uniq, _sum_columns(inverse, len(uniq), columns), _first_start(inverse, len(uniq), starts)))

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not self.parts:
            return np.empty(0, dtype=np.int64), np.zeros((0, len(_SUMS))), np.empty(0)
        keys = np.concatenate([p[0] for p in self.parts])
        uniq, inverse = np.unique(keys, return_inverse=True)
        inverse = inverse.reshape(-1)
        stacked = np.concatenate([p[1] for p in self.parts])
        sums = _sum_columns(inverse, len(uniq), {name: stacked[:, i] for i, name in enumerate(_SUMS)})
        first = np.full(len(uniq), np.inf)
        np.minimum.at(first, inverse, np.concatenate([p[2] for p in self.parts]))
        return uniq, sums, first


class _DenseTotals:
    """`_Totals` over a small key space: arrays indexed by key."""

    def __init__(self, size: int):
        self.sums = np.zeros((len(_SUMS), size))
        self.first = np.full(size, np.inf)

    def add(self, keys: np.ndarray, columns: dict[str, np.ndarray | None], starts: np.ndarray | None = None) -> None:
        if not len(keys):
            return
        n = self.sums.shape[1]
        for name, col in columns.items():
            self.sums[_S[name]] += np.bincount(keys, weights=col, minlength=n)
        if starts is not None:
            np.minimum.at(self.first, keys, starts)

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        used = np.flatnonzero(self.sums[_S["count"]] > 0)
        return used, self.sums[:, used].T.copy(), self.first[used]


def _sum_columns(inverse: np.ndarray, n: int, columns: dict[str, np.ndarray | None]) -> np.ndarray:
    sums = np.zeros((n, len(_SUMS)))
    for name, col in columns.items():
        sums[:, _S[name]] = np.bincount(inverse, weights=col, minlength=n)
    return sums


def _first_start(inverse: np.ndarray, n: int, starts: np.ndarray | None) -> np.ndarray:
    """Each group's earliest start; rows come in start order, so it is the first row's."""
    if starts is None:
        return np.full(n, np.inf)
    first = np.empty(n, dtype=np.int64)
    first[inverse[::-1]] = np.arange(len(inverse) - 1, -1, -1)
    return np.asarray(starts, dtype=np.float64)[first]


class _MemoryInIntervals:
    """CPU and device bytes of the `[memory]` records inside [start, end] (any thread), by
    prefix sums over the records in time order, as torch's `MemRecordsAcc.in_interval`."""

    def __init__(self, trace: Trace):
        m = trace.memory
        order = np.argsort(m.ts, kind="stable") if len(m) and not np.all(m.ts[1:] >= m.ts[:-1]) else None
        self.ts = m.ts if order is None else m.ts[order]
        nbytes = m.nbytes if order is None else m.nbytes[order]
        dtype = m.device_type if order is None else m.device_type[order]
        self.cpu_bytes = np.where(np.isin(dtype, CPU_MEMORY_DEVICES), nbytes, 0)
        self.device_bytes = np.where(np.isin(dtype, DEVICE_MEMORY_DEVICES), nbytes, 0)
        self.cpu = np.concatenate(([0], np.cumsum(self.cpu_bytes)))
        self.device = np.concatenate(([0], np.cumsum(self.device_bytes)))
        self.recorded = len(m) > 0

    def __call__(self, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo = np.searchsorted(self.ts, start, side="left")
        hi = np.searchsorted(self.ts, end, side="right")
        return (self.cpu[hi] - self.cpu[lo]).astype(np.float64), (self.device[hi] - self.device[lo]).astype(np.float64)

    def uncovered(self, covered: np.ndarray) -> tuple[int, int, int]:
        """(records inside no event, their CPU bytes, their device bytes): torch's `[memory]` row."""
        left = ~covered
        return int(left.sum()), int(self.cpu_bytes[left].sum()), int(self.device_bytes[left].sum())


class _Coverage:
    """Which memory records lie inside some function event (torch's records "used"; the rest
    form its `[memory]` row). Spans come in start order, a block at a time: a record is inside
    one when the latest end among the spans started by its time reaches it. Each block decides
    the records from the previous block's last start to its own, so each record is looked at
    about once."""

    def __init__(self, mem_ts: np.ndarray):
        self.ts = mem_ts
        self.covered = np.zeros(len(mem_ts), dtype=bool)
        self.reach = -np.inf  # latest end among the spans fed so far
        self.done = 0  # records before this index are decided

    def _decide(self, upto: int, starts: np.ndarray, reach: np.ndarray) -> None:
        sel = np.arange(self.done, upto)
        if not len(sel):
            return
        j = np.searchsorted(starts, self.ts[sel], side="right") - 1
        before = j < 0  # before this block's first start: the earlier spans' reach
        got = np.where(before, self.reach, reach[np.maximum(j, 0)])
        self.covered[sel] = got >= self.ts[sel]
        self.done = upto

    def add(self, starts: np.ndarray, ends: np.ndarray) -> None:
        if not len(starts) or not len(self.ts):
            return
        reach = np.maximum.accumulate(np.maximum(np.asarray(ends, dtype=np.float64), self.reach))
        self._decide(int(np.searchsorted(self.ts, starts[-1], side="left")), starts, reach)
        self.reach = float(reach[-1])

    def finish(self) -> np.ndarray:
        """The records after the last span's start: inside it or an earlier one, or nothing."""
        if self.done < len(self.ts):
            sel = np.arange(self.done, len(self.ts))
            self.covered[sel] = self.reach >= self.ts[sel]
            self.done = len(self.ts)
        return self.covered


# -- the table -------------------------------------------------------------------------------


def key_averages(trace: Trace, nesting: Nesting, options: TableOptions | None = None) -> dict:
    """`prof.key_averages(group_by_input_shape, group_by_stack_n)` of the whole trace, its rows
    sorted by `options.sort_by` (largest first, ties in order of first occurrence), the first
    `row_limit` kept. Times µs, memory bytes, named as torch's attributes."""
    options = options or TableOptions()
    forest = _combined_forest(trace) if len(trace.python) else _host_forest(trace, nesting)
    ft = forest.table
    canon_name = _canonical_names(ft)
    parents = _Parents(forest)
    scan = _scan(forest, parents, canon_name)
    _fix_overhangs(parents, scan.overhang, scan.overhang_parent)
    _merge_duplicates(parents, canon_name, scan.same_name)
    present = scan.present
    _device_names(trace.events, canon_name, present)
    keys = _Keys(forest, trace, options, canon_name, present)
    totals = keys.totals()
    memory = _MemoryInIntervals(trace)
    coverage = _Coverage(memory.ts)
    for pos, kinds in forest.blocks():
        if len(parents.merged):
            kept = ~parents.is_merged(pos)
            pos, kinds = pos[kept], kinds[kept]
        start, dur = ft.ts[pos], ft.dur[pos]
        columns: dict[str, np.ndarray | None] = {"count": None, "cpu_time_total": dur}
        par = parents(pos)
        has = par >= 0
        child: dict[str, np.ndarray | None] = {"child_cpu": dur[has]}
        if memory.recorded:
            end = start + dur
            coverage.add(start, end)
            mem_cpu, mem_dev = memory(start, end)
            columns |= {"cpu_memory_usage": mem_cpu, "device_memory_usage": mem_dev}
            child |= {"child_cpu_memory": mem_cpu[has], "child_device_memory": mem_dev[has]}
        totals.add(keys.of(pos, kinds), columns, start)
        totals.add(keys.of(par[has], forest.kinds(par[has])), child)
    _device_rows(trace, forest, parents, keys, totals)
    uncovered = memory.uncovered(coverage.finish())
    return _table(keys, totals, uncovered, options, memory.recorded, forest)


def _canonical_names(table: EventTable) -> np.ndarray:
    """Per string id, the id torch keys a row by: every `ProfilerStep#N` is one `ProfilerStep*`
    (keyed by the first of them, named when the table is written: the table's strings are not
    added to, as other analyses read them on another thread)."""
    canon = np.arange(len(table.strings), dtype=np.int64)
    steps = np.flatnonzero(table.names_matching(lambda s: s.startswith("ProfilerStep#")))
    if len(steps):
        canon[steps] = steps[0]
    return canon


def _has_backward(table: EventTable) -> bool:
    """Whether autograd's backward pass ran ops in the trace."""
    return bool(table.names_matching(lambda s: s.startswith("autograd::engine::evaluate_function")).any())


def _row_name(name: str) -> str:
    return "ProfilerStep*" if name.startswith("ProfilerStep#") else name


def _device_names(table: EventTable, canon_name: np.ndarray, present: np.ndarray) -> None:
    for a in range(0, len(table), ROW_BLOCK):
        cat = table.cat[a:a + ROW_BLOCK]
        present[canon_name[table.name[a:a + ROW_BLOCK][in_categories(cat, DEVICE_CATS)]]] = True


_IS_FRONTEND = np.zeros(len(Cat), dtype=bool)
_IS_FRONTEND[[int(c) for c in FRONTEND_CATS]] = True


def _device_rows(trace: Trace, forest: _Forest, parents: _Parents, keys: _Keys,
                 totals: _Totals | _DenseTotals) -> None:
    """GPU events as rows of their own, and each kernel's time charged to the op that launched
    it (self device time) and to every event around that op (device time)."""
    t = trace.events
    for a in range(0, len(t), ROW_BLOCK):
        rows = np.flatnonzero(in_categories(t.cat[a:a + ROW_BLOCK], DEVICE_CATS)) + a
        if not len(rows):
            continue
        kinds = _KIND_OF_CAT[t.cat[rows]]
        dur = t.dur[rows]
        totals.add(keys.of(rows, kinds, table=t), {"count": None, "self_device_time_total": dur,
                                                    "device_time_total": dur}, t.ts[rows])
        kernel = kinds == KIND_DEVICE
        launcher = t.launcher[rows[kernel]].astype(np.int64)
        dur = dur[kernel]
        launched = launcher >= 0
        at = forest.event_pos(launcher[launched])
        found = at >= 0
        owner, dur = parents(at[found]), dur[launched][found]
        while True:  # the launching op or label: not a runtime call, not a Python frame
            climb = owner >= 0
            climb[climb] = ~_IS_FRONTEND[forest.table.cat[owner[climb]]]
            if not climb.any():
                break
            owner[climb] = parents(owner[climb])
        keep = owner >= 0
        owner, dur = owner[keep], dur[keep]
        if not len(owner):
            continue
        totals.add(keys.of(owner, forest.kinds(owner)), {"self_device_time_total": dur})
        up = owner
        while len(up):
            totals.add(keys.of(up, forest.kinds(up)), {"device_time_total": dur})
            up = parents(up)
            keep = up >= 0
            up, dur = up[keep], dur[keep]


def _table(keys: _Keys, totals: _Totals | _DenseTotals, uncovered: tuple[int, int, int], options: TableOptions,
           memory_recorded: bool, forest: _Forest) -> dict:
    uniq, sums, first = totals.result()
    rows_present = sums[:, _S["count"]] > 0
    uniq, sums, first = uniq[rows_present], sums[rows_present], first[rows_present]
    name_id, kind, shape, stack = keys.split(uniq)
    count = sums[:, _S["count"]]
    cols = {
        "count": count,
        "cpu_time_total": sums[:, _S["cpu_time_total"]],
        "self_cpu_time_total": sums[:, _S["cpu_time_total"]] - sums[:, _S["child_cpu"]],
        "device_time_total": sums[:, _S["device_time_total"]],
        "self_device_time_total": sums[:, _S["self_device_time_total"]],
        "cpu_memory_usage": sums[:, _S["cpu_memory_usage"]],
        "self_cpu_memory_usage": sums[:, _S["cpu_memory_usage"]] - sums[:, _S["child_cpu_memory"]],
        "device_memory_usage": sums[:, _S["device_memory_usage"]],
        "self_device_memory_usage": sums[:, _S["device_memory_usage"]] - sums[:, _S["child_device_memory"]],
    }
    strings = forest.table.strings
    names = [_row_name(strings[int(i)]) for i in name_id.tolist()]
    kinds = kind.tolist()
    shapes, stacks = shape.tolist(), stack.tolist()
    n_mem, mem_cpu, mem_dev = uncovered
    if n_mem:  # torch's row of the records no event encloses
        names.append("[memory]")
        kinds.append(KIND_MEMORY)
        shapes.append(0)
        stacks.append(0)
        first = np.append(first, np.inf)
        extra = {"count": n_mem, "cpu_memory_usage": mem_cpu, "self_cpu_memory_usage": mem_cpu,
                 "device_memory_usage": mem_dev, "self_device_memory_usage": mem_dev}
        cols = {k: np.append(v, extra.get(k, 0.0)) for k, v in cols.items()}
    n = len(names)
    cols["cpu_time"] = np.divide(cols["cpu_time_total"], cols["count"], out=np.zeros(n), where=cols["count"] > 0)
    cols["device_time"] = np.divide(cols["device_time_total"], cols["count"], out=np.zeros(n),
                                    where=cols["count"] > 0)
    kind_arr = np.asarray(kinds, dtype=np.int64)
    is_device = kind_arr == KIND_DEVICE
    order = np.lexsort((first, -cols[options.sort_by])) if n else np.empty(0, dtype=np.int64)
    limit = n if options.row_limit < 0 else min(n, options.row_limit)
    out_rows = []
    for g in order[:limit].tolist():
        row: dict = {"name": names[g], "kind": KIND_NAMES[kinds[g]]}
        for k in ("count",):
            row[k] = int(cols[k][g])
        for k in ("self_cpu_time_total", "cpu_time_total", "cpu_time", "self_device_time_total", "device_time_total",
                  "device_time"):
            row[k] = float(cols[k][g])
        for k in ("self_cpu_memory_usage", "cpu_memory_usage", "self_device_memory_usage", "device_memory_usage"):
            row[k] = int(round(float(cols[k][g])))
        if options.group_by_input_shape:
            row["input_shapes"] = keys.shapes_text[shapes[g]]
        if options.group_by_stack_n:
            row["stack"] = keys.stacks.frames_of[stacks[g]]
        out_rows.append(row)
    notes = []
    if options.group_by_stack_n and keys.stacks.source is None:
        notes.append("the trace holds no Python stacks (record it with with_stack=True): rows are not split by stack")
    if options.group_by_stack_n and keys.stacks.source is not None and _has_backward(forest.table):
        notes.append("ops run by the backward pass are grouped under the stack of the .backward() call; torch "
                     "groups them under their forward op's stack")
    return {
        "options": options.to_dict(),
        "self_cpu_time_total": float(cols["self_cpu_time_total"].sum()),
        "self_device_time_total": float(cols["self_device_time_total"][is_device].sum()),
        "groups": n,
        "has_device_time": bool((cols["self_device_time_total"] > 0).any()),
        "has_memory": bool(memory_recorded),
        "has_device_memory": bool((cols["self_device_memory_usage"] > 0).any()),
        "stack_source": keys.stacks.source,
        "rows": out_rows,
        "notes": notes,
    }

