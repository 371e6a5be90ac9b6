"""The script's own profilers: see them start and stop, so torchneck's never runs beside them.

Why: torch keeps one profiler session per thread. A second `_enable_profiler` does not fail: it
silently replaces the first session's state, so the first one's stop finds no session, returns an
empty result, and exporting that result dereferences a null trace: the segfault (rc 139) of the
profiler tutorial's code under `torchneck run` (torchneck's recording was running when the
script's `torch.autograd.profiler.profile()` started). The script's own table lost rows for the
same reason: part of its ops went to torchneck's state. And a span opened under one session and
closed under the next writes into freed memory (see `spans.py`).

So every way a script starts a torch profiler is watched: `torch.autograd.profiler.profile`
(which `torch.profiler.profile` drives, with or without a schedule), `emit_nvtx`, `emit_itt`,
and the legacy profiler. They all go through a few functions of `torch.autograd.profiler`'s
module namespace, which are wrapped here:

- `_prepare_profiler` (before a Kineto session is armed) and `_run_on_profiler_start` (right
  before `_enable_profiler`): the script's session is about to start;
- `_run_on_profiler_stop` (right after `_disable_profiler`): it has stopped.

These three run before the session starts or after it has stopped, never inside it, so even a
`with_stack=True` session (which records every Python call) does not see them: the script's
table is what plain python gives. Exports (`export_chrome_trace`, also behind
`tensorboard_trace_handler`) are noted so the report can use the script's own trace.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..sites import is_user_file
from .gzipped import gzip_copy, gzip_file

_CONCRETE_INPUTS = [True]
"""What the script (or torch's default) asked for "Concrete Inputs": with record_shapes, torch also
records the values of small inputs (scalars, lists), ~4 KB an op on some (a 200-iteration loop of
normalising a batch: 58 MB with them, nothing measurable without). torchneck's analyses do not
read them, so its own window records without them; the script's own sessions keep the setting
the script chose (torch has no getter: the setter is wrapped to know it)."""


def record_concrete_inputs(enabled: bool | None) -> None:
    """Set torch's switch for "Concrete Inputs"; None: back to what the script chose."""
    import torch

    setter = getattr(torch._C._profiler, "_set_record_concrete_inputs_enabled_val", None)
    setter = getattr(setter, "__wrapped__", setter)
    if setter is not None:
        setter(_CONCRETE_INPUTS[0] if enabled is None else enabled)


MAX_SESSIONS_KEPT = 50
"""Sessions of the script's profiler described in the report: a schedule that repeats for the
whole run starts one every cycle."""


@dataclass
class UserProfiler:
    """One session of the script's own profiler."""

    kind: str  # "torch.profiler.profile", "torch.autograd.profiler.profile", "emit_nvtx", ...
    file: str | None = None
    line: int | None = None
    function: str | None = None
    with_stack: bool = False
    profile_memory: bool = False
    schedule: bool = False  # torch.profiler.profile with a schedule other than "record every step"
    started_ns: int = 0
    stopped_ns: int | None = None
    exports: list[str] = field(default_factory=list)
    owner: object | None = field(default=None, repr=False)  # the autograd profile object (its results)

    def to_json(self) -> dict:
        return {"kind": self.kind, "file": self.file, "line": self.line, "function": self.function,
                "with_stack": self.with_stack, "profile_memory": self.profile_memory,
                "schedule": self.schedule, "started_ns": self.started_ns, "stopped_ns": self.stopped_ns,
                "exports": self.exports}


class ProfilerWatch:
    """Wraps the functions through which every torch profiler session starts and stops.

    `on_start(user)` runs before the script's session is armed (torchneck's recording must be
    stopped there), `on_stop(user)` once it has stopped. torchneck's own session passes through
    the same functions inside `ours()`, which the callbacks never see."""

    def __init__(self, on_start: Callable[[UserProfiler], None], on_stop: Callable[[UserProfiler], None]):
        self.on_start = on_start
        self.on_stop = on_stop
        self.sessions: list[UserProfiler] = []
        self.active: UserProfiler | None = None
        self._ours = 0
        self._restore: list[tuple[object, str, object]] = []

    # -- torchneck's own calls ----------------------------------------------------------------
    class _Ours:
        def __init__(self, watch: ProfilerWatch) -> None:
            self.watch = watch

        def __enter__(self) -> None:
            self.watch._ours += 1

        def __exit__(self, *exc) -> None:
            self.watch._ours -= 1

    def ours(self) -> ProfilerWatch._Ours:
        return ProfilerWatch._Ours(self)

    # -- install -------------------------------------------------------------------------------
    def install(self) -> None:
        import torch.autograd.profiler as ap

        watch = self
        prepare, run_start, run_stop = ap._prepare_profiler, ap._run_on_profiler_start, ap._run_on_profiler_stop

        def _prepare_profiler(*args, **kwargs):
            if not watch._ours:
                watch._starting(sys._getframe(1))
            return prepare(*args, **kwargs)

        def _run_on_profiler_start():
            if not watch._ours:
                watch._starting(sys._getframe(1))
            return run_start()

        def _run_on_profiler_stop():
            result = run_stop()
            if not watch._ours:
                watch._stopped(sys._getframe(1))
            return result

        self._patch_concrete_inputs()
        self._patch(ap, "_prepare_profiler", _prepare_profiler)
        self._patch(ap, "_run_on_profiler_start", _run_on_profiler_start)
        self._patch(ap, "_run_on_profiler_stop", _run_on_profiler_stop)
        self._patch_exports(ap)
        try:
            import torch.autograd.profiler_legacy as legacy

            enable_legacy, disable_legacy = legacy._enable_profiler_legacy, legacy._disable_profiler_legacy

            def _enable_profiler_legacy(*args, **kwargs):
                if not watch._ours:
                    watch._starting(sys._getframe(1))
                return enable_legacy(*args, **kwargs)

            def _disable_profiler_legacy(*args, **kwargs):
                result = disable_legacy(*args, **kwargs)
                if not watch._ours:
                    watch._stopped(sys._getframe(1))
                return result

            self._patch(legacy, "_enable_profiler_legacy", _enable_profiler_legacy)
            self._patch(legacy, "_disable_profiler_legacy", _disable_profiler_legacy)
        except (ImportError, AttributeError):
            pass

    def _patch_concrete_inputs(self) -> None:
        import torch

        setter = getattr(torch._C._profiler, "_set_record_concrete_inputs_enabled_val", None)
        if setter is None:
            return

        def _set_record_concrete_inputs_enabled_val(enabled):
            _CONCRETE_INPUTS[0] = bool(enabled)
            return setter(enabled)

        _set_record_concrete_inputs_enabled_val.__wrapped__ = setter  # type: ignore[attr-defined]
        self._patch(torch._C._profiler, "_set_record_concrete_inputs_enabled_val",
                    _set_record_concrete_inputs_enabled_val)

    def _patch_exports(self, ap) -> None:
        watch = self
        autograd_export = ap.profile.export_chrome_trace

        def export_chrome_trace(prof, path, *args, **kwargs):
            result = autograd_export(prof, path, *args, **kwargs)
            if not watch._ours:
                watch._exported(prof, path)
            return result

        self._patch(ap.profile, "export_chrome_trace", export_chrome_trace)
        try:
            from torch.profiler.profiler import _KinetoProfile
        except ImportError:
            return
        kineto_export = _KinetoProfile.export_chrome_trace

        def kineto_export_chrome_trace(prof, path, *args, **kwargs):
            result = kineto_export(prof, path, *args, **kwargs)
            if not watch._ours:
                watch._exported(getattr(prof, "profiler", None), path)
            return result

        self._patch(_KinetoProfile, "export_chrome_trace", kineto_export_chrome_trace)

    def _patch(self, owner, name: str, value) -> None:
        original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name)
        self._restore.append((owner, name, original))
        setattr(owner, name, value)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore = []

    # -- events --------------------------------------------------------------------------------
    def _starting(self, frame) -> None:
        if self.active is not None:
            return  # prepared earlier: `_run_on_profiler_start` of the same session
        user = describe(frame)
        self.active = user
        for earlier in self.sessions:  # only the last session's results may be saved: let the rest go
            earlier.owner = None  # (a schedule that repeats forever starts a session every cycle)
        if len(self.sessions) >= MAX_SESSIONS_KEPT:
            del self.sessions[1:2]  # the first (where the profiler was started) and the latest stay
        self.sessions.append(user)
        try:
            self.on_start(user)
        except Exception:  # never take the script's profiler down
            pass

    def _stopped(self, frame) -> None:
        user = self.active
        if user is None:
            return
        self.active = None
        user.stopped_ns = time.monotonic_ns()
        try:
            self.on_stop(user)
        except Exception:
            pass

    def _exported(self, prof, path) -> None:
        try:
            path = os.path.abspath(os.fspath(path))
        except TypeError:
            return
        for user in reversed(self.sessions):
            if prof is None or user.owner is prof:
                if path not in user.exports:
                    user.exports.append(path)
                return
        if self.sessions:
            self.sessions[-1].exports.append(path)

    def unsaved_results(self):
        """The last session's autograd profile object, when its trace was never exported (its
        events can still be saved once, after the script)."""
        for user in reversed(self.sessions):
            if user.owner is not None and getattr(user.owner, "kineto_results", None) is not None:
                return None if user.exports else user
        return None


