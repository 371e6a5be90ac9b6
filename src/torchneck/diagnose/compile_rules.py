"""Findings about torch.compile: graph breaks, recompilations, compile time.

They read the run's compile log (`Evidence.compile`, see analysis/compile.py) and, for the cost
of running code between graphs, the trace (`analysis["compiled"]`). Compile costs are paid over
the whole run, not per step, so their `time_lost_pct` is a share of the run's wall time
(`evidence["share_of"] == "run_wall"`).
"""

from __future__ import annotations

from ..analysis.compile_guards import recompile_limit_name, torch_version_tuple
from .findings import MEDIUM_SHARE, SEVERITY_ORDER, Finding, severity_for, where_of

DOCS_BREAKS = "https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html#graph-breaks"
DOCS_RECOMPILES = "https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html#recompilations"
DOCS_COMPILE_TIME = "https://docs.pytorch.org/tutorials/recipes/torch_compile_caching_tutorial.html"


def _wall_pct(seconds: float, wall_s: float) -> float:
    return 100 * seconds / wall_s if wall_s > 0 else 0.0


def _break_fix(b: dict) -> str:
    """The change that removes a break of this kind; torch's own first hint otherwise."""
    reason = (b["reason"] + " " + b["explanation"]).lower()
    code = b.get("code", "")
    if "print" in reason or "logging" in reason:
        return ("Remove the print/log from the compiled function (log outside it), or add the function "
                "to torch._dynamo.config.reorderable_logging_functions.")
    if "data-dependent branching" in reason or "jump" in reason:
        return ("Make the branch tensor code: torch.where(cond, a, b) for both branches, or torch.cond; "
                "or move the check out of the compiled function.")
    if "item" in reason or ".item()" in code or "scalar" in reason:
        return ("Keep the value a tensor instead of calling .item(), or set "
                "torch._dynamo.config.capture_scalar_outputs = True.")
    if "numpy" in reason or ".numpy()" in code:
        return "Use torch ops on the tensor instead of a NumPy round trip inside the compiled function."
    if b["hints"]:
        return b["hints"][0] + " (torch.compile(fullgraph=True) stops at the first break.)"
    return "Run torch.compile(fullgraph=True) to stop at this break and rewrite the code it names."


def _at_least_medium(severity: str) -> str:
    """A break with no measured cost, or one that left a function uncompiled, still matters."""
    return severity if severity == "high" else "medium"


def _worse(a: str, b: str) -> str:
    return a if SEVERITY_ORDER.get(a, 3) <= SEVERITY_ORDER.get(b, 3) else b


def compile_severity(compile_s: float, run_wall_s: float) -> str:
    """Severity of a one-time compile cost: `medium` from `MEDIUM_SHARE` of the run on, never
    `high` (a long job amortises it, see CompileTime)."""
    return "medium" if run_wall_s > 0 and compile_s / run_wall_s >= MEDIUM_SHARE else "low"


def _torch_version(ev) -> str | None:
    return (ev.env or {}).get("torch")


MEGA_CACHE_SINCE = (2, 7)
"""torch.compiler.save_cache_artifacts / load_cache_artifacts exist from torch 2.7 on."""


def _has_mega_cache(version: str | None) -> bool:
    v = torch_version_tuple(version)
    return v is None or v >= MEGA_CACHE_SINCE


def _broken_frame(b: dict, frames: list[dict]) -> dict | None:
    """The compiled function a break is in, when the trace split its window time into graph
    and eager time (`window` from analysis/compile.wall_split)."""
    for f in frames:
        if f["file"] == b["file"] and f["function"] == b["function"] \
                and (f.get("window") or {}).get("eager_s") is not None:
            return f
    return None


