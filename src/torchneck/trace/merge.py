"""Merging decoded slices into the trace's columns, then sorting them by start.

Slices arrive in file order (`Merger.add`); their columns are copied into one growing buffer
each (never held twice as parts plus their concatenation), their strings, threads and args
mapped onto the trace's ids (`ids.py`). `Merger.finish` then sorts the table by start, longer
first on ties (so parents precede their children), in place where the C sort (`_order.c`) is
built, and splits off the python_function rows and the memory events into their own tables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from . import spill
from .decode import ChunkColumns
from .ids import GlobalIds, distinct_arg_pairs, distinct_threads
from .launches import launcher_column
from .normalise import DUR_LIMIT_US, MAX_NAME_CHARS, MAX_TEXT_CHARS, shortened
from .table import Cat, EventTable, MemoryTable, SparseColumn, TraceMeta

try:  # the optional C sort (setup.py); without it numpy's argsort and gathers give the same order
    from . import _order  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - built without a C compiler
    _order = None
if os.environ.get("TORCHNECK_PURE_PYTHON"):  # to compare the two
    _order = None


PERMUTE_THREADS_MIN_ROWS = 1 << 17
"""Rows from which the in-place permutation runs on two threads: below it (a small rank trace,
~1 ms of walking) starting the threads costs about what the second core saves, and a Dask
worker's other core is busy with another rank anyway."""

