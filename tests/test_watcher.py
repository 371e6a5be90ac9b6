"""The watcher of a blocked main thread (capture/watcher.py), on real threads: it samples the
worker a joined main thread waits for, never a thread outside the script's code, and never keeps
the main thread's temporaries alive while the main thread computes."""

from __future__ import annotations

import threading
import time

import torch

from torchneck.capture.plan import MemoryProbe
from torchneck.capture.watcher import MainThreadWatcher


class _Sampler:
    """What the watcher reads of a StackSampler, and the samples it records in its stead."""

    def __init__(self) -> None:
        self.thread_id = threading.get_ident()
        self._paused_at = None
        self.last_main_ns = 0  # the main thread's handler never sampled: blocked, if idle
        self.main_waits = False
        self.recorded: list[tuple[str, int]] = []
        self.threads: list[int] = []  # the native id of the thread each stand-in sample saw

    def record_other(self, frame, on_cpu_ns: int, main_cpu_ns: int, native_id: int = 0) -> bool:
        self.recorded.append((frame.f_code.co_name, on_cpu_ns))
        self.threads.append(native_id)
        return True


def _spin(seconds: float, done: threading.Event | None = None) -> float:
    x, until = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < until and not (done is not None and done.is_set()):
        x += sum(i * i for i in range(200))
    return x


def test_a_joined_worker_is_sampled_in_the_main_threads_place():
    sampler = _Sampler()
    watcher = MainThreadWatcher(sampler)
    worker = threading.Thread(target=_spin, args=(0.6,))
    watcher.start()
    try:
        worker.start()
        worker.join()
    finally:
        watcher.stop()
    assert watcher.samples_taken >= 5
    assert {name for name, _ in sampler.recorded} <= {"_spin", "<genexpr>"}
    assert all(on_cpu > 0 for _, on_cpu in sampler.recorded)
    assert set(sampler.threads) == {worker.native_id}  # the trace's tid of the worker's ops


def test_a_thread_pool_a_sampled_main_thread_waits_for_is_sampled_in_its_place():
    """`Future.result()` waits in a way the signal interrupts: the main thread's handler keeps
    sampling "waits in result_iterator" (its latest sample waits: `main_waits`) while the worker
    runs the script's code; the watcher samples the worker in its place all the same. A main
    thread whose samples are fresh and not waiting is left alone."""
    from concurrent.futures import ThreadPoolExecutor

    sampler = _Sampler()
    watcher = MainThreadWatcher(sampler)
    sampler.main_waits = True
    watcher.start()
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            for _ in pool.map(_spin, [0.15] * 4):
                sampler.last_main_ns = time.monotonic_ns()  # the handler sampled the wait just now
    finally:
        watcher.stop()
    assert watcher.samples_taken >= 5
    assert {name for name, _ in sampler.recorded} <= {"_spin", "<genexpr>"}

    running = _Sampler()
    watcher = MainThreadWatcher(running)
    done = threading.Event()
    worker = threading.Thread(target=_spin, args=(30.0, done))
    watcher.start()
    try:
        worker.start()
        until = time.monotonic() + 0.5
        while time.monotonic() < until:  # the main thread waits, sampled, but not on another thread
            running.last_main_ns = time.monotonic_ns()
            time.sleep(0.005)
    finally:
        watcher.stop()
        done.set()
        worker.join()
    assert running.recorded == []


def test_a_library_thread_or_an_idle_one_is_not_sampled():
    """A busy thread whose stack holds no code of the script's (here: torch's own files only, as a
    DataLoader's pin-memory thread) and a waiting one leave the main thread's wait its own."""
    sampler = _Sampler()
    watcher = MainThreadWatcher(sampler)
    from torch.nn.modules import module as library  # a thread started on a library function

    busy = threading.Thread(target=library._addindent, args=("x\n" * 3_000_000, 2))
    idle = threading.Thread(target=time.sleep, args=(0.4,))
    watcher.start()
    try:
        busy.start()
        idle.start()
        busy.join()
        idle.join()
    finally:
        watcher.stop()
    assert sampler.recorded == []


def test_the_main_threads_temporaries_are_not_kept_while_it_computes():
    """A generator pipeline building 100 MB temporaries, beside a busy worker thread: the watcher
    reads the threads' CPU clocks only (a frame object made of the computing main thread's frame
    kept each chunk's temporaries alive until the garbage collector ran: +100 MB a chunk)."""
    sampler = _Sampler()
    watcher = MainThreadWatcher(sampler)
    bank, basis = torch.randn(3000, 64), torch.randn(600, 600)
    done = threading.Event()

    def distances(q):
        torch.linalg.svd(basis + q.sum())
        return ((q[:, None, :] - bank[None, :, :]) ** 2).sum(-1)

    def scores(chunks):
        for q in chunks:
            yield distances(q).min()

    probe = MemoryProbe()
    worker = threading.Thread(target=_spin, args=(30.0, done))
    watcher.start()
    try:
        worker.start()
        readings = []
        for _ in scores(torch.randn(128, 64) for _ in range(8)):
            readings.append(probe.read())
    finally:
        watcher.stop()
        done.set()
        worker.join()
    assert max(readings) - min(readings) < 60 << 20, [r >> 20 for r in readings]


def test_the_memory_probe_reads_the_resident_size_once_malloc_is_slow_to_count():
    """`mallinfo2` walks every free chunk: on a heap holding 100,000 small tensors, half freed,
    one reading took 57 ms, and the capture plan's checks read it every few ms (a thread-pool
    script ran 2x its bare time). Past `SLOW_MALLINFO_NS` the probe reads the resident size,
    continued from the last malloc reading; in a subprocess, whose heap this fragments."""
    import subprocess
    import sys

    code = (
        "import time, torch\n"
        "from torchneck.capture.plan import MemoryProbe\n"
        "p = MemoryProbe()\n"
        "keep = [torch.randn(int(n)) for n in torch.randint(10, 2000, (200000,))]\n"
        "del keep[::2]\n"
        "before = p.read()\n"
        "t0 = time.perf_counter()\n"
        "after = [p.read() for _ in range(100)]\n"
        "print(p.kind, abs(after[-1] - before) < (64 << 20), (time.perf_counter() - t0) / 100 < 1e-3)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["rss", "True", "True"], out.stdout
