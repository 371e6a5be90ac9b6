"""One recording of torch's Kineto profiler, as `window.py`'s `ProfiledWindow` starts and stops
it: steps marked with `ProfilerStep#N` spans, Kineto's own start/stop chatter kept off stderr."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from .spans import own_span


class Kineto:
    """One recording of torch's Kineto profiler, through `torch.autograd.profiler.profile`.

    Not `torch.profiler.profile`: its start does `hasattr(torch, "_inductor")`, which imports
    inductor (~1.4 s here) in every script, compiled or not. Steps are marked with our own
    `ProfilerStep#N` record_function, as torch.profiler does.
    """

    def __init__(self, record_shapes: bool, profile_memory: bool, with_stack: bool, every_thread: bool = False):
        """`every_thread`: record the ops of threads started before the window too (`all_threads`)."""
        import torch

        use_device = "cuda" if torch.cuda.is_available() else None
        self._prof = torch.autograd.profiler.profile(
            use_cpu=True, use_device=use_device, record_shapes=record_shapes,
            profile_memory=profile_memory, with_stack=with_stack, use_kineto=True,
            **(all_threads() if every_thread else {}))
        self._step: Any = None
        self.step_num = 0

    def start(self) -> None:
        import torch

        from .profilers import record_concrete_inputs

        record_concrete_inputs(False)  # values of small inputs: memory the analyses never read
        with quiet_stderr():
            self._prof.__enter__()
        try:
            torch.autograd._add_metadata_json("torchneck", '"1"')
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                info = {"backend": torch.distributed.get_backend(), "rank": torch.distributed.get_rank(),
                        "world_size": torch.distributed.get_world_size()}
                torch.autograd._add_metadata_json("distributedInfo", json.dumps(info))
        except Exception:
            pass

    def begin_step(self) -> None:
        self.end_step()
        step = own_span()(f"ProfilerStep#{self.step_num}")
        step.__enter__()
        self._step = step

    def end_step(self) -> None:
        if self._step is not None:
            self._step.__exit__(None, None, None)
            self._step = None

    def stop(self) -> None:
        from .profilers import record_concrete_inputs

        self.end_step()
        try:
            with quiet_stderr():
                self._prof.__exit__(None, None, None)
        finally:
            record_concrete_inputs(None)

    def export(self, path: Path) -> None:
        self._prof.export_chrome_trace(str(path))


def all_threads() -> dict[str, Any]:
    """The profiler's option to record the ops of every thread, where this torch has it: by
    default only the thread that starts the profiler (and threads it starts later) is recorded,
    so a server whose worker thread, started before the window, runs the model left a window
    without a single op (measured: 2 events, the step and the trace's own span). Asked for only
    when the model was called in other threads: with it, torch 2.13 records no `[memory]` event
    (measured: 11 allocations recorded without it, none with it)."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return {"experimental_config": _ExperimentalConfig(profile_all_threads=True)}
    except (ImportError, TypeError):  # torch before the option
        return {}


@contextlib.contextmanager
def quiet_stderr():
    """Kineto prints 'USDT ... profiler_start/stop' on fd 2 at every start and stop; those lines
    are noise in the user's output. The redirect lasts only for the call."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
