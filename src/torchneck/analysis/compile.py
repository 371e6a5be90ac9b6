"""torch.compile as the run's compile log (capture/compile_log.py) tells it: compiled frames,
graph breaks with the user's line and reason, recompilations with the guard that failed, frames
that hit the recompile limit, and compile time split by stage.

Pure functions over the decoded `compile.json`; the trace-side view (compiled regions, eager ops
between graphs) is analysis/compiled.py.
"""

from __future__ import annotations

import json
import os
import re

from ..sites import is_user_file
from .compile_guards import frame_context, guard_failure_in_words, readable_guards

_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
_BREAK_AT = re.compile(r"^Graph break in user code at (.+):(\d+)\s*$")
_TB_LINE = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')
_GUARD_ENTRY = re.compile(r"^(\d+)/(\d+): (.*)$")

GRAPHS_KEPT = 200
"""Compiled graphs listed one by one in the report (in compile order); the rest are counted."""


def compile_summary(log: dict | None, torch_version: str | None = None) -> dict:
    """Everything the compile findings need, from a decoded compile.json.

    - `frames`: per user function that dynamo compiled (resume functions after a graph break
      are folded into the function they resume), its compilations, graphs, recompilations and
      compile seconds by stage;
    - `graphs`: per compiled graph (one dynamo compile id `frame/compile`): the function and
      line, op count, the break that ended it, why it was recompiled, its guards in words,
      compile seconds by stage, cache hit or miss, the generated code kept under `graphs/`;
    - `graph_breaks`: one entry per distinct (file, line, reason), with how often dynamo hit it,
      and what it caused: the compile seconds and recompilations of the code resumed after it;
    - `recompiles`: per function, how many recompilations and the failed guards in plain words;
    - `limit_hits`: functions that hit the recompile limit and run eagerly from then on;
    - `time_s`: compile seconds split into dynamo (tracing), aot (AOT autograd), inductor
      (lowering) and codegen, computed from the nested cumulative figures torch reports.

    `torch_version` (the run's) picks the config names the fix texts use.
    """
    if not log:
        return {"present": False, "available": False}
    records = log.get("records", [])
    metrics = [r for r in records if r.get("type") == "compilation_metrics"]
    if not metrics and not log.get("warnings"):
        return {"present": False, "available": True}
    frames: dict[tuple, dict] = {}
    totals = {"dynamo": 0.0, "aot": 0.0, "inductor": 0.0, "codegen": 0.0}
    frame_key: dict[str, tuple] = {}  # dynamo frame id -> user function key
    frame_name: dict[str, tuple] = {}  # dynamo frame id -> (co_name, file, first line)
    known: list[tuple] = []
    starts = {(str(r.get("frame_id")), str(r.get("frame_compile_id"))): r.get("stack", [])
              for r in records if r.get("type") == "dynamo_start"}
    bwd = _backward_stages(records)
    graphs: dict[str, dict] = {}
    for m in metrics:
        ids = str(m.get("compile_id", "0/0")).split("/")  # "frame/compile": compile > 0 is a recompile
        key = _function_key(m, known, starts.get((ids[0], ids[-1]), []))
        if key is None:
            continue
        key = frame_key.get(ids[0], key)  # a frame id keeps the function of its first compilation
        frame_key[ids[0]] = key
        frame_name.setdefault(ids[0], (m.get("co_name") or "", m.get("co_filename") or "",
                                       int(m.get("co_firstlineno") or 0)))
        d = frames.setdefault(key, {"file": key[0], "line": key[1], "function": key[2], "label": key[3],
                                    "compilations": 0,
                                    "graphs": 0, "recompilations": 0, "compile_s": 0.0, "recompile_s": 0.0,
                                    "stages_s": dict.fromkeys(totals, 0.0), "failures": [],
                                    "frame_ids": []})
        if ids[0].isdigit() and int(ids[0]) not in d["frame_ids"]:
            d["frame_ids"].append(int(ids[0]))
        d["compilations"] += 1
        if (m.get("graph_op_count") or 0) > 0:
            d["graphs"] += 1
        stages = _stages(m)
        for k, v in bwd.get("/".join(ids), {}).items():
            stages[k] += v  # the backward graph, compiled at the first backward
        for k, v in stages.items():
            d["stages_s"][k] += v
            totals[k] += v
        d["compile_s"] += sum(stages.values())
        recompile = len(ids) == 2 and ids[1].isdigit() and int(ids[1]) > 0
        if recompile:
            d["recompilations"] += 1
            d["recompile_s"] += sum(stages.values())
        if m.get("fail_type"):
            d["failures"].append({"type": m["fail_type"], "reason": _first_line(m.get("fail_reason") or "")})
        graphs["/".join(ids)] = _graph_entry(m, ids, stages, key, recompile)
    break_records = [r for r in records if r.get("type") == "dynamo_graph_break_reason"]
    breaks = _graph_breaks(break_records)
    contexts = _frame_contexts(records, frame_name, breaks)
    _fill_graphs(graphs, records, break_records, contexts, torch_version)
    recompiles = _recompiles([r for r in records if r.get("type") == "recompile_reasons"], frame_key, frames,
                             contexts, torch_version)
    _charge_breaks(breaks, graphs, frame_name)
    limits = [_limit_hit(w["message"]) for w in log.get("warnings", [])]
    cache: dict[str, int] = {}
    for r in records:
        if r.get("type") == "cache":
            cache[r["name"]] = cache.get(r["name"], 0) + 1
    graph_list = list(graphs.values())
    return {
        "present": True,
        "available": True,
        "frames": sorted(frames.values(), key=lambda d: -d["compile_s"]),
        "graphs": graph_list[:GRAPHS_KEPT],
        "graphs_not_listed": max(len(graph_list) - GRAPHS_KEPT, 0),
        "graph_breaks": breaks,
        "recompiles": recompiles,
        "limit_hits": [x for x in limits if x],
        "time_s": totals | {"total": sum(totals.values())},
        "cache": cache,
        "records_dropped": log.get("dropped", 0),
        "graph_files_dropped": log.get("graph_files_dropped", 0),
    }


