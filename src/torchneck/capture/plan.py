"""The capture plan: when torchneck's profiled window starts, when it stops, and why.

The Python sampler covers the whole run. The torch profiler records one bounded window, chosen
from evidence, most trusted first:

- "steps": a step clock (optimizer steps, DataLoader batches, top-level module calls) reached
  the warm-up; the window records the next `--steps` steps;
- "loop": no step clock, but the sampled Python stacks repeat (few stacks never seen before, no
  importing or compiling for `STEADY_HOLD_S`): the program is in its steady state, in a loop;
  the window is a time slice from there;
- "slice": neither, `FALLBACK_S` after start-up work (imports, compiling) stopped: a time slice;
- "all": `--all`, the whole run, unbounded (asked for explicitly).

Whatever started it, the window stops at the first of: its steps (or `--duration`, or the
slice) done, `--max-window-s`, or `--max-window-mb` recorded (a window of steps keeps at least
`MIN_STEPS`), so a million tiny ops never reach the trace or memory. Recorded bytes are measured
as the growth of the memory malloc has handed out while the window records (`MemoryProbe`: the
profiler's event buffers, ~260 bytes an event with shapes and memory events), read at step
boundaries (a step's own tensors are then the same as at the window's start), or, in a loop, as
the smallest reading over the last `RSS_SETTLE_LOOP_S` (longer where memory has been seen to fall
and rise with the loop's own big tensors, `MemoryProbe.loop_settle_s`), so short-lived tensors do
not count.
Converting those events into a trace afterwards costs ~15-30 µs each, which is why the bound is
on what is recorded, not only on time.

Everything this module decides is kept in `CaptureLog` (run.json's `capture`), which the report
turns into "what was measured, over what span, and why".
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field

WINDOW_MAX_S = 10.0
"""Longest profiled window (`--max-window-s`): 5 steps of up to 2 s each fit; longer steps are cut
at a step boundary, since the events of one long step already tell where its time goes."""
WINDOW_MAX_MB = 4.0
"""Most profiler memory a window may record (`--max-window-mb`): ~16 k events (~260 bytes each
with shapes and memory events), whose conversion into a trace takes ~15-30 µs an event here
(~0.3-0.5 s) and ~60 MB at its peak: a loop of tiny ops stays within its overhead target. A
window of steps holds at least `MIN_STEPS` whatever this bound says."""
MIN_STEPS = 2
"""Steps a step window records even past its memory and time bounds (unless one step passes twice
the bounds): per-step figures need more than one step, and a big model's step alone can hold
more events than the bound."""
SLICE_S = 1.0
"""Length of the time slice profiled in a program without steps (`--slice`): ~1000 samples of
Python beside it, and every op of a loop whose iterations last up to ~0.1 s, several times."""
LONG_STEPS_WARMUP_S = 2.0
"""Steps this long make two steps enough warm-up (unless `--warmup` is given): the first holds the
one-time costs, and an L-BFGS fit of three 2.3 s steps waited for its third to end, which left
its window at the end of the run, empty."""
STEADY_HOLD_S = 0.3
"""How long the sampled stacks must keep repeating before a program without steps is taken to
be in its steady state: longer than a burst of set-up code that happens to repeat."""
STEADY_FRESH_MAX = 0.2
"""Share of a check's samples allowed to show a stack never seen before: start-up code (imports,
building a model) shows mostly new stacks; a loop shows the same few again and again."""
STEADY_MIN_SAMPLES = 10
"""That share is judged over the newest checks holding at least 10 samples: on a loaded machine
signals coalesce (~80 samples/s measured on the shared VM), a 10 ms check then holds one sample,
and one stack not seen before among one sample reset a tokenizer loop's steady state over and
over (its report then had the loop in start-up and no finding on it)."""
STEADY_ON_CPU_MIN = 0.5
"""A single sampled stack counts as a loop when the thread ran on the CPU at least half the time
(run-queue waits left out); a sleep or a blocking read runs ~0 %."""
FALLBACK_S = 2.0
"""Without a steady state, a slice is profiled this long after start-up work last ran: a program
that never repeats (one big function) still gets ops to look at."""
STEP_SILENCE_S = 3.0
"""A step clock that ticked and then fell silent this long (and 3x its longest step) no longer
holds the window back: the loop is over, what runs now is another phase."""
RSS_SETTLE_S = 0.2
"""Readings of memory in use are kept this long. At a step tick the reading itself is compared to
the window's start, and in a loop without steps (short iterations) the smallest over
`RSS_SETTLE_LOOP_S`: an iteration's tensors come and go within it, and the profiler records
fast there (a loop of tiny ops: ~200 MB/s), so a longer lag overshoots the bound."""
RSS_SETTLE_LOOP_S = 0.005
SAWTOOTH_DROP_MB = 4.0
"""A fall of memory in use this large between two readings is the program freeing its own
tensors: the profiler's event buffers only grow while it records."""
SAWTOOTH_SPAN = 1.5
"""Once memory has fallen that way at least twice, a loop's memory bound takes the smallest
reading over 1.5x the longest time between two falls (one iteration's rise and fall, with room):
a service building a 230 MB broadcast difference per query chunk (every 0.33 s, freed in between)
stopped its slice after 13 events at `RSS_SETTLE_LOOP_S`, and its report named no op."""
SAWTOOTH_SETTLE_MAX_S = 1.0
"""...at most 1 s (a slice's length): a loop slower than that is judged at `RSS_SETTLE_LOOP_S`."""


