"""What a trace says about itself outside its events: the top-level fields of the JSON document
(`schemaVersion`, `distributedInfo`, `deviceProperties`, `baseTimeNanoseconds`, ...) and the rank
its file name gives.

The document around the events array is decoded on its own: the part before the array (its
`header`, kept by `detect.find_events_array`) and the part after it (`trailer`), with the array
itself replaced by `[]`.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from .schema import ANY_DECODER
from .table import TraceMeta


def read_top_level(meta: TraceMeta, header: bytes, trailer: bytes) -> None:
    """Fill `meta` from the document's top-level fields; a damaged part after the events is
    ignored with a warning (unless the trace is already known to be truncated)."""
    text = header + b"[]" + trailer
    try:
        top = ANY_DECODER.decode(text)
    except msgspec.DecodeError:
        top = _salvage_header(header)
        if not any("truncated" in w for w in meta.warnings):
            meta.warnings.append("the JSON after the events is damaged; metadata there was ignored")
    if isinstance(top, dict):
        _apply_top_level(meta, top)


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


def _salvage_header(header: bytes) -> dict:
    try:
        top = ANY_DECODER.decode(header + b"[]}")
        return top if isinstance(top, dict) else {}
    except msgspec.DecodeError:
        return {}


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
