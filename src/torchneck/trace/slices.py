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
from .metadata import document_closes, read_top_level
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

RETRY_BLOCKS = 4
"""A slice that fails to decode is cut again further on (its cut may have fallen inside a
string) until this many blocks are buffered; then it holds damaged events, and goes out as a
`Damaged` region. Bounds the buffer, and the decoding repeated on a damaged file."""

MAX_EVENT_BYTES = 32 << 20
"""The largest event read. Real events are under a few hundred KB (a kernel name of 5 KB, shapes
of a few KB); one with a 16 MB name is still read (the name shortened: `normalise.py`). A larger
one (8 GB of one string, in a gzip bomb) is skipped up to the next event, with a warning, so the
buffer never holds more."""

TRAILER_LIMIT = 64 << 20
"""Bytes of the document after the events array that are kept (its metadata is KBs)."""


class TailPiece(bytes):
    """A slice that may end the events array: judged (decoded) in order, in the main process."""


class Damaged(bytes):
    """A region that does not decode as a whole: salvaged event by event (`salvage.py`); the
    driver sends back how many of its bytes were used. `more`: data follows it, so a last piece
    that does not decode may be the start of an event cut at a false boundary: it is left for
    what follows (not used). `cut`: it ends where the data was cut short, so its last piece is
    the cut event, not a damaged one."""

    more: bool
    cut: bool

    def __new__(cls, data: bytes, more: bool = True, cut: bool = False):
        self = super().__new__(cls, data)
        self.more, self.cut = more, cut
        return self


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


def slice_events(source: Source, meta: TraceMeta, as_ranges: bool = False,
                 range_bytes: int = BLOCK_BYTES) -> Generator[Piece, bool | int | None, None]:
    """Yield byte slices each holding whole events separated by commas; parse the top level.
    With `as_ranges` (an uncompressed file), most of the array comes as (start, stop) file
    offsets instead of bytes, about `range_bytes` each. The caller sends back whether each slice
    decoded (for a `Damaged` region: how many of its bytes the salvage used).

    Memory stays bounded whatever the bytes: runs of blanks are dropped a block at a time, a
    slice that still fails once `RETRY_BLOCKS` blocks are buffered goes out as a `Damaged`
    region (its events are salvaged one by one), and an event over `MAX_EVENT_BYTES` is skipped."""
    header, buf = find_events_array(source, meta)
    trailer = b""
    if buf[:1] == b"]":
        trailer = _read_trailer(source, bytes(buf[1:]), meta)
        buf = bytearray()
    if as_ranges and buf:
        # Plain file, parallel decoding: hand out (start, stop) offsets cut at event boundaries
        # found in small probes; workers read their own bytes. The tail goes on in byte mode.
        pos = source.total - len(buf)
        size = source.size
        while pos + range_bytes + BLOCK_BYTES < size:
            probe_end = pos + range_bytes
            probe_start = max(pos + 1, probe_end - _PROBE_BYTES)
            window = source.pread(probe_start, probe_end - probe_start)
            cut = _last_boundary(window, len(window))
            if cut is None:
                break
            nxt = probe_start + cut[1]
            yield (pos, nxt)
            pos = source.total = nxt  # progress
        source.seek(pos)
        buf = bytearray()
        buf += source.read(BLOCK_BYTES)
    failures = 0
    oversized = 0
    while buf:
        if not source.eof and len(buf) < BLOCK_BYTES * (1 + failures):
            block = source.read(BLOCK_BYTES)
            if block:
                if block.isspace():  # blanks (a run of them can be gigabytes): one is enough
                    if buf[-1:].isspace():
                        continue
                    block = b" "
                buf += block
                continue
        if not source.eof:
            cut = _last_boundary(buf, len(buf))
            if cut is None:
                if len(buf) <= MAX_EVENT_BYTES:
                    failures += 1  # one event over several blocks: read on
                    continue
                oversized += 1
                buf, closed = _skip_event(buf, source)
                failures = 0
                if closed:
                    trailer = _read_trailer(source, bytes(buf[1:]), meta)
                    buf = bytearray()
                    break
                continue
            _end, nxt = cut
            with memoryview(buf) as view:
                piece = view[:nxt].tobytes()  # includes the separating comma: slices concatenate
            ok = yield piece
            if ok is False:
                failures += 1
                if len(buf) < BLOCK_BYTES * RETRY_BLOCKS:
                    continue  # maybe a cut inside a string: read more and cut further on
                used = yield Damaged(piece)  # damaged events: salvaged one by one, the rest goes on
                nxt = used if isinstance(used, int) and 0 < used <= nxt else nxt
            failures = 0
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
            used = cut[1]
            if ok is False:
                salvaged = yield Damaged(tail[:cut[1]])
                used = salvaged if isinstance(salvaged, int) and 0 < salvaged <= used else used
            tail = tail[used:]
        closed = False
        ends = list(_array_ends(tail))
        for pos in ends:
            ok = yield TailPiece(tail[:pos])
            if ok is not False:
                trailer = tail[pos + 1:]
                closed = True
                break
        if not closed:  # damaged events before a sound end of the array, or a trace cut short
            end = _end_before_sound_trailer(tail, ends, header, meta)
            if end is not None:
                yield Damaged(tail[:end], more=False)
                trailer = tail[end + 1:]
            else:
                meta.warnings.append("the trace ends early (truncated JSON); events up to the cut were read")
                yield Damaged(tail, more=False, cut=True)
    if oversized:
        meta.warnings.append(f"{_count(oversized, 'event')} over {MAX_EVENT_BYTES >> 20} MB (a huge string?) "
                             f"{'was' if oversized == 1 else 'were'} skipped")
    if meta.format == "object":
        read_top_level(meta, header, trailer)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


