"""Analyses that need a live run's evidence: phases, one-time costs, ops by the user's line."""

from __future__ import annotations

import ast
import functools
import linecache
import os

import numpy as np

from ..sites import TOOL_FRAME, UNSAMPLED_FRAME
from ..trace.table import Cat, Trace
from .intervals import merge
from .nesting import Nesting, host_nesting
from .ops import has_line_marks, rows_starting_in
from .periodic import periodic_steps
from .python_stacks import THREAD_WAIT_FILES, Samples, hotspots, sample_index_at
from .steps import find_steps
from .trace_stacks import describe_site, has_call_stacks, trace_site_keys

LOOP_SAMPLES_MIN = 5
"""Samples of the steady state needed to tell the loop's frames from chance."""


def run_phases(run: dict, samples: Samples | None = None) -> dict:
    """Split the run's wall time at the step clock's ticks (or, without steps, where the capture
    plan saw the steady state begin, or, with the run's samples, where the loop it saw was entered:
    `loop_entered_ns`).

    startup: script start to the steady state: the first step boundary (imports, data and model
    set-up, the first step with its lazy initialisation and compilation), or earlier, where the
    sampled stacks began to repeat (a loop before the steps: tokenizing a corpus, scoring
    predictions); warmup: up to the profiled window; window: the profiled span (torchneck's
    window, or the script's own profiler session whose trace is used); rest: after.
    `step_s` lists every step's duration, whole run.
    """
    start = run["started_monotonic_ns"]
    end = run["ended_monotonic_ns"]
    clock = run["clock"]
    capture = run.get("capture") or {}
    ticks = clock.get("ticks") or []
    step_s = list(np.diff(ticks) / 1e9) if len(ticks) > 1 else []
    w0, w1 = profiled_span(run)
    # a program without steps whose work is long calls (nothing repeats): its work began at the first
    long_call = capture.get("long_call_from_ns") if not ticks else None
    entered = loop_entered_ns(samples, run) if samples is not None and not ticks else None
    steady = min([t for t in (capture.get("steady_from_ns"), ticks[0] if ticks else None, long_call, entered) if t]
                 or [end])
    first = ticks[0] if ticks else steady
    if w0 is None or w1 is None:  # nothing profiled: no window
        w0 = w1 = end
    phases = {
        "startup_s": max(0.0, (steady - start) / 1e9),
        "warmup_s": max(0.0, (w0 - steady) / 1e9) if not clock.get("whole_run") else 0.0,
        "window_s": max(0.0, (w1 - w0) / 1e9),
        "rest_s": max(0.0, (end - w1) / 1e9),
    }
    steady_steps = step_s[clock.get("window_first_step") or 0:] if step_s else []
    inside, after = _steps_inside_and_after(ticks, w0, w1) if not clock.get("whole_run") else ([], [])
    profiled = float(np.median(inside)) if inside else None
    unprofiled = float(np.median(after)) if len(after) >= 2 else None
    return {
        "clock": clock.get("kind"),
        "steps_seen": max(len(ticks) + int(clock.get("ticks_dropped") or 0) - 1, 0) if ticks else 0,
        "step_s": step_s,
        "steady_step_s": float(np.median(steady_steps)) if steady_steps else None,
        "first_step_s": step_s[0] if step_s else None,
        "phases": phases,
        "window_offsets_s": ((w0 - start) / 1e9, (w1 - start) / 1e9),
        "first_tick_offset_s": (first - start) / 1e9,
        "started_monotonic_ns": start,  # the offsets' origin (the sampler's starts a little later)
        "steady_from_offset_s": (steady - start) / 1e9,
        "window_note": clock.get("window_note"),
        "profiled_step_s": profiled,
        "unprofiled_step_s": unprofiled,
        "profiling_slowdown": profiled / unprofiled if profiled and unprofiled else None,
    }


