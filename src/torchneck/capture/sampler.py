"""Python call stacks of the main thread, sampled by pyinstrument for the whole run.

Saved as `samples.json`: an interned frame table and, per sample, its stack (frame ids, root
first) and the seconds it stands for. Consecutive samples tile the run, so a sample's end time
is the start time plus the running sum; `start_monotonic_ns` anchors them to the step clock.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

SAMPLE_INTERVAL_S = 0.001
"""1 ms: fine enough to place samples within a step of a few ms, coarse enough that pyinstrument's
overhead stays in the low percent."""


class StackSampler:
    def __init__(self, interval: float = SAMPLE_INTERVAL_S):
        from pyinstrument import Profiler

        self._profiler = Profiler(interval=interval, async_mode="disabled", use_timing_thread=True)
        self.interval = interval
        self.start_ns: int | None = None
        self.session = None

    def start(self) -> None:
        self.start_ns = time.monotonic_ns()
        self._profiler.start()

    def stop(self) -> None:
        if self.session is None and self._profiler.is_running:
            self.session = self._profiler.stop()

    def write(self, path: Path) -> dict:
        """Write samples.json; returns the same data."""
        data = {"interval_s": self.interval, "start_monotonic_ns": self.start_ns, "frames": [], "samples": []}
        if self.session is not None:
            index: dict[str, int] = {}
            frames: list[list] = []
            samples = []
            for stack, seconds in self.session.frame_records:
                ids = []
                for ident in stack:
                    fid = index.get(ident)
                    if fid is None:
                        fid = index[ident] = len(frames)
                        frames.append(parse_frame_identifier(ident))
                    ids.append(fid)
                samples.append([ids, round(seconds, 7)])
            data["frames"] = frames
            data["samples"] = samples
        path.write_text(json.dumps(data, separators=(",", ":")))
        return data


def parse_frame_identifier(ident: str) -> list:
    """pyinstrument's `function\\0file\\0firstline[\\x01cClass][\\x01lLine]` -> [function, file, line]."""
    parts = ident.split("\x00")
    function = parts[0] if parts else ident
    file = parts[1] if len(parts) > 1 else ""
    rest = parts[2] if len(parts) > 2 else ""
    fields = rest.split("\x01")
    line = 0
    try:
        line = int(fields[0])
    except ValueError:
        pass
    cls = ""
    for f in fields[1:]:
        if f.startswith("l"):
            try:
                line = int(f[1:])
            except ValueError:
                pass
        elif f.startswith("c"):
            cls = f[1:]
    if cls:
        function = f"{cls}.{function}"
    return [function, file, line]
