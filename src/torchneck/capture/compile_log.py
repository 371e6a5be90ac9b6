"""Record what torch.compile did during the run, from torch's own structured trace.

torch emits structured records (the ones `TORCH_TRACE` / tlparse read) on the logger
`torch.__trace` whenever that logger has a handler, whatever `TORCH_LOGS` says. A handler kept
in this process receives them as they happen; this one keeps only what the diagnosis needs:

- `dynamo_start`: which frame dynamo is compiling (its user stack; file names are ids that
  earlier `str` records define);
- `compilation_metrics` (and `bwd_compilation_metrics`, a backward graph compiled lazily at
  the first backward): per compiled frame, compile times (dynamo / AOT autograd / inductor /
  codegen, nested cumulative figures), graph size, guard count, failure and restart reasons;
- artifacts `dynamo_graph_break_reason` (the break's user file:line and reason) and
  `recompile_reasons` (the guards that failed), and the cache hit/miss artifacts;
- the guards each compiled graph checks (`dynamo_cpp_guards_str`, the guard tree; or
  `dynamo_guards`, a JSON list), kept as (kind, expression) pairs;
- a resume function's original bytecode (after a graph break): which `___stackN` values it
  receives and the variable the top one is stored in, so a guard on `___stack0` can be named
  in the user's words;
- the code torch generates, written to `graphs/<frame>-<compile>/` in the run directory as it
  arrives (never held in memory): dynamo's FX graph, AOT autograd's forward/backward graphs,
  inductor's post-grad graph and output code (`output_code.py`, with the kernels it defines).

A second handler on `torch._dynamo` keeps the "hit config.recompile_limit" warning: the frame
named in it runs eagerly from then on.

Everything is written to `compile.json` in the run directory; analysis/compile.py reads it.
Records from PyTorch versions without this channel simply never arrive (the report says so).
"""

from __future__ import annotations

import json
import logging
import re
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
    "guard_count", "is_runtime", "cache_size",
    "inductor_fx_local_cache_hit_count", "inductor_fx_local_cache_miss_count",
    "inductor_fx_remote_cache_hit_count", "inductor_fx_remote_cache_miss_count",
    "aotautograd_local_cache_hit_count", "aotautograd_local_cache_miss_count",
)
STACK_KEPT = 12
"""Innermost frames kept of the stack dynamo starts from (the user's call is among them)."""
RECORD_LIMIT = 20000
"""Records kept at most: a pathological run that recompiles forever must not grow memory."""

GRAPH_FILES = {
    # structured-trace record (or artifact) name -> file written under graphs/<frame>-<compile>/
    "dynamo_output_graph": "dynamo_graph.py",
    "aot_forward_graph": "aot_forward_graph.py",
    "aot_backward_graph": "aot_backward_graph.py",
    "aot_inference_graph": "aot_inference_graph.py",
    "inductor_post_grad_graph": "post_grad_graph.py",
    "inductor_output_code": "output_code.py",
    "dynamo_cpp_guards_str": "guards.txt",
}
"""The code torch generates per compiled graph: what `TORCH_COMPILE_DEBUG=1` leaves behind."""
GRAPH_FILE_LIMIT = 4 << 20
"""Bytes written at most per file: a huge graph's first 4 MiB still show what it does."""
GRAPH_DIRS_LIMIT = 500
"""Compiled graphs whose code is written at most: a run that recompiles forever must not fill
the disk (the graphs after these are still counted and timed, only their code is not kept)."""
GUARDS_KEPT = 400
"""Guards kept per compiled graph (their total count is always kept)."""

