"""Decoding: one slice of the events array (bytes of comma-separated events) into numpy columns.

Two decoders give the same columns (tests/test_scan.py): the native scanner (`_scan.c`, built by
`pip install` where a C compiler exists) writes the fields of ordinary slices straight into
column buffers, with no Python object per event; anything it declines (unusual types, malformed
JSON, ROCm's string fields) is decoded by msgspec into structs that declare only the fields
torchneck reads (`schema.py`), strictly typed, else loosely, and turned into columns here. The
functions named `decode_*` are what worker threads and processes run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter

import msgspec
import numpy as np

from .ids import Interner, distinct_arg_pairs, distinct_threads
from .normalise import (
    TS_LIMIT_US,
    _float_column,
    _gpu_placement,
    _int_column,
    _rows_with_args,
    _x_dict,
    out_of_range,
)
from .schema import EMPTY_ARGS, EVENT_LIST_DECODER, LOOSE_EVENT_LIST_DECODER, Event, LooseEvent
from .source import map_range, read_range, read_range_reused
from .table import GradMode, normalise_category

try:  # the optional C scanner (setup.py); without it the msgspec path gives the same columns
    from . import _scan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - built without a C compiler
    _scan = None
if os.environ.get("TORCHNECK_PURE_PYTHON"):  # to compare the two, or to sidestep the scanner
    _scan = None

_WS = b" \t\r\n"


def scans_natively() -> bool:
    """Whether the native scanner is built (and not turned off)."""
    return _scan is not None


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
    out_of_range: int = 0  # complete events with a start or duration out of range (`normalise.out_of_range`)
    memory_out_of_range: int = 0  # `[memory]` events with a start out of range, dropped
    replaced_utf8: int = 0  # invalid UTF-8 sequences replaced by U+FFFD
    source_bytes: int = 0
    threads: tuple[np.ndarray, np.ndarray] | None = None  # (distinct pid<<32|tid, per row: which)
    arg_pairs: tuple[np.ndarray, np.ndarray] | None = None  # (distinct shapes, types pairs; per row: which)
    grad: GradMode | None = None  # complete events recorded in grad mode, None if none
    # found by the worker (`_sized`), so the merging thread, the load's serial part, does not:
    sparse_rows: dict[str, np.ndarray] | None = None  # rows moving bytes ("nbytes"), with a stack ("stack")
    bounds: dict[str, tuple[int, int]] | None = None  # (min, max) of the raw integer columns the merge narrows
    longest: int = -1  # the longest string's length (-1: not measured)




def _decode_slice(data: bytes) -> list[Event] | list[LooseEvent] | None:
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
    except (msgspec.DecodeError, RecursionError):  # not JSON, or nested deeper than msgspec goes
        return None
    try:
        return LOOSE_EVENT_LIST_DECODER.decode(wrapped)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


_get_args = attrgetter("args")


def events_to_columns(events: list, mixed: bool = False) -> ChunkColumns:
    """Turn decoded events into numpy columns; the only per-event Python work in the loader.
    `mixed`: the list may hold both typed and loosely typed events (pieces of a damaged region
    decoded one by one), so the tolerant conversion is used."""
    strings = Interner()
    xs, mems, meta_events, flows, unknown = _split_phases(events)
    try:
        if not (xs and type(xs[0]) is Event and not mixed):
            raise OverflowError
        x, negative, out = _strict_x(xs, strings)
    except OverflowError:  # also an id beyond int64 in a typed event (msgspec reads any integer)
        strings = Interner()
        x, negative, out = _loose_x(xs, strings)
    mem, dropped = _memory_columns(mems, strings)
    chunk = ChunkColumns(strings.strings, x, mem, meta_events, flows, unknown, negative, out, dropped)
    chunk.grad = GradMode.of([getattr(e.args, "sequence", None) for e in xs if e.args is not None])
    return chunk


WINDOW_END = "Record Window End"
"""Kineto's instant at the moment the profiler stopped: the ops still running then end there."""


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
                elif e.name == WINDOW_END and e.ts == e.ts:  # not NaN
                    meta_events.append(("window_end", "", "", e.ts))
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


