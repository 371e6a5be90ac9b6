"""Sampled Python stacks: hotspots by user file:line, phases of the run, and op attribution.

"User code" is any file outside the Python installation, site-packages and torchneck itself;
a sample's *user line* is its deepest user frame: the line of the user's code responsible for
whatever the sample was doing (its own Python, or the library call it made).
"""

from __future__ import annotations

import functools
import importlib.util
import linecache
import os
import re
from dataclasses import dataclass

import numpy as np

from ..sites import (
    MARKER_CALL_FUNCTION,
    TOOL_FRAME,
    UNSAMPLED_FRAME,
    is_hook_file,
    is_marker_file,
    is_pass_through,
    is_torchneck_file,
    is_user_file,
)


@dataclass
class Samples:
    """Decoded samples.json: per sample, end time (s since start), duration, leaf and user frame."""

    frames: list[list]  # [function, file, line]
    end_s: np.ndarray  # the instant of each sample
    dur_s: np.ndarray  # the wall time each sample stands for: since the previous sample
    user_frame: np.ndarray  # frame id of the deepest user frame, -1 if none
    leaf_is_user: np.ndarray  # the sample was in the user's own Python code
    leaf_frame: np.ndarray
    tool: np.ndarray  # torchneck's own code was running below the user frame (its step hooks)
    importing: np.ndarray  # Python was importing a module (one-time cost, not the line's work)
    compiling: np.ndarray  # torch.compile was compiling (dynamo's convert_frame on the stack)
    loading: np.ndarray  # inside a DataLoader iterator (torch/utils/data on the stack)
    start_monotonic_ns: int | None
    stacks: list[list[int]]
    cpu_s: np.ndarray | None = None  # on-CPU seconds of each sample's interval (NaN: unknown)
    runq_s: np.ndarray | None = None  # seconds ready to run, another process on the CPU (NaN: unknown)
    unsampled: np.ndarray | None = None  # an interval the sampler was paused (the script's own profiler)
    stack_capture: np.ndarray | None = None  # inside a Python stack capture that torch's C++ made (see below)
    thread: np.ndarray | None = None  # native id of the thread a stand-in sample saw (0: the sampled thread)
    native_id: int | None = None  # the sampled thread's native id: its ops' tid in the trace
    rebuilding: np.ndarray | None = None  # a parametrized weight being recomputed on its read (see below)

    def waiting_s(self) -> np.ndarray:
        """Per sample, the part of its interval the thread was off the CPU (blocked: sleep, I/O,
        a lock, a queue); 0 where the CPU time is unknown."""
        if self.cpu_s is None or not len(self.cpu_s):
            return np.zeros(len(self.dur_s))
        runq = np.nan_to_num(self.runq_s) if self.runq_s is not None else 0.0
        off_cpu = np.clip(self.dur_s - np.nan_to_num(self.cpu_s) - runq, 0.0, None)
        return np.where(np.isnan(self.cpu_s), 0.0, off_cpu)


def load_samples(data: dict) -> Samples:
    """Decode samples.json: format 2 (`stacks` table, samples as [stack id, seconds]) or the
    earlier format 1 (samples as [frame ids, seconds]). Each distinct stack is classified once."""
    frames = data.get("frames", [])
    raw = data.get("samples", [])
    if "stacks" in data:
        table = data["stacks"]
        stack_of = np.array([s[0] for s in raw], dtype=np.int64)
    else:
        table = [s[0] for s in raw]
        stack_of = np.arange(len(raw), dtype=np.int64)
    per_stack = _classify_stacks(frames, table)
    dur = np.array([s[1] for s in raw], dtype=np.float64)
    # format 3: the thread's CPU seconds over each sample's interval (NaN when unknown)
    cpu = np.array([s[2] if len(s) > 2 and s[2] >= 0 else np.nan for s in raw], dtype=np.float64)
    # format 4: seconds the thread was ready to run while another process had the CPU
    runq = _runq_to_its_interval(dur, cpu, np.array([s[3] if len(s) > 3 and s[3] >= 0 else np.nan for s in raw],
                                                    dtype=np.float64))
    # format 5: a sample the watcher took of another thread, while the main thread waited on it, names it
    thread = np.array([s[4] if len(s) > 4 and isinstance(s[4], int) else 0 for s in raw], dtype=np.int64)
    user_frame, leaf, leaf_user, tool, importing, compiling, loading, unsampled, capture, rebuilding = (
        col[stack_of] if len(stack_of) else col[:0] for col in per_stack)
    return Samples(frames, np.cumsum(dur), dur, user_frame, leaf_user, leaf, tool, importing, compiling, loading,
                   data.get("start_monotonic_ns"), [table[k] for k in stack_of.tolist()], cpu, runq, unsampled,
                   capture, thread, data.get("native_id") if isinstance(data.get("native_id"), int) else None,
                   rebuilding)