_KINDS = (
    ("torch/profiler/profiler.py", "torch.profiler.profile"),
    ("torch/autograd/profiler_legacy.py", "torch.autograd.profiler_legacy.profile"),
)


def describe(frame) -> UserProfiler:
    """Which profiler is starting (from the objects on the stack) and the user's line."""
    kind = None
    owner = None
    schedule = False
    with_stack = profile_memory = False
    site = None
    f = frame
    while f is not None:
        path = f.f_code.co_filename.replace(os.sep, "/")
        if site is None and is_user_file(f.f_code.co_filename):
            site = f
            break
        me = f.f_locals.get("self") if f.f_code.co_argcount else None
        if path.endswith("torch/autograd/profiler.py") and me is not None:
            name = type(me).__name__
            if name == "profile":
                owner = me
                kind = kind or "torch.autograd.profiler.profile"
                with_stack = bool(getattr(me, "with_stack", False))
                profile_memory = bool(getattr(me, "profile_memory", False))
            elif name in ("emit_nvtx", "emit_itt"):
                kind = f"torch.autograd.profiler.{name}"
        for suffix, name in _KINDS:
            if path.endswith(suffix) and me is not None:
                kind = name
                if name == "torch.profiler.profile":
                    schedule = _has_schedule(me)
                    with_stack = with_stack or bool(getattr(me, "with_stack", False))
                    profile_memory = profile_memory or bool(getattr(me, "profile_memory", False))
        f = f.f_back
    user = UserProfiler(kind=kind or "torch profiler", with_stack=with_stack, profile_memory=profile_memory,
                        schedule=schedule, started_ns=time.monotonic_ns(), owner=owner)
    if site is not None:
        user.file = site.f_code.co_filename
        user.line = site.f_lineno
        user.function = getattr(site.f_code, "co_qualname", site.f_code.co_name)
    return user


