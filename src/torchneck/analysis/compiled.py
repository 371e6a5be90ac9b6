"""torch.compile as seen in a profiler trace: compiled regions, graph breaks, recompiles."""

from __future__ import annotations

import re

import numpy as np

from ..trace.table import Cat, EventTable, in_categories
from .groups import distinct
from .intervals import union_length
from .nesting import Nesting, Rows
from .ops import rows_matching

_REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)")
_GRAPH_CALL = re.compile(r"^## Call CompiledFxGraph|^CompiledFunction$|^CompiledFunctionBackward$")
_FX_CALL = re.compile(r"^## Call CompiledFxGraph (\w+)")
GENERATED_KERNEL = re.compile(r"^(triton_|cpp_fused_|cpp_|halide_|cutlass_|cuda_fused_)")
"""Names inductor gives the kernels it generates (Triton on GPUs, C++ on CPUs, and its other
code generators); any other kernel or op run inside a compiled graph is an ATen fallback."""
ORIGIN_ROWS = 100
"""Ops and kernels listed per origin table (most time first)."""
_COMPILE_SPAN = re.compile(r"^(dynamo|entire_frame_compile|_compile\.compile_inner|compile_attempt_\d+|backend_compile"
                           r"|OutputGraph\.call_user_compiler)( \(dynamo_timed\))?$")
"""dynamo's own `dynamo_timed` spans: a region that compiles (first call, recompile) holds one."""


def compiled_summary(table: EventTable, nesting: Nesting | None, rows: Rows, lo: float, hi: float) -> dict:
    """Compiled frames within `rows`.

    `Torch-Compiled Region: F/C` marks frame F compiled for the C-th time (C > 0: a recompile).
    A region nested inside another region on the same thread means dynamo resumed after a graph
    break. CPU ops outside every region (on threads that run regions) are eager code.

    Per frame: `time_us` in its regions, `nested_us` of that in regions nested in them,
    `graph_us` in compiled-graph calls (`CompiledFunction`, `## Call CompiledFxGraph`) run
    directly in them, `compile_us` compiling (dynamo's spans, when the window holds a compile),
    and `eager_us`, the rest: code between graphs run eagerly. Backends that
    leave no graph-call span (`eager`) make the split unknowable: `eager_us` is then None.
    """
    none = np.empty(0, dtype=np.int32)
    if nesting is None:  # no host call nesting (no CPU events): no region can be placed
        return {"present": False}
    region_ids = table.names_matching(lambda s: bool(_REGION.match(s)))
    if not region_ids.any():  # no compiled region in the trace: no pass over the window's rows
        return {"present": False}
    reg = rows_matching(rows, lambda b: in_categories(table.cat[b], (Cat.CPU_OP, Cat.USER_ANNOTATION))
                        & region_ids[table.name[b]])
    if not len(reg):
        return {"present": False}
    frames: dict[int, dict] = {}
    frame_of_row: dict[int, dict] = {}
    nested = 0
    for r in reg.tolist():
        m = _REGION.match(table.strings[table.name[r]])
        if m is None:  # pragma: no cover - the rows were chosen by this pattern
            continue
        f, c = int(m.group(1)), int(m.group(2))
        d = frames.setdefault(f, {"frame": f, "calls": 0, "compile_ids": set(), "time_us": 0.0,
                                  "nested_calls": 0, "nested_us": 0.0, "graph_us": 0.0,
                                  "compile_us": 0.0})
        frame_of_row[r] = d
        d["calls"] += 1
        d["compile_ids"].add(c)
        d["time_us"] += float(table.dur[r])
    for r in reg.tolist():
        outer = _enclosing(r, nesting, lambda p: p in frame_of_row)
        if outer >= 0:
            nested += 1
            frame_of_row[r]["nested_calls"] += 1
            frame_of_row[outer]["nested_us"] += float(table.dur[r])
    is_graph_name = table.names_matching(lambda s: bool(_GRAPH_CALL.match(s)))
    graph_rows = rows_matching(rows, lambda b: is_graph_name[table.name[b]]) if len(is_graph_name) else none
    for r in graph_rows.tolist():
        # A graph call counts for the region it runs in directly (not through a nested region,
        # and not inside another graph call: CompiledFunction wraps inductor's graph call).
        owner = _enclosing(r, nesting, lambda p: p in frame_of_row or bool(is_graph_name[table.name[p]]))
        if owner in frame_of_row:
            frame_of_row[owner]["graph_us"] += float(table.dur[r])
    is_compile_name = table.names_matching(lambda s: bool(_COMPILE_SPAN.match(s)))
    compile_rows = rows_matching(rows, lambda b: is_compile_name[table.name[b]]) if len(is_compile_name) else none
    for r in compile_rows.tolist():  # the outermost compile span of a region that compiled
        owner = _enclosing(r, nesting, lambda p: p in frame_of_row or bool(is_compile_name[table.name[p]]))
        if owner in frame_of_row:
            frame_of_row[owner]["compile_us"] += float(table.dur[r])
    split = len(graph_rows) > 0
    for d in frames.values():
        # Inside a compiled frame, time outside its graphs, its compilation and its nested
        # (resumed) frames is Python run eagerly: the code at a graph break, guards, glue.
        rest = d["time_us"] - d["nested_us"] - d["graph_us"] - d["compile_us"]
        d["eager_us"] = max(rest, 0.0) if split else None
    threads = distinct(table.thread[reg])
    top_ops = rows_matching(rows, lambda b: (table.cat[b] == Cat.CPU_OP) & (nesting.parent[b] < 0)
                            & np.isin(table.thread[b], threads))  # on the threads that run regions
    in_region = union_length(table.ts[reg], table.ts[reg] + table.dur[reg], lo, hi)
    eager_us = 0.0
    if len(top_ops):
        # Top-level ops not inside any region: eager code between compiled graphs.
        starts = np.sort(table.ts[reg])
        ends = (table.ts[reg] + table.dur[reg])[np.argsort(table.ts[reg])]
        run_end = np.maximum.accumulate(ends)
        j = np.searchsorted(starts, table.ts[top_ops], side="right") - 1
        inside = (j >= 0) & (run_end[np.maximum(j, 0)] > table.ts[top_ops])
        eager_us = float(table.dur[top_ops[~inside]].sum())
    graph_calls = int(len(graph_rows))
    origins = _origins(table, nesting, rows, graph_rows)
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
        "graph_call_us": float(sum(d["graph_us"] for d in frames.values())) if split else None,
        "eager_in_regions_us": float(sum(d["eager_us"] for d in frames.values())) if split else None,
        "compiling_in_regions_us": float(sum(d["compile_us"] for d in frames.values())),
        "origins": origins,
    }


