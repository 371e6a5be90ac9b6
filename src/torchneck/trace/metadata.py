"""What a trace says about itself outside its events: the top-level fields of the JSON document
(`schemaVersion`, `distributedInfo`, `deviceProperties`, `baseTimeNanoseconds`, ...) and the rank
its file name gives.

The document around the events array is decoded on its own: the part before the array (its
`header`, kept by `detect.find_events_array`) and the part after it (`trailer`), with the array
itself replaced by `[]`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import msgspec

from .schema import ANY_DECODER
from .table import TraceMeta


def read_top_level(meta: TraceMeta, header: bytes, trailer: bytes) -> None:
    """Fill `meta` from the document's top-level fields. Bytes after the end of the document are
    ignored with a warning; a damaged part after the events is ignored with a warning (unless the
    trace is already known to be truncated), the fields before them still read."""
    top = _decoded(header + b"[]" + trailer)
    if top is None:
        end = _document_end(header, trailer)
        if end is not None:
            top = _decoded(header + b"[]" + trailer[:end])
            meta.warnings.append("bytes after the end of the JSON document were ignored")
        else:
            top = _decoded(header + b"[]}") or {}
            if not any("truncated" in w for w in meta.warnings):
                meta.warnings.append("the JSON after the events is damaged; metadata there was ignored")
    if isinstance(top, dict):
        _apply_top_level(meta, top)


def document_closes(header: bytes, trailer: bytes) -> bool:
    """Whether `trailer` is the sound rest of the document that `header` begins (the events
    array between them); when the header itself is damaged, whether it is the sound rest of
    some document."""
    return isinstance(_decoded(header + b"[]" + trailer), dict) or \
        isinstance(_decoded(b'{"traceEvents": []' + trailer), dict)


_TRAILER_ENDS = 64
"""Candidate ends of the document tried when bytes follow it (each `}`, the last ones first)."""


def _document_end(header: bytes, trailer: bytes) -> int | None:
    """Where the document ends in `trailer` when bytes follow its closing `}`."""
    ends = [i + 1 for i in range(len(trailer)) if trailer[i] == 0x7D]  # '}'
    for end in ends[::-1][:_TRAILER_ENDS]:
        if document_closes(header, trailer[:end]):
            return end
    return None


def _decoded(text: bytes):
    """The decoded JSON, or None where it is not JSON (or nested deeper than the decoder goes)."""
    try:
        return ANY_DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None


RANK_LIMIT = 1 << 31
"""Ranks and world sizes are int32 in PyTorch (c10d); a larger number in a trace is not one."""


def _small_int(value, low: int, high: int = RANK_LIMIT) -> int | None:
    """`value` when it is an integer (not a bool) in [low, high), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and low <= value < high else None


def _apply_top_level(meta: TraceMeta, top: dict) -> None:
    """The fields torchneck reads, each kept only when of the expected type and range (a trace's
    metadata reaches the report: a nested object or an integer beyond 64 bits would too)."""
    meta.schema_version = _small_int(top.get("schemaVersion"), 0)
    dist = top.get("distributedInfo")
    if isinstance(dist, dict):
        meta.rank = _small_int(dist.get("rank"), 0)
        meta.world_size = _small_int(dist.get("world_size"), 1)
        meta.backend = dist.get("backend") if isinstance(dist.get("backend"), str) else None
    devices = top.get("deviceProperties")
    if isinstance(devices, list):
        meta.devices = [_scalars(d) for d in devices if isinstance(d, dict)]
    meta.base_time_ns = _small_int(top.get("baseTimeNanoseconds"), 0, 1 << 63)
    for key in ("traceName", "displayTimeUnit", "record_shapes", "cuda_runtime_version",
                "cuda_driver_version", "cupti_version", "torchneck"):
        if key in top:
            meta.other[key] = top[key]


def _scalars(device: dict) -> dict:
    """A device's properties that are strings, booleans, 64-bit integers or finite numbers (what
    CUDA and ROCm write there); anything else is dropped."""
    return {k: v for k, v in device.items()
            if isinstance(v, (str, bool)) or isinstance(v, int) and -(1 << 63) <= v < 1 << 63
            or isinstance(v, float) and math.isfinite(v)}


_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)(?:[^\d]|$)", re.IGNORECASE)


def rank_from_path(path) -> int | None:
    """The rank a trace file's name (or its folder's, `rank-<R>/`) gives, for traces without
    `distributedInfo`: `rank-3.pt.trace.json.gz`, `worker_rank_3...`, `rank-3/trace.json.gz`."""
    p = Path(path)
    for name in (p.name, p.parent.name):
        m = _RANK_IN_NAME.search(name)
        if m:
            return _small_int(int(m.group(1)), 0)
    return None
