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
    first = np.flatnonzero(new_group)
    return s[first], np.maximum.reduceat(e, first)


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
    # Set k claims what it adds to the union of the sets before it.
    covered_s, covered_e = np.empty(0), np.empty(0)
    covered_len = 0.0
    out = []
    for s, e in spans:
        s = np.clip(s, lo, hi)
        e = np.clip(e, lo, hi)
        keep = e > s
        if keep.any():
            covered_s, covered_e = merge(np.concatenate([covered_s, s[keep]]), np.concatenate([covered_e, e[keep]]))
        length = float(np.sum(covered_e - covered_s))
        out.append(max(length - covered_len, 0.0))
        covered_len = length
    out.append(max(hi - lo, 0.0) - covered_len)
    return out
