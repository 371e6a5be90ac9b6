"""Format detection: where a trace's events are in its JSON.

Kineto writes a JSON object whose `traceEvents` member is the array of events, other members
(metadata) before and after it; some tools write the array alone (a bare list). Only the start of
the file is read here, up to the array's first element; the array itself is streamed
(`slices.py`), and the object's other members are decoded afterwards (`metadata.py`).
"""

from __future__ import annotations

import re

from ..errors import TraceError
from .source import Source
from .table import TraceMeta

_HEADER_LIMIT = 64 << 20
"""Bytes read before giving up on finding the events array (a trace's metadata before it is KBs)."""
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_KEY_OVERLAP = 4096
"""Bytes searched again for the key with the next block, for a key that straddles the two."""
FIRST_HEAD_BLOCK = 64 << 10
"""Bytes read first: a Kineto trace's members before the array are a few KB, and what is read
here is copied a few times (a 1 MB first block cost ~1 ms of a small rank's ~6 ms load)."""
HEAD_BLOCK = 1 << 20
"""Bytes read at once after that, while looking for the array."""
BLANKS_BLOCK = 4 << 20
"""Bytes read at once while skipping blanks after the array's `[`."""


def find_events_array(source: Source, meta: TraceMeta) -> tuple[bytes, bytearray]:
    """(the document up to and including `"traceEvents":` (b"" for a bare list), the bytes after
    the array's `[`, leading blanks skipped). Sets `meta.format`. Raises `TraceError` (one line)
    when the file is empty or not a trace. Blanks before the document or the first event (any
    amount) are read a block at a time and dropped."""
    head = bytearray()
    block_size = FIRST_HEAD_BLOCK
    while True:
        block = source.read(block_size)
        block_size = HEAD_BLOCK
        if not head:
            block = block.lstrip()  # blanks before the document
        searched = max(0, len(head) - _KEY_OVERLAP)
        head += block
        if head[:1] == b"[":
            meta.format = "list"
            header, start = b"", 1
            break
        if head[:1] not in (b"{", b""):
            raise TraceError(f"{source.path}: not a profiler trace (it is not JSON)")
        m = _TRACE_EVENTS_KEY.search(head, searched)
        if m:
            start = m.end()
            header = bytes(head[: m.end() - 1])  # up to and including `"traceEvents":`
            break
        if not block and source.eof or len(head) > _HEADER_LIMIT:
            if not head:
                if meta.warnings:  # damaged before anything decompressed
                    raise TraceError(f"{source.path}: nothing could be read ({meta.warnings[0]})")
                raise TraceError(f"{source.path}: the file is empty")
            if len(head) > _HEADER_LIMIT:
                raise TraceError(f"{source.path}: not a profiler trace (no \"traceEvents\" array in its first "
                                 f"{_HEADER_LIMIT >> 20} MB)")
            raise TraceError(f"{source.path}: not a profiler trace (no \"traceEvents\" array)")
    buf = bytearray(head[start:].lstrip())
    del head
    while not buf and not source.eof:  # blanks after `[`: dropped a block at a time
        buf = bytearray(source.read(BLANKS_BLOCK).lstrip())
    return header, buf
