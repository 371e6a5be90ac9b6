"""Seeing the work a blocked main thread waits for: a server's worker thread, a thread pool.

The sampler's signal reaches only the main thread, and CPython runs the Python handler only when
that thread runs bytecode. A main thread blocked on a lock (`Thread.join()`, `queue.get()`,
`Event.wait()`, `Future.result()`) runs none: a script whose main thread starts a worker and
joins it left one sample of its whole run, "waits in Thread.join", and no profiled window (its
checks never ran; measured on an intent server: 7.8 s in one sample, a window of 2 events).

The watcher is a thread that looks, every `WATCH_INTERVAL_S`, whether the main thread still
takes samples. When it has taken none for `BLOCKED_AFTER_NS` and its CPU clock says it waits
(under `MAIN_IDLE_SHARE` of the time on the CPU), or its latest sample waits on another thread in
a wait the signal interrupts (`Future.result()` of a thread pool, `Queue.get()`: their samples
said "waits in result_iterator" while a worker ran the script's code unseen) and it is on the
CPU under `WAITING_MAIN_SHARE` of the time (its handler and checks), the watcher samples, every
`WATCH_BLOCKED_INTERVAL_S`, the thread that is at work (on the CPU `OTHER_BUSY_SHARE` of the time
at least, running the script's own code: not a library's thread, nor torchneck's) in the main
thread's place: the time the main thread waits is that thread's time (the handler records
none of its own meanwhile, `sampler.STAND_IN_NS`). It also runs
`ThreadsSlice.check`, which profiles a slice of that work (the profiler recording every thread)
when no step clock or check could. A main thread that waits while no other thread computes (a
sleep, I/O) keeps its own wait sample, as before.

Cost: one look takes the GIL from the script for some microseconds, 20 times a second; the
faster sampling happens only while the main thread needs no GIL.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from ..sites import is_user_file
from .sampler import RunQueueClock

WATCH_INTERVAL_S = 0.05
"""How often the watcher looks while the main thread takes samples: each look takes the GIL
from the script for a moment, so rarely; a blocked main thread is seen within this."""
WATCH_BLOCKED_INTERVAL_S = 0.005
"""The watcher's sampling interval while the main thread is blocked: the thread at work pays a
GIL hand-over per sample (~0.1 ms on this VM when idle), 2 % at most."""
BLOCKED_AFTER_NS = 20_000_000
"""No sample from the main thread's handler for 20 ms (20 intervals) while it runs: the main
thread is inside a C call that defers the handler."""
MAIN_IDLE_SHARE = 0.2
"""The main thread ran on the CPU under a fifth of the interval: it waits. A long C call of its
own (a big op, which also defers the handler) runs on the CPU, and keeps its samples."""
WAITING_MAIN_SHARE = 0.5
"""A main thread whose latest sample waits on another thread may be on the CPU up to half the
interval: its handler runs there, and the capture plan's checks with it (measured 20-45 % while a
pool's worker ran tiny ops); a main thread computing takes samples outside the wait."""
OTHER_BUSY_SHARE = 0.5
"""Another thread on the CPU at least half of the interval is doing the work being waited for
(a worker waiting in turn on a queue or a socket runs ~0 %)."""
STALE_CHECK_NS = 10_000_000
"""The main thread's checks (every 2 ms while a window records) have not run for 10 ms: its
handler waits for the thread it waits on (a pool's `Future.result()` wakes it once per result).
Workers issuing tiny ops record ~700,000 events a second: 10 ms is some 2 MB."""
GUARD_SETTLE_S = 0.05
"""The guard judges the memory bound on the smallest of its readings over 50 ms (ten looks), or
over the loop's learnt period if longer: the threads the main thread waits on run the model, and
its transients (a padding server's 37 MB attention scores, alive for a few ms of each batch) in
one or two readings were taken for the profiler's buffers, stopping the window after 13 ms and 20
ops in half the runs. Workers' tiny ops record ~700,000 events a second: 50 ms is ~3 MB more."""
OWN_THREADS = "torchneck"
"""torchneck's threads are named so: never sampled for the script."""


def _cpu_clock(ident: int) -> int | None:
    """The CPU-time clock of the thread `ident` (`threading.get_ident()`), or None."""
    try:
        return time.pthread_getcpuclockid(ident)
    except (AttributeError, OSError, OverflowError):
        return None


def _read(clock: int) -> int | None:
    try:
        return time.clock_gettime_ns(clock)
    except OSError:  # the thread ended
        return None


def _runs_user_code(frame: Any) -> bool:
    """The script's own code is on the thread's stack: a library's thread (a DataLoader's
    pin-memory thread, busy copying while the main thread waits in its queue) is no work of the
    script's, and the main thread's wait in the DataLoader stays what it is."""
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return True
        frame = frame.f_back
    return False