class GraphBreaks:
    """One finding per place dynamo broke the graph in the user's code, with torch's reason.

    Time lost (an upper bound): the time the broken function spent outside its compiled
    graphs in the profiled window (the code at the break, guards, resume glue), shared among
    that function's breaks; when the trace cannot split graph from eager time (backend "eager"
    leaves no graph-call spans), the eager host time between compiled regions shared among all
    breaks; zero when no trace shows compiled regions. A break splits the function into
    separate graphs (no fusion across it) and runs the code at the break eagerly on every call."""

    kind = "graph_break"
    MAX_FINDINGS = 5
    """Breaks beyond the fifth are listed in the first finding's evidence, not each on its own."""

    def check(self, ev) -> list[Finding]:
        c = ev.compile or {}
        breaks = [b for b in c.get("graph_breaks", []) if b.get("user_code")]
        if not breaks:
            return []
        eager_s = 0.0
        if ev.analysis and ev.analysis["compiled"].get("present"):
            eager_s = ev.analysis["compiled"]["eager_top_level_us"] / 1e6
        out = []
        for i, b in enumerate(breaks[: self.MAX_FINDINGS]):
            frame = _broken_frame(b, c.get("frames", []))
            if frame is not None:
                in_function = sum(1 for x in breaks if _broken_frame(x, c.get("frames", [])) is frame)
                spent_s = frame["window"]["eager_s"]
                per_break = spent_s / in_function
            else:
                spent_s, per_break = eager_s, eager_s / len(breaks)
            pct = 100 * per_break / ev.window_s if ev.window_s > 0 else 0.0
            caused_s = b.get("compile_s_caused", 0.0)
            evidence = {"reason": b["reason"], "explanation": b["explanation"], "code": b.get("code", ""),
                        "times_hit": b["count"], "breaks_in_run": len(breaks),
                        "eager_between_graphs_s": spent_s,
                        "measured_in": "the broken function" if frame is not None else "the whole window",
                        "compile_s_caused": caused_s, "recompiles_caused": b.get("recompiles_caused", 0),
                        "graphs_caused": b.get("graphs_caused", []),
                        "compile_share_of_run": caused_s / ev.run_wall_s if ev.run_wall_s > 0 else None}
            if i == 0 and len(breaks) > self.MAX_FINDINGS:
                evidence["other_breaks"] = [{k: x[k] for k in ("file", "line", "reason")}
                                            for x in breaks[self.MAX_FINDINGS:]]
            name = f"{b['function'] or 'compiled code'}()"
            cost = _break_compile_cost(b)
            if b.get("skipped_function"):
                evidence["skipped_function"] = True
                title = (f"{name} runs eagerly: dynamo gave up on it at the graph break at line {b['line']} "
                         f"({b['reason']})")
                fix = (_break_fix(b) + " A break inside a loop or a `with` block cannot be resumed, so "
                       "dynamo skips the whole function (it is not compiled at all); if the break must "
                       "stay, compile the loop body as its own function.")
            else:
                title = (f"Graph break in {name} at line {b['line']}: {b['reason']}"
                         + (f" ({b['explanation']})" if b["explanation"] and len(b["explanation"]) <= 110 else "")
                         + cost)
                fix = _break_fix(b)
            severity = severity_for(pct / 100)
            if per_break <= 0 or b.get("skipped_function"):
                severity = _at_least_medium(severity)
            severity = _worse(severity, compile_severity(caused_s, ev.run_wall_s))
            out.append(Finding(
                kind=self.kind, severity=severity,
                title=title, time_lost_s=per_break, time_lost_pct=pct,
                where=where_of([b]),
                evidence=evidence, fix=fix, docs=DOCS_BREAKS))
        return out


def _break_compile_cost(b: dict) -> str:
    """'; the code after it cost 6.6 s of compiling (2 graphs, 1 recompile)' when it is worth saying."""
    caused = b.get("compile_s_caused", 0.0)
    if caused < BREAK_COST_SHOWN_S:
        return ""
    n, rec = len(b.get("graphs_caused") or []), b.get("recompiles_caused", 0)
    parts = [f"{n} graph{'s' if n != 1 else ''}"] + ([f"{rec} recompile{'s' if rec != 1 else ''}"] if rec else [])
    return f"; the code resumed after it cost {caused:.1f} s of compiling ({', '.join(parts)})"


BREAK_COST_SHOWN_S = 0.1
"""Compile seconds a break causes before its title says so (below, it is in the evidence only)."""


class Recompiles:
    """Functions dynamo compiled again because a guard failed, with the guard in plain words.

    Time lost: the seconds spent on the recompilations (compile time beyond each function's
    first compilation), as a share of the run. A function that hit `recompile_limit` runs
    eagerly from then on: that is `high` whatever the seconds."""

    kind = "recompile"
    MIN_RECOMPILES = 2
    """One recompile (e.g. dynamo switching a dimension to dynamic after the first change) is
    normal; two or more for one function is a pattern."""

    def check(self, ev) -> list[Finding]:
        c = ev.compile or {}
        limited = {(h["file"], h["function"]): h for h in c.get("limit_hits", [])}
        out = []
        for r in c.get("recompiles", []):
            hit = limited.get((r["file"], r["function"]))
            if r["count"] < self.MIN_RECOMPILES and not hit:
                continue
            top = r["reasons"][0] if r["reasons"] else {"what": "a guard failed", "fix": "", "guards": []}
            lost = r["recompile_s"]
            title = f"{r['label']} was recompiled {r['count']} times: {top['what']}"
            if hit:
                title += "; it hit the recompile limit and now runs eagerly"
            limit = recompile_limit_name(_torch_version(ev))
            after_break = top.get("after_break_at_line")
            where = where_of([r])
            if after_break:  # the recompiled code is the one resumed after a break: the break is the cause
                where = where_of([{"file": r["file"], "line": after_break, "function": r["function"]}]) + where
            out.append(Finding(
                kind=self.kind, severity="high" if hit else "",
                title=title, time_lost_s=lost, time_lost_pct=_wall_pct(lost, ev.run_wall_s),
                where=where,
                evidence={"recompilations": r["count"], "recompile_s": lost, "reasons": r["reasons"],
                          "hit_recompile_limit": bool(hit), "share_of": "run_wall",
                          **({"caused_by_break_at_line": after_break} if after_break else {})},
                fix=str(top["fix"] or "Make the changing input dynamic or keep it constant.")
                + (f" Raising torch._dynamo.config.{limit} only hides the problem." if hit else ""),
                docs=DOCS_RECOMPILES))
        return out


