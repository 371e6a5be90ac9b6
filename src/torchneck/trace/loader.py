"""Stream a profiler trace (`.json` / `.json.gz`) into an `EventTable` in bounded memory.

How: the file is read in blocks (gzip through python-isal). The `traceEvents` array is cut at
event boundaries (`}` `,` `{` with only whitespace between), and each slice is decoded into numpy
columns: by the native scanner (`_scan.c`, built by `pip install` where a C compiler exists) when
the slice is ordinary, otherwise by msgspec into structs that declare only the fields torchneck
reads, then turned into columns. Both give the same columns (tests/test_scan.py). A cut that falls
inside a string or a nested object makes that slice fail to decode, so it is merged with the next
one and decoded again: a false boundary can cost time, never a wrong event.

Only the current slices' Python objects exist at any time; columns are copied into one growing
buffer each, and the finished table holds ~50 bytes a complete event. Large files are decoded by
a pool of worker processes, in order; for an uncompressed file the main process only plans cuts
(reading a small probe around each) and the workers read their own byte ranges.
"""

from __future__ import annotations

import ctypes
import gzip
import mmap
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from pathlib import Path

import msgspec
import numpy as np

from ..errors import TraceError
from ..sites import LINE_PREFIX
from .launches import launcher_column
from .schema import ANY_DECODER, EMPTY_ARGS, EVENT_LIST_DECODER, LOOSE_EVENT_LIST_DECODER, Event
from .table import (
    Cat,
    EventTable,
    MemoryTable,
    SparseColumn,
    Threads,
    Trace,
    TraceMeta,
    in_categories,
    normalise_category,
)

try:  # the optional C accelerators (setup.py); without them the msgspec path gives the same
    from . import _scan  # columns, and numpy's argsort and gathers the same order
except ImportError:  # pragma: no cover - built without a C compiler
    _scan = None
try:
    from . import _order
except ImportError:  # pragma: no cover
    _order = None
if os.environ.get("TORCHNECK_PURE_PYTHON"):  # to compare the two, or to sidestep the scanner
    _scan = _order = None

BLOCK_BYTES = 4 << 20
"""Bytes decoded at once. 4 MB is ~15k events: large enough that per-call overhead vanishes
(~250 slices a GB), small enough that the slices in flight and the per-thread read buffers
(two workers, a few slices each) stay a few tens of MB, and msgspec's structs (~10x the
bytes) far below 200 MB."""

THREAD_MIN_BYTES = 24 << 20
"""Uncompressed size from which slices are decoded by two worker threads (the native scanner
releases the GIL; measured on this 2-core VM: 62 MB 0.33 -> 0.22 s, 35 MB 0.21 -> 0.16 s,
10 MB even)."""

PARALLEL_MIN_BYTES = 96 << 20
"""Uncompressed size from which slices the native scanner declines (so msgspec decodes them,
holding the GIL) go to worker processes; below it the pool's start-up (~0.1 s) costs more than
it saves."""

_HEADER_LIMIT = 64 << 20
_TAIL_BYTES = 256 << 10
"""The end of the events array is found by decoding the last slice in the main process; it is
kept this small (the rest of the tail goes to the workers) so its Python objects stay few."""
_PROBE_BYTES = 256 << 10
"""Bytes read around a planned cut to find an event boundary (events are far smaller)."""
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"


class _TailPiece(bytes):
    """A slice that may end the events array: judged (decoded) in order, in the main process."""


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as probe:
        return probe.read(2) == b"\x1f\x8b"


def _open_stream(path: Path):
    if _is_gzip(path):
        try:
            from isal import igzip

            return igzip.open(path, "rb")
        except ImportError:  # pragma: no cover - isal is a dependency, but stay usable without it
            return gzip.open(path, "rb")
    return open(path, "rb")


class _Reader:
    """Reads blocks, turning a truncated or corrupt gzip into a clean end-of-data + a warning."""

    def __init__(self, path: Path, warnings: list[str]):
        self.path = path
        self.stream = _open_stream(path)
        self.warnings = warnings
        self.total = 0
        self.eof = False

    def read(self, size: int) -> bytes:
        if self.eof:
            return b""
        try:
            data = self.stream.read(size)
        except (EOFError, OSError, zlib.error, gzip.BadGzipFile) as exc:
            self.warnings.append(f"the compressed data ends early or is corrupt ({exc}); using what came before")
            self.eof = True
            return b""
        if not data:
            self.eof = True
        self.total += len(data)
        return data

    def close(self) -> None:
        try:
            self.stream.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# Cutting the events array into decodable slices


def _last_boundary(buf: bytes | bytearray, stop: int) -> tuple[int, int] | None:
    """The last `}` , `{` boundary before `stop`: (end of the left object, start of the right)."""
    pos = stop
    while True:
        brace = buf.rfind(b"{", 0, pos)
        if brace <= 0:
            return None
        i = brace - 1
        while i >= 0 and buf[i] in _WS:
            i -= 1
        if i >= 0 and buf[i] == 0x2C:  # ','
            i -= 1
            while i >= 0 and buf[i] in _WS:
                i -= 1
            if i >= 0 and buf[i] == 0x7D:  # '}'
                return i + 1, brace
        pos = brace


def _all_boundaries(buf: bytes) -> list[tuple[int, int]]:
    return [(m.start() + 1, m.end() - 1) for m in re.finditer(rb"\}\s*,\s*\{", buf)]


def _array_ends(buf: bytes) -> Iterator[int]:
    """Candidate positions of the `]` closing the events array: a `]` after a `}`."""
    for m in re.finditer(rb"\}\s*\]", buf):
        yield m.end() - 1


def _decode_slice(data: bytes) -> list[Event] | None:
    """Decode comma-separated events (a trailing comma allowed), or None if they do not parse."""
    end = len(data)
    while end and data[end - 1] in _WS:
        end -= 1
    if end and data[end - 1] == 0x2C:  # a trailing ','
        end -= 1
    wrapped = b"".join((b"[", memoryview(data)[:end], b"]"))  # one copy
    try:
        return EVENT_LIST_DECODER.decode(wrapped)
    except msgspec.ValidationError:
        pass  # valid JSON, unusual types: decode loosely
    except msgspec.DecodeError:
        return None
    try:
        return LOOSE_EVENT_LIST_DECODER.decode(wrapped)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _decode_one_by_one(data: bytes) -> tuple[list[Event], int]:
    """Best effort for a damaged region: decode each object between boundaries on its own."""
    good: list[Event] = []
    bad = 0
    start = 0
    for end, nxt in _all_boundaries(data) + [(len(data), len(data))]:
        piece = data[start:end].strip()
        start = nxt
        if not piece:
            continue
        events = _decode_slice(piece)
        if events is None:
            bad += 1
        else:
            good.extend(events)
    return good, bad


# ---------------------------------------------------------------------------------------------
# Events -> columns (runs in worker processes for large files)


@dataclass
class ChunkColumns:
    """Columns of one decoded slice, with slice-local string ids."""

    strings: list[str]
    x: dict[str, np.ndarray]
    mem: dict[str, np.ndarray]
    meta_events: list[tuple[str, str, str, object]]  # (kind, pid, tid, value)
    flow_count: int
    unknown_phases: dict[str, int]
    negative_dur: int
    source_bytes: int = 0
    threads: tuple[np.ndarray, np.ndarray] | None = None  # (distinct pid<<32|tid, per row: which)
    arg_pairs: tuple[np.ndarray, np.ndarray] | None = None  # (distinct shapes, types pairs; per row: which)


