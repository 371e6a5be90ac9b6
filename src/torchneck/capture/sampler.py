"""Python call stacks of the script's thread, sampled for the whole run.

How: a wall-clock POSIX timer (`timer_create(CLOCK_MONOTONIC)`, through ctypes) sends a
real-time signal to the main thread only (`SIGEV_THREAD_ID`) every millisecond, and the Python
handler, which CPython runs in the main thread at the next bytecode boundary, records the frame
it interrupted. No second thread takes the GIL, so a sample costs only the handler (~10-20 µs).
Each sample's weight is the wall time since the previous one, so the weights add up to the run's
wall time. Wall clock, not CPU time: while the thread is blocked (`time.sleep`, I/O, a lock, a
queue, a long C call) the timer still expires, so a sample is pending the moment the call
returns, still on the line that waited (a sleep is even interrupted and resumed); a CPU-time
timer (`ITIMER_PROF`, used where POSIX timers are unavailable) charged such waits to whatever
line burnt CPU next. A POSIX timer signal never queues up (one pending at most; overruns are
counted instead), uses its own signal (not SIGALRM, so `signal.alarm` in the script still
works) and interrupts only the main thread, never NCCL/gloo/DataLoader threads.

Why not the alternatives measured here: a `sys.setprofile` sampler (pyinstrument) pays on every
call and return, and made the 2 s import of torch._dynamo 1 s slower; a timer thread reading
`sys._current_frames()` needs a GIL hand-over per sample, which cost ~1.4 ms each on this VM.
Where signals are unavailable (not the main thread, no `setitimer`), the thread sampler is used
at a coarser 5 ms.

Saved as `samples.json` (format 5): `frames` ([function, file, line], line = the line executing
in that frame), `stacks` (frame ids, root first), and `samples` ([stack id, seconds, on-CPU
seconds, run-queue seconds], and a fifth value, the native id of the thread sampled, on a sample
the watcher took of another thread while the main thread waited on it, so its interval's op time
is read from that thread's rows of the trace; `native_id` is the sampled thread's own): a sample's
instant is the running sum of seconds from
`start_monotonic_ns`; on-CPU seconds are the sampled thread's CPU time over the same interval
(-1 unknown), so analyses tell a line that computes from one that waits; run-queue seconds
(Linux: /proc/thread-self/schedstat; -1 unknown) are the part of the interval the thread was
ready but another process had the CPU, which is neither the line's work nor a wait of its own
(on a busy machine, without it, computing looked like waiting); `method` says which sampler.

The handler is also torchneck's clock when a script has no steps: every `CHECK_INTERVAL_NS` it
calls `on_check` (the capture plan: is the program in a steady state yet, is the profiled window
over its bounds), and every `FLUSH_INTERVAL_NS` it appends what is new to
`samples.partial.jsonl`, so a run killed with SIGKILL (or by the OOM killer) still leaves its
samples on disk. `pause()` stops
sampling without a trace of torchneck's Python (while the script's own profiler records every
Python call); the paused interval is kept as an "unsampled" sample, so weights still add up to
the run's wall time. Work torchneck does inside a check (starting or writing the profile) is
charged to a "torchneck" sample, not to the user's line the signal interrupted.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import ctypes.util
import dis
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..sites import TOOL_FRAME, UNSAMPLED_FRAME

SAMPLE_INTERVAL_S = 0.001
"""1 ms (wall; of CPU time for the ITIMER_PROF fallback): fine enough to place samples within a
step of a few ms; a sample costs ~10-20 µs in the handler, 1-2 % of the run."""

THREAD_INTERVAL_S = 0.005
"""The fallback thread sampler's interval: each of its samples forces a GIL hand-over."""

STAND_IN_NS = 10_000_000
"""After the watcher's latest sample of the thread a waiting main thread waits for (watcher.py),
the handler records none of its own for this long (two of the watcher's intervals): the time is
that thread's, and the main thread's own samples come back within it once it computes again."""
CHECK_INTERVAL_NS = 10_000_000
"""Time between two capture-plan checks (at the first sample after it): 10 ms, fine enough to
bound a window in time, rare enough that a check (~10-30 µs) costs well under 1 %."""