def _runq_to_its_interval(dur: np.ndarray, cpu: np.ndarray, runq: np.ndarray) -> np.ndarray:
    """Give each sample back the run-queue time that arrived in a later sample's reading.

    Linux adds a wait in the run queue to the thread's schedstat when the thread gets the CPU
    back, so on a loaded machine a sample taken after a long C call (NumPy's argwhere, a matmul)
    shows little of the wait it was preempted for, and the next samples show more than their
    interval holds (CPU + ready > wall). Left so, the long call's interval looks like time off
    the CPU not ready to run (a wait on I/O or a lock), and a computing line was taken for a
    waiting one. Any excess is moved back, one sample at a time, to the samples before it."""
    if not len(runq) or not np.isfinite(runq).any():
        return runq
    out = runq.copy()
    used = np.nan_to_num(cpu)
    carry = 0.0
    for i in range(len(out) - 1, -1, -1):  # backwards: an excess flows to the samples before it
        if not np.isfinite(out[i]):
            carry = 0.0
            continue
        out[i] += carry
        room = max(0.0, dur[i] - used[i])
        carry = max(0.0, out[i] - room)
        out[i] -= carry
    if carry > 0.0 and np.isfinite(out[0]):
        out[0] += carry  # nothing before the first sample: it keeps what is left
    return out


def _frame_mask(frames: list[list], predicate) -> np.ndarray:
    return np.array([bool(predicate(f)) for f in frames], dtype=bool) if frames else np.zeros(0, bool)


def _classify_stacks(frames: list[list], stacks: list[list[int]]) -> tuple[np.ndarray, ...]:
    """Per stack: deepest user frame, leaf frame, leaf is user code, torchneck overhead below the
    user frame (or a sample of torchneck's own work), importing, compiling, inside DataLoader
    iteration, an interval the sampler did not sample, inside a stack capture torch's C++ made,
    rebuilding a parametrized weight."""
    user = _frame_mask(frames, lambda f: is_user_file(f[1]))
    ours = _frame_mask(frames, lambda f: is_hook_file(f[1]))
    through = _frame_mask(frames, lambda f: is_pass_through(f[1], f[0]))  # a wrapper: below it, the program's call
    # The line marker's frames: the user's call below `call_marked`, torchneck's overhead otherwise.
    marker = _frame_mask(frames, lambda f: is_marker_file(f[1]))
    user_call = marker & _frame_mask(frames, lambda f: f[0] == MARKER_CALL_FUNCTION)
    imp = _frame_mask(frames, lambda f: f[1].startswith("<frozen importlib"))
    comp = _frame_mask(frames, lambda f: f[1].replace(os.sep, "/").endswith(_CONVERT_FRAME))
    in_data = _frame_mask(frames, lambda f: "/torch/utils/data/" in f[1].replace(os.sep, "/"))
    capturing = _frame_mask(frames, _is_stack_capture)
    rebuild = _frame_mask(frames, _is_parametrization_rebuild)
    n = len(stacks)
    user_frame = np.full(n, -1, dtype=np.int64)
    leaf = np.full(n, -1, dtype=np.int64)
    leaf_user, tool, importing, compiling, loading, unsampled, capture, rebuilding = (
        np.zeros(n, dtype=bool) for _ in range(8))
    for i, st in enumerate(stacks):
        if not st:
            continue
        if len(st) == 1 and frames[st[0]][0] in (TOOL_FRAME, UNSAMPLED_FRAME):  # synthetic samples
            tool[i] = frames[st[0]][0] == TOOL_FRAME
            unsampled[i] = not tool[i]
            continue
        ids = np.asarray(st, dtype=np.int64)
        loading[i] = in_data[ids].any()
        importing[i] = imp[ids].any()
        compiling[i] = comp[ids].any()
        rebuilding[i] = rebuild[ids].any()
        captures = np.flatnonzero(capturing[ids])
        if len(captures):  # the outermost capture frame: its caller made the call
            k = int(captures[0])
            capture[i] = k == 0 or not _calls_stack_capture(*frames[st[k - 1]][1:3])
        leaf[i] = st[-1]
        leaf_user[i] = user[st[-1]]
        mine = np.flatnonzero(user[ids])
        if len(mine):
            depth = int(mine[-1])
            user_frame[i] = st[depth]
            below = ids[depth + 1:]
            tool[i] = ((ours & ~through)[below].any() or bool(ours[st[-1]])
                       or (marker[below].any() and not user_call[below].any()))
    return user_frame, leaf, leaf_user, tool, importing, compiling, loading, unsampled, capture, rebuilding


