"""Two op patterns of torch's profiler pattern matcher (`torch/profiler/_pattern_matcher.py`)
that need the event tree, found on the event table: half-precision matmuls with dimensions the
tensor cores cannot tile, and CPU tensors filled and then copied to the GPU."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from ..model.analysis import CodeSite, FilledThenCopied, HalfMatmulUnaligned, ShapeExample
from ..trace.table import Cat, EventTable, search_sorted
from .groups import positions_in
from .intervals import ascending
from .nesting import Nesting
from .ops import callers, cpu_ops_among, launched_kernels, ops_by_arg_pairs, row_blocks, rows_matching

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
    """GPU time of the kernels launched under these host ops (`ops.launched_kernels`)."""
    return float(table.dur[launched_kernels(table, ops)].astype(np.float64).sum())


def unaligned_half_matmuls(table: EventTable, nesting: Nesting, rows: np.ndarray, top: int = 5,
                           place: Callable[[np.ndarray], list[CodeSite]] | None = None) -> HalfMatmulUnaligned:
    """`aten::mm`/`bmm`/`addmm` with float16/bfloat16 inputs whose leading dimensions (each input
    matrix's last: K and N of [M, K] @ [K, N]) are not multiples of 8 (torch's
    `MatMulDimInFP16Pattern`, less M: an odd M costs nothing, measured on an H100 by
    benchmarks/gemm_alignment.py, while an odd K or N costs 5-6x; needs record_shapes).
    `kernel_us`: the GPU time of their kernels (`odd_kernel_us` of those with an odd leading
    dimension); `shapes`: the most frequent input shapes; with `place`, `where`: the user's code
    that ran them."""
    names = table.names_matching(lambda s: s in HALF_MATMUL_OPS)
    half = table.names_matching(lambda s: any(t in s for t in _HALF_TYPES))
    shaped = table.arg_pairs_matching(lambda shapes, types: shapes >= 0 and types >= 0)
    shaped_half = table.arg_pairs_matching(lambda shapes, types: shapes >= 0 and types >= 0 and bool(half[types]))
    recorded, ops = ops_by_arg_pairs(table, rows, shaped, shaped_half, names)
    if not recorded or not names.any() or not half.any():
        return HalfMatmulUnaligned(recorded=recorded)
    cache: dict = {}
    hits: list[int] = []
    odd: list[int] = []
    by_shape: dict[tuple[str, str], int] = {}
    for r in ops.tolist():
        shapes = _json(table, int(table.shapes[r]), cache) or []
        matrices = [s for s in shapes if isinstance(s, list) and len(s) >= 2]
        leading = [s[-1] for s in matrices if isinstance(s[-1], int)]
        if any(d % TENSOR_CORE_MULTIPLE for d in leading):
            hits.append(r)
            if any(d % 2 for d in leading):
                odd.append(r)
            key = (table.strings[table.name[r]], json.dumps(matrices))
            by_shape[key] = by_shape.get(key, 0) + 1
    found = np.asarray(hits, dtype=np.int64)
    return HalfMatmulUnaligned(recorded=True, count=int(len(found)), kernel_us=_launched_kernel_us(table, found),
                               odd_kernel_us=_launched_kernel_us(table, np.asarray(odd, dtype=np.int64)),
                               shapes=[ShapeExample(op=op, shapes=json.loads(s), count=n)
                                       for (op, s), n in sorted(by_shape.items(), key=lambda kv: -kv[1])[:top]],
                               where=place(found) if place is not None and len(found) else [])


def filled_then_copied_to_gpu(table: EventTable, nesting: Nesting, rows: np.ndarray) -> FilledThenCopied:
    """A CPU tensor filled (`fill_`, `zero_`, `normal_`, `uniform_`: torch.zeros, torch.randn...)
    and immediately copied to the GPU (`aten::to` with a memcpy underneath), as
    `torch.zeros(n).to("cuda")` does (torch's `ExtraCUDACopyPattern`): creating it on the GPU
    (`device="cuda"`) skips the host fill and the copy. Matched when the op right before the
    `aten::to` on its thread, at the same caller, is (or ends in) one of those fills.
    `copy_us`: the host time of those `aten::to` calls."""
    cpu = cpu_ops_among(table, rows)
    to_name = table.names_matching(lambda s: s == "aten::to")
    if not len(cpu) or not to_name.any():
        return FilledThenCopied()
    fill_name = table.names_matching(lambda s: s in _FILL_OPS)
    memcpy_name = table.names_matching(lambda s: s in _COPY_TO_GPU_RUNTIME)
    runtime = rows_matching(slice(0, len(table)), lambda b: (table.cat[b] == Cat.RUNTIME) & memcpy_name[table.name[b]])
    copies = rows_matching(cpu, lambda block: to_name[table.name[block]])
    if not len(copies) or not len(runtime):
        return FilledThenCopied()
    # Each aten::to with a memcpy runtime call nested inside it (its thread's call stack) moves
    # data to a GPU: walk up from those runtime calls. Sets of rows are sorted arrays looked up
    # by binary search, not masks as long as the table (7 MB each at 3 GB).
    found = []
    up = nesting.parent[runtime]
    while len(up):
        up = up[up >= 0]
        found.append(up[positions_in(copies, up) >= 0])
        up = nesting.parent[up]
    moving = np.unique(np.concatenate(found)) if found else np.empty(0, np.int64)
    del found, up
    if not len(moving):
        return FilledThenCopied()
    # The op right before it at the same caller: the last host op that ended before it started.
    # Only ops under the callers of these copies can be one (a few, usually): order just those.
    wanted = np.unique(callers(table, nesting, moving))
    near, near_caller = [], []
    for block in row_blocks(cpu):
        caller = callers(table, nesting, block)
        keep = positions_in(wanted, caller) >= 0
        near.append(block[keep])
        near_caller.append(caller[keep])
    cpu_near, caller = np.concatenate(near), np.concatenate(near_caller)
    del near, near_caller
    order = np.lexsort((table.ts[cpu_near], caller, table.thread[cpu_near]))
    seq, caller = cpu_near[order], caller[order]
    del cpu_near, order
    position = np.flatnonzero(positions_in(moving, seq) >= 0)  # where each of the copies sits in that order
    position = position[position > 0]
    op, prev = seq[position], seq[position - 1]
    same = (table.thread[prev] == table.thread[op]) & (caller[position - 1] == caller[position])
    op, prev = op[same], prev[same]
    # torch.zeros -> aten::zeros -> aten::zero_: the fill is the previous op or its last descendant
    last = _last_started_within(table, cpu, prev)
    hits = op[fill_name[table.name[prev]] | fill_name[table.name[last]]]
    return FilledThenCopied(count=int(len(hits)), copy_us=float(table.dur[hits].sum()) if len(hits) else 0.0)


def _last_started_within(table: EventTable, host_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of `rows` (host ops), the op among `host_rows` (ascending) on its thread that
    starts last within its span: its last (innermost on ties) descendant, or itself.

    On a table in start order (as loaded) the rows starting by an op's end are those below one
    row number, so the ops are found by row number and no start time of `host_rows` is gathered
    (31 MB for the 3.9 M ops of a 3 GB trace); otherwise by position in `host_rows` sorted by
    start, longer first on ties."""
    last = rows.copy()
    if not len(rows):
        return last
    ends = table.ts[rows] + table.dur[rows]
    in_start_order = ascending(table.ts)
    if in_start_order:
        bound = np.searchsorted(table.ts, ends, side="right")  # rows starting by each one's end
    else:
        host_rows = host_rows[np.lexsort((-table.dur[host_rows], table.ts[host_rows]))]  # longer (outer) first
        bound = np.searchsorted(table.ts[host_rows], ends, side="right")  # positions, likewise
    host_threads = table.thread[host_rows]
    threads = table.thread[rows]
    for thread in np.unique(threads).tolist():
        these = np.flatnonzero(threads == thread)
        mine = host_threads == thread
        on_thread = host_rows if mine.all() else host_rows[mine]
        key = on_thread if in_start_order else np.flatnonzero(mine)  # ascending, as `bound` counts
        del mine
        at = search_sorted(key, bound[these]) - 1  # the last of the thread's ops below the bound
        found = at >= 0
        candidate = on_thread[np.maximum(at, 0)]
        found &= table.ts[candidate] >= table.ts[rows[these]]
        last[these[found]] = candidate[found]
    return last
