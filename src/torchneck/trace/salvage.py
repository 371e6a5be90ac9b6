"""Salvage: the events of a region that does not decode as a whole.

A trace cut short, or damaged in places, still holds whole events around the damage. The region
is decoded piece by piece, between candidate event boundaries, and what decodes is kept.
"""

from __future__ import annotations

from .decode import _decode_slice, events_to_columns
from .merge import Merger
from .schema import Event
from .slices import _all_boundaries
from .table import TraceMeta


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


def _handle_salvage(piece: bytes, merger: Merger, meta: TraceMeta) -> None:
    data = bytes(piece)
    # Drop whatever follows the last complete object.
    good, bad = _decode_one_by_one(data)
    if good:
        merger.add(events_to_columns(good, mixed=True))
    if bad:
        meta.warnings.append(f"{bad} damaged event(s) at the end were dropped")
