"""Which runtime call launched each GPU event: the link the loader stores instead of correlation ids.

A GPU event (kernel, memcpy, memset) and the runtime or driver call that enqueued it
(`cudaLaunchKernel`, `cuLaunchKernel`, `cudaMemcpyAsync`, `cudaGraphLaunch`, their HIP twins)
carry the same `correlation` id. Analyses only ever follow that link, so the loader resolves it
once into `EventTable.launcher` (kept for GPU events only) and lets the ids go: a 4-byte column
over every event (28 MB at 3 GB) for what is ~12 bytes per GPU event as a link.
"""

from __future__ import annotations

import numpy as np

from .table import GPU_CATEGORIES, Cat, SparseColumn, in_categories

BLOCK = 1 << 16
"""Rows read at once: every temporary stays a block long, not a column long."""


def launcher_column(cat: np.ndarray, correlation: np.ndarray) -> SparseColumn:
    """Per row: for a GPU event, the row of the runtime/driver call with its correlation id
    (the last such call, i.e. the largest row, if an id repeats), else -1.

    Built from the GPU events' side: their distinct ids, sorted, get their last call in one
    pass over the table a block at a time (sorting the ~3 calls per GPU event by id instead
    cost ~45 MB of temporaries at 3 GB)."""
    n = len(cat)
    index = np.int32 if n < 2**31 else np.int64
    gpu = np.concatenate([np.flatnonzero(in_categories(cat[a:a + BLOCK], GPU_CATEGORIES)).astype(index) + a
                          for a in range(0, n, BLOCK)] or [np.empty(0, dtype=index)])
    keys = correlation[gpu]
    keys = keys[keys >= 0]
    keys.sort()  # in place; then the distinct ids
    if len(keys):
        first = np.empty(len(keys), dtype=bool)
        first[0] = True
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        keys = keys[first]
        del first
    if not len(keys):
        return SparseColumn(np.empty(0, dtype=index), np.empty(0, dtype=index), n, fill=-1)
    last_call = np.full(len(keys), -1, dtype=index)
    for a in range(0, n, BLOCK):
        c = correlation[a:a + BLOCK]
        calls = np.flatnonzero(in_categories(cat[a:a + BLOCK], (Cat.RUNTIME, Cat.DRIVER)) & (c >= 0))
        at = np.minimum(np.searchsorted(keys, c[calls]), len(keys) - 1)
        hit = keys[at] == c[calls]
        np.maximum.at(last_call, at[hit], (calls[hit] + a).astype(index))  # a repeated id: its last call
    # The linked GPU rows are compacted into the front of `gpu` as they are found (never past a
    # block not yet read), their calls beside them: no second pair of arrays for the result.
    launcher = np.empty(len(gpu), dtype=index)
    kept = 0
    for a in range(0, len(gpu), BLOCK):
        rows = gpu[a:a + BLOCK]
        wanted = correlation[rows]
        at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        call = np.where((wanted >= 0) & (keys[at] == wanted), last_call[at], -1)
        linked = call >= 0
        rows, call = rows[linked], call[linked]
        gpu[kept:kept + len(rows)] = rows
        launcher[kept:kept + len(rows)] = call
        kept += len(rows)
    del keys, last_call
    return SparseColumn(_shrunk(gpu, kept), _shrunk(launcher, kept), n, fill=-1)


def _shrunk(array: np.ndarray, length: int) -> np.ndarray:
    """The first `length` items of `array`, in its own memory (reallocated in place)."""
    try:
        array.resize(length, refcheck=False)
        return array
    except ValueError:  # not resizable (a view): a copy
        return array[:length].copy()

