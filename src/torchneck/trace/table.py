"""The columnar event table every analysis reads.

One row per complete ("X") event, in numpy arrays; strings (names, shapes, stacks) are interned
into one `strings` list and stored as int32 ids. Python-function events and instant memory
events sit in their own small tables. Nothing here holds one Python object per event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Literal

import numpy as np


class Cat(IntEnum):
    """Normalised event categories. Old (PyTorch 1.8-1.10) and vendor-specific spellings map
    onto these, so analyses never look at raw `cat` strings."""

    OTHER = 0
    CPU_OP = 1
    USER_ANNOTATION = 2
    GPU_USER_ANNOTATION = 3
    KERNEL = 4
    GPU_MEMCPY = 5
    GPU_MEMSET = 6
    RUNTIME = 7
    DRIVER = 8
    SYNC = 9
    PYTHON_FUNCTION = 10
    TRACE = 11


_CATEGORY_NAMES: dict[str, Cat] = {
    "cpu_op": Cat.CPU_OP,
    "operator": Cat.CPU_OP,
    "user_annotation": Cat.USER_ANNOTATION,
    "gpu_user_annotation": Cat.GPU_USER_ANNOTATION,
    "kernel": Cat.KERNEL,
    "gpu_memcpy": Cat.GPU_MEMCPY,
    "memcpy": Cat.GPU_MEMCPY,
    "gpu_memset": Cat.GPU_MEMSET,
    "memset": Cat.GPU_MEMSET,
    "cuda_runtime": Cat.RUNTIME,
    "runtime": Cat.RUNTIME,
    "cuda_driver": Cat.DRIVER,
    "cuda_sync": Cat.SYNC,
    "python_function": Cat.PYTHON_FUNCTION,
    "python": Cat.PYTHON_FUNCTION,
    "trace": Cat.TRACE,
}


def normalise_category(cat: str) -> Cat:
    """Map a raw `cat` string (any era, any vendor) onto `Cat`."""
    if not isinstance(cat, str):
        return Cat.OTHER
    low = cat.lower()
    found = _CATEGORY_NAMES.get(low)
    if found is not None:
        return found
    if low.endswith("_runtime"):  # hip/mtia/xpu/privateuse1 runtimes
        return Cat.RUNTIME
    if low.endswith("_driver"):
        return Cat.DRIVER
    if low.endswith("_kernel") or low == "gpu_kernel":
        return Cat.KERNEL
    return Cat.OTHER


GPU_CATEGORIES = (Cat.KERNEL, Cat.GPU_MEMCPY, Cat.GPU_MEMSET)


def in_categories(cat: np.ndarray, categories) -> np.ndarray:
    """Boolean mask: which entries of a `cat` column are among `categories`. A lookup table
    indexed by the code, ~10x faster than `np.isin` on millions of rows."""
    lookup = np.zeros(len(Cat), dtype=bool)
    lookup[[int(c) for c in categories]] = True
    return lookup[cat]


def search_sorted(haystack: np.ndarray, needles, side: Literal["left", "right"] = "left") -> np.ndarray:
    """`np.searchsorted` without its hidden copy: numpy compares in the two arrays' common
    type, so int64 row numbers looked up in an int32 array first copy the whole array as int64
    (58 MB for the CPU ops of a 3 GB trace). Integer needles are cast to the haystack's type
    instead; those beyond its range answer 0 or len(haystack), as they would."""
    needles = np.asarray(needles)
    if haystack.dtype.kind not in "iu" or needles.dtype.kind not in "iu" or needles.dtype == haystack.dtype:
        return np.searchsorted(haystack, needles, side=side)
    info = np.iinfo(haystack.dtype)
    if needles.size and (needles.min() < info.min or needles.max() > info.max):
        found = np.searchsorted(haystack, np.clip(needles, info.min, info.max).astype(haystack.dtype), side=side)
        found[needles > info.max] = len(haystack)
        found[needles < info.min] = 0
        return found
    return np.searchsorted(haystack, needles.astype(haystack.dtype), side=side)


class SparseColumn:
    """An integer column that is 0 (or `fill`) on nearly every row, stored as its other rows
    (ascending) and their values: bytes moved are set only on memcpy/memset events, ~1% of a trace's rows,
    so a dense column would cost 4-8 bytes an event (26 MB at 3 GB) to hold zeros. Read like a
    numpy column: `col[rows]` for an int, a slice, an index array or a boolean mask."""

    def __init__(self, rows: np.ndarray, values: np.ndarray, length: int, fill: int = 0):
        self.rows = np.asarray(rows, dtype=np.int32 if length < 2**31 else np.int64)
        self.values = np.asarray(values)
        self.length = int(length)
        self.fill = fill  # the value of every row not stored

    @classmethod
    def from_dense(cls, dense: np.ndarray, fill: int = 0) -> SparseColumn:
        dense = np.asarray(dense)
        rows = np.flatnonzero(dense != fill)
        return cls(rows, dense[rows], len(dense), fill)

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            i = int(key) + (self.length if key < 0 else 0)
            at = int(np.searchsorted(self.rows, i))
            return self.values[at].item() if at < len(self.rows) and self.rows[at] == i else self.fill
        if isinstance(key, slice):
            start, stop, step = key.indices(self.length)
            if step == 1:  # the stored rows inside, shifted
                a, b = search_sorted(self.rows, [start, stop])
                out = np.full(max(stop - start, 0), self.fill, dtype=self.dtype)
                out[self.rows[a:b] - start] = self.values[a:b]
                return out
            key = np.arange(start, stop, step)
        key = np.asarray(key)
        if key.dtype == bool:
            key = np.flatnonzero(key)
        out = np.full(key.shape, self.fill, dtype=self.dtype)
        if not len(self.rows) or not key.size:
            return out
        at = np.minimum(search_sorted(self.rows, key), len(self.rows) - 1)
        hit = self.rows[at] == key
        out[hit] = self.values[at[hit]]
        return out

    def __array__(self, dtype=None, copy=None):
        dense = self[slice(None)]
        return dense if dtype is None else dense.astype(dtype)


class LookupColumn(np.lib.mixins.NDArrayOperatorsMixin):
    """A column read through a small table: `lookup[ids[rows]]`. Shapes and types come in few
    distinct pairs, so a row stores one pair id for the two (2 bytes an event less: 14 MB at
    3 GB) and each reads its half back through this, like a numpy column (indexing, numpy
    functions and operators: `col[rows]`, `col >= 0`)."""

    def __init__(self, ids: np.ndarray, lookup: np.ndarray):
        self.ids = ids
        self.lookup = lookup  # its last entry is what id -1 reads

    @property
    def dtype(self) -> np.dtype:
        return self.lookup.dtype

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, key):
        found = self.lookup[self.ids[key]]
        return found.item() if isinstance(found, np.generic) else found

    def __iter__(self):
        return iter(np.asarray(self).tolist())

    def __array__(self, dtype=None, copy=None):
        whole = self.lookup[self.ids]
        return whole if dtype is None else whole.astype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(np.asarray(x) if isinstance(x, LookupColumn) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)


@dataclass
class Threads:
    """One row per (pid, tid) pair seen in the trace; `EventTable.thread` indexes it."""

    pid: list[str] = field(default_factory=list)
    tid: list[str] = field(default_factory=list)


_NAME_MASKS_SETS = 8
"""String sets whose predicate masks are remembered: a worker meets one job's names at a time."""
_NAME_MASKS_MAX_STRINGS = 20_000
"""Larger string sets (traces with stacks) are evaluated afresh: one pass is cheap beside their
load, and the cache would hold their strings alive."""
_NAME_MASKS: dict[tuple[str, ...], dict[object, np.ndarray]] = {}


