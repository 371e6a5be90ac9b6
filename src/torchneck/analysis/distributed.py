"""Many ranks: communication per rank, and the rank the others wait for.

Two stages, so a job with thousands of ranks scales: `collectives` runs on one rank's trace
(in that rank's own task) and goes into a small summary (`cluster.summary.RankSummary`);
`compare_ranks` merges the summaries of all ranks (a few KB each) without touching a trace, with
the job reducer (`cluster.reduce`, which says how stragglers are found).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from ..trace.table import Cat, EventTable, in_categories
from .groups import distinct
from .intervals import overlapping_rows, union_length
from .steps import Step, is_communication

if TYPE_CHECKING:
    from ..cluster.summary import RankSummary
    from ..model.analysis import RankAnalysis
    from ..model.findings import Finding

_TYPES = (
    ("all_reduce", r"all_?reduce"), ("reduce_scatter", r"reduce_?scatter"), ("all_gather", r"all_?gather"),
    ("all_to_all", r"all_?to_?all"), ("broadcast", r"broadcast"), ("barrier", r"barrier"),
    ("send_recv", r"send|recv|sendrecv"), ("reduce", r"reduce"), ("gather", r"gather"), ("scatter", r"scatter"),
)
_TYPE_RES = [(name, re.compile(p, re.IGNORECASE)) for name, p in _TYPES]

def collective_type(name: str) -> str:
    """all_reduce, all_gather, ... from an NCCL kernel, gloo annotation or c10d op name."""
    for kind, pattern in _TYPE_RES:
        if pattern.search(name):
            return kind
    return "other"


def collective_rows(table: EventTable, steps: list[Step]) -> tuple[np.ndarray, str, list[str], np.ndarray]:
    """The rank's collective events within its steps, in time order: (rows, side, type names,
    each row's code into those names). Host side: collective ops and annotations (`gloo:*`,
    `nccl:*`, `c10d::*`, `record_param_comms`) on CPU threads; device side: NCCL/RCCL kernels,
    which win when present (on the GPU they are what a rank waits; gloo jobs wait on the host)."""
    key = tuple((s.start, s.end) for s in steps)
    cached = getattr(table, "_collective_rows", None)  # the analyses and the per-call summary both ask
    if cached is not None and cached[0] == key:
        return cached[1]
    found = _collective_rows(table, steps)
    table._collective_rows = (key, found)  # type: ignore[attr-defined]
    return found


def _collective_rows(table: EventTable, steps: list[Step]) -> tuple[np.ndarray, str, list[str], np.ndarray]:
    empty: tuple[np.ndarray, str, list[str], np.ndarray] = (np.empty(0, int), "", [], np.empty(0, np.int16))
    if not steps:
        return empty
    lo, hi = min(s.start for s in steps), max(s.end for s in steps)
    ids = table.names_matching(is_communication)
    rows = overlapping_rows(table.ts, table.dur, lo, hi, mask=lambda block: ids[table.name[block]]) \
        if ids.any() else np.empty(0, int)
    if not len(rows):
        return empty
    device = table.cat[rows] == Cat.KERNEL
    side = "device" if device.any() else "host"
    rows = rows[device] if side == "device" else rows[in_categories(table.cat[rows], (Cat.CPU_OP, Cat.USER_ANNOTATION))]
    # Each distinct name classified once, then rows grouped by a small code (a string a row
    # was ~64 bytes an event: 50 MB for a 3 GB gloo trace).
    names = table.name[rows]
    present = distinct(names)
    kind_of_name = [collective_type(table.strings[i]) for i in present.tolist()]
    kind_names = sorted(set(kind_of_name))
    code_of_name = np.array([kind_names.index(k) for k in kind_of_name], dtype=np.int16)
    codes = code_of_name[np.searchsorted(present, names)]
    return rows, side, kind_names, codes


def collectives(table: EventTable, steps: list[Step]) -> dict:
    """Communication of one rank within its steps (`collective_rows`). `time_us` is the union
    of their spans (host and device counted separately, never twice), per type and in total;
    `per_step_us` divides by the number of steps."""
    rows, side, kind_names, codes = collective_rows(table, steps)
    if not len(rows):
        return {"present": False}
    lo, hi = min(s.start for s in steps), max(s.end for s in steps)
    by_type = []
    for code, kind in enumerate(kind_names):
        r = rows[codes == code]
        t = union_length(table.ts[r], table.ts[r] + table.dur[r], lo, hi)
        by_type.append({"type": kind, "count": int(len(r)), "time_us": t, "per_step_us": t / len(steps)})
    total = union_length(table.ts[rows], table.ts[rows] + table.dur[rows], lo, hi)
    return {"present": True, "side": side, "time_us": total, "per_step_us": total / len(steps),
            "steps": len(steps), "by_type": sorted(by_type, key=lambda d: -d["time_us"])}


def rank_summary(rank: int, analysis: RankAnalysis | None, findings: list[Finding] | None = None,
                 **extra: Any) -> RankSummary:
    """What the merge needs of one rank's trace analysis (`summary.analyze_trace`) and findings:
    a `cluster.summary.RankSummary`, a few KB whatever the trace's size."""
    from ..cluster.tasks import summary_of

    path = extra.pop("path", None) or (analysis.trace.path if analysis else "")
    return summary_of(analysis, findings or [], rank=rank, path=str(path), **extra)


def compare_ranks(ranks: list) -> dict:
    """Merge per-rank summaries (`rank_summary`, or rows of a report's `distributed.ranks`)
    with the job reducer (`cluster.reduce.reduce_ranks`): the per-rank table, distributions,
    the stragglers."""
    from ..cluster.reduce import reduce_ranks
    from ..cluster.summary import RankSummary

    return reduce_ranks([r if isinstance(r, RankSummary) else _from_row(r) for r in ranks
                         if (r.rank if isinstance(r, RankSummary) else r.get("rank")) is not None])


def _from_row(row: dict):
    """A `RankSummary` from a `distributed.ranks` row (e.g. a node's report.json, merged later)."""
    from ..cluster.summary import CollectiveType, Comm, RankSummary, StepStats

    med = row.get("median_step_us")
    steps = None
    if med:
        steps = StepStats(source="", count=row.get("steps") or 1, median_us=med, mean_us=med, min_us=med, max_us=med,
                          window_us=med * (row.get("steps") or 1), breakdown_us={})
    c = row.get("comm") or {}
    comm = Comm()
    if c.get("present"):
        comm = Comm(present=True, side=c.get("side", ""), time_us=c.get("time_us", 0.0), per_step_us=c["per_step_us"],
                    steps=row.get("steps") or 0,
                    by_type=[CollectiveType(type=t["type"], count=t.get("count", 0), time_us=t.get("time_us", 0.0),
                                            per_step_us=t.get("per_step_us", 0.0)) for t in c.get("by_type") or []])
    return RankSummary(rank=row["rank"], path=row.get("path") or "", host=row.get("host"),
                       status=row.get("status") or "ok", exit_code=row.get("exit_code"), steps=steps, comm=comm)
