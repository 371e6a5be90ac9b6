"""Run the user's script once, in this process, as `python script.py args` would.

`__name__ == "__main__"`, `sys.argv = [script, *args]`, the script's folder first on `sys.path`,
`__file__` absolute, the working directory unchanged. The script runs in a fresh module that is
`sys.modules["__main__"]` while it runs, so classes it defines pickle (spawn DataLoader workers,
`torch.save(model)`).

The script's code runs at the root of its own chain of frames (a greenlet whose body is `exec`
itself), as under plain python: whatever walks the stack from inside the script (a profiler
recording Python calls with `with_stack=True`, `inspect.stack()`, `traceback`, logging's caller
lookup) finds the script's `<module>` at the bottom, not torchneck's command-line frames. The
profiler tutorial's own table had 9 rows more under torchneck before this (`cli.py(476): main`,
`runner.py: run_target`, ...). Without greenlet, the script runs nested in torchneck's frames.
"""

from __future__ import annotations

import _thread
import os
import runpy
import signal
import sys
import threading
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

from ..errors import TorchneckError
from .signals import held_back

try:  # imported here, not when the script starts: its import time is not the script's
    from greenlet import greenlet
except ImportError:  # pragma: no cover
    greenlet = None


@dataclass
class Target:
    script: Path | None = None
    module: str | None = None
    args: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        if self.module:
            return self.module
        assert self.script is not None, "a Target names a script or a module"
        return self.script.name


@dataclass
class Outcome:
    exit_code: int
    status: str  # "ok", "exit", "exception", "interrupted", "terminated", "timeout"
    error: str | None = None  # one-line description
    traceback: str | None = None


def check_target(target: Target) -> types.CodeType | None:
    """Fail early (exit code 2) on a missing or unparsable script; returns its code object."""
    if target.module:
        import importlib.util

        try:
            spec = importlib.util.find_spec(target.module)
        except (ImportError, ValueError) as exc:
            raise TorchneckError(f"cannot find module {target.module!r}: {exc}") from None
        if spec is None:
            raise TorchneckError(f"no module named {target.module!r} (is it on PYTHONPATH / installed?)")
        return None
    path = target.script
    assert path is not None, "a Target names a script or a module"
    if not path.exists():
        raise TorchneckError(f"{path}: no such file")
    if path.is_dir():
        raise TorchneckError(f"{path}: is a directory, not a Python script")
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise TorchneckError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise TorchneckError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except ValueError as exc:
        raise TorchneckError(f"{path}: cannot compile ({exc})") from None


class _Terminated(BaseException):
    """Raised in the main thread when SIGTERM arrives while the script runs, so its
    finally-blocks and our report run."""


def sigterm_held_back():
    """Hold back a SIGTERM until the block is done, then deliver it to whatever handled it
    before (by default: the process ends). For writing a run's evidence once the script is
    over: torchrun stops the other ranks with SIGTERM when one fails, and a rank whose script
    has just died of the lost peer must still write what it saw (measured: 2 runs in 3 lost
    rank 0's run.json to that signal)."""
    return held_back(signal.SIGTERM)


def run_target(target: Target, code: types.CodeType | None, timeout: float | None,
               on_exception=None) -> Outcome:
    """Run the script and turn however it ends into an `Outcome` (never raises).

    `on_exception(exc)` sees the script's own exception (not exits or interrupts) before it is
    turned into text: `torchneck bisect` reads torch's exception types and attributes."""
    saved_argv = sys.argv[:]
    saved_path = sys.path[:]
    saved_main = sys.modules.get("__main__")
    timer = None
    timed_out = threading.Event()
    old_term = None
    script_running = [True]  # once it is over, a SIGTERM goes to the handler from before
    if threading.current_thread() is threading.main_thread():
        def on_term(signum, frame):
            if script_running[0]:
                script_running[0] = False
                raise _Terminated()
            if callable(old_term):  # e.g. `sigterm_held_back`, while the evidence is written
                old_term(signum, frame)
            elif old_term != signal.SIG_IGN:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.raise_signal(signal.SIGTERM)

        old_term = signal.signal(signal.SIGTERM, on_term)
    if timeout:
        def fire():
            timed_out.set()
            _thread.interrupt_main()

        timer = threading.Timer(timeout, fire)
        timer.daemon = True
        timer.start()
    try:
        if target.module:
            sys.argv = [target.module, *target.args]
            sys.path.insert(0, os.getcwd())
            _at_root(runpy.run_module, target.module, run_name="__main__", alter_sys=True)
        else:
            assert target.script is not None and code is not None, "check_target() compiled the script"
            script = target.script.resolve()
            sys.argv = [str(target.script), *target.args]
            sys.path.insert(0, str(script.parent))
            module = types.ModuleType("__main__")
            module.__file__ = str(script)
            module.__dict__["__builtins__"] = __builtins__
            module.__spec__ = None
            module.__loader__ = None
            module.__package__ = None
            sys.modules["__main__"] = module
            _at_root(exec, code, module.__dict__)
        script_running[0] = False
        return Outcome(0, "ok")
    except SystemExit as exc:
        script_running[0] = False
        code_ = exc.code
        if code_ is None:
            return Outcome(0, "exit")
        if isinstance(code_, int):
            return Outcome(code_, "exit", None if code_ == 0 else f"the script called sys.exit({code_})")
        print(code_, file=sys.stderr)
        return Outcome(1, "exit", f"the script exited: {code_}")
    except KeyboardInterrupt:
        script_running[0] = False
        if timed_out.is_set():
            return Outcome(124, "timeout", f"stopped after --timeout {timeout:g} s",
                           _format_tb(sys.exc_info()))
        return Outcome(130, "interrupted", "interrupted (Ctrl-C)", _format_tb(sys.exc_info()))
    except _Terminated:
        return Outcome(143, "terminated", "terminated (SIGTERM)", _format_tb(sys.exc_info()))
    except BaseException as exc:  # the script's own error: report it, keep what we captured
        script_running[0] = False
        if on_exception is not None:
            on_exception(exc)
        return Outcome(1, "exception", f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                       _format_tb(sys.exc_info()))
    finally:
        if timer is not None:
            timer.cancel()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


def _at_root(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` as the root of a new chain of Python frames (see the module
    docstring); its result or exception comes back here. A C function (`exec`) as `fn` leaves no
    frame of ours below the script's."""
    if greenlet is None:  # pragma: no cover  (a dependency; without it the script nests in our frames)
        return fn(*args, **kwargs)
    return greenlet(fn).switch(*args, **kwargs)


def _format_tb(exc_info) -> str:
    """The traceback without torchneck's own frames."""
    etype, value, tb = exc_info
    here = str(Path(__file__).resolve().parent.parent)
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(here):
        tb = tb.tb_next
    return "".join(traceback.format_exception(etype, value, tb))