class CompileTime:
    """Time spent compiling, split by stage, when it is a large part of the run.

    A one-time cost: `medium` when it is half the run or more (short jobs, or every run paying a
    cold compile), `info` otherwise; never `high`, because a long job amortises it."""

    kind = "compile_time"
    MIN_SHARE = 0.10
    """Under a tenth of the run, compile time is not worth a line in the report."""
    MEDIUM_SHARE = 0.50
    EXPLAINED_SHARE = 0.5
    """When graph breaks and recompilations explain half the compile time or more, the finding is
    their symptom: its severity follows the part they do not explain."""

    def check(self, ev) -> list[Finding]:
        c = ev.compile or {}
        if not c.get("present") or ev.run_wall_s <= 0:
            return []
        t = c["time_s"]
        share = t["total"] / ev.run_wall_s
        if share < self.MIN_SHARE:
            return []
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in t.items() if k != "total" and v >= 0.05)
        frames = c.get("frames", [])[:3]
        caused_by = compile_causes(c)
        explained = sum(x["compile_s"] for x in caused_by)
        unexplained = max(t["total"] - explained, 0.0)
        severity = "medium" if share >= self.MEDIUM_SHARE else "info"
        title = f"Compiling took {t['total']:.1f} s, {100 * share:.0f}% of the run ({stages})"
        if caused_by and explained >= self.EXPLAINED_SHARE * t["total"]:
            # A symptom: the breaks and recompiles it lists are the findings to act on.
            severity = "medium" if unexplained / ev.run_wall_s >= self.MEDIUM_SHARE else "info"
            lines = ", ".join(f"line {x['line']}" for x in caused_by if x["kind"] == "graph_break")
            title += f"; {explained:.1f} s of it caused by " + (
                f"the graph breaks at {lines}" if lines else "recompilations") + (
                " and recompilations" if lines and any(x["kind"] == "recompile" for x in caused_by) else "")
        return [Finding(
            kind=self.kind, severity=severity,
            title=title,
            time_lost_s=t["total"], time_lost_pct=100 * share,
            where=where_of(frames),
            evidence={"time_s": t, "frames": [{k: f[k] for k in ("function", "file", "line", "compilations",
                                                                  "compile_s")} for f in frames],
                      "cache": c.get("cache", {}), "share_of": "run_wall",
                      "caused_by": caused_by, "explained_s": explained, "unexplained_s": unexplained},
            fix="Remove recompilations and graph breaks first (each graph is compiled separately); keep "
                "inductor's caches warm between runs (TORCHINDUCTOR_CACHE_DIR on persistent storage"
                + (", torch.compiler.save_cache_artifacts" if _has_mega_cache(_torch_version(ev)) else "")
                + "); compile the repeated block (regional compilation) rather than the whole model; avoid "
                "mode='max-autotune' for short jobs.",
            docs=DOCS_COMPILE_TIME)]


def compile_causes(c: dict) -> list[dict]:
    """What the compile time was spent on because of a fixable cause: each graph break (the
    graphs resumed after it, with their recompilations) and each function's recompilations not
    already charged to a break, most seconds first."""
    out = []
    charged: set[str] = set()
    for b in c.get("graph_breaks", []):
        if b.get("user_code") and b.get("compile_s_caused", 0.0) > 0:
            out.append({"kind": "graph_break", "file": b["file"], "line": b["line"], "function": b["function"],
                        "compile_s": b["compile_s_caused"], "recompiles": b.get("recompiles_caused", 0)})
            charged.update(b.get("graphs_caused") or [])
    by_fn: dict[tuple, dict] = {}
    for g in c.get("graphs", []):
        if g["recompile"] and g["id"] not in charged:
            d = by_fn.setdefault((g["file"], g["line"], g["function"]), {
                "kind": "recompile", "file": g["file"], "line": g["line"], "function": g["function"],
                "compile_s": 0.0, "recompiles": 0})
            d["compile_s"] += g["time_s"]["total"]
            d["recompiles"] += 1
    out += list(by_fn.values())
    return sorted(out, key=lambda x: -x["compile_s"])


COMPILE_RULES = [GraphBreaks(), Recompiles(), CompileTime()]