def _has_schedule(prof) -> bool:
    fn = getattr(prof, "schedule", None)
    return fn is not None and getattr(fn, "__name__", "") != "_default_schedule_fn"


def adopt_user_trace(watch, trace_path: Path, capture, ours: Callable) -> None:
    """No trace of torchneck's own: use what the script's profiler recorded, its last
    exported trace, or else its last session's events (saved once the script is over), as the
    window's trace at `trace_path` (`capture`: the window's CaptureLog, told where it came from)."""
    if trace_path.exists() or watch is None:
        return
    for user in reversed(watch.sessions):
        for path in reversed(user.exports):
            if os.path.isfile(path):
                try:
                    gzip_copy(Path(path), trace_path)
                except OSError as exc:
                    capture.notes.append(f"could not copy the script's trace {path}: {exc}")
                    continue
                capture.trace_source, capture.trace_from = "script_export", path
                capture.trace_bytes = trace_path.stat().st_size
                return
    user = watch.unsaved_results()
    if user is None:
        return
    tmp = trace_path.with_suffix("")
    try:
        with ours():
            user.owner.kineto_results.save(str(tmp))
        gzip_file(tmp, trace_path)
    except Exception as exc:
        capture.notes.append(f"could not save the script's profiler events: {exc}")
        return
    capture.trace_source = "script_events"
    capture.trace_bytes = trace_path.stat().st_size