def _backward_stages(records: list[dict]) -> dict[str, dict]:
    """Per compile id, the seconds compiling its backward graph lazily (`bwd_compilation_metrics`:
    inductor's lowering and codegen of the backward, outside the forward's figures)."""
    out: dict[str, dict] = {}
    for r in records:
        if r.get("type") != "bwd_compilation_metrics" or not r.get("compile_id"):
            continue
        inductor = r.get("inductor_compile_time_s") or 0.0
        codegen = r.get("code_gen_time_s") or 0.0
        d = out.setdefault(str(r["compile_id"]), {"dynamo": 0.0, "aot": 0.0, "inductor": 0.0, "codegen": 0.0})
        d["inductor"] += max(inductor - codegen, 0.0)
        d["codegen"] += codegen
    return out


def _graph_entry(m: dict, ids: list[str], stages: dict, key: tuple, recompile: bool) -> dict:
    resumed = _RESUME.match(m.get("co_name") or "")
    return {
        "id": "/".join(ids), "function": key[2], "file": key[0], "line": key[1], "label": key[3],
        "resumes_after_line": int(resumed.group(2)) if resumed else None,
        "op_count": m.get("graph_op_count"), "recompile": recompile, "recompile_reason": None,
        "ended_by_break": None, "guards": None, "time_s": stages | {"total": sum(stages.values())},
        "cache": _cache_of_metrics(m), "files": {}, "kernels": [], "fallbacks": {}, "fx_keys": [],
        "failed": _first_line(m.get("fail_reason") or "") or None if m.get("fail_type") else None,
    }


