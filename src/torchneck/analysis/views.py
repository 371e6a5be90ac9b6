"""Data for the pictures in the HTML report: one step's timeline, the sampled Python stacks as a
tree (flame graph / icicle), memory over time. Pure functions; sizes are capped so a report of
a huge trace stays a few MB.
"""

from __future__ import annotations

import numpy as np

from ..sites import is_user_file
from ..trace.table import Cat, MemoryTable, Trace, in_categories
from .intervals import overlapping_rows
from .nesting import Nesting, depth_of
from .python_stacks import Samples
from .steps import Step

TIMELINE_MAX_EVENTS = 4000
"""Events drawn for the representative step, longest first: beyond a few thousand, the extra
ones are sub-pixel slivers that only make the page heavier."""

STACK_MIN_SHARE = 0.002
"""Flame-graph nodes under 0.2 % of the samples are dropped: invisible at any sane width."""

MEMORY_MAX_POINTS = 600

_TIMELINE_CATS = {Cat.CPU_OP, Cat.USER_ANNOTATION, Cat.GPU_USER_ANNOTATION, Cat.KERNEL, Cat.GPU_MEMCPY,
                  Cat.GPU_MEMSET, Cat.RUNTIME, Cat.DRIVER, Cat.SYNC}
_CAT_LABEL = {Cat.CPU_OP: "op", Cat.USER_ANNOTATION: "annotation", Cat.GPU_USER_ANNOTATION: "annotation",
              Cat.KERNEL: "kernel", Cat.GPU_MEMCPY: "memcpy", Cat.GPU_MEMSET: "memset", Cat.RUNTIME: "runtime",
              Cat.DRIVER: "runtime", Cat.SYNC: "sync"}


def representative_step(steps: list[Step]) -> Step | None:
    """The step whose duration is closest to the median: what a typical step looks like."""
    if not steps:
        return None
    durations = np.array([s.duration for s in steps])
    return steps[int(np.argmin(np.abs(durations - np.median(durations))))]


def step_timeline(trace: Trace, step: Step, nesting: Nesting | None = None,
                  max_events: int = TIMELINE_MAX_EVENTS) -> dict:
    """Events of one step, per lane (a CPU thread, or a GPU device and stream), in µs from the
    step's start: `lanes[i].events` are `[start, duration, name id, category, depth]`, names in
    `names`. Longest events are kept when there are more than `max_events`."""
    t = trace.events
    wanted = [int(c) for c in _TIMELINE_CATS]
    rows = overlapping_rows(t.ts, t.dur, step.start, step.end, mask=lambda block: in_categories(t.cat[block], wanted))
    dropped = 0
    if len(rows) > max_events:
        keep = np.argsort(-t.dur[rows], kind="stable")[:max_events]
        dropped = len(rows) - max_events
        rows = np.sort(rows[keep])
    names: dict[int, int] = {}
    lanes: dict[tuple, dict] = {}
    meta = trace.meta
    depths = depth_of(nesting, rows).tolist() if nesting is not None else [0] * len(rows)
    for r, depth in zip(rows.tolist(), depths):
        cat = Cat(int(t.cat[r]))
        if t.device[r] >= 0 and cat in (Cat.KERNEL, Cat.GPU_MEMCPY, Cat.GPU_MEMSET, Cat.GPU_USER_ANNOTATION):
            key = (1, int(t.device[r]), int(t.stream[r]))
            label = f"GPU {key[1]} stream {key[2]}"
        else:
            th = int(t.thread[r])
            pid, tid = t.threads.pid[th], t.threads.tid[th]
            key = (0, th, 0)
            label = meta.thread_names.get((pid, tid)) or f"CPU thread {tid}"
        lane = lanes.get(key)
        if lane is None:
            lane = lanes[key] = {"name": label, "kind": "gpu" if key[0] else "cpu", "events": []}
        nid = names.setdefault(int(t.name[r]), len(names))
        depth = 0 if key[0] else depth
        lane["events"].append([round(float(t.ts[r] - step.start), 2), round(float(t.dur[r]), 2), nid,
                               _CAT_LABEL.get(cat, "other"), depth])
    strings = [""] * len(names)
    for sid, i in names.items():
        strings[i] = t.strings[sid]
    ordered = [lanes[k] for k in sorted(lanes, key=lambda k: (k[0], -len(lanes[k]["events"])))]
    for lane in ordered:  # depth relative to the shallowest event drawn in the lane
        base = min((e[4] for e in lane["events"]), default=0)
        for e in lane["events"]:
            e[4] -= base
    return {"step": step.index, "start_us": step.start, "duration_us": step.duration, "names": strings,
            "lanes": ordered, "events_dropped": dropped}