class _Columns:
    """Growable numpy columns: chunks are copied into one buffer per column (grown by half when
    full), so the finished table is never held twice as a list of parts plus its concatenation.

    Integer columns named in `narrow` are kept in the narrowest signed type that holds every
    value so far (int8 up to the column's dtype), widened when a chunk needs more: ids, threads,
    streams and byte counts are int64 in the JSON but nearly always small, and at 2.5 M events
    a GB every byte a row is 2.5 MB. Analyses only compare, index, look up and sum them (numpy
    sums small ints into int64; combined keys are built in int64)."""

    def __init__(self, dtypes: Mapping[str, Any], narrow: tuple[str, ...] = ()):
        self.dtypes = {k: np.dtype(dt) for k, dt in dtypes.items()}
        self.size = 0
        self.cols: dict[str, np.ndarray] = {k: np.empty(0, dtype=np.int8 if k in narrow else dt)
                                            for k, dt in dtypes.items()}
        self.narrow = narrow

    def append(self, values: dict[str, np.ndarray], hint: int = 0, expected: int = 0,
               bounds: Mapping[str, tuple[int, int]] | None = None) -> None:
        """Append a slice's columns; `hint`: the capacity to grow to, `expected`: the rows the
        whole trace is expected to hold (from its size), which decides whether to spill;
        `bounds`: for narrowed columns, a (low, high) their values lie within, when known
        (else their minimum and maximum are read here)."""
        n = len(next(iter(values.values())))
        need = self.size + n
        capacity = len(next(iter(self.cols.values())))
        if need > capacity:
            new_capacity = max(need, capacity + capacity // 2, hint, 4096)
            for k in self.cols:  # one column at a time; to a spill file past `spill.SPILL_ROWS` rows
                grown = spill.empty(new_capacity, self.cols[k].dtype, rows=max(need, expected))
                grown[:self.size] = self.cols[k][:self.size]
                self.cols[k] = grown
        for k in self.narrow:
            v = values[k]
            if n and self.cols[k].dtype != self.dtypes[k]:
                lo, hi = bounds[k] if bounds and k in bounds else (int(v.min()), int(v.max()))
                wanted = _narrowest_int(lo, hi, self.dtypes[k])
                if wanted.itemsize > self.cols[k].itemsize:  # copy the rows so far, not the capacity
                    wider = spill.empty(len(self.cols[k]), wanted, rows=max(need, expected))
                    wider[:self.size] = self.cols[k][:self.size]
                    self.cols[k] = wider
        for k, v in values.items():
            self.cols[k][self.size:need] = v
        self.size = need

    def take(self, key: str, rows: np.ndarray) -> np.ndarray:
        """The finished column `key` in the order `rows`; frees the buffer."""
        col = self.cols.pop(key)
        return np.take(col, rows)

    def trim(self) -> None:
        """Give back the capacity beyond the rows held (up to half of it, after the last
        growth): numpy reallocates in place, and glibc shrinks a large block where it lies."""
        for col in self.cols.values():
            if len(col) > self.size:
                try:
                    col.resize(self.size, refcheck=False)
                except ValueError:  # not its own buffer: a copy would cost more than it saves
                    pass

    def pairs_by_size(self) -> list[tuple[str, str | None]]:
        """The columns in pairs gathered at once, neither pair holding more bytes a row than the
        widest column alone: while a pair is gathered, its two new columns sit beside the whole
        old table, so pairing the widest two would raise the load's peak by their sum."""
        width = {k: col.itemsize for k, col in self.cols.items()}
        left = sorted(width, key=lambda k: -width[k])
        widest = width[left[0]] if left else 0
        pairs: list[tuple[str, str | None]] = []
        while left:
            a = left.pop(0)
            b = next((k for k in left if width[a] + width[k] <= widest), None)
            if b is not None:
                left.remove(b)
            pairs.append((a, b))
        return pairs


_INT_BOUNDS = [(np.dtype(dt), int(np.iinfo(dt).min), int(np.iinfo(dt).max)) for dt in (np.int8, np.int16, np.int32)]


def _narrowest_int(lo: int, hi: int, widest: np.dtype) -> np.dtype:
    for dt, low, high in _INT_BOUNDS:
        if low <= lo and hi <= high:
            return dt
    return widest


_X_DTYPES = {"ts": np.float64, "dur": np.float32, "cat": np.int8, "name": np.int32, "thread": np.int32,
             "correlation": np.int64, "device": np.int16, "stream": np.int32, "args": np.int32}
"""Each column's widest type; those in `_X_NARROW` are stored narrower while their values fit.
`args` is the row's (shapes, types) pair, one id for the two (`EventTable.arg_pairs`).
(Bytes moved and call stacks, set on few rows, are kept apart: `SPARSE_COLUMNS`.)"""
SPARSE_COLUMNS = {"nbytes": np.int64, "call_stack": np.int32}
"""Columns kept as `SparseColumn`s, with their values' type; the chunks' `stack` string ids are
stored as `call_stack`, 1 + the id (0: none)."""
_X_NARROW = ("name", "thread", "correlation", "device", "stream", "args")
_MEM_DTYPES = {"ts": np.float64, "thread": np.int32, "nbytes": np.int64, "total_allocated": np.int64,
               "total_reserved": np.int64, "device_type": np.int8, "device_id": np.int16, "addr": np.int64}


ORDER_BLOCK = 1 << 20
"""Rows compared at once when looking for equal starts after the sort (bounds its memory)."""


def _start_order(ts: np.ndarray, dur: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """`rows` (default: all) ordered by start, longer first on equal starts (then as given): a
    stable sort on start alone (fast on a trace's nearly sorted runs), then only the tied rows
    re-sorted. intp positions, as `argsort` gives them and `np.take` wants them: with int32
    (4 bytes less a row, 10 MB at 1 GB) numpy converted the order again for every column put
    in it, and the gathers took twice as long."""
    order = np.argsort(ts if rows is None else ts[rows], kind="stable")
    if rows is not None:
        order = rows[order]
    n = len(order)
    tied = np.zeros(n, dtype=bool)
    for a in range(0, max(n - 1, 0), ORDER_BLOCK):
        t = ts[order[a:a + ORDER_BLOCK + 1]]
        same = t[1:] == t[:-1]
        tied[a:a + len(same)] |= same
        tied[a + 1:a + 1 + len(same)] |= same
    if tied.any():
        at = np.flatnonzero(tied)
        sub = order[at]
        order[at] = sub[np.lexsort((-dur[sub], ts[sub]))]
    return order


def _row_sets(ts: np.ndarray, cat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks of the loaded rows: the table's, the python_function ones (their own table), and
    those without a start (dropped)."""
    valid = ~np.isnan(ts)
    py = cat == Cat.PYTHON_FUNCTION
    return valid & ~py, valid & py, ~valid


def _row_parts(ts: np.ndarray, cat: np.ndarray) -> list[np.ndarray]:
    """`_row_sets` as int32 row numbers (the table's rows, python_function rows, rows without a
    start), found a block at a time into arrays (spilled with the table) of their own length."""
    n = len(ts)
    counts = [0, 0, 0]
    for a in range(0, n, ORDER_BLOCK):
        for i, mask in enumerate(_row_sets(ts[a:a + ORDER_BLOCK], cat[a:a + ORDER_BLOCK])):
            counts[i] += int(np.count_nonzero(mask))
    parts = [spill.empty(c, np.int32, rows=n) for c in counts]
    filled = [0, 0, 0]
    for a in range(0, n, ORDER_BLOCK):
        for i, mask in enumerate(_row_sets(ts[a:a + ORDER_BLOCK], cat[a:a + ORDER_BLOCK])):
            rows = np.flatnonzero(mask).astype(np.int32) + a
            parts[i][filled[i]:filled[i] + len(rows)] = rows
            filled[i] += len(rows)
    return parts


def _halves_by_width(columns: list[np.ndarray]) -> list[list[np.ndarray]]:
    """The columns in two groups of about equal bytes a row (widest first, each to the lighter)."""
    groups: list[list[np.ndarray]] = [[], []]
    width = [0, 0]
    for col in sorted(columns, key=lambda c: -c.itemsize):
        lighter = int(width[1] < width[0])
        groups[lighter].append(col)
        width[lighter] += col.itemsize
    return [g for g in groups if g]


OPEN_AT_STOP_TOLERANCE_US = 1.0
"""How close to the profiler's stop an event's end must be to have been ended by the stop: the
trace's times have 3 decimals; durations are float32, whose spacing grows with the duration (2 µs
at 20 s, 16 µs at 3 minutes), so a long event gets `FLOAT32_SPACING` of its duration more."""
FLOAT32_SPACING = 2.0 ** -22
"""Twice float32's relative spacing: a duration stored in float32 is within this share of its value."""


_DEVICE_CATS = np.array([Cat.KERNEL, Cat.GPU_MEMCPY, Cat.GPU_MEMSET, Cat.GPU_USER_ANNOTATION], dtype=np.int8)


def close_open_events(ts: np.ndarray, dur: np.ndarray, cat: np.ndarray, window_end: float,
                      block: int = 1 << 20) -> int:
    """End the host events that were still running when the profiler stopped where the host's
    last finished event ended, in place; returns how many. Kineto ends them at the stop, which
    comes after its own processing (measured: a backward node cut by a window's memory bound
    lasted 173 ms, 85 % of a 204 ms window, all of it the profiler's stop; a ProfilerStep left
    open ran 13 s past it), so they would claim that time as theirs. A GPU activity keeps its
    end: the device's clock, not the stop, ended it. Python-only work between the last op and the
    stop (a window cut by its bound while the script ran no op) is cut with them: the trace holds
    no mark of when the stop was asked. Read a block at a time: the columns may be spill files."""
    n = len(ts)
    last, open_rows = -np.inf, []
    for lo in range(0, n, block):
        end = ts[lo:lo + block] + dur[lo:lo + block]
        host = ~np.isin(cat[lo:lo + block], _DEVICE_CATS)
        # in float64: `window_end - tolerance` in float32 (numpy keeps the array's type) rounds a
        # trace's 1e12 µs clock by 0.1 s, and every event of the last tenth of a second was cut
        tolerance = np.maximum(OPEN_AT_STOP_TOLERANCE_US, dur[lo:lo + block].astype(np.float64) * FLOAT32_SPACING)
        cut = (end >= window_end - tolerance) & host
        if cut.any():
            open_rows.append(lo + np.flatnonzero(cut))
        end = end[host & ~cut]
        finite = end[np.isfinite(end)]
        if finite.size:
            last = max(last, float(finite.max()))
    if not open_rows or not np.isfinite(last):
        return 0
    rows = np.concatenate(open_rows)
    dur[rows] = np.maximum(last - ts[rows], 0.0)
    return int(rows.size)


class Merger:
    """Accumulates slices into global columns with one global string table."""

    def __init__(self, meta: TraceMeta, expected_bytes: int = 0, keep_correlation: bool = False):
        self.meta = meta
        self.keep_correlation = keep_correlation
        self.expected_bytes = expected_bytes
        self.ids = GlobalIds()
        self.x = _Columns(_X_DTYPES, _X_NARROW)
        self.mem = _Columns(_MEM_DTYPES)
        # the sparse columns (`SPARSE_COLUMNS`): their rows (in load order, ascending) and values
        self.sparse: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {k: ([], []) for k in SPARSE_COLUMNS}
        self.negative_dur = 0
        self.bytes_seen = 0
        # what was skipped or changed, said once in the warnings (`_warn`)
        self.out_of_range = 0
        self.memory_out_of_range = 0
        self.replaced_utf8 = 0
        self.shortened: set[str] = set()  # the shortened names (their hashes)
        self.others = 0  # elements of other phases (flows, metadata, instants, counters, ...)
        self.damaged = 0  # events that did not decode (counted by the salvage)
        self.too_deep = 0
        self.window_end: float | None = None  # Kineto's "Record Window End", µs

    def add(self, chunk: ChunkColumns) -> None:
        """Add one decoded slice."""
        self._shorten_long_strings(chunk)
        remap = self.ids.strings_of(chunk.strings)
        x = chunk.x
        n = len(x["ts"])
        self.bytes_seen += chunk.source_bytes
        # Size the buffers once from the events per byte so far, when the total size is known.
        expected = int(self.expected_bytes * (self.x.size + n) / self.bytes_seen) \
            if self.expected_bytes and self.bytes_seen else 0
        size_hint = int(1.1 * expected)
        self.meta.event_count += n
        self.meta.flow_count += chunk.flow_count
        self.others += chunk.flow_count + sum(chunk.unknown_phases.values()) + len(chunk.meta_events) + \
            len(chunk.mem["ts"]) + chunk.memory_out_of_range
        self.negative_dur += chunk.negative_dur
        self.out_of_range += chunk.out_of_range
        self.memory_out_of_range += chunk.memory_out_of_range
        self.replaced_utf8 += chunk.replaced_utf8
        if chunk.grad is not None:
            self.meta.grad = chunk.grad + self.meta.grad
        for k, v in chunk.unknown_phases.items():
            self.meta.unknown_phases[k] = self.meta.unknown_phases.get(k, 0) + v
        for kind, pid, tid, value in chunk.meta_events:
            if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
                value = shortened(value, MAX_NAME_CHARS)
            if len(pid) > MAX_NAME_CHARS or len(tid) > MAX_NAME_CHARS:  # as in the thread table
                pid, tid = (t if len(t) <= MAX_NAME_CHARS else shortened(t, MAX_NAME_CHARS) for t in (pid, tid))
            if kind == "process_name" and isinstance(value, str):
                self.meta.process_names[pid] = value
            elif kind == "thread_name" and isinstance(value, str):
                self.meta.thread_names[(pid, tid)] = value
            elif kind == "process_labels" and isinstance(value, str):
                self.meta.process_labels[pid] = value
            elif kind == "window_end" and isinstance(value, float):
                self.window_end = value if self.window_end is None else max(self.window_end, value)
        if n:
            sparse = chunk.sparse_rows or {}
            moved = sparse["nbytes"] if "nbytes" in sparse else np.flatnonzero(x["nbytes"])
            self._keep_sparse("nbytes", moved, x["nbytes"][moved].astype(np.int64))
            with_stack = sparse["stack"] if "stack" in sparse else np.flatnonzero(x["stack"] >= 0)
            self._keep_sparse("call_stack", with_stack, remap[x["stack"][with_stack]] + 1)
            values = {k: x[k] for k in ("ts", "dur", "cat", "correlation", "device", "stream")}
            values["name"] = remap[x["name"]]
            pairs = chunk.threads if chunk.threads is not None else distinct_threads(x["pid"], x["tid"])
            values["thread"] = self.ids.threads_of(pairs, remap)
            arg_pairs = chunk.arg_pairs if chunk.arg_pairs is not None else distinct_arg_pairs(x["shapes"], x["types"])
            values["args"] = self.ids.args_of(arg_pairs, remap)
            bounds = dict(chunk.bounds or {})  # the renumbered ids lie within the tables so far
            bounds.update(name=(-1, int(remap.max())), thread=(0, len(self.ids.threads.pid) - 1),
                          args=(-1, len(self.ids.arg_keys) - 1))
            self.x.append(values, size_hint, expected, bounds)
        mem = chunk.mem
        if len(mem["ts"]):
            mem = dict(mem)
            mem["thread"] = self.ids.threads_of(distinct_threads(mem.pop("pid"), mem.pop("tid")), remap)
            self.mem.append(mem)

    def _shorten_long_strings(self, chunk: ChunkColumns) -> None:
        """Shorten a slice's strings over `MAX_NAME_CHARS` (names, pids, tids: one of 16 MB took
        the terminal report minutes, and every copy of it memory) or, for those its rows use as
        shapes, types or a call stack (parsed by the analyses), over `MAX_TEXT_CHARS`."""
        strings = chunk.strings
        longest = chunk.longest if chunk.longest >= 0 else max(map(len, strings), default=0)
        if longest <= MAX_NAME_CHARS:  # nearly always (measured by the worker, else one C-level pass)
            return
        long = [i for i, text in enumerate(strings) if len(text) > MAX_NAME_CHARS]
        x = chunk.x
        as_text = set(np.concatenate([x["shapes"], x["types"], x["stack"]]).tolist())
        for i in long:
            limit = MAX_TEXT_CHARS if i in as_text else MAX_NAME_CHARS
            if len(strings[i]) > limit:
                strings[i] = shortened(strings[i], limit)
                if limit == MAX_NAME_CHARS:
                    self.shortened.add(strings[i][-16:])

    def _warn(self) -> None:
        """One warning for each kind of thing skipped or changed while loading."""
        said = self.meta.warnings
        if self.damaged:
            said.append(f"{_count(self.damaged, 'damaged event')} {_was(self.damaged)} skipped")
        if self.too_deep:
            said.append(f"{_count(self.too_deep, 'event')} nested too deeply to decode (about 1000 levels) "
                        f"{_was(self.too_deep)} skipped")
        out = self.out_of_range + self.memory_out_of_range
        if out:
            said.append(f"{_count(out, 'event')} with a time out of range (a start beyond +-2^53 µs, or a duration "
                        f"of {DUR_LIMIT_US / 86_400e6:.1f} days or more) {_was(out)} skipped")
        if self.replaced_utf8:
            said.append(f"{self.replaced_utf8} invalid UTF-8 byte sequence{'s' if self.replaced_utf8 > 1 else ''} "
                        "replaced by U+FFFD")
        if self.shortened:
            n = len(self.shortened)
            said.append(f"{_count(n, 'name')} longer than {MAX_NAME_CHARS} characters shortened (to their start, "
                        "'…' and a hash)")

    def _keep_sparse(self, column: str, at: np.ndarray, values: np.ndarray) -> None:
        """Values of a sparse column at rows `at` of the slice being added."""
        if len(at):
            self.sparse[column][0].append(at + self.x.size)
            self.sparse[column][1].append(values)

    def _sparse_columns(self, order: np.ndarray, loaded: int) -> dict[str, SparseColumn]:
        """The sparse columns of the table put in `order` (load-order rows): where the few rows
        that have a value went."""
        out = {}
        for k, (parts, values) in self.sparse.items():
            if not parts:
                out[k] = SparseColumn(np.empty(0), np.empty(0, dtype=SPARSE_COLUMNS[k]), len(order))
                continue
            old_rows = np.concatenate(parts)
            has = np.zeros(loaded, dtype=bool)
            has[old_rows] = True
            rows = np.flatnonzero(has[order])
            del has
            out[k] = SparseColumn(rows, np.concatenate(values)[np.searchsorted(old_rows, order[rows])], len(order))
        return out

    def finish(self) -> tuple[EventTable, EventTable, MemoryTable]:
        """Sort (by start, longer first on ties, so parents precede their children) and split off
        python_function rows: in place where the C sort is built (`_finish_in_place`), else two
        columns at a time: peak memory is then the table, the two row orders and new columns
        as wide as the widest (`pairs_by_size`)."""
        x = self.x
        n = x.size
        x.trim()
        ts = x.cols["ts"][:n]
        dur = x.cols["dur"][:n]
        cat = x.cols["cat"][:n]
        skipped = int(np.isnan(ts).sum())
        if skipped > self.out_of_range:
            self.meta.warnings.append(f"{skipped - self.out_of_range} events without a timestamp were skipped")
        self._warn()
        if self.window_end is not None:
            self.meta.open_at_stop = close_open_events(ts, dur, cat, self.window_end)
        whole = not skipped and not (cat == Cat.PYTHON_FUNCTION).any()  # the usual case: no row sets
        if _order is not None and n < 2**31:
            if spill.is_mapped(x.cols["ts"]):
                return self._finish_spilled(ts, dur, cat, whole)
            return self._finish_in_place(ts, dur, cat, whole)
        if whole:
            main_rows, py_rows = _start_order(ts, dur), np.empty(0, dtype=np.intp)
        else:
            main_rows, py_rows = (_start_order(ts, dur, np.flatnonzero(m)) for m in _row_sets(ts, cat)[:2])
        del ts, dur, cat
        python = {k: x.cols[k][py_rows] for k in _X_DTYPES}
        del py_rows
        main: dict[str, Any] = {}
        with ThreadPoolExecutor(1) as other:  # two columns at a time: numpy gathers without the GIL
            for a, b in x.pairs_by_size():
                other_column = other.submit(x.take, b, main_rows) if b else None
                main[a] = x.take(a, main_rows)
                if b is not None and other_column is not None:
                    main[b] = other_column.result()
        main.update(self._sparse_columns(main_rows, n))
        del main_rows
        return self._tables(main, python)

    def _finish_in_place(self, ts: np.ndarray, dur: np.ndarray, cat: np.ndarray, whole: bool):
        """`finish` with the C sort (`_order.c`): a 4-byte order sorted by a natural merge sort,
        then the columns permuted in place. Python rows (and rows without a start) are ordered
        after the others, then cut off: little but the order is ever held beside the table
        (at 3 GB the load's peak fell from 366 to 264 MB)."""
        x = self.x
        n = x.size
        if whole:
            order = np.arange(n, dtype=np.int32)
            _order.start_order(ts, dur, order)
            m, p = n, 0
        else:
            parts = [np.flatnonzero(mask).astype(np.int32) for mask in _row_sets(ts, cat)]
            for part in parts[:2]:
                _order.start_order(ts, dur, part)
            m, p = len(parts[0]), len(parts[1])
            order = np.concatenate(parts)
            del parts
        del ts, dur, cat
        sparse = self._sparse_columns(order[:m], n)
        halves = [tuple(c[:n] for c in group) for group in _halves_by_width(list(x.cols.values()))]
        if n < PERMUTE_THREADS_MIN_ROWS:
            for group in halves:
                _order.permute(group, order)
        else:
            with ThreadPoolExecutor(2) as pool:  # two walks on two cores (the C walk drops the GIL)
                for done in [pool.submit(_order.permute, group, order) for group in halves]:
                    done.result()
        del halves
        del order
        main: dict[str, Any] = {}
        python: dict[str, Any] = {}
        for k in list(x.cols):
            col = x.cols.pop(k)
            python[k] = col[m:m + p].copy()
            if len(col) > m:
                try:
                    col.resize(m, refcheck=False)
                except ValueError:
                    col = col[:m]
            main[k] = col
        main.update(sparse)
        return self._tables(main, python)

    def _finish_spilled(self, ts: np.ndarray, dur: np.ndarray, cat: np.ndarray, whole: bool):
        """`finish` for a table in spill files (`spill.py`): the C sort of a 4-byte order (itself
        spilled), then each column gathered into a new file a block at a time, one column after
        the other. A permutation in place would read every column at random, all at once: more
        than the ceiling lets stay resident, page after page read again; a gather reads one
        column at a time (what a trace's few sorted runs make nearly sequential) and writes the
        new one in order."""
        x = self.x
        n = x.size
        if whole:
            order = spill.empty(n, np.int32)
            for a in range(0, n, ORDER_BLOCK):
                order[a:a + ORDER_BLOCK] = np.arange(a, min(a + ORDER_BLOCK, n), dtype=np.int32)
            _order.start_order(ts, dur, order)
            m, p = n, 0
        else:
            parts = _row_parts(ts, cat)
            for part in parts[:2]:
                _order.start_order(ts, dur, part)
            m, p = len(parts[0]), len(parts[1])
            order = spill.empty(n, np.int32)
            at = 0
            for part in parts:
                order[at:at + len(part)] = part
                at += len(part)
            del parts
        del ts, dur, cat
        sparse = self._sparse_columns(order[:m], n)
        main: dict[str, Any] = {}
        python: dict[str, Any] = {}
        for k in list(x.cols):
            col = x.cols.pop(k)
            main[k] = spill.empty(m, col.dtype, rows=n)
            for a in range(0, m, ORDER_BLOCK):
                b = min(a + ORDER_BLOCK, m)
                np.take(col, order[a:b], out=main[k][a:b])
            python[k] = col[order[m:m + p]]
            del col
            spill.release()
        del order
        main.update(sparse)
        return self._tables(main, python)

    def _tables(self, main: dict, python: dict) -> tuple[EventTable, EventTable, MemoryTable]:
        main["launcher"] = launcher_column(main["cat"], main["correlation"])
        if not self.keep_correlation:  # resolved into `launcher`: 4 bytes an event no analysis reads
            main["correlation"] = python["correlation"] = None
        pairs = self.ids.arg_pair_table()
        table = EventTable(**main, arg_pairs=pairs, strings=self.ids.strings, threads=self.ids.threads)
        n_python = len(python["ts"])
        none: dict[str, Any] = {k: SparseColumn(np.empty(0), np.empty(0, dtype=dt), n_python)
                                for k, dt in SPARSE_COLUMNS.items()}
        none["launcher"] = SparseColumn(np.empty(0), np.empty(0, dtype=np.int32), n_python, fill=-1)
        python_table = EventTable(**python, **none, arg_pairs=pairs, strings=self.ids.strings, threads=self.ids.threads)
        m = self.mem
        morder = np.argsort(m.cols["ts"][:m.size], kind="stable")
        memory = MemoryTable(**{k: m.take(k, morder) for k in _MEM_DTYPES})
        if self.negative_dur:
            self.meta.warnings.append(f"{self.negative_dur} events had a negative duration (counted as 0)")
        return table, python_table, memory


def _count(n: int, what: str) -> str:
    """`1 event`, `2 events`."""
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _was(n: int) -> str:
    return "was" if n == 1 else "were"