RECORDING_CHECK_INTERVAL_NS = 2_000_000
"""While a window without steps records, checks come every 2 ms: a loop of tiny ops records
~200 MB/s, so 10 ms between checks overshot a 3 MB bound to 7 MB. A window lasts a second at
most, so the extra checks cost ~1 % of that second only."""

FLUSH_INTERVAL_NS = 1_000_000_000
"""Time between two appends to samples.partial.jsonl: a run killed loses at most its last second
of samples; an append of a second's samples takes ~1 ms. The first appends come sooner
(`FIRST_FLUSH_NS`, then doubling), so a script that crashes early still leaves its samples."""
FIRST_FLUSH_NS = 50_000_000

FORMAT = 5
PARTIAL_NAME = "samples.partial.jsonl"

_BUSY_MARKS = ("<frozen importlib", "torch/_dynamo/convert_frame.py", "torch/_inductor/")
"""A stack with one of these files is start-up work (importing, compiling), not a steady state."""
_WAIT_FILES = frozenset({threading.__file__, queue.__file__, concurrent.futures._base.__file__})
"""A stack whose innermost frame is in these modules waits on another thread, or handles what one
handed over: `Future.result()`, `Queue.get()` and `Event.wait()` all wait in a `Condition`,
`Thread.join()` in its lock, and a pool's `map` takes each result in `_base.py` as it wakes."""



def line_of_offset(code, offset: int) -> int | None:
    """The line an instruction without one of its own belongs to. A loop's closing jump back
    (JUMP_BACKWARD) has no line, and it is where CPython runs pending signal handlers, the
    sampler's included: a pure-Python loop is found there most of the time. It is the loop's,
    the line of the `for`/`while` it jumps to (charged to the function's `def` line, such loops
    were never found). Another such instruction belongs to the line before it. None when
    neither is found (the caller then uses the function's first line)."""
    try:
        instructions = list(dis.get_instructions(code))
    except Exception:
        return None
    lines = {}
    last = None
    for ins in instructions:
        positions = getattr(ins, "positions", None)  # Python 3.11+; starts_line (an int) before
        started = ins.starts_line if type(ins.starts_line) is int else None  # a bool from 3.13 on
        line = getattr(positions, "lineno", None) if positions is not None else started
        if line:
            last = line
        lines[ins.offset] = (line, last)
    for ins in instructions:
        if ins.offset == offset:
            if "JUMP_BACKWARD" in ins.opname or ins.opname == "JUMP_ABSOLUTE" and (ins.argval or 0) < offset:
                target = lines.get(ins.argval)
                if target is not None and (target[0] or target[1]):
                    return target[0] or target[1]
            return lines[offset][0] or lines[offset][1]
    return None

