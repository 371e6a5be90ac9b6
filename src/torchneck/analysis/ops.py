"""Host-side operators: hot ops, shapes, dispatch overhead, dtypes (their nesting: `nesting.py`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable

import numpy as np

from ..model.analysis import Annotation, BackwardNode, CodeSite, ConvBiasBn, Dispatch, Float64Ops, OpRow
from ..sites import LINE_PREFIX
from ..trace.table import Cat, EventTable
from .groups import grouped_totals
from .intervals import ROW_BLOCK, ascending
from .nesting import Nesting, Rows

TINY_OP_FLOOR_MULTIPLE = 4.0
"""An op is tiny, dominated by per-op overhead (Python, dispatcher, allocator), when its wall time
is within 4x of the cheapest ops of the same trace: those are nothing but that overhead (~5-15 µs
on a fast idle CPU, several times more on a slow or loaded one), so the limit follows the machine
the trace was recorded on instead of a fixed number of µs."""
TINY_OP_FLOOR_QUANTILE = 0.10
"""The per-op overhead of a trace: the 10th percentile of its top-level ops' durations (the
cheapest tenth: views, small element-wise ops)."""
TINY_OP_US = 20.0
"""The tiny-op limit when a trace has too few ops to measure its floor, and the least it is
(a floor of 1 µs, a view on a fast machine, would call every real op big)."""
TINY_OP_MIN_FLOOR_OPS = 100
"""Top-level ops needed to read the floor from a trace."""
TINY_RUN_GAP_MULTIPLE = 5.0
"""Two top-level ops belong to one loop when the gap between them (the Python that issues the
next one) is under 5x the tiny-op limit (and `TINY_RUN_MIN_GAP_US`): a loop issuing ops, not
two unrelated ops."""
TINY_RUN_MIN_GAP_US = 100.0
"""The least gap allowed inside a loop (a descheduled thread or a garbage collection pauses a
loop for tens of µs without ending it)."""
TINY_RUN_MIN_OPS = 50
"""A loop of at least 50 ops back to back; shorter sequences are the bookkeeping ops (views,
reshapes) between real work."""
TINY_RUN_SMALL_SHARE = 0.7
"""A loop is one of tiny ops when 70 % of its ops are small (an occasional bigger op, or a small
op delayed by the machine, does not end it)."""
SMALL_NUMEL = 2048
"""An op whose tensors hold at most 2048 elements does a few µs of arithmetic at most: its time
is per-op overhead (Python, dispatcher, allocator) whatever the machine or its load."""
METADATA_OPS = frozenset({
    "aten::select", "aten::slice", "aten::view", "aten::_unsafe_view", "aten::as_strided", "aten::unsqueeze",
    "aten::squeeze", "aten::expand", "aten::t", "aten::transpose", "aten::permute", "aten::narrow", "aten::unbind",
    "aten::split", "aten::chunk", "aten::alias", "aten::detach", "aten::numpy_T", "aten::split_with_sizes",
    "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg",
})
"""Ops that only make a new view of a tensor (indexing one element out of a big tensor is a
`select`): no arithmetic whatever the tensor's size, all per-op overhead."""
GATHER_OPS = frozenset({
    "aten::index", "aten::index_select", "aten::gather", "aten::take", "aten::take_along_dim",
    "aten::embedding", "aten::index_put_", "aten::_index_put_impl_", "aten::index_add_", "aten::index_copy_",
    "aten::index_fill_", "aten::scatter", "aten::scatter_", "aten::scatter_add_",
})
"""Ops that read or write the rows an index picks: their work is the rows picked, not the tensor
they pick from, yet that tensor is the (often only) size the profiler records (`h[nbrs]` on a
2000x64 `h` records [[2000, 64], []], the index list unrecorded). Small by their duration, then:
by recorded size, a loop gathering a few rows per pass from a big table would not be tiny."""


