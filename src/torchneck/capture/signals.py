"""Holding back SIGINT and SIGTERM while a piece of evidence is written.

A Ctrl-C or SIGTERM that lands while the profiler exports or gzips the trace would leave a
truncated trace.json.gz (measured: 1 run in 12 of a script interrupted just after its window
closed), so the signal is recorded and delivered, to whatever handled it before, once the
file is whole. The script then ends exactly as it would have, a moment later."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def held_back(*signums: int) -> Iterator[None]:
    """Hold back `signums` until the block is done, then deliver them to the handlers from
    before (by default: the process ends; Python's SIGINT handler: KeyboardInterrupt). Blocks
    nest. Outside the main thread signals cannot be handled: nothing changes there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    before = {s: signal.signal(s, lambda signum, frame: arrived.append(signum)) for s in signums}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        for s in dict.fromkeys(arrived):
            signal.raise_signal(s)


def interrupts_held_back():
    """`held_back(SIGINT, SIGTERM)`: the two signals that end a run with its report."""
    return held_back(signal.SIGINT, signal.SIGTERM)
