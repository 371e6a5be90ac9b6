"""Know when no `record_function` span is open, so the profiler can be restarted safely.

Why: torch's profiler must never be stopped and a new session started while a span opened
under the first is still open. When that span closes, torch writes its end time into the first
session's event buffer, freed by then: heap corruption, and the script segfaults or aborts later,
at random (reproduced on torch 2.13: stop + start inside `with record_function(...)` crashes a
loop within a few iterations under `MALLOC_PERTURB_`). The optimizer clock ticks inside
`Optimizer.step`'s own span, and users wrap their steps in spans of their own, so the window's
restart waits until every span open on the main thread has closed.

Counted: spans of `torch.autograd.profiler.record_function` (= `torch.profiler.record_function`,
used by `Optimizer.step`/`zero_grad`, DataLoader iterators and user code) entered on the main
thread. torchneck's own spans (`own_span()`) bypass the count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_own_span = None


def own_span():
    """`record_function` for torchneck's own spans (ProfilerStep, line markers): uncounted."""
    global _own_span
    if _own_span is None:
        from torch.autograd.profiler import record_function

        enter = record_function.__enter__
        exit_ = record_function.__exit__
        _own_span = type("TorchneckSpan", (record_function,), {
            "__enter__": getattr(enter, "_torchneck_original", enter),
            "__exit__": getattr(exit_, "_torchneck_original", exit_),
            "__module__": __name__,
        })
    return _own_span


class OpenSpans:
    """Counts the spans open on one thread and calls `when_closed` once the count is back to 0."""

    def __init__(self) -> None:
        self.depth = 0
        self.when_closed: Callable[[], None] | None = None
        self._thread = threading.get_ident()
        self._restore: tuple | None = None

    def install(self) -> None:
        from torch.autograd.profiler import record_function

        own_span()  # built from the unpatched methods
        enter, exit_ = record_function.__enter__, record_function.__exit__
        spans = self

        def __enter__(span):
            result = enter(span)
            if threading.get_ident() == spans._thread:
                spans.depth += 1
            return result

        def __exit__(span, exc_type, exc_value, traceback):
            try:
                return exit_(span, exc_type, exc_value, traceback)
            finally:
                if threading.get_ident() == spans._thread and spans.depth > 0:
                    spans.depth -= 1
                    if spans.depth == 0 and spans.when_closed is not None:
                        callback, spans.when_closed = spans.when_closed, None
                        callback()

        __enter__._torchneck_original = enter
        __exit__._torchneck_original = exit_
        record_function.__enter__ = __enter__
        record_function.__exit__ = __exit__
        self._restore = (record_function, enter, exit_)

    def uninstall(self) -> None:
        self.when_closed = None
        if self._restore is not None:
            cls, enter, exit_ = self._restore
            cls.__enter__, cls.__exit__ = enter, exit_
            self._restore = None