def _num(value, default: int = -1) -> int:
    """Lenient integer: ids written as strings ("stream 7") keep their digits."""
    if value is None:
        return default
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float):
        return int(value) if value == value else default
    if isinstance(value, str):
        digits = "".join(ch for ch in value if ch.isdigit())
        return int(digits) if digits else default
    return default


def _int_column(values: list, default: int, dtype) -> np.ndarray:
    """Integers from a list that may hold None (absent) or strings, fast path in numpy."""
    try:
        arr = np.array(values, dtype=np.float64)  # None -> nan
    except (TypeError, ValueError):
        return np.array([_num(v, default) for v in values], dtype=np.int64).astype(dtype)
    arr[~(np.abs(arr) < 2.0**63)] = default  # absent (nan), or beyond int64
    return arr.astype(np.int64).astype(dtype, copy=False)


def _float_column(values: list, default: float) -> np.ndarray:
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.array([v if isinstance(v, (int, float)) else _to_float(v) for v in values], dtype=np.float64)
    if default == default:
        arr[np.isnan(arr)] = default
    return arr


def _to_float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


class _Interner:
    """Slice-local string table. Ids for a whole column are found with C-level map calls."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.index: dict = {}

    def ids(self, values: list) -> np.ndarray:
        index = self.index
        for v in dict.fromkeys(values):
            if v not in index:
                index[v] = len(self.strings)
                self.strings.append(v if isinstance(v, str) else ("" if v is None else str(v)))
        return np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))

    def pair_ids(self, pairs: list) -> tuple[np.ndarray, np.ndarray]:
        """Ids of both halves of (pid, tid) pairs, hashing each pair once: a slice holds few
        distinct pairs, so the halves are interned once per distinct pair."""
        local: dict = {}
        for pair in dict.fromkeys(pairs):
            local[pair] = len(local)
        which = np.fromiter(map(local.__getitem__, pairs), dtype=np.int32, count=len(pairs))
        firsts = self.ids([p for p, _ in local])
        seconds = self.ids([t for _, t in local])
        return firsts[which], seconds[which]

    def raw_ids(self, raws: list) -> np.ndarray:
        """Ids of raw JSON values (msgspec.Raw, unhashable): keyed by their bytes, decoded to
        text once per distinct value; an absent (empty) value gets -1."""
        keys = list(map(bytes, raws))
        index = self.index
        for k in dict.fromkeys(keys):
            if k not in index:
                index[k] = len(self.strings) if k else -1
                if k:
                    self.strings.append(k.decode("utf-8", "replace"))
        return np.fromiter(map(index.__getitem__, keys), dtype=np.int32, count=len(keys))


_INT32_MAX = np.iinfo(np.int32).max
_get_args = attrgetter("args")


def _rows_with_args(cats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(GPU events, host ops): the rows whose device/stream/bytes args, and whose shapes, are
    kept; runtime and driver calls carry neither."""
    gpu = in_categories(cats, (Cat.KERNEL, Cat.GPU_MEMCPY, Cat.GPU_MEMSET, Cat.GPU_USER_ANNOTATION))
    return gpu, ~gpu & (cats != Cat.RUNTIME) & (cats != Cat.DRIVER)


def events_to_columns(events: list, mixed: bool = False) -> ChunkColumns:
    """Turn decoded events into numpy columns; the only per-event Python work in the loader.
    `mixed`: the list may hold both typed and loosely typed events (pieces of a damaged region
    decoded one by one), so the tolerant conversion is used."""
    strings = _Interner()
    xs, mems, meta_events, flows, unknown = _split_phases(events)
    if xs and type(xs[0]) is Event and not mixed:
        x, negative = _strict_x(xs, strings)
    else:
        x, negative = _loose_x(xs, strings)
    return ChunkColumns(strings.strings, x, _memory_columns(mems, strings), meta_events, flows, unknown,
                        negative)


def _split_phases(events: list) -> tuple[list, list, list, int, dict[str, int]]:
    """(complete events, `[memory]` instant events, metadata as (kind, pid, tid, value), the
    number of flow events, counts of other phases)."""
    xs: list = []
    mems: list = []
    meta_events: list[tuple[str, str, str, object]] = []
    flows = 0
    unknown: dict[str, int] = {}
    phases = list(map(_get_ph, events))
    x_count = phases.count("X")
    if x_count == len(phases):
        return events, mems, meta_events, flows, unknown
    xs = [e for e in events if e.ph == "X"] if x_count else []
    flows = phases.count("s") + phases.count("f") + phases.count("t")
    if x_count + flows < len(phases):  # the few others, one by one
        for e in events:
            ph = e.ph
            if ph == "X" or ph == "s" or ph == "f" or ph == "t":
                continue
            if ph == "i" or ph == "I":
                if e.name == "[memory]" and e.args is not None:
                    mems.append(e)
            elif ph == "M":
                a = e.args
                if a is not None:
                    if e.name == "process_name":
                        meta_events.append(("process_name", str(e.pid), "", a.name))
                    elif e.name == "thread_name":
                        meta_events.append(("thread_name", str(e.pid), str(e.tid), a.name))
                    elif e.name == "process_labels":
                        meta_events.append(("process_labels", str(e.pid), "", a.labels))
            else:
                key = str(ph)
                unknown[key] = unknown.get(key, 0) + 1
    return xs, mems, meta_events, flows, unknown


def _memory_columns(mems: list, strings: _Interner) -> dict[str, np.ndarray]:
    margs = [e.args for e in mems]
    return {
        "ts": _float_column([e.ts for e in mems], float("nan")),
        "pid": strings.ids([e.pid for e in mems]),
        "tid": strings.ids([e.tid for e in mems]),
        "nbytes": _int_column([a.mem_bytes for a in margs], 0, np.int64),
        "total_allocated": _int_column([a.total_allocated for a in margs], -1, np.int64),
        "total_reserved": _int_column([a.total_reserved for a in margs], -1, np.int64),
        "device_type": _int_column([a.device_type for a in margs], 0, np.int8),
        "device_id": _int_column([a.device_id for a in margs], -1, np.int16),
        "addr": _int_column([a.addr for a in margs], 0, np.int64),
    }


# ---------------------------------------------------------------------------------------------
# The native scanner (`_scan.c`): the same columns without a Python object per event

def _unescape_scanned(data, entries: np.ndarray, texts: list, start: int = 0) -> bool:
    """Fill in the scanner's strings that hold JSON escapes (None in `texts`), unescaped as
    msgspec does; False if one is not valid (the Python decoder then reports it)."""
    try:
        for i in [i for i, text in enumerate(texts) if text is None]:
            off, length, _ = entries[i].tolist()
            texts[i] = msgspec.json.decode(b'"' + data[start + off:start + off + length] + b'"')
    except (UnicodeDecodeError, msgspec.DecodeError):
        return False
    return True