class StackSampler:
    """Samples the stack of the calling thread until `stop()`."""

    def __init__(self, interval: float = SAMPLE_INTERVAL_S, partial_path: Path | None = None):
        self.interval = interval
        self.thread_id = threading.get_ident()
        self.native_id = threading.get_native_id()  # the trace's tid of the sampled thread's ops
        wall = os.environ.get("TORCHNECK_SAMPLER", "wall") != "cpu"  # TORCHNECK_SAMPLER=cpu: ITIMER_PROF
        self._timer = _PosixTimer.make() if wall and _signals_usable() else None
        self.method = "wall-timer" if self._timer else "signal" if _signals_usable() else "thread"
        self._previous_handler: Any = None
        self._handler: Callable | None = None
        self._signum: int | None = None
        self.start_ns: int | None = None
        self.start_cpu_ns: int | None = None
        self._runq = RunQueueClock()  # opened here: the sampled (calling) thread's
        self.start_runq_ns = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Interned data: frame key (code, line) -> id, stack tuple -> id.
        self._frame_ids: dict[tuple[int, int], int] = {}  # (id(code), line) -> frame id
        self._offset_ids: dict[tuple[int, int], int] = {}  # (id(code), f_lasti) -> frame id
        self._codes: dict[int, object] = {}  # keeps the code objects alive: their ids stay unique
        self.frames: list[list] = []
        self._stack_ids: dict[tuple[int, ...], int] = {}
        self.stacks: list[tuple[int, ...]] = []
        self.stack_busy: list[bool] = []  # per stack: importing or compiling (start-up work)
        self.stack_waits: list[bool] = []  # per stack: waiting on another thread (`_WAIT_FILES`)
        self.fresh = 0  # samples whose stack had never been seen: many while a program starts up
        # (stack id, monotonic ns at the sample, the thread's CPU ns at the sample)
        # ... the thread's run-queue ns, and (a stand-in sample of another thread) its native id
        self.samples: list[tuple[int, ...]] = []
        self.on_check: Callable[[], None] | None = None  # from the handler every CHECK_INTERVAL_NS (main thread)
        self.check_interval_ns = CHECK_INTERVAL_NS  # the window shortens it while it records without steps
        self.paused_s = 0.0
        self._paused_at: int | None = None
        self._partial_path = partial_path
        self._partial_fd: int | None = None
        self._flushed = (0, 0, 0)  # frames, stacks, samples already in the partial file
        self._tool_sid: int | None = None
        self._unsampled_sid: int | None = None
        # While the main thread is blocked waiting on other threads, the watcher (watcher.py)
        # samples the one at work in its place; the lock keeps it and the handler apart.
        self._record_lock = threading.Lock()
        self.last_main_ns = 0  # the handler's latest sample
        self.main_waits = False  # ... which waits on another thread (a wait the signal interrupts)
        self.stand_in_until_ns = 0  # the watcher samples in the main thread's place until then
        self.cpu_offset_ns = 0  # added to the main thread's CPU clock: the CPU time of those samples
        self.watcher: Any = None

    def start(self) -> None:
        self.start_ns = time.monotonic_ns()
        self.start_cpu_ns = time.thread_time_ns()
        self.start_runq_ns = self._runq()
        self._open_partial()
        if self.method in ("wall-timer", "signal"):
            self.last_main_ns = self.start_ns
            if self.watcher is not None:
                self.watcher.start()
            record = self.samples.append
            stack_of = self._stack_id
            now = time.monotonic_ns
            cpu = time.thread_time_ns  # the handler runs on the sampled (main) thread
            runq = self._runq
            sampler = self
            waits = self.stack_waits
            busy = [False]
            next_check = [self.start_ns + CHECK_INTERVAL_NS]
            next_flush = [self.start_ns + FIRST_FLUSH_NS]
            flush_every = [FIRST_FLUSH_NS]

            lock = self._record_lock

            def on_signal(signum, frame):
                # CPython runs a pending handler at any bytecode boundary, this handler's own
                # included: a sample that overruns the interval (a descheduled thread) must not
                # nest samples into itself, nor a check into a check.
                if frame is None or busy[0]:
                    return
                busy[0] = True
                try:
                    if not lock.acquire(blocking=False):  # the watcher is recording (capture/watcher.py)
                        return
                    try:
                        at = now()
                        # waiting while the watcher samples the thread it waits for: those samples stand for it
                        if at >= sampler.stand_in_until_ns or frame.f_code.co_filename not in _WAIT_FILES:
                            sampler.last_main_ns = at
                            sid = stack_of(frame)
                            sampler.main_waits = waits[sid]
                            record((sid, at, cpu() + sampler.cpu_offset_ns, runq()))
                    finally:
                        lock.release()
                    if at >= next_check[0]:
                        next_check[0] = at + sampler.check_interval_ns
                        sampler._check()
                    if at >= next_flush[0]:
                        flush_every[0] = min(2 * flush_every[0], FLUSH_INTERVAL_NS)
                        next_flush[0] = at + flush_every[0]
                        sampler.flush_partial()
                finally:
                    busy[0] = False

            self._handler = on_signal
            self._signum = self._timer.signum if self._timer else signal.SIGPROF
            self._previous_handler = signal.signal(self._signum, on_signal)
            signal.siginterrupt(self._signum, False)  # restart system calls the signal interrupts
            if self._timer:
                try:
                    self._timer.start(self.interval)
                    return
                except OSError:  # fall back to the CPU-time timer
                    signal.signal(self._signum, self._previous_handler or signal.SIG_DFL)
                    self._timer = None
                    self.method = "signal"
                    self._signum = signal.SIGPROF
                    self._previous_handler = signal.signal(signal.SIGPROF, on_signal)
                    signal.siginterrupt(signal.SIGPROF, False)
            signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)
            return
        self.interval = max(self.interval, THREAD_INTERVAL_S)
        self._thread = threading.Thread(target=self._loop, name="torchneck-sampler", daemon=True)
        self._thread.start()

    def _check(self) -> None:
        """The capture plan's periodic check; time it takes beyond a sample's own cost (starting
        the profiler, writing its trace) is charged to a torchneck sample."""
        if self.on_check is None:
            return
        t0 = time.monotonic_ns()
        self.on_check()  # never raises: the window catches and notes its own failures
        if time.monotonic_ns() - t0 > 2 * self.interval * 1e9:
            self.record_synthetic(TOOL_FRAME)

    def record_synthetic(self, what: str) -> None:
        """A sample ending now, standing for torchneck's own work (`TOOL_FRAME`) or for an
        interval that was not sampled (`UNSAMPLED_FRAME`)."""
        if what == TOOL_FRAME:
            if self._tool_sid is None:
                self._tool_sid = self._synthetic_stack(what)
            sid = self._tool_sid
        else:
            if self._unsampled_sid is None:
                self._unsampled_sid = self._synthetic_stack(what)
            sid = self._unsampled_sid
        self.samples.append((sid, time.monotonic_ns(), time.thread_time_ns() + self.cpu_offset_ns, self._runq()))

    def record_other(self, frame, on_cpu_ns: int, main_cpu_ns: int, native_id: int = 0) -> bool:
        """A sample, now, of another thread's `frame` standing for the main thread, which is
        blocked waiting on that thread (watcher.py): that thread's stack, and its CPU time over the
        interval as the interval's, and the thread's native id (0: unknown). The main thread's own
        samples count its CPU time on from here (`cpu_offset_ns`). False when the handler is
        recording."""
        if not self._record_lock.acquire(blocking=False):
            return False
        try:
            at = time.monotonic_ns()
            last = self.samples[-1] if self.samples else None
            base = last[2] if last is not None and last[2] >= 0 else main_cpu_ns + self.cpu_offset_ns
            value = base + max(0, min(on_cpu_ns, at - (last[1] if last is not None else at)))
            self.samples.append((self._stack_id(frame), at, value, -1, native_id) if native_id else
                                (self._stack_id(frame), at, value, -1))
            self.cpu_offset_ns = value - main_cpu_ns
            self.stand_in_until_ns = at + STAND_IN_NS
            return True
        finally:
            self._record_lock.release()

    def _synthetic_stack(self, name: str) -> int:
        """A one-frame stack for `name`. Interned under the record lock: the watcher's thread may be
        interning a stack of the thread it samples, and both take their ids from the lists' lengths.
        (Called on the main thread outside the signal handler's locked part, so waiting is safe.)"""
        with self._record_lock:
            fid = len(self.frames)
            self.frames.append([name, __file__, 0])
            sid = len(self.stacks)
            self.stacks.append((fid,))
            self.stack_busy.append(False)
            self.stack_waits.append(False)
            return sid

    def pause(self) -> None:
        """Stop sampling, leaving no torchneck Python running (the handler is set to SIG_IGN, so
        a signal already pending is dropped, not handled). Main thread only."""
        if self._paused_at is not None or self.start_ns is None:
            return
        if self.watcher is not None:  # its thread too: a profiler recording Python calls sees every thread's
            self.watcher.stop()
        if self._handler is not None and self._signum is not None:
            self.samples.append((self._stack_id(sys._getframe(1)), time.monotonic_ns(),
                                 time.thread_time_ns() + self.cpu_offset_ns, self._runq()))
            if self._timer:
                self._timer.disarm()
            else:
                signal.setitimer(signal.ITIMER_PROF, 0, 0)
            if signal.getsignal(self._signum) is self._handler:
                signal.signal(self._signum, signal.SIG_IGN)
        elif self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._paused_at = time.monotonic_ns()

    def resume(self) -> None:
        if self._paused_at is None:
            return
        self.paused_s += (time.monotonic_ns() - self._paused_at) / 1e9
        self._paused_at = None
        self.record_synthetic(UNSAMPLED_FRAME)
        if self.watcher is not None and self.method in ("wall-timer", "signal"):
            self.last_main_ns = time.monotonic_ns()
            self.watcher.start()
        if self._handler is not None and self._signum is not None:
            if signal.getsignal(self._signum) == signal.SIG_IGN:
                signal.signal(self._signum, self._handler)
            if self._timer:
                self._timer.arm(self.interval)
            else:
                signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)
        elif self.method == "thread":
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="torchneck-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self._paused_at is not None:
            self.resume()
        if self.method in ("wall-timer", "signal") and self._handler is not None and self._signum is not None:
            if self._timer:
                self._timer.stop()
            else:
                signal.setitimer(signal.ITIMER_PROF, 0, 0)
            # Put the old handler back, unless the script installed its own meanwhile.
            if signal.getsignal(self._signum) is self._handler:
                signal.signal(self._signum, self._previous_handler or signal.SIG_DFL)
            self._previous_handler = self._handler = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._runq.close()

    def _loop(self) -> None:
        current_frames = sys._current_frames
        wait = self._stop.wait
        now = time.monotonic_ns
        target = self.thread_id
        interval = self.interval
        record = self.samples.append
        stack_of = self._stack_id
        try:
            clock = time.pthread_getcpuclockid(target)
            cpu = lambda: time.clock_gettime_ns(clock)  # noqa: E731
        except (AttributeError, OSError):
            cpu = lambda: -1  # noqa: E731
        while not wait(interval):
            at = now()  # the GIL is held from here: the script is frozen at this instant
            frame = current_frames().get(target)
            if frame is None:
                continue
            record((stack_of(frame), at, cpu(), -1))
            frame = None  # do not keep the script's locals alive until the next sample

    def _stack_id(self, frame) -> int:
        """Intern the stack ending at `frame` (root first).

        Frames are keyed by (id of the code object, instruction offset): hashing a code object
        hashes its constants, recursively, so a module body's code (deep import stacks) cost
        most of a sample. The code objects are kept alive (`_codes`) so their ids stay unique.
        `f_lineno` (a line-table decode) is read once per new (code, offset) pair."""
        at_offset = self._offset_ids
        frame_ids = self._frame_ids
        codes = self._codes
        ids = []
        while frame is not None:
            code = frame.f_code
            key = (id(code), frame.f_lasti)
            fid = at_offset.get(key)
            if fid is None:
                codes[key[0]] = code
                line = frame.f_lineno
                line_key = (key[0], line if line is not None and line > 0 else line_of_offset(code, key[1]) or 0)
                fid = frame_ids.get(line_key)
                if fid is None:
                    fid = frame_ids[line_key] = len(self.frames)
                    name = getattr(code, "co_qualname", code.co_name)
                    self.frames.append([name, code.co_filename, line_key[1] or code.co_firstlineno])
                at_offset[key] = fid
            ids.append(fid)
            frame = frame.f_back
        stack = tuple(reversed(ids))
        sid = self._stack_ids.get(stack)
        if sid is None:
            # its rows first, its id published last: the watcher's thread interns stacks too, and a
            # reader finding the id (the signal handler reads `stack_waits[sid]`) must find its rows
            sid = len(self.stacks)
            self.stacks.append(stack)
            frames = self.frames
            self.stack_busy.append(any(m in frames[f][1] for f in stack for m in _BUSY_MARKS))
            self.stack_waits.append(frames[stack[-1]][1] in _WAIT_FILES if stack else False)
            self._stack_ids[stack] = sid
            self.fresh += 1
        return sid

    # -- writing ---------------------------------------------------------------------------------
    def _open_partial(self) -> None:
        if self._partial_path is None:
            return
        try:
            self._partial_fd = os.open(self._partial_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                                       0o644)
            header = {"format": FORMAT, "method": self.method, "interval_s": self.interval,
                      "start_monotonic_ns": self.start_ns, "start_cpu_ns": self.start_cpu_ns,
                      "native_id": self.native_id}
            os.write(self._partial_fd, (json.dumps(header) + "\n").encode())
        except OSError:
            self._partial_fd = None

    def flush_partial(self) -> None:
        """Append the frames, stacks and samples recorded since the last flush (one JSON line)."""
        fd = self._partial_fd
        if fd is None:
            return
        n_samples = len(self.samples)  # read first: every stack and frame they name exists already
        n_stacks = len(self.stacks)
        n_frames = len(self.frames)
        f0, s0, k0 = self._flushed
        if n_samples == k0:
            return
        start = self.start_ns or 0
        start_cpu = self.start_cpu_ns or 0
        start_runq = self.start_runq_ns
        chunk = {"frames": self.frames[f0:n_frames], "stacks": [list(s) for s in self.stacks[s0:n_stacks]],
                 "samples": [[sid, t - start, c - start_cpu if c >= 0 else -1,
                              q - start_runq if q >= 0 and start_runq >= 0 else -1, *other]
                             for sid, t, c, q, *other in self.samples[k0:n_samples]]}
        try:
            os.write(fd, (json.dumps(chunk, separators=(",", ":")) + "\n").encode())
        except OSError:
            return
        self._flushed = (n_frames, n_stacks, n_samples)

    def close_partial(self, remove: bool = True) -> None:
        fd, self._partial_fd = self._partial_fd, None
        if fd is not None:
            os.close(fd)
        if remove and self._partial_path is not None:
            try:
                os.unlink(self._partial_path)
            except OSError:
                pass

    def to_json(self) -> dict:
        start_runq = getattr(self, "start_runq_ns", -1)
        rel = [(sid, t - (self.start_ns or 0), c - (self.start_cpu_ns or 0) if c >= 0 else -1,
                q - start_runq if q >= 0 and start_runq >= 0 else -1, *other) for sid, t, c, q, *other in self.samples]
        return {"format": FORMAT, "method": self.method, "interval_s": self.interval,
                "start_monotonic_ns": self.start_ns, "paused_s": self.paused_s, "native_id": self.native_id,
                "frames": self.frames, "stacks": [list(s) for s in self.stacks], "samples": _intervals(rel)}

    def write(self, path: Path) -> dict:
        """Write samples.json (then drop the partial file it supersedes); returns the same data."""
        data = self.to_json()
        path.write_text(json.dumps(data, separators=(",", ":")))
        self.close_partial(remove=True)
        return data


