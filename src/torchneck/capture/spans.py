"""Know which `record_function` spans are open, so no profiler session starts under one.

Why: a span opened while a torch profiler session records keeps a pointer into that session's
event buffer. If that session is stopped and another one starts before the span closes, torch
writes the span's end time through the stale pointer into freed memory: heap corruption, and
the script segfaults or aborts later, at random (reproduced on torch 2.13: stop + start inside
`with record_function(...)` crashes a loop within a few iterations under `MALLOC_PERTURB_`).
A span opened with no session recording, or closed with none recording, is harmless. So:

- torchneck restarts its own recording only when no span is open on the main thread
  (`when_closed`): the optimizer clock ticks inside `Optimizer.step`'s own span, and users wrap
  their steps in spans of their own;
- when the script's own profiler is about to start while spans opened under torchneck's session
  are still open, `detach_open()` swaps each span's handle for an inert one (opened with no
  session, so closing it does nothing) and keeps the real handles alive until no session records,
  when dropping them is harmless.

Counted: spans of `torch.autograd.profiler.record_function` (= `torch.profiler.record_function`,
used by `Optimizer.step`/`zero_grad`, DataLoader iterators, `torch.profiler.profile.step()` and
user code) entered on the main thread. The count goes up before the span opens and down after
it closes, so a signal handler that reads it mid-way errs on the side of "open". torchneck's own
spans (`own_span()`) bypass the count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_own_span: Any = None


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
    """Counts the spans open on one thread, remembers which session each was opened under, and
    calls `when_closed` once the count is back to 0."""

    def __init__(self) -> None:
        self.depth = 0
        self.when_closed: Callable[[], None] | None = None
        self.session: int | None = None  # id of the torchneck session recording now, if any
        self._thread = threading.get_ident()
        self._restore: tuple | None = None
        self._open: dict[int, tuple[Any, int | None]] = {}  # id(span) -> (span, session at entry)
        self.kept_handles: list = []  # real handles of detached spans, dropped once no session records
        self.marks: Any = None  # capture/marks.py (--nvtx): a range per label, pushed and popped here

    def install(self) -> None:
        if self._restore is not None:
            return
        from torch.autograd.profiler import record_function

        own_span()  # built from the unpatched methods
        enter, exit_ = record_function.__enter__, record_function.__exit__
        spans = self
        opened = self._open

        def __enter__(span):
            if threading.get_ident() != spans._thread:
                return enter(span)
            spans.depth += 1
            try:
                result = enter(span)
            except BaseException:
                spans.depth -= 1
                raise
            opened[id(span)] = (span, spans.session)
            if spans.marks is not None:
                spans.marks.push(span.name)
            return result

        def __exit__(span, exc_type, exc_value, traceback):
            try:
                return exit_(span, exc_type, exc_value, traceback)
            finally:
                if threading.get_ident() == spans._thread and opened.pop(id(span), None) is not None:
                    if spans.marks is not None:
                        spans.marks.pop()
                    spans.depth -= 1
                    if spans.depth == 0 and spans.when_closed is not None:
                        callback, spans.when_closed = spans.when_closed, None
                        callback()

        setattr(__enter__, "_torchneck_original", enter)  # noqa: B010  (own_span() reads it)
        setattr(__exit__, "_torchneck_original", exit_)  # noqa: B010
        setattr(record_function, "__enter__", __enter__)  # noqa: B010  (a class attribute patched)
        setattr(record_function, "__exit__", __exit__)  # noqa: B010
        self._restore = (record_function, enter, exit_)

    def uninstall(self) -> None:
        """Put torch's methods back. Spans still open keep being counted out when they close only
        while installed; the count restarts from what is known when installed again."""
        self.when_closed = None
        if self._restore is not None:
            cls, enter, exit_ = self._restore
            setattr(cls, "__enter__", enter)  # noqa: B010
            setattr(cls, "__exit__", exit_)  # noqa: B010
            self._restore = None
        self.depth = 0  # their closing is not seen from here on
        self._open.clear()

    def detach_open(self, session: int) -> int:
        """Make the spans opened under `session` (stopped by now) harmless to the next session:
        each gets an inert handle, opened with no session recording; its real handle is kept
        alive (`kept_handles`) so its end never runs while another session records. Returns how
        many spans were detached."""
        import torch

        n = 0
        for span, s in list(self._open.values()):
            if s != session:
                continue
            handle = getattr(span, "record", None)
            if handle is None:
                continue
            try:
                inert = torch.ops.profiler._record_function_enter_new("torchneck-detached", None)
            except Exception:
                continue
            self.kept_handles.append(handle)
            setattr(span, "record", inert)  # noqa: B010  (a record_function's handle, swapped)
            n += 1
        return n

    def release_kept(self) -> None:
        """Drop the detached spans' real handles: only when no profiler session records, when
        ending them writes nothing."""
        self.kept_handles = []