def _scan_columns(data, length: int | None = None, start: int = 0) -> ChunkColumns | None:
    """Columns of one slice (`data`, or its `length` bytes from `start`; any buffer whose
    slices are bytes: bytes, bytearray, mmap) by the native scanner; None when it declines the
    slice (unusual types, malformed JSON: the Python decoder then decides) or is not built."""
    if start == 0 and (length is None or length == len(data)):
        found = _scan.scan(data)
    else:
        stop = len(data) if length is None else start + length
        with memoryview(data) as view, view[start:stop] as part:
            found = _scan.scan(part)
    if found is None:
        return None
    n, raw, entries, spans, flows, decoded, thread_pairs = found
    if None in decoded and not _unescape_scanned(data, np.frombuffer(entries, dtype=np.int64).reshape(-1, 3),
                                                 decoded, start):
        return None
    strings = _Interner()
    strings.strings = decoded
    mems: list = []
    meta_events: list = []
    unknown: dict[str, int] = {}
    if spans:
        pairs = (np.frombuffer(spans, dtype=np.int64).reshape(-1, 2) + start).tolist()
        try:
            others = EVENT_LIST_DECODER.decode(b"".join((b"[", b",".join(data[a:b] for a, b in pairs), b"]")))
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
            return None
        _, mems, meta_events, _, unknown = _split_phases(others)
    cols = {k: np.frombuffer(v, dtype=_SCANNED_DTYPES[k]) for k, v in raw.items()}
    thread = cols.pop("thread")
    x, negative = _native_x(cols, strings)
    chunk = ChunkColumns(strings.strings, x, _memory_columns(mems, strings), meta_events, flows, unknown,
                         negative)
    chunk.threads = (np.frombuffer(thread_pairs, dtype=np.int64), thread)
    return chunk


_SCANNED_DTYPES = {**dict.fromkeys(("cat", "name", "pid", "tid", "thread", "dims", "types", "stack"), np.int32),
                   "ts": np.float64, "dur": np.float64, "correlation": np.int64,
                   "device": np.int64, "stream": np.int64, "nbytes": np.int64}


def _native_x(cols: dict[str, np.ndarray], strings: _Interner) -> tuple[dict, int]:
    """The scanner's raw columns -> the same columns `_strict_x` makes: categories coded, args
    kept only on the rows that carry them (device/stream/bytes on GPU events, shapes on host
    ops)."""
    table = strings.strings
    cat_ids = cols["cat"]
    lookup = np.zeros(len(table), dtype=np.int8)
    for i in np.unique(cat_ids).tolist():
        lookup[i] = normalise_category(table[i])
    cats = lookup[cat_ids]
    dur = cols["dur"].astype(np.float32)
    negative = int(np.count_nonzero(dur < 0))
    if negative:
        dur[dur < 0] = 0.0
    gpu, ops = _rows_with_args(cats)
    device = np.where(gpu, cols["device"], -1)
    stream = np.where(gpu, cols["stream"], -1)
    nbytes = np.where(gpu, cols["nbytes"], 0)
    shapes = np.where(ops, cols["dims"], -1).astype(np.int32)
    types = np.where(ops, cols["types"], -1).astype(np.int32)
    stack = np.where(ops, cols["stack"], -1).astype(np.int32)
    pid, tid = cols["pid"], cols["tid"]
    device, stream = _gpu_placement(gpu, device, stream, pid, tid, strings)
    return _x_dict(cols["ts"], dur, cats, cols["name"], pid, tid, cols["correlation"], device, stream, shapes,
                   types, nbytes, stack), negative


def _strict_x(xs: list, strings: _Interner) -> tuple[dict, int]:
    """Columns from strictly typed events: every field has its JSON type or its default, so each
    column is one C-level pass (`np.fromiter` over an attrgetter map), no per-value checks.
    Args that only some categories carry (shapes on ops, stream and bytes on GPU events) are
    read from those events alone."""
    n = len(xs)
    raw_cats = list(map(_get_cat, xs))
    cat_codes = {c: int(normalise_category(c)) for c in dict.fromkeys(raw_cats)}
    cats = np.fromiter(map(cat_codes.__getitem__, raw_cats), dtype=np.int8, count=n)
    del raw_cats
    ts = np.fromiter(map(_get_ts, xs), dtype=np.float64, count=n)
    dur = np.fromiter(map(_get_dur, xs), dtype=np.float64, count=n)
    negative = int(np.count_nonzero(dur < 0))
    if negative:
        dur[dur < 0] = 0.0
    name = strings.ids(list(map(_get_name, xs)))
    pid_arr, tid_arr = strings.pair_ids(list(map(_get_pid_tid, xs)))
    args = list(map(_get_args, xs))
    corr = np.fromiter(map(_get_corr, args), dtype=np.int64, count=n)
    device = np.full(n, -1, dtype=np.int64)
    stream = np.full(n, -1, dtype=np.int64)
    nbytes = np.zeros(n, dtype=np.int64)
    gpu, ops = _rows_with_args(cats)
    if gpu.any():
        where = np.flatnonzero(gpu)
        gargs = list(compress(args, gpu.tolist()))
        device[where] = np.fromiter(map(_get_device, gargs), dtype=np.int64, count=len(where))
        stream[where] = np.fromiter(map(_get_stream, gargs), dtype=np.int64, count=len(where))
        nbytes[where] = np.fromiter(map(_get_nbytes, gargs), dtype=np.int64, count=len(where))
    shapes = np.full(n, -1, dtype=np.int32)
    types = np.full(n, -1, dtype=np.int32)
    stack = np.full(n, -1, dtype=np.int32)
    if ops.any():
        where = np.flatnonzero(ops)
        oargs = list(compress(args, ops.tolist()))
        shapes[where] = strings.raw_ids(list(map(_get_dims, oargs)))
        types[where] = strings.raw_ids(list(map(_get_types, oargs)))
        stack[where] = _stack_ids(list(map(_get_stack, oargs)), strings)
    device, stream = _gpu_placement(gpu, device, stream, pid_arr, tid_arr, strings)
    return _x_dict(ts, dur, cats, name, pid_arr, tid_arr, corr, device, stream, shapes, types,
                   nbytes, stack), negative


_get_ph, _get_cat, _get_ts, _get_dur, _get_name = map(attrgetter, ("ph", "cat", "ts", "dur", "name"))
_get_pid_tid = attrgetter("pid", "tid")
_get_corr, _get_device, _get_stream, _get_nbytes = map(attrgetter, ("correlation", "device", "stream", "nbytes"))
_get_types, _get_stack = attrgetter("input_type"), attrgetter("call_stack")


def _stack_ids(stacks: list, strings: _Interner) -> np.ndarray:
    """Ids of "Call stack" strings; -1 for an empty or absent one (or, in the loose path, one
    that is not a string)."""
    ids = strings.ids([s if isinstance(s, str) and s else "" for s in stacks])
    ids[ids == strings.index.get("", -2)] = -1
    return ids


def _get_dims(args) -> msgspec.Raw:
    """"Input Dims", or PyTorch 1.8's "Input dims" where that is absent."""
    return args.input_dims if args.input_dims else args.input_dims_old


