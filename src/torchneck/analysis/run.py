"""Analyses that need a live run's evidence: phases, one-time costs, ops by the user's line."""

from __future__ import annotations

import numpy as np

from ..trace.table import Cat, Trace
from .ops import Nesting, host_nesting, in_windows
from .python_stacks import Samples, hotspots, user_line_at
from .steps import find_steps


def run_phases(run: dict) -> dict:
    """Split the run's wall time at the step clock's ticks.

    startup: script start to the first step boundary (imports, data and model set-up, the first
    step with its lazy initialisation and compilation); warmup: up to the profiled window;
    window: the profiled steps; rest: after. `step_s` lists every step's duration, whole run.
    """
    start = run["started_monotonic_ns"]
    end = run["ended_monotonic_ns"]
    clock = run["clock"]
    ticks = clock.get("ticks") or []
    step_s = list(np.diff(ticks) / 1e9) if len(ticks) > 1 else []
    first = ticks[0] if ticks else end
    w0 = clock.get("window_start_ns") or start
    w1 = clock.get("window_end_ns") or end
    if clock.get("whole_run"):
        w0, w1 = start, end
    phases = {
        "startup_s": (first - start) / 1e9,
        "warmup_s": max(0.0, (w0 - first) / 1e9) if ticks and not clock.get("whole_run") else 0.0,
        "window_s": (w1 - w0) / 1e9,
        "rest_s": max(0.0, (end - w1) / 1e9),
    }
    steady = step_s[clock.get("window_first_step") or 0:] if step_s else []
    return {
        "clock": clock.get("kind"),
        "steps_seen": max(len(ticks) - 1, 0) if ticks else 0,
        "step_s": step_s,
        "steady_step_s": float(np.median(steady)) if steady else None,
        "first_step_s": step_s[0] if step_s else None,
        "phases": phases,
        "window_offsets_s": ((w0 - start) / 1e9, (w1 - start) / 1e9),
        "first_tick_offset_s": (first - start) / 1e9,
    }


def trace_clock_offset_us(trace: Trace, run: dict) -> float | None:
    """µs to add to a monotonic time (in µs) to get the trace's `ts`, from the ProfilerStep marks
    recorded at the moment each `ProfilerStep#N` began (median over steps: robust to jitter)."""
    marks = dict(run["clock"].get("step_marks") or [])
    diffs = []
    for step in find_steps(trace.events):
        if step.source == "ProfilerStep" and step.index in marks:
            diffs.append(step.start - marks[step.index] / 1e3)
    return float(np.median(diffs)) if diffs else None


def ops_by_user_line(trace: Trace, samples: Samples, run: dict, nesting: Nesting | None = None,
                     top: int = 25) -> list[dict]:
    """CPU ops' self time grouped by (op, the user's line that was running when the op started).

    The line comes from the Python sample covering the op's start on the main thread (sampling
    is every ~1 ms, so an op is placed by the sample of its moment, not by its own stack).
    """
    offset = trace_clock_offset_us(trace, run)
    if offset is None or samples.start_monotonic_ns is None or not len(samples.end_s):
        return []
    t = trace.events
    steps = find_steps(t)
    lo, hi = min(s.start for s in steps), max(s.end for s in steps)
    rows = np.flatnonzero(in_windows(t, [(lo, hi)]) & (t.cat == Cat.CPU_OP))
    if not len(rows):
        return []
    main = _main_thread(t, rows)
    rows = rows[t.thread[rows] == main]
    if nesting is None:
        nesting = host_nesting(t)
    mono_us = t.ts[rows] - offset
    since_start_s = (mono_us * 1e3 - samples.start_monotonic_ns) / 1e9
    fids = user_line_at(samples, since_start_s)
    key = t.name[rows].astype(np.int64) * (len(samples.frames) + 1) + (fids + 1)
    uniq, inverse = np.unique(key, return_inverse=True)
    self_us = np.bincount(inverse, weights=nesting.self_time[rows])
    count = np.bincount(inverse)
    out = []
    for g in np.argsort(-self_us)[:top].tolist():
        name_id, fid = divmod(int(uniq[g]), len(samples.frames) + 1)
        fid -= 1
        entry = {"op": t.strings[name_id], "self_us": float(self_us[g]), "count": int(count[g])}
        if fid >= 0:
            fn, file, line = samples.frames[fid]
            entry.update({"file": file, "line": line, "function": fn})
        out.append(entry)
    return out


def _main_thread(t, rows) -> int:
    threads, counts = np.unique(t.thread[rows], return_counts=True)
    return int(threads[np.argmax(counts)])


def python_phases(samples: Samples, phases: dict) -> dict:
    """Hotspots of the steady-state window and of start-up (one-time costs), separately."""
    w0, w1 = phases["window_offsets_s"]
    first = phases["first_tick_offset_s"]
    return {
        "window": hotspots(samples, w0, w1),
        "startup": hotspots(samples, -np.inf, first, top=10),
        "whole_run": hotspots(samples, top=10),
    }