def stack_tree(samples: Samples, lo_s: float = -np.inf, hi_s: float = np.inf,
               min_share: float = STACK_MIN_SHARE) -> dict | None:
    """Sampled stacks in [lo_s, hi_s) as a tree for a flame graph: each node
    `{"name", "file", "line", "s", "children"}`, `s` the seconds its samples stand for.
    Frames above the user's first frame (torchneck's runner, runpy) are cut off, and importlib's
    bootstrap frames left out."""
    if not len(samples.dur_s):
        return None
    pick = np.flatnonzero((samples.end_s >= lo_s) & (samples.end_s < hi_s))
    if not len(pick):
        return None
    frames = samples.frames
    user = [is_user_file(f[1]) for f in frames]
    # importlib's own frames sit between every importing module and the module it imports
    # (five or more per import): dropped, an import chain reads module -> module.
    noise = [f[1].startswith("<frozen importlib") for f in frames]
    root: dict = {"name": "all", "file": "", "line": 0, "s": 0.0, "children": {}}
    for i in pick.tolist():
        stack = samples.stacks[i]
        first = next((k for k, fid in enumerate(stack) if user[fid]), 0)
        w = float(samples.dur_s[i])
        node = root
        node["s"] += w
        for fid in stack[first:]:
            if noise[fid]:
                continue
            child = node["children"].get(fid)
            if child is None:
                f = frames[fid]
                child = node["children"][fid] = {"name": f[0], "file": f[1], "line": f[2], "s": 0.0,
                                                  "children": {}, "user": user[fid]}
            child["s"] += w
            node = child
    floor = root["s"] * min_share

    def prune(node: dict) -> dict:
        kids = sorted((c for c in node["children"].values() if c["s"] >= floor), key=lambda c: -c["s"])
        node["children"] = [prune(c) for c in kids]
        node["s"] = round(node["s"], 6)
        return node

    return prune(root)


def memory_timeline(memory: MemoryTable, lo_us: float, hi_us: float,
                    max_points: int = MEMORY_MAX_POINTS) -> list[dict]:
    """Allocated bytes over time per device within [lo_us, hi_us], from the memory events'
    running totals; at most `max_points` per device (the maximum of each bucket, so peaks stay)."""
    if not len(memory):
        return []
    out = []
    win = (memory.ts >= lo_us) & (memory.ts <= hi_us) & (memory.total_allocated >= 0)
    for dtype, did in sorted(set(zip(memory.device_type[win].tolist(), memory.device_id[win].tolist()))):
        m = np.flatnonzero(win & (memory.device_type == dtype) & (memory.device_id == did))
        ts = memory.ts[m] - lo_us
        alloc = memory.total_allocated[m].astype(np.float64)
        if len(m) > max_points:
            edges = np.linspace(0, len(m), max_points + 1).astype(np.int64)
            ts = ts[edges[:-1]]
            alloc = np.maximum.reduceat(alloc, edges[:-1])
        name = {0: "cpu", 1: "cuda"}.get(dtype, str(dtype))
        out.append({"device": f"{name}:{did}" if did >= 0 else name,
                    "t_us": [round(float(x), 1) for x in ts], "bytes": [int(x) for x in alloc]})
    return out
