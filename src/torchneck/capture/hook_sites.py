"""Hooks registered again and again on the same tensor or module and never removed.

`p.register_hook(fn)` or `module.register_forward_hook(fn)` called in a loop (a callback that
attaches its gradient monitor at every step, a feature extractor registered per batch) adds one
more copy each time: backward (or forward) pass k runs k copies, so the hooks' time grows
quadratically over the run while every copy computes the same thing. Nothing in a trace says so:
a profiled window of early steps sees a few copies, the whole run's samples only show the hook's
lines getting hot. This counts, per registering line, the registrations on each target still
alive and not removed (a weak reference tells a live target from a new one at a reused address;
a tensor made in the step, such as a loss, takes its hooks with it when it dies), and the hook
function, whose sampled time the rule (diagnose/rules/hooks.py) reads.

Bounded: at most `MAX_SITES` registering lines, `MAX_TARGETS` targets a line, `MAX_HANDLES`
handles followed for their removal; beyond them registrations are counted, not followed.
"""

from __future__ import annotations

import functools
import sys
import time
import types
import weakref
from typing import Any

from .callsites import user_frames
from .dynamo_guard import is_compiling

MAX_SITES = 64
MAX_TARGETS = 4096
MAX_HANDLES = 1 << 15
WAVE_GAP_NS = 1_000_000
"""Registrations on one target from one line at least 1 ms apart are separate passes of the code
that registers (a step, a closure call); a setup loop registering several hooks on one module
does so within microseconds: one pass."""

_TENSOR_HOOKS = ("register_hook", "register_post_accumulate_grad_hook")
_MODULE_HOOKS = ("register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
                 "register_full_backward_pre_hook", "register_backward_hook")


class _Target:
    __slots__ = ("ref", "live", "passes", "last_ns")

    def __init__(self, ref: weakref.ref) -> None:
        self.ref = ref
        self.live = 0  # registrations not removed
        self.passes = 0  # separate passes that registered on it (`WAVE_GAP_NS`)
        self.last_ns = 0


class _Site:
    """One registering line (and the user's line that called it, when there is one)."""

    __slots__ = ("where", "caller", "method", "hook", "registrations", "removed", "targets", "most_live",
                 "most_passes")

    def __init__(self, where: dict, caller: dict | None, method: str, hook: dict | None) -> None:
        self.where, self.caller, self.method, self.hook = where, caller, method, hook
        self.registrations = 0
        self.removed = 0
        self.targets: dict[int, _Target] = {}
        self.most_live = 0  # the most copies from this line live on one target at once
        self.most_passes = 0  # the most passes that registered on one target

    def record(self) -> dict[str, Any]:
        return {"what": "hook_registrations", **self.where, "caller": self.caller, "method": self.method,
                "hook": self.hook, "registrations": self.registrations, "removed": self.removed,
                "targets": len(self.targets), "most_live": self.most_live, "most_passes": self.most_passes}


def _hook_code(hook: Any) -> dict | None:
    """Where the hook function is defined (its sampled time is read by file and name)."""
    fn = hook.func if isinstance(hook, functools.partial) else hook
    fn = getattr(fn, "__func__", fn)  # a bound method
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    return {"file": code.co_filename, "function": getattr(code, "co_qualname", code.co_name),
            "line": code.co_firstlineno}


class HookSites:
    """Wraps the tensor and module hook registrations and the handles' `remove`."""

    def __init__(self) -> None:
        self.sites: dict[tuple[str, int, str], _Site] = {}
        self.handles: dict[int, tuple[_Site, _Target]] = {}  # handle id -> (its line, its target)
        self._restore: list[tuple[type, str, Any]] = []

    def records(self) -> list[dict[str, Any]]:
        """One record per registering line that registered more than once."""
        return [s.record() for s in self.sites.values() if s.registrations > 1]

    def install(self) -> None:
        if self._restore:
            return
        import torch
        from torch.utils.hooks import RemovableHandle

        for owner, names in ((torch.Tensor, _TENSOR_HOOKS), (torch.nn.Module, _MODULE_HOOKS)):
            for name in names:
                original = owner.__dict__.get(name)
                if original is not None:
                    self._patch(owner, name, self._wrapped(original, name))
        remove = RemovableHandle.__dict__.get("remove")
        if remove is not None:
            self._patch(RemovableHandle, "remove", self._wrapped_remove(remove))

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore = []

    def _patch(self, owner: type, name: str, value: Any) -> None:
        self._restore.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)

    def _wrapped(self, original: Any, method: str) -> Any:
        sites = self

        @functools.wraps(original)
        def register(target, hook, *args, **kwargs):
            handle = original(target, hook, *args, **kwargs)
            if not is_compiling():
                try:
                    sites._registered(method, target, hook, handle)
                except Exception:  # never the script's problem
                    pass
            return handle

        return register

    def _wrapped_remove(self, original: Any) -> Any:
        sites = self

        @functools.wraps(original)
        def remove(handle, *args, **kwargs):
            try:
                followed = sites.handles.pop(getattr(handle, "id", None), None)
                if followed is not None:
                    site, target = followed
                    site.removed += 1
                    target.live = max(target.live - 1, 0)
            except Exception:
                pass
            return original(handle, *args, **kwargs)

        return remove

    def _registered(self, method: str, target: Any, hook: Any, handle: Any) -> None:
        found = user_frames(sys._getframe(2), 2)  # the registering line, and the user's line calling its function
        if not found:
            return
        where, caller = found[0], (found[1] if len(found) > 1 else None)
        key = (where["file"], where["line"], method)
        site = self.sites.get(key)
        if site is None:
            if len(self.sites) >= MAX_SITES:
                return
            site = self.sites[key] = _Site(where, caller, method, _hook_code(hook))
        site.registrations += 1
        entry = site.targets.get(id(target))
        if entry is None or entry.ref() is not target:  # new, or another object at a reused address
            if entry is None and len(site.targets) >= MAX_TARGETS:
                return
            try:
                entry = site.targets[id(target)] = _Target(weakref.ref(target))
            except TypeError:  # not weakly referable: not followed
                return
        entry.live += 1
        now = time.monotonic_ns()
        if now - entry.last_ns >= WAVE_GAP_NS:
            entry.passes += 1
        entry.last_ns = now
        site.most_live = max(site.most_live, entry.live)
        site.most_passes = max(site.most_passes, entry.passes)
        handle_id = getattr(handle, "id", None)
        if handle_id is not None and len(self.handles) < MAX_HANDLES:
            self.handles[handle_id] = (site, entry)