@dataclass
class WindowOptions:
    warmup: int = 3
    warmup_s: float | None = LONG_STEPS_WARMUP_S  # None: `warmup` steps whatever they last (--warmup given)
    steps: int = 5
    duration: float | None = None  # seconds; overrides `steps` (and the slice length) when set
    all: bool = False  # profile the whole run
    record_shapes: bool = True
    profile_memory: bool = True
    with_stack: bool = False
    max_window_s: float = WINDOW_MAX_S
    max_window_mb: float = WINDOW_MAX_MB
    slice_s: float = SLICE_S
    nvtx: bool = False  # NVTX (CUDA) / ITT (CPU) ranges around steps and record_function labels


MODULE_WINDOW_MIN_S = 0.1
"""A window of tiny module-clock steps records at least this long: a model call is a step only for
want of a better clock, and a server's per-request calls (0.1 ms) made five of them a window of
half a millisecond, whose every figure one preempted op decided. The memory and time bounds still
apply."""
MODULE_TINY_STEP_S = 0.002
"""Steps of at least this (on average) make a window of the steps asked for: the profiler
tutorial's 10 ms model calls need no more, and recording them to the end of the run cost it."""


def module_window_short(elapsed_s: float, recorded: int) -> bool:
    """Whether a window of `recorded` module-clock steps over `elapsed_s` is too short to stop:
    tiny steps (`MODULE_TINY_STEP_S`) that have not yet filled `MODULE_WINDOW_MIN_S`."""
    return elapsed_s < MODULE_WINDOW_MIN_S and elapsed_s < recorded * MODULE_TINY_STEP_S
MARKED_CALLS_PER_MB = 900
"""Torch calls the line marker wraps per MB the window records: each records its span, its op
and often the op's child (measured: 98,385 events in 36 MB, ~2,700 events a MB, on a step of
per-element `.item()` reads). Between two ticks the marked calls stand in for memory."""
SLICE_MEMORY_AFTER = 0.25
"""A slice of a loop (no steps to stop at) is held to its memory bound after a quarter of it, or
once it marked a quarter of the bound's worth of torch calls: the program's own tensors grow
memory too (a 20 MB score matrix per chunk stopped a slice after 20 ms and 64 events, which named
a matmul instead of the argsort the loop spent its time in), while a loop of tiny ops fills the
bound with events in milliseconds..."""
SLICE_MEMORY_AT_ONCE = 16.0
"""...unless memory grew 16x the bound (64 MB): an event storm is stopped at once."""
ONE_STEP_FACTOR = 6.0
"""A window keeps `MIN_STEPS` steps, unless its first step alone passed 6x the memory bound (the
profiler's one-time buffers, ~8 MB, are in it): one step of a graph network whose
`torch.unique(dim=1)` runs a million internal ops recorded 850 MB of events, and the second
doubled the profiler's 52 s of processing."""
MID_STEP_FACTOR = 2.0
"""A step window is cut at a step boundary when it passes its time or memory bound; between two
ticks only when it passes twice the time bound (one step longer than the whole budget), or twice
the memory bound in marked torch calls (`MARKED_CALLS_PER_MB`: a step of 25,000 element reads
recorded 36 MB against a 4 MB bound, and Kineto took ~1.5 s to stop and write it). Memory itself
is not checked between ticks: a step's own tensors live there (a float64 mask of 2x64 MB made one
window stop after 46 events), while at a tick they are the same as at the window's start."""
TICKS_KEPT = 5_000
"""The clock's times kept once the window is over (the start-up, the steps before, in and after
it): enough for the steps' statistics. Later ticks are counted, not kept: a server calling its
model once per request made 103,124 module-clock ticks in 12 s, which run.json and the report
carried one by one; ten million would have held hundreds of MB."""
TICKS_KEPT_WAITING = 200_000
"""Before and during the window every tick is kept (its steps are the window's), up to this:
a window that never begins (`--warmup` beyond the run's steps) holds 1.6 MB of times at most."""

