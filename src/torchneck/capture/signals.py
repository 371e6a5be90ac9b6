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
from typing import Any


@contextmanager
def held_back(*signums: int) -> Iterator[None]:
    """Hold back `signums` until the block is done, then deliver them to the handlers from
    before (by default: the process ends; Python's SIGINT handler: KeyboardInterrupt); a second
    Ctrl-C is delivered at once. Blocks nest. Outside the main thread signals
    cannot be handled: nothing changes there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    before: dict[int, Any] = {}

    def restore() -> None:
        for s, handler in before.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)  # None: set outside Python

    def hold(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and signum in arrived:  # Ctrl-C twice: the user means it, now (a
            restore()  # stop or an export that hangs); a SIGTERM may come again from a script's own handling
            arrived.remove(signum)  # delivered here, not once more when the block unwinds
            signal.raise_signal(signum)
        arrived.append(signum)

    before.update({s: signal.signal(s, hold) for s in signums})
    try:
        yield
    finally:
        restore()
        pending = list(dict.fromkeys(arrived))
        try:
            while pending:
                signal.raise_signal(pending.pop(0))  # each one, even when the first one's handler raises
        finally:
            for s in pending:
                signal.raise_signal(s)


def interrupts_held_back():
    """`held_back(SIGINT, SIGTERM)`: the two signals that end a run with its report."""
    return held_back(signal.SIGINT, signal.SIGTERM)
