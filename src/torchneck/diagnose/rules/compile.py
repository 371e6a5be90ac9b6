"""Rules on torch.compile: graph breaks, recompilations, compile time.

They read the run's compile log (`Facts.compile`, see analysis/compile.py) and, for the cost of
running code between graphs, the trace (`RankAnalysis.compiled`); a trace without the run's
log (`torchneck analyze`) still shows breaks as nested compiled regions and recompiles as
compile ids. Compile costs are paid over the whole run, not per step, so those findings'
`time_lost_pct` is a share of the run's wall time (`evidence.share_of == "run_wall"`).
"""

from __future__ import annotations

import ast
import os
import re
from typing import Any

from ...analysis.compile_guards import recompile_limit_name, torch_version_tuple
from ...model.analysis import CompiledFrame
from ...model.base import Record
from ...model.findings import Finding, Severity, Where
from ...trace.normalise import COMPILE_STAGE_SUFFIX
from ..facts import Facts, where_of
from ..rule import MEDIUM_SHARE, Explanation, Rule, register, severity_for, worse
from ..source import (
    _is_compile,
    calls_of,
    compile_call_lines,
    compile_dynamic,
    compiled_callee,
    enclosing,
    function_at,
    mentions,
    parameter_position,
    size_origin,
)

DOCS_BREAKS = "https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html#graph-breaks"
DOCS_RECOMPILES = "https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html#recompilations"
DOCS_COMPILE_TIME = "https://docs.pytorch.org/tutorials/recipes/torch_compile_caching_tutorial.html"

MEGA_CACHE_SINCE = (2, 7)
"""torch.compiler.save_cache_artifacts / load_cache_artifacts exist from torch 2.7 on."""


def _wall_pct(seconds: float, wall_s: float) -> float:
    return 100 * seconds / wall_s if wall_s > 0 else 0.0


def _torch_version(facts: Facts) -> str | None:
    return facts.env.get("torch")


def compile_severity(compile_s: float, run_wall_s: float) -> Severity:
    """Severity of a one-time compile cost: `medium` from `MEDIUM_SHARE` of the run on, never
    `high` (a long job amortises it, see CompileTime)."""
    return "medium" if run_wall_s > 0 and compile_s / run_wall_s >= MEDIUM_SHARE else "low"


class GraphBreakEvidence(Record):
    reason: str
    """torch's reason for the break (from the compile log; "nested compiled regions" from a trace)."""
    source: str
    """"compile_log" (the run's own log: line and reason) or "trace" (nested compiled regions)."""
    explanation: str = ""
    code: str = ""
    """The user's source line at the break."""
    hints: list[str] = []
    """torch's own hints for this break."""
    times_hit: int = 0
    breaks_in_run: int = 0
    eager_between_graphs_s: float = 0.0
    """Window time the broken function spent outside its graphs (the code at the break, guards, glue)."""
    measured_in: str = ""
    compile_s_caused: float = 0.0
    """Compile seconds of the code resumed after the break (its graphs and their recompiles)."""
    recompiles_caused: int = 0
    graphs_caused: list[str] = []
    compile_share_of_run: float | None = None
    skipped_function: bool = False
    """A break dynamo could not resume from (in a loop or a `with` block): the function runs eagerly."""
    other_breaks: list[dict[str, Any]] = []
    """Breaks beyond the first MAX_FINDINGS (file, line, reason), on the first finding only."""
    nested_region_calls: int = 0


def _broken_frame(b: dict, frames: list[dict]) -> dict | None:
    """The compiled function a break is in, when the trace split its window time into graph
    and eager time (`window` from analysis/compile.wall_split)."""
    for f in frames:
        if f["file"] == b["file"] and f["function"] == b["function"] \
                and (f.get("window") or {}).get("eager_s") is not None:
            return f
    return None


COMPILING_SYMPTOMS = ("dispatch_overhead", "op_hotspot", "python_hotspot")
"""Findings on ops that may lie inside a compile stage (dynamo and AOT trace the model by
running its ops, one by one, through Python): then they are compiling, not the program's steps."""