def loop_entered_ns(s: Samples, run: dict) -> int | None:
    """When the loop the capture plan saw repeating (plan "loop": no step clock) was entered: the
    plan needs its stacks to repeat for a while, and its checks come every few ms, so it sees
    the steady state late (a Newton solver's loop entered 0.03 s into the run, seen steady at
    0.82 s: a fifth of the run counted as start-up, and every window share applied to too short a
    steady state). The steady state's samples (from the plan's start to the window's end) share
    their outer frames (the call that runs the loop, to its line) and, one frame deeper, one
    function from the first line they were seen at (the loop's first line: set-up is above it;
    a line below the lines seen, met walking back, is an earlier pass's tail, a Newton step's
    convergence test); walking back from the plan's start, the samples that still do belong to
    the loop. An import or a compilation ends the walk: a one-time cost is start-up even when the
    loop made it. None when nothing earlier is found."""
    capture = run.get("capture") or {}
    since = capture.get("steady_from_ns")
    origin = s.start_monotonic_ns
    if capture.get("plan") != "loop" or not since or not origin or not len(s.end_s):
        return None
    clock = run.get("clock") or {}
    until = clock.get("window_end_ns") or run["ended_monotonic_ns"]
    first = int(np.searchsorted(s.end_s, (since - origin) / 1e9, side="left"))
    last = int(np.searchsorted(s.end_s, (until - origin) / 1e9, side="right"))
    steady = [s.stacks[i] for i in range(first, min(last, len(s.stacks))) if not _synthetic(s, s.stacks[i])]
    if len(steady) < LOOP_SAMPLES_MIN or first == 0:
        return None
    depth = 0  # the frames all the steady samples share, to the line
    while all(len(st) > depth for st in steady) and len({st[depth] for st in steady}) == 1:
        depth += 1
    prefix = steady[0][:depth]
    body = {tuple(s.frames[st[depth]][:2]) for st in steady if len(st) > depth}
    if len(body) != 1:
        return None
    low = min(s.frames[st[depth]][2] for st in steady if len(st) > depth)
    (function, file), = body
    entered = first
    for i in range(first - 1, -1, -1):
        st = s.stacks[i]
        if _synthetic(s, st):
            continue
        if s.importing[i] or s.compiling[i] or st[:depth] != prefix or len(st) <= depth:
            break
        frame = s.frames[st[depth]]
        if (frame[0], frame[1]) != (function, file) or frame[2] < low:
            break
        entered = i
    if entered == first:
        return None
    return origin + int(round((s.end_s[entered] - s.dur_s[entered]) * 1e9))


def _synthetic(s: Samples, stack: list[int]) -> bool:
    """A sample of torchneck's own work or of a pause, not of the program's stack."""
    return len(stack) == 1 and s.frames[stack[0]][0] in (TOOL_FRAME, UNSAMPLED_FRAME)


