"""Returning the loader's freed memory to the operating system (glibc's allocator; a no-op elsewhere).

A trace of gigabytes is decoded in slices by several threads: glibc keeps what they free in
per-thread arenas and on its heap for reuse, which then counts as the process's memory through
every analysis. These two calls give it back (`return_freed_memory`), and make large blocks come
and go as their own mappings (`return_large_frees_promptly`, for torchneck's own process).
"""

from __future__ import annotations

import ctypes


def _glibc(name: str, *argtypes):
    """A glibc allocator function, or None elsewhere (musl, macOS, Windows)."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes = list(argtypes)
    return fn


_MALLOC_TRIM = _glibc("malloc_trim", ctypes.c_size_t)
_MALLOPT = _glibc("mallopt", ctypes.c_int, ctypes.c_int)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
LARGE_ALLOCATION_BYTES = 1 << 20
"""Allocations from this size get their own pages, returned to the OS when freed."""
KEPT_FREE_BYTES = 4 << 20
"""Free memory at the top of the heap kept for reuse rather than returned at once."""


def return_large_frees_promptly() -> None:
    """For torchneck's own process (the CLI): give every allocation of `LARGE_ALLOCATION_BYTES`
    or more its own mapping, unmapped when freed, and keep up to `KEPT_FREE_BYTES` of the
    heap's free top for the many small block-sized temporaries (glibc's `mallopt`).

    By default glibc raises the mapping threshold to the largest block freed so far (up to
    32 MB), so after the loader frees its first column, numpy's temporaries of up to 32 MB come
    from the heap and, freed, stay there, scattered: measured on a 1 GB trace, 65 MB more
    resident memory after host nesting than the arrays it keeps, 225 MB peak instead of 197.
    The price is fresh pages for each large temporary (~0.3 s on 1 GB); the analyses work in
    blocks below the threshold to keep it small. Not done on import: a program that imports
    torchneck as a library keeps its allocator as it was."""
    if _MALLOPT is not None:
        _MALLOPT(_M_MMAP_THRESHOLD, LARGE_ALLOCATION_BYTES)
        _MALLOPT(_M_TRIM_THRESHOLD, KEPT_FREE_BYTES)


def return_freed_memory() -> None:
    """Give memory freed by the loader back to the OS (glibc's `malloc_trim`; a no-op elsewhere).

    Decoding in threads leaves tens of MB of freed slices and columns in glibc's per-thread
    arenas, which it keeps for reuse by default: measured on a 1 GB trace, 45 MB of the
    process's memory after loading was such free space, held through every analysis after."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
