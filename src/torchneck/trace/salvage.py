"""Salvage: the events of a region that does not decode as a whole.

A trace cut short, or damaged in places (a flipped byte, an event cut in two, garbage spliced
in), still holds whole events around the damage. Every such region, wherever it was found (a
slice that kept failing, the end of a truncated file, slices joined in the parallel loader), is
salvaged here, one way: it is cut at candidate event boundaries into pieces, the largest runs of
pieces that decode are found by halving (so a region with one bad event costs a few decodes of
its halves, not one per event), and a piece that does not decode alone is tried joined with the
next few (its boundary may lie inside a string) before it is counted as damaged and skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import msgspec

from .decode import ChunkColumns, decode_to_columns
from .schema import ANY_DECODER
from .slices import _all_boundaries

JOIN_PIECES = 4
"""A piece that does not decode alone is tried with up to this many pieces joined (itself
included): a `},{` inside a string cuts one event into several pieces."""


@dataclass
class Salvaged:
    """What a region gave: decoded slices (in order), and what was skipped."""

    chunks: list[ChunkColumns] = field(default_factory=list)
    damaged: int = 0  # pieces (events, or garbage between boundaries) that did not decode
    too_deep: int = 0  # of which nested deeper than the decoder goes
    used: int = 0  # bytes of the region used (decoded or counted); the rest is left for what follows


RESYNC_BYTES = 64 << 10
"""A candidate boundary that seems to lie inside a string is still taken this far past the last
one taken: damage can leave a quote unpaired, and then every boundary after it would seem so."""

_ESCAPED = re.compile(rb"\\.", re.DOTALL)


def pieces(data: bytes, by_quotes: bool = True) -> list[tuple[int, int]]:
    """(start, end) of each piece of `data` between event boundaries, blanks and the separating
    commas left out; empty pieces dropped. With `by_quotes`, a candidate boundary (`}` `,` `{`)
    is taken where an even number of quotes (escaped ones aside) lies between it and the last
    one taken: one with an odd number lies inside a string (a name holding `}, {`), so the event
    goes on. (Without, every candidate is taken.)"""
    spans, start, quotes, seen = [], 0, 0, 0
    for end, nxt in [*_all_boundaries(data), (len(data), len(data))]:
        if by_quotes:
            quotes += _ESCAPED.sub(b"", data[seen:end]).count(b'"')
            seen = end
        if quotes % 2 and end - start < RESYNC_BYTES and end < len(data):
            continue  # inside a string
        a, b = start, end
        while a < b and data[a] in b" \t\r\n,":
            a += 1
        while b > a and data[b - 1] in b" \t\r\n,":
            b -= 1
        if a < b:
            spans.append((a, b))
        start, quotes, seen = nxt, 0, nxt
    return spans


def salvage(data: bytes, more: bool = True, cut: bool = False, by_quotes: bool = True) -> Salvaged:
    """The events of `data` (comma-separated events, some damaged). `more`: data follows, so a
    last piece that does not decode (of several) may be an event's start: it is left unused
    (`Salvaged.used`) for the caller to put before what follows. `cut`: the data was cut short
    at its end, so a last piece that does not decode is the event cut there (the truncation is
    warned about on its own), not a damaged one. A piece that does not decode although it holds
    candidate boundaries (taken for boundaries inside a string, after a quote the damage left
    unpaired) is salvaged again cut at all of them (`by_quotes` False)."""
    spans = pieces(data, by_quotes)
    out = Salvaged(used=len(data))
    i, size, n = 0, len(spans), len(spans)

    def decoded(a: int, b: int) -> ChunkColumns | None:
        return decode_to_columns(data[spans[a][0]:spans[b - 1][1]])

    while i < n:
        size = max(1, min(size, n - i))
        chunk = decoded(i, i + size)
        if chunk is not None:
            out.chunks.append(chunk)
            i += size
            size *= 2  # past the damage, runs of sound pieces grow back
            continue
        if size > 1:
            size //= 2
            continue
        for joined in range(2, min(JOIN_PIECES, n - i) + 1):
            chunk = decoded(i, i + joined)
            if chunk is not None:
                out.chunks.append(chunk)
                i += joined
                break
        else:
            last = i == n - 1
            piece = data[spans[i][0]:spans[i][1]]
            if last and more and n > 1:
                out.used = spans[i][0]  # maybe an event's start: for what follows
            elif by_quotes and len(pieces(piece, by_quotes=False)) > 1:
                inner = salvage(piece, more=False, cut=cut and last, by_quotes=False)
                out.chunks += inner.chunks
                out.damaged += inner.damaged
                out.too_deep += inner.too_deep
            elif not (last and cut):
                if nested_too_deeply(piece):
                    out.too_deep += 1
                else:
                    out.damaged += 1
            i += 1
    return out


def nested_too_deeply(piece: bytes) -> bool:
    """Whether a piece fails to decode because of its nesting (msgspec, like Python, stops at
    about 1000 levels), not because it is damaged."""
    try:
        ANY_DECODER.decode(piece)
    except RecursionError:
        return True
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return False
