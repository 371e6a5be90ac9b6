"""The optimizer's own work in the window: the ops inside its record_function spans
(`Optimizer.step#...`, `Optimizer.zero_grad#...`, which torch opens around every call), and the
gradients backward wrote (autograd's `AccumulateGrad`). The optimizer rules weigh a fix against
these: what a fused step would still do, what setting gradients to None would skip."""

from __future__ import annotations

import numpy as np

from ..model.analysis import OpRow, OptimizerWork, SpanOps
from ..trace.table import Cat, EventTable
from .intervals import ROW_BLOCK, ascending
from .nesting import Nesting, Rows
from .ops import rows_matching

SPAN_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
OPS_KEPT = 30
"""Op names kept per span, most self time first (an optimizer runs a dozen kinds)."""


def optimizer_work(table: EventTable, nesting: Nesting, rows: Rows, cpu_ops: np.ndarray) -> OptimizerWork:
    """The ops inside the optimizer's spans that start among `rows`, by span name, and the
    window's `AccumulateGrad` calls (`cpu_ops`: the window's CPU ops) with their inner ops."""
    is_span = table.names_matching(lambda s: s.startswith(SPAN_PREFIXES))
    spans = rows_matching(rows, lambda block: (table.cat[block] == Cat.USER_ANNOTATION) & is_span[table.name[block]])
    order = None if ascending(table.ts) else np.argsort(table.ts, kind="stable")
    by_name: dict[int, list[int]] = {}
    for r in spans.tolist():
        by_name.setdefault(int(table.name[r]), []).append(r)
    out = [_span_ops(table, nesting, calls, order) for calls in by_name.values()]
    accumulated, added = _accumulate_grad(table, nesting, cpu_ops)
    return OptimizerWork(spans=sorted(out, key=lambda s: -s.total_us), gradients_accumulated=accumulated,
                         accumulate_added_us=added)


def _inside(table: EventTable, span: int, order: np.ndarray | None) -> np.ndarray:
    """The CPU ops on the span's thread that start and end within it."""
    start, end = float(table.ts[span]), float(table.ts[span] + table.dur[span])
    if order is None:
        rows = np.arange(np.searchsorted(table.ts, start, side="left"), np.searchsorted(table.ts, end, side="right"))
    else:
        starts = table.ts[order]
        rows = np.sort(order[np.searchsorted(starts, start, side="left"):np.searchsorted(starts, end, side="right")])
    keep = (table.cat[rows] == Cat.CPU_OP) & (table.thread[rows] == table.thread[span])
    keep &= table.ts[rows] + table.dur[rows] <= end
    return rows[keep]


def _span_ops(table: EventTable, nesting: Nesting, calls: list[int], order: np.ndarray | None) -> SpanOps:
    """One span name's calls: their ops by name. An op directly inside an op of its own name is
    the same call dispatched again (PyTorch <= 1.10 records `aten::zero_` in `aten::zero_`): its
    self time counts, not as a call."""
    inside = [_inside(table, r, order) for r in calls]
    ops = np.concatenate(inside) if inside else np.empty(0, dtype=np.int64)
    calls_of = [int(np.count_nonzero(~_redispatched(table, nesting, rows))) for rows in inside]
    again = _redispatched(table, nesting, ops)
    self_us = nesting.self_time(ops).astype(np.float64)
    names, inverse = np.unique(table.name[ops], return_inverse=True)
    count = np.bincount(inverse, weights=~again, minlength=len(names))
    self_total = np.bincount(inverse, weights=self_us, minlength=len(names))
    wall = np.bincount(inverse, weights=np.where(again, 0.0, table.dur[ops].astype(np.float64)), minlength=len(names))
    rows = [OpRow(name=table.strings[int(names[g])], count=int(count[g]), self_us=float(self_total[g]),
                  total_us=float(wall[g]), mean_us=float(wall[g] / max(count[g], 1)))
            for g in np.argsort(-self_total, kind="stable")[:OPS_KEPT].tolist()]
    return SpanOps(name=table.strings[int(table.name[calls[0]])], count=len(calls),
                   total_us=float(sum(float(table.dur[r]) for r in calls)), ops=rows,
                   first_call_ops=calls_of[0], last_call_ops=calls_of[-1])


def _redispatched(table: EventTable, nesting: Nesting, ops: np.ndarray) -> np.ndarray:
    """Per op, whether its direct parent is an op of the same name."""
    parent = nesting.parent[ops]
    return (parent >= 0) & (table.name[np.maximum(parent, 0)] == table.name[ops])


def _accumulate_grad(table: EventTable, nesting: Nesting, cpu_ops: np.ndarray) -> tuple[int, float]:
    """(`AccumulateGrad` calls among `cpu_ops`, the self time of the ops directly inside them),
    a block of ops at a time."""
    is_acc = table.names_matching(lambda s: s == ACCUMULATE_GRAD)
    if not is_acc.any():
        return 0, 0.0
    calls, added = 0, 0.0
    for a in range(0, len(cpu_ops), ROW_BLOCK):
        block = cpu_ops[a:a + ROW_BLOCK]
        calls += int(np.count_nonzero(is_acc[table.name[block]]))
        parent = nesting.parent[block]
        child = parent >= 0
        child[child] = is_acc[table.name[parent[child]]]
        if child.any():
            added += float(nesting.self_time(block)[child].astype(np.float64).sum())
    return calls, added
