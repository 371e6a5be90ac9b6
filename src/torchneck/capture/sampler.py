"""Python call stacks of the script's thread, sampled for the whole run.

How: a CPU-time interval timer (`setitimer(ITIMER_PROF)`) sends SIGPROF every millisecond of
the process's CPU time, and the Python handler, which CPython runs in the main thread at the
next bytecode boundary, records the frame it interrupted. No second thread takes the GIL, so a
sample costs only the handler (~10-20 µs). Each sample's weight is the wall time since the
previous one, so the weights add up to the run's wall time: a line blocked in a long op or a
DataLoader wait (no CPU, so no signal) gets the whole wait in its next sample.

Why not the alternatives measured here: a `sys.setprofile` sampler (pyinstrument) pays on every
call and return, and made the 2 s import of torch._dynamo 1 s slower; a timer thread reading
`sys._current_frames()` needs a GIL hand-over per sample, which cost ~1.4 ms each on this VM.
Where signals are unavailable (not the main thread, no `setitimer`), the thread sampler is used
at a coarser 5 ms.

Saved as `samples.json` (format 2): `frames` ([function, file, line], line = the line executing
in that frame), `stacks` (frame ids, root first), and `samples` ([stack id, seconds]); a sample's
instant is the running sum of seconds from `start_monotonic_ns`; `method` says which sampler.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

SAMPLE_INTERVAL_S = 0.001
"""1 ms of CPU time: fine enough to place samples within a step of a few ms; a sample costs
~10-20 µs in the handler, 1-2 % of the run."""

THREAD_INTERVAL_S = 0.005
"""The fallback thread sampler's interval: each of its samples forces a GIL hand-over."""

FORMAT = 2


class StackSampler:
    """Samples the stack of the calling thread until `stop()`."""

    def __init__(self, interval: float = SAMPLE_INTERVAL_S):
        self.interval = interval
        self.thread_id = threading.get_ident()
        self.method = "signal" if _signals_usable() else "thread"
        self._previous_handler = None
        self._handler = None
        self.start_ns: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Interned data: frame key (code, line) -> id, stack tuple -> id.
        self._frame_ids: dict[tuple, int] = {}
        self.frames: list[list] = []
        self._stack_ids: dict[tuple[int, ...], int] = {}
        self.stacks: list[tuple[int, ...]] = []
        self.samples: list[tuple[int, int]] = []  # (stack id, monotonic ns at the sample)

    def start(self) -> None:
        self.start_ns = time.monotonic_ns()
        if self.method == "signal":
            record = self.samples.append
            stack_of = self._stack_id
            now = time.monotonic_ns

            def on_sigprof(signum, frame):
                if frame is not None:
                    record((stack_of(frame), now()))

            self._handler = on_sigprof
            self._previous_handler = signal.signal(signal.SIGPROF, on_sigprof)
            signal.siginterrupt(signal.SIGPROF, False)  # restart system calls the signal interrupts
            signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)
            return
        self.interval = max(self.interval, THREAD_INTERVAL_S)
        self._thread = threading.Thread(target=self._loop, name="torchneck-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self.method == "signal" and self.start_ns is not None:
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
            # Put the old handler back, unless the script installed its own meanwhile.
            if signal.getsignal(signal.SIGPROF) is self._handler:
                signal.signal(signal.SIGPROF, self._previous_handler or signal.SIG_DFL)
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
        while not wait(interval):
            at = now()  # the GIL is held from here: the script is frozen at this instant
            frame = current_frames().get(target)
            if frame is None:
                continue
            record((stack_of(frame), at))
            frame = None  # do not keep the script's locals alive until the next sample

    def _stack_id(self, frame) -> int:
        """Intern the stack ending at `frame` (root first)."""
        frame_ids = self._frame_ids
        ids = []
        while frame is not None:
            code = frame.f_code
            key = (code, frame.f_lineno)
            fid = frame_ids.get(key)
            if fid is None:
                fid = frame_ids[key] = len(self.frames)
                name = getattr(code, "co_qualname", code.co_name)
                self.frames.append([name, code.co_filename, key[1] or code.co_firstlineno])
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
        for sid, t in self.samples:
            samples.append([sid, round((t - prev) / 1e9, 7)])
            prev = t
        return {"format": FORMAT, "method": self.method, "interval_s": self.interval, "start_monotonic_ns": self.start_ns,
                "frames": self.frames, "stacks": [list(s) for s in self.stacks], "samples": samples}

    def write(self, path: Path) -> dict:
        """Write samples.json; returns the same data."""
        data = self.to_json()
        path.write_text(json.dumps(data, separators=(",", ":")))
        return data


def _signals_usable() -> bool:
    return (hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGPROF) in (signal.SIG_DFL, signal.SIG_IGN, None))
