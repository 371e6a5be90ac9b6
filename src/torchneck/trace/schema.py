"""Typed views of the profiler's Chrome-trace JSON, declaring only what torchneck reads.

msgspec skips every field not declared here without building Python objects for it, which is
what keeps decoding fast: a kernel event carries ~15 args, of which we keep four.

Two variants: `Event` types its fields as the exporter writes them (fast); `LooseEvent` accepts
anything in them and is used only for slices where a trace in the wild disagrees (ROCm writes
`stream` as a string, old traces write ids as strings).
"""

from __future__ import annotations

import functools
import operator
from typing import Any, ClassVar

import msgspec

NO_RAW = msgspec.Raw(b"")
"""Default of raw fields: empty bytes mean the field was absent."""


class Args(msgspec.Struct, gc=False, frozen=True):
    """The `args` of one event. Absent fields take a sentinel default (-1, 0, ""), never None,
    so whole columns convert to numpy without a per-value check."""

    correlation: int = -1
    device: int = -1
    stream: int = -1
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_dims_old: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input dims")  # PyTorch 1.8
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    call_stack: str | None = msgspec.field(default="", name="Call stack")  # PyTorch 1.8-1.12
    nbytes: int = msgspec.field(default=0, name="bytes")
    sequence: int = msgspec.field(default=-1, name="Sequence number")  # autograd's, on ops run in grad mode
    # cpu_instant_event "[memory]" events
    mem_bytes: int = msgspec.field(default=0, name="Bytes")
    total_allocated: int = msgspec.field(default=-1, name="Total Allocated")
    total_reserved: int = msgspec.field(default=-1, name="Total Reserved")
    device_type: int = msgspec.field(default=0, name="Device Type")
    device_id: int = msgspec.field(default=-1, name="Device Id")
    addr: int = msgspec.field(default=0, name="Addr")
    # metadata ("M") events
    name: str | None = None
    labels: str | None = None


EMPTY_ARGS = Args()


class _Tagged(msgspec.Struct, gc=False, tag_field="ph"):
    """An element of `traceEvents`, typed by its phase `ph`: msgspec picks the struct from the
    tag, so events torchneck only counts (flows: a third of a GPU trace) decode as empty structs
    without building a Python object per field. `ph` is a class attribute of each type."""


class Event(_Tagged, tag="X"):
    """A complete ("X") event: the rows of the event table."""

    ph: ClassVar[str] = "X"
    name: str = ""
    cat: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = float("nan")
    dur: float = 0.0
    args: Args = EMPTY_ARGS


class InstantEvent(_Tagged, tag="i"):
    """An instant event; `[memory]` ones carry allocations in their args."""

    ph: ClassVar[str] = "i"
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = float("nan")
    args: Args = EMPTY_ARGS


class GlobalInstantEvent(InstantEvent, tag="I"):
    ph: ClassVar[str] = "I"


class MetadataEvent(_Tagged, tag="M"):
    """process_name / thread_name / process_labels."""

    ph: ClassVar[str] = "M"
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    args: Args = EMPTY_ARGS


def _phase_only(ph: str) -> type:
    return type(f"Phase_{ord(ph)}", (_Tagged,), {"ph": ph, "__annotations__": {"ph": ClassVar[str]}},
                tag=ph)


OTHER_PHASES = ("s", "t", "f", "B", "E", "C", "b", "n", "e", "S", "T", "p", "F", "P", "N", "O", "D",
                "V", "v", "R", "c", "(", ")")
"""The other phases of the Chrome trace event format (flows, durations, async, counters, objects,
samples, memory dumps, marks, clock syncs, contexts). A phase outside every list fails the typed
decode, and that slice is decoded loosely instead (`LooseEvent`)."""

_EVENT_TYPES = (Event, InstantEvent, GlobalInstantEvent, MetadataEvent, *map(_phase_only, OTHER_PHASES))


class LooseArgs(msgspec.Struct, gc=False):
    correlation: Any = None
    device: Any = None
    stream: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_dims_old: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input dims")
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    call_stack: Any = msgspec.field(default=None, name="Call stack")
    nbytes: Any = msgspec.field(default=None, name="bytes")
    sequence: Any = msgspec.field(default=None, name="Sequence number")
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    addr: Any = msgspec.field(default=None, name="Addr")
    name: Any = None
    labels: Any = None


class LooseEvent(msgspec.Struct, gc=False):
    """Any element of `traceEvents`, every field of any JSON type."""

    ph: Any = ""
    name: Any = ""
    cat: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = None
    dur: Any = None
    args: LooseArgs | None = None


def _list_of(item: Any) -> Any:
    """`list[item]` for a type made at run time (the union of the phases' structs)."""
    return list[item]


EVENT_LIST_DECODER = msgspec.json.Decoder(_list_of(functools.reduce(operator.or_, _EVENT_TYPES)))
LOOSE_EVENT_LIST_DECODER = msgspec.json.Decoder(list[LooseEvent])
ANY_DECODER = msgspec.json.Decoder()
