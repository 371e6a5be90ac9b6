"""Find the script's steps without code changes, and profile one bounded window of its steady
state (see `plan.py` for how the window is chosen and bounded).

Step clocks, most trusted first: optimizer `step()` calls (a global post-hook), DataLoader
iterations (`__next__` of the loader's iterator), and calls of a top-level `nn.Module` (global
forward hooks; removed a few model calls after a better clock ticks, since they cost a little per
module call, and before anything is compiled, see `dynamo_guard.py`; they also keep one model call
for the autograd probe, `autograd_probe.py`). The first clock of a higher rank to tick takes over.
When the clock reaches `warmup` steps, the profiler records `steps` steps; each tick marks a
`ProfilerStep#N` span, as `torch.profiler.profile.step()` does, which the analyses use. A program
without steps gets a time slice of its steady state instead, started from the sampler's periodic
check; if steps appear later, the slice is replaced once by a step window, when no span opened under
the slice's session is still open (`spans.py`).

Nothing is recorded before the window: one profiler session per run, no whole-run recording.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..sites import is_user_file
from .autograd_probe import RememberedCall, builds_graph
from .call_inputs import note_module_site
from .dynamo_guard import is_compiling
from .gzipped import gzip_file
from .kineto import Kineto
from .lines import LineMarking
from .plan import (
    MARKED_CALLS_PER_MB,
    MID_STEP_FACTOR,
    MIN_STEPS,
    MODULE_WINDOW_MIN_S,
    ONE_STEP_FACTOR,
    RSS_SETTLE_S,
    SLICE_MEMORY_AFTER,
    SLICE_MEMORY_AT_ONCE,
    STEP_SILENCE_S,
    TICKS_KEPT,
    TICKS_KEPT_WAITING,
    CaptureLog,
    ClockLog,
    MemoryProbe,
    SteadyState,
    WindowOptions,
    long_call,
    loop_site,
    module_window_short,
    on_cpu_share,
)
from .profilers import adopt_user_trace
from .sampler import CHECK_INTERVAL_NS, RECORDING_CHECK_INTERVAL_NS
from .signals import interrupts_held_back
from .spans import OpenSpans

CLOCK_RANK = {"optimizer": 3, "dataloader": 2, "module": 1}
LOOK_CALLS = 3
"""Top-level module calls the module hooks still see after a better clock began, before they go:
a DataLoader's clock ticks before the first model call, and the autograd probe needs one."""
MODULE_SITES_KEPT = 20
"""Distinct lines calling a top-level module counted at most (a script calls its model from a few)."""


