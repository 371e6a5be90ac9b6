"""Typed views of the profiler's Chrome-trace JSON, declaring only what torchneck reads.

msgspec skips every field not declared here without building Python objects for it, which is
what keeps decoding fast: a kernel event carries ~15 args, of which we keep four.

Two variants: `Event` types its fields as the exporter writes them (fast); `LooseEvent` accepts
anything in them and is used only for slices where a trace in the wild disagrees (ROCm writes
`stream` as a string, old traces write ids as strings).
"""

from __future__ import annotations

from typing import Any

import msgspec

NO_RAW = msgspec.Raw(b"")
"""Default of raw fields: empty bytes mean the field was absent."""


class Args(msgspec.Struct, gc=False, frozen=True):
    """The `args` of one event. Absent fields take a sentinel default (-1, 0, ""), never None,
    so whole columns convert to numpy without a per-value check."""

    external_id: int = msgspec.field(default=-1, name="External id")
    correlation: int = -1
    device: int = -1
    stream: int = -1
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    call_stack: str = msgspec.field(default="", name="Call stack")
    nbytes: int = msgspec.field(default=0, name="bytes")
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
    # collectives
    collective_name: str = msgspec.field(default="", name="Collective name")


EMPTY_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One element of `traceEvents`."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = float("nan")
    dur: float = 0.0
    args: Args = EMPTY_ARGS


class LooseArgs(msgspec.Struct, gc=False):
    external_id: Any = msgspec.field(default=None, name="External id")
    correlation: Any = None
    device: Any = None
    stream: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    call_stack: Any = msgspec.field(default=None, name="Call stack")
    nbytes: Any = msgspec.field(default=None, name="bytes")
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    addr: Any = msgspec.field(default=None, name="Addr")
    name: Any = None
    labels: Any = None
    collective_name: Any = msgspec.field(default=None, name="Collective name")


class LooseEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    name: Any = ""
    cat: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = None
    dur: Any = None
    args: LooseArgs | None = None


EVENT_LIST_DECODER = msgspec.json.Decoder(list[Event])
LOOSE_EVENT_LIST_DECODER = msgspec.json.Decoder(list[LooseEvent])
ANY_DECODER = msgspec.json.Decoder()
