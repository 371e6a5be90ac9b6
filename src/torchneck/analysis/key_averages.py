"""torch.profiler's `key_averages()` table, computed from a loaded trace.

The profiler recipe teaches `prof.key_averages(group_by_input_shape=..., group_by_stack_n=N)
.table(sort_by=..., row_limit=...)`; here the same rows come from the columnar table of any
trace, a file the user only has on disk included. What torch does (`_parse_kineto_results` in
torch/autograd/profiler.py, `EventList` in profiler_util.py) and how it is done here:

- Function events: every host event (ops, `record_function` labels, runtime and driver calls,
  and in `with_stack` traces the Python calls), less a few utility ops torch drops
  (`TORCH_DROPPED`) and torchneck's own per-line spans, which are looked through. GPU events
  (kernels, copies, fills, GPU-side labels) are rows of their own with device time only.
- A row's children: torch sorts a thread's events by (start, -end) and keeps a stack, popping
  every open event the next one does not fit inside. That equals the host call-stack walk
  (`ops.host_nesting`: parent = innermost event not ended by the start), corrected where an
  event sticks out of its parent (`fix_overhangs`): an event is then no longer a parent of
  anything that comes after the one that stuck out. Self time is the duration less the
  direct children's.
- `_remove_dup_nodes`: a child with its parent's name that is the parent's only child is
  merged into it (`aten::sum` calling `aten::sum`): not a row, its children the parent's.
- Memory: the bytes of every `[memory]` record inside an event's [start, end] on any thread
  (prefix sums over the records in time order), self memory less the children's; records
  inside no event form torch's `[memory]` row.
- Device time: a kernel counts for the op (or label) that launched it (its launching runtime
  call's parent) as self device time, and for every enclosing event as device time.
- Stacks (`group_by_stack_n`): the Python calls open at an event's start, innermost first,
  read from the trace's `python_function` events (the same frames torch records as each op's
  stack, which it exports only with `_ExperimentalConfig(verbose=True)`), or from the ops'
  `Call stack` argument in traces without Python events (PyTorch 1.8-1.11).

Where the result differs from torch of necessity: ops run by autograd's backward pass get the
stack of the `.backward()` call, where torch gives them their forward op's stack (matched by
sequence numbers the loader does not keep; the report's `notes` say so). And torch links a kernel
to the op recorded with its launch (the trace's "External id", which the loader does not keep
either); the launching call's enclosing op is the same op on the H100 and MI250 traces of
tests/data except for kernels replayed from a CUDA graph outside any op (torch: no op), under
inductor's "## Call CompiledFxGraph" spans (torch: the compiled region around them) and NCCL's
(torch: `record_param_comms`).

Every pass goes through the table a block of rows at a time (`ROW_BLOCK`) and totals by group,
so the temporaries stay a few MB on traces of any size; only `with_stack` traces,
whose Python calls must be nested with the host events, get one combined table of those events.

This module writes the table; the work is split by job:
- `key_averages_forest.py`: the function events and torch's parent of each (overhangs, merged
  duplicates), and the row kinds and block size the others share;
- `key_averages_groups.py`: each row's group key (name, kind, input shapes, stack);
- `key_averages_totals.py`: the sums per group, and the `[memory]` records inside events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TorchneckError
from ..trace.table import Cat, EventTable, Trace, in_categories
from .key_averages_forest import (
    KIND_DEVICE,
    KIND_MEMORY,
    KIND_NAMES,
    KIND_OF_CAT,
    ROW_BLOCK,
    Forest,
    Parents,
    combined_forest,
    fix_overhangs,
    host_forest,
    merge_duplicates,
    scan_forest,
)
from .key_averages_groups import Keys
from .key_averages_totals import SUM_INDEX, Coverage, DenseTotals, MemoryInIntervals, Totals
from .nesting import Nesting

DEFAULT_SORT = "self_cpu_time_total"
DEFAULT_ROW_LIMIT = 25
"""Rows kept in the report when no `--row-limit` is given: the recipe prints 5-10; the HTML table
sorts the kept rows by any column."""

FRONTEND_CATS = (Cat.CPU_OP, Cat.USER_ANNOTATION)
"""Events a kernel can belong to: torch links a kernel to the op or label (a RecordFunction)
open when it was launched, never to the runtime call or a Python frame."""
DEVICE_CATS = (Cat.KERNEL, Cat.GPU_MEMCPY, Cat.GPU_MEMSET, Cat.GPU_USER_ANNOTATION)

SORT_KEYS = ("self_cpu_time_total", "cpu_time_total", "cpu_time", "self_device_time_total", "device_time_total",
             "device_time", "self_cpu_memory_usage", "cpu_memory_usage", "self_device_memory_usage",
             "device_memory_usage", "count")
"""`--sort-by` values: key_averages' attribute names (with `cuda`, `xpu` or `privateuse1` in
place of `device`, as `table(sort_by=...)` accepts). `cpu_time`/`device_time` are averages."""
_DEVICE_ALIASES = ("cuda", "xpu", "privateuse1", "mtia", "hpu")


def sort_key(name: str) -> str:
    """The canonical column for a `sort_by` name (`self_cuda_time_total` -> `self_device_time_total`);
    TorchneckError naming the valid ones otherwise."""
    canon = name.strip().lower()
    for alias in _DEVICE_ALIASES:
        canon = canon.replace(alias, "device")
    if canon not in SORT_KEYS:
        raise TorchneckError(f"--sort-by {name!r}: not a key_averages column; use one of "
                             + ", ".join(SORT_KEYS) + " (cuda_* for device_*)")
    return canon


@dataclass(frozen=True)
class TableOptions:
    """What `key_averages(...).table(...)` was asked for. `requested`: the user gave one of the
    options, so the terminal shows the table (it is always in the JSON and the HTML)."""

    sort_by: str = DEFAULT_SORT
    row_limit: int = DEFAULT_ROW_LIMIT  # -1: every row, as torch's row_limit=-1
    group_by_input_shape: bool = False
    group_by_stack_n: int = 0
    requested: bool = False

    @classmethod
    def make(cls, sort_by: str | None = None, row_limit: int | None = None, group_by_shape: bool = False,
             group_by_stack: int | None = None) -> TableOptions:
        """Validated options from the command line or the API (TorchneckError: one clear line)."""
        if row_limit is not None and (row_limit == 0 or row_limit < -1):
            raise TorchneckError("--row-limit must be a positive number of rows (-1 for all)")
        if group_by_stack is not None and group_by_stack < 0:
            raise TorchneckError("--group-by-stack must be a number of frames, 0 or more")
        return cls(sort_by=sort_key(sort_by) if sort_by is not None else DEFAULT_SORT,
                   row_limit=row_limit if row_limit is not None else DEFAULT_ROW_LIMIT,
                   group_by_input_shape=bool(group_by_shape), group_by_stack_n=int(group_by_stack or 0),
                   requested=sort_by is not None or row_limit is not None or bool(group_by_shape)
                   or bool(group_by_stack))

    def to_dict(self) -> dict:
        return {"sort_by": self.sort_by, "row_limit": self.row_limit,
                "group_by_input_shape": self.group_by_input_shape, "group_by_stack_n": self.group_by_stack_n,
                "requested": self.requested}



def key_averages(trace: Trace, nesting: Nesting, options: TableOptions | None = None) -> dict:
    """`prof.key_averages(group_by_input_shape, group_by_stack_n)` of the whole trace, its rows
    sorted by `options.sort_by` (largest first, ties in order of first occurrence), the first
    `row_limit` kept. Times µs, memory bytes, named as torch's attributes."""
    options = options or TableOptions()
    forest = combined_forest(trace) if len(trace.python) else host_forest(trace, nesting)
    ft = forest.table
    canon_name = _canonical_names(ft)
    parents = Parents(forest)
    scan = scan_forest(forest, parents, canon_name)
    fix_overhangs(parents, scan.overhang, scan.overhang_parent)
    merge_duplicates(parents, canon_name, scan.same_name)
    present = scan.present
    _device_names(trace.events, canon_name, present)
    keys = Keys(forest, trace, options.group_by_input_shape, options.group_by_stack_n, canon_name, present)
    totals = keys.totals()
    memory = MemoryInIntervals(trace)
    coverage = Coverage(memory.ts)
    for pos, kinds in forest.blocks():
        if len(parents.merged):
            kept = ~parents.is_merged(pos)
            pos, kinds = pos[kept], kinds[kept]
        start, dur = ft.ts[pos], ft.dur[pos]
        columns: dict[str, np.ndarray | None] = {"count": None, "cpu_time_total": dur}
        par = parents(pos)
        has = par >= 0
        child: dict[str, np.ndarray | None] = {"child_cpu": dur[has]}
        if memory.recorded:
            end = start + dur
            coverage.add(start, end)
            mem_cpu, mem_dev = memory(start, end)
            columns |= {"cpu_memory_usage": mem_cpu, "device_memory_usage": mem_dev}
            child |= {"child_cpu_memory": mem_cpu[has], "child_device_memory": mem_dev[has]}
        totals.add(keys.of(pos, kinds), columns, start)
        totals.add(keys.of(par[has], forest.kinds(par[has])), child)
    _device_rows(trace, forest, parents, keys, totals)
    uncovered = memory.uncovered(coverage.finish())
    return _table(keys, totals, uncovered, options, memory.recorded, forest)