class TinyRuns:
    """Loops of ops on one thread, fed in start order a block at a time: sequences of top-level
    ops with only small gaps between them. A sequence of at least `TINY_RUN_MIN_OPS` ops, mostly
    small ones (`TINY_RUN_SMALL_SHARE`), counts with its whole wall time, the gaps included (the
    Python that issues each op is per-op overhead as much as the op's dispatch is)."""

    def __init__(self, gap_us: float) -> None:
        self.gap_us = gap_us
        self.covered_us = 0.0
        self.ops = 0
        self._open: tuple[float, float, int, int] | None = None  # (start, end, ops, small ops) in progress

    def add(self, start: np.ndarray, end: np.ndarray, small: np.ndarray) -> None:
        if not len(start):
            return
        prev_end = np.empty(len(start))
        prev_end[1:] = np.maximum.accumulate(end)[:-1]
        prev_end[0] = self._open[1] if self._open is not None else -np.inf
        joins = start - prev_end < self.gap_us
        # One id per sequence, a sequence starting where an op does not join the one before;
        # sequence 0 may be the one in progress from the block before.
        seq = np.cumsum(~joins) - (0 if joins[0] else 1)
        n = int(seq[-1]) + 1
        first = np.full(n, np.inf)
        np.minimum.at(first, seq, start)
        last = np.full(n, -np.inf)
        np.maximum.at(last, seq, end)
        count = np.bincount(seq, minlength=n)
        n_small = np.bincount(seq, weights=small.astype(np.float64), minlength=n).astype(np.int64)
        if self._open is not None and joins[0]:  # the sequence in progress goes on in this block
            first[0] = self._open[0]
            last[0] = max(last[0], self._open[1])
            count[0] += self._open[2]
            n_small[0] += self._open[3]
        elif self._open is not None:
            self._close()
        self._open = (float(first[-1]), float(last[-1]), int(count[-1]), int(n_small[-1]))
        self._count(first[:-1], last[:-1], count[:-1], n_small[:-1])

    def _count(self, first, last, count, n_small) -> None:
        keep = (count >= TINY_RUN_MIN_OPS) & (n_small >= TINY_RUN_SMALL_SHARE * count)
        self.covered_us += float((last[keep] - first[keep]).sum())
        self.ops += int(count[keep].sum())

    def _close(self) -> None:
        if self._open is not None:
            start, end, count, n_small = self._open
            self._count(np.array([start]), np.array([end]), np.array([count]), np.array([n_small]))
        self._open = None

    def finish(self) -> tuple[float, int]:
        self._close()
        return self.covered_us, self.ops


def max_numel_of_shapes(table: EventTable, shape_ids: np.ndarray) -> np.ndarray:
    """For string ids of recorded input shapes (`[[16, 64], [64], []]`), the largest tensor's
    element count; -1 where no shapes were recorded or they cannot be read. Each distinct id is
    parsed once a table (its answers kept in a lookup array indexed by string id: the blocks of
    an analysis, millions of rows, then read it in one gather each, with no sort)."""
    ids = np.asarray(shape_ids)
    out = np.full(len(ids), -1, dtype=np.int64)
    valid = ids >= 0
    if not valid.any():
        return out
    ids = ids[valid]
    lut = table._numel_of_shapes
    if lut is None or len(lut) < len(table.strings):  # strings only grow (`intern`)
        grown = np.full(len(table.strings), _UNPARSED, dtype=np.int64)
        if lut is not None:
            grown[:len(lut)] = lut
        lut = table._numel_of_shapes = grown
    need = np.zeros(len(lut), dtype=bool)
    need[ids] = True
    for sid in np.flatnonzero(need & (lut == _UNPARSED)).tolist():
        lut[sid] = _max_numel(table.strings[sid])
    out[valid] = lut[ids]
    return out


_UNPARSED = -2


def _max_numel(text: str) -> int:
    try:
        shapes = json.loads(text)
        return max((math.prod(s) for s in shapes if isinstance(s, list) and all(isinstance(d, int) for d in s)),
                   default=0)
    except (ValueError, TypeError):
        return -1