def _predicate_key(predicate) -> object | None:
    """What identifies a predicate's answers, or None when they may change between calls.

    A function without closure cells or defaults computes from its argument and module
    constants: its code object is the same on every call of the function that defines the
    lambda. A callable without code (an `lru_cache` wrapper of a module function) is itself
    the key. A closure, or a bound method (its code reads its object), is never remembered: their
    answers can differ from call to call."""
    if getattr(predicate, "__self__", None) is not None:
        return None
    code = getattr(predicate, "__code__", None)
    if code is None:
        wrapped = getattr(predicate, "__wrapped__", None)
        return predicate if wrapped is not None and getattr(wrapped, "__closure__", None) is None else None
    if predicate.__closure__ is not None or predicate.__defaults__ or predicate.__kwdefaults__:
        return None
    return code


def _evaluate(predicate, strings: list[str]) -> np.ndarray:
    return np.fromiter((bool(predicate(s)) for s in strings), dtype=bool, count=len(strings))


@dataclass
class EventTable:
    """Complete events of one trace (or one rank), sorted by start time."""

    ts: np.ndarray  # float64, µs as in the trace
    dur: np.ndarray  # float32, µs (negative/missing clamped to 0)
    cat: np.ndarray  # int8, `Cat`
    name: np.ndarray  # int32, index into `strings`
    thread: np.ndarray  # int32, index into `threads`
    correlation: np.ndarray | None  # int32 (int64 when a value needs it), -1 if absent; None once linked (below)
    device: np.ndarray  # int16, GPU device for GPU events, -1 otherwise
    stream: np.ndarray  # int32, GPU stream for GPU events, -1 otherwise
    args: np.ndarray  # int32, the row's ("Input Dims", "Input type") pair: an index into `arg_pairs`, -1 if neither
    nbytes: SparseColumn  # int64, bytes moved by memcpy/memset, 0 on other rows
    call_stack: SparseColumn  # int32, 1 + id of the op's "Call stack" text (PyTorch 1.8-1.12), 0 if none
    launcher: SparseColumn  # int32, on GPU events: the row of the runtime/driver call that launched it, else -1
    arg_pairs: np.ndarray  # int32 (k + 1, 2): per args id, the shapes and types text ids; (-1, -1) last
    strings: list[str]
    threads: Threads
    # Derived once per table by the analyses that several others ask for (steps, user frames).
    _steps: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _user_frames: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _numel_of_shapes: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @property
    def shapes(self) -> LookupColumn:
        """"Input Dims" JSON text id per row, -1 if absent (read through `args`)."""
        return LookupColumn(self.args, self.arg_pairs[:, 0])

    @property
    def types(self) -> LookupColumn:
        """"Input type" JSON text id (the dtypes) per row, -1 if absent (read through `args`)."""
        return LookupColumn(self.args, self.arg_pairs[:, 1])

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def name_of(self, row: int) -> str:
        return self.strings[int(self.name[row])]

    def string_id(self, text: str) -> int:
        """Id of `text` in `strings`, or -1 (built lazily; the list is only appended to)."""
        index = getattr(self, "_string_index", None)
        if index is None or len(index) != len(self.strings):
            index = {s: i for i, s in enumerate(self.strings)}
            self._string_index = index
        return index.get(text, -1)

    def intern(self, text: str) -> int:
        """Id of `text` in `strings`, appended when absent (analyses name things the trace only
        holds inside other strings, e.g. one frame of a "Call stack")."""
        found = self.string_id(text)
        if found < 0:
            found = len(self.strings)
            self.strings.append(text)
            self._string_index[text] = found
        return found

    def arg_pairs_matching(self, predicate) -> np.ndarray:
        """Boolean mask over args ids, for `mask[table.args[rows]]`: which (shapes id, types id)
        pairs satisfy `predicate(shapes_id, types_id)` (ids -1 where absent). Its last entry is
        the pair (-1, -1) of rows with neither. Decided once a pair, not once a row."""
        return np.fromiter((bool(predicate(s, t)) for s, t in self.arg_pairs.tolist()), dtype=bool,
                           count=len(self.arg_pairs))

    def names_matching(self, predicate) -> np.ndarray:
        """Boolean mask over `strings` ids: which interned strings satisfy `predicate`.

        Remembered for a pure predicate (see `_predicate_key`) over the same strings: the ranks
        of one job intern the same few hundred names, and a worker summarising hundreds of them
        asked ~26 predicates of each (~3 ms of a ~15 ms rank)."""
        strings = self.strings
        key = _predicate_key(predicate) if len(strings) <= _NAME_MASKS_MAX_STRINGS else None
        if key is None:
            return _evaluate(predicate, strings)
        names = tuple(strings)
        masks = _NAME_MASKS.pop(names, None)
        if masks is None:
            masks = {}
            if len(_NAME_MASKS) >= _NAME_MASKS_SETS:
                del _NAME_MASKS[next(iter(_NAME_MASKS))]  # the least recently used set
        _NAME_MASKS[names] = masks
        mask = masks.get(key)
        if mask is None:
            mask = masks[key] = _evaluate(predicate, strings)
            mask.flags.writeable = False
        return mask.copy()

    def rows_with_name(self, predicate) -> np.ndarray:
        """Boolean row mask: events whose name satisfies `predicate`."""
        ok = self.names_matching(predicate)
        if not len(ok):
            return np.zeros(len(self), dtype=bool)
        return ok[self.name]

    def select(self, mask: np.ndarray) -> EventTable:
        """A new table with only the rows in `mask` (a boolean mask or row numbers, in the new
        order; strings and threads shared). Launchers are renumbered, -1 where not kept."""
        kept = np.arange(len(self))[mask]
        new_row = np.full(len(self) + 1, -1, dtype=np.int64)  # old row -> new row; -1 -> -1
        new_row[kept] = np.arange(len(kept))
        return EventTable(
            ts=self.ts[kept],
            dur=self.dur[kept],
            cat=self.cat[kept],
            name=self.name[kept],
            thread=self.thread[kept],
            correlation=None if self.correlation is None else self.correlation[kept],
            device=self.device[kept],
            stream=self.stream[kept],
            args=self.args[kept],
            nbytes=SparseColumn.from_dense(self.nbytes[kept]),
            call_stack=SparseColumn.from_dense(self.call_stack[kept]),
            launcher=SparseColumn.from_dense(new_row[self.launcher[kept]].astype(self.launcher.dtype), fill=-1),
            arg_pairs=self.arg_pairs,
            strings=self.strings,
            threads=self.threads,
        )