def _cache_of_metrics(m: dict) -> str | None:
    """hit / miss / partial from the metrics' cache counters (torch >= 2.6 has them); None when
    torch says nothing (backend without inductor's caches)."""
    hits = sum(m.get(k) or 0 for k in ("inductor_fx_local_cache_hit_count", "inductor_fx_remote_cache_hit_count",
                                         "aotautograd_local_cache_hit_count"))
    misses = sum(m.get(k) or 0 for k in ("inductor_fx_local_cache_miss_count", "inductor_fx_remote_cache_miss_count",
                                           "aotautograd_local_cache_miss_count"))
    if not hits and not misses:
        return None
    return "hit" if not misses else "miss" if not hits else "partial"


def _frame_contexts(records: list[dict], frame_name: dict, breaks: list[dict]) -> dict:
    """Per dynamo frame id, what the guard texts need: the user function's parameters, or for
    a resume function, the break it continues after and the values it receives."""
    resumes = {r["name"]: r for r in records if r.get("type") == "resume_code"}
    code_at = {(b["function"], b["line"]): b.get("code", "") for b in breaks}
    out = {}
    for fid, (name, file, line) in frame_name.items():
        m = _RESUME.match(name)
        code = code_at.get((m.group(1), int(m.group(2))), "") if m else ""
        out[fid] = frame_context(name, file, line, resumes.get(name), code)
    return out


def _fill_graphs(graphs: dict, records: list[dict], break_records: list[dict], contexts: dict,
                 torch_version: str | None) -> None:
    """Guards, generated files, kernels, cache artifacts, the break that ended each graph and
    why it was recompiled, matched on the records' compile ids."""
    def gid(r: dict) -> str:
        return f"{r.get('frame_id')}/{r.get('frame_compile_id')}"

    for r in records:
        g = graphs.get(gid(r))
        if g is None:
            continue
        kind = r.get("type")
        if kind == "guards":
            g["guards"] = {"count": r.get("count", 0), "source": r.get("source"),
                           **readable_guards(r.get("guards") or [], contexts.get(str(r.get("frame_id"))))}
        elif kind == "graph_file":
            name = _FILE_KEYS.get(str(r.get("kind")), str(r.get("kind")))
            part = r.get("part")
            if part and part not in ("forward", "inference"):
                name = f"{name}_{part}"
            if r.get("path"):
                g["files"][name] = r["path"]
            for k in r.get("kernels") or []:
                if k["name"] not in g["kernels"]:
                    g["kernels"].append(k["name"])
            for op, n in (r.get("fallbacks") or {}).items():
                g["fallbacks"][op] = g["fallbacks"].get(op, 0) + n
        elif kind == "cache":
            if g["cache"] is None:
                g["cache"] = ("hit" if r["name"].endswith("_hit") else "bypass" if r["name"].endswith("_bypass")
                              else "miss")
            if r["name"].startswith("fx_graph_cache") and r.get("key") and r["key"] not in g["fx_keys"]:
                g["fx_keys"].append(r["key"])
        elif kind == "recompile_reasons":
            guards = _recompile_guards(r.get("payload", ""))
            if guards:
                words = guard_failure_in_words(guards[0], contexts.get(str(r.get("frame_id"))), torch_version)
                g["recompile_reason"] = {"guard": guards[0], "what": words["what"], "cause": words["cause"]}
    for r in break_records:
        g = graphs.get(gid(r))
        b = parse_graph_break(r.get("payload", ""))
        if g is not None and b is not None:
            g["ended_by_break"] = {k: b[k] for k in ("file", "line", "function", "reason", "code")}


_FILE_KEYS = {
    "dynamo_output_graph": "dynamo_graph", "aot_forward_graph": "aot_forward_graph",
    "aot_backward_graph": "aot_backward_graph", "aot_inference_graph": "aot_inference_graph",
    "inductor_post_grad_graph": "post_grad_graph", "inductor_output_code": "output_code",
    "dynamo_cpp_guards_str": "guards",
}