def _memory_columns(mems: list, strings: Interner) -> tuple[dict[str, np.ndarray], int]:
    """The `[memory]` events' columns, and how many were dropped for a time out of range."""
    ts = _float_column([e.ts for e in mems], float("nan"))
    keep = np.abs(ts) < TS_LIMIT_US
    dropped = len(mems) - int(np.count_nonzero(keep))
    if dropped:
        mems = list(compress(mems, keep.tolist()))
        ts = ts[keep]
    margs = [e.args for e in mems]
    return {
        "ts": ts,
        "pid": strings.ids(_texts([e.pid for e in mems])),
        "tid": strings.ids(_texts([e.tid for e in mems])),
        "nbytes": _int_column([a.mem_bytes for a in margs], 0, np.int64),
        "total_allocated": _int_column([a.total_allocated for a in margs], -1, np.int64),
        "total_reserved": _int_column([a.total_reserved for a in margs], -1, np.int64),
        "device_type": _int_column([a.device_type for a in margs], 0, np.int8),
        "device_id": _int_column([a.device_id for a in margs], -1, np.int16),
        "addr": _int_column([a.addr for a in margs], 0, np.int64),
    }, dropped


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
    n, raw, entries, spans, flows, decoded, thread_pairs, (grad_rows, seq_lo, seq_hi) = found
    if None in decoded and not _unescape_scanned(data, np.frombuffer(entries, dtype=np.int64).reshape(-1, 3),
                                                 decoded, start):
        return None
    strings = Interner()
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
    x, negative, out = _native_x(cols, strings)
    mem, dropped = _memory_columns(mems, strings)
    chunk = ChunkColumns(strings.strings, x, mem, meta_events, flows, unknown, negative, out, dropped)
    chunk.threads = (np.frombuffer(thread_pairs, dtype=np.int64), thread)
    if grad_rows:
        chunk.grad = GradMode(grad_rows, seq_lo, seq_hi)
    return chunk


_SCANNED_DTYPES = {**dict.fromkeys(("cat", "name", "pid", "tid", "thread", "dims", "types", "stack"), np.int32),
                   "ts": np.float64, "dur": np.float64, "correlation": np.int64,
                   "device": np.int64, "stream": np.int64, "nbytes": np.int64}


def _native_x(cols: dict[str, np.ndarray], strings: Interner) -> tuple[dict, int, int]:
    """The scanner's raw columns -> the same columns `_strict_x` makes: categories coded, args
    kept only on the rows that carry them (device/stream/bytes on GPU events, shapes on host
    ops)."""
    table = strings.strings
    cat_ids = cols["cat"]
    lookup = np.zeros(len(table), dtype=np.int8)
    for i in np.unique(cat_ids).tolist():
        lookup[i] = normalise_category(table[i])
    cats = lookup[cat_ids]
    ts, dur64, out = out_of_range(cols["ts"], cols["dur"])
    dur = dur64.astype(np.float32)
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
    return _x_dict(ts, dur, cats, cols["name"], pid, tid, cols["correlation"], device, stream, shapes,
                   types, nbytes, stack), negative, out


def _strict_x(xs: list, strings: Interner) -> tuple[dict, int, int]:
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
    ts, dur, out = out_of_range(ts, dur)
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
                   nbytes, stack), negative, out


_get_ph, _get_cat, _get_ts, _get_dur, _get_name = map(attrgetter, ("ph", "cat", "ts", "dur", "name"))
_get_pid_tid = attrgetter("pid", "tid")
_get_corr, _get_device, _get_stream, _get_nbytes = map(attrgetter, ("correlation", "device", "stream", "nbytes"))
_get_types, _get_stack = attrgetter("input_type"), attrgetter("call_stack")


def _stack_ids(stacks: list, strings: Interner) -> np.ndarray:
    """Ids of "Call stack" strings; -1 for an empty or absent one (or, in the loose path, one
    that is not a string)."""
    ids = strings.ids([s if isinstance(s, str) and s else "" for s in stacks])
    ids[ids == strings.index.get("", -2)] = -1
    return ids


def _get_dims(args) -> msgspec.Raw:
    """"Input Dims", or PyTorch 1.8's "Input dims" where that is absent."""
    return args.input_dims if args.input_dims else args.input_dims_old