@dataclass
class MemoryTable:
    """Instant `[memory]` events: one allocation (bytes > 0) or free (bytes < 0) each."""

    ts: np.ndarray  # float64 µs
    thread: np.ndarray  # int32
    nbytes: np.ndarray  # int64
    total_allocated: np.ndarray  # int64, -1 if absent
    total_reserved: np.ndarray  # int64, -1 if absent
    device_type: np.ndarray  # int8 (0 = CPU, 1 = CUDA, ...)
    device_id: np.ndarray  # int16
    addr: np.ndarray  # int64

    def __len__(self) -> int:
        return int(self.ts.shape[0])


@dataclass(frozen=True)
class GradMode:
    """Complete events that carry autograd's "Sequence number" (ops run in grad mode), and the
    lowest and highest number. The number advances only when an op records a graph node, so the
    range counts the nodes built; ops on tensors that need no gradient all repeat one number."""

    rows: int
    lowest: int
    highest: int

    def __add__(self, other: GradMode | None) -> GradMode:
        if other is None:
            return self
        return GradMode(self.rows + other.rows, min(self.lowest, other.lowest), max(self.highest, other.highest))

    @staticmethod
    def of(numbers: list) -> GradMode | None:
        """From the "Sequence number" of each event (-1 or None where absent; in loosely typed
        events anything, of which only integers count)."""
        seen = [v for v in numbers if type(v) is int and v >= 0]
        return GradMode(len(seen), min(seen), max(seen)) if seen else None

    @property
    def nodes(self) -> int:
        """Graph nodes numbered while the trace recorded (ops on tensors that need no gradient
        repeat one number: 1)."""
        return self.highest - self.lowest + 1


@dataclass
class TraceMeta:
    """What the trace says about itself, outside the events."""

    path: str
    schema_version: int | None = None
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    devices: list[dict] = field(default_factory=list)
    base_time_ns: int | None = None
    process_names: dict[str, str] = field(default_factory=dict)
    thread_names: dict[tuple[str, str], str] = field(default_factory=dict)
    process_labels: dict[str, str] = field(default_factory=dict)
    other: dict = field(default_factory=dict)
    format: str = "object"  # "object" ({"traceEvents": [...]}) or "list" (a bare list)
    compressed_bytes: int = 0
    uncompressed_bytes: int = 0
    event_count: int = 0
    flow_count: int = 0
    unknown_phases: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    grad: GradMode | None = None  # the complete events recorded in grad mode (`GradMode`)
    open_at_stop: int = 0  # events still running at the profiler's stop, ended at the last finished one


@dataclass
class Trace:
    """One loaded trace: the events table, its side tables and its metadata."""

    events: EventTable
    python: EventTable  # python_function events (with_stack traces)
    memory: MemoryTable
    meta: TraceMeta