def _gpu_placement(gpu, device, stream, pid_arr, tid_arr, strings) -> tuple[np.ndarray, np.ndarray]:
    """GPU events (`gpu`, a row mask): kineto puts the device in pid and the stream in tid when
    args lack them. Host events get -1 in both."""
    if gpu.any():
        table = strings.strings

        def digits_of(ids: np.ndarray) -> np.ndarray:  # parse each distinct pid/tid string once
            uniq, inverse = np.unique(ids, return_inverse=True)
            return np.array([_num(table[i], 0) for i in uniq.tolist()], dtype=np.int64)[inverse]

        fallback_dev = digits_of(pid_arr[gpu])
        fallback_stream = digits_of(tid_arr[gpu])
        dev_g = device[gpu]
        device[gpu] = np.where(dev_g >= 0, dev_g, fallback_dev)
        st_g = stream[gpu]
        stream[gpu] = np.where(st_g >= 0, st_g, fallback_stream)
    device[~gpu] = -1
    stream[~gpu] = -1
    return device, stream


def _x_dict(ts, dur, cats, name, pid_arr, tid_arr, corr, device, stream, shapes, types, nbytes, stack) -> dict:
    return {
        "ts": ts,
        "dur": dur.astype(np.float32),
        "cat": cats,
        "name": name,
        "pid": pid_arr,
        "tid": tid_arr,
        "correlation": corr,
        "device": np.clip(device, -1, 32767).astype(np.int16),
        "stream": np.clip(stream, -1, _INT32_MAX).astype(np.int32),
        "shapes": shapes,
        "types": types,
        "nbytes": nbytes,
        "stack": stack,
    }


def _loose_x(xs: list, strings: _Interner) -> tuple[dict, int]:
    """Columns from loosely typed events (any JSON type in any field)."""
    n = len(xs)
    raw_cats = list(map(attrgetter("cat"), xs))
    cat_codes = {c: int(normalise_category(c)) for c in dict.fromkeys(raw_cats)}
    cats = np.fromiter(map(cat_codes.__getitem__, raw_cats), dtype=np.int8, count=n)
    ts = _float_column(list(map(attrgetter("ts"), xs)), float("nan"))
    dur = _float_column(list(map(attrgetter("dur"), xs)), 0.0)
    negative = int(np.count_nonzero(dur < 0))
    if negative:
        dur[dur < 0] = 0.0
    name = strings.ids(list(map(attrgetter("name"), xs)))
    pid_arr = strings.ids(list(map(attrgetter("pid"), xs)))
    tid_arr = strings.ids(list(map(attrgetter("tid"), xs)))
    empty = EMPTY_ARGS
    args = [a if a is not None else empty for a in map(_get_args, xs)]
    corr = _int_column(list(map(attrgetter("correlation"), args)), -1, np.int64)
    device = _int_column(list(map(attrgetter("device"), args)), -1, np.int64)
    stream = _int_column(list(map(attrgetter("stream"), args)), -1, np.int64)
    dims = list(map(_get_dims, args))
    shapes = strings.ids([bytes(d).decode("utf-8", "replace") if d else None for d in dims])
    shapes[shapes == strings.index.get(None, -2)] = -1
    kinds = list(map(attrgetter("input_type"), args))
    types = strings.ids([bytes(d).decode("utf-8", "replace") if d else None for d in kinds])
    types[types == strings.index.get(None, -2)] = -1
    nbytes = _int_column(list(map(attrgetter("nbytes"), args)), 0, np.int64)
    gpu, ops = _rows_with_args(cats)
    stack = _stack_ids(list(map(_get_stack, args)), strings)
    stack[~ops] = -1
    device, stream = _gpu_placement(gpu, device, stream, pid_arr, tid_arr, strings)
    x = _x_dict(ts, dur, cats, name, pid_arr, tid_arr, corr, device, stream, shapes, types, nbytes, stack)
    return x, negative


def decode_to_columns(data: bytes) -> ChunkColumns | None:
    """Worker entry point: decode one slice; None if it does not decode (caller merges).
    The native scanner takes the slice when it is built and the slice is ordinary; the typed
    msgspec decoder otherwise (same columns)."""
    data = bytes(data)
    chunk = _scan_columns(data) if _scan is not None else None
    return _python_columns(data) if chunk is None else _sized(chunk, len(data))


def _python_columns(data: bytes) -> ChunkColumns | None:
    events = _decode_slice(data)
    return None if events is None else _sized(events_to_columns(events), len(data))


def _sized(chunk: ChunkColumns, source_bytes: int) -> ChunkColumns:
    """Finish a worker's chunk: its size, and its (pid, tid) pairs (found by the scanner, else
    here, in the worker), so the merging thread only maps the few distinct pairs."""
    chunk.source_bytes = source_bytes
    if chunk.threads is None:  # the scanner finds them as it goes
        chunk.threads = _thread_pairs(chunk.x["pid"], chunk.x["tid"])
    chunk.arg_pairs = _arg_pairs(chunk.x["shapes"], chunk.x["types"])
    return chunk