def _canonical_names(table: EventTable) -> np.ndarray:
    """Per string id, the id torch keys a row by: every `ProfilerStep#N` is one `ProfilerStep*`
    (keyed by the first of them, named when the table is written: the table's strings are not
    added to, as other analyses read them on another thread)."""
    canon = np.arange(len(table.strings), dtype=np.int64)
    steps = np.flatnonzero(table.names_matching(lambda s: s.startswith("ProfilerStep#")))
    if len(steps):
        canon[steps] = steps[0]
    return canon


def _has_backward(table: EventTable) -> bool:
    """Whether autograd's backward pass ran ops in the trace."""
    return bool(table.names_matching(lambda s: s.startswith("autograd::engine::evaluate_function")).any())


def _row_name(name: str) -> str:
    return "ProfilerStep*" if name.startswith("ProfilerStep#") else name


def _device_names(table: EventTable, canon_name: np.ndarray, present: np.ndarray) -> None:
    for a in range(0, len(table), ROW_BLOCK):
        cat = table.cat[a:a + ROW_BLOCK]
        present[canon_name[table.name[a:a + ROW_BLOCK][in_categories(cat, DEVICE_CATS)]]] = True


_IS_FRONTEND = np.zeros(len(Cat), dtype=bool)
_IS_FRONTEND[[int(c) for c in FRONTEND_CATS]] = True


