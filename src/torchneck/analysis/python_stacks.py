"""Sampled Python stacks: hotspots by user file:line, phases of the run, and op attribution.

"User code" is any file outside the Python installation, site-packages and torchneck itself;
a sample's *user line* is its deepest user frame: the line of the user's code responsible for
whatever the sample was doing (its own Python, or the library call it made).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass

import numpy as np

_LIB_ROOTS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {sys.prefix, sys.base_prefix, sys.exec_prefix}
    if p
)
_TORCHNECK_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def is_user_file(path: str) -> bool:
    """True for the user's own source files (not stdlib, site-packages, torchneck, `<frozen>`)."""
    if not path or path.startswith("<"):
        return False
    if "site-packages" in path or "dist-packages" in path:
        return False
    real = os.path.realpath(path)
    if real.startswith(_TORCHNECK_ROOT):
        return False
    return not real.startswith(_LIB_ROOTS)


@dataclass
class Samples:
    """Decoded samples.json: per sample, end time (s since start), duration, leaf and user frame."""

    frames: list[list]  # [function, file, line]
    end_s: np.ndarray
    dur_s: np.ndarray
    user_frame: np.ndarray  # frame id of the deepest user frame, -1 if none
    leaf_is_user: np.ndarray  # the sample was in the user's own Python code
    leaf_frame: np.ndarray
    start_monotonic_ns: int | None
    stacks: list[list[int]]


def load_samples(data: dict) -> Samples:
    frames = data.get("frames", [])
    user = np.array([is_user_file(f[1]) for f in frames], dtype=bool) if frames else np.zeros(0, bool)
    stacks = [s[0] for s in data.get("samples", [])]
    dur = np.array([s[1] for s in data.get("samples", [])], dtype=np.float64)
    user_frame = np.full(len(stacks), -1, dtype=np.int64)
    leaf = np.full(len(stacks), -1, dtype=np.int64)
    leaf_user = np.zeros(len(stacks), dtype=bool)
    for i, st in enumerate(stacks):
        if not st:
            continue
        leaf[i] = st[-1]
        for fid in reversed(st):
            if user[fid]:
                user_frame[i] = fid
                break
        leaf_user[i] = bool(user[st[-1]])
    return Samples(frames, np.cumsum(dur), dur, user_frame, leaf_user, leaf,
                   data.get("start_monotonic_ns"), stacks)


def hotspots(s: Samples, lo_s: float = -np.inf, hi_s: float = np.inf, top: int = 15) -> dict:
    """Where the time in [lo_s, hi_s) (seconds since sampling started) went, by user line.

    Per line: `total_s` (the line was the deepest user frame: its Python plus the library calls it
    made) and `self_s` (the sample was in that line's own Python). Also per function, and the
    share of samples in user code vs library code.
    """
    mid = s.end_s - s.dur_s / 2
    win = (mid >= lo_s) & (mid < hi_s)
    total = float(s.dur_s[win].sum())
    lines: dict[int, list[float]] = {}
    for fid, d, own in zip(s.user_frame[win].tolist(), s.dur_s[win].tolist(), s.leaf_is_user[win].tolist()):
        if fid < 0:
            continue
        acc = lines.setdefault(fid, [0.0, 0.0])
        acc[0] += d
        if own:
            acc[1] += d
    funcs: dict[tuple[str, str], list] = {}
    out_lines = []
    for fid, (tot, own) in sorted(lines.items(), key=lambda kv: -kv[1][0]):
        fn, file, line = s.frames[fid]
        f = funcs.setdefault((file, fn), [0.0, 0.0, line])
        f[0] += tot
        f[1] += own
        if len(out_lines) < top:
            out_lines.append({"file": file, "line": line, "function": fn, "total_s": tot, "self_s": own,
                              "pct": 100 * tot / total if total else 0.0,
                              "library": _library_callee(s, fid, win)})
    out_funcs = [{"file": file, "function": fn, "line": ln, "total_s": tot, "self_s": own}
                 for (file, fn), (tot, own, ln) in sorted(funcs.items(), key=lambda kv: -kv[1][0])[:top]]
    user_total = float(s.dur_s[win & (s.user_frame >= 0)].sum())
    return {
        "sampled_s": total,
        "user_code_self_s": float(s.dur_s[win & s.leaf_is_user].sum()),
        "attributed_to_user_lines_s": user_total,
        "lines": out_lines,
        "functions": out_funcs,
    }


def _library_callee(s: Samples, user_fid: int, win: np.ndarray) -> str:
    """The most common library function called from a user line (what the line spends time in)."""
    counts: dict[str, float] = {}
    for i in np.flatnonzero(win & (s.user_frame == user_fid) & ~s.leaf_is_user).tolist():
        st = s.stacks[i]
        try:
            k = st.index(user_fid)
        except ValueError:
            continue
        if k + 1 < len(st):
            fn, file, _ = s.frames[st[k + 1]]
            name = f"{fn} ({os.path.basename(file)})"
            counts[name] = counts.get(name, 0.0) + float(s.dur_s[i])
    return max(counts, key=counts.get) if counts else ""


def user_line_at(s: Samples, times_s: np.ndarray) -> np.ndarray:
    """For each time (s since sampling started), the user frame id of the sample covering it."""
    if not len(s.end_s):
        return np.full(len(times_s), -1, dtype=np.int64)
    idx = np.searchsorted(s.end_s, times_s, side="left")
    idx = np.clip(idx, 0, len(s.end_s) - 1)
    return s.user_frame[idx]
