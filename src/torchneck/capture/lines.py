"""Mark, in the trace, which line of the user's code each torch call came from.

During the profiled window a `TorchFunctionMode` sees every torch function the user's code calls
(`torch.mm`, `Tensor.backward`, `F.linear` inside a module...) and wraps it in a
`record_function` named after the deepest user frame on the stack (`sites.site_name`). The ops
that call runs, on its thread, nest inside that span, so the trace itself says which ops each
line produced: exact, where a sampled stack can only guess for ops shorter than its interval.

Only for the window (a few steps): the mode costs a few µs per torch call. Not when code was
already compiled by torch.compile: dynamo guards on the active modes, and a new mode would
make it recompile in the middle of the measurement.
"""

from __future__ import annotations

import sys
import threading

from ..sites import MARKER_CALL_FUNCTION, is_torchneck_file, is_user_file, site_name
from .call_inputs import SiteInputs, user_frame
from .spans import own_span


def call_marked(func, args, kwargs):
    """Calls the user's torch function; analysis tells the user's time (below this frame) from the
    marker's own overhead by this function's name."""
    return func(*args, **kwargs)


assert call_marked.__name__ == MARKER_CALL_FUNCTION


def compiled_code_exists() -> bool:
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return False
    try:
        return bool(dynamo.utils.counters["stats"]["unique_graphs"])
    except Exception:
        return True  # cannot tell: stay out of the way


def make_marker(open_spans: list[int], operands: ProductOperands | None = None):
    """A fresh `UserLineMarker` (a TorchFunctionMode subclass; built lazily to import torch late).
    `open_spans[0]` counts the marker's spans open right now (no profiler restart under one),
    `open_spans[1]` every call it marked (the window's bound between two step ticks). `operands`
    looks at the matrices the user's matrix products take (`ProductOperands`)."""
    import torch
    from torch.overrides import TorchFunctionMode

    products = {torch.mm, torch.matmul, torch.mv, torch.addmm, torch.addmv, torch.Tensor.__matmul__,
                torch.Tensor.__rmatmul__, torch.Tensor.mm, torch.Tensor.mv, torch.Tensor.matmul}

    # torch's C++ span (what dynamo uses for its own spans): a few times cheaper per call than
    # the Python `record_function`, and this wraps every torch call of the window.
    record = getattr(torch._C._profiler, "_RecordFunctionFast", None) or own_span()
    user_code: dict = {}  # code object -> is the user's
    names: dict = {}  # (code, line) -> span name

    def site(frame) -> str | None:
        while frame is not None:
            code = frame.f_code
            mine = user_code.get(code)
            if mine is None:
                mine = user_code[code] = is_user_file(code.co_filename)
            if mine:
                key = (code, frame.f_lineno)
                name = names.get(key)
                if name is None:
                    fn = getattr(code, "co_qualname", code.co_name)
                    name = names[key] = site_name(fn, frame.f_lineno or code.co_firstlineno, code.co_filename)
                return name
            frame = frame.f_back
        return None

    class UserLineMarker(TorchFunctionMode):
        active = True

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = site(sys._getframe(1)) if self.active else None
            if name is None:
                return func(*args, **kwargs)
            open_spans[0] += 1
            open_spans[1] += 1
            if operands is not None and func in products:
                operands.note(args, sys._getframe(1))
            try:
                with record(name):
                    return call_marked(func, args, kwargs)
            finally:
                open_spans[0] -= 1

    return UserLineMarker()


def _script_frame():
    """The frame the script was running when torchneck's code (a hook, the sampler's signal
    handler) was entered: the first one up the stack that is not torchneck's."""
    frame = sys._getframe(2)
    while frame is not None and is_torchneck_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _in_script_code(frame) -> bool:
    """The script's own code is running there: not torch's, whose mode handling pops a mode and
    pushes it back around `__torch_function__` (`_pop_mode_temporarily`): a push or pop of ours
    in between would unpair it (measured: "trying to pop from empty mode stack" in a script)."""
    return frame is not None and is_user_file(frame.f_code.co_filename)