def _origins(table: EventTable, nesting: Nesting, rows: Rows, graph_rows: np.ndarray) -> dict:
    """Which ops and GPU kernels a compiled graph ran: a CPU op inside a compiled-graph call
    (`## Call CompiledFxGraph <key>`, or `CompiledFunction[Backward]` for backends that leave no
    inner span) is an ATen fallback (inductor generates no CPU op for its own kernels); a GPU
    kernel launched from inside one is inductor-generated when its name is one inductor gives
    (`triton_*`, `cpp_fused_*`), an ATen fallback (cuBLAS, cuDNN...) otherwise. Per name: the
    origin, calls, time and the graph calls (FX graph cache keys) it ran in."""
    out: dict = {"ops": {}, "kernels": {}}
    names = table.strings
    if not len(graph_rows):
        return out
    fx = np.array([bool(_FX_CALL.match(names[table.name[r]])) for r in graph_rows.tolist()])
    spans = graph_rows[fx] if fx.any() else graph_rows  # the innermost graph calls
    order = np.argsort(table.ts[spans], kind="stable")
    spans = spans[order]
    starts, ends = table.ts[spans], table.ts[spans] + table.dur[spans]
    threads = table.thread[spans]
    key_of = []
    for r in spans.tolist():
        m = _FX_CALL.match(names[table.name[r]])
        key_of.append(m.group(1) if m else names[table.name[r]])

    def span_of(ts: np.ndarray, thread: np.ndarray) -> np.ndarray:
        """Index into `spans` of the graph call (same thread) open at each instant, or -1."""
        found = np.full(len(ts), -1, dtype=np.int64)
        for th in np.unique(threads).tolist():
            on = np.flatnonzero(threads == th)
            mine = thread == th
            j = np.searchsorted(starts[on], ts[mine], side="right") - 1
            ok = (j >= 0) & (ends[on][np.maximum(j, 0)] >= ts[mine])
            found[np.flatnonzero(mine)[ok]] = on[j[ok]]
        return found

    def add(table_out: dict, name: str, origin: str, key: str, n: int, us: float) -> None:
        d = table_out.setdefault(name, {"origin": origin, "count": 0, "time_us": 0.0, "graph_calls": []})
        d["count"] += n
        d["time_us"] += us
        if key not in d["graph_calls"] and len(d["graph_calls"]) < 8:
            d["graph_calls"].append(key)

    span_threads = distinct(threads)
    ops = rows_matching(rows, lambda b: (table.cat[b] == Cat.CPU_OP) & np.isin(table.thread[b], span_threads))
    if len(ops):
        at = span_of(table.ts[ops], table.thread[ops])
        inside = at >= 0
        self_us = nesting.self_time(ops[inside]).astype(np.float64)
        for r, k, us in zip(ops[inside].tolist(), at[inside].tolist(), self_us.tolist()):
            add(out["ops"], names[table.name[r]], "aten_fallback", key_of[k], 1, us)
    kernels = rows_matching(rows, lambda b: table.cat[b] == Cat.KERNEL)
    if len(kernels):
        launcher = np.asarray(table.launcher[kernels]).astype(np.int64)
        has = launcher >= 0
        at = np.full(len(kernels), -1, dtype=np.int64)
        if has.any():
            at[has] = span_of(table.ts[launcher[has]], table.thread[launcher[has]])
        for r, k in zip(kernels.tolist(), at.tolist()):
            name = names[table.name[r]]
            generated = bool(GENERATED_KERNEL.match(name))
            if k < 0 and not generated:
                continue
            add(out["kernels"], name, "inductor" if generated else "aten_fallback",
                key_of[k] if k >= 0 else "", 1, float(table.dur[r]))
    for key in ("ops", "kernels"):
        top = sorted(out[key].items(), key=lambda kv: -kv[1]["time_us"])[:ORIGIN_ROWS]
        out[key] = dict(top)
    return out


def _enclosing(row: int, nesting: Nesting, wanted) -> int:
    """The nearest enclosing host event of `row` for which `wanted(parent)` holds, or -1."""
    p = int(nesting.parent[row])
    while p >= 0 and not wanted(p):
        p = int(nesting.parent[p])
    return p
