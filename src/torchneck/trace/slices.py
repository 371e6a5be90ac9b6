"""Cutting the `traceEvents` array into slices of whole events, streamed, in bounded memory.

The array is cut at event boundaries (`}` `,` `{` with only whitespace between), found by a
search backwards from the end of each block, not by parsing: a cut that falls inside a string or
a nested object makes that slice fail to decode, and the driver says so (`ok = yield piece` is
False), so more bytes are read and the slice is cut again further on: a false boundary can cost
time, never a wrong event. For an uncompressed file, most of the array goes out as (start,
stop) file offsets instead, cut where small probes of the file find a boundary, so that worker
threads read their own bytes. At the end of the data the array's closing `]` is found by
decoding candidate tails (`TailPiece`); what follows it is the rest of the document (metadata).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator

from .detect import find_events_array
from .metadata import read_top_level
from .source import Source
from .table import TraceMeta

BLOCK_BYTES = 4 << 20
"""Bytes decoded at once. 4 MB is ~15k events: large enough that per-call overhead vanishes
(~250 slices a GB), small enough that the slices in flight and the per-thread read buffers
(two workers, a few slices each) stay a few tens of MB, and msgspec's structs (~10x the
bytes) far below 200 MB."""

_TAIL_BYTES = 256 << 10
"""The end of the events array is found by decoding the last slice in the main process; it is
kept this small (the rest of the tail goes to the workers) so its Python objects stay few."""
_PROBE_BYTES = 256 << 10
"""Bytes read around a planned cut to find an event boundary (events are far smaller)."""
_WS = b" \t\r\n"


class TailPiece(bytes):
    """A slice that may end the events array: judged (decoded) in order, in the main process."""


class Damaged(bytes):
    """A region that does not decode as a whole (the end of a truncated trace): salvaged event
    by event (`salvage.py`)."""


Piece = bytes | tuple[int, int]
"""What `slices` yields: bytes (a `TailPiece`, a `Damaged` region, or an ordinary slice), or the
(start, stop) offsets of a slice of a plain file."""


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


def slice_events(source: Source, meta: TraceMeta, as_ranges: bool = False) -> Generator[Piece, bool | None, None]:
    """Yield byte slices each holding whole events separated by commas; parse the top level.
    With `as_ranges` (an uncompressed file), most of the array comes as (start, stop) file
    offsets instead of bytes. The caller sends back whether each slice decoded."""
    header, buf = find_events_array(source, meta)
    trailer = b""
    if buf[:1] == b"]":
        trailer = bytes(buf[1:]) + _drain(source)
        buf = bytearray()
    if as_ranges and buf and buf[:1] != b"]":
        # Plain file, parallel decoding: hand out (start, stop) offsets cut at event boundaries
        # found in small probes; workers read their own bytes. The tail goes on in byte mode.
        pos = source.total - len(buf)
        size = source.size
        while pos + 2 * BLOCK_BYTES < size:
            probe_end = pos + BLOCK_BYTES
            window = source.pread(probe_end - _PROBE_BYTES, _PROBE_BYTES)
            cut = _last_boundary(window, len(window))
            if cut is None:
                break
            nxt = probe_end - _PROBE_BYTES + cut[1]
            yield (pos, nxt)
            pos = source.total = nxt  # progress
        source.seek(pos)
        buf = bytearray()
        buf += source.read(BLOCK_BYTES)
    pending_failures = 0
    while buf:
        if not source.eof and len(buf) < BLOCK_BYTES * (1 + pending_failures):
            block = source.read(BLOCK_BYTES)
            if block:
                buf += block
                continue
        if not source.eof:
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
            ok = yield TailPiece(tail[:pos])
            if ok is not False:
                trailer = tail[pos + 1:]
                closed = True
                break
        if not closed:
            meta.warnings.append("the trace ends early (truncated JSON); events up to the cut were read")
            yield Damaged(tail)
    if meta.format == "object":
        read_top_level(meta, header, trailer)


def _drain(source: Source) -> bytes:
    parts = []
    while True:
        block = source.read(BLOCK_BYTES)
        if not block:
            return b"".join(parts)
        parts.append(block)