@dataclass
class ClockLog:
    """Monotonic times (ns) of every tick of the chosen clock, for the whole run."""

    kind: str | None = None
    ticks: list[int] = field(default_factory=list)
    ticks_dropped: int = 0  # ticks counted, not kept (window.TICKS_KEPT): the run's steps are both
    longest_step_ns: int = 0  # the longest time between two ticks, kept or not
    last_tick_ns: int | None = None  # the latest tick, kept or not
    window_start_ns: int | None = None
    window_end_ns: int | None = None
    window_first_step: int | None = None
    step_marks: list[tuple[int, int]] = field(default_factory=list)  # (ProfilerStep N, monotonic ns)
    user_profiler: bool = False
    window_note: str | None = None  # why the window is not the usual one
    tentative: bool = False  # the window covers the whole run (--all)
    lines_marked: bool = False  # torch calls carry `torchneck@` spans naming the user's line
    top_module_calls: int = 0  # calls of top-level modules seen by the module clock
    top_module_outputs_with_grad: int = 0  # ... whose output carried an autograd graph
    top_module_sites: dict = field(default_factory=dict)  # (file, line, function) of the user's call -> calls
    # The same sites' first tensor inputs: calls with a batch of one, calls whose input grew by one
    # position over the site's previous call, and that previous shape (window.SiteInputs)
    site_inputs: dict = field(default_factory=dict)
    product_operands: list = field(default_factory=list)  # lines.ProductOperands: mostly-zero matrices multiplied
    # Top-level module calls in other threads (a server's workers): the profiler records only the
    # main thread's ops and the sampler samples only it, so these are all torchneck sees of them.
    thread_module_calls: int = 0
    thread_module_outputs_with_grad: int = 0
    thread_module_s: float = 0.0  # wall seconds inside those calls, summed over the threads
    thread_module_threads: int = 0  # distinct threads that made them
    thread_module_sites: dict = field(default_factory=dict)

    @property
    def tick_count(self) -> int:
        """Ticks of the clock so far, kept or only counted."""
        return len(self.ticks) + self.ticks_dropped


@dataclass
class CaptureLog:
    """What was measured, over what span, and why (run.json `capture`)."""

    plan: str = "none"  # steps | loop | slice | all | none (nothing recorded by torchneck)
    why: str = ""
    window_start_ns: int | None = None
    window_end_ns: int | None = None
    stopped_by: str | None = None  # steps | duration | slice | time_bound | memory_bound | user_profiler | clock | end
    inside_step: bool = False  # a step window stopped between two ticks: its last step is only a part of one
    recorded_mb: float | None = None  # the memory growth measured while the window recorded
    trace_bytes: int | None = None
    stop_s: float | None = None  # seconds torch took to stop the profiler (it processes every event)
    export_s: float | None = None  # seconds writing and compressing the trace
    bounds: dict = field(default_factory=dict)
    steady_from_ns: int | None = None  # start-up over: first step tick, steady stacks, or fallback
    long_call_from_ns: int | None = None  # the first long computing call of the user's (see `long_call`)
    loop: dict | None = None  # where the repeating stacks were: function, file, lines
    user_profilers: list[dict] = field(default_factory=list)
    trace_source: str | None = None  # torchneck | script_export | script_events
    trace_from: str | None = None  # the script's exported file the trace was copied from
    replaced: str | None = None  # an earlier window superseded by a better one
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


class _MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2 (2.33+)
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


SLOW_MALLINFO_NS = 1_000_000
"""`mallinfo2` walks every free chunk of every arena: ~1 µs on a young heap, 57 ms on one holding
100,000 small tensors half freed (measured). Past 1 ms a reading, the probe reads the resident
size instead (the capture plan's checks run every few ms; at 57 ms each they took the main
thread's time: a thread-pool script ran 2x its bare time)."""


