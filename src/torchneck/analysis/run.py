"""Analyses that need a live run's evidence: phases, one-time costs, ops by the user's line."""

from __future__ import annotations

import numpy as np

from ..trace.table import Cat, Trace
from .intervals import merge
from .nesting import Nesting, host_nesting
from .ops import has_line_marks, rows_starting_in
from .python_stacks import Samples, hotspots, user_line_at
from .steps import find_steps
from .trace_stacks import describe_site, has_call_stacks, trace_site_keys


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
    inside, after = _steps_inside_and_after(ticks, w0, w1) if not clock.get("whole_run") else ([], [])
    profiled = float(np.median(inside)) if inside else None
    unprofiled = float(np.median(after)) if len(after) >= 2 else None
    return {
        "clock": clock.get("kind"),
        "steps_seen": max(len(ticks) - 1, 0) if ticks else 0,
        "step_s": step_s,
        "steady_step_s": float(np.median(steady)) if steady else None,
        "first_step_s": step_s[0] if step_s else None,
        "phases": phases,
        "window_offsets_s": ((w0 - start) / 1e9, (w1 - start) / 1e9),
        "first_tick_offset_s": (first - start) / 1e9,
        "window_note": clock.get("window_note"),
        "profiled_step_s": profiled,
        "unprofiled_step_s": unprofiled,
        "profiling_slowdown": profiled / unprofiled if profiled and unprofiled else None,
    }


PROFILING_SLOWDOWN_WARN = 1.5
"""Profiled steps 1.5x slower than unprofiled ones: the profiler's per-op cost (a few µs) is
large against the ops themselves (many tiny ops), so absolute times in the window are inflated
while shares stay roughly right. Said in the report, not hidden."""


def _steps_inside_and_after(ticks: list[int], w0: int, w1: int) -> tuple[list[float], list[float]]:
    """Durations (s) of steps inside the profiled window, and of those after it, leaving out the
    first step after it (it holds the trace export)."""
    inside, after = [], []
    for a, b in zip(ticks, ticks[1:]):
        if a >= w0 and b <= w1:
            inside.append((b - a) / 1e9)
        elif a >= w1:
            after.append((b - a) / 1e9)
    return inside, after[1:]


def profiling_warning(phases: dict) -> str | None:
    """A sentence for the report when profiling slowed the profiled steps down markedly."""
    slow = phases.get("profiling_slowdown")
    if slow is None or slow < PROFILING_SLOWDOWN_WARN:
        return None
    return (f"profiled steps ran {slow:.1f}x slower than unprofiled ones ({phases['profiled_step_s'] * 1e3:.1f} vs "
            f"{phases['unprofiled_step_s'] * 1e3:.1f} ms): the profiler's per-op cost is large against these ops, "
            "so absolute times in the window are inflated; shares between ops stay comparable")


def trace_clock_offset_us(trace: Trace, run: dict) -> float | None:
    """µs to add to a monotonic time (in µs) to get the trace's `ts`, from the ProfilerStep marks
    recorded at the moment each `ProfilerStep#N` began (median over steps: robust to jitter)."""
    marks = dict(run["clock"].get("step_marks") or [])
    diffs = []
    for step in find_steps(trace.events):
        if step.source == "ProfilerStep" and step.index in marks:
            diffs.append(step.start - marks[step.index] / 1e3)
    return float(np.median(diffs)) if diffs else None


def ops_by_user_line(trace: Trace, samples: Samples | None, offset_us: float | None,
                     nesting: Nesting | None = None, top: int = 25) -> list[dict]:
    """CPU ops' self time in the profiled steps, grouped by (op, the user's line that caused it).

    The line comes, most exact first, from the trace itself (`trace_stacks.trace_site_keys`):
    the `torchneck@` span the op runs inside (see `capture/lines.py`: every torch call from the
    user's code is wrapped while profiling) or, in a `with_stack=True` trace, the innermost
    user function around the op (its first line: the function rather than the statement); or
    else from the Python sample covering the op's start on the main thread (every ~1-2 ms, so
    an op shorter than that is placed by the sample of its moment, not by its own stack).
    Each entry says which (`source`: "trace", "stack" or "samples"). Without samples, marks or
    Python events nothing can place an op: then [] at once.
    """
    t = trace.events
    if samples is None and not len(trace.python) and not has_line_marks(t) and not has_call_stacks(trace):
        return []
    steps = find_steps(t)
    if not steps:
        return []
    lo, hi = min(s.start for s in steps), max(s.end for s in steps)
    if nesting is None:
        nesting = host_nesting(t)
    rows = nesting.ops_in(rows_starting_in(t, lo, hi))
    if not len(rows):
        return []
    key = trace_site_keys(trace, nesting, rows)
    n_strings = len(t.strings)  # after: placing by "Call stack" may add frame names
    rest = np.flatnonzero(key < 0)
    if len(rest) and samples is not None and offset_us is not None and samples.start_monotonic_ns is not None \
            and len(samples.end_s):
        main = _main_thread(t, rows)
        rest = rest[t.thread[rows[rest]] == main]
        since_start_s = ((t.ts[rows[rest]] - offset_us) * 1e3 - samples.start_monotonic_ns) / 1e9
        fids = user_line_at(samples, since_start_s)
        ok = fids >= 0
        key[rest[ok]] = n_strings + fids[ok]
    width = n_strings + (len(samples.frames) if samples is not None else 0) + 1
    combined = t.name[rows].astype(np.int64) * width + (key + 1)
    uniq, inverse = np.unique(combined, return_inverse=True)
    self_us = np.bincount(inverse, weights=nesting.self_time(rows))
    count = np.bincount(inverse)
    out = []
    for g in np.argsort(-self_us).tolist():
        name_id, k = divmod(int(uniq[g]), width)
        k -= 1
        entry = {"op": t.strings[name_id], "self_us": float(self_us[g]), "count": int(count[g])}
        where = describe_site(t.strings[k]) if 0 <= k < n_strings else None
        if where:
            entry.update(where)
        elif k >= n_strings:
            fn, file, line = samples.frames[k - n_strings]
            entry.update({"file": file, "line": line, "function": fn, "source": "samples"})
        else:  # neither a span nor a sample places these calls: no line to name
            continue
        out.append(entry)
        if len(out) == top:
            break
    return out


