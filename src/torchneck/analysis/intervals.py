"""Interval arithmetic on numpy arrays of [start, end) spans, in µs."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

ROW_BLOCK = 1 << 16
"""Table rows read at once by analyses that work through whole columns (here, and
`groups.grouped_totals`): their temporaries (a float64 end per row, keys, masks) stay under a
MB each however long the table is, small enough to be reused from the heap rather than mapped
afresh (`trace.loader.return_large_frees_promptly`)."""


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (starts, ends). Intervals taken from the event
    table come sorted by start already: then no sort and no reordered copies are made."""
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    if not (s[1:] >= s[:-1]).all():
        order = np.argsort(s, kind="stable")
        s = s[order]
        e = e[order]
    running_end = np.maximum.accumulate(e)
    # A new group starts where the start is past every earlier end.
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    np.greater(s[1:], running_end[:-1], out=new_group[1:])
    del running_end
    first = np.flatnonzero(new_group)
    return s[first], np.maximum.reduceat(e, first)


class UnionLength:
    """The union length of spans fed in start order, a block at a time, clipped to [lo, hi].

    Each span adds what it extends the covered stretch by: `max(0, running_end - max(start,
    previous running_end))`, with the running end carried from block to block, so no merged
    copy of a GPU's hundreds of thousands of kernels is made. `in_order` turns False if a
    block's starts (or its first start against the last fed) decrease: the sum is then not the
    union and the caller must take `union_length` over all the spans instead."""

    def __init__(self, lo: float = -np.inf, hi: float = np.inf):
        self.lo, self.hi = lo, hi
        self.total = 0.0
        self.covered_to = -np.inf
        self.last_start = -np.inf
        self.in_order = True

    def add(self, starts: np.ndarray, ends: np.ndarray) -> None:
        if not len(starts):
            return
        s = np.asarray(starts, dtype=np.float64)
        if s[0] < self.last_start or not bool(np.all(s[1:] >= s[:-1])):
            self.in_order = False
            return
        self.last_start = float(s[-1])
        s = np.clip(s, self.lo, self.hi)
        run = np.clip(np.asarray(ends, dtype=np.float64), self.lo, self.hi)
        run[0] = max(run[0], self.covered_to)
        np.maximum.accumulate(run, out=run)
        before = np.empty_like(run)  # the running end before each span
        before[0] = self.covered_to
        before[1:] = run[:-1]
        np.maximum(before, s, out=before)
        np.subtract(run, before, out=before)
        self.total += float(before[before > 0].sum())
        self.covered_to = float(run[-1])


def union_length(starts: np.ndarray, ends: np.ndarray, lo: float = -np.inf, hi: float = np.inf) -> float:
    """Total length covered by the intervals, clipped to [lo, hi]: with starts ascending (spans
    taken from the event table are), `UnionLength` over `ROW_BLOCK` intervals at a time;
    otherwise by `merge`."""
    n = len(starts)
    if n == 0:
        return 0.0
    union = UnionLength(lo, hi)
    for a in range(0, n, ROW_BLOCK):
        union.add(starts[a:a + ROW_BLOCK], ends[a:a + ROW_BLOCK])
        if not union.in_order:
            s, e = merge(np.clip(starts, lo, hi), np.clip(ends, lo, hi))
            return float(np.sum(e - s))
    return union.total


def ascending(values: np.ndarray) -> bool:
    """Whether `values` never decrease: compared `ROW_BLOCK` (and the value after) at a time,
    so checking a table column makes no comparison array as long as it."""
    return all(bool(np.all(v[1:] >= v[:-1])) for v in (values[a:a + ROW_BLOCK + 1]
                                                       for a in range(0, max(len(values) - 1, 0), ROW_BLOCK)))


def claim_by_priority(
    spans: list[tuple[np.ndarray, np.ndarray]], lo: float, hi: float
) -> list[float]:
    """Split [lo, hi] among interval sets given in priority order: each instant goes to the
    first set covering it. Returns one length per set plus, last, the unclaimed length.

    This is how the TensorBoard plugin's step breakdown makes categories sum to step time. One
    window, one union per set: the definition `claim_by_priority_in_windows` is tested against.
    """
    # Set k claims what it adds to the union of the sets before it.
    covered_s, covered_e = np.empty(0), np.empty(0)
    covered_len = 0.0
    out = []
    for s, e in spans:
        s = np.clip(s, lo, hi)
        e = np.clip(e, lo, hi)
        keep = e > s
        if keep.any():
            covered_s, covered_e = merge(np.concatenate([covered_s, s[keep]]), np.concatenate([covered_e, e[keep]]))
        length = float(np.sum(covered_e - covered_s))
        out.append(max(length - covered_len, 0.0))
        covered_len = length
    out.append(max(hi - lo, 0.0) - covered_len)
    return out


