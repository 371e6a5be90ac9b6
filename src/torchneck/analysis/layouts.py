"""Which of the top ops were fed a tensor laid out against the grain: a transposed or permuted
view whose last dimension is not contiguous in memory (`x.T` of a row-major matrix).

Many kernels read such an input element by element, or fall back from a row-copy kernel to a
strided loop (`embedding_bag`, `index_select`, `gather`, reductions): ten times slower and more
on a large one, though the values are right. Traces recorded with shapes carry each op's
"Input Strides" (PyTorch 2.1 and later); the loader keeps dims and types only, so this reads the
strides of the few ops asked about in a second, bounded pass over the file.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from collections.abc import Collection
from typing import Any

import msgspec

from ..model.analysis import StridedInput

READ_MAX_BYTES = 16 << 20
"""Traces up to this size (decompressed) are read again for strides: a `torchneck run` window is
a few MB; a larger trace is left alone (its second pass would cost what its load did)."""
MIN_ELEMENTS = 1 << 16
"""Smaller inputs cost little however they lie in memory."""


class _Args(msgspec.Struct):
    dims: Any = msgspec.field(default=None, name="Input Dims")
    strides: Any = msgspec.field(default=None, name="Input Strides")


class _Event(msgspec.Struct):
    """The fields read of an event (the others are skipped by the decoder, not built)."""

    name: Any = None
    ph: Any = None
    dur: Any = None
    args: _Args | None = None


class _Document(msgspec.Struct):
    traceEvents: list[_Event] = []


_DOCUMENT = msgspec.json.Decoder(_Document | list[_Event])  # an object, or a bare list of events


def against_the_grain(dims: Any, strides: Any) -> bool:
    """A tensor of `dims` and `strides` (element counts) whose last dimension is not contiguous:
    a transposed or permuted view (not a broadcast, with its zero strides, and not a
    channels-last image, whose channels are contiguous by design), large enough to matter."""
    if not (isinstance(dims, list) and isinstance(strides, list) and len(dims) == len(strides) >= 2):
        return False
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (*dims, *strides)):
        return False
    if min(strides) <= 0 or dims[-1] <= 1 or strides[-1] == 1 or math.prod(dims) < MIN_ELEMENTS:
        return False
    return not (len(dims) in (4, 5) and strides[1] == 1)  # channels_last / channels_last_3d


def strided_inputs(path: str, names: Collection[str]) -> list[StridedInput]:
    """For each op of `names` called with an input against the grain (`against_the_grain`): its
    first such input's dims and strides, how many of its calls had one, and the share of the op's
    time they took. Empty when the file is large, unreadable or records no strides."""
    try:
        if not names or not os.path.isfile(path):  # a pipe or a device is not read twice (nor waited on)
            return []
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            data = (gzip.GzipFile(fileobj=f) if gzipped else f).read(READ_MAX_BYTES + 1)
        if len(data) > READ_MAX_BYTES or b"Input Strides" not in data:
            return []
        doc = _DOCUMENT.decode(data)
    except (OSError, EOFError, ValueError, RecursionError, zlib.error, msgspec.DecodeError,
            msgspec.ValidationError):  # RecursionError: msgspec's answer to deep nesting under `Any`
        return []  # the loader said what it could read; strides are extra
    events = doc.traceEvents if isinstance(doc, _Document) else doc
    wanted = set(names)
    found: dict[str, list] = {}  # op -> [dims, strides, calls, their us, all calls' us]
    for e in events:
        if not isinstance(e.name, str) or e.name not in wanted or e.ph != "X":
            continue
        dur = float(e.dur) if isinstance(e.dur, (int, float)) and e.dur > 0 else 0.0
        entry = found.setdefault(e.name, [None, None, 0, 0.0, 0.0])
        entry[4] += dur
        if e.args is None:
            continue
        dims, strides = e.args.dims, e.args.strides
        if not isinstance(dims, list) or not isinstance(strides, list):
            continue
        bad = next(((d, s) for d, s in zip(dims, strides) if against_the_grain(d, s)), None)
        if bad is not None:
            entry[0:2] = entry[0:2] if entry[0] is not None else list(bad)
            entry[2] += 1
            entry[3] += dur
    return [StridedInput(op=name, dims=dims, strides=strides, calls=calls,
                         share=strided_us / total_us if total_us > 0 else 1.0)
            for name, (dims, strides, calls, strided_us, total_us) in found.items() if calls]
