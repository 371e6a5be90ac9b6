"""The user's functions from a trace's own Python events (`with_stack=True` traces).

With `with_stack=True`, PyTorch's profiler records every Python call as a `python_function`
event named `<file>(<line>): <function>` on the thread that made it, nested like the call stack
around the ops it ran. The innermost such event of the user's own code that encloses an op
names the user's function that ran it. `<line>` is the line the frame was at when the call
began: a function's first line (its `def`), not the line inside it that called torch, so this
places an op by function, not by statement.

Which frames are the user's: the file of a thread's outermost `<module>` frame is the script
being run. Otherwise the profiler shortens a file's path to be relative to the
`sys.path` entry it was imported from (`torch/nn/modules/module.py`, `typing.py`, `train.py`),
so a path alone cannot say whose code it is. A frame is a library's when its top-level module
is part of the standard library, a well-known ML library, or a package installed here; or when
its path is absolute and lies in an installation (`sites.is_user_file`); `<built-in ...>` and
`<frozen ...>` pseudo-files are nobody's source.
"""

from __future__ import annotations

import functools
import os
import re
import site
import sys
from dataclasses import replace
from importlib.machinery import PathFinder

import numpy as np

from ..model.analysis import CodeSite
from ..sites import is_user_file, parse_site
from ..trace.table import Cat, EventTable, Trace
from .nesting import Nesting, host_nesting, innermost_open
from .ops import enclosing_sites, has_line_marks

FRAME_NAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<function>.+)$")
"""`python_function` event names: `<file>(<line>): <function>`."""

KNOWN_LIBRARIES = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "torchrec", "torchao", "torchtune",
    "functorch", "torchgen", "triton", "numpy", "scipy", "pandas", "sklearn", "PIL", "cv2", "jax",
    "transformers", "tokenizers", "datasets", "accelerate", "diffusers", "peft", "timm", "einops",
    "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "apex", "xformers", "flash_attn",
    "tqdm", "tensorboard", "wandb", "hydra", "omegaconf", "safetensors", "huggingface_hub", "torchneck",
})
"""Libraries whose frames are not the user's even when this machine, which may not be the one
that recorded the trace, does not have them installed."""


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    return [d for d in [*dirs, user] if d and os.path.isdir(d)]


@functools.lru_cache(maxsize=4096)
def _installed_here(top: str) -> bool:
    """A package or module `top` installed in this Python's site directories (not the current
    directory, where the user's own script may lie)."""
    try:
        return PathFinder.find_spec(top, _site_dirs()) is not None
    except (ImportError, ValueError):
        return False


@functools.lru_cache(maxsize=65536)
def is_user_frame_file(path: str) -> bool:
    """Whether a `python_function` frame's file is the user's own code (see the module doc)."""
    if not path or path.startswith("<"):
        return False
    if os.path.isabs(path):
        return is_user_file(path)
    top = re.split(r"[/\\]", path, maxsplit=1)[0]
    if top.endswith(".py"):
        top = top[:-3]
    if not top.isidentifier():
        return True  # not importable by that name: the user's script or a file beside it
    return not (top in sys.stdlib_module_names or top in KNOWN_LIBRARIES or _installed_here(top))


def parse_frame_name(name: str) -> tuple[str, int, str] | None:
    """(function, line, file) of a `python_function` event name, or None."""
    m = FRAME_NAME.match(name)
    if m is None:
        return None
    return m.group("function"), int(m.group("line")), m.group("file")


def script_files(table: EventTable) -> set[str]:
    """Files of the scripts the profiled threads ran: a thread's earliest `<module>` frame,
    open when profiling began, is the script's own top level (`python train.py`), whose file
    is the user's even when it shares its name with a module of the standard library
    (`profile.py`, `trace.py`, `queue.py`). A module imported while profiling starts later."""
    is_module = table.names_matching(lambda s: s.endswith(": <module>"))
    if not len(is_module) or not is_module.any():
        return set()
    out = set()
    for th in np.unique(table.thread).tolist():
        on_thread = np.flatnonzero(table.thread == th)
        first = table.ts[on_thread[0]]  # ascending start: the table's order
        for r in on_thread[table.ts[on_thread] == first].tolist():
            if is_module[table.name[r]] and (p := parse_frame_name(table.strings[table.name[r]])):
                out.add(p[2])
    return out


def user_frames(table: EventTable) -> np.ndarray:
    """Rows of a trace's python-event table that are frames of the user's own code."""
    scripts = script_files(table)
    mine = table.names_matching(lambda s: (p := parse_frame_name(s)) is not None and (
        p[2] in scripts or is_user_frame_file(p[2])))
    if not len(mine) or not mine.any():
        return np.empty(0, dtype=np.intp)
    return np.flatnonzero((table.cat == Cat.PYTHON_FUNCTION) & mine[table.name])


