"""Arrays larger than memory should hold: kept in temporary files, mapped, their pages let go.

A trace of 8 GB is ~20 M events: its table alone is ~400 MB (20 bytes an event), its host call
nesting ~150 MB more, and analyses read every column many times. Past `SPILL_ROWS`, the loader
and the nesting put these arrays in unlinked temporary files mapped into memory (`empty`), so
that they are numpy arrays like any other to the analyses. The pages of a mapped file that the
process has read count in its resident memory (RSS) but belong to the kernel's page cache: a
watcher thread (in C, `_spill.c`, which needs no GIL; else `_Ceiling`) gives them back
(`madvise(MADV_DONTNEED)`) whenever the process's RSS passes `RELEASE_AT`, and the next read of
such a page maps it again from the page cache (from disk only if the kernel needed the memory).
Shared file mappings keep what was written to them (the page cache holds it), so letting go is
safe at any moment, also while another thread reads or writes the array.

Traces below `SPILL_ROWS` events never spill: their arrays stay on the heap and nothing else
changes (the 1 GB and 3 GB figures of README are unaffected).
"""

from __future__ import annotations

import mmap
import os
import threading
import time
import weakref

import numpy as np

try:  # the watcher in C (setup.py): it needs no GIL; without it, a Python thread does the same
    from . import _spill  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - built without a C compiler
    _spill = None
if os.environ.get("TORCHNECK_PURE_PYTHON"):
    _spill = None

SPILL_ROWS = 8_000_000
"""Tables of more events than this (a 3.3 GB trace of GPU training, fewer for a CPU-only one)
are spilled. Below it the heap holds a table of ~20 bytes an event and its nesting of ~8, under
300 MB in all (3 GB, 7.3 M events: 285 MB peak, measured); above, it would not."""

RELEASE_AT = 128 << 20
"""RSS at which the watcher lets go of the mapped pages: the ceiling of 300 MB, less what the
analyses' block-sized temporaries and the time between two looks (`POLL_S`) can add."""

POLL_S = 0.0005
"""How often the watcher reads the process's RSS (/proc/self/statm: ~5 µs a read). A read of
mapped pages maps 64 KB around each one it touches (the kernel's fault-around): a gather over a
column can map tens of MB in a millisecond."""


def spill_dir() -> str | None:
    """Where the files go: $TORCHNECK_SPILL_DIR, else the system's temporary folder."""
    return os.environ.get("TORCHNECK_SPILL_DIR") or None


def empty(n: int, dtype, rows: int | None = None) -> np.ndarray:
    """An uninitialised array of `n` items: on the heap, or mapped from a temporary file when
    `rows` (the table's events; `n` by default) passes `SPILL_ROWS`."""
    if (n if rows is None else rows) <= SPILL_ROWS or n == 0:
        return np.empty(n, dtype=dtype)
    return mapped(n, dtype)


def full(n: int, value, dtype, rows: int | None = None) -> np.ndarray:
    out = empty(n, dtype, rows)
    out.fill(value)
    return out


def mapped(n: int, dtype) -> np.ndarray:
    """An array of `n` items in an unlinked temporary file (gone when the array is), watched."""
    import tempfile

    dtype = np.dtype(dtype)
    size = max(n * dtype.itemsize, 1)
    with tempfile.TemporaryFile(prefix="torchneck-", dir=spill_dir()) as f:
        f.truncate(size)  # sparse: no disk block is used before it is written
        if _spill is not None:
            region: object = _spill.Region(f.fileno(), size)  # MAP_SHARED; the mapping keeps the file
            _spill.watch(RELEASE_AT, int(POLL_S * 1e6))
        else:
            region = mmap.mmap(f.fileno(), size)
            _CEILING.watch(region)
    return np.frombuffer(region, dtype=dtype, count=n)  # type: ignore[call-overload]


def is_mapped(array: np.ndarray) -> bool:
    """Whether `array` (or the array it views) lives in a spill file."""
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap) or _spill is not None and isinstance(base, _spill.Region)


def release() -> None:
    """Let go of every spill file's resident pages now (after a pass over them)."""
    if _spill is not None:
        _spill.release()
    else:
        _CEILING.release()


def releases() -> int:
    """How many times the pages were let go so far (by the watcher or `release`)."""
    return _spill.releases() if _spill is not None else _CEILING.releases


class _Ceiling:
    """The watcher without the C extension: a daemon thread, running while any spilled array
    lives, that lets go of the mapped pages whenever RSS passes `RELEASE_AT`. It needs the GIL to
    run, which numpy holds through some long operations: RSS can then pass the ceiling until the
    operation ends (the C watcher, `_spill.c`, needs no GIL)."""

    def __init__(self) -> None:
        self.regions: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.releases = 0
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def watch(self, region: mmap.mmap) -> None:
        with self.lock:
            self.regions.add(region)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="torchneck-spill", daemon=True)
                self.thread.start()

    def rss(self, statm: int) -> int:
        return int(os.pread(statm, 64, 0).split()[1]) * self.page

    def release(self) -> None:
        for region in list(self.regions):
            try:
                region.madvise(mmap.MADV_DONTNEED)
            except (ValueError, OSError):  # closed meanwhile
                pass
        self.releases += 1

    def _run(self) -> None:
        try:
            statm = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:  # no /proc: the pages stay until the arrays go
            return
        try:
            while True:
                with self.lock:
                    if not self.regions:
                        self.thread = None
                        return
                if self.rss(statm) > RELEASE_AT:
                    self.release()
                time.sleep(POLL_S)
        finally:
            os.close(statm)


_CEILING = _Ceiling()