class MainThreadWatcher:
    """Samples the thread a blocked main thread waits for, into `sampler` (StackSampler)."""

    def __init__(self, sampler: Any, main_ident: int | None = None):
        self.sampler = sampler
        self.main_ident = main_ident if main_ident is not None else sampler.thread_id
        self.on_blocked: Any = None  # called after each sample taken for the blocked main thread
        self.on_look: Any = None  # called at every look (ThreadsSlice.guard)
        self.samples_taken = 0
        self.failed = False
        self._stop = threading.Event()
        self._main_ready = RunQueueClock(-1)  # the main thread's, opened when watching starts
        self._wake = threading.Event()  # set to look now (a window started, stop)
        self._thread: threading.Thread | None = None
        self._clocks: dict[int, tuple[int | None, RunQueueClock]] = {}  # ident -> (CPU clock, ready clock)
        self._seen: dict[int, tuple[int, int, int]] = {}  # ident -> (monotonic, CPU, ready) ns at the last look

    def start(self) -> None:
        if self._thread is not None or _cpu_clock(self.main_ident) is None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"{OWN_THREADS}-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            self._wake.set()
            thread.join()

    def wake(self) -> None:
        """Look now rather than at the end of the interval (a profiled window started)."""
        self._wake.set()

    def _loop(self) -> None:
        try:
            self._watch()
        except Exception:  # never a traceback in the script's output: the main thread keeps its own samples
            self.failed = True
        finally:  # the schedstat files' descriptors
            for ready in [r for _, r in self._clocks.values()] + [self._main_ready]:
                ready.close()
            self._clocks.clear()
            self._seen.clear()

    def _watch(self) -> None:
        main_clock = _cpu_clock(self.main_ident)
        if main_clock is None:
            return
        sampler = self.sampler
        main = next((t for t in threading.enumerate() if t.ident == self.main_ident), None)
        main_ready = self._main_ready = RunQueueClock(main.native_id if main is not None else -1)
        previous: tuple[int, int] | None = None  # the main thread's (monotonic, CPU + ready) ns at the last look
        interval = WATCH_INTERVAL_S
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            main_cpu = _read(main_clock)
            now = time.monotonic_ns()
            if main_cpu is None:
                return
            running = main_cpu + max(main_ready(), 0)  # on the CPU, or ready to be (a loaded machine)
            share = (running - previous[1]) / (now - previous[0]) \
                if previous is not None and now > previous[0] else 1.0  # of the interval
            previous = (now, running)
            waits = sampler._paused_at is None and share <= WAITING_MAIN_SHARE and sampler.main_waits
            blocked = waits or (  # in a wait the signal interrupts (torchneck's checks run there), or none
                sampler._paused_at is None and share <= MAIN_IDLE_SHARE
                and now - sampler.last_main_ns >= BLOCKED_AFTER_NS)
            guarding = self.on_look is not None and self.on_look(waits)
            busy = self._busy_others(now)
            frame = self._user_frame(busy) if blocked else None  # frames only then: see _user_frame
            if frame is None:  # nothing to sample: a wait on I/O is the main thread's own
                interval = WATCH_BLOCKED_INTERVAL_S if guarding else WATCH_INTERVAL_S
                continue
            interval = WATCH_BLOCKED_INTERVAL_S
            thread = threading._active.get(busy[0][0])  # type: ignore[attr-defined]
            taken = sampler.record_other(frame, busy[0][1], main_cpu, getattr(thread, "native_id", None) or 0)
            del frame
            if taken:
                self.samples_taken += 1
                if self.on_blocked is not None:
                    self.on_blocked()

    def _busy_others(self, now: int) -> list[tuple[int, int]]:
        """(thread id, CPU ns since the last look) of the threads that ran on the CPU, or waited
        ready to run while other processes held the CPUs (a loaded machine), `OTHER_BUSY_SHARE`
        of the time since the watcher's last look, busiest first (torchneck's and the main thread
        aside). Read from the threads' CPU clocks and schedstat alone: no frame is touched."""
        me = threading.get_ident()
        active = dict(threading._active)  # type: ignore[attr-defined]
        busy = []
        for ident, thread in active.items():
            if ident in (self.main_ident, me) or thread.name.startswith(OWN_THREADS):
                continue
            if ident not in self._clocks:
                self._clocks[ident] = (_cpu_clock(ident), RunQueueClock(getattr(thread, "native_id", None) or -1))
            clock, ready_clock = self._clocks[ident]
            cpu = _read(clock) if clock is not None else None
            if cpu is None:
                continue
            ready = max(ready_clock(), 0)
            before = self._seen.get(ident)
            self._seen[ident] = (now, cpu, ready)
            if before is not None and now > before[0] \
                    and cpu - before[1] + ready - before[2] >= OTHER_BUSY_SHARE * (now - before[0]):
                busy.append((ident, cpu - before[1]))
        for gone in [i for i in self._seen if i not in active]:  # ended threads (their ids come back)
            del self._seen[gone]
            gone_clocks = self._clocks.pop(gone, None)
            if gone_clocks is not None:
                gone_clocks[1].close()
        return sorted(busy, key=lambda b: -b[1])

    @staticmethod
    def _user_frame(busy: list[tuple[int, int]]) -> Any:
        """The frame of the busiest of `busy` running the script's own code, or None. Only while
        the main thread is blocked: `sys._current_frames()` makes a frame object of every thread's
        running frame, the main thread's included, and one made while the main thread computes
        (in a generator's frame) kept its temporaries alive until the garbage collector ran
        (measured: 100 MB more in use at every chunk of a generator pipeline)."""
        if not busy:
            return None
        frames = sys._current_frames()
        try:
            for ident, used in busy:
                frame = frames.get(ident)
                if frame is not None and _runs_user_code(frame):
                    busy[:] = [(ident, used)]
                    return frame
            return None
        finally:
            del frames


