"""Where tasks run: in this process, or on Dask distributed (an embedded `LocalCluster` of
worker processes, or an existing cluster's scheduler). One interface, so every path runs the same
tasks and the same reducer.

Ranks go to Dask in batches (`batch_size`): a task costs the scheduler and the client a few ms
of bookkeeping, as much as analysing a small rank trace, so one task a rank would spend half the
time on bookkeeping. A batch that still fails after Dask's retries (a worker killed, a network
error) is split into one task a rank, so a rank that brings its worker down is listed as
failed, alone.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import TorchneckError

SCHEDULER_ENV = "TORCHNECK_SCHEDULER"
"""The address of an existing Dask scheduler (`tcp://host:8786`), as `--scheduler` gives it."""
TASK_RETRIES = 2
"""Dask retries a failed task this often (a lost worker, a network error) before giving up."""
BATCHES_PER_WORKER = 4
"""Batches per worker thread: enough for load balance (a slow batch does not hold the end back
long), few enough that bookkeeping stays small."""
BATCH_MAX = 32
"""Ranks per batch at most: the progress bar moves, and a retry redoes little."""
TAIL_FRACTION = 8
"""The last batches shrink to 1/8 of the first (4 small ranks of a first 32): smaller would cost
more bookkeeping than the balance it buys."""
SPLIT_RANGE_BYTES = 32 << 20
"""Bytes of one huge trace a worker decodes per task (~0.05 s of work, ~80,000 events, a few MB
of columns sent back): Dask's few ms a task stay small, a 4 GB trace makes 128 tasks, and a
range that fails to decode (damage) is salvaged by the client from a bounded carry (a damaged
300 MB trace: client peak 274 MB with 32 MB ranges, 481 MB with 64 MB)."""
SPLIT_MIN_BYTES = 128 << 20
"""A single uncompressed trace is split across the cluster's workers from this size (with
`--workers`/`--scheduler`); smaller ones load faster on this machine's threads."""
CONNECT_TIMEOUT_S = 10
"""How long to wait for an existing scheduler to answer."""
LOCAL_CLUSTER_MIN_RANKS = 8
"""Without `--workers`/`--scheduler`, this many ranks or more start a `LocalCluster` sized to
the machine; fewer run in this process (starting worker processes costs ~1-2 s)."""

WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
"""The local workers' Dask settings: no statistical profiler (a thread sampling every task's
stack every 10 ms, for Dask's dashboard, which torchneck does not start: ~5 % of a worker's CPU)."""
LOCAL_START_METHOD = "fork"
"""How the embedded LocalCluster starts its worker processes on Linux: forked from this process,
which has imported Dask and torchneck already, rather than spawned fresh to import them again
(~0.85 s of CPU a worker). Measured on the 2-core VM, 2 workers, 128 small ranks, interleaved:
cluster up 1.9-2.3 -> 0.7 s, first tasks 0.7 -> 0.4 s, the 128 ranks 3.8-4.6 -> 2.3 s, closing
0.6 -> 0.04 s, the workers' CPU 5.0 -> 2.6 s. Dask supports it; the client has not started its
own threads' work yet when the workers fork. `DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD`
(Dask's own setting) overrides it."""

Progress = Callable[[int, int], None]