class ProductOperands:
    """The large 2-D operands of the user's matrix products during the window, per calling line,
    looked at for mostly zeros (`call_inputs.SiteInputs.note_zeros`: evenly spaced rows read
    through the data pointer, once per distinct tensor): a dense matrix of a solver or of plain
    functions, which no module hook sees, multiplied at every call. At most `LINES` lines."""

    LINES = 8

    def __init__(self) -> None:
        self.sites: dict[tuple[str, int, str], SiteInputs] = {}

    def note(self, args: tuple, frame) -> None:
        try:
            import torch

            mats = [(i, a) for i, a in enumerate(args[:3]) if isinstance(a, torch.Tensor)]
            if not mats:
                return
            at = user_frame(frame)
            if at is None:
                return
            tally = self.sites.get(at)
            if tally is None:
                if len(self.sites) >= self.LINES:
                    return
                tally = self.sites[at] = SiteInputs()
            for i, a in mats:
                tally.note_zeros(a, i)
        except Exception:  # never the script's problem
            pass

    def to_json(self) -> list[dict]:
        return [{"file": f, "line": ln, "function": fn, "mostly_zero": zeros}
                for (f, ln, fn), tally in self.sites.items()
                if (zeros := list(tally.mostly_zero.values()))]


class LineMarking:
    """Pushes a marker for the window and pops it only if it is still on top, and only while the
    script's own code runs (see `_in_script_code`)."""

    def __init__(self) -> None:
        self._mode = None
        self._pending = None  # stopped, still on the mode stack: popped by `retry()`
        self.open_spans = [0, 0]  # spans open now, calls marked in all
        self.disabled = False  # torch.compile is in use: dynamo guards on the mode stack
        self._wanted = False  # asked to start outside the script's own code: started from there later
        self.marked = False  # the marker was pushed at some point of the window
        self.operands = ProductOperands()

    def start(self, frame=None) -> bool:
        """Push the marker, only onto an empty mode stack and from the script's own code: this may
        run in a signal handler that interrupted the script between its own mode's push and pop,
        or torch between its temporary pop and push, which must stay paired. Asked from elsewhere
        (a step tick comes from a module's or the optimizer's hook, inside torch's code), the push
        waits for the script's next call, made from its own frame (a one-shot profile hook), or
        the next periodic check that lands in the script's code (`retry`)."""
        if self._mode is not None or self.disabled or compiled_code_exists():
            return False
        if not _in_script_code(frame if frame is not None else _script_frame()):
            self._wanted = True
            if sys.getprofile() is None:
                marking = self

                def start_when_in_script(frame, event, arg):
                    caller = frame.f_back if event == "call" else frame if event == "c_call" else None
                    if caller is not None and marking._wanted:
                        marking.start(caller)
                    if not marking._wanted and sys.getprofile() is start_when_in_script:
                        sys.setprofile(None)

                sys.setprofile(start_when_in_script)
            return False
        self._wanted = False
        try:
            from torch.overrides import _get_current_function_mode_stack

            if _get_current_function_mode_stack():
                return False
            mode = make_marker(self.open_spans, self.operands)
            mode.__enter__()
        except Exception:
            return False
        self._mode = mode
        self.marked = True
        return True

    def stop(self) -> None:
        """Stop marking at once, and take the mode off the stack as soon as it is on top while
        the script's own code runs.

        Inside the mode's own `__torch_function__` torch has popped it for the call and pushes
        it back after, so popping then would take the wrong mode. That is where a check run by
        the sampler's signal handler lands in a loop of tiny ops (CPython handles a signal right
        after the C call it interrupted returns, there), and an inactive mode left on the stack
        still costs a Python call per torch call. So the pop is also tried from a one-shot
        profile hook, at the script's next call (its next torch call included), made from its
        own frame, where the mode is back on top."""
        self._wanted = False
        mode, self._mode = self._mode, None
        if mode is None:
            return
        mode.active = False  # whatever happens below, it no longer marks anything
        self._pending = mode
        self.retry(_script_frame())
        # a profile hook is the calling thread's: only the script's (main) thread gets one, not the
        # watcher's thread ending a window for a main thread that waits (watcher.ThreadsSlice.guard)
        if self._pending is not None and sys.getprofile() is None \
                and threading.current_thread() is threading.main_thread():
            marking = self

            def pop_when_on_top(frame, event, arg):
                caller = frame.f_back if event == "call" else frame if event == "c_call" else None
                if caller is not None:
                    marking.retry(caller)
                if marking._pending is None and sys.getprofile() is pop_when_on_top:
                    sys.setprofile(None)

            sys.setprofile(pop_when_on_top)

    def retry(self, frame=None) -> None:
        """Pop the stopped marker if it is on top and `frame` (default: where the script was
        interrupted) is the script's own code."""
        if self._wanted:
            self.start(frame)
            return
        mode = self._pending
        if mode is None:
            return
        if not _in_script_code(frame if frame is not None else _script_frame()):
            return
        try:
            from torch.overrides import _get_current_function_mode_stack

            stack = _get_current_function_mode_stack()
            if stack and stack[-1] is mode:
                mode.__exit__(None, None, None)
                self._pending = None
        except Exception:
            self._pending = None