def _charge_breaks(breaks: list[dict], graphs: dict, frame_name: dict) -> None:
    """What each graph break costs in compiling: every graph of the function resumed after it
    (`torch_dynamo_resume_in_<function>_at_<line>`) is compiled because of it, with all of its
    recompilations (a value that crosses a break is a constant of the next graph: a new value
    recompiles it). Without the break that code would be part of one graph: an upper bound."""
    for b in breaks:
        resumed = {fid for fid, (name, _file, _line) in frame_name.items()
                   if (m := _RESUME.match(name)) and m.group(1) == b["function"] and int(m.group(2)) == b["line"]}
        mine = [g for gid_, g in graphs.items() if gid_.split("/")[0] in resumed]
        b["compile_s_caused"] = sum(g["time_s"]["total"] for g in mine)
        b["recompiles_caused"] = sum(1 for g in mine if g["recompile"])
        b["graphs_caused"] = [g["id"] for g in mine]
        b["resumed_frames"] = sorted(int(f) for f in resumed if f.isdigit())


def _function_key(m: dict, known: list[tuple], stack: list[dict]) -> tuple | None:
    """(file, line, function, label) of the user code a compiled frame belongs to; `known` holds
    those met so far (a resume function joins the function it continues).

    A frame in library code (a compiled module is entered through torch's own wrappers) is
    placed at the user line that called it, from the stack dynamo started from."""
    name, file, line = m.get("co_name"), m.get("co_filename"), m.get("co_firstlineno")
    if not name or not file:
        return None
    if not is_user_file(file):
        caller = next((f for f in reversed(stack) if is_user_file(f.get("file") or "")), None)
        if caller is None:
            key = (file, int(line or 0), name, f"{name}()")
        else:
            where = f"{os.path.basename(caller['file'])}:{caller['line']}"
            key = (caller["file"], int(caller["line"] or 0), caller.get("function") or "",
                   f"the compiled call at {where}")
        if key not in known:
            known.append(key)
        return key
    resumed = _RESUME.match(name)
    if resumed:
        # A resume function continues `name` after a break: it belongs to that function.
        name = resumed.group(1)
        for k in known:
            if k[0] == file and k[2] == name:
                return k
    key = (file, int(line or 0), name, f"{name}()")
    known.append(key)
    return key


def _stages(m: dict) -> dict:
    """Split the nested cumulative times: entire ⊇ backend (AOT + inductor) ⊇ inductor ⊇ codegen."""
    entire = m.get("entire_frame_compile_time_s") or 0.0
    backend = m.get("backend_compile_time_s") or 0.0
    inductor = m.get("inductor_compile_time_s") or 0.0
    codegen = m.get("code_gen_time_s") or 0.0
    return {"dynamo": max(entire - backend, 0.0), "aot": max(backend - inductor, 0.0),
            "inductor": max(inductor - codegen, 0.0), "codegen": codegen}


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def parse_graph_break(payload: str) -> dict | None:
    """File, line, function and the reason in a few words, from a `dynamo_graph_break_reason`.

    `skipped_function`: dynamo could not resume after this break (e.g. inside a loop or a `with`
    block) and runs the whole function eagerly from then on."""
    lines = payload.splitlines()
    if not lines:
        return None
    at = _BREAK_AT.match(lines[0])
    if not at:
        return None
    file, line = at.group(1), int(at.group(2))
    title, explanation, hints = "", "", []
    skipped = False
    for i, text in enumerate(lines[1:], start=1):
        s = text.strip()
        if s.startswith("Graph Break Reason:"):
            title = s[len("Graph Break Reason:"):].strip()
            if title.startswith("Failed to handle graph break gracefully"):
                skipped = True  # dynamo gave up on the whole function; the real reason follows
            if title.startswith(("Encountered graph break when attempting to trace",
                                 "Failed to handle graph break gracefully")):
                title = next((t.strip() for t in lines[i + 1:] if t.strip()), title)
        elif s.startswith("Explanation:") and not explanation:
            explanation = s[len("Explanation:"):].strip()
        elif s.startswith("Hint:"):
            hints.append(s[len("Hint:"):].strip())
        elif s.startswith("User code traceback:") or s.startswith("Traceback"):
            break
    function = ""
    code = ""
    if "User code traceback:" in payload:
        tb = payload.split("User code traceback:", 1)[1].split("\n\n", 1)[0].splitlines()
        for j, text in enumerate(tb):
            mm = _TB_LINE.match(text)
            if mm and mm.group(1) == file and int(mm.group(2)) == line:
                function = mm.group(3)
                code = tb[j + 1].strip() if j + 1 < len(tb) else ""
    resumed = _RESUME.match(function)
    if resumed:
        function = resumed.group(1)
    return {"file": file, "line": line, "function": function, "code": code, "reason": title,
            "explanation": explanation, "hints": [h for h in hints if "report an issue" not in h][:3],
            "skipped_function": skipped}


