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

Saved as `samples.json` (format 3): `frames` ([function, file, line], line = the line executing
in that frame), `stacks` (frame ids, root first), and `samples` ([stack id, seconds, on-CPU
seconds]): a sample's instant is the running sum of seconds from `start_monotonic_ns`; on-CPU
seconds are the sampled thread's CPU time over the same interval (-1 unknown), so analyses tell
a line that computes from one that waits; `method` says which sampler.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

SAMPLE_INTERVAL_S = 0.001
"""1 ms (wall; of CPU time for the ITIMER_PROF fallback): fine enough to place samples within a
step of a few ms; a sample costs ~10-20 µs in the handler, 1-2 % of the run."""

THREAD_INTERVAL_S = 0.005
"""The fallback thread sampler's interval: each of its samples forces a GIL hand-over."""

FORMAT = 3


class StackSampler:
    """Samples the stack of the calling thread until `stop()`."""

    def __init__(self, interval: float = SAMPLE_INTERVAL_S):
        self.interval = interval
        self.thread_id = threading.get_ident()
        wall = os.environ.get("TORCHNECK_SAMPLER", "wall") != "cpu"  # TORCHNECK_SAMPLER=cpu: ITIMER_PROF
        self._timer = _PosixTimer.make() if wall and _signals_usable() else None
        self.method = "wall-timer" if self._timer else "signal" if _signals_usable() else "thread"
        self._previous_handler = None
        self._handler = None
        self.start_ns: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Interned data: frame key (code, line) -> id, stack tuple -> id.
        self._frame_ids: dict[tuple[int, int], int] = {}  # (id(code), line) -> frame id
        self._offset_ids: dict[tuple[int, int], int] = {}  # (id(code), f_lasti) -> frame id
        self._codes: dict[int, object] = {}  # keeps the code objects alive: their ids stay unique
        self.frames: list[list] = []
        self._stack_ids: dict[tuple[int, ...], int] = {}
        self.stacks: list[tuple[int, ...]] = []
        # (stack id, monotonic ns at the sample, the thread's CPU ns at the sample)
        self.samples: list[tuple[int, int, int]] = []

    def start(self) -> None:
        self.start_ns = time.monotonic_ns()
        self.start_cpu_ns = time.thread_time_ns()
        if self.method in ("wall-timer", "signal"):
            record = self.samples.append
            stack_of = self._stack_id
            now = time.monotonic_ns
            cpu = time.thread_time_ns  # the handler runs on the sampled (main) thread

            busy = [False]

            def on_signal(signum, frame):
                # CPython runs a pending handler at any bytecode boundary, this handler's own
                # included: a sample that overruns the interval (a descheduled thread) must not
                # nest samples into itself.
                if frame is None or busy[0]:
                    return
                busy[0] = True
                try:
                    record((stack_of(frame), now(), cpu()))
                finally:
                    busy[0] = False

            self._handler = on_signal
            signum = self._timer.signum if self._timer else signal.SIGPROF
            self._previous_handler = signal.signal(signum, on_signal)
            signal.siginterrupt(signum, False)  # restart system calls the signal interrupts
            if self._timer:
                try:
                    self._timer.start(self.interval)
                    return
                except OSError:  # fall back to the CPU-time timer
                    signal.signal(signum, self._previous_handler or signal.SIG_DFL)
                    self._timer = None
                    self.method = "signal"
                    self._previous_handler = signal.signal(signal.SIGPROF, on_signal)
                    signal.siginterrupt(signal.SIGPROF, False)
            signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)
            return
        self.interval = max(self.interval, THREAD_INTERVAL_S)
        self._thread = threading.Thread(target=self._loop, name="torchneck-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self.method in ("wall-timer", "signal") and self.start_ns is not None and self._handler is not None:
            if self._timer:
                self._timer.stop()
                signum = self._timer.signum
            else:
                signal.setitimer(signal.ITIMER_PROF, 0, 0)
                signum = signal.SIGPROF
            # Put the old handler back, unless the script installed its own meanwhile.
            if signal.getsignal(signum) is self._handler:
                signal.signal(signum, self._previous_handler or signal.SIG_DFL)
            self._previous_handler = self._handler = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

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
            record((stack_of(frame), at, cpu()))
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
                line_key = (key[0], frame.f_lineno)
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
            sid = self._stack_ids[stack] = len(self.stacks)
            self.stacks.append(stack)
        return sid

    def to_json(self) -> dict:
        samples = []
        prev = self.start_ns or 0
        prev_cpu = getattr(self, "start_cpu_ns", None)
        for sid, t, c in sorted(self.samples, key=lambda x: x[1]):
            on_cpu = round((c - prev_cpu) / 1e9, 7) if prev_cpu is not None and c >= 0 else -1
            samples.append([sid, round((t - prev) / 1e9, 7), on_cpu])
            prev, prev_cpu = t, (c if c >= 0 else None)
        return {"format": FORMAT, "method": self.method, "interval_s": self.interval,
                "start_monotonic_ns": self.start_ns,
                "frames": self.frames, "stacks": [list(s) for s in self.stacks], "samples": samples}

    def write(self, path: Path) -> dict:
        """Write samples.json; returns the same data."""
        data = self.to_json()
        path.write_text(json.dumps(data, separators=(",", ":")))
        return data


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
        self._id = None

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
        ns = max(int(interval * 1e9), 100_000)
        spec = self._ITimerSpec((ns // 1_000_000_000, ns % 1_000_000_000), (ns // 1_000_000_000, ns % 1_000_000_000))
        if self.lib.timer_settime(timer, 0, ctypes.byref(spec), None) != 0:
            self.stop()
            raise OSError(ctypes.get_errno(), "timer_settime failed")

    def stop(self) -> None:
        if self._id is not None:
            self.lib.timer_delete(self._id)
            self._id = None


def _signals_usable() -> bool:
    return (hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGPROF) in (signal.SIG_DFL, signal.SIG_IGN, None))
