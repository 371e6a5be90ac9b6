"""Interval arithmetic on numpy arrays of [start, end) spans, in µs."""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (starts, ends)."""
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.float64)[order]
    e = np.asarray(ends, dtype=np.float64)[order]
    running_end = np.maximum.accumulate(e)
    # A new group starts where the start is past every earlier end.
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > running_end[:-1]
    group = np.cumsum(new_group) - 1
    out_s = s[new_group]
    out_e = np.zeros(len(out_s))
    np.maximum.at(out_e, group, e)
    return out_s, out_e


def union_length(starts: np.ndarray, ends: np.ndarray, lo: float = -np.inf, hi: float = np.inf) -> float:
    """Total length covered by the intervals, clipped to [lo, hi]."""
    s, e = merge(np.clip(starts, lo, hi), np.clip(ends, lo, hi))
    return float(np.sum(e - s))


def claim_by_priority(
    spans: list[tuple[np.ndarray, np.ndarray]], lo: float, hi: float
) -> list[float]:
    """Split [lo, hi] among interval sets given in priority order: each instant goes to the
    first set covering it. Returns one length per set plus, last, the unclaimed length.

    This is how the TensorBoard plugin's step breakdown makes categories sum to step time.
    """
    points = [np.array([lo, hi])]
    deltas = [np.zeros((2, len(spans)))]
    for k, (s, e) in enumerate(spans):
        s = np.clip(s, lo, hi)
        e = np.clip(e, lo, hi)
        keep = e > s
        s, e = s[keep], e[keep]
        if not len(s):
            continue
        points.append(np.concatenate([s, e]))
        d = np.zeros((2 * len(s), len(spans)))
        d[: len(s), k] = 1
        d[len(s):, k] = -1
        deltas.append(d)
    p = np.concatenate(points)
    d = np.concatenate(deltas)
    order = np.argsort(p, kind="stable")
    p, d = p[order], d[order]
    active = np.cumsum(d, axis=0)[:-1] > 0.5  # state on each segment [p[i], p[i+1])
    seg = np.diff(p)
    out = []
    claimed = np.zeros(len(seg), dtype=bool)
    for k in range(len(spans)):
        mine = active[:, k] & ~claimed
        out.append(float(seg[mine].sum()))
        claimed |= mine
    out.append(float(seg[~claimed].sum()))
    return out