class MemoryProbe:
    """The process's memory in use by malloc (glibc's `mallinfo2`: bytes allocated and not
    freed, all arenas, mmapped blocks included; ~1 µs), with the smallest reading over a recent
    span. Bytes in use, not resident pages: the profiler's event buffers fill memory a freed
    tensor left in the heap without raising the resident size (measured: a second session of
    84 k events raised RSS by 0, malloc's bytes in use by 21 MB, as the first), and Python's own
    objects (pymalloc arenas, mapped directly) do not count. Where glibc's call is missing, or
    slow (`SLOW_MALLINFO_NS`), the resident size (/proc/self/statm) stands in, continued from the
    last malloc reading (`_offset`) so that bounds measured from an earlier reading hold."""

    def __init__(self) -> None:
        self._mallinfo = None
        try:
            fn = ctypes.CDLL(None).mallinfo2
            fn.restype = _MallInfo2
            fn.argtypes = []
            self._mallinfo = fn
        except (AttributeError, OSError):
            pass
        self._fd: int | None = None
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        if self._mallinfo is None:
            try:
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
            except OSError:
                self._fd = None
        self.kind = "malloc" if self._mallinfo is not None else "rss"
        self._offset = 0  # added to resident sizes read after a switch from malloc's count
        self._recent: deque[tuple[int, int]] = deque()  # (ns, bytes)
        self._high = 0  # the highest reading since memory last fell
        self._falls: deque[int] = deque(maxlen=4)  # when memory fell by SAWTOOTH_DROP_MB or more (ns)

    def read(self) -> int:
        if self._mallinfo is not None:
            t0 = time.perf_counter_ns()
            info = self._mallinfo()
            reading = int(info.uordblks + info.hblkhd)
            if time.perf_counter_ns() - t0 > SLOW_MALLINFO_NS:  # a fragmented heap: the resident size from now on
                self._mallinfo, self.kind = None, "rss"
                try:
                    self._fd = os.open("/proc/self/statm", os.O_RDONLY)
                except OSError:
                    self._fd = None
                self._offset = reading - self._resident()
            return reading
        return self._resident() + self._offset

    def _resident(self) -> int:
        if self._fd is not None:
            try:
                return int(os.pread(self._fd, 128, 0).split()[1]) * self._page
            except (OSError, ValueError, IndexError):
                pass
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak * (1 if sys.platform == "darwin" else 1024)

    def settled(self, over_s: float = RSS_SETTLE_S) -> int:
        """Take a reading; the smallest over the last `over_s` (0: this reading)."""
        now = time.monotonic_ns()
        reading = self.read()
        self._recent.append((now, reading))
        if reading <= self._high - SAWTOOTH_DROP_MB * (1 << 20):
            self._falls.append(now)
            self._high = reading
        self._high = max(self._high, reading)
        keep = now - int(max(RSS_SETTLE_S, SAWTOOTH_SETTLE_MAX_S if self._falls else 0.0) * 1e9)
        while len(self._recent) > 1 and self._recent[0][0] < keep:
            self._recent.popleft()
        horizon = now - int(over_s * 1e9)
        smallest = reading
        for t, b in reversed(self._recent):  # newest first: stop at the horizon
            if t < horizon:
                break
            smallest = min(smallest, b)
        return smallest

    def loop_settle_s(self) -> float:
        """How far back a loop's memory bound looks: `RSS_SETTLE_LOOP_S`, or 1.5x the loop's
        period where its own tensors make memory rise and fall (`SAWTOOTH_SPAN`)."""
        falls = list(self._falls)
        if len(falls) < 2:
            return RSS_SETTLE_LOOP_S
        period_s = max(b - a for a, b in zip(falls, falls[1:])) / 1e9
        if (time.monotonic_ns() - falls[-1]) / 1e9 > SAWTOOTH_SPAN * period_s:
            return RSS_SETTLE_LOOP_S  # memory stopped falling: no longer that loop
        return min(max(RSS_SETTLE_LOOP_S, SAWTOOTH_SPAN * period_s), SAWTOOTH_SETTLE_MAX_S)

    def reset(self) -> None:
        """Forget the readings (a window starts), not the loop's rhythm learnt before it."""
        self._recent.clear()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class SteadyState:
    """Is a program without steps in its steady state yet? Fed, at each sampler check, the
    samples since the previous check."""

    def __init__(self) -> None:
        self.steady_since_ns: int | None = None
        self.last_busy_ns: int | None = None
        self._fresh_seen = 0
        self._stacks: set[int] = set()  # distinct stacks sampled since `steady_since_ns`
        self._checks: list[tuple[int, int]] = []  # (samples, new stacks) of the newest checks

    def update(self, now_ns: int, n_samples: int, fresh_total: int, busy: bool,
               stacks: set[int] | None = None, on_cpu: float | None = None) -> bool:
        """True once the stacks have repeated for STEADY_HOLD_S without start-up work. One stack
        held all along while the thread is off the CPU (`stacks`: those of the new samples;
        `on_cpu`: the thread's CPU share over them, run-queue time left out) is one blocking call
        (a sleep, a read), set-up rather than a loop; one stack on the CPU may be a loop of one
        line (`acc = acc * 0.99 + x.sin()`), whose samples all show the same line."""
        fresh = fresh_total - self._fresh_seen
        self._fresh_seen = fresh_total
        if busy:
            self.last_busy_ns = now_ns
        self._checks.append((n_samples, fresh))
        pooled = pooled_fresh = kept = 0
        for n, f in reversed(self._checks):  # the newest checks, back to STEADY_MIN_SAMPLES samples
            pooled, pooled_fresh, kept = pooled + n, pooled_fresh + f, kept + 1
            if pooled >= STEADY_MIN_SAMPLES:
                break
        del self._checks[:-kept]
        repeating = n_samples > 0 and not busy and pooled_fresh <= STEADY_FRESH_MAX * pooled
        if not repeating:
            self.steady_since_ns = None
            self._stacks = set()
            return False
        if self.steady_since_ns is None:
            self.steady_since_ns = now_ns
        if stacks is not None:
            self._stacks |= stacks
            if len(self._stacks) < 2 and (on_cpu is None or on_cpu < STEADY_ON_CPU_MIN):
                self.steady_since_ns = now_ns  # one call so far: the steady state has not begun
                return False
        return (now_ns - self.steady_since_ns) / 1e9 >= STEADY_HOLD_S

    def fallback_due(self, now_ns: int, started_ns: int) -> bool:
        """A slice is due anyway: FALLBACK_S since start-up work last ran (or since the start)."""
        since = self.last_busy_ns or started_ns
        return (now_ns - since) / 1e9 >= FALLBACK_S