def profiled_span(run: dict) -> tuple[int | None, int | None]:
    """Monotonic ns of the span the trace covers: torchneck's window, the whole run (`--all`), or
    the script's own profiler session whose trace was taken; (None, None) when nothing was."""
    clock = run["clock"]
    capture = run.get("capture") or {}
    start, end = run["started_monotonic_ns"], run["ended_monotonic_ns"]
    if clock.get("whole_run"):
        return start, end
    if capture.get("trace_source") in ("script_export", "script_events"):
        sessions = [u for u in capture.get("user_profilers") or [] if u.get("started_ns")]
        if capture.get("trace_from"):
            sessions = [u for u in sessions if capture["trace_from"] in (u.get("exports") or [])] or sessions
        if sessions:
            return sessions[-1]["started_ns"], sessions[-1].get("stopped_ns") or end
    w0 = clock.get("window_start_ns")
    if w0 is None:
        return (start, end) if "capture" not in run else (None, None)  # before the capture plan: from the start
    return w0, clock.get("window_end_ns") or end


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
    recorded at the moment each `ProfilerStep#N` began (median over steps: robust to jitter).
    A trace without torchneck's marks (the script's own profiler's) is placed by wall-clock
    time: Kineto's `ts` are µs since the trace's `baseTimeNanoseconds` (Unix time), and run.json
    holds the Unix and monotonic clocks read together at the start."""
    marks = dict(run["clock"].get("step_marks") or [])
    diffs = []
    for step in find_steps(trace.events):
        if step.source == "ProfilerStep" and step.index in marks:
            diffs.append(step.start - marks[step.index] / 1e3)
    if diffs and (run.get("capture") or {}).get("trace_source") in (None, "torchneck"):
        return float(np.median(diffs))
    base = trace.meta.base_time_ns
    unix0 = run.get("started_unix_ns")
    if base is None or unix0 is None:
        return float(np.median(diffs)) if diffs else None
    return (unix0 - run["started_monotonic_ns"] - base) / 1e3


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
        native = _native_ids(t)
        main = _main_thread(t, rows, samples, native)
        # an op on another thread is placed by a sample the watcher took of that thread (format 5)
        stood_for = _stood_for(samples)
        rest = rest[(t.thread[rows[rest]] == main) | np.isin(native[t.thread[rows[rest]]], stood_for[stood_for != 0])]
        row_thread = t.thread[rows[rest]]
        since_start_s = ((t.ts[rows[rest]] - offset_us) * 1e3 - samples.start_monotonic_ns) / 1e9
        at = sample_index_at(samples, since_start_s)
        fids = samples.user_frame[at]
        # a sample waiting on another thread (a server's main thread in `Future.result()` while its
        # worker runs the model) did not issue the op running then: the op is that thread's
        same_thread = np.where(row_thread == main, stood_for[at] == 0, stood_for[at] == native[row_thread])
        ok = (fids >= 0) & ~_waits_on_threads(samples)[at] & same_thread
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
            assert samples is not None  # keys past the trace's strings are sample frames
            fn, file, line = samples.frames[k - n_strings]
            entry.update({"file": file, "line": line, "function": fn, "source": "samples"})
        else:  # neither a span nor a sample places these calls: no line to name
            continue
        out.append(entry)
        if len(out) == top:
            break
    return out


def _native_ids(t) -> np.ndarray:
    """Per trace thread (`t.thread` indexes it), its tid as a number (-1 when not one), and a last
    -1 for an index of -1."""
    return np.array([int(tid) if tid.isdigit() else -1 for tid in t.threads.tid] + [-1], dtype=np.int64)


def _main_thread(t, rows, samples: Samples | None = None, native: np.ndarray | None = None) -> int:
    """The trace's thread of the sampled (main) thread: its native id where the samples name it
    (format 5), else the thread with the most rows (a server's worker may have more than it)."""
    if samples is not None and samples.native_id is not None:
        named = np.flatnonzero((native if native is not None else _native_ids(t))[:-1] == samples.native_id)
        if len(named):
            return int(named[0])
    threads, counts = np.unique(t.thread[rows], return_counts=True)
    return int(threads[np.argmax(counts)])


def _stood_for(samples: Samples) -> np.ndarray:
    """Per sample, the native id of the other thread the watcher sampled in the main thread's
    place (format 5), 0 for the main thread's own samples."""
    return samples.thread if samples.thread is not None else np.zeros(len(samples.end_s), dtype=np.int64)


def _waits_on_threads(samples: Samples) -> np.ndarray:
    """Per sample, whether its innermost frame waits on another thread (`THREAD_WAIT_FILES`)."""
    waits = np.array([str(f[1]).endswith(THREAD_WAIT_FILES) for f in samples.frames] + [False])
    return waits[samples.leaf_frame]


def sample_op_seconds(trace: Trace, samples: Samples, offset_us: float | None) -> np.ndarray | None:
    """For each sample, the seconds of its interval (since the previous sample) that the
    script's thread spent inside torch CPU ops, from the trace.

    A sample only sees Python frames: a user line calling `torch.mm` looks like the line's own
    Python. The trace knows when ops ran; what is left of the interval is Python (or another
    library). None when the sample clock cannot be aligned with the trace.

    A sample the watcher took of another thread (the main thread waiting on a worker: format 5
    names it) is read from that thread's rows: a server's worker calling the model must not look
    like Python because the main thread ran no op meanwhile. A sample of the main thread waiting
    on another thread takes the other threads' ops of its interval: the wait is their work's.

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
    base_us = samples.start_monotonic_ns / 1e3 + offset_us
    end_us = base_us + samples.end_s * 1e6
    begin_us = end_us - samples.dur_s * 1e6
    native = _native_ids(t)
    main = _main_thread(t, rows, samples, native)
    out = _op_seconds(t, rows[t.thread[rows] == main], begin_us, end_us, samples.dur_s)
    others = _stood_for(samples)
    # the main thread waiting on another (`Future.result()`, `Queue.get()`) stands for that thread's work
    waiting = (others == 0) & _waits_on_threads(samples)
    if waiting.any():
        out[waiting] = np.maximum(out[waiting], _op_seconds(t, rows[t.thread[rows] != main], begin_us[waiting],
                                                             end_us[waiting], samples.dur_s[waiting]))
    for thread in np.unique(others[others != 0]).tolist():
        of_thread = native[t.thread[rows]] == thread
        if not of_thread.any():
            continue  # the thread's ops were not recorded: its samples keep the main thread's reading
        on = others == thread
        out[on] = _op_seconds(t, rows[of_thread], begin_us[on], end_us[on], samples.dur_s[on])
    return out


def _op_seconds(t, rows: np.ndarray, begin_us: np.ndarray, end_us: np.ndarray, dur_s: np.ndarray) -> np.ndarray:
    """Seconds of each interval [begin, end) (µs) covered by the op rows of one thread, or the
    whole interval when it ends just after a long op (see `sample_op_seconds`)."""
    if not len(rows):
        return np.zeros(len(end_us))
    starts, ends = merge(t.ts[rows], t.ts[rows] + t.dur[rows])
    covered_before = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def covered(at_us: np.ndarray) -> np.ndarray:
        """Op time (µs) on the thread before each instant."""
        k = np.searchsorted(starts, at_us, side="right")  # intervals starting before
        full = covered_before[np.maximum(k - 1, 0)]
        partial = np.clip(at_us - starts[np.maximum(k - 1, 0)], 0.0, None)
        inside = np.minimum(partial, (ends - starts)[np.maximum(k - 1, 0)])
        return np.where(k > 0, full + inside, 0.0)

    in_ops = (covered(end_us) - covered(begin_us)) / 1e6
    last = np.searchsorted(ends, end_us, side="right") - 1  # the last op run that ended before
    ok = last >= 0
    last = np.maximum(last, 0)
    deferred = (ok & (end_us - ends[last] <= DEFERRED_SLACK_US)
                & (ends[last] - starts[last] >= DEFERRING_OP_US) & (ends[last] > begin_us))
    return np.where(deferred, dur_s, in_ops)


DEFERRED_SLACK_US = 500.0
"""A handler run this soon after an op returned was (most likely) waiting for it: Python
runs the pending signal at the first bytecode after the C call, well within 0.5 ms."""
DEFERRING_OP_US = 1000.0
"""Only ops this long: a signal is then far likelier to have fired during the op than in the
0.5 ms after it (shorter ops would make the guess a coin toss)."""


def python_phases(samples: Samples, phases: dict, op_s: np.ndarray | None = None,
                  source_dir: str | None = None) -> dict:
    """Python hotspots of the steady state (the whole run after start-up: `window`), of the
    profiled window alone (`profiled_window`), of start-up (one-time costs) and of the whole run.

    `op_s` (see `sample_op_seconds`) moves time inside torch ops out of "self" time. The trace
    covers the profiled window only; a sample outside it is given the share of op time that its
    line showed inside the window, and a line never seen there counts as outside torch ops.
    `source_dir`: where the samples' relative file names are (the run's working directory)."""
    w0, w1 = phases["window_offsets_s"]
    steady = phases.get("steady_from_offset_s", phases["first_tick_offset_s"])
    in_window = None
    steady_op_s = None
    if op_s is not None:
        mid = samples.end_s - samples.dur_s / 2
        in_window = (mid >= w0) & (mid < w1)
        steady_op_s = _op_seconds_beyond_window(samples, op_s, in_window, source_dir)
    return {
        "window": hotspots(samples, steady, np.inf, op_s=steady_op_s),
        "profiled_window": hotspots(samples, w0, w1, op_s=op_s),
        # the user's lines running inside DataLoader iteration (Dataset code, collate functions)
        "loading": hotspots(samples, steady, np.inf, top=5, only=samples.loading),
        "startup": hotspots(samples, -np.inf, steady, top=10),
        "whole_run": hotspots(samples, top=10),
        "steady_from_s": steady,
        "growth": step_growth(samples, phases),
        "periodic": periodic_steps(samples, phases),
    }


GROWTH_MIN_STEPS = 9
"""Steps after the profiled window needed to compare their first third with their last: three
steps a third at least, so one slow step (a checkpoint, a log) does not make a trend."""
GROWTH_LINES = 20
"""Sampled lines compared between the two thirds (the growth is in the hottest late ones)."""
GROWTH_CALLERS = 2
"""Callers kept a line: the finding names the grown lines and the two calls above them."""


def step_growth(samples: Samples, phases: dict) -> dict | None:
    """Whether steps got slower over the run, and which lines' time grew: the steps after the
    profiled window (its overhead left out) split in thirds, the first third's and the last
    third's mean step and, per user line, sampled seconds a step in each. None with too few
    steps. What grows with every step (a hook copy more, a list or tensor processed whole, a
    graph kept alive) shows only here: a window of early steps sees it small."""
    step_s = phases.get("step_s") or []
    if len(step_s) < GROWTH_MIN_STEPS:
        return None
    starts = phases["first_tick_offset_s"] + np.concatenate([[0.0], np.cumsum(step_s)])
    after = int(np.searchsorted(starts, phases["window_offsets_s"][1], side="left"))
    n = len(step_s) - after
    if n < GROWTH_MIN_STEPS:
        return None
    k = n // 3
    early, late = (after, after + k), (len(step_s) - k, len(step_s))
    out: dict = {"steps": n, "third": k, "early_step_s": float(np.mean(step_s[early[0]:early[1]])),
                 "late_step_s": float(np.mean(step_s[late[0]:late[1]])),
                 "mean_step_s": float(np.mean(step_s[after:]))}
    for name, (a, b) in (("early", early), ("late", late)):
        spot = hotspots(samples, float(starts[a]), float(starts[b]), top=GROWTH_LINES)
        out[f"{name}_lines"] = [{"file": ln["file"], "line": ln["line"], "function": ln["function"],
                                 "step_s": round(ln["total_s"] / k, 7),
                                 "callers": [{key: c.get(key) for key in ("file", "line", "function")}
                                             for c in (ln.get("callers") or [])[:GROWTH_CALLERS]]}
                                for ln in spot.get("lines", [])]
    return out


def _op_seconds_beyond_window(samples: Samples, op_s: np.ndarray, in_window: np.ndarray,
                               source_dir: str | None = None) -> np.ndarray:
    """Per sample, seconds inside torch ops: measured inside the window, estimated outside it
    from the same user line's share inside it (0 for a line the window never saw).

    The share is taken over the script's own time (run-queue time left out, as `hotspots` does):
    an op's span in the trace is wall-clock time, the machine's load included, and a line whose
    samples waited for a CPU inside the window would otherwise look mostly outside ops. The
    trace matters most here for a line whose samples stand for the previous line's op (a signal
    pending during `a * b` on big tensors is handled at the next call, on the next line)."""
    uf = samples.user_frame
    ready = (np.clip(np.nan_to_num(samples.runq_s), 0.0, samples.dur_s)
             if samples.runq_s is not None and len(samples.runq_s) == len(samples.dur_s) else 0.0)
    own = samples.dur_s - ready
    keep = np.divide(own, samples.dur_s, out=np.zeros(len(own)), where=samples.dur_s > 0)
    known = in_window & (uf >= 0)
    n = max(len(samples.frames), int(uf.max()) + 1 if len(uf) else 0) + 1
    op_by_line = np.bincount(uf[known], weights=np.minimum(op_s * keep, own)[known], minlength=n)
    own_by_line = np.bincount(uf[known], weights=own[known], minlength=n)
    share = np.divide(op_by_line, own_by_line, out=np.zeros(n), where=own_by_line > 0)
    # A line the window saw only a few times has no share worth the name: its function's stands for
    # it. Inside the window the line marker's frame takes an op's held signal on the op's own line;
    # outside it the signal waits for the next call, on the next line (a CG solver's
    # `alpha = rz / dot(p, Ap)`: 2 ms in the window, 6 s of `A @ p`'s time outside it).
    func_of = _function_ids(samples.frames, n)
    op_by_func = np.bincount(func_of, weights=op_by_line, minlength=n)
    own_by_func = np.bincount(func_of, weights=own_by_line, minlength=n)
    thin = (own_by_line > 0) & (own_by_line < THIN_WINDOW_S) & (own_by_func[func_of] >= THIN_WINDOW_S)
    share = np.where(thin, np.divide(op_by_func[func_of], own_by_func[func_of], out=np.zeros(n),
                                     where=own_by_func[func_of] > 0), share)
    estimate = np.where(uf >= 0, share[np.maximum(uf, 0)] * samples.dur_s, 0.0)
    # One sample standing for several ms of CPU with the user's own frame as its leaf: the thread
    # sat in one C call all along (Python checks for pending signals at every call and loop
    # turn), most likely the op of the line before (`a * b` on big tensors is not a call: the
    # signal waits for the next line's). Inside the window the trace tells; outside it, such a
    # sample is taken for op time rather than for Python.
    # When the window saw such samples on the same line, what they were there (a NumPy call on the
    # line is not an op: numpy_roundtrip's tanh line was taken for op time) is the estimate.
    cpu = np.nan_to_num(samples.cpu_s) if samples.cpu_s is not None and len(samples.cpu_s) == len(own) else own
    one_call = samples.leaf_is_user & (np.minimum(cpu, own) >= ONE_C_CALL_S)
    seen = known & one_call
    # Few such samples in the window (one, whose interval the clock alignment put just past its
    # op, made a 20 ms float64 op line "Python" for the whole run): the line's share over all its
    # window samples then, and op time for a line the window never saw.
    op_in_calls = np.bincount(uf[seen], weights=np.minimum(op_s * keep, own)[seen], minlength=n)
    own_in_calls = np.bincount(uf[seen], weights=own[seen], minlength=n)
    calls_seen = np.bincount(uf[seen], minlength=n)
    fallback = np.where(own_by_line > 0, share, 1.0)
    for fid in np.unique(uf[one_call & ~known & (uf >= 0)]).tolist():  # lines the window never saw
        if fid < len(samples.frames) and calls_outside_torch(*samples.frames[fid][1:3], source_dir):
            fallback[fid] = 0.0  # `gc.collect()`, `np.linalg.svd(a)`: the line's own C call, not an op
    call_share = np.divide(op_in_calls, own_in_calls, out=fallback.copy(),
                           where=(own_in_calls > 0) & (calls_seen >= MIN_ONE_CALL_SAMPLES))
    estimate = np.where(one_call, call_share[np.maximum(uf, 0)] * samples.dur_s, estimate)
    return np.where(in_window, op_s, estimate)


def _function_ids(frames: list, n: int) -> np.ndarray:
    """Per frame id (`n` of them, ids past `frames` included), an id shared by the frames of one
    function (file and name)."""
    ids: dict[tuple, int] = {}
    out = np.arange(n)
    for fid, frame in enumerate(frames[:n]):
        out[fid] = ids.setdefault((frame[1], frame[0]), fid)
    return out


NON_TORCH_MODULES = frozenset({"gc", "np", "numpy", "scipy", "time", "os", "shutil", "subprocess", "pickle",
                               "json", "zlib", "gzip", "lzma", "bz2", "hashlib", "pd", "pandas", "cv2", "PIL",
                               "Image", "math", "random", "re", "sklearn"})
"""Modules (as programs name them) whose calls run no torch op: a long C call of a line calling
only them is the line's own work, not an op the trace would have shown."""