class ProfiledWindow:
    """Owns the torch profiler and the step clocks for one run."""

    def __init__(self, options: WindowOptions, trace_path: Path, on_trace_written=None, watch=None):
        self.options = options
        self.trace_path = trace_path
        self.on_trace_written = on_trace_written
        self.watch = watch  # capture/profilers.py: torchneck's own profiler calls pass as ours()
        self.log = ClockLog()
        self.capture = CaptureLog(bounds={"max_window_s": options.max_window_s,
                                          "max_window_mb": options.max_window_mb,
                                          "slice_s": options.duration or options.slice_s,
                                          "steps": options.steps, "warmup": options.warmup})
        self._prof: Kineto | None = None
        self.state = "waiting"  # waiting -> recording -> done
        self.aside = False  # the script's own profiler has run: torchneck records nothing more
        self._busy = False  # a hook or check is running: a signal-handler check must not re-enter
        self.last_check_ns = 0  # the main thread's latest check (watcher.ThreadsSlice.guard reads it)
        self._finishing = threading.Lock()
        self._handles: list = []
        self._module_handles: list = []
        self._module_depth = 0
        self._top_began = 0.0  # when the current top-level module call began (main thread)
        self._look_calls = 0  # module calls the module hooks still see once a better clock began
        self._other_threads = threading.local()  # module depth and entry time in each other thread
        self._thread_ids: set[int] = set()
        self._main_thread = threading.get_ident()
        self.calls = RememberedCall()  # one recent model call that built a graph, for the autograd probe
        self.export_error: str | None = None
        self._lines = LineMarking()
        self._spans = OpenSpans()
        self._rss = MemoryProbe()
        self._rss_base = 0
        self._bound_base = 0  # what the bound compares to: after a steps window's first step
        self._steady = SteadyState()
        self._sessions = 0  # torchneck recordings started (their spans are told apart by number)
        self._superseded = False  # a slice has been replaced by a step window (only once)
        self._restep_after: str | None = None  # a better clock began while a span was open
        self._kept: tuple[str, dict] | None = None  # a module-clock window, until the better clock's begins
        self._calls_base = 0  # the marker's call count when the window began
        self._window_wait_from: int | None = None  # tick at which a superseding window became due
        self._seen_samples = 0
        self.compile_in_use = False
        self.sampler: Any = None  # capture/sampler.py's StackSampler, once attached
        self.started_ns = time.monotonic_ns()
        self.marks: Any = None  # capture/marks.py: NVTX / ITT ranges (--nvtx)

    def _ours(self):
        return self.watch.ours() if self.watch is not None else contextlib.nullcontext()

    # -- recording -----------------------------------------------------------------------------
    def _mark_step(self) -> None:
        prof = self._prof
        assert prof is not None, "only while recording"
        self.log.step_marks.append((prof.step_num, time.monotonic_ns()))
        prof.begin_step()

    def _elapsed_s(self, now: int) -> float:
        """Seconds the window has been recording."""
        return (now - (self.log.window_start_ns or now)) / 1e9

    def start(self) -> None:
        """Install the clocks; with `--all`, record from here."""
        self.started_ns = time.monotonic_ns()
        self._install_clocks()
        if self.options.all:
            self.log.tentative = True
            self._start_recording("all", "--all: the whole run, without bounds")

    def attach_sampler(self, sampler) -> None:
        """The sampler's periodic check drives windows of programs without steps, and the bounds."""
        self.sampler = sampler
        sampler.on_check = self.check
        if getattr(sampler, "watcher", None) is not None:
            from .watcher import ThreadsSlice

            threads = ThreadsSlice(self)
            sampler.watcher.on_blocked, sampler.watcher.on_look = threads.check, threads.guard

    def _start_recording(self, plan: str, why: str, all_threads: bool = False, mark_lines: bool = True) -> bool:
        """Start the profiler; `all_threads` records every thread's ops (not only the main thread's
        and those it starts later); `mark_lines` pushes the line marker (main thread only)."""
        now = time.monotonic_ns()
        try:
            with self._ours():
                o = self.options
                prof = Kineto(o.record_shapes, o.profile_memory, o.with_stack,
                              all_threads or self.log.thread_module_calls > 0)
                prof.start()
        except Exception as exc:  # never let the profiler take the user's run down
            self.export_error = f"{type(exc).__name__}: {exc}"
            self.state = "done"
            return False
        self._prof = prof
        self._sessions += 1
        self._spans.session = self._sessions
        self.state = "recording"
        log, cap = self.log, self.capture
        if self._kept is not None:  # the module-clock window set aside is replaced now
            cap.replaced = f"{self._kept[0]}, replaced by a better clock's steps"
            self._kept = None
        cap.plan, cap.why = plan, why
        cap.window_start_ns = log.window_start_ns = now
        cap.window_end_ns = log.window_end_ns = None
        cap.stopped_by, cap.inside_step = None, False
        log.step_marks = []
        self._rss.reset()
        self._rss_base = self._bound_base = self._rss.settled(0.0)
        if self.sampler is not None and getattr(self.sampler, "watcher", None) is not None:
            self.sampler.watcher.wake()  # it checks the bounds should the main thread's checks stop
        self._mark_step()
        self._lines.marked = False
        self._calls_base = self._lines.open_spans[1]
        if mark_lines:
            self._lines.start()
        if plan in ("loop", "slice") and self.sampler is not None:
            self.sampler.check_interval_ns = RECORDING_CHECK_INTERVAL_NS
        self._charge_to_torchneck()
        return True

    def _charge_to_torchneck(self) -> None:
        """End the sampler's interval here, as torchneck's: the last C call of writing the profile
        returns straight into the script's frame, where the next sample would charge it."""
        if self.sampler is not None and threading.get_ident() == self._main_thread:
            from ..sites import TOOL_FRAME

            self.sampler.record_synthetic(TOOL_FRAME)

    def _recorded_bytes(self, settle_s: float = RSS_SETTLE_S, since: int | None = None) -> int:
        return max(0, self._rss.settled(settle_s) - (self._rss_base if since is None else since))

    def _over_bounds(self, now: int, factor: float = 1.0, settle_s: float = RSS_SETTLE_S) -> str | None:
        """Which bound the recording window has passed, if any (`--all` has none)."""
        if self.options.all:
            return None
        elapsed = self._elapsed_s(now)
        if elapsed >= factor * self.options.max_window_s:
            return "time_bound"
        if self._recorded_bytes(settle_s, self._bound_base) >= factor * self.options.max_window_mb * (1 << 20):
            return "memory_bound"
        return None

    def finish(self, stopped_by: str = "end", export: bool = True) -> None:
        """Stop recording and write the trace (idempotent)."""
        with self._finishing:  # the main thread's exit and the watcher's bounds check may both get here
            if self.state != "recording" or self._prof is None:
                return
            try:
                with interrupts_held_back():  # a whole trace.json.gz, then the Ctrl-C
                    self._finish(stopped_by, export)
            finally:
                self._charge_to_torchneck()

    def _finish(self, stopped_by: str, export: bool) -> None:
        self.state = "done"
        cap, log = self.capture, self.log
        cap.window_end_ns = log.window_end_ns = time.monotonic_ns()
        cap.stopped_by = stopped_by
        cap.recorded_mb = round(self._recorded_bytes(0.0) / (1 << 20), 2)
        if self.sampler is not None:
            self.sampler.check_interval_ns = CHECK_INTERVAL_NS
        self._lines.stop()
        log.lines_marked, log.product_operands = self._lines.marked, self._lines.operands.to_json()
        prof, self._prof = self._prof, None
        assert prof is not None
        try:
            t0 = time.perf_counter()
            with self._ours():
                prof.stop()
            cap.stop_s = round(time.perf_counter() - t0, 4)  # the profiler's own processing of the events
            self._spans.session = None
            if not export:
                return
            t0 = time.perf_counter()
            tmp = self.trace_path.with_suffix("")  # trace.json
            with self._ours():
                prof.export(tmp)
            gzip_file(tmp, self.trace_path)
            cap.export_s = round(time.perf_counter() - t0, 4)
        except Exception as exc:  # never let the profiler take the user's run down
            self.export_error = f"{type(exc).__name__}: {exc}"
            return
        finally:
            self._spans.session = None
        cap.trace_bytes = self.trace_path.stat().st_size
        cap.trace_source = "torchneck"
        if self.on_trace_written:
            self.on_trace_written(self.trace_path)

    # -- the step clock ------------------------------------------------------------------------
    def _tick(self, kind: str) -> None:
        if threading.get_ident() != self._main_thread or self._busy:
            return
        log = self.log
        if log.kind is None or CLOCK_RANK[kind] > CLOCK_RANK[log.kind]:
            if log.kind is not None:
                # restart counting on the better clock
                log.ticks, log.ticks_dropped, log.longest_step_ns, log.last_tick_ns = [], 0, 0, None
                self._restep(log.kind)
            log.kind = kind
            if kind != "module":
                self._look_calls = LOOK_CALLS  # then the module hooks go (_module_post)
        elif kind != log.kind:
            return
        now = time.monotonic_ns()
        if log.last_tick_ns is not None:
            log.longest_step_ns = max(log.longest_step_ns, now - log.last_tick_ns)
        log.last_tick_ns = now
        kept = len(log.ticks)
        if kept < TICKS_KEPT or (self.state != "done" and kept < TICKS_KEPT_WAITING):
            log.ticks.append(now)
        else:
            log.ticks_dropped += 1
        if self.capture.steady_from_ns is None or now < self.capture.steady_from_ns:
            self.capture.steady_from_ns = now
        if self.marks is not None:
            self.marks.step(log.tick_count)
        self._busy = True
        try:
            self._lines.retry()
            self._step_clock(now)
        finally:
            self._busy = False

    def _restep(self, weaker: str) -> None:
        """A better clock has begun: a window of steps timed by the module clock (calls of top-level
        modules) is replaced once by one of the new clock's steps. Those calls were not steps:
        26 embedding tables called one by one made a window of five lookups inside the first
        training step, the optimizer's step never in it."""
        if weaker != "module" or self.capture.plan != "steps" or self._superseded or self.aside \
                or self.options.all or (self.watch is not None and self.watch.sessions):
            return
        if self.state == "recording":
            if self._spans.depth or self._lines.open_spans[0]:  # a span opened in this session closes later:
                self._restep_after = weaker  # a second session could corrupt memory; the check retries
                return
            self._restep_after = None
            self.finish("clock")  # written: kept if the better clock's window never comes
        elif self.state != "done":
            return
        cap = self.capture
        began_s = ((cap.window_start_ns or 0) - self.started_ns) / 1e9
        self._kept = (f"a window of {weaker} calls from {began_s:.1f} s",
                      {k: getattr(cap, k) for k in _WINDOW_FIELDS})
        self._superseded = True
        self.state = "waiting"
        cap.plan = "none"  # the better clock's steps may begin a window

    def keep_earlier_window(self) -> None:
        """At the end of the run: a window set aside for a better clock whose own window never
        began (too few of its steps) is the run's window again, as its trace on disk is."""
        if self._kept is None or self.state != "waiting":
            return
        earlier, fields = self._kept
        self._kept = None
        for k, v in fields.items():
            setattr(self.capture, k, v)
        self.state = "done"
        self.capture.notes.append(f"{earlier} was kept: a better clock began, but too late for a window of its steps")

    def _step_clock(self, now: int) -> None:
        opts, log, cap = self.options, self.log, self.capture
        n = log.tick_count
        if self.state == "recording" and cap.plan == "steps":
            recorded = n - (log.window_first_step or 0)
            if opts.duration is not None and self._elapsed_s(now) >= opts.duration:
                self.finish("duration")
            elif opts.duration is None and recorded >= opts.steps and not (
                    log.kind == "module" and module_window_short(self._elapsed_s(now), recorded)):
                self.finish("steps")
            else:
                if recorded == 1:  # the first step holds the profiler's one-time buffers (~8 MB measured)
                    self._bound_base = self._rss.settled(0.0)
                    if not self.options.all and self._recorded_bytes(0.0) >= \
                            ONE_STEP_FACTOR * self.options.max_window_mb * (1 << 20):
                        self.finish("memory_bound")  # one step is already far too many events
                        return
                bound = None if recorded < MIN_STEPS else self._over_bounds(now, settle_s=0.0)  # a step
                if bound == "memory_bound" and log.kind == "module" and module_window_short(
                        self._elapsed_s(now), recorded) and self._recorded_bytes(0.0, self._bound_base) < \
                        ONE_STEP_FACTOR * self.options.max_window_mb * (1 << 20):
                    bound = None  # tiny model calls fill their 0.1 s (a buffer the profiler grows is not them)
                if bound:  # boundary: the step's own tensors are freed
                    self.finish(bound)
                    return
                self._next_step()
            return
        if self.state == "recording" and cap.plan == "all":
            self._next_step()
            return
        long_steps = opts.warmup_s is not None and n >= 2 and not self.compile_in_use and \
            (now - log.ticks[0]) / 1e9 >= opts.warmup_s  # the second step alone took that long
        if self.aside or opts.all or (n < opts.warmup and not long_steps) or cap.plan == "steps":
            return
        if self.state == "waiting":
            self._begin_step_window()
            return
        # A slice was recorded (or is recording) before the steps began: replace it once by a
        # window of steps, only where no span opened under its session can still close later.
        if self._superseded or self.compile_in_use or (self.watch is not None and self.watch.sessions):
            return
        if self._window_wait_from is None:
            self._window_wait_from = n
        if self._spans.depth == 0 and self._lines.open_spans[0] == 0:
            self._supersede()
        elif n - self._window_wait_from < max(opts.steps, 1):
            self._spans.when_closed = self._supersede_when_closed
        else:
            self._spans.when_closed = None
            cap.notes.append("the steps ran inside a record_function span: the slice recorded before "
                             "them was kept, a second profiler session there could corrupt memory")
            self._superseded = True

    def _next_step(self) -> None:
        assert self._prof is not None, "only while recording"
        self._prof.step_num += 1
        self._mark_step()

    def _supersede_when_closed(self) -> None:
        if self._busy or self.state == "waiting" or self.capture.plan == "steps":
            return
        self._busy = True
        try:
            if self._lines.open_spans[0] == 0:
                self._supersede()
        finally:
            self._busy = False

    def _supersede(self) -> None:
        cap = self.capture
        previous = (f"a {cap.plan} window from {((cap.window_start_ns or 0) - self.started_ns) / 1e9:.1f} s, "
                    "replaced by the steps once they began")
        if self.state == "recording":
            self.finish("superseded", export=False)
        self._superseded = True
        cap.replaced = previous
        self._begin_step_window()

    def _begin_step_window(self) -> None:
        log = self.log
        n = log.tick_count
        why = (f"{log.kind} steps: {min(n, self.options.warmup)} warm-up step(s) skipped, then "
               + (f"{self.options.duration:g} s" if self.options.duration else f"{self.options.steps} step(s)"
                  + (f" ({MODULE_WINDOW_MIN_S:g} s at least of tiny ones)" if log.kind == "module" else "")))
        if self._start_recording("steps", why):
            log.window_first_step = n

    # -- the sampler's check: programs without steps, and the bounds ---------------------------
    def check(self) -> None:
        """Every few ms, from the sampler's signal handler (main thread)."""
        if self._busy:
            return
        self._busy = True
        self.last_check_ns = time.monotonic_ns()
        try:
            self._check()
        except Exception as exc:  # a failing check must not take the script down: stop checking
            self.capture.notes.append(f"the capture plan's check failed ({type(exc).__name__}: {exc}); "
                                      "windows are started by steps only")
            if self.sampler is not None:
                self.sampler.on_check = None
        finally:
            self._busy = False

    def _check(self) -> None:
        self._lines.retry()
        self._rss.settled(0.0)  # memory's rhythm, learnt before a window (MemoryProbe.loop_settle_s)
        now = time.monotonic_ns()
        sampler = self.sampler
        total = len(sampler.samples)
        recent = sampler.samples[self._seen_samples:total]
        before, self._seen_samples = sampler.samples[self._seen_samples - 1] if self._seen_samples else None, total
        busy_of = sampler.stack_busy
        busy = any(busy_of[sample[0]] for sample in recent if sample[0] < len(busy_of))
        call = long_call(before, recent, busy_of, sampler.stack_waits,
                         lambda sid: is_user_file(sampler.frames[sampler.stacks[sid][-1]][1]))
        synthetic = (sampler._tool_sid, sampler._unsampled_sid)  # torchneck's own work is not a second stack
        steady = self._steady.update(now, len(recent), sampler.fresh, busy,
                                     {sample[0] for sample in recent if sample[0] not in synthetic},
                                     on_cpu_share(recent))
        cap = self.capture
        if call is not None and cap.long_call_from_ns is None and self.log.last_tick_ns is None:
            # a program without steps: its work began there (no slice starts on it: generating a
            # synthetic dataset is one long call too, and a slice then would miss the loop after it)
            cap.long_call_from_ns = call[0]
        since = self._steady.steady_since_ns
        if steady and since is not None and (cap.steady_from_ns is None or since < cap.steady_from_ns):
            cap.steady_from_ns = since  # the program's main work began there
        if self.state == "recording":
            if self._restep_after and not (self._spans.depth or self._lines.open_spans[0]):
                return self._restep(self._restep_after)  # a better clock began inside a span: its window now
            if cap.plan in ("loop", "slice"):
                slice_s = self.options.duration or self.options.slice_s
                if self._elapsed_s(now) >= slice_s:
                    self.finish("slice")
                    return
                settle_s = self._rss.loop_settle_s()
                bound = self._over_bounds(now, settle_s=settle_s)
                calls = self._lines.open_spans[1] - self._calls_base  # torch calls marked: ~900 events a MB
                if bound == "memory_bound" and self._elapsed_s(now) < SLICE_MEMORY_AFTER * slice_s and \
                        calls < SLICE_MEMORY_AFTER * MARKED_CALLS_PER_MB * self.options.max_window_mb and \
                        self._over_bounds(now, factor=SLICE_MEMORY_AT_ONCE, settle_s=settle_s) is None:
                    bound = None  # the program's own tensors, early in a slice of few calls: not the events
                if bound is None and calls >= MARKED_CALLS_PER_MB * self.options.max_window_mb:
                    bound = "memory_bound"  # the marked calls alone fill the bound, whatever memory says
            elif cap.plan == "steps" and self._elapsed_s(now) >= MID_STEP_FACTOR * self.options.max_window_s:
                bound = "time_bound"  # between ticks time, and calls for memory: a step's own tensors swell memory
            elif cap.plan == "steps" and self._lines.open_spans[1] - self._calls_base >= \
                    MID_STEP_FACTOR * MARKED_CALLS_PER_MB * self.options.max_window_mb:
                bound = "memory_bound"
            else:
                bound = None
            if bound:
                cap.inside_step = cap.plan == "steps"  # between ticks: the step in progress is cut
                self.finish(bound)
            return
        if self.state != "waiting" or self.aside or self.options.all or not self._slice_allowed(now):
            return
        if steady:
            site = loop_site(sampler.frames, sampler.stacks, [sample[0] for sample in recent], is_user_file)
            cap.loop = site
            where = (f" in {site['function']} ({os.path.basename(site['file'])}:{site['first_line']}"
                     + (f"-{site['last_line']}" if site["last_line"] != site["first_line"] else "") + ")"
                     if site else "")
            self._start_recording("loop", "no step clock; the sampled Python stacks repeat" + where
                                  + f": a {self.options.duration or self.options.slice_s:g} s slice of the loop")
        elif self._steady.fallback_due(now, self.started_ns):
            cap.steady_from_ns = cap.steady_from_ns or now
            self._start_recording("slice", "no step clock and no repeating stacks: a "
                                  f"{self.options.duration or self.options.slice_s:g} s time slice "
                                  "after start-up work stopped")

    def _slice_allowed(self, now: int) -> bool:
        """Before any step, or once the step clock has fallen silent (its loop is over)."""
        last = self.log.last_tick_ns
        if last is None:
            return True
        return (now - last) / 1e9 > max(STEP_SILENCE_S, 3 * self.log.longest_step_ns / 1e9)

    # -- the script's own profiler -------------------------------------------------------------
    def user_profiler_starting(self, user) -> None:
        """The script starts its own profiler: write ours first; record nothing more."""
        self.aside = True
        self.log.user_profiler = True
        self._spans.when_closed = None
        if self.state == "recording":
            self.finish("user_profiler")
        for session in range(1, self._sessions + 1):
            self._spans.detach_open(session)

    def user_profiler_stopped(self, user) -> None:
        self._spans.release_kept()  # no session records now: ending them writes nothing

    def adopt_user_trace(self, watch) -> None:
        """No trace of torchneck's own: use what the script's profiler recorded (profilers.py)."""
        adopt_user_trace(watch, self.trace_path, self.capture, self._ours)

    # -- clocks --------------------------------------------------------------------------------
    def _install_clocks(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import dataloader

        self._spans.install()
        window = self

        def optimizer_step_ticks(optimizer, args, kwargs):
            if not is_compiling():  # dynamo inlines this as nothing
                window._tick("optimizer")
                window.calls.forget()  # the model call it follows was training's

        self._handles.append(register_optimizer_step_post_hook(optimizer_step_ticks))
        base = dataloader._BaseDataLoaderIter
        original_next = base.__next__

        def __next__(it):
            if is_compiling():
                return original_next(it)
            try:
                return original_next(it)
            finally:
                window._tick("dataloader")

        setattr(base, "__next__", __next__)  # noqa: B010  (a class attribute patched)
        self._restore_next = (base, original_next)
        if self.log.kind in (None, "module"):
            if not self.compile_in_use:
                self._module_handles = [
                    torch.nn.modules.module.register_module_forward_pre_hook(self._module_pre),
                    torch.nn.modules.module.register_module_forward_hook(self._module_post, with_kwargs=True),
                ]
            else:
                self._wrap_compiled_modules()
        elif not self.compile_in_use:
            self.calls.follow()

    def _module_pre(self, module, args) -> None:
        if threading.get_ident() != self._main_thread:
            other = self._other_threads
            depth = getattr(other, "depth", 0)
            if depth == 0:
                other.began = time.perf_counter()
            other.depth = depth + 1
            return
        if self._module_depth == 0:
            self._top_began = time.perf_counter()
            if self._restep_after and not (self._spans.depth or self._lines.open_spans[0]):
                self._restep(self._restep_after)  # the model's next call, outside every span
        self._module_depth += 1

    def _module_post(self, module, args, kwargs, output) -> None:
        if threading.get_ident() != self._main_thread:
            self._other_thread_post(module, args, kwargs, output)
            return
        self._module_depth -= 1
        if self._module_depth == 0:
            self.log.top_module_calls += 1
            if builds_graph(output):
                self.log.top_module_outputs_with_grad += 1
                self.calls.remember(module, args, kwargs, time.perf_counter() - self._top_began, output)
            note_module_site(self.log, self.log.top_module_sites, args, kwargs, MODULE_SITES_KEPT, module)
            self._tick("module")
            self._look_calls -= 1
            if self.log.kind != "module" and self._look_calls <= 0:  # a better clock ticks: follow the model alone
                self._remove_module_hooks()
                self.calls.follow()

    def _other_thread_post(self, module, args, kwargs, output) -> None:
        """A module call returned in another thread: its own depth (a shared one would be
        corrupted by threads calling modules at once), and at its top level the call's time,
        whether it built a graph, and the line that made it. Never a step tick."""
        other = self._other_threads
        other.depth = max(getattr(other, "depth", 1) - 1, 0)
        if other.depth or not hasattr(other, "began"):
            return
        log = self.log
        log.thread_module_calls += 1
        log.thread_module_s += time.perf_counter() - other.began
        if builds_graph(output):
            log.thread_module_outputs_with_grad += 1
            self.calls.remember(module, args, kwargs, time.perf_counter() - other.began, output)
        ident = threading.get_ident()
        if ident not in self._thread_ids and len(self._thread_ids) < MODULE_SITES_KEPT:
            self._thread_ids.add(ident)
            log.thread_module_threads = len(self._thread_ids)
        note_module_site(log, log.thread_module_sites, args, kwargs, MODULE_SITES_KEPT)

    def _remove_module_hooks(self) -> None:
        from torch.nn.modules import module as nn_module

        for h in self._module_handles:
            h.remove()  # torch leaves a with_kwargs hook's id behind, where dynamo sees a global hook:
            getattr(nn_module, "_global_forward_hooks_with_kwargs", {}).pop(h.id, None)
        self._module_handles = []

    def compile_started(self) -> None:
        """torch.compile was called, or dynamo is about to trace a frame: take the global module
        hooks away first (dynamo would trace them into the graph and guard on them; removing
        them later would recompile the user's code); calls of compiled modules
        (`OptimizedModule`) tick the module clock instead. The line marker (a torch function
        mode, also guarded on) stops for good, for the same reason."""
        if threading.get_ident() != self._main_thread:
            return
        self.compile_in_use = True
        self.calls.unfollow()
        if self._module_handles:
            self._remove_module_hooks()
            self._module_depth = 0
        if self.log.kind in (None, "module"):
            self._wrap_compiled_modules()
        self._lines.disabled = True
        self._lines.stop()

    def _wrap_compiled_modules(self) -> None:
        if hasattr(self, "_restore_optimized_call"):
            return
        try:
            from torch._dynamo.eval_frame import OptimizedModule
        except ImportError:
            return
        own, original, window = OptimizedModule.__dict__.get("__call__"), OptimizedModule.__call__, self

        def __call__(module, *args, **kwargs):
            if is_compiling():  # a compiled module called from compiled code: dynamo inlines it
                return original(module, *args, **kwargs)
            window._module_depth += 1
            try:
                return original(module, *args, **kwargs)
            finally:
                window._module_depth -= 1
                if window._module_depth == 0:  # the line and the inputs of the call, as the module hooks note them
                    note_module_site(window.log, window.log.top_module_sites, args, kwargs, MODULE_SITES_KEPT)
                    window._tick("module")

        setattr(OptimizedModule, "__call__", __call__)  # noqa: B010
        self._restore_optimized_call = (OptimizedModule, own)

    def uninstall(self) -> None:
        """Take every hook and patch away (at the end, or while the script's own profiler records
        Python calls, which would list them); `_install_clocks()` puts them back."""
        self._spans.uninstall()
        for h in self._handles:
            h.remove()
        self._handles = []
        self._remove_module_hooks()
        self.calls.unfollow()
        if hasattr(self, "_restore_next"):
            base, original = self._restore_next
            setattr(base, "__next__", original)  # noqa: B010
            del self._restore_next
        if hasattr(self, "_restore_optimized_call"):
            cls, own = self._restore_optimized_call
            if own is None:
                delattr(cls, "__call__")
            else:
                setattr(cls, "__call__", own)  # noqa: B010
            del self._restore_optimized_call

    def close(self) -> None:
        self._rss.close()


_WINDOW_FIELDS = ("plan", "why", "window_start_ns", "window_end_ns", "stopped_by", "inside_step", "recorded_mb",
                  "trace_bytes", "stop_s", "export_s", "trace_source")
"""What describes a recorded window in `CaptureLog`: saved when a window is set aside, restored if
it stays the run's."""
