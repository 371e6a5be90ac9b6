"""Memory from the profiler's `[memory]` instant events (profile_memory=True)."""

from __future__ import annotations

import numpy as np

from ..model.analysis import Allocator, Memory, MemoryDevice
from ..sites import parse_site
from ..trace.table import Cat, EventTable, MemoryTable
from .groups import distinct
from .nesting import Nesting, innermost_open

DEVICE_TYPES = {0: "cpu", 1: "cuda"}


def memory_summary(table: EventTable, memory: MemoryTable, lo: float, hi: float, nesting: Nesting,
                   top: int = 10, sites: np.ndarray | None = None) -> Memory:
    """Peak allocated per device and the ops that allocated most within [lo, hi].

    An allocation is charged to the innermost CPU op on the same thread whose span contains it,
    and, given `sites` (per row, the `torchneck@` span enclosing it: see `ops.enclosing_sites`),
    to the user's line that called that op.
    """
    if not len(memory):
        return Memory(recorded=False)
    win = (memory.ts >= lo) & (memory.ts < hi)
    devices = []
    keys = sorted(set(zip(memory.device_type.tolist(), memory.device_id.tolist())))
    for dtype, did in keys:
        m = win & (memory.device_type == dtype) & (memory.device_id == did)
        if not m.any():
            continue
        alloc = memory.total_allocated[m]
        device_type = DEVICE_TYPES.get(dtype, str(dtype))
        reserved = memory.total_reserved[m]
        devices.append(MemoryDevice(
            device=f"{device_type}:{did}" if did >= 0 else device_type,
            peak_allocated_bytes=int(alloc.max()) if (alloc >= 0).any() else None,
            peak_reserved_bytes=int(reserved.max()) if (reserved >= 0).any() else None,
            allocations=int((memory.nbytes[m] > 0).sum()),
            allocated_bytes=int(memory.nbytes[m][memory.nbytes[m] > 0].sum())))
    return Memory(recorded=True, devices=devices,
                  top_allocators=_top_allocators(table, memory, win, top, sites, nesting))


def _enclosing_op(table: EventTable, nesting: Nesting, rows: np.ndarray) -> np.ndarray:
    """For each row, itself if it is a CPU op, else its nearest enclosing CPU op (or -1)."""
    while True:  # ends: parent links have no cycle (a parent comes before its child in start order)
        bad = (rows >= 0) & (table.cat[np.maximum(rows, 0)] != Cat.CPU_OP)
        if not bad.any():
            return rows
        rows = np.where(bad, nesting.parent[np.maximum(rows, 0)], rows)


def _top_allocators(table: EventTable, memory: MemoryTable, win: np.ndarray, top: int,
                    sites: np.ndarray | None, nesting: Nesting) -> list[Allocator]:
    allocs = np.flatnonzero(win & (memory.nbytes > 0))
    if not len(allocs):
        return []
    ops = np.flatnonzero(table.cat == Cat.CPU_OP)
    out: dict[tuple[str, int], dict] = {}
    for thread in distinct(memory.thread[allocs]).tolist():
        a = allocs[memory.thread[allocs] == thread]
        o = ops[table.thread[ops] == thread]
        if not len(o):
            continue
        # Innermost containing op: climbing from the latest op started by the allocation to
        # the enclosing CPU ops (nesting parents) until one is still open.
        o = o[np.argsort(table.ts[o], kind="stable")]
        row = innermost_open(o, table.ts[o], memory.ts[a], end_of=lambda r: table.ts[r] + table.dur[r],
                             up=lambda r: _enclosing_op(table, nesting, nesting.parent[r]))
        for i, r in zip(a.tolist(), row.tolist()):
            if r < 0:
                continue
            name = table.strings[table.name[r]]
            site = int(sites[r]) if sites is not None else -1
            d = out.get((name, site))
            if d is None:
                d = out[(name, site)] = {"op": name, "allocations": 0, "bytes": 0}
                where = parse_site(table.strings[site]) if site >= 0 else None
                if where:
                    d.update({"function": where[0], "line": where[1], "file": where[2]})
            d["allocations"] += 1
            d["bytes"] += int(memory.nbytes[i])
    # Ties in bytes ordered by what they are, not by internal thread or string ids.
    ranked = sorted(out.values(), key=lambda d: (-d["bytes"], -d["allocations"], d["op"], d.get("file") or "",
                                                 d.get("line") or 0))[:top]
    return [Allocator(**d) for d in ranked]
