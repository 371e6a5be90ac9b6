"""`torchneck run --nvtx`: ranges an external profiler shows beside its own timeline.

Nsight Systems (NVTX, on CUDA machines) and VTune (ITT, Intel's instrumentation API, also on CPU
builds of torch) do not know torchneck's steps. With `--nvtx` every step the step clock counts
and every `record_function` label the script (or torch: `Optimizer.step#SGD.step`, DataLoader
iterations) opens on the main thread is annotated for them, whether torchneck's own profiler is
recording or not, so a capture taken with `nsys profile` or `vtune -collect` lines up with the
steps of torchneck's report.

- NVTX: each step is a start/end range named `torchneck step N` (start/end ranges may overlap
  the push/pop ranges of labels: a step boundary falls inside `Optimizer.step`'s label), labels
  are push/pop ranges.
- ITT: task begin/end must nest on a thread, so each step boundary is a marker named
  `torchneck step N`; labels are push/pop ranges.
"""

from __future__ import annotations


class RangeMarks:
    """Emits the ranges; `backend` is "nvtx", "itt" or None (neither is available)."""

    def __init__(self) -> None:
        import torch

        self.backend: str | None = None
        self._step_range: int | None = None
        self.steps_marked = 0
        self.labels_marked = 0
        try:
            if torch.cuda.is_available():
                from torch.cuda import nvtx

                self._nvtx = nvtx
                self.backend = "nvtx"
        except Exception:
            self.backend = None
        if self.backend is None:
            try:
                from torch.profiler import itt

                if itt.is_available():
                    self._itt = itt
                    self.backend = "itt"
            except Exception:
                self.backend = None

    def step(self, n: int) -> None:
        """Step N (1-based count of the clock's ticks) begins."""
        name = f"torchneck step {n}"
        try:
            if self.backend == "nvtx":
                if self._step_range is not None:
                    self._nvtx.range_end(self._step_range)
                self._step_range = self._nvtx.range_start(name)
            elif self.backend == "itt":
                self._itt.mark(name)
            else:
                return
        except Exception:
            self.backend = None
            return
        self.steps_marked += 1

    def push(self, label: str) -> None:
        try:
            if self.backend == "nvtx":
                self._nvtx.range_push(label)
            elif self.backend == "itt":
                self._itt.range_push(label)
            else:
                return
        except Exception:
            return
        self.labels_marked += 1

    def pop(self) -> None:
        try:
            if self.backend == "nvtx":
                self._nvtx.range_pop()
            elif self.backend == "itt":
                self._itt.range_pop()
        except Exception:
            pass

    def close(self) -> None:
        if self.backend == "nvtx" and self._step_range is not None:
            try:
                self._nvtx.range_end(self._step_range)
            except Exception:
                pass
            self._step_range = None

    def to_json(self) -> dict:
        return {"backend": self.backend, "steps_marked": self.steps_marked, "labels_marked": self.labels_marked}