_CACHE_KEY = re.compile(r'"key": "(\w+)"')
CACHE_KEY_SEARCHED = 4000
"""Characters of a cache artifact searched for its key (it comes first; the payload runs to 100 KB).
The FX graph cache key also names the graph's call in the profiler trace (`## Call CompiledFxGraph KEY`)."""
_GUARD_LINE = re.compile(r"^[| ]*\+- ([A-Z_]+): (.*)$")
_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.MULTILINE)
_EXTERN_CALL = re.compile(r"\bextern_kernels\.(\w+)\(|\btorch\.ops\.(\w+)\.(\w+)\.\w+\(")
_AOT_ID = re.compile(r"^# AOT ID: \['(\d+)_(\w+)'\]", re.MULTILINE)
_STACK_VAR = re.compile(r"\(___stack(\d+)\)|___stack(\d+)[,)]")
_JUMP = re.compile(r"JUMP_FORWARD\s+\d+ \(to (\d+)\)")
_STORE = re.compile(r"^\s*>>\s+(\d+) (STORE_FAST|STORE_NAME|STORE_DEREF|STORE_GLOBAL)\s+\d+ \((\w+)\)", re.MULTILINE)


def parse_guard_tree(text: str) -> list[dict]:
    """(kind, expression) of each guard in dynamo's guard tree (`dynamo_cpp_guards_str`),
    without the source comment; `GuardManager` lines (the tree's inner nodes) are not guards."""
    out = []
    for line in text.splitlines():
        m = _GUARD_LINE.match(line)
        if not m or m.group(1) in ("GuardManager", "RootGuardManager"):
            continue
        expr, _, comment = m.group(2).partition("  # ")
        out.append({"kind": m.group(1), "expr": expr.strip(), "where": comment.strip()[:200]})
    return out


def parse_output_code(text: str) -> dict:
    """The kernels inductor generated (`cpp_fused_*`, `triton_*`: name and kind) and the ops it
    left to ATen (`extern_kernels.mm`, `torch.ops.aten.x`), from its output code."""
    kernels = [{"name": n, "kind": k} for n, k in _KERNEL_DEF.findall(text)]
    fallbacks: dict[str, int] = {}
    for ext, ns, op in _EXTERN_CALL.findall(text):
        name = f"aten::{ext}" if ext else f"{ns}::{op}"
        fallbacks[name] = fallbacks.get(name, 0) + 1
    aot = _AOT_ID.search(text)
    return {"kernels": kernels, "fallbacks": fallbacks,
            "part": aot.group(2) if aot else None}


def parse_resume_bytecode(text: str) -> dict:
    """What a resume function receives after a graph break: its `___stackN` arguments (the
    values on Python's stack when the graph broke) and, when the code right after the break
    stores the top one in a variable (`scale = h.mean().item()`), that variable."""
    head, _, _ = text.partition("JUMP_FORWARD")
    stack = sorted({int(a or b) for a, b in _STACK_VAR.findall(head)})
    jump = _JUMP.search(text)
    top_var = None
    if jump and stack:
        for off, _op, name in _STORE.findall(text):
            if off == jump.group(1):
                top_var = name
                break
    return {"stack_vars": len(stack), "top_stored_in": top_var}


