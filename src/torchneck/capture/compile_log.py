"""Record what torch.compile did during the run, from torch's own structured trace.

torch emits structured records (the ones `TORCH_TRACE` / tlparse read) on the logger
`torch.__trace` whenever that logger has a handler, whatever `TORCH_LOGS` says. A handler kept
in this process receives them as they happen; this one keeps only what the diagnosis needs:

- `dynamo_start`: which frame dynamo is compiling (its user stack; file names are ids that
  earlier `str` records define);
- `compilation_metrics`: per compiled frame, compile times (dynamo / AOT autograd / inductor /
  codegen, nested cumulative figures), graph size, failure and restart reasons;
- artifacts `dynamo_graph_break_reason` (the break's user file:line and reason) and
  `recompile_reasons` (the guards that failed), and the cache hit/miss artifacts.

A second handler on `torch._dynamo` keeps the "hit config.recompile_limit" warning: the frame
named in it runs eagerly from then on.

Everything is written to `compile.json` in the run directory; analysis/compile.py reads it.
Records from PyTorch versions without this channel simply never arrive (the report says so).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

PAYLOAD_LIMIT = 6000
"""Characters kept of a break reason or recompile payload: the reason, hints and user stack fit;
the dynamo-internal traceback that follows them is cut."""

_ARTIFACTS_WITH_PAYLOAD = {"dynamo_graph_break_reason", "recompile_reasons"}
_CACHE_ARTIFACTS = {
    "fx_graph_cache_hit", "fx_graph_cache_miss", "fx_graph_cache_bypass",
    "aotautograd_cache_hit", "aotautograd_cache_miss", "aotautograd_cache_bypass",
}
_METRIC_KEYS = (
    "compile_id", "co_name", "co_filename", "co_firstlineno", "graph_op_count", "graph_node_count",
    "entire_frame_compile_time_s", "backend_compile_time_s", "inductor_compile_time_s",
    "code_gen_time_s", "fail_type", "fail_reason", "fail_user_frame_filename",
    "fail_user_frame_lineno", "restart_reasons", "start_time_us", "end_time_us", "stack_trace",
    "guard_count", "is_runtime",
)
STACK_KEPT = 12
"""Innermost frames kept of the stack dynamo starts from (the user's call is among them)."""
RECORD_LIMIT = 20000
"""Records kept at most: a pathological run that recompiles forever must not grow memory."""


class CompileLog(logging.Handler):
    """Collects the structured-trace records of torch.compile (see module docstring)."""

    def __init__(self, on_compile_start=None) -> None:
        super().__init__(level=logging.DEBUG)
        self.on_compile_start = on_compile_start  # called before dynamo traces each frame
        self.files: dict[int, str] = {}
        self.records: list[dict] = []
        self.warnings: list[dict] = []
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:  # called by torch while compiling
        try:
            self._keep(record)
        except Exception:  # never break the user's compile
            self.dropped += 1

    def _keep(self, record: logging.LogRecord) -> None:
        md = getattr(record, "metadata", None)
        if not isinstance(md, dict):
            return
        if "str" in md:
            path, sid = md["str"]
            self.files[int(sid)] = path
            return
        ids = {"frame_id": md.get("frame_id"), "frame_compile_id": md.get("frame_compile_id"),
               "t_ns": time.monotonic_ns()}
        if "dynamo_start" in md:
            stack = [{"file": self.files.get(f.get("filename"), str(f.get("filename"))),
                      "line": f.get("line"), "function": f.get("name")}
                     for f in md["dynamo_start"].get("stack", [])]
            entry = {"type": "dynamo_start", "stack": stack[-STACK_KEPT:]}
            if self.on_compile_start is not None:
                self.on_compile_start()
        elif "compilation_metrics" in md:
            m = md["compilation_metrics"]
            entry = {"type": "compilation_metrics", **{k: m.get(k) for k in _METRIC_KEYS}}
        elif "artifact" in md:
            name = md["artifact"].get("name")
            if name in _ARTIFACTS_WITH_PAYLOAD:
                payload = getattr(record, "payload", None) or ""
                entry = {"type": name, "payload": payload[:PAYLOAD_LIMIT]}
            elif name in _CACHE_ARTIFACTS:
                entry = {"type": "cache", "name": name}
            else:
                return
        else:
            return
        if len(self.records) >= RECORD_LIMIT:
            self.dropped += 1
            return
        self.records.append(ids | entry)

    def to_json(self) -> dict:
        return {"format": 1, "records": self.records, "warnings": self.warnings,
                "dropped": self.dropped}


class _LimitWarnings(logging.Handler):
    """Keeps dynamo's 'hit config.recompile_limit' / 'cache_size_limit' warnings."""

    def __init__(self, log: CompileLog) -> None:
        super().__init__(level=logging.WARNING)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:
            return
        if "recompile_limit" in msg or "cache_size_limit" in msg:
            if len(self.log.warnings) < 100:
                self.log.warnings.append({"t_ns": time.monotonic_ns(), "message": msg[:PAYLOAD_LIMIT]})


class CompileCapture:
    """Installs the handlers for the run and writes compile.json."""

    def __init__(self, on_compile_start=None) -> None:
        self.log = CompileLog(on_compile_start)
        self._warn = _LimitWarnings(self.log)
        self._trace_logger = logging.getLogger("torch.__trace")
        self._dynamo_logger = logging.getLogger("torch._dynamo")

    def start(self) -> None:
        self._trace_logger.setLevel(logging.DEBUG)  # torch keeps it at DEBUG; before torch's init, we must
        self._trace_logger.addHandler(self.log)
        self._dynamo_logger.addHandler(self._warn)

    def stop(self) -> None:
        self._trace_logger.removeHandler(self.log)
        self._dynamo_logger.removeHandler(self._warn)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.log.to_json()))