_NEXT_EVENT = re.compile(rb"\}\s*(?:,\s*\{|\])")
_RESYNC_OVERLAP = 4096
"""Bytes of the previous block searched again with the next, for a boundary that straddles them."""


def _skip_event(buf: bytearray, source: Source) -> tuple[bytearray, bool]:
    """`buf` holds over `MAX_EVENT_BYTES` from the start of one event, with no boundary: drop
    bytes up to the next event boundary (or the array's end). Returns the bytes from there (from
    the next event's `{`, or from the `]`) and whether it is the array's end; empty at the end
    of the data."""
    data = bytes(buf[-_RESYNC_OVERLAP:])
    del buf[:]
    while True:
        m = _NEXT_EVENT.search(data)
        if m:
            return bytearray(data[m.end() - 1:]), data[m.end() - 1:m.end()] == b"]"
        block = source.read(BLOCK_BYTES)
        if not block:
            return bytearray(), False
        data = data[-_RESYNC_OVERLAP:] + block


def _end_before_sound_trailer(tail: bytes, ends: list[int], header: bytes, meta: TraceMeta) -> int | None:
    """Where the events array ends when the events before it do not all decode: the last
    candidate `]` (of `_END_CANDIDATES`; after a `}`, else any) after which the document's rest
    is sound (nothing but blanks after a bare list; the object's other members after
    `traceEvents`)."""
    others = [m.start() for m in re.finditer(rb"\]", tail)]
    for pos in ends[::-1][:_END_CANDIDATES] + others[::-1][:_END_CANDIDATES]:
        rest = tail[pos + 1:]
        if meta.format == "list" and not rest.strip() or meta.format == "object" and document_closes(header, rest):
            return pos
    return None


_END_CANDIDATES = 8
"""Candidate ends of the array tried when the tail does not decode: the real one is among the
last few `}]` (one inside an event's args is rare)."""


def _read_trailer(source: Source, first: bytes, meta: TraceMeta) -> bytes:
    """The rest of the document after the events array, up to `TRAILER_LIMIT` bytes."""
    parts, size = [first], len(first)
    while size <= TRAILER_LIMIT:
        block = source.read(BLOCK_BYTES)
        if not block:
            return b"".join(parts)
        if block.isspace():
            continue
        parts.append(block)
        size += len(block)
    meta.warnings.append(f"what follows the events array beyond {TRAILER_LIMIT >> 20} MB was not read")
    return b"".join(parts)[:TRAILER_LIMIT]