class CompileLog(logging.Handler):
    """Collects the structured-trace records of torch.compile (see module docstring)."""

    def __init__(self, on_compile_start=None, graphs_dir: Path | None = None) -> None:
        super().__init__(level=logging.DEBUG)
        self.on_compile_start = on_compile_start  # called before dynamo traces each frame
        self.graphs_dir = graphs_dir
        self.files: dict[int, str] = {}
        self.records: list[dict] = []
        self.warnings: list[dict] = []
        self.dropped = 0
        self._graph_dirs: set[str] = set()
        self.graph_files_dropped = 0

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
        entry: dict
        if "dynamo_start" in md:
            stack = [{"file": self.files.get(f.get("filename"), str(f.get("filename"))),
                      "line": f.get("line"), "function": f.get("name")}
                     for f in md["dynamo_start"].get("stack", [])]
            entry = {"type": "dynamo_start", "stack": stack[-STACK_KEPT:]}
            if self.on_compile_start is not None:
                self.on_compile_start()
        elif "compilation_metrics" in md or "bwd_compilation_metrics" in md:
            kind = "compilation_metrics" if "compilation_metrics" in md else "bwd_compilation_metrics"
            m = md[kind]
            entry = {"type": kind, **{k: m.get(k) for k in _METRIC_KEYS}}
        elif "artifact" in md:
            name = md["artifact"].get("name")
            payload = getattr(record, "payload", None) or ""
            if name in _ARTIFACTS_WITH_PAYLOAD:
                entry = {"type": name, "payload": payload[:PAYLOAD_LIMIT]}
            elif name in _CACHE_ARTIFACTS:
                key = _CACHE_KEY.search(payload[:CACHE_KEY_SEARCHED])
                entry = {"type": "cache", "name": name, "key": key.group(1) if key else None}
            elif name == "inductor_post_grad_graph":
                entry = self._graph_file(name, md, payload)
            elif isinstance(name, str) and name.endswith("_ORIGINAL_BYTECODE") and "resume_in" in name:
                entry = {"type": "resume_code", "name": name[: -len("_ORIGINAL_BYTECODE")],
                         **parse_resume_bytecode(payload[:20000])}
            else:
                return
        elif "dynamo_guards" in md:
            payload = getattr(record, "payload", None) or "[]"
            try:
                codes = [g.get("code", "") for g in json.loads(payload)]
            except (ValueError, AttributeError):
                return
            entry = {"type": "guards", "count": len(codes), "source": "dynamo_guards",
                     "guards": [{"kind": "", "expr": c, "where": ""} for c in codes[:GUARDS_KEPT]]}
        elif "dynamo_cpp_guards_str" in md:
            payload = getattr(record, "payload", None) or ""
            guards = parse_guard_tree(payload)
            entry = {"type": "guards", "count": len(guards), "source": "dynamo_cpp_guards_str",
                     "guards": guards[:GUARDS_KEPT]}
            self._graph_file("dynamo_cpp_guards_str", md, payload)
        else:
            found = next((k for k in GRAPH_FILES if k in md), None)
            if found is None:
                return
            entry = self._graph_file(found, md, getattr(record, "payload", None) or "")
        if len(self.records) >= RECORD_LIMIT:
            self.dropped += 1
            return
        self.records.append(ids | entry)

    def _graph_file(self, kind: str, md: dict, payload: str) -> dict:
        """Write a generated-code payload under graphs/<frame>-<compile>/ and describe it."""
        entry: dict = {"type": "graph_file", "kind": kind, "path": None, "chars": len(payload)}
        if kind == "inductor_output_code":
            entry |= parse_output_code(payload)
            entry["cache_path"] = (md.get(kind) or {}).get("filename")
        if self.graphs_dir is None or not payload:
            return entry
        sub = f"{md.get('frame_id')}-{md.get('frame_compile_id')}"
        if sub not in self._graph_dirs and len(self._graph_dirs) >= GRAPH_DIRS_LIMIT:
            self.graph_files_dropped += 1
            return entry
        self._graph_dirs.add(sub)
        folder = self.graphs_dir / sub
        folder.mkdir(parents=True, exist_ok=True)
        name = GRAPH_FILES[kind]
        part = entry.get("part")
        if part and part not in ("forward", "inference"):  # inductor's backward code of the same graph
            name = name.replace(".py", f"_{part}.py")
        path = folder / name
        n = 2
        while path.exists():  # a second graph of the kind in one compile (a restart)
            path = folder / name.replace(".", f"_{n}.", 1)
            n += 1
        path.write_text(payload[:GRAPH_FILE_LIMIT], encoding="utf-8")
        entry["path"] = str(path.relative_to(self.graphs_dir.parent))
        return entry

    def to_json(self) -> dict:
        return {"format": 2, "records": self.records, "warnings": self.warnings,
                "dropped": self.dropped, "graph_files_dropped": self.graph_files_dropped}


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
    """Installs the handlers for the run and writes compile.json. With `run_dir`, the generated
    code of each compiled graph goes to `run_dir/graphs/` as it arrives."""

    def __init__(self, on_compile_start=None, run_dir: Path | None = None) -> None:
        self.log = CompileLog(on_compile_start, Path(run_dir) / "graphs" if run_dir is not None else None)
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
