"""Find the script's steps without code changes, and profile a steady-state window of them.

Step clocks, most trusted first: optimizer `step()` calls (a global post-hook), DataLoader
iterations (`__next__` of the loader's iterator), and calls of a top-level `nn.Module`
(global forward hooks; removed as soon as a better clock ticks, since they cost a little per
module call). The first clock of a higher rank to tick takes over.

The profiler runs from the start ("tentative"), so a script whose steps are never detected
still gets a profile of the whole run. When the clock reaches `warmup` steps, the tentative
recording is dropped and a fresh one records `steps` steps (or `duration` seconds); each clock
tick calls `profile.step()`, so the trace carries `ProfilerStep#N` spans that analyses use.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .lines import LineMarking
from .spans import OpenSpans, own_span

CLOCK_RANK = {"optimizer": 3, "dataloader": 2, "module": 1}


@dataclass
class WindowOptions:
    warmup: int = 3
    steps: int = 5
    duration: float | None = None  # seconds; overrides `steps` when set
    all: bool = False  # profile the whole run
    record_shapes: bool = True
    profile_memory: bool = True
    with_stack: bool = False


@dataclass
class ClockLog:
    """Monotonic times (ns) of every tick of the chosen clock, for the whole run."""

    kind: str | None = None
    ticks: list[int] = field(default_factory=list)
    window_start_ns: int | None = None
    window_end_ns: int | None = None
    window_first_step: int | None = None
    step_marks: list[tuple[int, int]] = field(default_factory=list)  # (ProfilerStep N, monotonic ns)
    user_profiler: bool = False
    window_note: str | None = None  # why the window is not the usual one
    tentative: bool = True
    lines_marked: bool = False  # torch calls carry `torchneck@` spans naming the user's line
    top_module_calls: int = 0  # calls of top-level modules seen by the module clock
    top_module_outputs_with_grad: int = 0  # ... whose output carried an autograd graph


class ProfiledWindow:
    """Owns the torch profiler and the step clocks for one run."""

    def __init__(self, options: WindowOptions, trace_path: Path, on_trace_written=None):
        self.options = options
        self.trace_path = trace_path
        self.on_trace_written = on_trace_written
        self.log = ClockLog()
        self._prof = None
        self._done = False
        self._handles: list = []
        self._module_depth = 0
        self._lock = threading.RLock()
        self._main_thread = threading.get_ident()
        self.export_error: str | None = None
        self._lines = LineMarking()
        self._spans = OpenSpans()
        self._window_wait_from: int | None = None  # tick at which the window became due

    # -- profiler ------------------------------------------------------------------------------
    def _new_profiler(self, memory: bool = True) -> _Kineto:
        return _Kineto(self.options, memory=memory)

    def _mark_step(self) -> None:
        self.log.step_marks.append((self._prof.step_num, time.monotonic_ns()))
        self._prof.begin_step()

    def start(self) -> None:
        """Install the clocks and start the tentative profiler."""
        self._install_clocks()
        # The tentative recording (kept only if no steps are found) records no memory events:
        # only the window uses them, and they cost time and space on every allocation.
        self._prof = self._new_profiler(memory=self.options.all)
        self._prof.start()
        self._mark_step()
        self.log.window_start_ns = time.monotonic_ns()
        self.log.window_first_step = 0

    def _tick(self, kind: str) -> None:
        if threading.get_ident() != self._main_thread:
            return
        with self._lock:
            log = self.log
            if log.kind is None or CLOCK_RANK[kind] > CLOCK_RANK[log.kind]:
                if log.kind is not None:
                    log.ticks = []  # restart counting on the better clock
                log.kind = kind
                if kind != "module":
                    self._remove_module_hooks()
            elif kind != log.kind:
                return
            now = time.monotonic_ns()
            log.ticks.append(now)
            if self._done or self._prof is None:
                return
            opts = self.options
            n = len(log.ticks)
            if log.tentative and not opts.all and n >= opts.warmup:
                if self._window_wait_from is None:
                    self._window_wait_from = n
                    if self._spans.depth == 0:
                        self._begin_window()
                        return
                    # A span is open (Optimizer.step's own, or the user's around the step):
                    # restarting the profiler now would corrupt the heap (see capture/spans.py).
                    self._spans.when_closed = self._begin_window
                elif n - self._window_wait_from >= max(opts.steps, 1):
                    # A span stayed open for the whole would-be window (one around the
                    # whole loop): keep the tentative recording, from the start, as the profile.
                    log.window_note = "a record_function span stayed open around the steps"
                    self.finish()
                    return
            if not (log.tentative or opts.all):
                recorded = n - (log.window_first_step or 0)
                if opts.duration is not None:
                    done = (now - log.window_start_ns) / 1e9 >= opts.duration
                else:
                    done = recorded >= opts.steps
                if done:
                    self.finish()
                    return
            self._prof.step_num += 1
            self._mark_step()

    def _begin_window(self) -> None:
        """Drop the warm-up recording; record the steady state from here. Only called when no
        span is open on the main thread."""
        with self._lock:
            log = self.log
            if self._done or self._prof is None or not log.tentative:
                return
            self._spans.when_closed = None
            try:
                self._prof.stop()
                self._prof = self._new_profiler()
                self._prof.start()
            except Exception as exc:  # never let the profiler take the user's run down
                self.export_error = f"{type(exc).__name__}: {exc}"
                self._done = True
                self._prof = None
                return
            log.tentative = False
            log.step_marks = []
            self._mark_step()
            log.window_start_ns = time.monotonic_ns()
            log.window_first_step = len(log.ticks)
            log.lines_marked = self._lines.start()

    def finish(self) -> None:
        """Stop profiling and write the trace (idempotent)."""
        with self._lock:
            if self._done or self._prof is None:
                return
            self._done = True
            self._spans.when_closed = None
            self.log.window_end_ns = time.monotonic_ns()
            self._remove_module_hooks()
            self._lines.stop()
            prof, self._prof = self._prof, None
            try:
                prof.stop()
                tmp = self.trace_path.with_suffix("")  # trace.json
                prof.export(tmp)
                _gzip_file(tmp, self.trace_path)
            except Exception as exc:  # never let the profiler take the user's run down
                self.export_error = f"{type(exc).__name__}: {exc}"
                return
            if self.on_trace_written:
                self.on_trace_written(self.trace_path)

    # -- clocks --------------------------------------------------------------------------------
    def _install_clocks(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import dataloader

        self._spans.install()
        self._handles.append(register_optimizer_step_post_hook(lambda *a, **k: self._tick("optimizer")))
        base = dataloader._BaseDataLoaderIter
        original_next = base.__next__
        window = self

        def __next__(it):
            try:
                return original_next(it)
            finally:
                window._tick("dataloader")

        base.__next__ = __next__
        self._restore_next = (base, original_next)
        self._module_handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._module_pre),
            torch.nn.modules.module.register_module_forward_hook(self._module_post),
        ]
        self._wrap_user_profiler()

    def _module_pre(self, module, args) -> None:
        self._module_depth += 1

    def _module_post(self, module, args, output) -> None:
        self._module_depth -= 1
        if self._module_depth == 0:
            self.log.top_module_calls += 1
            if getattr(output, "grad_fn", None) is not None:
                self.log.top_module_outputs_with_grad += 1
            self._tick("module")

    def _remove_module_hooks(self) -> None:
        for h in getattr(self, "_module_handles", []):
            h.remove()
        self._module_handles = []

    def compile_started(self) -> None:
        """torch.compile is about to trace a frame (called from the compile log). Take the global
        module hooks away first: dynamo would trace them into the graph and guard on them, and
        removing them later would recompile the user's code. Calls of compiled modules
        (`OptimizedModule`) tick the module clock instead. The line marker (a torch function
        mode, also guarded on) stops for the same reason."""
        if threading.get_ident() != self._main_thread:
            return
        if getattr(self, "_module_handles", None):
            self._remove_module_hooks()
            self._module_depth = 0
            if self.log.kind in (None, "module"):
                self._wrap_compiled_modules()
        self._lines.stop()

    def _wrap_compiled_modules(self) -> None:
        if hasattr(self, "_restore_optimized_call"):
            return
        try:
            from torch._dynamo.eval_frame import OptimizedModule
        except ImportError:
            return
        own = OptimizedModule.__dict__.get("__call__")
        original = OptimizedModule.__call__
        window = self

        def __call__(module, *args, **kwargs):
            window._module_depth += 1
            try:
                return original(module, *args, **kwargs)
            finally:
                window._module_depth -= 1
                if window._module_depth == 0:
                    window._tick("module")

        OptimizedModule.__call__ = __call__
        self._restore_optimized_call = (OptimizedModule, own)

    def _wrap_user_profiler(self) -> None:
        """If the script starts its own torch.profiler, hand over: write ours first."""
        from torch.profiler import profile

        original_start = profile.start
        window = self

        def start(prof_self):
            if window._prof is not None and not window._done:
                window.log.user_profiler = True
                window.finish()
            return original_start(prof_self)

        profile.start = start
        self._restore_start = (profile, original_start)

    def uninstall(self) -> None:
        self._spans.uninstall()
        for h in self._handles:
            h.remove()
        self._handles = []
        self._remove_module_hooks()
        if hasattr(self, "_restore_next"):
            base, original = self._restore_next
            base.__next__ = original
        if hasattr(self, "_restore_start"):
            cls, original = self._restore_start
            cls.start = original
        if hasattr(self, "_restore_optimized_call"):
            cls, own = self._restore_optimized_call
            if own is None:
                del cls.__call__
            else:
                cls.__call__ = own
            del self._restore_optimized_call


class _Kineto:
    """One recording of torch's Kineto profiler, through `torch.autograd.profiler.profile`.

    Not `torch.profiler.profile`: its start does `hasattr(torch, "_inductor")`, which imports
    inductor (~1.4 s here) in every script, compiled or not. Steps are marked with our own
    `ProfilerStep#N` record_function, as torch.profiler does.
    """

    def __init__(self, options: WindowOptions, memory: bool = True):
        import torch

        use_device = "cuda" if torch.cuda.is_available() else None
        self._prof = torch.autograd.profiler.profile(
            use_cpu=True, use_device=use_device, record_shapes=options.record_shapes,
            profile_memory=options.profile_memory and memory, with_stack=options.with_stack, use_kineto=True)
        self._step = None
        self.step_num = 0

    def start(self) -> None:
        import torch

        with _quiet_stderr():
            self._prof.__enter__()
        try:
            torch.autograd._add_metadata_json("torchneck", '"1"')
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                info = {"backend": torch.distributed.get_backend(), "rank": torch.distributed.get_rank(),
                        "world_size": torch.distributed.get_world_size()}
                torch.autograd._add_metadata_json("distributedInfo", json.dumps(info))
        except Exception:
            pass

    def begin_step(self) -> None:

        self.end_step()
        self._step = own_span()(f"ProfilerStep#{self.step_num}")
        self._step.__enter__()

    def end_step(self) -> None:
        if self._step is not None:
            self._step.__exit__(None, None, None)
            self._step = None

    def stop(self) -> None:
        self.end_step()
        with _quiet_stderr():
            self._prof.__exit__(None, None, None)

    def export(self, path: Path) -> None:
        self._prof.export_chrome_trace(str(path))


@contextlib.contextmanager
def _quiet_stderr():
    """Kineto prints 'USDT ... profiler_start/stop' on fd 2 at every start and stop; those lines
    are noise in the user's output. The redirect lasts only for the call."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _gzip_file(src: Path, dst: Path) -> None:
    try:
        from isal import igzip as gz
    except ImportError:  # pragma: no cover
        import gzip as gz
    with open(src, "rb") as fin, gz.open(dst, "wb", compresslevel=1) as fout:
        while True:
            block = fin.read(8 << 20)
            if not block:
                break
            fout.write(block)
    src.unlink()