@functools.lru_cache(maxsize=1024)
def calls_outside_torch(file: str, line: int, source_dir: str | None = None) -> bool:
    """The source line makes calls, every one of them into `NON_TORCH_MODULES` (`gc.collect()`,
    `u, s, vt = np.linalg.svd(a)`). False when it calls anything else, or cannot be read alone
    (a statement over several lines). A relative `file` is read from `source_dir` first."""
    if source_dir and not os.path.isabs(file) and os.path.isfile(os.path.join(source_dir, file)):
        file = os.path.join(source_dir, file)
    text = linecache.getline(file, line).strip() if isinstance(line, int) else ""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    roots = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            while isinstance(func, ast.Attribute):
                func = func.value
            roots.append(func.id if isinstance(func, ast.Name) else None)
    return bool(roots) and all(r in NON_TORCH_MODULES for r in roots)


ONE_C_CALL_S = 0.005
"""On-CPU seconds in one sample's interval beyond which the interval was one C call: five
intervals of the 1 ms sampler without a single bytecode boundary where a signal is handled."""
THIN_WINDOW_S = 0.01
"""Window seconds of a line (ten samples) below which its share of time in ops there says little
about its samples outside the window: its function's share stands for it."""
MIN_ONE_CALL_SAMPLES = 3
"""One-C-call samples of a line the window must hold for what they were there to stand for the
line's one-C-call samples outside it."""