def while_compiling(symptom: Finding) -> Explanation | None:
    """All of `symptom` when its ops lie inside one of torch.compile's own stages
    (`... (dynamo_timed)` spans, named as the finding's label)."""
    if symptom.label and symptom.label.endswith(COMPILE_STAGE_SUFFIX):
        return Explanation(symptom.time_lost_s)
    return None


@register
class GraphBreaks(Rule[GraphBreakEvidence]):
    """One finding per place dynamo broke the graph in the user's code, with torch's reason, and
    the compile time and recompiles the code resumed after the break cost.

    Time lost (an upper bound): the time the broken function spent outside its compiled
    graphs in the profiled window (the code at the break, guards, resume glue), shared among
    that function's breaks; when the trace cannot split graph from eager time (backend "eager"
    leaves no graph-call spans), the eager host time between compiled regions shared among all
    breaks. A break splits the function into separate graphs (no fusion across it), runs the
    code at the break eagerly on every call, and compiles the rest as separate graphs.

    A trace without the run's compile log shows breaks as compiled regions nested in others:
    then one finding for them all, costed as the eager time between regions."""

    kind = "graph_break"
    summary = "torch.compile breaks the graph at a line of your code (print, .item(), data-dependent if...)."
    docs = DOCS_BREAKS
    evidence_type = GraphBreakEvidence
    confidence = "measured"
    saving_basis = ("the broken function's eager time between its graphs (window), plus the compile seconds "
                    "of the code resumed after the break")
    explains = ("compile_time", "recompile", "python_hotspot", "dispatch_overhead")
    MAX_FINDINGS = 5
    """Breaks beyond the fifth are listed in the first finding's evidence, not each on its own."""
    UNCOMPILED_SAVING = 0.5
    """The share of a function's eager time that compiling it saves, assumed where a break left
    the whole function uncompiled (no graph to compare with): inductor fuses its element-wise ops
    and removes their per-op dispatch. The zoo's two such forwards (stencil loops) ran x1.9 and
    x2.6 faster compiled; a matmul-bound function gains less."""
    COST_SHOWN_S = 0.1
    """Compile seconds a break causes before its title says so (below, it is in the evidence only)."""

    def check(self, facts: Facts) -> list[Finding]:
        c = facts.compile or {}
        if not c.get("present"):
            return self._from_trace(facts)
        breaks = [b for b in c.get("graph_breaks", []) if b.get("user_code")]
        if not breaks:
            return []
        a = facts.analysis
        eager_s = a.compiled.eager_top_level_us / 1e6 if a and a.compiled.present else 0.0
        frames = c.get("frames", [])
        out = []
        for i, b in enumerate(breaks[: self.MAX_FINDINGS]):
            frame = _broken_frame(b, frames)
            if frame is not None:
                in_function = sum(1 for x in breaks if _broken_frame(x, frames) is frame)
                spent_s = frame["window"]["eager_s"]
                per_break = spent_s / in_function
            else:
                spent_s, per_break = eager_s, eager_s / len(breaks)
            uncompiled_s = self._uncompiled_s(facts, b) if b.get("skipped_function") and per_break <= 0 else 0.0
            if uncompiled_s > 0:  # no graphs to split time with: the function's sampled share, all eager
                spent_s = uncompiled_s
                per_break = uncompiled_s * self.UNCOMPILED_SAVING / max(len(breaks), 1)
            pct = facts.pct(per_break)
            caused_s = b.get("compile_s_caused", 0.0)
            ev = GraphBreakEvidence(
                reason=b["reason"], source="compile_log", explanation=b["explanation"], code=b.get("code", ""),
                hints=list(b.get("hints") or []), times_hit=b["count"], breaks_in_run=len(breaks),
                eager_between_graphs_s=spent_s,
                measured_in="the broken function" if frame is not None else "the whole window",
                compile_s_caused=caused_s, recompiles_caused=b.get("recompiles_caused", 0),
                graphs_caused=list(b.get("graphs_caused") or []),
                compile_share_of_run=caused_s / facts.run_wall_s if facts.run_wall_s > 0 else None,
                skipped_function=bool(b.get("skipped_function")),
                other_breaks=[{k: x[k] for k in ("file", "line", "reason")} for x in breaks[self.MAX_FINDINGS:]]
                if i == 0 else [])
            name = f"{b['function'] or 'compiled code'}()"
            if ev.skipped_function:
                title = (f"{name} runs eagerly: dynamo gave up on it at the graph break at line {b['line']} "
                         f"({b['reason']})")
            else:
                explanation = f" ({b['explanation']})" if b["explanation"] and len(b["explanation"]) <= 110 else ""
                title = f"Graph break in {name} at line {b['line']}: {b['reason']}{explanation}{self._cost(ev)}"
            found = self.finding(ev, title=title, lost_s=per_break, pct=pct, where=where_of([b]),
                                 confidence="estimated" if uncompiled_s > 0 else None)
            found.severity = worse(worse(severity_for(pct / 100), compile_severity(caused_s, facts.run_wall_s)),
                                   self.least_severity(found))
            out.append(found)
        return out

    @staticmethod
    def _uncompiled_s(facts: Facts, brk: dict) -> float:
        """The window's seconds in the function a break left uncompiled, from its sampled share of
        the steady state (the trace has no compiled region of it to measure)."""
        win = (facts.python or {}).get("window") or {}
        total = win.get("sampled_s") or 0.0
        name, file = brk.get("function") or "", os.path.basename(brk.get("file") or "")
        if total <= 0 or not name or facts.window_s <= 0:
            return 0.0
        sampled = sum(f.get("total_s") or 0.0 for f in win.get("functions", [])
                      if os.path.basename(f.get("file") or "") == file
                      and (f.get("function") == name or str(f.get("function")).endswith("." + name)))
        return min(sampled / total, 1.0) * facts.window_s

    def least_severity(self, finding: Finding) -> Severity:
        """A break with no measured eager cost, or one that left a function uncompiled, still matters."""
        if finding.evidence.get("skipped_function") or finding.time_lost_s <= 0:
            return "medium"
        return "info"

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """The compile seconds of the code resumed after the break (its graphs and recompiles)
        are compile time the break causes, on top of its eager cost; a recompile of that code is
        the break's doing too (already in those seconds)."""
        if not cause.where:
            return None
        if symptom.kind == "compile_time":
            caused = float(cause.evidence.get("compile_s_caused") or 0.0)
            return Explanation(caused, adds=True) if caused > 0 else None
        if symptom.kind in ("python_hotspot", "dispatch_overhead"):
            return _eager_because_of(cause, symptom)
        at = symptom.evidence.get("caused_by_break_at_line")
        if at == cause.where[0].line and any(w.file == cause.where[0].file for w in symptom.where):
            return Explanation(symptom.time_lost_s)
        return None

    def _from_trace(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.compiled.present or not a.compiled.nested_region_calls:
            return []
        c = a.compiled
        eager = c.eager_top_level_us / 1e6
        ev = GraphBreakEvidence(reason="compiled code resumes in nested compiled regions", source="trace",
                                eager_between_graphs_s=eager, measured_in="the whole window",
                                nested_region_calls=c.nested_region_calls)
        return [self.finding(ev, title=f"Graph breaks: compiled code resumes in {c.nested_region_calls} nested "
                                       "region(s)", lost_s=eager, pct=facts.pct(eager))]

    def _cost(self, ev: GraphBreakEvidence) -> str:
        """'; the code resumed after it cost 6.6 s of compiling (2 graphs, 1 recompile)' when worth saying."""
        if ev.compile_s_caused < self.COST_SHOWN_S:
            return ""
        n, rec = len(ev.graphs_caused), ev.recompiles_caused
        parts = [f"{n} graph{'s' if n != 1 else ''}"] + ([f"{rec} recompile{'s' if rec != 1 else ''}"] if rec else [])
        return f"; the code resumed after it cost {ev.compile_s_caused:.1f} s of compiling ({', '.join(parts)})"

    def fix(self, evidence: GraphBreakEvidence) -> str:
        if evidence.source == "trace":
            return ("Run with torch.compile(fullgraph=True) to see the first break, then remove it "
                    "(print, .item(), data-dependent if, unsupported call).")
        fix = _break_fix(evidence)
        if evidence.skipped_function:
            fix += (" A break inside a loop or a `with` block cannot be resumed, so dynamo skips the whole "
                    "function (it is not compiled at all); if the break must stay, compile the loop body as its "
                    "own function.")
        return fix


def _eager_because_of(brk: Finding, symptom: Finding) -> Explanation | None:
    """Python or tiny ops that run eagerly only because of the break: in the function dynamo gave
    up on (all of it runs eagerly), or on the breaking line itself. Compiling them is the fix, and
    that time is not in the break's own (eager glue) cost: it adds to its saving."""
    at = brk.where[0]
    for w in symptom.where:
        in_function = w.file == at.file and (w.function == at.function or w.function.endswith("." + at.function))
        if in_function and (brk.evidence.get("skipped_function") or w.line == at.line):
            return Explanation(symptom.time_lost_s, adds=True)
    return None


def _break_fix(b: GraphBreakEvidence) -> str:
    """The change that removes a break of this kind; torch's own first hint otherwise."""
    reason = (b.reason + " " + b.explanation).lower()
    if "print" in reason or "logging" in reason:
        return ("Remove the print/log from the compiled function (log outside it), or add the function "
                "to torch._dynamo.config.reorderable_logging_functions.")
    if "data-dependent branching" in reason or "jump" in reason:
        return ("Make the branch tensor code: torch.where(cond, a, b) for both branches, or torch.cond; "
                "or move the check out of the compiled function.")
    if "item" in reason or ".item()" in b.code or "scalar" in reason:
        return ("Keep the value a tensor instead of calling .item(), or set "
                "torch._dynamo.config.capture_scalar_outputs = True.")
    if "numpy" in reason or ".numpy()" in b.code:
        return "Use torch ops on the tensor instead of a NumPy round trip inside the compiled function."
    if b.hints:
        return b.hints[0] + " (torch.compile(fullgraph=True) stops at the first break.)"
    return "Run torch.compile(fullgraph=True) to stop at this break and rewrite the code it names."


class RecompileEvidence(Record):
    recompilations: int
    recompile_s: float
    """Compile seconds beyond each function's first compilation (0 from a trace alone)."""
    share_of: str = "run_wall"
    reasons: list[dict[str, Any]] = []
    """The failed guards in the user's words, most frequent first (analysis/compile_guards.py)."""
    hit_recompile_limit: bool = False
    limit_name: str = "recompile_limit"
    """The config that caps recompilations in this torch version (cache_size_limit before 2.7)."""
    caused_by_break_at_line: int | None = None
    """The recompiled code is the one resumed after a graph break at this line."""
    frames: list[CompiledFrame] = []
    """From a trace alone: the compiled frames with recompilations seen in the window."""
    size_set_at: dict[str, Any] | None = None
    """The user's line that decides the changing size (file, line, the argument and dimension),
    followed back from the compiled call (diagnose/source.size_origin); None when unclear."""
    eager_s: float = 0.0
    """Past the recompile limit, the sampled seconds the function then ran eagerly, an upper bound
    of what compiling it once more (its compiled code's own time unknown) saves beside the recompiles."""
    compile_dynamic: str | None = None
    """The `dynamic=` the torch.compile call of the recompiled code passes, as written ("" when not given)."""
    specialised: bool = False
    """The same dimension kept changing although dynamo makes a dimension dynamic after its first
    change (no `dynamic=False`): the compiled code specialises on the size (a Python loop over
    it, a branch on it), so only fixed sizes keep one graph."""


@register
class Recompiles(Rule[RecompileEvidence]):
    """Functions dynamo compiled again because a guard failed, with the guard in plain words.

    Time lost: the seconds spent on the recompilations (compile time beyond each function's
    first compilation), as a share of the run. A function that hit `recompile_limit` runs
    eagerly from then on: that is `high` whatever the seconds, and its sampled eager seconds count
    too, an upper bound (compiled once more, its generated code would still take some). From a trace alone (compile ids
    of the regions) the recompiles are seen but not timed: `medium`."""

    kind = "recompile"
    summary = "A compiled function is compiled again and again because a guard fails (shapes, Python values)."
    docs = DOCS_RECOMPILES
    evidence_type = RecompileEvidence
    confidence = "measured"
    saving_basis = "the recompilations' compile seconds (over the run)"
    explains = ("compile_time", *COMPILING_SYMPTOMS)
    MIN_RECOMPILES = 2
    """One recompile (e.g. dynamo switching a dimension to dynamic after the first change) is
    normal; two or more for one function is a pattern."""

    def check(self, facts: Facts) -> list[Finding]:
        c = facts.compile or {}
        if not c.get("present"):
            return self._from_trace(facts)
        limited = {(h["file"], h["function"]): h for h in c.get("limit_hits", [])}
        limit = recompile_limit_name(_torch_version(facts))
        out = []
        for r in c.get("recompiles", []):
            hit = limited.get((r["file"], r["function"]))
            if r["count"] < self.MIN_RECOMPILES and not hit:
                continue
            top: dict[str, Any] = (r["reasons"][0] if r["reasons"]
                                   else {"what": "a guard failed", "fix": "", "guards": []})
            title = f"{r['label']} was recompiled {r['count']} times: {top['what']}"
            if hit:
                title += "; it hit the recompile limit and now runs eagerly"
            after_break = top.get("after_break_at_line")
            where = where_of([r])
            if after_break:  # the recompiled code is the one resumed after a break: the break is the cause
                where = where_of([{"file": r["file"], "line": after_break, "function": r["function"]}]) + where
            origin, dynamic = (None, None) if after_break else _size_set_at(facts, r, top)
            static = [] if after_break or origin is not None else _static_compile_sites(facts, r)
            if static:  # no line sets the size, but the compile call keeps every size static: that call first
                dynamic, where = "False", where_of(static) + where
            specialised = origin is not None and (origin["guard_on_value"] or (
                dynamic in ("", "True", "None") and len(top.get("sizes") or []) >= SPECIALISED_SIZES
                and not any(mentions(f, STATIC_SHAPE_SWITCHES) for f in {r["file"], origin["file"]})))
            if origin is not None:
                title += f"; the size is set at {os.path.basename(origin['file'])}:{origin['line']}"
                at = Where(file=origin["file"], line=origin["line"],
                           function=function_at(origin["file"], origin["line"]))
                # Where dynamo may make the size dynamic, the line that sets it is the one to change;
                # under dynamic=False (or an expression that may be False) the compile call comes first.
                where = [at] + where if dynamic in ("", "True", "None") else where + [at]
            eager_s = _eager_seconds(facts, r) if hit else 0.0
            ev = RecompileEvidence(recompilations=r["count"], recompile_s=r["recompile_s"], reasons=r["reasons"],
                                   hit_recompile_limit=bool(hit), limit_name=limit,
                                   caused_by_break_at_line=int(str(after_break)) if after_break else None,
                                   size_set_at=origin, specialised=specialised, compile_dynamic=dynamic,
                                   eager_s=eager_s)
            lost = ev.recompile_s + eager_s
            out.append(self.finding(ev, title=title, lost_s=lost, pct=_wall_pct(lost, facts.run_wall_s), where=where,
                                    severity="high" if hit else None, confidence="upper_bound" if eager_s else None))
        return out

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """Recompilation seconds are part of the run's compile time; ops found inside a compile
        stage are that compiling."""
        if symptom.kind != "compile_time":
            return while_compiling(symptom)
        return Explanation(cause.time_lost_s) if cause.time_lost_s > 0 else None

    def least_severity(self, finding: Finding) -> Severity:
        """A function that hit the recompile limit runs eagerly from then on, whatever the seconds."""
        return "high" if finding.evidence.get("hit_recompile_limit") else "info"

    def _from_trace(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        recompiled = [f for f in a.compiled.frames if f.recompiles_seen > 0] if a and a.compiled.present else []
        if not recompiled:
            return []
        ev = RecompileEvidence(recompilations=sum(f.recompiles_seen for f in recompiled), recompile_s=0.0,
                               frames=recompiled)
        return [self.finding(ev, title=f"{len(recompiled)} compiled frame(s) were recompiled in the window",
                             lost_s=0.0, pct=0.0, severity="medium", confidence="unmeasured")]

    def fix(self, evidence: RecompileEvidence) -> str:
        if evidence.frames and not evidence.reasons:
            return ("Mark changing dimensions dynamic (torch._dynamo.mark_dynamic / dynamic=True) or "
                    "pad inputs to a few fixed shapes.")
        top = evidence.reasons[0] if evidence.reasons else {}
        fix = str(top.get("fix") or "Make the changing input dynamic or keep it constant.")
        at = evidence.size_set_at
        if at and evidence.specialised:
            fix = (f"Give `{at['argument']}` one fixed size in dim {at['dim']} where that size is set ("
                   f"{os.path.basename(at['file'])}:{at['line']}: pad to one fixed size, or bucket to a few fixed "
                   "sizes): the compiled code specialises on the size (a Python loop over it, a branch on it), "
                   "so every new size compiles a new graph, and neither torch._dynamo.mark_dynamic("
                   f"{at['argument']}, {at['dim']}) nor dynamic=True keeps one graph (mark_dynamic raises a "
                   "constraint violation where the code fixes the size itself). Or make the compiled code "
                   "independent of the size (e.g. one library op instead of a Python loop over it).")
        elif at:
            fix += f" The size is set at line {at['line']} ({os.path.basename(at['file'])})."
        if not (at and evidence.specialised) and evidence.compile_dynamic not in (None, "", "True", "None"):
            fix = (f"The torch.compile call passes dynamic={evidence.compile_dynamic}: dynamic=False keeps every "
                   "size static, so leave dynamic at its default (a changing size then compiles once more, as "
                   "dynamic). " + fix)
        if evidence.hit_recompile_limit:
            fix += f" Raising torch._dynamo.config.{evidence.limit_name} only hides the problem."
        return fix


SPECIALISED_SIZES = 3
"""Sizes seen for one dimension before its changes say the code specialises on it: dynamo makes
a dimension dynamic after its first change, so a third size recompiling means it could not."""
STATIC_SHAPE_SWITCHES = {"automatic_dynamic_shapes", "assume_static_by_default", "mark_static",
                         "force_parameter_static_shapes"}
"""Ways to keep shapes static besides `dynamic=False`: with one of them in the user's files, a size
recompiling again and again may be their doing, not the code specialising on it."""
_SIZE_GUARD = re.compile(r"^tensor '(\w+)' size mismatch at index (\d+)\.")
"""dynamo's message for a failed guard on one dimension's size of an argument."""
_SIZE_IN_GUARD = re.compile(r"(?:\bL\['(\w+)'\]|(?<![\w.'\]])([A-Za-z_]\w*))\.size\(\)\[(\d+)\]")
"""An argument's size in a guard's expression (`L['x'].size()[1] == 4`, `(x.size()[0] // 8) == 3`)."""


def _guarded_size(guard: str) -> tuple[str, int, bool] | None:
    """(argument, dim, specialised) of a failed guard on one dimension of one argument. An equality
    on an expression of that size (`(x.size()[0] // 8) == 3`) is a graph specialised on its value."""
    m = _SIZE_GUARD.match(guard)
    if m:
        return m.group(1), int(m.group(2)), False
    found = {(a or b, int(d)) for a, b, d in _SIZE_IN_GUARD.findall(guard)}
    if len(found) == 1 and "==" in guard:
        name, dim = found.pop()
        return name, dim, True
    return None


def _compiled_name(file: str, line: int) -> str | None:
    """The last name of the first argument of the `torch.compile(...)` call at `line`
    (`token_metrics` for `torch.compile(token_metrics, dynamic=False)`); None otherwise."""
    path = enclosing(file, line)
    for n in ast.walk(path[-1]) if path else ():
        if isinstance(n, ast.Call) and n.lineno == line and _is_compile(n.func) and n.args:
            return ast.unparse(n.args[0]).rsplit(".", 1)[-1]
    return None


def _eager_seconds(facts: Facts, r: dict) -> float:
    """The steady state's sampled seconds on the lines of the recompiled function (its own frames,
    which run only eagerly: a compiled call runs generated code), once it ran past the limit."""
    name = r.get("function")
    lines = ((facts.python or {}).get("window") or {}).get("lines") or []
    return sum(ln.get("total_s") or 0.0 for ln in lines
               if ln.get("file") == r.get("file") and ln.get("function") == name)


def _static_compile_sites(facts: Facts, r: dict) -> list[dict[str, Any]]:
    """The torch.compile calls the run made (recorded sites) that compile the recompiled function
    by name with `dynamic=False` written: the line to change when the size comes from elsewhere
    (a generator's batches). [] when another call compiles it, or none is readable."""
    name = str(r.get("function") or "").rsplit(".", 1)[-1]
    sites = [s for s in facts.sites_of("compile") if s.get("file") and s.get("line")
             and _compiled_name(s["file"], int(s["line"])) == name]
    if not sites or any(compile_dynamic(s["file"], int(s["line"])) != "False" for s in sites):
        return []
    return sites


def _size_set_at(facts: Facts, r: dict, top: dict) -> tuple[dict[str, Any] | None, str | None]:
    """The user's line that decides the size of the argument dimension a recompile's top guard
    failed on, followed back from each call of what the torch.compile calls compiled (their
    recorded sites, else the compiled function's file), and the `dynamic=` those calls pass.
    None when no call leads to one line, or several lead to different lines."""
    guarded = _guarded_size(str(top.get("guard") or ""))
    if guarded is None:
        return None, None
    name, dim, on_value = guarded
    position = parameter_position(r["file"], r["line"], r["function"], name)
    if position is None:
        return None, None
    sites = [(s["file"], s["line"]) for s in facts.sites_of("compile") if s.get("file") and s.get("line")]
    sites = sites or [(r["file"], line) for line in compile_call_lines(r["file"])]
    found: set[tuple[str, int]] = set()
    dynamic: set[str | None] = set()
    for file, line in sites:
        callee = compiled_callee(file, line)
        origins = {size_origin(file, call, callee, position, name, dim) for call in calls_of(file, callee)} \
            if callee else set()
        origins.discard(None)
        if origins:
            found |= origins  # type: ignore[arg-type]
            dynamic.add(compile_dynamic(file, line))
    if len(found) != 1:
        return None, None
    file, line = found.pop()
    return ({"file": file, "line": line, "argument": name, "dim": dim, "guard_on_value": on_value},
            dynamic.pop() if len(dynamic) == 1 else None)


class CompileTimeEvidence(Record):
    time_s: dict[str, float]
    """Compile seconds by stage (dynamo, aot, inductor, codegen) and their total."""
    share_of: str = "run_wall"
    frames: list[dict[str, Any]] = []
    cache: dict[str, Any] = {}
    caused_by: list[dict[str, Any]] = []
    """The graph breaks and recompilations the compile time was spent on, most seconds first."""
    explained_s: float = 0.0
    unexplained_s: float = 0.0
    mega_cache: bool = True
    """torch.compiler.save_cache_artifacts exists in this torch version."""


@register
class CompileTime(Rule[CompileTimeEvidence]):
    """Time spent compiling, split by stage, when it is a large part of the run.

    A one-time cost: `medium` when it is half the run or more (short jobs, or every run paying a
    cold compile), `info` otherwise; never `high`, because a long job amortises it. When graph
    breaks and recompiles explain most of it, it is their symptom and says so. Where: the
    torch.compile calls first (what compiles, how, or whether at all is decided there), then the
    compiled functions."""

    kind = "compile_time"
    summary = "Compiling takes a large part of the run."
    docs = DOCS_COMPILE_TIME
    evidence_type = CompileTimeEvidence
    confidence = "measured"
    saving_basis = "the run's compile seconds (a warm cache or fewer graphs removes most)"
    max_severity = "medium"
    explains = ("one_time_cost", *COMPILING_SYMPTOMS)
    MIN_SHARE = 0.10
    """Under a tenth of the run, compile time is not worth a line in the report."""
    MEDIUM_SHARE = 0.50
    """Half the run spent compiling is worth acting on even though it is paid once."""
    EXPLAINED_SHARE = 0.5
    """When graph breaks and recompilations explain half the compile time or more, the finding is
    their symptom: its severity follows the part they do not explain."""
    FRAMES_LISTED = 3
    """The compiled functions with the most compile time named in the finding."""

    def check(self, facts: Facts) -> list[Finding]:
        c = facts.compile or {}
        if not c.get("present") or facts.run_wall_s <= 0:
            return []
        t = c["time_s"]
        share = t["total"] / facts.run_wall_s
        if share < self.MIN_SHARE:
            return []
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in t.items() if k != "total" and v >= 0.05)
        frames = c.get("frames", [])[: self.FRAMES_LISTED]
        caused_by = compile_causes(c)
        explained = sum(x["compile_s"] for x in caused_by)
        unexplained = max(t["total"] - explained, 0.0)
        severity: Severity = "medium" if share >= self.MEDIUM_SHARE else "info"
        title = f"Compiling took {t['total']:.1f} s, {100 * share:.0f}% of the run ({stages})"
        if caused_by and explained >= self.EXPLAINED_SHARE * t["total"]:
            # A symptom: the breaks and recompiles it lists are the findings to act on.
            severity = "medium" if unexplained / facts.run_wall_s >= self.MEDIUM_SHARE else "info"
            lines = ", ".join(f"line {x['line']}" for x in caused_by if x["kind"] == "graph_break")
            title += f"; {explained:.1f} s of it caused by " + (
                f"the graph breaks at {lines}" if lines else "recompilations") + (
                " and recompilations" if lines and any(x["kind"] == "recompile" for x in caused_by) else "")
        version = torch_version_tuple(_torch_version(facts))
        ev = CompileTimeEvidence(
            time_s=t, frames=[{k: f[k] for k in ("function", "file", "line", "compilations", "compile_s")}
                              for f in frames],
            cache=c.get("cache", {}), caused_by=caused_by, explained_s=explained, unexplained_s=unexplained,
            mega_cache=version is None or version >= MEGA_CACHE_SINCE)
        calls = where_of(facts.sites_of("compile")) or compile_calls_in(frames)
        return [self.finding(ev, title=title, lost_s=t["total"], pct=100 * share, where=calls + where_of(frames),
                             severity=severity)]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """Compiling the first calls happens before the first step ends: part of the start-up.
        Ops found inside a compile stage are compiling too."""
        if symptom.kind != "one_time_cost":
            return while_compiling(symptom)
        return Explanation(min(cause.time_lost_s, symptom.time_lost_s))

    def fix(self, evidence: CompileTimeEvidence) -> str:
        return ("Remove recompilations and graph breaks first (each graph is compiled separately); keep "
                "inductor's caches warm between runs (TORCHINDUCTOR_CACHE_DIR on persistent storage"
                + (", torch.compiler.save_cache_artifacts" if evidence.mega_cache else "")
                + "); compile the repeated block (regional compilation) rather than the whole model; avoid "
                "mode='max-autotune' for short jobs.")


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


def compile_calls_in(frames: list[dict]) -> list[Where]:
    """The `torch.compile(...)` calls (and `@torch.compile` decorators) in the source files of the
    compiled functions: where the run recorded no call site (an older run), the lines that
    decide compilation, when the source is readable here."""
    out: list[Where] = []
    for file in dict.fromkeys(f["file"] for f in frames if f.get("file")):
        for line in compile_call_lines(file):
            out.append(Where(file=file, line=line, function=""))
    return out