def top_level_numel(table: EventTable, nesting: Nesting, top: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """For top-level ops `top`, the largest input tensor (elements) of the op or any op under it
    (an autograd `evaluate_function` has no shapes; its backward op does); -1 when none of them
    recorded shapes. `ops`: the CPU ops to look under them, `top` included."""
    numel = max_numel_of_shapes(table, np.asarray(table.shapes[ops]))
    has = numel >= 0
    rows, numel = ops[has], numel[has]
    out = np.full(len(top), -1, dtype=np.int64)
    if not len(rows):
        return out
    order = np.argsort(top, kind="stable")
    sorted_top = top[order]
    at = rows.astype(np.int64)
    for _ in range(64):  # climb to the top-level ancestor, one level at a time (ops nest a few deep)
        k = np.minimum(np.searchsorted(sorted_top, at), len(top) - 1)
        done = sorted_top[k] == at
        np.maximum.at(out, order[k[done]], numel[done])
        at, numel = at[~done], numel[~done]
        if not len(at):
            break
        up = nesting.parent[at]
        alive = up >= 0
        at, numel = up[alive].astype(np.int64), numel[alive]
    return out


def rows_where(rows: Rows, mask: np.ndarray) -> np.ndarray:
    """The rows of `rows` where `mask` (one flag per row of `rows`) is set, as an index array
    (int32 when it fits); from a slice, found `ROW_BLOCK` flags at a time, straight into the
    output (no list of parts beside it: the window's 3.9 M CPU ops at 3 GB are 16 MB)."""
    if not isinstance(rows, slice):
        return rows[mask]
    start = rows.start or 0
    index = np.int32 if start + len(mask) < np.iinfo(np.int32).max else np.int64
    out = np.empty(int(np.count_nonzero(mask)), dtype=index)
    at = 0
    for a in range(0, len(mask), ROW_BLOCK):
        found = np.flatnonzero(mask[a:a + ROW_BLOCK])
        out[at:at + len(found)] = found + (start + a)
        at += len(found)
    return out


def rows_matching(rows: Rows, keep: Callable[[Rows], np.ndarray]) -> np.ndarray:
    """The rows of `rows` where `keep(block)` (flags for a block of them) is set, as an index
    array: `rows_where(rows, keep(rows))` without a mask, or gathered column, as long as `rows`."""
    found = [rows_where(block, keep(block)) for block in row_blocks(rows)]
    return np.concatenate(found) if found else np.empty(0, dtype=np.int32)


def ops_by_arg_pairs(table: EventTable, rows: Rows, recorded: np.ndarray, wanted: np.ndarray,
                     names: np.ndarray | None = None) -> tuple[bool, np.ndarray]:
    """(whether any CPU op among `rows` has an args pair in `recorded`, the CPU ops whose pair
    is in `wanted` and, if given, whose name id is in `names`), a block at a time. `recorded`
    and `wanted` are masks over args ids (`EventTable.arg_pairs_matching`)."""
    seen, found = False, []
    for block in row_blocks(rows):
        is_op = table.cat[block] == Cat.CPU_OP
        args = table.args[block]
        seen = seen or bool((is_op & recorded[args]).any())
        keep = is_op & wanted[args]
        if names is not None:
            keep &= names[table.name[block]]
        found.append(rows_where(block, keep))
    return seen, np.concatenate(found) if found else np.empty(0, dtype=np.int32)


def row_blocks(rows: Rows):
    """`rows` in pieces of `ROW_BLOCK` (slices of a slice, views of an index array), for masks
    and gathers whose whole-window versions would be a byte or more a row each."""
    if isinstance(rows, slice):
        start, stop = rows.start or 0, rows.stop
        for a in range(start, stop, ROW_BLOCK):
            yield slice(a, min(a + ROW_BLOCK, stop))
    else:
        for a in range(0, len(rows), ROW_BLOCK):
            yield rows[a:a + ROW_BLOCK]


def cpu_ops_among(table: EventTable, rows: Rows) -> np.ndarray:
    """The CPU ops among `rows`: `rows` itself, not a copy, when it is an index array of CPU ops
    only (the analyses are handed the window's CPU ops, selected once). Checked and selected a
    block at a time: no mask as long as the window."""
    def is_op(block: Rows) -> np.ndarray:
        return table.cat[block] == Cat.CPU_OP

    if not isinstance(rows, slice) and all(is_op(block).all() for block in row_blocks(rows)):
        return rows
    return rows_matching(rows, is_op)


def rows_starting_in(table: EventTable, lo: float, hi: float) -> Rows:
    """Rows whose start lies in [lo, hi). On a table sorted by start, as loaded, that is one
    range, returned as a slice; otherwise an index array (int32 when it fits)."""
    ts = table.ts
    if ascending(ts):
        return slice(int(np.searchsorted(ts, lo, side="left")), int(np.searchsorted(ts, hi, side="left")))
    index = np.int32 if len(ts) < np.iinfo(np.int32).max else np.int64
    return np.flatnonzero((ts >= lo) & (ts < hi)).astype(index)


BACKWARD_NODE = "autograd::engine::evaluate_function: "
"""The prefix of the op autograd records around each node it runs in a backward pass."""


def backward_nodes(every_op: list[OpRow]) -> list[BackwardNode]:
    """The backward nodes among the window's ops (`every_op`: op_table with no limit), with the
    calls of the forward op each differentiates, by name (`ConvolutionBackward0` ->
    `aten::convolution`, `NativeBatchNormBackward0` -> `aten::native_batch_norm`); gradient
    accumulation (`AccumulateGrad`), which differentiates no op, left out."""
    counts = {o.name: o.count for o in every_op}
    out = []
    for o in every_op:
        if not o.name.startswith(BACKWARD_NODE) or "Backward" not in o.name:
            continue
        node = o.name[len(BACKWARD_NODE):].rsplit("::", 1)[-1]
        forward = "aten::" + re.sub(r"(?<!^)(?=[A-Z])", "_", node.split("Backward")[0]).lower()
        out.append(BackwardNode(node=node, count=o.count, total_us=o.total_us, forward_op=forward,
                                forward_count=counts.get(forward, 0)))
    return sorted(out, key=lambda n: -n.total_us)


def op_table(table: EventTable, nesting: Nesting, rows: np.ndarray, by_shape: bool = False,
             top: int | None = 30) -> list[OpRow]:
    """Ops among `rows` grouped by name (and input shapes, with `by_shape`), most self time first
    (the first `top`; None: all)."""
    rows = cpu_ops_among(table, rows)
    if not len(rows):
        return []
    width = len(table.strings) + 2

    def key(r: np.ndarray) -> np.ndarray:
        k = table.name[r].astype(np.int64)
        return k * width + (table.shapes[r].astype(np.int64) + 1) if by_shape else k

    groups = grouped_totals(rows, key, [lambda r: nesting.self_time(r), lambda r: table.dur[r]])
    self_us, total_us = groups.sums
    count, first_row = groups.count, groups.first_row
    best = np.argsort(-self_us, kind="stable")[:top]
    out = []
    for g in best.tolist():
        r = int(first_row[g])
        shapes = (table.strings[table.shapes[r]] if table.shapes[r] >= 0 else "") if by_shape else None
        out.append(OpRow(name=table.strings[table.name[r]], count=int(count[g]), self_us=float(self_us[g]),
                         total_us=float(total_us[g]), mean_us=float(total_us[g] / count[g]), shapes=shapes))
    return out


def dispatch_overhead(table: EventTable, nesting: Nesting, rows: np.ndarray, span_us: float,
                      steps: int) -> Dispatch:
    """How much of the host time goes to many tiny ops.

    Top-level ops are CPU ops whose parent is not another CPU op (the ops the user's code called).
    `tiny_share` is the wall time of top-level ops shorter than `tiny_limit_us` (see
    `TINY_OP_FLOOR_MULTIPLE`), over `span_us`.
    """
    cpu = cpu_ops_among(table, rows)
    if not len(cpu):
        return Dispatch()

    def top_level_rows():
        """The top-level ops, in start order, a block of ops at a time."""
        for a in range(0, len(cpu), ROW_BLOCK):
            c = cpu[a:a + ROW_BLOCK]
            par = nesting.parent[c]
            has_parent = par >= 0
            parent_is_op = np.zeros(len(c), dtype=bool)
            parent_is_op[has_parent] = table.cat[par[has_parent]] == Cat.CPU_OP
            yield c[~parent_is_op]

    def top_level_durations():
        """The top-level ops' durations (float32, as in the table), a block of ops at a time."""
        for top in top_level_rows():
            yield table.dur[top]

    quantiles = streamed_quantiles(top_level_durations, (TINY_OP_FLOOR_QUANTILE, 0.5))
    floor, median = quantiles if quantiles else (0.0, 0.0)
    n = sum(len(d) for d in top_level_durations())
    limit = max(TINY_OP_US, TINY_OP_FLOOR_MULTIPLE * floor) if n >= TINY_OP_MIN_FLOOR_OPS else TINY_OP_US
    tiny_ops, tiny_us = 0, 0.0
    runs: dict[int, TinyRuns] = {}
    gap = max(TINY_RUN_MIN_GAP_US, TINY_RUN_GAP_MULTIPLE * limit)
    metadata = table.names_matching(lambda s: s in METADATA_OPS)
    gather = table.names_matching(lambda s: s in GATHER_OPS)
    for a in range(0, len(cpu), ROW_BLOCK):
        block = cpu[a:a + ROW_BLOCK]
        par = nesting.parent[block]
        has_parent = par >= 0
        parent_is_op = np.zeros(len(block), dtype=bool)
        parent_is_op[has_parent] = table.cat[par[has_parent]] == Cat.CPU_OP
        top = block[~parent_is_op]
        if not len(top):
            continue
        dur = table.dur[top]
        is_tiny = dur < limit
        tiny_ops += int(is_tiny.sum())
        tiny_us += float(dur[is_tiny].sum(dtype=np.float64))
        # Small by the tensors it works on where shapes were recorded (an op delayed by a busy
        # machine is still small), by its duration otherwise. Ops whose children start in the
        # next block are looked for in this one only: their numel may come out smaller; rare.
        numel = top_level_numel(table, nesting, top, block)
        by_size = (numel >= 0) & ~gather[table.name[top]]
        small = np.where(by_size, numel <= SMALL_NUMEL, is_tiny) | metadata[table.name[top]]
        thread = table.thread[top]
        for th in np.unique(thread).tolist():
            on = thread == th
            start = table.ts[top[on]].astype(np.float64)
            runs.setdefault(th, TinyRuns(gap)).add(start, start + dur[on], small[on])
    run_us, run_ops = 0.0, 0
    for r in runs.values():
        covered, ops_in_runs = r.finish()
        run_us += covered
        run_ops += ops_in_runs
    return Dispatch(top_level_ops=int(n), ops_per_step=float(n / max(steps, 1)), tiny_ops=tiny_ops, tiny_us=tiny_us,
                    tiny_share=tiny_us / span_us if span_us > 0 else 0.0, median_op_us=median,
                    floor_op_us=floor, tiny_limit_us=float(limit), tiny_run_us=run_us, tiny_run_ops=run_ops,
                    tiny_run_share=run_us / span_us if span_us > 0 else 0.0)


MEDIAN_BINS_SHIFT = 16
"""`streamed_median` bins a float32 by its top 16 bits (sign, exponent, 7 bits of mantissa):
65536 bins, each 1/128 of its value wide."""


def streamed_median(blocks: Callable[[], Iterable[np.ndarray]]) -> float:
    """`np.median` of the values `blocks()` yields (see `streamed_quantiles`)."""
    found = streamed_quantiles(blocks, (0.5,))
    return found[0] if found else 0.0


def streamed_quantiles(blocks: Callable[[], Iterable[np.ndarray]], qs: tuple[float, ...]) -> list[float]:
    """`np.quantile(values, q)` (linear interpolation, in float64, of non-negative float32
    values) for each q, of the values `blocks()` yields, without holding them all ([] when there
    are none): a first pass counts them into bins by their bit pattern (ordered like the values,
    as they are not negative), a second keeps only the bins the wanted ranks fall in, and those
    are partitioned. The top-level ops of a 3 GB CPU trace are 20 MB of float32; the bins are
    512 KB."""
    counts = np.zeros(1 << (32 - MEDIAN_BINS_SHIFT), dtype=np.int64)

    def float32_blocks():
        for values in blocks():  # + 0.0 makes a -0.0 (sign bit set) a 0.0
            yield np.asarray(values, dtype=np.float32) + np.float32(0.0)

    for values in float32_blocks():
        counts += np.bincount(values.view(np.uint32) >> MEDIAN_BINS_SHIFT, minlength=len(counts))
    n = int(counts.sum())
    if not n:
        return []
    up_to = np.cumsum(counts)
    positions = [q * (n - 1) for q in qs]
    ranks = sorted({k for pos in positions for k in (int(np.floor(pos)), int(np.ceil(pos)))})
    bins = sorted({int(np.searchsorted(up_to, k, side="right")) for k in ranks})
    kept: dict[int, list[np.ndarray]] = {b: [] for b in bins}
    for values in float32_blocks():
        bin_of = values.view(np.uint32) >> MEDIAN_BINS_SHIFT
        for b in bins:
            kept[b].append(values[bin_of == b])
    joined = {b: np.concatenate(kept[b]) for b in bins}
    value: dict[int, float] = {}
    for k in ranks:
        b = int(np.searchsorted(up_to, k, side="right"))
        inside = joined[b]
        at = k - (int(up_to[b - 1]) if b else 0)
        inside.partition(at)
        value[k] = float(inside[at])
    out = []
    for pos in positions:
        lo, hi = int(np.floor(pos)), int(np.ceil(pos))
        out.append(value[lo] + (value[hi] - value[lo]) * (pos - lo))
    return out


def float64_ops(table: EventTable, nesting: Nesting, rows: np.ndarray, top: int = 10,
                place: Callable[[np.ndarray], list[CodeSite]] | None = None) -> Float64Ops:
    """CPU ops with a float64 *tensor* input (needs record_shapes): self time, the top ops and
    the GPU time of the kernels they launched (that of convolutions apart); with `place`, also
    `where`: `place(rows)` of those ops (the user's code that ran them).

    An input counts when its type is `double` and its shape has at least one dimension: a Python
    float passed to an op (`x * 0.5`) arrives as a 0-dim double "wrapped number", and ops on those
    (`aten::mul` with shapes `[[16], []]`, the `aten::to` that makes them) are not float64 data."""
    has_double = table.names_matching(lambda s: '"double"' in s or "c10::complex<double>" in s)
    typed = table.arg_pairs_matching(lambda shapes, types: types >= 0)
    double_tensor = table.arg_pairs_matching(  # decided once a distinct (shapes, types) pair
        lambda shapes, types: types >= 0 and bool(has_double[types])
        and _double_tensor_input(table.strings[types], table.strings[shapes] if shapes >= 0 else ""))
    recorded, hit = ops_by_arg_pairs(table, rows, typed, double_tensor)
    if not recorded:
        return Float64Ops(recorded=False)
    kernels = launched_kernels(table, hit)
    conv = launched_kernels(table, hit[table.names_matching(lambda s: "conv" in s)[table.name[hit]]])
    return Float64Ops(recorded=True, self_us=float(nesting.self_time(hit).sum(dtype=np.float64)), count=int(len(hit)),
                      kernel_us=float(table.dur[kernels].sum(dtype=np.float64)),
                      conv_kernel_us=float(table.dur[conv].sum(dtype=np.float64)),
                      ops=op_table(table, nesting, hit, by_shape=True, top=top) if len(hit) else [],
                      where=place(hit) if place is not None and len(hit) else [])


def launched_kernels(table: EventTable, ops: np.ndarray) -> np.ndarray:
    """The kernel rows launched under these host ops: kernels whose launching call
    (`EventTable.launcher`, a runtime or driver call) starts inside an op's span, on its thread;
    each kernel once, however many of the ops (nested ones) hold its call."""
    link = table.launcher
    kernels = link.rows[table.cat[link.rows] == Cat.KERNEL]
    if not len(ops) or not len(kernels):
        return np.empty(0, dtype=np.int64)
    calls = link[kernels]
    out = []
    for thread in np.unique(table.thread[ops]).tolist():  # a few threads: one sweep each
        mine = table.thread[calls] == thread
        k, c = kernels[mine], calls[mine]
        if not len(k):
            continue
        order = np.argsort(table.ts[c], kind="stable")
        k, call_ts = k[order], table.ts[c][order]
        held = ops[table.thread[ops] == thread]
        lo = np.searchsorted(call_ts, table.ts[held], side="left")
        hi = np.searchsorted(call_ts, table.ts[held] + table.dur[held], side="left")
        depth = np.zeros(len(k) + 1, dtype=np.int64)  # how many op spans cover each call
        np.add.at(depth, lo, 1)
        np.add.at(depth, hi, -1)
        out.append(k[np.cumsum(depth[:-1]) > 0])
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _double_tensor_input(types_json: str, shapes_json: str) -> bool:
    """True when some input is double with at least one dimension (shapes unknown: any double)."""
    try:
        types = json.loads(types_json)
        shapes = json.loads(shapes_json) if shapes_json else None
    except ValueError:
        return True
    if not isinstance(types, list):
        return True
    for i, t in enumerate(types):
        if not (isinstance(t, str) and ("double" in t)):
            continue
        if not isinstance(shapes, list) or i >= len(shapes):
            return True
        if isinstance(shapes[i], list) and len(shapes[i]) > 0:
            return True
    return False


def callers(table: EventTable, nesting: Nesting, rows: np.ndarray) -> np.ndarray:
    """Per row, its enclosing host event, looking through torchneck's per-call line spans (in a
    live run each torch call from the user's code has its own, so ops called one after the other
    would otherwise never share a parent)."""
    caller = nesting.parent[rows].copy()
    marker = table.names_matching(lambda s: s.startswith(LINE_PREFIX))
    if not marker.any():
        return caller
    for _ in range(8):
        m = caller >= 0
        m[m] = marker[table.name[caller[m]]]
        if not m.any():
            break
        caller[m] = nesting.parent[caller[m]]
    return caller


_CONV_OPS = ("aten::conv1d", "aten::conv2d", "aten::conv3d")
_BATCH_NORM_OPS = ("aten::batch_norm",)
_BOOKKEEPING_OPS = ("aten::add_",)
"""Ops that may sit between a conv and its BatchNorm: `num_batches_tracked += 1` in training."""


def conv_bias_before_batch_norm(table: EventTable, nesting: Nesting, rows: np.ndarray) -> ConvBiasBn:
    """Convolutions with a bias whose very next op (same thread, same caller) is a batch norm
    over as many channels (needs record_shapes).

    BatchNorm subtracts the per-channel mean right after, so the conv's bias cancels out: it is
    computed, stored and differentiated for nothing (torch's profiler pattern
    `Conv2dBiasFollowedByBatchNorm2dPattern`). `conv_us` is those convolutions' total time."""
    cpu = cpu_ops_among(table, rows)
    conv_name = table.names_matching(lambda s: s in _CONV_OPS)
    bn_name = table.names_matching(lambda s: s in _BATCH_NORM_OPS)
    if not len(cpu) or not conv_name.any() or not bn_name.any():
        return ConvBiasBn(recorded=bool(len(cpu)))
    caller = callers(table, nesting, cpu)
    order = np.lexsort((table.ts[cpu], caller, table.thread[cpu]))
    seq, caller = cpu[order], caller[order]
    same = np.zeros(len(seq), dtype=bool)  # same[i]: seq[i + 1] is seq[i]'s next sibling
    same[:-1] = (table.thread[seq[1:]] == table.thread[seq[:-1]]) & (caller[1:] == caller[:-1])
    bookkeeping = table.names_matching(lambda s: s in _BOOKKEEPING_OPS)
    nxt = np.full(len(seq), -1, dtype=np.int64)
    for i in np.flatnonzero(conv_name[table.name[seq]]).tolist():
        j = i
        while j < len(seq) - 1 and same[j] and j - i <= 3:
            j += 1
            if not bookkeeping[table.name[seq[j]]]:
                nxt[i] = seq[j]
                break
    cand = np.flatnonzero(nxt >= 0)
    cand = cand[bn_name[table.name[nxt[cand]]]]
    parsed: dict[int, list | None] = {}

    def dims(sid: int):
        if sid not in parsed:
            try:
                parsed[sid] = json.loads(table.strings[sid]) if sid >= 0 else None
            except ValueError:
                parsed[sid] = None
        return parsed[sid]

    hits = []
    for i in cand.tolist():
        conv, bn = int(seq[i]), int(nxt[i])
        c, b = dims(int(table.shapes[conv])), dims(int(table.shapes[bn]))
        if not c or not b or len(c) < 3 or not c[2] or not c[1] or not b[0] or len(b[0]) < 2:
            continue  # no bias (an empty shape), or shapes not recorded
        if c[1][0] == b[0][1]:  # the conv's output channels are what the norm normalises
            hits.append(conv)
    rows = np.asarray(hits, dtype=np.int64)
    return ConvBiasBn(recorded=True, pairs=int(len(rows)), conv_us=float(table.dur[rows].sum()) if len(rows) else 0.0)


def annotation_table(table: EventTable, rows: Rows, top: int = 20) -> list[Annotation]:
    """User annotations (`record_function` blocks, module names) other than steps, by total time."""
    ann = rows_matching(rows, lambda block: table.cat[block] == Cat.USER_ANNOTATION)
    if not len(ann):
        return []
    names = table.name[ann]
    uniq, inverse = np.unique(names, return_inverse=True)
    total = np.bincount(inverse, weights=table.dur[ann].astype(np.float64))
    count = np.bincount(inverse)
    out = []
    for g in np.argsort(-total).tolist():
        name = table.strings[uniq[g]]
        if name.startswith(("ProfilerStep#", LINE_PREFIX)):
            continue
        out.append(Annotation(name=name, count=int(count[g]), total_us=float(total[g])))
        if len(out) >= top:
            break
    return out


def has_line_marks(table: EventTable) -> bool:
    """Whether the trace holds `torchneck@` spans (recorded by `torchneck run`): only then is
    `enclosing_sites` worth its pass and its row-long array."""
    return any(s.startswith(LINE_PREFIX) for s in table.strings)


def enclosing_sites(table, nesting: Nesting) -> np.ndarray:
    """Per row, the string id of the innermost `torchneck@` span enclosing it (itself included),
    or -1. Found by pointer jumping up the nesting's parent links (log depth passes); kept with
    the nesting, since the memory, float64, sync and per-line analyses all ask for it."""
    cached = getattr(nesting, "_sites", None)
    if cached is None:
        cached = nesting._sites = _enclosing_sites(table, nesting)
    return cached


def _enclosing_sites(table, nesting: Nesting) -> np.ndarray:
    n = len(table)
    site = np.full(n, -1, dtype=np.int32)
    ann = np.flatnonzero(table.cat == Cat.USER_ANNOTATION)
    if not len(ann):
        return site
    is_site = np.zeros(len(table.strings), dtype=bool)
    for i, name in enumerate(table.strings):
        if name.startswith(LINE_PREFIX):
            is_site[i] = True
    mine = ann[is_site[table.name[ann]]]
    if not len(mine):
        return site
    site[mine] = table.name[mine]
    up = nesting.parent.copy()
    while True:
        todo = (site < 0) & (up >= 0)
        if not todo.any():
            return site
        idx = np.flatnonzero(todo)
        site[idx] = site[up[idx]]
        up[idx] = up[up[idx]]
