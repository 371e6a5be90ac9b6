"""Host syncs: places where the CPU stops and waits for the device (or forces a scalar out)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from ..model.analysis import CodeSite, ScalarOp, SyncCause, Syncs
from ..trace.table import Cat, EventTable, in_categories
from .nesting import Nesting, Rows
from .ops import row_blocks, rows_where

_SYNC_CALLS = re.compile(r"(cuda|hip)(Stream|Device|Event)Synchronize|cuStreamSynchronize|"
                         r"cuCtxSynchronize|cuEventSynchronize")
_SCALAR_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero",
               "aten::equal", "aten::allclose", "aten::masked_select", "aten::unique",
               "aten::_unique2", "aten::repeat_interleave"}
"""Ops whose result (a Python scalar, or a shape that depends on the data) needs the device's
answer before the CPU can go on: on a GPU each is a sync, on any device each breaks a
compiled graph."""


def host_syncs(table: EventTable, nesting: Nesting, rows: Rows,
               place: Callable[[np.ndarray, np.ndarray], list[CodeSite]] | None = None) -> Syncs:
    """Sync calls, device-to-host copies and scalar-producing ops among `rows`.

    Each sync is charged to the outermost CPU op on its thread that contains it (the op the
    user's code called), so `.item()` shows as `aten::item`, not as a runtime call. With
    `place`, also `where`: `place(those ops, their waits)`, the user's code that waited.
    """
    names = table.strings
    sync_ids = table.names_matching(lambda s: bool(_SYNC_CALLS.search(s)))
    scalar_ids = table.names_matching(lambda s: s in _SCALAR_OPS)
    dtoh_ids = table.names_matching(lambda s: "DtoH" in s)
    sync_parts, scalar_parts, dtoh_parts = [], [], []
    for block in row_blocks(rows):  # the window's masks a block at a time (7 MB each at 3 GB)
        cat = table.cat[block]
        name = table.name[block]
        is_sync_call = (in_categories(cat, (Cat.RUNTIME, Cat.DRIVER)) & sync_ids[name]) | (cat == Cat.SYNC)
        sync_parts.append(rows_where(block, is_sync_call))
        scalar_parts.append(rows_where(block, (cat == Cat.CPU_OP) & scalar_ids[name]))
        dtoh_parts.append(rows_where(block, (cat == Cat.GPU_MEMCPY) & dtoh_ids[name]))
    sync_rows, scalar_rows, dtoh_rows = (np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)
                                         for parts in (sync_parts, scalar_parts, dtoh_parts))
    del sync_parts, scalar_parts, dtoh_parts
    by_cause: dict[str, SyncCause] = {}
    causes = outermost_ops(table, nesting, sync_rows)
    for r, cause in zip(sync_rows.tolist(), causes.tolist()):
        key = names[table.name[cause]] if cause >= 0 else names[table.name[r]]
        c = by_cause.setdefault(key, SyncCause(op=key, count=0, wait_us=0.0))
        c.count += 1
        c.wait_us += float(table.dur[r])
    scalar: dict[str, ScalarOp] = {}
    for r in scalar_rows.tolist():
        if nesting.parent[r] >= 0 and table.cat[nesting.parent[r]] == Cat.CPU_OP and \
                scalar_ids[table.name[nesting.parent[r]]]:
            continue  # aten::_local_scalar_dense inside aten::item: count once
        key = names[table.name[r]]
        s = scalar.setdefault(key, ScalarOp(op=key, count=0, time_us=0.0))
        s.count += 1
        s.time_us += float(table.dur[r])
    where = []
    if place is not None and len(sync_rows):
        where = place(np.where(causes >= 0, causes, sync_rows), table.dur[sync_rows])
    return Syncs(sync_calls=int(len(sync_rows)), sync_wait_us=float(table.dur[sync_rows].sum()),
                 by_cause=sorted(by_cause.values(), key=lambda c: -c.wait_us),
                 scalar_ops=sorted(scalar.values(), key=lambda s: -s.time_us),
                 dtoh_copies=int(len(dtoh_rows)), dtoh_us=float(table.dur[dtoh_rows].sum()), where=where)


def outermost_ops(table: EventTable, nesting: Nesting, rows: np.ndarray) -> np.ndarray:
    """For each row, the outermost CPU op enclosing it on its thread (-1 if none): all rows walk
    up their parent chains together, one level per step."""
    best = np.full(len(rows), -1, dtype=np.int64)
    at = np.arange(len(rows))
    up = nesting.parent[rows]
    while len(at):
        keep = up >= 0
        at, up = at[keep], up[keep]
        is_op = table.cat[up] == Cat.CPU_OP
        best[at[is_op]] = up[is_op]
        up = nesting.parent[up]
    return best
