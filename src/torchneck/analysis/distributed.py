"""Many ranks: communication per rank, and the rank the others wait for.

Two stages, so a job with thousands of ranks scales: `collectives` runs on one rank's trace
(in that rank's own process) and returns a small summary; `compare_ranks` merges the summaries
of all ranks (a few KB each) without touching a trace.

Why durations find the straggler: a collective ends on every rank at about the same moment (it
cannot finish before its last participant arrives), so the time a rank spends inside it is
(last arrival - its own arrival) + the transfer itself. The rank that arrives last spends the
least; every other rank's excess over it is time spent waiting for it. Durations need no clock
alignment between hosts, unlike start times.
"""

from __future__ import annotations

import re

import numpy as np

from ..trace.table import Cat, EventTable, in_categories
from .groups import distinct
from .intervals import overlapping_rows, union_length
from .steps import Step, is_communication

_TYPES = (
    ("all_reduce", r"all_?reduce"), ("reduce_scatter", r"reduce_?scatter"), ("all_gather", r"all_?gather"),
    ("all_to_all", r"all_?to_?all"), ("broadcast", r"broadcast"), ("barrier", r"barrier"),
    ("send_recv", r"send|recv|sendrecv"), ("reduce", r"reduce"), ("gather", r"gather"), ("scatter", r"scatter"),
)
_TYPE_RES = [(name, re.compile(p, re.IGNORECASE)) for name, p in _TYPES]

STRAGGLER_MIN_SHARE = 0.05
"""A straggler is reported when the others' wait is >= 5 % of the median step ..."""
STRAGGLER_MIN_US = 500.0
"""... and >= 0.5 ms per step: below that, collective jitter, not a slow rank."""


def collective_type(name: str) -> str:
    """all_reduce, all_gather, ... from an NCCL kernel, gloo annotation or c10d op name."""
    for kind, pattern in _TYPE_RES:
        if pattern.search(name):
            return kind
    return "other"


def collectives(table: EventTable, steps: list[Step]) -> dict:
    """Communication of one rank within its steps.

    Host side: collective ops and annotations (`gloo:*`, `nccl:*`, `c10d::*`,
    `record_param_comms`) on CPU threads; device side: NCCL/RCCL kernels. `time_us` is the union
    of their spans (host and device counted separately, never twice), per type and in total;
    `per_step_us` divides by the number of steps. On the GPU the device figure is what a rank
    waits; on CPU-only jobs (gloo) the host figure is.
    """
    if not steps:
        return {"present": False}
    lo, hi = min(s.start for s in steps), max(s.end for s in steps)
    ids = table.names_matching(is_communication)
    rows = overlapping_rows(table.ts, table.dur, lo, hi, mask=lambda block: ids[table.name[block]]) \
        if ids.any() else np.empty(0, int)
    if not len(rows):
        return {"present": False}
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
    del names
    by_type = []
    for code, kind in enumerate(kind_names):
        r = rows[codes == code]
        t = union_length(table.ts[r], table.ts[r] + table.dur[r], lo, hi)
        by_type.append({"type": kind, "count": int(len(r)), "time_us": t, "per_step_us": t / len(steps)})
    total = union_length(table.ts[rows], table.ts[rows] + table.dur[rows], lo, hi)
    return {"present": True, "side": side, "time_us": total, "per_step_us": total / len(steps),
            "steps": len(steps), "by_type": sorted(by_type, key=lambda d: -d["time_us"])}


def rank_summary(rank: int, analysis: dict | None, **extra) -> dict:
    """What the merge needs of one rank's trace analysis (`summary.analyze_trace`): a few
    hundred bytes, whatever the trace's size."""
    steps = (analysis or {}).get("steps")
    return {"rank": rank, "median_step_us": steps["median_us"] if steps else None,
            "steps": steps["count"] if steps else 0,
            "comm": (analysis or {}).get("comm") or {"present": False}, **extra}


def compare_ranks(ranks: list[dict]) -> dict:
    """Merge per-rank summaries (`rank_summary`). Returns the per-rank table, the step-time
    spread, and the straggler, if any."""
    ranks = sorted((r for r in ranks if r.get("rank") is not None), key=lambda r: r["rank"])
    steps = [r["median_step_us"] for r in ranks if r.get("median_step_us")]
    out: dict = {
        "world_size": len(ranks),
        "ranks": ranks,
        "step_spread_pct": 100.0 * (max(steps) - min(steps)) / min(steps) if len(steps) > 1 and min(steps) else 0.0,
        "straggler": None,
    }
    comm = [(r["rank"], r["comm"]["per_step_us"]) for r in ranks if (r.get("comm") or {}).get("present")]
    if len(comm) < 2:
        return out
    slowest_rank, least_wait = min(comm, key=lambda x: x[1])
    waits = {rank: us - least_wait for rank, us in comm if rank != slowest_rank}
    if not waits:  # every file said it was the same rank
        return out
    mean_wait = float(np.mean(list(waits.values())))
    step = float(np.median(steps)) if steps else 0.0
    if mean_wait >= STRAGGLER_MIN_US and step and mean_wait >= STRAGGLER_MIN_SHARE * step:
        out["straggler"] = {
            "rank": slowest_rank,
            "wait_per_step_us": mean_wait,
            "wait_share": mean_wait / step,
            "waits_us": {str(k): v for k, v in waits.items()},
            "comm_per_step_us": {str(k): v for k, v in comm},
            "median_step_us": step,
        }
    return out