def capture_summary(run: dict, phases: dict, events: int | None) -> dict:
    """What was measured, over what span, and why (report.json `capture`), with one sentence
    for the terminal and the HTML report."""
    cap = run.get("capture") or {}
    start = run["started_monotonic_ns"]

    def offset(ns):
        return round((ns - start) / 1e9, 4) if ns else None

    w0, w1 = phases["window_offsets_s"]
    plan = cap.get("plan") or ("steps" if run["clock"].get("window_start_ns") else "none")
    if run["clock"].get("whole_run") and plan == "none":
        plan = "all"
    users = [{k: u.get(k) for k in ("kind", "file", "line", "function", "with_stack", "profile_memory",
                                    "schedule", "exports")}
             | {"started_s": offset(u.get("started_ns")), "stopped_s": offset(u.get("stopped_ns"))}
             for u in cap.get("user_profilers") or []]
    kind = run["clock"].get("kind")
    out = {
        "plan": plan,
        "why": cap.get("why") or (f"{kind} steps" if kind and plan == "steps" else ""),
        "window": {"start_s": w0, "end_s": w1, "stopped_by": cap.get("stopped_by"),
                   "inside_step": bool(cap.get("inside_step")),
                   "recorded_mb": cap.get("recorded_mb"), "trace_bytes": cap.get("trace_bytes"), "events": events},
        "bounds": cap.get("bounds") or {},
        "steady_from_s": phases.get("steady_from_offset_s"),
        "loop": cap.get("loop"),
        "trace_source": cap.get("trace_source") or ("torchneck" if events is not None else None),
        "trace_from": cap.get("trace_from"),
        "user_profilers": users,
        "replaced": cap.get("replaced"),
        "notes": list(cap.get("notes") or []),
        "sampler": cap.get("sampler") or {},
        "nvtx": cap.get("nvtx"),
    }
    out["summary"] = _capture_sentence(out, run)
    return out