def _device_rows(trace: Trace, forest: Forest, parents: Parents, keys: Keys,
                 totals: Totals | DenseTotals) -> None:
    """GPU events as rows of their own, and each kernel's time charged to the op that launched
    it (self device time) and to every event around that op (device time)."""
    t = trace.events
    for a in range(0, len(t), ROW_BLOCK):
        rows = np.flatnonzero(in_categories(t.cat[a:a + ROW_BLOCK], DEVICE_CATS)) + a
        if not len(rows):
            continue
        kinds = KIND_OF_CAT[t.cat[rows]]
        dur = t.dur[rows]
        totals.add(keys.of(rows, kinds, table=t), {"count": None, "self_device_time_total": dur,
                                                    "device_time_total": dur}, t.ts[rows])
        kernel = kinds == KIND_DEVICE
        launcher = t.launcher[rows[kernel]].astype(np.int64)
        dur = dur[kernel]
        launched = launcher >= 0
        at = forest.event_pos(launcher[launched])
        found = at >= 0
        owner, dur = parents(at[found]), dur[launched][found]
        while True:  # the launching op or label: not a runtime call, not a Python frame
            climb = owner >= 0
            climb[climb] = ~_IS_FRONTEND[forest.table.cat[owner[climb]]]
            if not climb.any():
                break
            owner[climb] = parents(owner[climb])
        keep = owner >= 0
        owner, dur = owner[keep], dur[keep]
        if not len(owner):
            continue
        totals.add(keys.of(owner, forest.kinds(owner)), {"self_device_time_total": dur})
        up = owner
        while len(up):
            totals.add(keys.of(up, forest.kinds(up)), {"device_time_total": dur})
            up = parents(up)
            keep = up >= 0
            up, dur = up[keep], dur[keep]