def _arg_pairs(shapes: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_thread_pairs` of the rows' (shapes, types) slice-local string ids, each + 1 (absent: 0)."""
    return _thread_pairs(shapes + 1, types + 1)


def _thread_pairs(pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct pid << 32 | tid of slice-local string ids, per row the index of its pair).
    A sort and a binary search: 2.5x faster than `np.unique(return_inverse=True)` here."""
    if not len(pid):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
    keys = pid.astype(np.int64) << 32 | tid.astype(np.int64)
    uniq = np.sort(keys)
    first = np.empty(len(uniq), dtype=bool)
    first[0] = True
    np.not_equal(uniq[1:], uniq[:-1], out=first[1:])
    uniq = uniq[first]
    return uniq, np.searchsorted(uniq, keys).astype(np.int32)


def _read_range(path: str, start: int, stop: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(stop - start)


_READ_BUFFERS = threading.local()


def _read_range_reused(path: str, start: int, stop: int) -> tuple[bytearray, int]:
    """Bytes [start, stop) of the file into this thread's reused buffer: (buffer, length).
    A fresh `bytes` a slice (`BLOCK_BYTES`) would be new pages each time, zeroed by the kernel
    (measured at 8 MB slices: ~2000 page faults a slice, a tenth of the load time), once large
    blocks are mapped on their own (`return_large_frees_promptly`)."""
    want = stop - start
    buf = getattr(_READ_BUFFERS, "buf", None)
    if buf is None or len(buf) < want:
        buf = _READ_BUFFERS.buf = bytearray(want)
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        got = 0
        with memoryview(buf) as view:
            while got < want:
                n = f.readinto(view[got:want])
                if not n:
                    break
                got += n
    return buf, got


def decode_range(path: str, start: int, stop: int) -> ChunkColumns | None:
    """Worker entry point for uncompressed files: read and decode bytes [start, stop). The
    scanner reads the file's pages where they lie (a read-only mapping of just this range,
    unmapped when done) instead of a copy: copying was ~7% of the load's CPU."""
    if _scan is None:
        return decode_to_columns(_read_range(path, start, stop))
    try:
        mapped, skip = _map_range(path, start, stop)
    except (OSError, ValueError):  # no mmap here (some file systems): read a copy
        buf, n = _read_range_reused(path, start, stop)
        chunk = _scan_columns(buf, n)
        if chunk is None:  # declined: msgspec decides, on a copy of just these bytes
            with memoryview(buf) as view:
                return _python_columns(view[:n].tobytes())
        return _sized(chunk, n)
    with mapped:
        n = len(mapped) - skip
        chunk = _scan_columns(mapped, n, skip)
        if chunk is None:
            return _python_columns(mapped[skip:])
    return _sized(chunk, n)


def _map_range(path: str, start: int, stop: int) -> tuple[mmap.mmap, int]:
    """A read-only mapping of the file from `start` (rounded down to the mapping granularity)
    to `stop`, and where `start` lies in it. Raises ValueError when the file no longer reaches
    `stop` (cut while being read): reading a mapped page past the end would kill the process
    (SIGBUS), where read() just comes back short."""
    base = start - start % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < stop:
            raise ValueError(f"{path} is shorter than when it was opened")
        return mmap.mmap(f.fileno(), stop - base, offset=base, access=mmap.ACCESS_READ), start - base


# ---------------------------------------------------------------------------------------------
# Merging slices


class _Columns:
    """Growable numpy columns: chunks are copied into one buffer per column (grown by half when
    full), so the finished table is never held twice as a list of parts plus its concatenation.

    Integer columns named in `narrow` are kept in the narrowest signed type that holds every
    value so far (int8 up to the column's dtype), widened when a chunk needs more: ids, threads,
    streams and byte counts are int64 in the JSON but nearly always small, and at 2.5 M events
    a GB every byte a row is 2.5 MB. Analyses only compare, index, look up and sum them (numpy
    sums small ints into int64; combined keys are built in int64)."""

    def __init__(self, dtypes: dict[str, type], narrow: tuple[str, ...] = ()):
        self.dtypes = {k: np.dtype(dt) for k, dt in dtypes.items()}
        self.size = 0
        self.cols = {k: np.empty(0, dtype=np.int8 if k in narrow else dt) for k, dt in dtypes.items()}
        self.narrow = narrow

    def append(self, values: dict[str, np.ndarray], hint: int = 0) -> None:
        n = len(next(iter(values.values())))
        need = self.size + n
        capacity = len(next(iter(self.cols.values())))
        if need > capacity:
            new_capacity = max(need, capacity + capacity // 2, hint, 4096)
            for k in self.cols:  # one column at a time
                grown = np.empty(new_capacity, dtype=self.cols[k].dtype)
                grown[:self.size] = self.cols[k][:self.size]
                self.cols[k] = grown
        for k in self.narrow:
            v = values[k]
            if n and self.cols[k].dtype != self.dtypes[k]:
                wanted = _narrowest_int(int(v.min()), int(v.max()), self.dtypes[k])
                if wanted.itemsize > self.cols[k].itemsize:  # copy the rows so far, not the capacity
                    wider = np.empty(len(self.cols[k]), dtype=wanted)
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


def _halves_by_width(columns: list[np.ndarray]) -> list[list[np.ndarray]]:
    """The columns in two groups of about equal bytes a row (widest first, each to the lighter)."""
    groups: list[list[np.ndarray]] = [[], []]
    width = [0, 0]
    for col in sorted(columns, key=lambda c: -c.itemsize):
        lighter = int(width[1] < width[0])
        groups[lighter].append(col)
        width[lighter] += col.itemsize
    return [g for g in groups if g]


class _Merger:
    """Accumulates slices into global columns with one global string table."""

    def __init__(self, meta: TraceMeta, expected_bytes: int = 0, keep_correlation: bool = False):
        self.meta = meta
        self.keep_correlation = keep_correlation
        self.expected_bytes = expected_bytes
        self.strings: list[str] = []
        self.index: dict[str, int] = {}
        self.thread_index: dict[tuple[int, int], int] = {}
        self.threads = Threads()
        # (shapes id + 1) << 32 | (types id + 1) of each args id so far, sorted, and the ids
        self.arg_keys = np.empty(0, dtype=np.int64)
        self.arg_key_ids = np.empty(0, dtype=np.int32)
        self.x = _Columns(_X_DTYPES, _X_NARROW)
        self.mem = _Columns(_MEM_DTYPES)
        # the sparse columns (`SPARSE_COLUMNS`): their rows (in load order, ascending) and values
        self.sparse: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {k: ([], []) for k in SPARSE_COLUMNS}
        self.negative_dur = 0
        self.bytes_seen = 0

    def _global_ids(self, local: list[str]) -> np.ndarray:
        """Global string id of each slice-local string, with -1 appended (for "absent")."""
        get = self.index.get
        ids = [get(s) for s in local]
        for i, g in enumerate(ids):
            if g is None:
                s = local[i]
                g = self.index.get(s)  # a repeat within this slice
                if g is None:
                    g = self.index[s] = len(self.strings)
                    self.strings.append(s)
                ids[i] = g
        ids.append(-1)
        return np.array(ids, dtype=np.int32)

    def _threads(self, pairs: tuple[np.ndarray, np.ndarray], remap: np.ndarray) -> np.ndarray:
        """Global thread ids per row from a slice's (pid, tid) pairs of local string ids."""
        uniq, inverse = pairs
        ids = np.empty(len(uniq), dtype=np.int32)
        for i, key in enumerate(uniq.tolist()):
            p, t = int(remap[key >> 32]), int(remap[key & 0xFFFFFFFF])
            found = self.thread_index.get((p, t))
            if found is None:
                found = self.thread_index[(p, t)] = len(self.threads.pid)
                self.threads.pid.append(self.strings[p])
                self.threads.tid.append(self.strings[t])
            ids[i] = found
        return ids[inverse]

    def _args(self, pairs: tuple[np.ndarray, np.ndarray], remap: np.ndarray) -> np.ndarray:
        """Global args ids per row from a slice's distinct (shapes, types) pairs of local string
        ids + 1: -1 where a row has neither, else the pair's args id (numbered as first seen).
        Vectorised: a slice holds ~1500 distinct pairs in a trace recorded with shapes."""
        uniq, inverse = pairs
        shapes = remap[(uniq >> 32) - 1].astype(np.int64)  # local -1 picks remap's -1
        types = remap[(uniq & 0xFFFFFFFF) - 1].astype(np.int64)
        keys = (shapes + 1) << 32 | (types + 1)
        known = self.arg_keys
        at = np.minimum(np.searchsorted(known, keys), max(len(known) - 1, 0))
        found = (known[at] == keys) if len(known) else np.zeros(len(keys), dtype=bool)
        ids = np.where(found, self.arg_key_ids[at] if len(known) else 0, -1).astype(np.int32)
        new = ~found & (keys != 0)  # pairs not seen before; 0 is (-1, -1): neither
        if new.any():
            ids[new] = np.arange(len(known), len(known) + int(new.sum()), dtype=np.int32)
            merged = np.concatenate([known, keys[new]])
            order = np.argsort(merged, kind="stable")
            self.arg_keys = merged[order]
            self.arg_key_ids = np.concatenate([self.arg_key_ids, ids[new]])[order]
        return ids[inverse]

    def arg_pair_table(self) -> np.ndarray:
        """(k + 1, 2) int32: each args id's (shapes, types) string ids, and (-1, -1) last, which
        args -1 picks."""
        table = np.full((len(self.arg_keys) + 1, 2), -1, dtype=np.int32)
        table[self.arg_key_ids, 0] = (self.arg_keys >> 32) - 1
        table[self.arg_key_ids, 1] = (self.arg_keys & 0xFFFFFFFF) - 1
        return table

    def add(self, chunk: ChunkColumns) -> None:
        """Add one decoded slice."""
        remap = self._global_ids(chunk.strings)
        x = chunk.x
        n = len(x["ts"])
        self.bytes_seen += chunk.source_bytes
        # Size the buffers once from the events per byte so far, when the total size is known.
        size_hint = int(1.1 * self.expected_bytes * (self.x.size + n) / self.bytes_seen) \
            if self.expected_bytes and self.bytes_seen else 0
        self.meta.event_count += n
        self.meta.flow_count += chunk.flow_count
        self.negative_dur += chunk.negative_dur
        for k, v in chunk.unknown_phases.items():
            self.meta.unknown_phases[k] = self.meta.unknown_phases.get(k, 0) + v
        for kind, pid, tid, value in chunk.meta_events:
            if kind == "process_name" and isinstance(value, str):
                self.meta.process_names[pid] = value
            elif kind == "thread_name" and isinstance(value, str):
                self.meta.thread_names[(pid, tid)] = value
            elif kind == "process_labels" and isinstance(value, str):
                self.meta.process_labels[pid] = value
        if n:
            moved = np.flatnonzero(x["nbytes"])
            self._keep_sparse("nbytes", moved, x["nbytes"][moved].astype(np.int64))
            with_stack = np.flatnonzero(x["stack"] >= 0)
            self._keep_sparse("call_stack", with_stack, remap[x["stack"][with_stack]] + 1)
            values = {k: x[k] for k in ("ts", "dur", "cat", "correlation", "device", "stream")}
            values["name"] = remap[x["name"]]
            pairs = chunk.threads if chunk.threads is not None else _thread_pairs(x["pid"], x["tid"])
            values["thread"] = self._threads(pairs, remap)
            arg_pairs = chunk.arg_pairs if chunk.arg_pairs is not None else _arg_pairs(x["shapes"], x["types"])
            values["args"] = self._args(arg_pairs, remap)
            self.x.append(values, size_hint)
        mem = chunk.mem
        if len(mem["ts"]):
            mem = dict(mem)
            mem["thread"] = self._threads(_thread_pairs(mem.pop("pid"), mem.pop("tid")), remap)
            self.mem.append(mem)

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
        if skipped:
            self.meta.warnings.append(f"{skipped} events without a timestamp were skipped")
        whole = not skipped and not (cat == Cat.PYTHON_FUNCTION).any()  # the usual case: no row sets
        if _order is not None and n < 2**31:
            return self._finish_in_place(ts, dur, cat, whole)
        if whole:
            main_rows, py_rows = _start_order(ts, dur), np.empty(0, dtype=np.intp)
        else:
            main_rows, py_rows = (_start_order(ts, dur, np.flatnonzero(m)) for m in _row_sets(ts, cat)[:2])
        del ts, dur, cat
        python = {k: x.cols[k][py_rows] for k in _X_DTYPES}
        del py_rows
        main = {}
        with ThreadPoolExecutor(1) as other:  # two columns at a time: numpy gathers without the GIL
            for a, b in x.pairs_by_size():
                other_column = other.submit(x.take, b, main_rows) if b else None
                main[a] = x.take(a, main_rows)
                if other_column is not None:
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
        with ThreadPoolExecutor(2) as pool:  # two walks on two cores (the C walk drops the GIL)
            for done in [pool.submit(_order.permute, tuple(c[:n] for c in group), order)
                         for group in _halves_by_width(list(x.cols.values()))]:
                done.result()
        del order
        main, python = {}, {}
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

    def _tables(self, main: dict, python: dict) -> tuple[EventTable, EventTable, MemoryTable]:
        main["launcher"] = launcher_column(main["cat"], main["correlation"])
        if not self.keep_correlation:  # resolved into `launcher`: 4 bytes an event no analysis reads
            main["correlation"] = python["correlation"] = None
        pairs = self.arg_pair_table()
        table = EventTable(**main, arg_pairs=pairs, strings=self.strings, threads=self.threads)
        n_python = len(python["ts"])
        none = {k: SparseColumn(np.empty(0), np.empty(0, dtype=dt), n_python) for k, dt in SPARSE_COLUMNS.items()}
        none["launcher"] = SparseColumn(np.empty(0), np.empty(0, dtype=np.int32), n_python, fill=-1)
        python_table = EventTable(**python, **none, arg_pairs=pairs, strings=self.strings, threads=self.threads)
        m = self.mem
        morder = np.argsort(m.cols["ts"][:m.size], kind="stable")
        memory = MemoryTable(**{k: m.take(k, morder) for k in _MEM_DTYPES})
        if self.negative_dur:
            self.meta.warnings.append(f"{self.negative_dur} events had a negative duration (counted as 0)")
        return table, python_table, memory


# ---------------------------------------------------------------------------------------------
# The driver


def _apply_top_level(meta: TraceMeta, top: dict) -> None:
    meta.schema_version = top.get("schemaVersion")
    dist = top.get("distributedInfo")
    if isinstance(dist, dict):
        rank = dist.get("rank")
        meta.rank = rank if isinstance(rank, int) else None
        ws = dist.get("world_size")
        meta.world_size = ws if isinstance(ws, int) else None
        meta.backend = dist.get("backend") if isinstance(dist.get("backend"), str) else None
    devices = top.get("deviceProperties")
    if isinstance(devices, list):
        meta.devices = [d for d in devices if isinstance(d, dict)]
    base = top.get("baseTimeNanoseconds")
    if isinstance(base, int):
        meta.base_time_ns = base
    for key in ("traceName", "displayTimeUnit", "record_shapes", "cuda_runtime_version",
                "cuda_driver_version", "cupti_version", "torchneck"):
        if key in top:
            meta.other[key] = top[key]


def _slices(reader: _Reader, meta: TraceMeta, as_ranges: bool = False) -> Iterator[bytes | tuple[int, int]]:
    """Yield byte slices each holding whole events separated by commas; parse the top level.
    With `as_ranges` (an uncompressed file), most of the array comes as (start, stop) file
    offsets instead of bytes."""
    head = bytearray()
    while True:
        block = reader.read(1 << 20)
        head += block
        stripped = head.lstrip()
        if stripped[:1] == b"[":
            meta.format = "list"
            start = len(head) - len(stripped) + 1
            header = b""
            break
        if stripped[:1] not in (b"{", b""):
            raise TraceError(f"{reader.path}: not a profiler trace (it is not JSON)")
        m = _TRACE_EVENTS_KEY.search(head)
        if m:
            start = m.end()
            header = bytes(head[: m.end() - 1])  # up to and including `"traceEvents":`
            break
        if not block or len(head) > _HEADER_LIMIT:
            if not head.strip():
                raise TraceError(f"{reader.path}: the file is empty")
            raise TraceError(f"{reader.path}: not a profiler trace (no \"traceEvents\" array)")
    buf = bytearray(head[start:])
    del head
    # Skip whitespace and detect an empty array.
    while True:
        lead = buf.lstrip()
        if lead or reader.eof:
            break
        buf += reader.read(BLOCK_BYTES)
    buf = bytearray(buf.lstrip())
    trailer = b""
    if buf[:1] == b"]":
        trailer = bytes(buf[1:]) + _drain(reader)
        buf = bytearray()
    if as_ranges and buf and buf[:1] != b"]":
        # Plain file, parallel decoding: hand out (start, stop) offsets cut at event boundaries
        # found in small probes; workers read their own bytes. The tail goes on in byte mode.
        pos = reader.total - len(buf)
        size = os.fstat(reader.stream.fileno()).st_size
        while pos + 2 * BLOCK_BYTES < size:
            probe_end = pos + BLOCK_BYTES
            reader.stream.seek(probe_end - _PROBE_BYTES)
            window = reader.stream.read(_PROBE_BYTES)
            cut = _last_boundary(window, len(window))
            if cut is None:
                break
            nxt = probe_end - _PROBE_BYTES + cut[1]
            yield (pos, nxt)
            pos = reader.total = nxt  # progress
        reader.stream.seek(pos)
        reader.total = pos
        buf = bytearray()
        buf += reader.read(BLOCK_BYTES)
    pending_failures = 0
    while buf:
        if not reader.eof and len(buf) < BLOCK_BYTES * (1 + pending_failures):
            block = reader.read(BLOCK_BYTES)
            if block:
                buf += block
                continue
        if not reader.eof:
            cut = _last_boundary(buf, len(buf))
            if cut is None:
                pending_failures += 1
                continue
            _end, nxt = cut
            with memoryview(buf) as view:
                piece = view[:nxt].tobytes()  # includes the separating comma: slices concatenate
            ok = yield piece
            if ok is False:
                # The cut was not a real boundary: keep the bytes and read more before cutting.
                pending_failures += 1
                continue
            pending_failures = 0
            del buf[:nxt]
            continue
        # End of data: find where the events array closes. All but the last bit of the tail
        # still goes out as ordinary slices, so only a small piece is judged in-process.
        tail = bytes(buf)
        buf = bytearray()
        while len(tail) > 2 * _TAIL_BYTES:
            cut = _last_boundary(tail, len(tail) - _TAIL_BYTES)
            if cut is None:
                break
            ok = yield tail[:cut[1]]
            if ok is False:
                break
            tail = tail[cut[1]:]
        closed = False
        for pos in _array_ends(tail):
            ok = yield _TailPiece(tail[:pos])
            if ok is not False:
                trailer = tail[pos + 1:]
                closed = True
                break
        if not closed:
            meta.warnings.append("the trace ends early (truncated JSON); events up to the cut were read")
            yield b"\x00salvage" + tail
    if meta.format == "object":
        text = header + b"[]" + trailer
        try:
            top = ANY_DECODER.decode(text)
        except msgspec.DecodeError:
            top = _salvage_header(header)
            if not any("truncated" in w for w in meta.warnings):
                meta.warnings.append("the JSON after the events is damaged; metadata there was ignored")
        if isinstance(top, dict):
            _apply_top_level(meta, top)


def _salvage_header(header: bytes) -> dict:
    try:
        top = ANY_DECODER.decode(header + b"[]}")
        return top if isinstance(top, dict) else {}
    except msgspec.DecodeError:
        return {}


def _drain(reader: _Reader) -> bytes:
    parts = []
    while True:
        block = reader.read(BLOCK_BYTES)
        if not block:
            return b"".join(parts)
        parts.append(block)


def load_trace(
    path: str | os.PathLike,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
    keep_correlation: bool = False,
) -> Trace:
    """Load one trace file into a `Trace`.

    Raises `TraceError` (one line, naming the file) when the file cannot be a trace; damaged
    regions that leave the rest sound become warnings in `trace.meta.warnings`.
    `progress(bytes_read, file_size)` is called after every slice. Correlation ids are
    resolved into `events.launcher` (`trace.launches`) and then dropped, unless
    `keep_correlation` (`events.correlation` is None otherwise).
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory (pass a trace file, or use load_traces)")
    size = path.stat().st_size
    meta = TraceMeta(path=str(path), compressed_bytes=size)
    reader = _Reader(path, meta.warnings)
    merger = _Merger(meta, expected_bytes=0 if _is_gzip(path) else size, keep_correlation=keep_correlation)
    compressed = path.suffix == ".gz"
    est_uncompressed = size * (10 if compressed else 1)
    forced = workers is not None
    if workers is None:
        workers = min(2, os.cpu_count() or 1) if est_uncompressed >= THREAD_MIN_BYTES else 1
    try:
        if workers > 1:
            _load_parallel(reader, meta, merger, workers, progress, size,
                           processes=forced or est_uncompressed >= PARALLEL_MIN_BYTES)
        else:
            _load_serial(reader, meta, merger, progress, size)
    except TraceError:
        raise
    except (UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"{path}: not a readable profiler trace ({exc})") from None
    finally:
        meta.uncompressed_bytes = reader.total
        reader.close()
    return_freed_memory()  # the decoding threads' freed slices, before the sort needs room
    events, python, memory = merger.finish()
    if not len(events) and not len(memory):
        if meta.warnings:
            raise TraceError(f"{path}: no events could be read ({meta.warnings[0]})")
        raise TraceError(f"{path}: the trace holds no events (empty \"traceEvents\")")
    _spans_not_ops(events)
    del merger
    return_freed_memory()
    if meta.rank is None:
        meta.rank = rank_from_path(path)
    return Trace(events=events, python=python, memory=memory, meta=meta)


def _glibc(name: str, *argtypes):
    """A glibc allocator function, or None elsewhere (musl, macOS, Windows)."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes = list(argtypes)
    return fn


_MALLOC_TRIM = _glibc("malloc_trim", ctypes.c_size_t)
_MALLOPT = _glibc("mallopt", ctypes.c_int, ctypes.c_int)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
LARGE_ALLOCATION_BYTES = 1 << 20
"""Allocations from this size get their own pages, returned to the OS when freed."""
KEPT_FREE_BYTES = 4 << 20
"""Free memory at the top of the heap kept for reuse rather than returned at once."""


def return_large_frees_promptly() -> None:
    """For torchneck's own process (the CLI): give every allocation of `LARGE_ALLOCATION_BYTES`
    or more its own mapping, unmapped when freed, and keep up to `KEPT_FREE_BYTES` of the
    heap's free top for the many small block-sized temporaries (glibc's `mallopt`).

    By default glibc raises the mapping threshold to the largest block freed so far (up to
    32 MB), so after the loader frees its first column, numpy's temporaries of up to 32 MB come
    from the heap and, freed, stay there, scattered: measured on a 1 GB trace, 65 MB more
    resident memory after host nesting than the arrays it keeps, 225 MB peak instead of 197.
    The price is fresh pages for each large temporary (~0.3 s on 1 GB); the analyses work in
    blocks below the threshold to keep it small. Not done on import: a program that imports
    torchneck as a library keeps its allocator as it was."""
    if _MALLOPT is not None:
        _MALLOPT(_M_MMAP_THRESHOLD, LARGE_ALLOCATION_BYTES)
        _MALLOPT(_M_TRIM_THRESHOLD, KEPT_FREE_BYTES)


def return_freed_memory() -> None:
    """Give memory freed by the loader back to the OS (glibc's `malloc_trim`; a no-op elsewhere).

    Decoding in threads leaves tens of MB of freed slices and columns in glibc's per-thread
    arenas, which it keeps for reuse by default: measured on a 1 GB trace, 45 MB of the
    process's memory after loading was such free space, held through every analysis after."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)(?:[^\d]|$)", re.IGNORECASE)


def rank_from_path(path) -> int | None:
    """The rank a trace file's name (or its folder's, `rank-<R>/`) gives, for traces without
    `distributedInfo`: `rank-3.pt.trace.json.gz`, `worker_rank_3...`, `rank-3/trace.json.gz`."""
    p = Path(path)
    for name in (p.name, p.parent.name):
        m = _RANK_IN_NAME.search(name)
        if m:
            return int(m.group(1))
    return None


_PROFILER_SPANS = ("ProfilerStep#", "Optimizer.step#", "Optimizer.zero_grad#", "enumerate(DataLoader)#")
"""Spans `torch.profiler` and `torch.optim`/`DataLoader` record around the user's code: kineto
files them as `user_annotation` since PyTorch 1.9, PyTorch 1.8 as `Operator` like any op."""


def _is_framework_span(name: str) -> bool:
    return (name.endswith(" (dynamo_timed)")
            or name.startswith(("Torch-Compiled Region:", "## Call CompiledFxGraph", LINE_PREFIX, *_PROFILER_SPANS))
            or name in ("CompiledFunction", "CompiledFunctionBackward"))


def _spans_not_ops(events: EventTable) -> None:
    """Spans that torch.compile records as `cpu_op` (compile stages `... (dynamo_timed)`,
    `Torch-Compiled Region`, compiled-graph calls), torchneck's own line spans (C++
    `RecordFunctionFast`, also `cpu_op`) and, in PyTorch 1.8 traces, the profiler's step and the
    optimizer's spans (`_PROFILER_SPANS`) are annotations, not operators: as ops they would top
    the op table and swallow their children's self time."""
    if not len(events):
        return
    ids = events.names_matching(_is_framework_span)
    if not ids.any():
        return
    rows = (events.cat == Cat.CPU_OP) & ids[events.name]
    events.cat[rows] = Cat.USER_ANNOTATION


def _handle_salvage(piece: bytes, merger: _Merger, meta: TraceMeta) -> None:
    data = piece[len(b"\x00salvage"):]
    # Drop whatever follows the last complete object.
    good, bad = _decode_one_by_one(data)
    if good:
        merger.add(events_to_columns(good, mixed=True))
    if bad:
        meta.warnings.append(f"{bad} damaged event(s) at the end were dropped")


def _load_serial(reader, meta, merger, progress, size) -> None:
    gen = _slices(reader, meta)
    send = None
    while True:
        try:
            piece = gen.send(send)
        except StopIteration:
            return
        if piece.startswith(b"\x00salvage"):
            _handle_salvage(piece, merger, meta)
            send = None
            continue
        chunk = decode_to_columns(piece)
        send = chunk is not None
        if chunk is not None:
            merger.add(chunk)
        if progress:
            progress(min(reader.total, size * 20), size)


def _load_parallel(reader, meta, merger, workers, progress, size, processes: bool = True) -> None:
    """Decode slices in worker threads (native scanner) or processes (msgspec). Slices are cut
    optimistically; one that fails in a worker (a false boundary) is re-decoded together with
    the following slice, in order.

    Threads when the native scanner takes the first slice: it scans with the GIL released, so
    threads run in parallel without pickling every column back from a process (a third of the
    load time) and without a second interpreter's memory. A slice it declines later is decoded
    by msgspec in its thread (holding the GIL: correct, only not parallel). Traces whose first
    slice it declines (ROCm's string fields, odd types) go to forked processes when
    `processes` (files over `PARALLEL_MIN_BYTES`, or workers asked for), else stay in threads."""
    import multiprocessing as mp
    from multiprocessing.pool import ThreadPool

    as_ranges = not _is_gzip(reader.path)  # workers can read it at any offset
    gen = _slices(reader, meta, as_ranges=as_ranges)
    path = str(reader.path)

    def bytes_of(piece) -> bytes:
        return _read_range(path, *piece) if isinstance(piece, tuple) else piece

    try:
        first = gen.send(None)
    except StopIteration:
        return
    probe = None
    if _scan is not None and not isinstance(first, _TailPiece) and not (
            isinstance(first, bytes) and first.startswith(b"\x00salvage")):
        data = bytes_of(first)
        probe = _scan_columns(data)
        if probe is not None:
            probe = _sized(probe, len(data))
    if probe is not None or not processes:
        pool_cm = ThreadPool(workers)  # declined and small: msgspec in threads, as serial, no fork
    else:
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        pool_cm = ctx.Pool(workers)

    with pool_cm as pool:
        in_flight: list[tuple[bytes | tuple[int, int], object]] = []
        carry = b""

        def drain(limit: int) -> None:
            nonlocal carry
            while len(in_flight) > limit:
                piece, fut = in_flight.pop(0)
                chunk = fut.get()
                if chunk is None:
                    carry = carry + bytes_of(piece)
                    continue
                if carry:
                    # The earlier slice was cut inside an event: decode the join here.
                    joined = carry + bytes_of(piece)
                    carry = b""
                    fixed = decode_to_columns(joined)
                    if fixed is None:
                        good, bad = _decode_one_by_one(joined)
                        if good:
                            merger.add(events_to_columns(good, mixed=True))
                        if bad:
                            meta.warnings.append(f"{bad} damaged event(s) were dropped")
                        continue
                    merger.add(fixed)
                    continue
                merger.add(chunk)
                if progress:
                    progress(min(reader.total, size * 20), size)

        pending = [first]
        if probe is not None:
            merger.add(probe)
            if progress:
                progress(min(reader.total, size * 20), size)
            pending = []
        send = True if probe is not None else None
        while True:
            if pending:
                piece = pending.pop()
            else:
                try:
                    piece = gen.send(send)
                except StopIteration:
                    break
            if isinstance(piece, tuple):
                in_flight.append((piece, pool.apply_async(decode_range, (path, *piece))))
                send = True
                drain(workers * 2)
                continue
            if piece.startswith(b"\x00salvage"):
                drain(0)
                if carry:
                    piece = b"\x00salvage" + carry + piece[len(b"\x00salvage"):]
                    carry = b""
                _handle_salvage(piece, merger, meta)
                send = None
                continue
            if isinstance(piece, _TailPiece):
                # Tail candidates must be judged now: decode in-process.
                drain(0)
                data = carry + piece if carry else piece
                chunk = decode_to_columns(data)
                send = chunk is not None
                if chunk is not None:
                    carry = b""
                    merger.add(chunk)
                continue
            in_flight.append((piece, pool.apply_async(decode_to_columns, (piece,))))
            send = True
            drain(workers * 2)
        drain(0)
        if carry:
            good, bad = _decode_one_by_one(carry)
            if good:
                merger.add(events_to_columns(good, mixed=True))
            if bad:
                meta.warnings.append(f"{bad} damaged event(s) were dropped")


_TRACE_SUFFIXES = (".json", ".json.gz")


def find_trace_files(path: str | os.PathLike) -> list[Path]:
    """The trace files at `path`: the file itself, or every `*.json[.gz]` in a directory
    (not recursive into run-directory internals beyond one level of `rank-*`)."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file or directory")
    if p.is_file():
        return [p]
    files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(_TRACE_SUFFIXES)
                   and f.name not in ("report.json", "env.json", "samples.json", "compile.json"))
    if not files:
        for sub in sorted(p.glob("rank-*")):
            files += find_trace_files(sub) if sub.is_dir() else []
    if not files:
        raise TraceError(f"{p}: no trace files (*.json or *.json.gz) in this directory")
    return files

