"""One `torchneck run`: capture everything into a run directory, raw evidence first.

Order of writing: `env.json` (before the script starts), `trace.json.gz` (as soon as the profiled
window ends), `samples.json`, `compile.json` and `run.json` (right after the script ends). Only then does
analysis start, so a failing analysis loses nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import TorchneckError
from .runner import Outcome, Target, check_target, run_target, sigterm_held_back
from .window import ProfiledWindow, WindowOptions


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

    def __init__(self, run_dir: Path, options: WindowOptions, status=None):
        self.run_dir = run_dir
        self.options = options
        self.status = status
        self.trace_path = run_dir / "trace.json.gz"

    def begin(self) -> None:
        import torch  # noqa: F401  (imported here so its import time is not the user's)

        from .callsites import CallSites
        from .compile_log import CompileCapture
        from .env import collect_env
        from .sampler import StackSampler

        env = collect_env()
        (self.run_dir / "env.json").write_text(json.dumps(env, indent=1))
        self.window = ProfiledWindow(self.options, self.trace_path)
        self.sampler = StackSampler()
        self.compile_capture = CompileCapture(on_compile_start=self.window.compile_started, run_dir=self.run_dir)
        self.compile_capture.start()
        self.call_sites = CallSites()
        self.call_sites.install()
        self.started_ns = time.monotonic_ns()
        self.cpu0 = time.process_time()
        self.window.start()
        self.sampler.start()

    def end(self, outcome: Outcome, target: Target) -> RunResult:
        """Stop every recorder (whatever happens) and write the evidence; run.json last."""
        from .env import read_slow_settings

        window, sampler, compile_capture, call_sites = self.window, self.sampler, self.compile_capture, self.call_sites
        options, run_dir, trace_path = self.options, self.run_dir, self.trace_path
        try:
            sampler.stop()
            compile_capture.stop()
            call_sites.uninstall()
        finally:
            ended_ns = time.monotonic_ns()
            started_ns = self.started_ns
            cpu_s = time.process_time() - self.cpu0
            sys.stdout.flush()
            if self.status:
                self.status("writing the trace")
            window.finish()
            window.uninstall()
        try:
            end_settings = read_slow_settings()
        except Exception:
            end_settings = {}
        try:  # only when the script left more threads than cores; after its work, before writing
            from .thread_probe import probe_oversubscription, usable_cores

            end_settings["thread_probe"] = probe_oversubscription(end_settings.get("torch_threads") or 0,
                                                                  usable_cores())
        except Exception:
            pass
        sampler.write(run_dir / "samples.json")
        compile_capture.write(run_dir / "compile.json")
        log = window.log
        run_info = {
            "target": {"script": str(target.script) if target.script else None, "module": target.module,
                       "args": list(target.args), "cwd": os.getcwd()},
            "argv": sys.argv,
            "exit_code": outcome.exit_code,
            "status": outcome.status,
            "error": outcome.error,
            "traceback": outcome.traceback,
            "started_monotonic_ns": started_ns,
            "ended_monotonic_ns": ended_ns,
            "wall_s": (ended_ns - started_ns) / 1e9,
            "cpu_s": cpu_s,
            "clock": {
                "kind": log.kind,
                "ticks": log.ticks,
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
            },
            "options": asdict(options),
            "trace_error": window.export_error,
            "settings_at_end": end_settings,
            "call_sites": call_sites.records,
        }
        (run_dir / "run.json").write_text(json.dumps(run_info, indent=1))
        return RunResult(run_dir, outcome, trace_path if trace_path.exists() else None)


def capture_run(target: Target, options: WindowOptions, out: str | None, timeout: float | None,
                status=None) -> RunResult:
    """Run the target once under the sampler and the profiler; write the raw evidence."""
    code = check_target(target)
    session = CaptureSession(make_run_dir(out, target.label), options, status)
    session.begin()
    outcome = Outcome(1, "terminated", "torchneck stopped before the script ended")
    with sigterm_held_back():  # a SIGTERM after the script: once its evidence is written
        try:
            outcome = run_target(target, code, timeout)
        finally:
            result = session.end(outcome, target)
    return result
