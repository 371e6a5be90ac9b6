"""One `torchneck run`: capture everything into a run directory, raw evidence first.

Order of writing: `env.json` and `run.json` with status "running" (before the script starts), then
as the script runs `samples.partial.jsonl` (every ~1 s) and `trace.json.gz` (as soon as the
profiled window ends); after the script, `samples.json`, `compile.json` and `run.json` again,
final. Only then does analysis start, so a failing analysis loses nothing, and a run that ends
hard leaves what it had:

- `os._exit(n)` (watchdogs, launchers): intercepted in the main thread, the evidence and the
  report are written, then the process exits with n; from another thread, what can be written
  without the main thread is;
- SIGTERM, SIGINT: turned into the script's end (see runner.py), exit status 143 / 130;
- SIGKILL, the OOM killer, a crash in native code: nothing runs, but run.json says "running",
  the samples up to the last second are in samples.partial.jsonl, the trace is there if the
  window had ended, and a crash's Python stack is in `crash.txt` (faulthandler).
  `torchneck report DIR` builds a report from that and says what is missing.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..errors import TorchneckError
from .runner import Outcome, Target, check_target, run_target, sigterm_held_back
from .signals import held_back
from .window import ProfiledWindow, WindowOptions

if TYPE_CHECKING:
    from .marks import RangeMarks

CRASH_FILE = "crash.txt"


@dataclass
class RunResult:
    run_dir: Path
    outcome: Outcome
    trace_path: Path | None


def make_run_dir(out: str | None, label: str) -> Path:
    """`--out DIR`, or ./torchneck-runs/<YYYYmmdd-HHMMSS>-<script>/ (made unique)."""
    if out:
        path = Path(out)
    else:
        stem = Path(label).stem if label.endswith(".py") else label.replace(".", "_")
        base = Path("torchneck-runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}"
        path = base
        n = 1
        while path.exists():
            n += 1
            path = base.with_name(f"{base.name}-{n}")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise TorchneckError(f"cannot write the run directory {path}: {exc.strerror or exc}") from None
    return path


class CaptureSession:
    """Everything torchneck records about one piece of work (a script, or a block of code under
    `torchneck.profile()`): `begin()` before it, `end(outcome)` after it, which writes the raw
    evidence into `run_dir`."""

    def __init__(self, run_dir: Path, options: WindowOptions, status=None, on_hard_exit=None,
                 probe_model: bool = False):
        self.run_dir = run_dir
        self.probe_model = probe_model  # the work is a whole script: its model may be called again at the end
        self.options = options
        self.status = status
        self.on_hard_exit = on_hard_exit  # called with the RunResult when the script calls os._exit
        self.trace_path = run_dir / "trace.json.gz"
        self.target: Target | None = None
        self._ended = False
        self._dormant = False
        self._pid = os.getpid()
        self._main = threading.main_thread()
        self._crash_file: IO[str] | None = None
        self.marks: RangeMarks | None = None

    def begin(self, target: Target | None = None) -> None:
        import torch  # noqa: F401  (imported here so its import time is not the user's)

        from .callsites import CallSites
        from .compile_log import CompileCapture
        from .dynamo_guard import CompileGuard
        from .env import collect_env
        from .hook_sites import HookSites
        from .profilers import ProfilerWatch
        from .sampler import PARTIAL_NAME, StackSampler
        from .unstepped import UnsteppedGradients
        from .watcher import MainThreadWatcher

        self.target = target
        env = collect_env()
        (self.run_dir / "env.json").write_text(json.dumps(env, indent=1))
        self.watch = ProfilerWatch(self._user_profiler_started, self._user_profiler_stopped)
        self.window = ProfiledWindow(self.options, self.trace_path, watch=self.watch,
                                     on_trace_written=self._trace_written)
        self.sampler = StackSampler(partial_path=self.run_dir / PARTIAL_NAME)
        self.sampler.watcher = MainThreadWatcher(self.sampler)
        self.compile_guard = CompileGuard(on_compile=self._compile_requested)
        self.compile_capture = CompileCapture(on_compile_start=self.compile_guard.compile_requested,
                                              run_dir=self.run_dir)
        self.call_sites = CallSites()
        self.hook_sites = HookSites()
        self.unstepped = UnsteppedGradients(self.window.calls)
        if self.options.nvtx:
            from .marks import RangeMarks

            self.marks = RangeMarks()
            if self.marks.backend:
                self.window.marks = self.window._spans.marks = self.marks
        self.started_ns = time.monotonic_ns()
        self.started_unix_ns = time.time_ns()
        self.cpu0 = time.process_time()
        self._write_run_json(None)  # status "running": what a run killed with SIGKILL leaves
        self._enable_crash_file()
        self.watch.install()
        self.compile_capture.start()
        self.compile_guard.install()
        self.call_sites.install()
        self.hook_sites.install()
        self.unstepped.install()
        self._install_hard_exit()
        self.window.start()
        self.window.attach_sampler(self.sampler)
        self.sampler.start()

    def _compile_requested(self) -> None:
        """Before torch.compile compiles anything: the window steps aside, and the hook
        registrations are no longer wrapped (dynamo would trace the wrappers of a registration
        made in a compiled function)."""
        self.hook_sites.uninstall()
        self.window.compile_started()

    def _trace_written(self, path: Path) -> None:
        """The window's trace is on disk: say so in run.json (still "running") at once, so a run
        killed later is reported with what its trace covers."""
        if not self._ended:
            try:
                self._write_run_json(None)
            except OSError:
                pass

    # -- the script's own profiler -------------------------------------------------------------
    def _user_profiler_started(self, user) -> None:
        self.window.user_profiler_starting(user)
        if user.with_stack and threading.current_thread() is self._main:
            # It records every Python call: take torchneck's own Python out of its way.
            self._dormant = True
            self.sampler.pause()
            self.window.uninstall()
            self.call_sites.uninstall()
            self.hook_sites.uninstall()
            self.unstepped.uninstall()
            self.compile_guard.uninstall()

    def _user_profiler_stopped(self, user) -> None:
        self.window.user_profiler_stopped(user)
        if self._dormant and threading.current_thread() is self._main:
            self._dormant = False
            self.window._install_clocks()
            self.compile_guard.install()  # the order of begin(): each restores what it wrapped
            self.call_sites.install()
            if not self.compile_guard.requested:
                self.hook_sites.install()
            self.unstepped.install()
            self.sampler.resume()

    # -- hard endings --------------------------------------------------------------------------
    def _enable_crash_file(self) -> None:
        """A crash in native code (SIGSEGV, SIGABRT...) writes the Python stacks here."""
        if faulthandler.is_enabled():
            return  # the user's (python -X faulthandler): theirs goes to stderr
        try:
            crash_file = open(self.run_dir / CRASH_FILE, "w")  # noqa: SIM115  (open for the run)
            faulthandler.enable(file=crash_file, all_threads=True)
            self._crash_file = crash_file
        except (OSError, ValueError, RuntimeError):
            self._crash_file = None

    def _disable_crash_file(self) -> None:
        if self._crash_file is None:
            return
        try:
            faulthandler.disable()
            self._crash_file.close()
            path = self.run_dir / CRASH_FILE
            if path.exists() and path.stat().st_size == 0:
                path.unlink()
        except (OSError, ValueError):
            pass
        self._crash_file = None

    def _install_hard_exit(self) -> None:
        real_exit = os._exit
        session = self

        def _exit(status):
            if os.getpid() == session._pid and not session._ended:  # not a forked DataLoader worker
                try:
                    session.hard_exit(status)
                except BaseException:
                    pass
            real_exit(status)

        os._exit = _exit
        self._restore_exit = real_exit

    def hard_exit(self, status) -> None:
        """The script called os._exit(status): write the evidence (and, from the CLI, the report)
        before the process ends without unwinding."""
        code = status if isinstance(status, int) else 1
        outcome = Outcome(code, "os_exit", f"the script called os._exit({status!r})")
        if threading.current_thread() is self._main:
            result = self.end(outcome, self.target)
            if self.on_hard_exit is not None:
                self.on_hard_exit(result)
            return
        # Another thread (a watchdog): the main thread's profiler session and signal handlers
        # cannot be stopped from here; write what can be written.
        self._ended = True
        self.ended_ns = time.monotonic_ns()
        self.cpu_s = time.process_time() - self.cpu0
        outcome.error = f"{outcome.error} from thread {threading.current_thread().name!r}"
        self.window.capture.notes.append("os._exit was called from another thread: the profiled window, "
                                         "if it was recording, could not be written")
        self.sampler.write(self.run_dir / "samples.json")
        self.compile_capture.write(self.run_dir / "compile.json")
        self._write_run_json(outcome)
        self._disable_crash_file()

    # -- the end -------------------------------------------------------------------------------
    def end(self, outcome: Outcome, target: Target | None) -> RunResult:
        """Stop every recorder (whatever happens) and write the evidence; run.json last."""
        from .env import read_slow_settings

        self.target = target or self.target
        if self._ended:
            return RunResult(self.run_dir, outcome, self.trace_path if self.trace_path.exists() else None)
        self._ended = True
        window, sampler = self.window, self.sampler
        run_dir, trace_path = self.run_dir, self.trace_path
        try:
            sampler.stop()
            self.compile_capture.stop()
            self.call_sites.uninstall()
            self.hook_sites.uninstall()
            self.unstepped.uninstall()
            self.compile_guard.uninstall()
        finally:
            self.ended_ns = time.monotonic_ns()
            self.cpu_s = time.process_time() - self.cpu0
            sys.stdout.flush()
            if self.status:
                self.status("writing the trace")
            window.finish("end")
            window.keep_earlier_window()
            window.uninstall()
            if self.marks is not None:
                self.marks.close()
            window.adopt_user_trace(self.watch)
            self.watch.uninstall()
            os._exit = self._restore_exit
            window.close()
        # The evidence first: a probe below re-runs the program's own code, which may crash hard.
        sampler.write(run_dir / "samples.json")
        self.compile_capture.write(run_dir / "compile.json")
        try:
            self.end_settings = read_slow_settings()
        except Exception:
            self.end_settings = {}
        try:
            self.end_settings["unstepped_gradients"] = self.unstepped.summary()
        except Exception:
            pass
        try:  # only when the script left more threads than cores; after its work, before writing
            from .thread_probe import probe_oversubscription, usable_cores

            self.end_settings["thread_probe"] = probe_oversubscription(self.end_settings.get("torch_threads") or 0,
                                                                       usable_cores())
        except Exception:
            pass
        if self.probe_model and not window.compile_in_use and outcome.status not in ("interrupted", "terminated"):
            try:  # what autograd cost one model call; Ctrl-C during it skips it, the evidence is still written
                self.end_settings["autograd_probe"] = window.calls.probe()
            except (Exception, KeyboardInterrupt):
                pass
        window.calls.forget()  # the program's model and inputs are not held past the capture
        self._write_run_json(outcome)
        self._disable_crash_file()
        return RunResult(run_dir, outcome, trace_path if trace_path.exists() else None)

    def _write_run_json(self, outcome: Outcome | None) -> None:
        """run.json: at the start with status "running" (no outcome yet), at the end final."""
        target = self.target
        window = self.window
        log = window.log
        ended = getattr(self, "ended_ns", None) if outcome is not None else None
        capture = window.capture.to_json()
        capture["user_profilers"] = [u.to_json() for u in self.watch.sessions]
        capture["sampler"] = {"method": self.sampler.method, "paused_s": round(self.sampler.paused_s, 4)}
        if self.marks is not None:
            capture["nvtx"] = self.marks.to_json()
        run_info = {
            "target": {"script": str(target.script) if target and target.script else None,
                       "module": target.module if target else None,
                       "args": list(target.args) if target else [], "cwd": os.getcwd()},
            "argv": sys.argv,
            "pid": self._pid,
            "exit_code": outcome.exit_code if outcome else None,
            "status": outcome.status if outcome else "running",
            "error": outcome.error if outcome else None,
            "traceback": outcome.traceback if outcome else None,
            "started_monotonic_ns": self.started_ns,
            "ended_monotonic_ns": ended,
            "started_unix_ns": self.started_unix_ns,
            "wall_s": (ended - self.started_ns) / 1e9 if ended else None,
            "cpu_s": getattr(self, "cpu_s", None) if outcome else None,
            "clock": {
                "kind": log.kind,
                "ticks": log.ticks,
                "ticks_dropped": log.ticks_dropped,
                "window_start_ns": log.window_start_ns,
                "window_end_ns": log.window_end_ns,
                "window_first_step": log.window_first_step,
                "whole_run": log.tentative,
                "step_marks": log.step_marks,
                "user_profiler": log.user_profiler,
                "window_note": log.window_note,
                "lines_marked": log.lines_marked,
                "top_module_calls": log.top_module_calls,
                "top_module_outputs_with_grad": log.top_module_outputs_with_grad,
                "top_module_sites": _sites(log.top_module_sites, log.site_inputs),
                "product_operands": log.product_operands,
                "thread_module_calls": log.thread_module_calls,
                "thread_module_outputs_with_grad": log.thread_module_outputs_with_grad,
                "thread_module_s": round(log.thread_module_s, 6),
                "thread_module_threads": log.thread_module_threads,
                "thread_module_sites": _sites(log.thread_module_sites, log.site_inputs),
            },
            "capture": capture,
            "options": asdict(self.options),
            "trace_error": window.export_error,
            "settings_at_end": getattr(self, "end_settings", None) if outcome else None,
            "call_sites": self.call_sites.records + self.hook_sites.records(),
        }
        tmp = self.run_dir / "run.json.tmp"
        tmp.write_text(json.dumps(run_info, indent=1))
        os.replace(tmp, self.run_dir / "run.json")  # never a half-written run.json


def _sites(counted: dict, inputs: dict) -> list[dict]:
    """The module-call lines the capture counted, most calls first, with their inputs' tallies
    (call_inputs.SiteInputs)."""
    out = []
    for key, n in sorted(counted.items(), key=lambda kv: -kv[1]):
        tally = inputs.get(key)
        out.append({"file": key[0], "line": key[1], "function": key[2], "calls": n,
                    **(tally.to_json() if tally is not None else {})})
    return out


def capture_run(target: Target, options: WindowOptions, out: str | None, timeout: float | None,
                status=None, on_hard_exit=None) -> RunResult:
    """Run the target once under the sampler and the profiler; write the raw evidence.
    `on_hard_exit(result)` runs when the script ends with os._exit, before the process exits."""
    code = check_target(target)
    session = CaptureSession(make_run_dir(out, target.label), options, status, on_hard_exit, probe_model=True)
    session.begin(target)
    outcome = Outcome(1, "terminated", "torchneck stopped before the script ended")
    with sigterm_held_back():  # a SIGTERM after the script: once its evidence is written
        try:
            outcome = run_target(target, code, timeout)
        finally:
            with held_back(signal.SIGINT):  # a Ctrl-C while the evidence is written: once it is
                result = session.end(outcome, target)
    return result