def enclosing_user_frames(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For each event row of `trace.events` in `rows`: the string id of the name of the
    innermost user frame (a `python_function` event of the user's code) on the same thread
    that is open at the event's start (`ops.innermost_open`), or -1 (no Python events, or
    only library frames)."""
    out = np.full(len(rows), -1, dtype=np.int32)
    if not len(trace.python) or not len(rows):
        return out
    frames, parent = _user_frame_index(trace.python)
    if not len(frames):
        return out
    start = trace.events.ts[rows]
    threads = trace.events.thread[rows]
    frame_end = frames.ts + frames.dur
    for th in np.unique(frames.thread).tolist():
        at = np.flatnonzero(threads == th)
        if not len(at):
            continue
        on_thread = np.flatnonzero(frames.thread == th)  # ascending start: the table's order
        found = innermost_open(on_thread, frames.ts[on_thread], start[at],
                               end_of=lambda f: frame_end[f], up=lambda f: parent[f])
        out[at[found >= 0]] = frames.name[found[found >= 0]]
    return out


def _user_frame_index(python: EventTable) -> tuple[EventTable, np.ndarray]:
    """The user's frames among a trace's Python events, and each one's enclosing user frame
    (or -1), found by the host ops' call-stack walk over them alone; built once per table (the
    per-line, float64 and sync analyses each place rows)."""
    cached = python._user_frames
    if cached is None:
        frames = python.select(user_frames(python))
        as_host = replace(frames, cat=np.full(len(frames), int(Cat.USER_ANNOTATION), dtype=np.int8))
        cached = python._user_frames = (frames, host_nesting(as_host).parent)
    return cached


def has_call_stacks(trace: Trace) -> bool:
    """Whether ops carry their Python stack as a "Call stack" arg and no `python_function`
    events say more: PyTorch 1.8-1.11 `with_stack=True` traces."""
    return not len(trace.python) and len(trace.events.call_stack.rows) > 0


def call_stack_sites(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """Per row (int64): the string id of the innermost user frame, `<file>(<line>): <function>`,
    in the row's own "Call stack" arg, or -1. Before PyTorch 1.12 that arg lists the frames
    innermost first, each at the line it was running (the call itself, not the `def`); the
    last is the script's `<module>`, whose file is the user's whatever its name (as
    `script_files`). 1.12 lists them outermost first, but writes `python_function` events too,
    which `trace_site_keys` reads instead."""
    out = np.full(len(rows), -1, dtype=np.int64)
    stack = table.call_stack[rows].astype(np.int64) - 1
    has = np.flatnonzero(stack >= 0)
    if not len(has):
        return out
    cache = table.__dict__.setdefault("_stack_frames", {})
    uniq, inverse = np.unique(stack[has], return_inverse=True)
    frames = np.empty(len(uniq), dtype=np.int64)
    for i, sid in enumerate(uniq.tolist()):
        if sid not in cache:
            cache[sid] = _innermost_user_frame(table, table.strings[sid])
        frames[i] = cache[sid]
    out[has] = frames[inverse]
    return out


def _innermost_user_frame(table: EventTable, stack: str) -> int:
    entries = [(e, parse_frame_name(e)) for e in stack.split(";") if e]
    script = entries[-1][1][2] if entries and entries[-1][1] and entries[-1][1][0] == "<module>" else None
    for text, frame in entries:
        if frame is not None and (frame[2] == script or is_user_frame_file(frame[2])):
            return table.intern(text)
    return -1


def trace_site_keys(trace: Trace, nesting: Nesting, rows: np.ndarray) -> np.ndarray:
    """Per row (int64): the string id of the `torchneck@` span around it (the exact line, in
    traces of `torchneck run`), or else of its innermost user frame (`with_stack` traces: from
    the `python_function` events, or before PyTorch 1.12 from the op's "Call stack"); -1
    where the trace says neither. `describe_site` reads an id back. May add frame names to
    the table's strings."""
    t = trace.events
    key = np.full(len(rows), -1, dtype=np.int64)
    if has_line_marks(t):
        key[:] = enclosing_sites(t, nesting)[rows]
    rest = np.flatnonzero(key < 0)
    if len(rest) and len(trace.python):
        key[rest] = enclosing_user_frames(trace, rows[rest])
    elif len(rest) and has_call_stacks(trace):
        key[rest] = call_stack_sites(t, rows[rest])
    return key


def describe_site(name: str) -> dict | None:
    """`{file, line, function, source}` of a `torchneck@` span's name ("trace") or of a Python
    frame's ("stack"); None for any other name."""
    site = parse_site(name)
    if site is not None:
        return {"file": site[2], "line": site[1], "function": site[0], "source": "trace"}
    frame = parse_frame_name(name)
    if frame is not None:
        return {"file": frame[2], "line": frame[1], "function": frame[0], "source": "stack"}
    return None


def user_code_of(trace: Trace, nesting: Nesting, rows: np.ndarray, weights: np.ndarray | None = None,
                 top: int = 3) -> list[CodeSite]:
    """Where in the user's code the ops `rows` ran, most time first: `{file, line, function,
    time_us, count, source}` (`trace_site_keys`). `time_us` sums `weights` (default: the ops'
    self time). [] when the trace places none. For findings about particular rows (float64
    inputs, the ops that waited on a sync), where grouping all ops of a name by line would also
    name the lines that ran the same op harmlessly."""
    if not len(rows) or not (len(trace.python) or has_line_marks(trace.events) or has_call_stacks(trace)):
        return []
    key = trace_site_keys(trace, nesting, rows)
    placed = key >= 0
    if not placed.any():
        return []
    uniq, inverse = np.unique(key[placed], return_inverse=True)
    w = nesting.self_time(rows[placed]) if weights is None else np.asarray(weights)[placed]
    time_us = np.bincount(inverse, weights=w.astype(np.float64))
    count = np.bincount(inverse)
    out = []
    for g in np.argsort(-time_us, kind="stable")[:top].tolist():
        where = describe_site(trace.events.strings[int(uniq[g])]) or {}
        out.append(CodeSite(**where, time_us=float(time_us[g]), count=int(count[g])))
    return out