def _is_parametrization_rebuild(frame: list) -> bool:
    """torch.nn.utils.parametrize's property getter: reading a parametrized weight (a LoRA
    adapter, weight_norm) recomputes it from its parameters, every time, wherever it is read (a
    line's own read, or a module's forward under another line's call)."""
    return frame[0].endswith("get_parametrized") and os.path.basename(frame[1]) == "parametrize.py"


_STACK_CAPTURES = ("format_stack", "extract_stack")
"""Functions that capture the Python stack, in a `traceback.py`: Python's own module, or
torch.fx's (autograd's anomaly mode calls `torch.fx.traceback.format_stack` from C++ for every
graph node a forward op makes; older torch called `traceback.format_stack`)."""


def _is_stack_capture(frame: list) -> bool:
    return frame[0] in _STACK_CAPTURES and os.path.basename(frame[1]) == "traceback.py"


@functools.lru_cache(maxsize=4096)
def _calls_stack_capture(file: str, line: int) -> bool:
    """The source line calls a stack capture itself (torch.xpu's lazy-init queue does, once).
    When it does not, the Python frame was running a C++ call (a torch op) when the capture
    started: C++ made it. A line that cannot be read (the run was recorded on another machine)
    shows no such call, and is taken for C++'s."""
    text = linecache.getline(file, line) if isinstance(line, int) else ""
    return any(f"{name}(" in text for name in _STACK_CAPTURES)


_CONVERT_FRAME = "torch/_dynamo/convert_frame.py"
"""Dynamo compiles a frame under this module (tracing, AOT autograd, inductor): a sample with
it on the stack is compile time."""


THREAD_WAIT_FILES = ("threading.py", "queue.py", os.path.join("concurrent", "futures", "_base.py"))
"""Where a thread waits on another (a Condition, a queue, a future): the sampler's own list
(`capture/sampler.py: _WAIT_FILES`), by file name, for samples recorded on another machine."""


