"""The sums behind `key_averages.py`'s table: totals per group fed a block of rows at a time
(`Totals`, `DenseTotals`), and the `[memory]` records inside each event (`MemoryInIntervals`)
or inside none (`Coverage`).
"""

from __future__ import annotations

import numpy as np

from ..trace.table import Trace

CPU_MEMORY_DEVICES = (0, 2, 5)
"""`[memory]` record device types counted as CPU memory by torch: CPU, MKLDNN, IDEEP."""
DEVICE_MEMORY_DEVICES = (1, 6, 12, 20)
"""... and as device memory: CUDA, HIP, XPU, PrivateUse1."""

SUMS = ("count", "cpu_time_total", "child_cpu", "cpu_memory_usage", "child_cpu_memory", "device_memory_usage",
        "child_device_memory", "self_device_time_total", "device_time_total")
"""What is totalled per group; self figures are a total less the children's."""
SUM_INDEX = {name: i for i, name in enumerate(SUMS)}


class Totals:
    """Sums of `SUMS` per int64 key, fed in parts (a block's rows, or their parents) and merged
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
            return np.empty(0, dtype=np.int64), np.zeros((0, len(SUMS))), np.empty(0)
        keys = np.concatenate([p[0] for p in self.parts])
        uniq, inverse = np.unique(keys, return_inverse=True)
        inverse = inverse.reshape(-1)
        stacked = np.concatenate([p[1] for p in self.parts])
        sums = _sum_columns(inverse, len(uniq), {name: stacked[:, i] for i, name in enumerate(SUMS)})
        first = np.full(len(uniq), np.inf)
        np.minimum.at(first, inverse, np.concatenate([p[2] for p in self.parts]))
        return uniq, sums, first


class DenseTotals:
    """`Totals` over a small key space: arrays indexed by key."""

    def __init__(self, size: int):
        self.sums = np.zeros((len(SUMS), size))
        self.first = np.full(size, np.inf)

    def add(self, keys: np.ndarray, columns: dict[str, np.ndarray | None], starts: np.ndarray | None = None) -> None:
        if not len(keys):
            return
        n = self.sums.shape[1]
        for name, col in columns.items():
            self.sums[SUM_INDEX[name]] += np.bincount(keys, weights=col, minlength=n)
        if starts is not None:
            np.minimum.at(self.first, keys, starts)

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        used = np.flatnonzero(self.sums[SUM_INDEX["count"]] > 0)
        return used, self.sums[:, used].T.copy(), self.first[used]


def _sum_columns(inverse: np.ndarray, n: int, columns: dict[str, np.ndarray | None]) -> np.ndarray:
    sums = np.zeros((n, len(SUMS)))
    for name, col in columns.items():
        sums[:, SUM_INDEX[name]] = np.bincount(inverse, weights=col, minlength=n)
    return sums


def _first_start(inverse: np.ndarray, n: int, starts: np.ndarray | None) -> np.ndarray:
    """Each group's earliest start; rows come in start order, so it is the first row's."""
    if starts is None:
        return np.full(n, np.inf)
    first = np.empty(n, dtype=np.int64)
    first[inverse[::-1]] = np.arange(len(inverse) - 1, -1, -1)
    return np.asarray(starts, dtype=np.float64)[first]


class MemoryInIntervals:
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


class Coverage:
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