def _graph_breaks(records: list[dict]) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for r in records:
        b = parse_graph_break(r.get("payload", ""))
        if b is None:
            continue
        key = (b["file"], b["line"], b["reason"])
        if key in seen:
            seen[key]["count"] += 1
        else:
            seen[key] = b | {"count": 1, "user_code": is_user_file(b["file"])}
    return sorted(seen.values(), key=lambda b: (b["file"], b["line"]))


def guard_in_words(guard: str, torch_version: str | None = None) -> dict:
    """A failed guard as a person would say it, with the usual fix (no frame context)."""
    return guard_failure_in_words(guard, None, torch_version)


def _recompile_guards(payload: str) -> list[str]:
    """The failed guards in a recompile_reasons payload (one string, or a JSON list of them)."""
    text = payload.strip()
    entries: list[str]
    if text.startswith("["):
        try:
            entries = json.loads(text)
        except json.JSONDecodeError:  # cut at the payload limit: take the complete lines
            entries = [ln.strip().strip(",").strip('"') for ln in text.splitlines()[1:] if ln.strip()]
    else:
        entries = [text]
    out = []
    for e in entries:
        m = _GUARD_ENTRY.match(e.splitlines()[0] if e else "")
        if m:
            out.append(m.group(3).split("#", 1)[0].strip())  # the guard, without its source comment
    return out


def _recompiles(records: list[dict], frame_key: dict, frames: dict, contexts: dict | None = None,
                torch_version: str | None = None) -> list[dict]:
    by_fn: dict[tuple, dict] = {}
    for r in records:
        key = frame_key.get(str(r.get("frame_id")))
        guards = _recompile_guards(r.get("payload", ""))
        if not guards or key is None:
            continue
        d = by_fn.setdefault(key, {"file": key[0], "line": key[1], "function": key[2], "label": key[3],
                                   "count": 0,
                                   "reasons": {}})
        d["count"] += 1
        guard = guards[0]  # the newest cache entry's failure: why this one recompiled
        ctx = (contexts or {}).get(str(r.get("frame_id")))
        words = guard_failure_in_words(guard, ctx, torch_version)
        group, values = words.pop("group", None), words.pop("values", None)
        k = words["cause"] + ":" + (group or guard.split("==")[0].strip())
        entry = d["reasons"].setdefault(k, words | {"guard": guard, "count": 0, "guards": []})
        entry["count"] += 1
        if ctx is not None and ctx.resumes_after_line:
            entry["after_break_at_line"] = ctx.resumes_after_line
        if group:  # one dimension that keeps changing: list its sizes in the order seen
            seen = entry.setdefault("sizes", [])
            for v in values:
                if not seen or seen[-1] != v:
                    seen.append(v)
            entry["what"] = f"{group} ({' -> '.join(seen[:12])}{' -> ...' if len(seen) > 12 else ''})"
        if len(entry["guards"]) < 10:
            entry["guards"].append(guard)
    out = []
    for key, d in by_fn.items():
        d["reasons"] = sorted(d["reasons"].values(), key=lambda e: -e["count"])
        fr = frames.get(key)
        d["recompile_s"] = fr["recompile_s"] if fr else 0.0
        out.append(d)
    return sorted(out, key=lambda d: -d["count"])


