"""Group-by over millions of rows in bounded memory.

`np.unique(keys, return_inverse=True)` over a whole table sorts a copy of the keys and builds an
int64 inverse as long as the table: at 2.5 M rows a GB, four or five such arrays are 80-100 MB
held at once. Grouping a block of rows at a time, then merging the per-block groups (a few
thousand at most), gives the same totals with a block's worth of temporaries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..trace.table import search_sorted
from . import intervals


@dataclass
class Groups:
    """One entry per distinct key, keys ascending."""

    keys: np.ndarray  # int64
    count: np.ndarray  # int64, rows in the group
    sums: list[np.ndarray]  # float64, one per weight, the group's total
    first_row: np.ndarray  # int64, the group's first row in the order given


def grouped_totals(rows: np.ndarray, key_of: Callable[[np.ndarray], np.ndarray],
                   weights: list[Callable[[np.ndarray], np.ndarray]]) -> Groups:
    """Group `rows` by `key_of(rows)` (int64 keys) and total each of `weights(rows)` per group,
    `intervals.ROW_BLOCK` rows at a time: exactly `np.unique` + `np.bincount` over all rows.
    Counts are totalled as a weight of one a row."""
    step = intervals.ROW_BLOCK
    parts = [_group(key_of(block), block, [np.ones(len(block)), *[w(block) for w in weights]])
             for block in (rows[a:a + step] for a in range(0, len(rows), step))]
    if not parts:
        return Groups(np.empty(0, np.int64), np.empty(0, np.int64), [np.empty(0) for _ in weights],
                      np.empty(0, np.int64))
    if len(parts) > 1:  # merge the blocks' groups: keys repeat across blocks, first rows keep order
        parts = [_group(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                        [np.concatenate([p[2][i] for p in parts]) for i in range(len(weights) + 1)])]
    keys, first_row, sums = parts[0]
    return Groups(keys, sums[0].astype(np.int64), sums[1:], first_row)


def _group(keys: np.ndarray, rows: np.ndarray, weights: list) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(distinct keys as int64, the row of each key's first occurrence in `rows`, the total of
    each of `weights` per key). Keys spanning a small range (op names alone) are counted into
    slots by value, without the sort `np.unique` needs; `weights[0]` is the count (ones)."""
    if len(keys):
        lo, hi = int(keys.min()), int(keys.max())
        if hi - lo < SMALL_RANGE:
            slot = keys.astype(np.int64) - lo
            sums = [np.bincount(slot, weights=np.asarray(w, dtype=np.float64), minlength=hi - lo + 1)
                    for w in weights]
            present = np.flatnonzero(sums[0])
            first = np.empty(hi - lo + 1, dtype=np.int64)
            first[slot[::-1]] = rows[::-1]  # the last write to a slot is its first occurrence
            return present + lo, first[present], [total[present] for total in sums]
    uniq, inverse = np.unique(keys, return_inverse=True)
    inverse = inverse.reshape(-1)
    n = len(uniq)
    sums = [np.bincount(inverse, weights=np.asarray(w, dtype=np.float64), minlength=n) for w in weights]
    first_row = np.zeros(n, dtype=np.int64)
    first_row[inverse[::-1]] = rows[::-1]
    return uniq.astype(np.int64), first_row, sums


def positions_in(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each of `values`' index in `sorted_values` (ascending, distinct), or -1 where absent:
    `np.isin`'s question answered by binary search, without the sort of both it does."""
    if not len(sorted_values):
        return np.full(len(values), -1, dtype=np.int64)
    at = np.minimum(search_sorted(sorted_values, values), len(sorted_values) - 1)
    return np.where(sorted_values[at] == values, at, -1)


SMALL_RANGE = 1 << 16
"""Integer values spanning at most this many are told apart by counting, not sorting."""


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, ascending: `np.unique(values)`, but by counting
    when they span a small range (devices, streams, threads) and by a sort otherwise. Measured
    on a 1 GB trace, numpy's hash-based unique took 50 ms a call for 340k GPU events."""
    if not len(values):
        return values[:0]
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < SMALL_RANGE:
        present = np.bincount(values.astype(np.int64) - lo, minlength=hi - lo + 1)
        return (np.flatnonzero(present) + lo).astype(values.dtype)
    s = np.sort(values)
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def totals_by_id(ids: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the ids present, ascending; rows per id; total weight per id) for non-negative ids of
    a small space (string ids, threads): `np.unique(..., return_inverse=True)` + `bincount`,
    by counting straight into the id space, without the sort. Counted a block of rows at a
    time: `np.bincount` casts its input to int64 first, 8 bytes a row for an int8 thread
    column (31 MB for the 3.9 M ops of a 3 GB trace)."""
    if not len(ids):
        return ids[:0].astype(np.int64), np.empty(0, np.int64), np.empty(0)
    size = int(ids.max()) + 1
    count = np.zeros(size, dtype=np.int64)
    total = np.zeros(size) if weights is not None else None
    step = intervals.ROW_BLOCK
    for a in range(0, len(ids), step):
        block = ids[a:a + step]
        count += np.bincount(block, minlength=size)
        if total is not None and weights is not None:
            total += np.bincount(block, weights=weights[a:a + step], minlength=size)
    present = np.flatnonzero(count)
    return present, count[present], total[present] if total is not None else count[present].astype(np.float64)