def _loose_x(xs: list, strings: Interner) -> tuple[dict, int, int]:
    """Columns from loosely typed events (any JSON type in any field; an object or a list where
    a name or an id belongs reads as its JSON text)."""
    n = len(xs)
    raw_cats = _texts(list(map(attrgetter("cat"), xs)))
    cat_codes = {c: int(normalise_category(c)) for c in dict.fromkeys(raw_cats)}
    cats = np.fromiter(map(cat_codes.__getitem__, raw_cats), dtype=np.int8, count=n)
    ts = _float_column(list(map(attrgetter("ts"), xs)), float("nan"))
    dur = _float_column(list(map(attrgetter("dur"), xs)), 0.0)
    ts, dur, out = out_of_range(ts, dur)
    negative = int(np.count_nonzero(dur < 0))
    if negative:
        dur[dur < 0] = 0.0
    name = strings.ids(_texts(list(map(attrgetter("name"), xs))))
    pid_arr = strings.ids(_texts(list(map(attrgetter("pid"), xs))))
    tid_arr = strings.ids(_texts(list(map(attrgetter("tid"), xs))))
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
    return x, negative, out


def _texts(values: list) -> list:
    """`values` with each object or list (unhashable, not a name) replaced by its JSON text."""
    if all(type(v) is not list and type(v) is not dict for v in values):
        return values
    return [msgspec.json.encode(v).decode() if isinstance(v, (list, dict)) else v for v in values]


def decode_to_columns(data: bytes) -> ChunkColumns | None:
    """Worker entry point: decode one slice; None if it does not decode (caller merges).
    The native scanner takes the slice when it is built and the slice is ordinary; the typed
    msgspec decoder otherwise (same columns)."""
    data = bytes(data)
    try:
        chunk = _scan_columns(data) if _scan is not None else None
        return _python_columns(data) if chunk is None else _sized(chunk, len(data))
    except UnicodeDecodeError:  # invalid UTF-8 in a string: replaced, counted, decoded again
        fixed, replaced = repaired_utf8(data)
        chunk = decode_to_columns(fixed)
        if chunk is not None:
            chunk.replaced_utf8 = replaced
        return chunk


def repaired_utf8(data: bytes) -> tuple[bytes, int]:
    """`data` with each invalid UTF-8 sequence replaced by U+FFFD, and how many were."""
    text = data.decode("utf-8", "replace")
    return text.encode("utf-8"), text.count("\ufffd") - data.count("\ufffd".encode())


def _python_columns(data: bytes) -> ChunkColumns | None:
    events = _decode_slice(data)
    return None if events is None else _sized(events_to_columns(events), len(data))


def _sized(chunk: ChunkColumns, source_bytes: int) -> ChunkColumns:
    """Finish a worker's chunk: its size, and its (pid, tid) pairs (found by the scanner, else
    here, in the worker), so the merging thread only maps the few distinct pairs."""
    chunk.source_bytes = source_bytes
    x = chunk.x
    if chunk.threads is None:  # the scanner finds them as it goes
        chunk.threads = distinct_threads(x["pid"], x["tid"])
    chunk.arg_pairs = distinct_arg_pairs(x["shapes"], x["types"])
    chunk.sparse_rows = {"nbytes": np.flatnonzero(x["nbytes"]), "stack": np.flatnonzero(x["stack"] >= 0)}
    if len(x["ts"]):
        chunk.bounds = {k: (int(x[k].min()), int(x[k].max())) for k in RAW_NARROWED}
    chunk.longest = max(map(len, chunk.strings), default=0)
    return chunk


RAW_NARROWED = ("correlation", "device", "stream")
"""The columns `merge` stores narrowed that a chunk holds as they will be stored (the others,
string and thread ids, are renumbered by the merge, which knows their bounds)."""


def decode_range(path: str, start: int, stop: int) -> ChunkColumns | None:
    """Worker entry point for uncompressed files: read and decode bytes [start, stop). The
    scanner reads the file's pages where they lie (a read-only mapping of just this range,
    unmapped when done) instead of a copy: copying was ~7% of the load's CPU."""
    if _scan is None:
        return decode_to_columns(read_range(path, start, stop))
    try:
        return _scan_range(path, start, stop)
    except UnicodeDecodeError:  # repaired on a copy (`decode_to_columns`)
        return decode_to_columns(read_range(path, start, stop))


def _scan_range(path: str, start: int, stop: int) -> ChunkColumns | None:
    try:
        mapped, skip = map_range(path, start, stop)
    except (OSError, ValueError):  # no mmap here (some file systems): read a copy
        buf, n = read_range_reused(path, start, stop)
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