def _limit_hit(message: str) -> dict | None:
    m = re.search(r"function: '(.+)' \((.+):(\d+)\)", message)
    if not m:
        return None
    last = re.search(r"last reason: \d+/\d+: (.*)", message)
    return {"function": m.group(1), "file": m.group(2), "line": int(m.group(3)),
            "last_guard": last.group(1).split("#")[0].strip() if last else ""}


def wall_split(compile_log: dict, trace_compiled: dict | None, run_wall_s: float, window_s: float) -> dict | None:
    """Where a compiled program's time goes: compiling (the whole run, from the compile log),
    and within the profiled window, compiled graphs, code run eagerly between graphs inside
    compiled functions, and code outside compiled functions (from the trace's regions).

    Adds each frame's window figures (`window`: `{in_function_s, compiling_s, graphs_s, eager_s}`) to
    `compile_log["frames"]`, matched on dynamo's frame ids. `graphs_s` and `eager_s` are None
    when the backend leaves no graph-call span in the trace (backend "eager")."""
    if not compile_log.get("present"):
        return None
    compiling = compile_log["time_s"]["total"]
    out = {"run_wall_s": run_wall_s, "compiling_s": compiling,
           "compiling_pct": 100 * compiling / run_wall_s if run_wall_s > 0 else None, "window": None}
    if not trace_compiled or not trace_compiled.get("present") or window_s <= 0:
        return out
    by_id = {f["frame"]: f for f in trace_compiled["frames"]}
    for fr in compile_log["frames"]:
        mine = [by_id[i] for i in fr.get("frame_ids", []) if i in by_id]
        if not mine:
            continue
        split = all(m["eager_us"] is not None for m in mine)
        fr["window"] = {
            "in_function_s": sum(m["time_us"] - m["nested_us"] for m in mine) / 1e6,
            "compiling_s": sum(m["compile_us"] for m in mine) / 1e6,
            "graphs_s": sum(m["graph_us"] for m in mine) / 1e6 if split else None,
            "eager_s": sum(m["eager_us"] for m in mine) / 1e6 if split else None,
        }
    link_origins(compile_log, trace_compiled)
    in_regions = trace_compiled["time_in_regions_us"] / 1e6
    graphs = trace_compiled.get("graph_call_us")
    eager = trace_compiled.get("eager_in_regions_us")
    out["window"] = {
        "window_s": window_s, "in_compiled_functions_s": in_regions,
        "compiling_s": trace_compiled.get("compiling_in_regions_us", 0.0) / 1e6,
        "graphs_s": graphs / 1e6 if graphs is not None else None,
        "eager_between_graphs_s": eager / 1e6 if eager is not None else None,
        "outside_compiled_s": max(window_s - in_regions, 0.0),
    }
    return out


def link_origins(compile_log: dict, trace_compiled: dict) -> None:
    """Name the compiled graph (dynamo compile id) each op and kernel of the trace came from:
    a graph call's FX cache key is the key the compile log recorded for that graph; a kernel's
    name is one the graph's output code defines (names repeat across graphs: all are listed)."""
    origins = trace_compiled.get("origins") or {}
    by_key = {k: g["id"] for g in compile_log.get("graphs", []) for k in g.get("fx_keys") or []}
    by_kernel: dict[str, list[str]] = {}
    for g in compile_log.get("graphs", []):
        for k in g.get("kernels") or []:
            by_kernel.setdefault(k, []).append(g["id"])
    for kind in ("ops", "kernels"):
        for name, d in (origins.get(kind) or {}).items():
            ids = [by_key[k] for k in d.get("graph_calls", []) if k in by_key]
            ids += [i for i in by_kernel.get(name, []) if i not in ids] if kind == "kernels" else []
            d["graphs"] = ids
