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
HEAD_BLOCK = 1 << 20
"""Bytes read at once while looking for the array."""
BLANKS_BLOCK = 4 << 20
"""Bytes read at once while skipping blanks after the array's `[`."""


def find_events_array(source: Source, meta: TraceMeta) -> tuple[bytes, bytearray]:
    """(the document up to and including `"traceEvents":` (b"" for a bare list), the bytes after
    the array's `[`, leading blanks skipped). Sets `meta.format`. Raises `TraceError` (one line)
    when the file is empty or not a trace."""
    head = bytearray()
    while True:
        block = source.read(HEAD_BLOCK)
        head += block
        stripped = head.lstrip()
        if stripped[:1] == b"[":
            meta.format = "list"
            start = len(head) - len(stripped) + 1
            header = b""
            break
        if stripped[:1] not in (b"{", b""):
            raise TraceError(f"{source.path}: not a profiler trace (it is not JSON)")
        m = _TRACE_EVENTS_KEY.search(head)
        if m:
            start = m.end()
            header = bytes(head[: m.end() - 1])  # up to and including `"traceEvents":`
            break
        if not block or len(head) > _HEADER_LIMIT:
            if not head.strip():
                raise TraceError(f"{source.path}: the file is empty")
            raise TraceError(f"{source.path}: not a profiler trace (no \"traceEvents\" array)")
    buf = bytearray(head[start:])
    del head
    # Skip whitespace and detect an empty array.
    while True:
        lead = buf.lstrip()
        if lead or source.eof:
            break
        buf += source.read(BLANKS_BLOCK)
    return header, bytearray(buf.lstrip())
