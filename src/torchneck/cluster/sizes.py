"""Message sizes of a rank's collectives, read from the trace's own bytes.

PyTorch (>= 2.1) records each collective's size in the args of its NCCL kernel and of the
host's `record_param_comms` op (`"Collective name"`, `"In msg nelems"`, `"dtype"`, `"Group
size"`). The trace loader keeps no such args, so this reads them in a pass of its own: a
literal search for `"Collective name"` over the decompressed stream, decoding only the few
events around each hit. A rank trace has at most thousands of collectives among its hundreds of
thousands of events, so the pass costs about what decompressing the file does.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import msgspec

NEEDLE = b'"Collective name"'
BLOCK_BYTES = 4 << 20
CARRY_BYTES = 64 << 10
"""Bytes kept from the end of a block for the next one: an event cut by the block boundary
(events are far smaller) is decoded whole with the next block."""
KEEP_MAX_BYTES = 64 << 20
"""Decompressed bytes kept by `Kept` at most: beyond it the file is read again (a second pass
costs about what keeping would save, without holding the document beside its table)."""
SCAN_MAX_BYTES = 512 << 20
"""Files larger than this (on disk) are not scanned: sizes are a detail, and the scan reads the
whole file a second time."""


class _Args(msgspec.Struct):
    collective: str = msgspec.field(default="", name="Collective name")
    nelems: int = msgspec.field(default=0, name="In msg nelems")
    dtype: str = ""
    group_size: int = msgspec.field(default=0, name="Group size")


class _Event(msgspec.Struct):
    ts: float = -1.0
    args: _Args = msgspec.field(default_factory=_Args)


_decode_event = msgspec.json.Decoder(_Event).decode


class Size(msgspec.Struct, frozen=True):
    nelems: int
    dtype: str
    group_size: int


def _open(path: Path):
    with open(path, "rb") as probe:
        gz = probe.read(2) == b"\x1f\x8b"
    if not gz:
        return open(path, "rb")
    try:
        from isal import igzip

        return igzip.open(path, "rb")
    except ImportError:  # pragma: no cover - isal is a dependency
        return gzip.open(path, "rb")


def _events_in(buf: bytes, start: int) -> tuple[list[tuple[float, Size]], int]:
    """Decode the events around each needle in `buf` from `start`; returns them and the offset
    from which the rest must be searched again with more bytes (an event not yet complete)."""
    found: list[tuple[float, Size]] = []
    pos = start
    while True:
        hit = buf.find(NEEDLE, pos)
        if hit < 0:
            return found, max(pos, len(buf) - CARRY_BYTES)  # the start of an event cut by the end
        args_open = buf.rfind(b"{", 0, hit)
        event_open = buf.rfind(b"{", 0, args_open) if args_open > 0 else -1
        args_close = buf.find(b"}", hit)
        event_close = buf.find(b"}", args_close + 1) if args_close >= 0 else -1
        if event_open < 0 or event_close < 0:
            return found, event_open if event_open >= 0 else pos
        try:
            ev = _decode_event(buf[event_open:event_close + 1])
        except (msgspec.DecodeError, msgspec.ValidationError):
            ev = None  # not the shape expected (a key after args...): no size for this one
        if ev is not None and ev.ts >= 0 and ev.args.collective:
            found.append((ev.ts, Size(ev.args.nelems, ev.args.dtype, ev.args.group_size)))
        pos = event_close + 1


class Kept:
    """A loader's `tap`: keeps the decompressed bytes of a small trace, so that its sizes are
    read without decompressing the file again (about a tenth of a small rank's task)."""

    def __init__(self, limit: int = KEEP_MAX_BYTES):
        self.blocks: list[bytes] = []
        self.size = 0
        self.limit = limit

    def __call__(self, block: bytes) -> None:
        self.size += len(block)
        if self.size <= self.limit:
            self.blocks.append(bytes(block))
        else:
            self.blocks.clear()

    def data(self, total: int) -> bytes | None:
        """The whole document, when every one of its `total` bytes passed here."""
        return b"".join(self.blocks) if self.size == total and self.size <= self.limit else None


def sizes_in(data: bytes) -> dict[float, Size]:
    """`collective_sizes` of a document already in memory."""
    return dict(_events_in(data, 0)[0])


def collective_sizes(path: str | Path) -> dict[float, Size]:
    """Each collective event's start (µs, as in the trace) -> its message size. Empty when the
    trace records no sizes, the file is too large to scan, or it cannot be read (the loader
    reports damage; sizes are only a detail)."""
    path = Path(path)
    out: dict[float, Size] = {}
    try:
        if path.stat().st_size > SCAN_MAX_BYTES:
            return out
        with _open(path) as stream:
            buf = b""
            while True:
                block = stream.read(BLOCK_BYTES)
                buf += block
                found, resume = _events_in(buf, 0)
                out.update(found)
                if not block:
                    return out
                buf = buf[resume:]  # what may hold an event not decoded yet
    except (OSError, EOFError, ValueError):
        return out