def hotspots(s: Samples, lo_s: float = -np.inf, hi_s: float = np.inf, top: int = 15,
             op_s: np.ndarray | None = None, only: np.ndarray | None = None) -> dict:
    """Where the time in [lo_s, hi_s) (seconds since sampling started) went, by user line.

    Per line: `total_s` (the line was the deepest user frame: its Python plus the library calls it
    made), `self_s` (the sample was in that line's own Python, not inside a torch op), when
    `op_s` gives each sample's seconds inside torch ops, `outside_ops_s` (the line's time outside
    torch ops: its Python plus non-torch libraries such as NumPy), and, when the samples carry
    the thread's CPU time, `waiting_s` (the part of that spent off the CPU: sleeping, blocked on
    I/O, a lock or a queue). `waits_on_thread`: what the line calls waits on another thread (a
    future's result, a join, a queue), whose ops its samples may take (`run.sample_op_seconds`).
    Also per function, and the share of samples in user code vs library code.

    `stack_capture_s` is the time inside Python stack captures that torch's C++ made (anomaly
    mode records the forward stack of every autograd node): work the script did not ask for.
    `parametrized_s`: the time spent recomputing parametrized weights on their reads, whichever
    line read them (a line's samples keep one library callee each, so a rebuild under another
    line's module call is in no line's callee).

    Time the thread was ready to run while other processes had the CPU (`ready_s`, known on
    Linux) is left out of every figure but `ready_s` itself: it is the machine's load, not the
    code's cost, and it lands on whichever line happened to run (on a loaded machine, a line
    running one cheap call collected a third of a run's samples). Time inside ops is scaled
    down alike: a trace's op spans are wall-clock spans too.
    """
    mid = s.end_s - s.dur_s / 2
    in_range = (mid >= lo_s) & (mid < hi_s)
    # torchneck's own hooks are not the user's time; imports and compiling are one-time costs
    # that the compile and start-up findings report: neither is the line's steady work.
    win = in_range & ~s.tool & ~s.importing & ~s.compiling
    if s.unsampled is not None:
        win &= ~s.unsampled
    if only is not None:
        win &= only
    ready = (np.clip(np.nan_to_num(s.runq_s), 0.0, s.dur_s) if s.runq_s is not None and len(s.runq_s) == len(s.dur_s)
             else np.zeros(len(s.dur_s)))
    dur = s.dur_s - ready  # the script's own time: running, or blocked
    total = float(dur[win].sum())
    known = op_s is not None
    if op_s is not None:
        share = np.divide(dur, s.dur_s, out=np.zeros(len(dur)), where=s.dur_s > 0)
        outside = np.maximum(dur - op_s * share, 0.0)
    else:
        outside = dur
    own_s = np.where(s.leaf_is_user, outside, 0.0)
    waiting = np.minimum(s.waiting_s(), outside)  # a wait is never inside an op's own CPU time
    lines: dict[int, list[float]] = {}
    for fid, d, own, out, wait, rq, end in zip(s.user_frame[win].tolist(), dur[win].tolist(), own_s[win].tolist(),
                                               outside[win].tolist(), waiting[win].tolist(), ready[win].tolist(),
                                               s.end_s[win].tolist()):
        if fid < 0:
            continue
        acc = lines.setdefault(fid, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        acc[0] += d
        acc[1] += own
        acc[2] += out
        acc[3] += wait
        acc[4] += rq
        acc[5] = end  # the line's last sample (in time order)
    funcs: dict[tuple[str, str], list] = {}
    out_lines: list[dict] = []
    cpu_known = s.cpu_s is not None and bool(np.isfinite(s.cpu_s).any())
    runq_known = s.runq_s is not None and bool(np.isfinite(s.runq_s).any())
    for fid, (tot, own, out, wait, rq, last) in sorted(lines.items(), key=lambda kv: -kv[1][0]):
        fn, file, line = s.frames[fid]
        f = funcs.setdefault((file, fn), [0.0, 0.0, line])
        f[0] += tot
        f[1] += own
        if len(out_lines) < top:
            # what the line calls while outside ops; when no sample was mostly outside them (a model
            # call's module machinery spread thin between its ops), what it calls at all
            callee, callee_file = (_library_callee(s, fid, win & (outside > 0.5 * s.dur_s))
                                   or _library_callee(s, fid, win) or ("", ""))
            entry = {"file": file, "line": line, "function": fn, "total_s": tot, "self_s": own,
                     "pct": 100 * tot / total if total else 0.0, "library": callee,
                     "library_is_torch": _is_torch_file(callee_file), "last_s": last}
            if callee_file.endswith(THREAD_WAIT_FILES):  # its time is another thread's work
                entry["waits_on_thread"] = True
            callers = _user_callers(s, fid, win)
            if callers:
                entry["callers"] = callers
            if known:
                entry["outside_ops_s"] = out
            if cpu_known:
                entry["waiting_s"] = wait  # off the CPU: blocked, not computing
            if runq_known:
                entry["ready_s"] = rq  # ready to run while another process had the CPU (a busy machine)
            out_lines.append(entry)
    out_funcs = [{"file": file, "function": fn, "line": ln, "total_s": tot, "self_s": own}
                 for (file, fn), (tot, own, ln) in sorted(funcs.items(), key=lambda kv: -kv[1][0])[:top]]
    user_total = float(dur[win & (s.user_frame >= 0)].sum())
    return {
        "inclusive_lines": _inclusive_lines(s, win, dur, INCLUSIVE_LINES_KEPT),
        "sampled_s": total,
        "torchneck_hooks_s": float(s.dur_s[in_range & s.tool].sum()),
        "importing_s": float(s.dur_s[in_range & s.importing].sum()),
        "compiling_s": float(s.dur_s[in_range & s.compiling & ~s.importing].sum()),
        "unsampled_s": float(s.dur_s[in_range & s.unsampled].sum()) if s.unsampled is not None else 0.0,
        "user_code_self_s": float(own_s[win].sum()),
        "in_torch_ops_s": float((dur - outside)[win].sum()) if known else None,
        "ready_s": float(ready[win].sum()),
        "stack_capture_s": float(dur[win & s.stack_capture].sum()) if s.stack_capture is not None else 0.0,
        "parametrized_s": float(dur[win & s.rebuilding].sum()) if s.rebuilding is not None else 0.0,
        "attributed_to_user_lines_s": user_total,
        "lines": out_lines,
        "functions": out_funcs,
    }


_TORCH_PACKAGE = re.compile(r"/(?:site|dist)-packages/torch/")


@functools.lru_cache(maxsize=1)
def _local_torch_dir() -> str | None:
    """This machine's torch package folder, located without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return os.path.realpath(os.path.dirname(spec.origin)) + os.sep


@functools.lru_cache(maxsize=65536)
def _is_torch_file(path: str) -> bool:
    """A file of the torch package: under an installed `.../site-packages/torch/`, or under this
    machine's torch (a source build). Not any path with a `torch` folder in it: a virtualenv at
    /opt/torch/.venv holds numpy too."""
    if not path or is_user_file(path):
        return False
    if _TORCH_PACKAGE.search(path.replace(os.sep, "/")):
        return True
    local = _local_torch_dir()
    return local is not None and os.path.realpath(path).startswith(local)


INCLUSIVE_LINES_KEPT = 50
"""Lines kept by inclusive time: the outer frames (the script's main, a trainer's fit) come
first with nearly all of it, so a call site a dozen frames down still needs a place."""


def _inclusive_lines(s: Samples, win: np.ndarray, dur: np.ndarray, top: int) -> list[dict]:
    """The user's lines by the time spent in them and everything they called (every user line on
    a sample's stack, not only the deepest): where a loop calling the model spends its time, the
    model's own lines included. Summed per distinct stack, so a long run costs its few hundred
    stacks, not its samples."""
    per_stack: dict[tuple[int, ...], float] = {}
    for i, d in zip(np.flatnonzero(win).tolist(), dur[win].tolist()):
        key = tuple(s.stacks[i])
        per_stack[key] = per_stack.get(key, 0.0) + d
    place: dict[int, tuple[str, int] | None] = {}  # frame -> (file, line) of the user's, else None
    first: dict[tuple[str, int], int] = {}  # a place's outermost frame, for its function's name
    spent: dict[tuple[str, int], float] = {}
    for stack, d in per_stack.items():
        seen = set()
        for fid in stack:
            if fid not in place:
                fn, file, line = s.frames[fid]
                mine = bool(file) and is_user_file(file) and not _LIBRARY_PATH.search(file)
                place[fid] = (file, line) if mine else None
            at = place[fid]
            if at is not None and at not in seen:  # a comprehension's frame and the line holding it: once
                seen.add(at)
                first.setdefault(at, fid)
                spent[at] = spent.get(at, 0.0) + d
    out = []
    for at, total in sorted(spent.items(), key=lambda kv: -kv[1])[:top]:
        out.append({"file": at[0], "line": at[1], "function": s.frames[first[at]][0], "total_s": total})
    return out


CALLER_SHARE = 0.5
"""A caller is named when at least half of the line's time came through it: one call path, not
one of many callers of a shared helper."""
CALLERS_KEPT = 4
"""User frames named up the call path of a hot line: the line that calls the helper (where a fix
often goes: tokenize once, save less often) and those above it, up to the loop that repeats the
call (a server's `handle(req)` calling `_get_model()` calling `_load_model()` per request)."""


_LIBRARY_PATH = re.compile(r"[/\\](lib|Lib)[/\\]python\d[^/\\]*[/\\]|[/\\](site|dist)-packages[/\\]")
"""A Python installation's library, recognised by path when the run was recorded on another
machine (its stdlib is not this one's): `contextlib` is not the user's caller."""


def _user_callers(s: Samples, user_fid: int, win: np.ndarray) -> list[dict]:
    """The user's lines that called a hot line, innermost first, while one call path carries most
    of its time: the hot line is where time is spent, a caller is often where the fix goes
    (a tokenizer's inner loop is hot; the Dataset line that tokenizes every epoch is the cause)."""
    rows = np.flatnonzero(win & (s.user_frame == user_fid))
    if not len(rows):
        return []
    weight = s.dur_s[rows]
    total = float(weight.sum())
    paths = []  # per sample: the user frames above the hot line, innermost first
    hot_function, hot_file, hot_line = s.frames[user_fid]
    for i in rows.tolist():
        st = s.stacks[i]
        k = len(st) - 1 - st[::-1].index(user_fid) if user_fid in st else -1
        path: list[int] = []
        place = (hot_file, hot_line)
        for f in reversed(st[:max(k, 0)]):
            function, file, line = s.frames[f]
            if not is_user_file(file) or _LIBRARY_PATH.search(file):
                continue
            if (file, line) == place:
                continue  # a comprehension's frame and the line holding it: one place in the code
            if (function, file) == (hot_function, hot_file):
                continue  # the hot function calling itself: the caller is the line that started the recursion
            place = (file, line)
            path.append(f)
            if len(path) == CALLERS_KEPT:
                break
        paths.append(path)
    out: list[dict] = []
    for depth in range(CALLERS_KEPT):
        by_frame: dict[int, float] = {}
        for path, w in zip(paths, weight.tolist()):
            if len(path) > depth and all(path[d] == out_fid for d, out_fid in enumerate(_fids(out))):
                by_frame[path[depth]] = by_frame.get(path[depth], 0.0) + w
        if not by_frame:
            break
        fid, w = max(by_frame.items(), key=lambda kv: kv[1])
        if total <= 0 or w / total < CALLER_SHARE:
            break
        fn, file, line = s.frames[fid]
        out.append({"file": file, "line": line, "function": fn, "share": w / total, "_fid": fid})
    for c in out:
        del c["_fid"]
    return out


def _fids(callers: list[dict]) -> list[int]:
    return [c["_fid"] for c in callers]


def _library_callee(s: Samples, user_fid: int, win: np.ndarray) -> tuple[str, str] | None:
    """The most common library function called from a user line (what the line spends time in)
    and its file; None when no sample in `win` was inside a library."""
    counts: dict[str, float] = {}
    files: dict[str, str] = {}
    for i in np.flatnonzero(win & (s.user_frame == user_fid) & ~s.leaf_is_user).tolist():
        st = s.stacks[i]
        try:
            k = st.index(user_fid)
        except ValueError:
            continue
        k += 1
        while k < len(st) and is_torchneck_file(s.frames[st[k]][1]):
            k += 1  # the line marker's wrapper is not what the line calls
        if k < len(st):
            fn, file, _ = s.frames[st[k]]
            name = f"{fn} ({os.path.basename(file)})"
            counts[name] = counts.get(name, 0.0) + float(s.dur_s[i])
            files[name] = file
    if not counts:
        return None
    best = max(counts, key=lambda name: counts[name])
    return best, files[best]


def sample_index_at(s: Samples, times_s: np.ndarray) -> np.ndarray:
    """For each time (s since sampling started), the index of the sample covering it (the last
    one for times past the end); the samples must not be empty."""
    return np.clip(np.searchsorted(s.end_s, times_s, side="left"), 0, len(s.end_s) - 1)

