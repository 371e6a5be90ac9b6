"""Ids: every string, thread and (shapes, types) pair of a trace numbered once.

A slice is decoded with its own string table (`Interner`); its (pid, tid) pairs and its rows'
(shapes, types) pairs are found as distinct keys there (`thread_pairs`, `arg_pairs`), so that the
merging thread maps only the few distinct values of each slice onto the trace's global numbering
(`GlobalIds`), never a value per row. (Correlation ids, the links between a GPU event and the
call that launched it, are resolved in `launches.py`.)
"""

from __future__ import annotations

import numpy as np

from .table import Threads


class Interner:
    """Slice-local string table. Ids for a whole column are found with C-level map calls."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.index: dict = {}

    def ids(self, values: list) -> np.ndarray:
        index = self.index
        for v in dict.fromkeys(values):
            if v not in index:
                index[v] = len(self.strings)
                self.strings.append(v if isinstance(v, str) else ("" if v is None else str(v)))
        return np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))

    def pair_ids(self, pairs: list) -> tuple[np.ndarray, np.ndarray]:
        """Ids of both halves of (pid, tid) pairs, hashing each pair once: a slice holds few
        distinct pairs, so the halves are interned once per distinct pair."""
        local: dict = {}
        for pair in dict.fromkeys(pairs):
            local[pair] = len(local)
        which = np.fromiter(map(local.__getitem__, pairs), dtype=np.int32, count=len(pairs))
        firsts = self.ids([p for p, _ in local])
        seconds = self.ids([t for _, t in local])
        return firsts[which], seconds[which]

    def raw_ids(self, raws: list) -> np.ndarray:
        """Ids of raw JSON values (msgspec.Raw, unhashable): keyed by their bytes, decoded to
        text once per distinct value; an absent (empty) value gets -1."""
        keys = list(map(bytes, raws))
        index = self.index
        for k in dict.fromkeys(keys):
            if k not in index:
                index[k] = len(self.strings) if k else -1
                if k:
                    self.strings.append(k.decode("utf-8", "replace"))
        return np.fromiter(map(index.__getitem__, keys), dtype=np.int32, count=len(keys))


def distinct_arg_pairs(shapes: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`distinct_threads` of the rows' (shapes, types) slice-local string ids, each + 1 (absent: 0)."""
    return distinct_threads(shapes + 1, types + 1)


def distinct_threads(pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct pid << 32 | tid of slice-local string ids, per row the index of its pair).
    A sort and a binary search: 2.5x faster than `np.unique(return_inverse=True)` here."""
    if not len(pid):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
    keys = pid.astype(np.int64) << 32 | tid.astype(np.int64)
    uniq = np.sort(keys)
    first = np.empty(len(uniq), dtype=bool)
    first[0] = True
    np.not_equal(uniq[1:], uniq[:-1], out=first[1:])
    uniq = uniq[first]
    return uniq, np.searchsorted(uniq, keys).astype(np.int32)


class GlobalIds:
    """The trace's string table, its threads (one per distinct (pid, tid)), and its args ids (one
    per distinct (shapes, types) pair), numbered as first seen, filled slice by slice."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.index: dict[str, int] = {}
        self.thread_index: dict[tuple[int, int], int] = {}
        self.threads = Threads()
        # (shapes id + 1) << 32 | (types id + 1) of each args id so far, sorted, and the ids
        self.arg_keys = np.empty(0, dtype=np.int64)
        self.arg_key_ids = np.empty(0, dtype=np.int32)

    def strings_of(self, local: list[str]) -> np.ndarray:
        """Global string id of each slice-local string, with -1 appended (for "absent")."""
        ids = list(map(self.index.get, local))  # nearly all known after the first slices: one C loop
        if None in ids:
            for i, g in enumerate(ids):
                if g is None:
                    s = local[i]
                    g = self.index.get(s)  # a repeat within this slice
                    if g is None:
                        g = self.index[s] = len(self.strings)
                        self.strings.append(s)
                    ids[i] = g
        ids.append(-1)
        return np.array(ids, dtype=np.int32)

    def threads_of(self, pairs: tuple[np.ndarray, np.ndarray], remap: np.ndarray) -> np.ndarray:
        """Global thread ids per row from a slice's (pid, tid) pairs of local string ids."""
        uniq, inverse = pairs
        ids = np.empty(len(uniq), dtype=np.int32)
        for i, key in enumerate(uniq.tolist()):
            p, t = int(remap[key >> 32]), int(remap[key & 0xFFFFFFFF])
            found = self.thread_index.get((p, t))
            if found is None:
                found = self.thread_index[(p, t)] = len(self.threads.pid)
                self.threads.pid.append(self.strings[p])
                self.threads.tid.append(self.strings[t])
            ids[i] = found
        return ids[inverse]

    def args_of(self, pairs: tuple[np.ndarray, np.ndarray], remap: np.ndarray) -> np.ndarray:
        """Global args ids per row from a slice's distinct (shapes, types) pairs of local string
        ids + 1: -1 where a row has neither, else the pair's args id (numbered as first seen).
        Vectorised: a slice holds ~1500 distinct pairs in a trace recorded with shapes."""
        uniq, inverse = pairs
        shapes = remap[(uniq >> 32) - 1].astype(np.int64)  # local -1 picks remap's -1
        types = remap[(uniq & 0xFFFFFFFF) - 1].astype(np.int64)
        keys = (shapes + 1) << 32 | (types + 1)
        known = self.arg_keys
        at = np.minimum(np.searchsorted(known, keys), max(len(known) - 1, 0))
        found = (known[at] == keys) if len(known) else np.zeros(len(keys), dtype=bool)
        ids = np.where(found, self.arg_key_ids[at] if len(known) else 0, -1).astype(np.int32)
        new = ~found & (keys != 0)  # pairs not seen before; 0 is (-1, -1): neither
        if new.any():
            ids[new] = np.arange(len(known), len(known) + int(new.sum()), dtype=np.int32)
            merged = np.concatenate([known, keys[new]])
            order = np.argsort(merged, kind="stable")
            self.arg_keys = merged[order]
            self.arg_key_ids = np.concatenate([self.arg_key_ids, ids[new]])[order]
        return ids[inverse]

    def arg_pair_table(self) -> np.ndarray:
        """(k + 1, 2) int32: each args id's (shapes, types) string ids, and (-1, -1) last, which
        args -1 picks."""
        table = np.full((len(self.arg_keys) + 1, 2), -1, dtype=np.int32)
        table[self.arg_key_ids, 0] = (self.arg_keys >> 32) - 1
        table[self.arg_key_ids, 1] = (self.arg_keys & 0xFFFFFFFF) - 1
        return table