def _table(keys: Keys, totals: Totals | DenseTotals, uncovered: tuple[int, int, int], options: TableOptions,
           memory_recorded: bool, forest: Forest) -> dict:
    uniq, sums, first = totals.result()
    rows_present = sums[:, SUM_INDEX["count"]] > 0
    uniq, sums, first = uniq[rows_present], sums[rows_present], first[rows_present]
    name_id, kind, shape, stack = keys.split(uniq)
    count = sums[:, SUM_INDEX["count"]]
    cols = {
        "count": count,
        "cpu_time_total": sums[:, SUM_INDEX["cpu_time_total"]],
        "self_cpu_time_total": sums[:, SUM_INDEX["cpu_time_total"]] - sums[:, SUM_INDEX["child_cpu"]],
        "device_time_total": sums[:, SUM_INDEX["device_time_total"]],
        "self_device_time_total": sums[:, SUM_INDEX["self_device_time_total"]],
        "cpu_memory_usage": sums[:, SUM_INDEX["cpu_memory_usage"]],
        "self_cpu_memory_usage": sums[:, SUM_INDEX["cpu_memory_usage"]] - sums[:, SUM_INDEX["child_cpu_memory"]],
        "device_memory_usage": sums[:, SUM_INDEX["device_memory_usage"]],
        "self_device_memory_usage": sums[:, SUM_INDEX["device_memory_usage"]]
        - sums[:, SUM_INDEX["child_device_memory"]],
    }
    strings = forest.table.strings
    names = [_row_name(strings[int(i)]) for i in name_id.tolist()]
    kinds = kind.tolist()
    shapes, stacks = shape.tolist(), stack.tolist()
    n_mem, mem_cpu, mem_dev = uncovered
    if n_mem:  # torch's row of the records no event encloses
        names.append("[memory]")
        kinds.append(KIND_MEMORY)
        shapes.append(0)
        stacks.append(0)
        first = np.append(first, np.inf)
        extra = {"count": n_mem, "cpu_memory_usage": mem_cpu, "self_cpu_memory_usage": mem_cpu,
                 "device_memory_usage": mem_dev, "self_device_memory_usage": mem_dev}
        cols = {k: np.append(v, extra.get(k, 0.0)) for k, v in cols.items()}
    n = len(names)
    cols["cpu_time"] = np.divide(cols["cpu_time_total"], cols["count"], out=np.zeros(n), where=cols["count"] > 0)
    cols["device_time"] = np.divide(cols["device_time_total"], cols["count"], out=np.zeros(n),
                                    where=cols["count"] > 0)
    kind_arr = np.asarray(kinds, dtype=np.int64)
    is_device = kind_arr == KIND_DEVICE
    order = np.lexsort((first, -cols[options.sort_by])) if n else np.empty(0, dtype=np.int64)
    limit = n if options.row_limit < 0 else min(n, options.row_limit)
    out_rows = []
    for g in order[:limit].tolist():
        row: dict = {"name": names[g], "kind": KIND_NAMES[kinds[g]]}
        for k in ("count",):
            row[k] = int(cols[k][g])
        for k in ("self_cpu_time_total", "cpu_time_total", "cpu_time", "self_device_time_total", "device_time_total",
                  "device_time"):
            row[k] = float(cols[k][g])
        for k in ("self_cpu_memory_usage", "cpu_memory_usage", "self_device_memory_usage", "device_memory_usage"):
            row[k] = int(round(float(cols[k][g])))
        if options.group_by_input_shape:
            row["input_shapes"] = keys.shapes_text[shapes[g]]
        if options.group_by_stack_n:
            row["stack"] = keys.stacks.frames_of[stacks[g]]
        out_rows.append(row)
    notes = []
    if options.group_by_stack_n and keys.stacks.source is None:
        notes.append("the trace holds no Python stacks (record it with with_stack=True): rows are not split by stack")
    if options.group_by_stack_n and keys.stacks.source is not None and _has_backward(forest.table):
        notes.append("ops run by the backward pass are grouped under the stack of the .backward() call; torch "
                     "groups them under their forward op's stack")
    return {
        "options": options.to_dict(),
        "self_cpu_time_total": float(cols["self_cpu_time_total"].sum()),
        "self_device_time_total": float(cols["self_device_time_total"][is_device].sum()),
        "groups": n,
        "has_device_time": bool((cols["self_device_time_total"] > 0).any()),
        "has_memory": bool(memory_recorded),
        "has_device_memory": bool((cols["self_device_memory_usage"] > 0).any()),
        "stack_source": keys.stacks.source,
        "rows": out_rows,
        "notes": notes,
    }

