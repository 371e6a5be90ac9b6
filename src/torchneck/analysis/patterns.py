"""Two op patterns of torch's profiler pattern matcher (`torch/profiler/_pattern_matcher.py`)
that need the event tree, found on the event table: half-precision matmuls with dimensions the
tensor cores cannot tile, and CPU tensors filled and then copied to the GPU."""

from __future__ import annotations

import json

import numpy as np

from ..trace.table import Cat, EventTable, in_categories
from .ops import Nesting, callers, cpu_ops_among

HALF_MATMUL_OPS = ("aten::mm", "aten::bmm", "aten::addmm")
TENSOR_CORE_MULTIPLE = 8
"""fp16/bf16 tensor-core GEMMs tile by 8 elements; other sizes pad or fall back to slower kernels."""
_HALF_TYPES = ("c10::Half", "c10::BFloat16")
_FILL_OPS = ("aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_")
_COPY_TO_GPU_RUNTIME = ("cudaMemcpyAsync", "hipMemcpyAsync", "hipMemcpyWithStream", "cudaMemcpy")


def _json(table: EventTable, sid: int, cache: dict):
    if sid not in cache:
        try:
            cache[sid] = json.loads(table.strings[sid]) if sid >= 0 else None
        except ValueError:
            cache[sid] = None
    return cache[sid]


def _launched_kernel_us(table: EventTable, ops: np.ndarray) -> float:
    """GPU time of the kernels launched under these host ops (runtime calls inside their spans
    on their thread, matched to kernels by correlation id)."""
    if not len(ops):
        return 0.0
    runtime = np.flatnonzero((table.cat == Cat.RUNTIME) & (table.correlation >= 0))
    kernels = np.flatnonzero(in_categories(table.cat, (Cat.KERNEL,)) & (table.correlation >= 0))
    if not len(runtime) or not len(kernels):
        return 0.0
    kernel_us: dict[int, float] = {}
    for c, d in zip(table.correlation[kernels].tolist(), table.dur[kernels].tolist()):
        kernel_us[c] = kernel_us.get(c, 0.0) + d
    rts = table.ts[runtime]
    total = 0.0
    for op in ops.tolist():
        lo, hi = np.searchsorted(rts, [table.ts[op], table.ts[op] + table.dur[op]], side="left")
        for r in runtime[lo:hi].tolist():
            if table.thread[r] == table.thread[op]:
                total += kernel_us.get(int(table.correlation[r]), 0.0)
    return total


def unaligned_half_matmuls(table: EventTable, nesting: Nesting, rows: np.ndarray, top: int = 5) -> dict:
    """`aten::mm`/`bmm`/`addmm` with float16/bfloat16 inputs whose last two dimensions are not all
    multiples of 8 (torch's `MatMulDimInFP16Pattern`; needs record_shapes). `kernel_us`: the
    GPU time of their kernels; `shapes`: the most frequent input shapes."""
    names = table.names_matching(lambda s: s in HALF_MATMUL_OPS)
    half = table.names_matching(lambda s: any(t in s for t in _HALF_TYPES))
    ops = rows[(table.cat[rows] == Cat.CPU_OP) & (table.types[rows] >= 0) & (table.shapes[rows] >= 0)]
    if not len(ops) or not names.any() or not half.any():
        return {"recorded": bool(len(ops)), "count": 0, "kernel_us": 0.0, "shapes": []}
    ops = ops[names[table.name[ops]] & half[table.types[ops]]]
    cache: dict = {}
    hits, by_shape = [], {}
    for r in ops.tolist():
        shapes = _json(table, int(table.shapes[r]), cache) or []
        matrices = [s for s in shapes if isinstance(s, list) and len(s) >= 2]
        if matrices and any(d % TENSOR_CORE_MULTIPLE for s in matrices for d in s[-2:]):
            hits.append(r)
            key = (table.strings[table.name[r]], json.dumps(matrices))
            by_shape[key] = by_shape.get(key, 0) + 1
    hits = np.asarray(hits, dtype=np.int64)
    return {"recorded": True, "count": int(len(hits)), "kernel_us": _launched_kernel_us(table, hits),
            "shapes": [{"op": op, "shapes": json.loads(s), "count": n}
                       for (op, s), n in sorted(by_shape.items(), key=lambda kv: -kv[1])[:top]]}