class ThreadsSlice:
    """The capture plan's check while the main thread is blocked (run by the watcher's thread,
    since the main thread's checks cannot run): once the other threads' work has gone on for
    `STEADY_HOLD_S`, a time slice of it is profiled, every thread recorded; the slice ends at its
    length or bounds, here while the main thread stays blocked, or at the main thread's next
    check (a profiler started on one thread stops on another: measured, its trace whole)."""

    def __init__(self, window: Any):
        self.window = window
        self.since_ns: int | None = None  # the main thread has been blocked since, at least
        self.started = False
        self._lock = threading.Lock()

    def check(self) -> None:
        window = self.window
        if window._busy or not self._lock.acquire(blocking=False):
            return
        window._busy = True  # the main thread's own check, should it wake now, waits for the next one
        try:
            self._check(window)
        except Exception as exc:  # a failing check must not take the script down: stop checking
            window.capture.notes.append(f"the check for a blocked main thread failed ({type(exc).__name__}: {exc})")
            if window.sampler is not None and window.sampler.watcher is not None:
                window.sampler.watcher.on_blocked = None
        finally:
            window._busy = False
            self._lock.release()

    def guard(self, main_waits: bool) -> bool:
        """The window's bounds, checked from the watcher's thread while the window records and the
        main thread's checks have stopped (`STALE_CHECK_NS`): a main thread waiting on a thread
        pool's futures runs its handler once per result, and the workers' ops, recorded on every
        thread, ran far past the memory bound between two checks (measured: 168,000 events for a
        4 MB bound, 2 s of the profiler's processing to stop it, the script 2x slower). Only while
        the main thread's latest sample waits on another thread (`main_waits`) and it is off the
        CPU: a main thread deferring its handler inside a long op of its own, on a loaded machine,
        looks idle, and stopping the profiler under that op crashed the process. True
        while the window records: the watcher then looks every `WATCH_BLOCKED_INTERVAL_S` (a window
        lasts a second at most)."""
        window = self.window
        now = time.monotonic_ns()
        if window.state != "recording" or window.options.all:
            return False
        if not main_waits or now - window.last_check_ns < STALE_CHECK_NS or window._busy \
                or not self._lock.acquire(blocking=False):
            return True
        window._busy = True
        try:
            slice_s = window.options.duration or window.options.slice_s
            bound = "slice" if window.capture.plan in ("loop", "slice") and window._elapsed_s(now) >= slice_s \
                else window._over_bounds(now, settle_s=max(window._rss.loop_settle_s(), GUARD_SETTLE_S))
            if bound:
                window.finish(bound)
            return not bound
        except Exception as exc:  # a failing check must not take the script down: stop guarding
            window.capture.notes.append(
                f"the bounds check for a waiting main thread failed ({type(exc).__name__}: {exc})")
            if window.sampler is not None and window.sampler.watcher is not None:
                window.sampler.watcher.on_look = None
            return False
        finally:
            window._busy = False
            self._lock.release()

    def _check(self, window: Any) -> None:
        from .plan import STEADY_HOLD_S

        now = time.monotonic_ns()
        options = window.options
        slice_s = options.duration or options.slice_s
        if window.state == "recording":
            if self.started:
                bound = "slice" if window._elapsed_s(now) >= slice_s else \
                    window._over_bounds(now, settle_s=window._rss.loop_settle_s())
                if bound:
                    window.finish(bound)
            return
        if window.state != "waiting" or window.aside or options.all or not window._slice_allowed(now):
            return
        sampler = window.sampler
        last = sampler.samples[-1][0] if sampler.samples else None
        starting = last is not None and last < len(sampler.stack_busy) and sampler.stack_busy[last]
        if self.since_ns is None or sampler.last_main_ns > self.since_ns or starting:
            self.since_ns = now  # the main thread ran since (its wait starts again), or the thread imports or compiles
        if (now - self.since_ns) / 1e9 < STEADY_HOLD_S:
            return
        self.started = window._start_recording(
            "slice", f"no step clock; the main thread waits on another thread at work: a {slice_s:g} s slice of "
            "its work (every thread recorded)", all_threads=True, mark_lines=False)
        if self.started:
            window.capture.steady_from_ns = window.capture.steady_from_ns or self.since_ns