def _intervals(rel: list[tuple]) -> list[list]:
    """Samples as [stack id, seconds since the previous sample, on-CPU seconds, run-queue seconds
    (, the native id of another thread sampled)] from (stack id, ns, CPU ns, run-queue ns(, native
    id)) since the start (-1: unknown)."""
    out = []
    prev = 0
    prev_cpu: int | None = 0
    prev_q: int | None = 0
    for sid, t, c, q, *other in sorted(rel, key=lambda x: x[1]):
        on_cpu = round((c - prev_cpu) / 1e9, 7) if c >= 0 and prev_cpu is not None else -1.0
        runq = round((q - prev_q) / 1e9, 7) if q >= 0 and prev_q is not None else -1.0
        out.append([sid, round((t - prev) / 1e9, 7), on_cpu, runq, *other[:1]])
        prev, prev_cpu, prev_q = t, (c if c >= 0 else None), (q if q >= 0 else None)
    return out


def read_partial(path: Path) -> dict | None:
    """samples.json's content rebuilt from a samples.partial.jsonl left by a run that never
    finished (killed); a torn last line (killed mid-write) is ignored. None if unreadable."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError:
        return None
    if not lines:
        return None
    try:
        header = json.loads(lines[0])
    except ValueError:
        return None
    frames: list = []
    stacks: list = []
    raw: list = []
    for line in lines[1:]:
        try:
            chunk = json.loads(line)
        except ValueError:
            break
        frames += chunk.get("frames", [])
        stacks += chunk.get("stacks", [])
        raw += chunk.get("samples", [])
    samples = _intervals([tuple(s) + (-1,) * (4 - len(s)) for s in raw if len(s) >= 2])
    return {"format": header.get("format", FORMAT), "method": header.get("method"),
            "interval_s": header.get("interval_s"), "start_monotonic_ns": header.get("start_monotonic_ns"),
            "native_id": header.get("native_id"),
            "frames": frames, "stacks": stacks, "samples": samples, "partial": True}


class _PosixTimer:
    """A CLOCK_MONOTONIC POSIX timer whose signal goes to the calling (main) thread only."""

    SIGEV_THREAD_ID = 4  # Linux
    CLOCK_MONOTONIC = 1

    class _SigEvent(ctypes.Structure):  # glibc's struct sigevent (64 bytes), thread-id variant
        _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                    ("tid", ctypes.c_int), ("_pad", ctypes.c_int * 11)]

    class _ITimerSpec(ctypes.Structure):  # struct itimerspec: two (seconds, nanoseconds) pairs
        _fields_ = [("interval", ctypes.c_long * 2), ("value", ctypes.c_long * 2)]

    def __init__(self, lib, signum: int):
        self.lib = lib
        self.signum = signum
        self._id: ctypes.c_void_p | None = None

    @classmethod
    def make(cls) -> _PosixTimer | None:
        """A timer on a free real-time signal, or None (not Linux, no timer_create, none free)."""
        if not sys.platform.startswith("linux") or not hasattr(signal, "SIGRTMIN") or ctypes.sizeof(ctypes.c_long) != 8:
            return None
        lib = None
        for name in (None, ctypes.util.find_library("rt")):
            try:
                candidate = ctypes.CDLL(name, use_errno=True)
            except OSError:
                continue
            if hasattr(candidate, "timer_create"):
                lib = candidate
                break
        if lib is None:
            return None
        for offset in (5, 6, 7, 8):  # leave the lowest real-time signals to threads libraries
            signum = signal.SIGRTMIN + offset
            if signum <= signal.SIGRTMAX and signal.getsignal(signum) in (signal.SIG_DFL, None):
                return cls(lib, signum)
        return None

    def start(self, interval: float) -> None:
        ev = self._SigEvent()
        ev.signo = int(self.signum)
        ev.notify = self.SIGEV_THREAD_ID
        ev.tid = threading.get_native_id()
        timer = ctypes.c_void_p()
        if self.lib.timer_create(self.CLOCK_MONOTONIC, ctypes.byref(ev), ctypes.byref(timer)) != 0:
            raise OSError(ctypes.get_errno(), "timer_create failed")
        self._id = timer
        try:
            self.arm(interval)
        except OSError:
            self.stop()
            raise

    def arm(self, interval: float) -> None:
        """(Re)start the periodic expiry of the created timer."""
        ns = max(int(interval * 1e9), 100_000)
        self._settime((ns // 1_000_000_000, ns % 1_000_000_000))

    def disarm(self) -> None:
        """Stop the expiries; the timer stays created, for `arm`."""
        self._settime((0, 0))

    def _settime(self, period: tuple[int, int]) -> None:
        if self._id is None:
            return
        spec = self._ITimerSpec(period, period)
        if self.lib.timer_settime(self._id, 0, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timer_settime failed")

    def stop(self) -> None:
        if self._id is not None:
            self.lib.timer_delete(self._id)
            self._id = None


class RunQueueClock:
    """ns a thread has spent ready to run but waiting for a CPU (the second field of its
    schedstat, kept by Linux for every thread: the calling thread's, or another's by its native
    id, `/proc/self/task/<id>/schedstat`); -1 where unavailable."""

    def __init__(self, native_id: int | None = None) -> None:
        path = "/proc/thread-self/schedstat" if native_id is None else f"/proc/self/task/{native_id}/schedstat"
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None

    def __call__(self) -> int:
        if self._fd is None:
            return -1
        try:
            return int(os.pread(self._fd, 96, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return -1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _signals_usable() -> bool:
    return (hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGPROF) in (signal.SIG_DFL, signal.SIG_IGN, None))
