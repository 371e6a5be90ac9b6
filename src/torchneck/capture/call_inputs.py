"""What the capture's module hooks note of each top-level model call's input, per line of the
user's code that made it: enough to tell a model called once per sample (a batch of one), a
generation loop feeding the whole prefix again (an input one position longer than the last
call's) and a constant input encoded again and again (the same unchanged tensor) from the way
most programs call their model (diagnose/rules/calls.py reads the tallies)."""

from __future__ import annotations

import sys
import types
import weakref
from typing import Any

from ..sites import is_user_file

INPUTS_LOOKED_AT = 4
"""The first positional and keyword arguments looked at for the call's tensor input."""
RECENT_KEPT = 32
"""Inputs remembered per line to tell one passed again (a corpus encoded at every request)."""
CALLERS_KEPT = 8
"""Lines kept that passed an input again (the call's caller: where the input comes from)."""


class SiteInputs:
    """The first tensor inputs of the top-level module calls made at one line of the user's code:
    calls with a batch of one (2+ dimensions, the first of size 1: `model(x[None])` per sample);
    calls whose input is the previous call's grown by one along one dimension (a prefix fed again
    with one more token: generation without a cache) and that dimension's sizes summed; calls
    given again the very tensor of a recent call, unchanged since (same object, same version
    counter: its output could have been kept), and the lines that called from there."""

    __slots__ = ("batch_of_one", "grew_by_one", "grown_len", "last_shape", "repeated", "repeated_from", "recent")

    def __init__(self) -> None:
        self.batch_of_one = self.grew_by_one = self.grown_len = self.repeated = 0
        self.last_shape: tuple | None = None
        self.repeated_from: dict[tuple, int] = {}
        self.recent: dict[int, tuple] = {}  # id(tensor) -> (weak reference, version)

    def note(self, tensor: Any, caller: types.FrameType | None) -> None:
        shape = tuple(tensor.shape)
        if len(shape) >= 2 and shape[0] == 1:
            self.batch_of_one += 1
        last = self.last_shape
        if last is not None and len(last) == len(shape):
            grown = [(n, n - m) for n, m in zip(shape, last) if n != m]
            if len(grown) == 1 and grown[0][1] == 1:
                self.grew_by_one += 1
                self.grown_len += grown[0][0]
        self.last_shape = shape
        try:
            version = tensor._version  # inference tensors have none: their reuse cannot be told
        except Exception:
            return
        seen = self.recent.get(id(tensor))
        if seen is not None and seen[0]() is tensor and seen[1] == version:
            self.repeated += 1
            where = _user_frame(caller)
            if where is not None and (where in self.repeated_from or len(self.repeated_from) < CALLERS_KEPT):
                self.repeated_from[where] = self.repeated_from.get(where, 0) + 1
            return
        if len(self.recent) >= RECENT_KEPT:
            self.recent.clear()
        self.recent[id(tensor)] = (weakref.ref(tensor), version)

    def to_json(self) -> dict[str, Any]:
        return {"batch_of_one": self.batch_of_one, "grew_by_one": self.grew_by_one,
                "grown_mean_len": round(self.grown_len / self.grew_by_one, 1) if self.grew_by_one else None,
                "repeated": self.repeated,
                "repeated_from": [{"file": f, "line": ln, "function": fn, "calls": n}
                                  for (f, ln, fn), n in sorted(self.repeated_from.items(), key=lambda kv: -kv[1])]}


def _user_frame(frame: types.FrameType | None) -> tuple[str, int, str] | None:
    """(file, line, function) of the first frame of the user's code from `frame` outwards."""
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    code = frame.f_code
    return code.co_filename, frame.f_lineno, getattr(code, "co_qualname", code.co_name)


def note_site_input(site_inputs: dict, key: tuple, args: tuple, kwargs: dict | None,
                    caller: types.FrameType | None = None) -> None:
    """Note the first tensor input of a top-level module call made at `key` (`SiteInputs`);
    `caller` is the frame that called the function holding the line. Never raises."""
    import torch

    try:
        for value in (*args[:INPUTS_LOOKED_AT], *list((kwargs or {}).values())[:INPUTS_LOOKED_AT]):
            if isinstance(value, torch.Tensor):
                tally = site_inputs.get(key)
                if tally is None:
                    tally = site_inputs[key] = SiteInputs()
                tally.note(value, caller)
                return
    except Exception:
        pass


def note_module_site(log: Any, sites: dict, args: tuple = (), kwargs: dict | None = None,
                     kept: int = 20) -> None:
    """Count the user's line that called a top-level module (a few µs a call; called from the
    module hook, whose caller is two frames up): the line an inference fix
    (`torch.inference_mode()`) goes around, or a batching fix changes, which the trace cannot
    name; and the shape of the call's first tensor input (`log.site_inputs`). At most `kept`
    lines are counted."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return
    code = frame.f_code
    key = (code.co_filename, frame.f_lineno, getattr(code, "co_qualname", code.co_name))
    if key in sites or len(sites) < kept:
        sites[key] = sites.get(key, 0) + 1
        note_site_input(log.site_inputs, key, args, kwargs, frame.f_back)