def filled_then_copied_to_gpu(table: EventTable, nesting: Nesting, rows: np.ndarray) -> dict:
    """A CPU tensor filled (`fill_`, `zero_`, `normal_`, `uniform_`: torch.zeros, torch.randn...)
    and immediately copied to the GPU (`aten::to` with a memcpy underneath), as
    `torch.zeros(n).to("cuda")` does (torch's `ExtraCUDACopyPattern`): creating it on the GPU
    (`device="cuda"`) skips the host fill and the copy. Matched when the op right before the
    `aten::to` on its thread, at the same caller, is (or ends in) one of those fills.
    `copy_us`: the host time of those `aten::to` calls."""
    cpu = cpu_ops_among(table, rows)
    to_name = table.names_matching(lambda s: s == "aten::to")
    if not len(cpu) or not to_name.any():
        return {"count": 0, "copy_us": 0.0}
    fill_name = table.names_matching(lambda s: s in _FILL_OPS)
    memcpy_name = table.names_matching(lambda s: s in _COPY_TO_GPU_RUNTIME)
    runtime = np.flatnonzero((table.cat == Cat.RUNTIME) & memcpy_name[table.name])
    copies = cpu[to_name[table.name[cpu]]]
    if not len(copies) or not len(runtime):
        return {"count": 0, "copy_us": 0.0}
    # Each aten::to with a memcpy runtime call nested inside it (its thread's call stack) moves
    # data to a GPU: walk up from those runtime calls.
    is_copy = np.zeros(len(table), dtype=bool)
    is_copy[copies] = True
    moving_mask = np.zeros(len(table), dtype=bool)
    up = nesting.parent[runtime]
    while len(up):
        up = up[up >= 0]
        moving_mask[up[is_copy[up]]] = True
        up = nesting.parent[up]
    del is_copy, up
    moving = np.flatnonzero(moving_mask).tolist()
    if not moving:
        return {"count": 0, "copy_us": 0.0}
    # The op right before it at the same caller: the last host op that ended before it started.
    # Only ops under the callers of these copies can be one (a few, usually): order just those.
    caller = callers(table, nesting, cpu)
    wanted = callers(table, nesting, np.asarray(moving, dtype=np.int64))
    wanted_mask = np.zeros(len(table) + 1, dtype=bool)  # by caller row + 1 (0: top level)
    wanted_mask[wanted + 1] = True
    caller += 1  # in place: no second array as long as the ops
    keep = wanted_mask[caller]
    caller -= 1
    del wanted_mask
    cpu_near, caller = cpu[keep], caller[keep]
    del keep
    order = np.lexsort((table.ts[cpu_near], caller, table.thread[cpu_near]))
    seq, caller = cpu_near[order], caller[order]
    del cpu_near, order
    position = np.flatnonzero(moving_mask[seq])  # where each of the copies sits in that order
    position = position[position > 0]
    op, prev = seq[position], seq[position - 1]
    same = (table.thread[prev] == table.thread[op]) & (caller[position - 1] == caller[position])
    op, prev = op[same], prev[same]
    # torch.zeros -> aten::zeros -> aten::zero_: the fill is the previous op or its last descendant
    last = _last_started_within(table, cpu, prev)
    hits = op[fill_name[table.name[prev]] | fill_name[table.name[last]]]
    return {"count": int(len(hits)), "copy_us": float(table.dur[hits].sum()) if len(hits) else 0.0}


def _last_started_within(table: EventTable, host_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of `rows` (host ops), the op among `host_rows` (sorted by start) on its thread that
    starts last within its span: its last (innermost on ties) descendant, or itself."""
    last = rows.copy()
    if not len(rows):
        return last
    threads = table.thread[rows]
    for thread in np.unique(threads).tolist():
        these = np.flatnonzero(threads == thread)
        on_thread = host_rows[table.thread[host_rows] == thread]
        mine = rows[these]
        at = np.searchsorted(table.ts[on_thread], table.ts[mine] + table.dur[mine], side="right") - 1
        found = at >= 0
        found[found] &= table.ts[on_thread[at[found]]] >= table.ts[mine[found]]
        last[these[found]] = on_thread[at[found]]
    return last
