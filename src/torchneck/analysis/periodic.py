"""Steps made slow by work done only on some of them (an evaluation, a checkpoint, a report every
N steps), read from the step clock and the samples of the steps outside the profiled window.

A profiled window of a few steps usually falls between two such passes and sees none of them;
the step clock sees every step. The steps several times the median are the slow ones; the user
line that runs in them and (almost) never in the others, outermost on the stack, is where the
periodic work is entered: the call to make less often or cheaper.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..sites import is_user_file
from .python_stacks import Samples

STEP_CLOCKS = ("optimizer", "dataloader")
"""Clocks whose steps do the same work each: a training step, a batch. A model call (the module
clock) may be a prompt's first pass or a token's: a server's calls differ by design."""
SLOW_FACTOR = 3.0
"""A step three times the median is slow: steps vary by tens of percent (a larger batch, the
machine's load), work added to a step doubles it at least."""
MIN_STEPS = 12
"""Steps outside the profiled window needed: two slow ones among ten or more normal ones."""
MIN_SLOW = 2
"""One slow step is a hiccup (a page fault storm, a first use): work done every N steps repeats."""
MAX_SLOW_SHARE = 0.5
"""Slow steps are the minority: when most steps are slow, the fast ones are the exception."""
EXCLUSIVE_SHARE = 0.1
"""The entry line's share of the normal steps' sampled time is a tenth of its share of the slow
steps' at most: the line of the periodic call itself, not a line of every step (a step of 0.4 ms
is mostly not sampled at all: counting the steps it was seen in would call any line exclusive)."""
RECURRING_SHARE = 0.5
"""...and it is sampled in half the slow steps at least: the same work each time, not the line a
hiccup (the machine's, the collector's) happened to stop at."""
ENTRY_SHARE = 0.8
"""Lines holding at least 80 % of the slow steps' excess are the periodic call and what it runs;
the outermost of them is where it is entered, or the call under the `if` that decides when (a
callback called every step, cheap but for that `if`, is outermost: the rule reads the source)."""
MAX_ENTRIES = 6
"""Those lines, outermost first, that the rule chooses from."""


def periodic_steps(samples: Samples, phases: dict) -> dict | None:
    """The slow steps (at least `SLOW_FACTOR` times the median of the steps outside the profiled
    window) and the user lines running (almost) only in them, holding most of their sampled time,
    outermost first: the work that makes them slow and its way in. None when the steps are too
    few, none or most of them are slow, or no line runs only in them."""
    step_s = np.asarray(phases.get("step_s") or [], dtype=np.float64)
    if len(step_s) < MIN_STEPS or phases.get("clock") not in STEP_CLOCKS:
        return None
    starts = phases["first_tick_offset_s"] + np.concatenate([[0.0], np.cumsum(step_s)])
    w0, w1 = phases["window_offsets_s"]
    steady = phases.get("steady_from_offset_s", phases["first_tick_offset_s"])
    outside = ((starts[1:] <= w0) | (starts[:-1] >= w1)) & (starts[:-1] >= steady)
    outside[0] = False  # the first step holds one-time work (lazy initialisation)
    if outside.sum() < MIN_STEPS:
        return None
    median = float(np.median(step_s[outside]))
    slow = outside & (step_s >= SLOW_FACTOR * median)
    n_slow = int(slow.sum())
    if n_slow < MIN_SLOW or n_slow > MAX_SLOW_SHARE * outside.sum():
        return None
    # each sample's step, by the instant its stack was seen (a long interval, a call the signal
    # waited for, may begin in the step before: the periodic call right after a tick)
    shift = (samples.start_monotonic_ns - phases["started_monotonic_ns"]) / 1e9 \
        if samples.start_monotonic_ns is not None and phases.get("started_monotonic_ns") is not None else 0.0
    step_of = np.searchsorted(starts, samples.end_s + shift, side="right") - 1
    kept = (step_of >= 0) & (step_of < len(step_s)) & ~samples.tool & ~samples.importing & ~samples.compiling
    kept[kept] &= outside[step_of[kept]]
    in_slow: dict[tuple[str, int], float] = defaultdict(float)
    in_normal: dict[tuple[str, int], float] = defaultdict(float)
    slow_with: dict[tuple[str, int], set[int]] = defaultdict(set)  # slow steps sampled at the line
    depth: dict[tuple[str, int], list[int]] = defaultdict(list)
    names: dict[tuple[str, int], str] = {}
    user = [is_user_file(f[1]) for f in samples.frames]
    per_stack: dict[tuple[tuple[int, ...], int], float] = defaultdict(float)  # (stack, step): its few, not each sample
    for k, step, dur in zip(np.flatnonzero(kept).tolist(), step_of[kept].tolist(), samples.dur_s[kept].tolist()):
        per_stack[(tuple(samples.stacks[k]), step)] += dur
    for (stack, step), dur in per_stack.items():
        seen = set()
        for d, fid in enumerate(stack):
            function, file, line = samples.frames[fid][:3]
            key = (file, int(line))
            if key in seen or not user[fid]:
                continue
            seen.add(key)
            names[key] = function
            if slow[step]:
                in_slow[key] += dur
                slow_with[key].add(step)
                depth[key].append(d)
            else:
                in_normal[key] += dur
    excess = float((step_s[slow] - median).sum())
    on_slow = slow[step_of[kept]]
    slow_total, normal_total = float(samples.dur_s[kept][on_slow].sum()), float(samples.dur_s[kept][~on_slow].sum())
    candidates = {key: s for key, s in in_slow.items() if len(slow_with[key]) >= RECURRING_SHARE * n_slow
                  and in_normal.get(key, 0.0) / max(normal_total, 1e-9) <= EXCLUSIVE_SHARE * s / slow_total}
    if not candidates or excess <= 0:
        return None
    best = max(candidates.values())
    entries = sorted((key for key, s in candidates.items() if s >= ENTRY_SHARE * best),
                     key=lambda key: (float(np.median(depth[key])), -candidates[key]))[:MAX_ENTRIES]
    slow_steps = np.flatnonzero(slow)
    gaps = np.diff(slow_steps)
    every = int(np.bincount(gaps).argmax()) if len(gaps) else None
    return {"lines": [{"file": file, "line": line, "function": names[(file, line)],
                       "slow_s": round(candidates[(file, line)], 7)} for file, line in entries],
            "steps": int(outside.sum()), "slow_steps": n_slow,
            "every": every if every and (gaps == every).mean() >= 0.5 else None,
            "median_step_s": round(median, 7), "slow_step_s": round(float(np.median(step_s[slow])), 7),
            "excess_s": round(excess, 7), "steps_s": round(float(step_s[outside].sum()), 7)}