def claim_by_priority_in_windows(
    spans: Iterable[tuple[np.ndarray, np.ndarray]], lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """`claim_by_priority` for many windows at once: rows are windows, columns the sets in
    priority order plus, last, the unclaimed length. `spans` may be a generator, so only one
    raw set is held at a time.

    One sweep instead of a union per set: each set is merged on its own (nested host ops shrink
    to a few spans), then all their ends are sorted together; between two consecutive ends the
    same sets are open, and the first of them in priority owns that stretch. A window's claim
    for set k is then the length set k owns inside it, read from running sums at the window's
    two edges. This equals the union-by-union definition (what sets 0..k cover minus what
    sets 0..k-1 cover) and costs one sort of the merged ends, not seven merges of growing
    unions."""
    sets = [merge(s, e) for s, e in spans]
    k = len(sets)
    if k > 62:
        raise ValueError("at most 62 interval sets")
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.maximum(np.asarray(hi, dtype=np.float64), lo)
    out = np.zeros((len(lo), k + 1))
    width = hi - lo
    sizes = [len(s) for s, _ in sets]
    total = sum(sizes)
    if total == 0 or not len(lo):
        out[:, -1] = width
        return out
    pos = np.concatenate([s for s, _ in sets] + [e for _, e in sets])
    bit = np.repeat(np.left_shift(np.int64(1), np.tile(np.arange(k, dtype=np.int64), 2)), sizes * 2)
    order = np.argsort(pos, kind="stable")  # on equal positions, starts before ends
    pos = pos[order]
    bit = np.where(order < total, bit[order], -bit[order])
    del order
    # A merged set's spans never touch, so each set opens and closes in turn: the running sum
    # of +-2**set is the bit mask of the sets open after each point; its lowest bit, the owner.
    open_sets = np.cumsum(bit)
    lowest = open_sets & -open_sets
    owner = np.where(lowest > 0, np.log2(np.maximum(lowest, 1)).astype(np.int64), k)[:-1]
    del bit, open_sets, lowest
    starts, ends = pos[:-1], pos[1:]  # stretch j runs from point j to point j + 1: owner[j]'s
    first = np.maximum(np.searchsorted(ends, lo, side="right"), 0)  # stretches ending after lo...
    last = np.searchsorted(starts, hi, side="left")  # ...and starting before hi
    for i in range(len(lo)):
        a, b = int(first[i]), int(last[i])
        if a >= b:
            continue
        length = np.minimum(ends[a:b], hi[i]) - np.maximum(starts[a:b], lo[i])
        out[i, :k] = np.bincount(owner[a:b], weights=np.maximum(length, 0.0), minlength=k + 1)[:k]
    out[:, -1] = np.maximum(width - out[:, :k].sum(axis=1), 0.0)
    return out


def overlapping_rows(ts: np.ndarray, dur: np.ndarray, lo: float, hi: float, strict: bool = True,
                     mask: np.ndarray | Callable[[slice], np.ndarray] | None = None) -> np.ndarray:
    """Rows (int32 when they fit) whose [ts, ts + dur] overlaps [lo, hi]: `ts < hi and
    ts + dur > lo`, or with `strict=False` `ts <= hi and ts + dur >= lo`; only where `mask`
    is set, if given: an array, or a function giving a block of rows' flags (so no mask as
    long as the table is made). `ROW_BLOCK` rows at a time."""
    out = []
    index = np.int32 if len(ts) < np.iinfo(np.int32).max else np.int64
    for a in range(0, len(ts), ROW_BLOCK):
        t = ts[a:a + ROW_BLOCK]
        end = t + dur[a:a + ROW_BLOCK]
        m = (t < hi) & (end > lo) if strict else (t <= hi) & (end >= lo)
        if mask is not None:
            m &= mask(slice(a, a + len(t))) if callable(mask) else mask[a:a + ROW_BLOCK]
        out.append((np.flatnonzero(m) + a).astype(index))
    return np.concatenate(out) if out else np.empty(0, dtype=index)


def union_of_rows(ts: np.ndarray, dur: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`merge` of the rows' [ts, ts + dur) spans, `ROW_BLOCK` rows at a time: each block
    shrinks to its union (nested host ops to a few spans) before the blocks are merged."""
    parts_s, parts_e = [], []
    for a in range(0, len(rows), ROW_BLOCK):
        r = rows[a:a + ROW_BLOCK]
        start = ts[r]
        s, e = merge(start, start + dur[r])
        parts_s.append(s)
        parts_e.append(e)
    if len(parts_s) <= 1:
        return (parts_s[0], parts_e[0]) if parts_s else (np.empty(0), np.empty(0))
    return merge(np.concatenate(parts_s), np.concatenate(parts_e))
