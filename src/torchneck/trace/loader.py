"""Load a profiler trace (`.json` / `.json.gz`) into an `EventTable`, streamed in bounded memory.

The stages, each in its own module of this package:

- `source`: open the file and read its bytes, decompressed (gzip through python-isal);
- `detect`: where the events are (a JSON object's `traceEvents`, or a bare list);
- `slices`: cut the events array into slices of whole events, as it streams;
- `decode`: each slice into numpy columns (the native scanner, else msgspec), in worker threads
  or processes for large files;
- `normalise`: checked, typed values (categories, ids, GPU placement);
- `salvage`: the events of damaged regions;
- `ids` and `merge`: the slices' columns into one table with one string table, sorted by start;
- `metadata`: the document's other fields, and the rank a file name gives.

Only the current slices' Python objects exist at any time. Large files are decoded by a pool of
workers, in order; for an uncompressed file the main thread only plans cuts (reading a small
probe around each) and the workers read their own byte ranges.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import TraceError
from . import decode
from . import slices as slicing
from .allocator import return_freed_memory, return_large_frees_promptly
from .decode import _sized, decode_range, decode_to_columns
from .merge import Merger
from .metadata import rank_from_path
from .normalise import _spans_not_ops
from .salvage import salvage
from .slices import Damaged, Piece, TailPiece, slice_events
from .source import Source, read_range
from .table import Trace, TraceMeta

if TYPE_CHECKING:  # multiprocessing is imported when a trace is large enough for workers
    from multiprocessing.pool import AsyncResult

__all__ = ["find_trace_files", "load_trace", "rank_from_path", "return_freed_memory", "return_large_frees_promptly"]

THREAD_MIN_BYTES = 24 << 20
"""Uncompressed size from which slices are decoded by two worker threads (the native scanner
releases the GIL; measured on this 2-core VM: 62 MB 0.33 -> 0.22 s, 35 MB 0.21 -> 0.16 s,
10 MB even)."""

TRIM_MIN_BYTES = 32 << 20
"""Uncompressed size from which the loader gives freed memory back to the OS after decoding
(`return_freed_memory`): below it only a few MB are freed, and giving them back costs their
page faults again in the next load (a worker reading hundreds of small rank traces: ~3 ms of a
~16 ms load of a 1.4 MB trace, measured interleaved)."""

THREAD_RANGE_BLOCKS = 2
"""Slices (`slices.BLOCK_BYTES`) of an uncompressed file a worker thread decodes at once (read
where they lie, mapped): two, so the merging thread, the load's serial part, maps each distinct
string and thread half as often. `trace_speed.py` on 1 GB: 4 MB 2.29 s / 150 MB, 8 MB 2.15 s /
149 MB, 16 MB 2.18 s / 183 MB (3 runs each; the mapped pages of the ranges in flight count in the
RSS); 8 MB against 4 MB interleaved (`--against`, 4 pairs): x0.98 time, x1.01 memory."""

PARALLEL_MIN_BYTES = 96 << 20
"""Uncompressed size from which slices the native scanner declines (so msgspec decodes them,
holding the GIL) go to worker processes; below it the pool's start-up (~0.1 s) costs more than
it saves."""


def load_trace(
    path: str | os.PathLike,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
    keep_correlation: bool = False,
    tap: Callable[[bytes], None] | None = None,
    pool: RangePool | None = None,
) -> Trace:
    """Load one trace file into a `Trace`.

    Raises `TraceError` (one line, naming the file) when the file cannot be a trace; damaged
    regions that leave the rest sound become warnings in `trace.meta.warnings`.
    `progress(bytes_read, file_size)` is called after every slice. Correlation ids are
    resolved into `events.launcher` (`trace.launches`) and then dropped, unless
    `keep_correlation` (`events.correlation` is None otherwise). `tap(block)` sees the
    decompressed bytes read in order; with more than one worker an uncompressed file's middle
    is read by the workers at their offsets, past the tap (its blocks then fall short of
    `meta.uncompressed_bytes`). `pool` decodes an uncompressed file's byte ranges elsewhere
    (a Dask cluster's workers: `cluster.engine.RangePool`), the columns merged here.
    """
    path = Path(path)
    meta = TraceMeta(path=str(path))
    source = Source(path, meta.warnings, tap)
    size = meta.compressed_bytes = source.size
    merger = Merger(meta, expected_bytes=size if source.plain_file else 0, keep_correlation=keep_correlation)
    est_uncompressed = size * (10 if source.compressed else 1)
    forced = workers is not None
    if workers is None:
        workers = min(2, os.cpu_count() or 1) if est_uncompressed >= THREAD_MIN_BYTES else 1
    try:
        if pool is not None and source.plain_file:
            _load_parallel(source, meta, merger, pool.workers, progress, size, pool=pool)
        elif workers > 1:
            _load_parallel(source, meta, merger, workers, progress, size,
                           processes=forced or est_uncompressed >= PARALLEL_MIN_BYTES)
        else:
            _load_serial(source, meta, merger, progress, size)
    except TraceError:
        raise
    except (UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"{path}: not a readable profiler trace ({exc})") from None
    finally:
        meta.uncompressed_bytes = source.total
        source.close()
    large = source.total >= TRIM_MIN_BYTES
    if large:
        return_freed_memory()  # the decoding threads' freed slices, before the sort needs room
    events, python, memory = merger.finish()
    if not len(events):
        others = merger.others + len(python)
        if meta.warnings:  # say why: what was skipped, rather than the metadata's troubles
            reason = next((w for w in meta.warnings if "event" in w or "compressed" in w), meta.warnings[0])
            raise TraceError(f"{path}: no events could be read ({reason})")
        if others:
            raise TraceError(f"{path}: the trace holds no complete events (\"ph\": \"X\") to analyse, only "
                             f"{others} of other kinds (memory, flows, metadata...)")
        raise TraceError(f"{path}: the trace holds no events (empty \"traceEvents\")")
    _spans_not_ops(events)
    del merger
    if large:
        return_freed_memory()
    if meta.rank is None:
        meta.rank = rank_from_path(path)
    return Trace(events=events, python=python, memory=memory, meta=meta)


def _salvage(region: Damaged, merger: Merger) -> int:
    """Add what a damaged region holds; count what it did not (`salvage.py`). Returns how many
    of its bytes were used (the rest may be an event's start, for what follows)."""
    found = salvage(bytes(region), region.more, region.cut)
    for chunk in found.chunks:
        merger.add(chunk)
    merger.damaged += found.damaged
    merger.too_deep += found.too_deep
    return found.used


def _load_serial(source: Source, meta: TraceMeta, merger: Merger, progress, size: int) -> None:
    gen = slice_events(source, meta)
    send = None
    while True:
        try:
            piece = gen.send(send)
        except StopIteration:
            return
        if isinstance(piece, Damaged):
            send = _salvage(piece, merger)
            continue
        assert not isinstance(piece, tuple)  # offsets only when asked for (`as_ranges`)
        chunk = decode_to_columns(piece)
        send = chunk is not None
        if chunk is not None:
            merger.add(chunk)
        if progress:
            progress(min(source.total, size * 20), size)


class RangePool(Protocol):
    """Decodes byte ranges of a file somewhere else: `apply_async(decode_range, (path, start,
    stop)).get()`, as a `multiprocessing` pool does, `workers` at a time, `range_bytes` each."""

    workers: int
    range_bytes: int

    def apply_async(self, fn: Callable, args: tuple) -> Any: ...

    def __enter__(self) -> RangePool: ...

    def __exit__(self, *exc) -> None: ...


def _load_parallel(source: Source, meta: TraceMeta, merger: Merger, workers: int, progress, size: int,
                   processes: bool = True, pool: RangePool | None = None) -> None:
    """Decode slices in worker threads (native scanner) or processes (msgspec). Slices are cut
    optimistically; one that fails in a worker (a false boundary) is re-decoded together with
    the following slice, in order; slices that keep failing (over `RETRY_BLOCKS` blocks of them)
    are salvaged event by event.

    Threads when the native scanner takes the first slice: it scans with the GIL released, so
    threads run in parallel without pickling every column back from a process (a third of the
    load time) and without a second interpreter's memory. A slice it declines later is decoded
    by msgspec in its thread (holding the GIL: correct, only not parallel). Traces whose first
    slice it declines (ROCm's string fields, odd types) go to forked processes when
    `processes` (files over `PARALLEL_MIN_BYTES`, or workers asked for), else stay in threads.
    A `pool` given (a cluster's workers) decodes every range but the first, whatever the probe."""
    import multiprocessing as mp
    from multiprocessing.pool import ThreadPool

    gen = slice_events(source, meta, as_ranges=source.plain_file,  # ranges: workers read them at any offset
                       range_bytes=pool.range_bytes if pool is not None
                       else slicing.BLOCK_BYTES * THREAD_RANGE_BLOCKS)
    path = str(source.path)

    def bytes_of(piece: Piece) -> bytes:
        return read_range(path, *piece) if isinstance(piece, tuple) else piece

    try:
        first = gen.send(None)
    except StopIteration:
        return
    probe = None  # a cluster's pool takes the first range too: the workers start at once
    if pool is None and decode.scans_natively() and not isinstance(first, (TailPiece, Damaged)):
        data = bytes_of(first)
        probe = decode._scan_columns(data)
        if probe is not None:
            probe = _sized(probe, len(data))
    pool_cm: Any
    if pool is not None:
        pool_cm = pool
    elif probe is not None or not processes:
        pool_cm = ThreadPool(workers)  # declined and small: msgspec in threads, as serial, no fork
    else:
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        pool_cm = ctx.Pool(workers)

    with pool_cm as pool:
        in_flight: list[tuple[Piece, AsyncResult]] = []
        carry = b""  # slices that did not decode, waiting to be joined with the next

        def drain(limit: int) -> None:
            nonlocal carry
            while len(in_flight) > limit:
                piece, fut = in_flight.pop(0)
                chunk = fut.get()
                if chunk is None:
                    carry = carry + bytes_of(piece)
                    if len(carry) > slicing.BLOCK_BYTES * slicing.RETRY_BLOCKS:  # not a false cut: damage
                        carry = carry[_salvage(Damaged(carry), merger):]
                    continue
                if carry:
                    # The earlier slice was cut inside an event: decode the join here.
                    joined = carry + bytes_of(piece)
                    carry = b""
                    fixed = decode_to_columns(joined)
                    if fixed is None:
                        carry = joined[_salvage(Damaged(joined), merger):]
                        continue
                    merger.add(fixed)
                    continue
                merger.add(chunk)
                if progress:
                    progress(min(source.total, size * 20), size)

        pending = [first]
        if probe is not None:
            merger.add(probe)
            if progress:
                progress(min(source.total, size * 20), size)
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
            if isinstance(piece, Damaged):
                drain(0)
                if carry:
                    piece = Damaged(carry + piece, piece.more, piece.cut)
                carry = piece[_salvage(piece, merger):]  # a last piece left over waits here (all used: b"")
                send = None
                continue
            if isinstance(piece, TailPiece):
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
            _salvage(Damaged(carry, more=False), merger)


_TRACE_SUFFIXES = (".json", ".json.gz")
_RUN_DIR_FILES = ("report.json", "env.json", "samples.json", "compile.json", "run.json", "report-compile.json",
                  "bisect.json")
"""The JSON files `torchneck run` writes beside its trace (not traces)."""


def find_trace_files(path: str | os.PathLike) -> list[Path]:
    """The trace files at `path`: the file itself, or every `*.json[.gz]` in a directory
    (not recursive into run-directory internals beyond one level of `rank-*`)."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file or directory")
    if not p.is_dir():  # a file, a pipe, a device: the loader judges it
        return [p]
    try:
        files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(_TRACE_SUFFIXES)
                       and f.name not in _RUN_DIR_FILES)
    except OSError as exc:
        raise TraceError(f"{p}: cannot be listed ({exc.strerror or exc})") from None
    if not files:
        for sub in sorted(p.glob("rank-*")):
            files += find_trace_files(sub) if sub.is_dir() else []
    if not files:
        raise TraceError(f"{p}: no trace files (*.json or *.json.gz) in this directory")
    return files
