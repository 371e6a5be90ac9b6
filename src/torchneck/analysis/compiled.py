"""torch.compile as seen in a profiler trace: compiled regions, graph breaks, recompiles."""

from __future__ import annotations

import re

import numpy as np

from ..trace.table import Cat, EventTable
from .intervals import union_length
from .ops import Nesting

_REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)")
_GRAPH_CALL = re.compile(r"^## Call CompiledFxGraph|^CompiledFunction$|^CompiledFunctionBackward$|"
                         r"^## Call CompiledFxGraph")


def compiled_summary(table: EventTable, nesting: Nesting, rows: np.ndarray, lo: float, hi: float) -> dict:
    """Compiled frames within `rows`.

    `Torch-Compiled Region: F/C` marks frame F compiled for the C-th time (C > 0: a recompile).
    A region nested inside another region on the same thread means dynamo resumed after a graph
    break. CPU ops outside every region (on threads that run regions) are eager code.
    """
    region_ids = table.names_matching(lambda s: bool(_REGION.match(s)))
    host = np.isin(table.cat[rows], (Cat.CPU_OP, Cat.USER_ANNOTATION))
    reg = rows[host & region_ids[table.name[rows]]] if len(region_ids) else rows[:0]
    if not len(reg):
        return {"present": False}
    frames: dict[int, dict] = {}
    nested = 0
    for r in reg.tolist():
        m = _REGION.match(table.strings[table.name[r]])
        f, c = int(m.group(1)), int(m.group(2))
        d = frames.setdefault(f, {"frame": f, "calls": 0, "compile_ids": set(), "time_us": 0.0,
                                  "nested_calls": 0})
        d["calls"] += 1
        d["compile_ids"].add(c)
        d["time_us"] += float(table.dur[r])
        p = int(nesting.parent[r])
        while p >= 0:
            if region_ids[table.name[p]]:
                nested += 1
                d["nested_calls"] += 1
                break
            p = int(nesting.parent[p])
    threads = np.unique(table.thread[reg])
    cpu = rows[(table.cat[rows] == Cat.CPU_OP) & np.isin(table.thread[rows], threads)]
    in_region = union_length(table.ts[reg], table.ts[reg] + table.dur[reg], lo, hi)
    top_ops = cpu[nesting.parent[cpu] < 0] if len(cpu) else cpu
    eager_us = 0.0
    if len(top_ops):
        # Top-level ops not inside any region: eager code between compiled graphs.
        starts = np.sort(table.ts[reg])
        ends = (table.ts[reg] + table.dur[reg])[np.argsort(table.ts[reg])]
        run_end = np.maximum.accumulate(ends)
        j = np.searchsorted(starts, table.ts[top_ops], side="right") - 1
        inside = (j >= 0) & (run_end[np.maximum(j, 0)] > table.ts[top_ops])
        eager_us = float(table.dur[top_ops[~inside]].sum())
    graph_calls = int(table.rows_with_name(lambda s: bool(_GRAPH_CALL.match(s)))[rows].sum())
    out_frames = []
    for d in sorted(frames.values(), key=lambda d: -d["time_us"]):
        ids = sorted(d.pop("compile_ids"))
        d["compiles_seen"] = len(ids)
        d["recompiles_seen"] = max(ids)  # compile id C counts from 0
        out_frames.append(d)
    return {
        "present": True,
        "frames": out_frames,
        "region_calls": int(len(reg)),
        "nested_region_calls": nested,
        "graph_calls": graph_calls,
        "time_in_regions_us": in_region,
        "eager_top_level_us": eager_us,
    }