_STOPPED = {"steps": "after the steps asked for", "duration": "after --duration", "slice": "at the slice's end",
            "time_bound": "at the --max-window-s bound", "memory_bound": "at the --max-window-mb bound",
            "user_profiler": "when the script's own profiler started", "end": "when the script ended",
            "clock": "when a better step clock began"}


def _capture_sentence(c: dict, run: dict) -> str:
    """One line: what the trace covers, why, and how Python was sampled."""
    w = c["window"]
    span = f"{w['start_s']:.2f}-{w['end_s']:.2f} s" if w["start_s"] is not None else ""
    events = f", {w['events']:,} events" if w.get("events") else ""
    stopped = f", stopped {_STOPPED[w['stopped_by']]}" if w.get("stopped_by") in _STOPPED else ""
    if stopped and w.get("inside_step"):
        stopped = stopped.replace("stopped", "stopped inside a step", 1)
    why = f" ({c['why']})" if c["why"] else ""
    parts = []
    users = c["user_profilers"]
    if users:
        u = users[0]
        where = f" at {os.path.basename(u['file'])}:{u['line']}" if u.get("file") else ""
        took = {"script_export": f"took ops from the trace it exported ({os.path.basename(c['trace_from'] or '')})",
                "script_events": "took ops from the events it recorded",
                "torchneck": "kept its own window from before it"}.get(c["trace_source"] or "", "has no ops to show")
        parts.append(f"Your script runs its own profiler ({u['kind']}{where}"
                     + (f", {len(users)} sessions" if len(users) > 1 else "") + f"): torchneck stepped aside, {took}"
                     + (" and paused its sampler while that profiler recorded Python calls" if any(
                         x.get("with_stack") for x in users) else " and sampled Python") + ".")
    if c["plan"] == "steps":
        parts.append(f"Profiled {span}{why}{stopped}{events}.")
    elif c["plan"] in ("loop", "slice"):
        parts.append(f"No step markers: {c['why']}; profiled {span}{stopped}{events}.")
    elif c["plan"] == "all":
        parts.append(f"Profiled the whole run (--all){events}.")
    elif not users:
        parts.append("Nothing was profiled (the script ended before a steady state or steps were seen).")
    steady = c.get("steady_from_s")
    if steady is not None and run.get("wall_s"):
        parts.append(f"Python hotspots: the whole steady state, {steady:.2f}-{run['wall_s']:.2f} s.")
    return " ".join(parts)
