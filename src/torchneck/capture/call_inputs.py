"""What the capture's module hooks note of each top-level model call's input, per line of the
user's code that made it: enough to tell a model called once per sample (a batch of one) and a
generation loop feeding the whole prefix again (an input one position longer than the last call's)
from the way most programs call their model (diagnose/rules/calls.py reads the tallies)."""

from __future__ import annotations

import sys
import types
from typing import Any

from ..sites import is_user_file

INPUTS_LOOKED_AT = 4
"""The first positional and keyword arguments looked at for the call's tensor input."""


def note_site_input(site_inputs: dict, key: tuple, args: tuple, kwargs: dict | None) -> None:
    """Tally the first tensor input of a top-level module call made at `key`: [calls with a batch
    of one (2+ dimensions, the first of size 1: `model(x[None])` per sample), calls whose input is
    the previous call's grown by one along one dimension (a prefix fed again with one more token:
    generation without a cache), the previous input's shape, the grown dimension's sizes summed
    over those calls]. Never raises."""
    import torch

    try:
        shape = None
        for value in (*args[:INPUTS_LOOKED_AT], *list((kwargs or {}).values())[:INPUTS_LOOKED_AT]):
            if isinstance(value, torch.Tensor):
                shape = tuple(value.shape)
                break
        if shape is None:
            return
        tally = site_inputs.setdefault(key, [0, 0, None, 0])
        if len(shape) >= 2 and shape[0] == 1:
            tally[0] += 1
        last = tally[2]
        if last is not None and len(last) == len(shape):
            grown = [(n, n - m) for n, m in zip(shape, last) if n != m]
            if len(grown) == 1 and grown[0][1] == 1:
                tally[1] += 1
                tally[3] += grown[0][0]
        tally[2] = shape
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
        note_site_input(log.site_inputs, key, args, kwargs)
