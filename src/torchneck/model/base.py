"""The base of every contract type, and encoding that always yields strict JSON."""

from __future__ import annotations

import math
from typing import Any

import msgspec


class Record(msgspec.Struct):
    """A contract type, encoded as a JSON object of its fields. Build records with keyword
    arguments; required fields come before fields with defaults."""


def numpy_scalar(obj: Any) -> Any:
    """numpy scalars that slip through an analysis encode as the Python number they hold."""
    item = getattr(obj, "item", None)
    if item is not None and getattr(obj, "shape", None) == ():
        return item()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def finite(value: float | None) -> float | None:
    """None for NaN and infinities: JSON has no such numbers."""
    return value if value is None or math.isfinite(value) else None


_encoder = msgspec.json.Encoder(enc_hook=numpy_scalar)


def to_json(obj: Any, indent: int = 0) -> bytes:
    """Strict JSON (no NaN, no Infinity: msgspec writes them as null) of a contract or builtins."""
    data = _encoder.encode(obj)
    return msgspec.json.format(data, indent=indent) if indent else data


def to_builtins(obj: Any) -> Any:
    """dicts, lists and numbers of a contract (what report.json decodes to)."""
    return msgspec.json.decode(to_json(obj))
