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

_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
_BREAK_AT = re.compile(r"^Graph break in user code at (.+):(\d+)\s*$")
_TB_LINE = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')
_GUARD_ENTRY = re.compile(r"^(\d+)/(\d+): (.*)$")
_SIZE = re.compile(r"^tensor '(.+)' (size|stride) mismatch at index (\d+)\. expected (\S+), actual (\S+)")
_TENSOR_PROP = re.compile(r"^tensor '(.+)' (dtype|device|requires_grad|dispatch key set) mismatch\.?\s*(.*)$")
_EQUALS = re.compile(r"^(.+?) == (.+)$")


def compile_summary(log: dict | None) -> dict:
    """Everything the compile findings need, from a decoded compile.json.

    - `frames`: per user function that dynamo compiled (resume functions after a graph break
      are folded into the function they resume), its compilations, graphs, recompilations and
      compile seconds by stage;
    - `graph_breaks`: one entry per distinct (file, line, reason), with how often dynamo hit it;
    - `recompiles`: per function, how many recompilations and the failed guards in plain words;
    - `limit_hits`: functions that hit `recompile_limit` and run eagerly from then on;
    - `time_s`: compile seconds split into dynamo (tracing), aot (AOT autograd), inductor
      (lowering) and codegen, computed from the nested cumulative figures torch reports.
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
    known: list[tuple] = []
    starts = {(str(r.get("frame_id")), str(r.get("frame_compile_id"))): r.get("stack", [])
              for r in records if r.get("type") == "dynamo_start"}
    for m in metrics:
        ids = str(m.get("compile_id", "0/0")).split("/")  # "frame/compile": compile > 0 is a recompile
        key = _function_key(m, known, starts.get((ids[0], ids[-1]), []))
        if key is None:
            continue
        key = frame_key.get(ids[0], key)  # a frame id keeps the function of its first compilation
        frame_key[ids[0]] = key
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
        for k, v in stages.items():
            d["stages_s"][k] += v
            totals[k] += v
        d["compile_s"] += sum(stages.values())
        if len(ids) == 2 and ids[1].isdigit() and int(ids[1]) > 0:
            d["recompilations"] += 1
            d["recompile_s"] += sum(stages.values())
        if m.get("fail_type"):
            d["failures"].append({"type": m["fail_type"], "reason": _first_line(m.get("fail_reason") or "")})
    breaks = _graph_breaks([r for r in records if r.get("type") == "dynamo_graph_break_reason"])
    recompiles = _recompiles([r for r in records if r.get("type") == "recompile_reasons"], frame_key, frames)
    limits = [_limit_hit(w["message"]) for w in log.get("warnings", [])]
    cache = {}
    for r in records:
        if r.get("type") == "cache":
            cache[r["name"]] = cache.get(r["name"], 0) + 1
    return {
        "present": True,
        "available": True,
        "frames": sorted(frames.values(), key=lambda d: -d["compile_s"]),
        "graph_breaks": breaks,
        "recompiles": recompiles,
        "limit_hits": [x for x in limits if x],
        "time_s": totals | {"total": sum(totals.values())},
        "cache": cache,
        "records_dropped": log.get("dropped", 0),
    }


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


def guard_in_words(guard: str) -> dict:
    """A failed guard as a person would say it, with the usual fix."""
    g = guard.split("#", 1)[0].strip()
    m = _SIZE.match(g)
    if m:
        name, what, dim, old, new = m.groups()
        return {"what": f"{what} of tensor '{name}' changed in dim {dim} ({old} -> {new})",
                "cause": "shape", "fix": f"torch._dynamo.mark_dynamic({name}, {dim}) before the call, "
                "torch.compile(dynamic=True), or pad inputs to a few fixed sizes",
                "group": f"{what} of tensor '{name}' changed in dim {dim}", "values": [old, new]}
    m = _TENSOR_PROP.match(g)
    if m:
        name, prop, detail = m.groups()
        return {"what": f"{prop} of tensor '{name}' changed ({detail.strip()})".replace(" ()", ""),
                "cause": prop.replace(" ", "_"), "fix": f"keep '{name}' at one {prop} across calls"}
    if g.startswith("GLOBAL_STATE changed"):
        state = g.split(":", 1)[1].strip() if ":" in g else "global state"
        return {"what": f"global state changed: {state}", "cause": "global_state",
                "fix": "call the compiled function under one grad / autocast mode (or compile one per mode)"}
    if "___check_obj_id" in g or "ID_MATCH" in g:
        return {"what": "a different Python object was passed (identity guard)", "cause": "object_id",
                "fix": "pass the same module / object each call, or make the value a tensor input"}
    m = _EQUALS.match(g)
    if m:
        name, value = m.group(1).strip(), m.group(2).strip()
        return {"what": f"Python value {name} changed (a graph was specialised for {name} == {value})",
                "cause": "python_value",
                "fix": f"pass {name} as a tensor, or let dynamo treat it as dynamic (do not force "
                       "dynamic=False; torch.compile(dynamic=True))"}
    return {"what": g, "cause": "other", "fix": "see the guard; TORCH_LOGS=recompiles shows all of them"}


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


def _recompiles(records: list[dict], frame_key: dict, frames: dict) -> list[dict]:
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
        words = guard_in_words(guard)
        group, values = words.pop("group", None), words.pop("values", None)
        k = words["cause"] + ":" + (group or guard.split("==")[0].strip())
        entry = d["reasons"].setdefault(k, words | {"guard": guard, "count": 0, "guards": []})
        entry["count"] += 1
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