def _main_thread(t, rows) -> int:
    threads, counts = np.unique(t.thread[rows], return_counts=True)
    return int(threads[np.argmax(counts)])


def sample_op_seconds(trace: Trace, samples: Samples, offset_us: float | None) -> np.ndarray | None:
    """For each sample, the seconds of its interval (since the previous sample) that the
    script's thread spent inside torch CPU ops, from the trace.

    A sample only sees Python frames: a user line calling `torch.mm` looks like the line's own
    Python. The trace knows when ops ran; what is left of the interval is Python (or another
    library). None when the sample clock cannot be aligned with the trace.

    A timer signal that fires inside a long C call is handled only when the call returns to
    Python, so such a sample stands for the op, not for the Python before it: when the sample
    was taken within `DEFERRED_SLACK_US` of the end of an op of at least `DEFERRING_OP_US`, its
    whole interval counts as op time. Otherwise the Python of the lines before the op would be
    charged to the op's line.
    """
    if offset_us is None or samples.start_monotonic_ns is None or not len(samples.end_s):
        return None
    t = trace.events
    rows = np.flatnonzero(t.cat == Cat.CPU_OP)
    if not len(rows):
        return np.zeros(len(samples.end_s))
    rows = rows[t.thread[rows] == _main_thread(t, rows)]
    starts, ends = merge(t.ts[rows], t.ts[rows] + t.dur[rows])
    covered_before = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def covered(at_us: np.ndarray) -> np.ndarray:
        """Op time (µs) on the main thread before each instant."""
        k = np.searchsorted(starts, at_us, side="right")  # intervals starting before
        full = covered_before[np.maximum(k - 1, 0)]
        partial = np.clip(at_us - starts[np.maximum(k - 1, 0)], 0.0, None)
        inside = np.minimum(partial, (ends - starts)[np.maximum(k - 1, 0)])
        return np.where(k > 0, full + inside, 0.0)

    base_us = samples.start_monotonic_ns / 1e3 + offset_us
    end_us = base_us + samples.end_s * 1e6
    begin_us = end_us - samples.dur_s * 1e6
    in_ops = (covered(end_us) - covered(begin_us)) / 1e6
    last = np.searchsorted(ends, end_us, side="right") - 1  # the last op run that ended before
    ok = last >= 0
    last = np.maximum(last, 0)
    deferred = (ok & (end_us - ends[last] <= DEFERRED_SLACK_US)
                & (ends[last] - starts[last] >= DEFERRING_OP_US) & (ends[last] > begin_us))
    return np.where(deferred, samples.dur_s, in_ops)


DEFERRED_SLACK_US = 500.0
"""A handler run this soon after an op returned was (most likely) waiting for it: Python
runs the pending signal at the first bytecode after the C call, well within 0.5 ms."""
DEFERRING_OP_US = 1000.0
"""Only ops this long: a signal is then far likelier to have fired during the op than in the
0.5 ms after it (shorter ops would make the guess a coin toss)."""


def python_phases(samples: Samples, phases: dict, op_s: np.ndarray | None = None) -> dict:
    """Hotspots of the steady-state window and of start-up (one-time costs), separately.
    `op_s` (see `sample_op_seconds`) moves time inside torch ops out of "self" time; it is used
    for the window only, the part of the run the trace covers."""
    w0, w1 = phases["window_offsets_s"]
    first = phases["first_tick_offset_s"]
    return {
        "window": hotspots(samples, w0, w1, op_s=op_s),
        # the user's lines running inside DataLoader iteration (Dataset code, collate functions)
        "loading": hotspots(samples, w0, w1, top=5, only=samples.loading),
        "startup": hotspots(samples, -np.inf, first, top=10),
        "whole_run": hotspots(samples, top=10),
    }