def batches(items: list, workers: int) -> list[list]:
    """Items cut into batches that shrink towards the end (guided self-scheduling): each is about
    1/`BATCHES_PER_WORKER` of what is left for a worker, at most `BATCH_MAX`, and never smaller
    than `TAIL_FRACTION` of the first. Dask hands tasks out in the order submitted, so the small
    ones come last and the workers finish together: with equal batches of 32 small ranks (~0.5 s
    each) one worker could idle for most of a batch at the end of a 5 s job."""
    if not items:
        return []
    lanes = max(1, workers * BATCHES_PER_WORKER)
    first = max(1, min(BATCH_MAX, math.ceil(len(items) / lanes)))
    least = max(1, first // TAIL_FRACTION)
    out, at = [], 0
    while at < len(items):
        size = max(least, min(first, math.ceil((len(items) - at) / lanes)))
        out.append(items[at:at + size])
        at += size
    return out


class InProcess:
    """Tasks run here, one after another: no dependency beyond torchneck's own."""

    name = "in-process"
    workers = 1
    parallel = False  # each task may use this process's cores (the analyses' two lanes)

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def map(self, fn: Callable[[list], Any], items: list, progress: Progress | None = None) -> Iterator[tuple]:
        """Yields (batch, result or the exception it raised)."""
        done = 0
        for batch in batches(items, 1):
            try:
                result: Any = fn(batch)
            except Exception as exc:
                result = exc
            done += len(batch)
            if progress:
                progress(done, len(items))
            yield batch, result


class Dask:
    """A Dask distributed client: on a `LocalCluster` it starts (`workers` processes, one
    thread each), or connected to an existing scheduler (`scheduler`)."""

    parallel = True  # tasks run side by side, one a worker thread: each keeps to one lane

    def __init__(self, workers: int | None = None, scheduler: str | None = None):
        try:
            import dask
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise TorchneckError("--workers and --scheduler need Dask: pip install 'torchneck[cluster]'") from None
        self.cluster = None
        if scheduler:
            self.name = f"Dask scheduler {scheduler}"
            try:
                self.client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise TorchneckError(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
            self._check_workers()
        else:
            workers = workers or default_workers()
            self.name = f"Dask LocalCluster, {workers} worker process(es)"
            try:
                with dask.config.set(local_worker_config()):
                    # its HTTP endpoints on a free local port: the default 8787 warns when taken
                    self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
                self.client = Client(self.cluster)
            except Exception as exc:  # no process spawning here, no free port...
                raise TorchneckError(f"could not start {workers} local Dask worker(s) ({type(exc).__name__}: "
                                     f"{exc}); --workers 0 analyses in this process") from None
        self.workers = max(1, sum(self.client.nthreads().values()))

    def _check_workers(self) -> None:
        """Every worker must run torchneck (tasks refer to its functions by name): one clear
        line when one does not, rather than each task failing."""
        from .. import __version__

        if not self.client.nthreads():
            self.client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        try:
            versions = self.client.run(_torchneck_version)
        except Exception as exc:
            raise TorchneckError(f"the Dask workers cannot run torchneck ({type(exc).__name__}: {exc}); "
                                 "install torchneck[cluster] on every worker") from None
        wrong = {w: v for w, v in versions.items() if v != __version__}
        if wrong:
            worker, version = next(iter(wrong.items()))
            raise TorchneckError(f"Dask worker {worker} runs torchneck {version}, this client {__version__}: "
                                 "install the same version on every worker")

    def __enter__(self) -> Dask:
        return self

    def __exit__(self, *exc) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def map(self, fn: Callable[[list], Any], items: list, progress: Progress | None = None) -> Iterator[tuple]:
        """Yields (batch, result or the exception it raised after Dask's retries), as batches
        finish; a failed batch of several items is retried one item a task."""
        from dask.distributed import as_completed

        pending = {}
        for batch in batches(items, self.workers):
            pending[self.client.submit(fn, batch, retries=TASK_RETRIES, pure=False)] = batch
        done = 0
        queue = as_completed(list(pending))
        for future in queue:
            batch = pending.pop(future)
            failed = future.status != "finished"
            if failed and len(batch) > 1:
                for item in batch:
                    single = self.client.submit(fn, [item], retries=TASK_RETRIES, pure=False)
                    pending[single] = [item]
                    queue.add(single)
                future.release()
                continue
            result: Any = _failure(future) if failed else future.result()
            future.release()
            done += len(batch)
            if progress:
                progress(done, len(items))
            yield batch, result


class RangePool:
    """A Dask engine's workers as the trace loader's pool (`trace.loader.RangePool`): one huge
    uncompressed trace cut into `range_bytes` ranges at event boundaries, each decoded into
    columns by a worker that reads its range from the file itself (a path every worker sees:
    this machine's, or a shared file system's), the columns merged on the client.

    A range whose task still fails after Dask's retries (a lost worker) is decoded here, so one
    bad task costs time, never the trace."""

    range_bytes = SPLIT_RANGE_BYTES

    def __init__(self, engine: Dask):
        self.client = engine.client
        self.workers = engine.workers

    def __enter__(self) -> RangePool:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def apply_async(self, fn: Callable, args: tuple) -> _RangeResult:
        return _RangeResult(self.client.submit(fn, *args, retries=TASK_RETRIES, pure=False), fn, args)


class _RangeResult:
    def __init__(self, future, fn: Callable, args: tuple):
        self.future, self.fn, self.args = future, fn, args

    def get(self) -> Any:
        try:
            return self.future.result()
        except Exception:  # retried by Dask already: this process reads the range itself
            return self.fn(*self.args)
        finally:
            self.future.release()


def local_worker_config() -> dict[str, Any]:
    """`WORKER_CONFIG`, and on Linux `LOCAL_START_METHOD` unless Dask's setting is given."""
    config: dict[str, Any] = dict(WORKER_CONFIG)
    if sys.platform.startswith("linux") and "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD" not in os.environ:
        config["distributed.worker.multiprocessing-method"] = LOCAL_START_METHOD
    return config


def _failure(future) -> BaseException:
    """What a failed (or cancelled, or lost) future ended with."""
    try:
        return future.exception()
    except BaseException as exc:  # CancelledError: the future itself was dropped
        return exc


def _torchneck_version() -> str:
    from .. import __version__

    return __version__


def default_workers() -> int:
    """One worker process a core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def make_engine(workers: int | None = None, scheduler: str | None = None, ranks: int = 0):
    """The engine the options ask for: `--scheduler` (or `TORCHNECK_SCHEDULER`), else
    `--workers N` (a LocalCluster; 0 = in this process), else a LocalCluster for many ranks
    when Dask is installed, else this process."""
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    if scheduler:
        return Dask(scheduler=scheduler)
    if workers is not None:
        if workers < 0:
            raise TorchneckError("--workers must be 0 (in this process) or more")
        return Dask(workers=workers) if workers else InProcess()
    if ranks >= LOCAL_CLUSTER_MIN_RANKS and default_workers() > 1:
        try:
            return Dask(workers=min(default_workers(), ranks))
        except TorchneckError:  # Dask not installed, or no worker could start: the same tasks, here
            return InProcess()
    return InProcess()
