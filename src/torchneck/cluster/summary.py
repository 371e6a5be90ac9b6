"""What one rank's task returns: a compact typed summary, a few KB whatever the trace's size.

The client of a job of thousands of ranks holds one of these per rank and never an event.
Structs travel between Dask workers and the client as msgpack (`encode`/`decode`: smaller and
faster than pickle, and checked against these types on arrival).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from ..model.analysis import RankAnalysis
from ..model.findings import Finding
from ..model.report import OpLine


class StepStats(msgspec.Struct, kw_only=True):
    """The rank's profiled steps (`analysis.steps`): how long, and where the time went."""

    source: str
    count: int
    median_us: float
    mean_us: float
    min_us: float
    max_us: float
    window_us: float
    breakdown_us: dict[str, float]  # per category (kernel, communication, cpu_exec...), summed over the steps


class CollectiveType(msgspec.Struct, kw_only=True):
    """Time in one kind of collective (all_reduce, all_gather...): the union of its spans."""

    type: str
    count: int
    time_us: float
    per_step_us: float


class CollectiveGroup(msgspec.Struct, kw_only=True):
    """Every call of one collective type with one message size, in time order: what lines up
    across ranks (the k-th such call of every rank is the same collective in an SPMD job)."""

    type: str
    dtype: str = ""  # "" when the trace does not say (sizes are recorded by PyTorch >= 2.1's NCCL/gloo args)
    nelems: int = 0  # elements in (the input message), 0 when unknown
    group_size: int = 0
    durations_us: list[float] = []  # each call, in time order (at most `CALLS_MAX`)
    calls: int = 0  # calls in the window (may exceed len(durations_us))


class Comm(msgspec.Struct, kw_only=True):
    """The rank's communication within its steps (`analysis.distributed.collectives`)."""

    present: bool = False
    side: str = ""  # "device" (NCCL kernels) or "host" (gloo / c10d ops)
    time_us: float = 0.0
    per_step_us: float = 0.0
    steps: int = 0
    by_type: list[CollectiveType] = []
    groups: list[CollectiveGroup] = []


class DeviceTime(msgspec.Struct, kw_only=True):
    """One GPU of the rank over the window: busy, what it overlapped, and why it sat idle."""

    device: int
    busy_pct: float
    idle_us: float
    compute_us: float = 0.0
    communication_us: float = 0.0
    comm_overlap_pct: float = 0.0  # share of communication time that ran beside compute
    host_wait_us: float = 0.0  # idle because the CPU had not launched the next work yet
    kernel_wait_us: float = 0.0
    other_idle_us: float = 0.0


class OpTime(msgspec.Struct, kw_only=True):
    name: str
    count: int
    self_us: float
    total_us: float


class KernelTime(msgspec.Struct, kw_only=True):
    name: str
    family: str
    count: int
    time_us: float


class TaskTimes(msgspec.Struct, kw_only=True):
    """Seconds the task spent on this rank, on the worker: for the cost model (docs/scale.md)."""

    fetch_s: float = 0.0  # copying a remote file to the worker's disk
    load_s: float = 0.0
    analyse_s: float = 0.0  # analyses, the rank's own findings, the summary
    sizes_s: float = 0.0  # reading the collectives' message sizes


class FullRank(msgspec.Struct, kw_only=True):
    """The whole of a rank's analysis, for the report's main rank(s): its tables and pictures."""

    analysis: RankAnalysis
    views: dict[str, Any] = {}
    ops_by_line: list[OpLine] = []


class RankSummary(msgspec.Struct, kw_only=True, tag="summary"):
    """One rank, as the merge needs it."""

    rank: int | None  # None when neither the trace nor its file name says: the merge numbers those
    path: str
    host: str | None = None
    status: str = "ok"  # a job's rank: its run's status (ok, exception, killed...)
    exit_code: int | None = None
    world_size: int | None = None
    events: int = 0
    bytes: int = 0
    steps: StepStats | None = None
    comm: Comm = msgspec.field(default_factory=Comm)
    devices: list[DeviceTime] = []
    ops: list[OpTime] = []  # the top ops by self time
    kernels: list[KernelTime] = []  # the top kernels by time
    findings: list[Finding] = []  # the rank's own findings (candidates for the job's list)
    warnings: list[str] = []
    times: TaskTimes = msgspec.field(default_factory=TaskTimes)
    full: FullRank | None = None  # the main rank(s) only


class RankFailure(msgspec.Struct, kw_only=True, tag="failure"):
    """A rank whose trace could not be analysed: listed, never fatal to the job."""

    path: str
    rank: int | None = None
    status: str = "unreadable"  # unreadable (not a trace, damaged beyond use) or error (the task failed)
    error: str = ""


class Skipped(msgspec.Struct, kw_only=True, tag="skipped"):
    """A trace of another rank than the one asked for (`--rank`)."""

    path: str
    rank: int | None = None


RankResult = RankSummary | RankFailure | Skipped

def _builtin(obj: Any) -> Any:
    """numpy scalars and arrays in analyses and findings (JSON takes numpy's float64, a float
    subclass; msgpack takes none of them) as the Python values they hold."""
    if isinstance(obj, (np.generic, np.ndarray)):
        return obj.tolist()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_builtin)
_DECODER = msgspec.msgpack.Decoder(list[RankResult])


def encode(results: list[RankResult]) -> bytes:
    return _ENCODER.encode(results)


def decode(data: bytes) -> list[RankResult]:
    return _DECODER.decode(data)