LONG_CALL_S = 0.5
"""One sample interval this long, the thread on the CPU, at a stack that is neither importing nor
compiling nor waiting, is one call of the user's code that long: the timer's signal is handled
when the call returns. Set-up runs Python the sampler interrupts every few ms; a call computing
for half a second (a decomposition, a product, a sort of a large tensor) is a program's work,
where a program that never repeats (one pass over its data) spends its run."""


def on_cpu_share(samples: list) -> float | None:
    """The sampled thread's CPU time over the wall time between the first and last of `samples`
    ((stack, wall ns, thread CPU ns, run-queue ns) readings), its run-queue waits left out; None
    with fewer than two samples or no CPU clock."""
    if len(samples) < 2 or len(samples[0]) < 3 or samples[0][2] < 0 or samples[-1][2] < 0:
        return None
    first, last = samples[0], samples[-1]
    wall = last[1] - first[1]
    if len(first) > 3 and first[3] >= 0 and last[3] >= 0:
        wall -= last[3] - first[3]
    return (last[2] - first[2]) / wall if wall > 0 else None


def long_call(previous: tuple | None, recent: list[tuple], busy: list[bool], waits: list[bool],
              leaf_is_user) -> tuple[int, int] | None:
    """(start ns, stack id) of the first of `recent` samples ((stack, wall ns, CPU ns, ...)
    readings; `previous` is the one before them) that stands for a long call of the user's own
    code on the CPU (`LONG_CALL_S`), or None."""
    for sample in recent:
        if previous is not None and sample[1] - previous[1] >= LONG_CALL_S * 1e9 and sample[0] < len(busy) \
                and not busy[sample[0]] and not waits[sample[0]] and leaf_is_user(sample[0]) \
                and (on_cpu_share([previous, sample]) or 0.0) >= STEADY_ON_CPU_MIN:
            return previous[1], sample[0]
        previous = sample
    return None


def loop_site(frames: list[list], stacks: list[tuple[int, ...]], stack_ids: list[int], is_user) -> dict | None:
    """Where the program loops: the innermost user function that every recent sample is in,
    with the lines seen in it. None when the samples share no user function."""
    if not stack_ids:
        return None
    chains = []
    for sid in stack_ids:
        chain = [f for f in stacks[sid] if is_user(frames[f][1])]
        if not chain:
            return None
        chains.append(chain)
    depth = 0
    while all(len(c) > depth for c in chains):
        keys = {(frames[c[depth]][0], frames[c[depth]][1]) for c in chains}
        if len(keys) != 1:
            break
        depth += 1
    if depth == 0:
        return None
    function, file, _ = frames[chains[0][depth - 1]]
    lines = sorted({frames[c[depth - 1]][2] for c in chains})
    return {"function": function, "file": file, "first_line": lines[0], "last_line": lines[-1]}
