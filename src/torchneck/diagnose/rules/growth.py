"""Steps that get slower over the run, read from the step clock and the samples of the steps
after the profiled window (analysis/run.py `step_growth`)."""

from __future__ import annotations

import ast

from ...model.base import Record
from ...model.findings import Finding
from ..facts import Facts, where_of
from ..rule import DOCS, Explanation, Rule, register
from ..source import call_name, enclosing


class StepGrowthEvidence(Record):
    steps: int
    """Steps after the profiled window, split in thirds."""
    early_step_s: float
    """Mean step of the first third."""
    late_step_s: float
    """Mean step of the last third."""
    mean_step_s: float
    """Mean step of them all."""
    line_early_s: float = 0.0
    """The named function's grown lines' sampled seconds a step in the first third (calls included)."""
    line_late_s: float = 0.0
    """The same in the last third."""
    growth_on_line: float = 0.0
    """Of the step's growth, the share that grew on those lines (0 when none is named)."""
    hint: str = ""
    """What the line does that usually grows: "cat", "backward", "hooks", "list" or ""."""


def growth_removed(facts: Facts, lines: set[tuple[str, int]]) -> float:
    """Of the mean step after the profiled window, the share a fix of `lines` removes when the steps
    grew and those lines' sampled time holds the growth (`StepTimeGrowth.LINE_SHARE` of it): all the
    steps' growth (the mean step less the first third's), with what the lines spent in the first
    third. The step clock sees what a growing tensor costs beyond its own lines (its copies
    evicting the caches the rest of the step works in); 0 when the steps did not grow, on device
    runs, or when the growth is elsewhere."""
    g = (facts.python or {}).get("growth")
    if not g or (facts.analysis is not None and facts.analysis.gpu.present) or g["mean_step_s"] <= 0 \
            or g["late_step_s"] < StepTimeGrowth.MIN_GROWTH * g["early_step_s"]:
        return 0.0
    early = sum(ln["step_s"] for ln in g.get("early_lines") or [] if (ln["file"], ln["line"]) in lines)
    late = sum(ln["step_s"] for ln in g.get("late_lines") or [] if (ln["file"], ln["line"]) in lines)
    if late - early < StepTimeGrowth.LINE_SHARE * (g["late_step_s"] - g["early_step_s"]):
        return 0.0
    return min((g["mean_step_s"] - g["early_step_s"] + early) / g["mean_step_s"], 1.0)


@register
class StepTimeGrowth(Rule[StepGrowthEvidence]):
    """Steps get slower and slower: something each step works on grows with the run (a tensor
    concatenated onto, a list summed or converted whole, hooks added at every step, a loss kept
    with its graph and backpropagated through all of it). A profiled window of early steps sees
    it small; the step clock and the samples of the steps after it show it: the last third's
    mean step against the first third's, and the user function whose lines' sampled time a step
    grew most. Not for device runs: the device's queue fills over the first steps, and the host's
    step clock then grows with no cause.

    Time lost: the growing part of the named lines' time, taken as rising linearly from nothing
    (a buffer, a list, hooks added one a step): its mean over the steps after the window is 3/4
    of the growth between the thirds (`LINEAR_MEAN`), as a share of the mean step, applied to the
    window. Silent when no user function holds `LINE_SHARE` of the growth: the step clock counts
    the machine's load too (the samples leave it out), and some data grows by design. A generation
    loop's growth is the prefix it feeds again: uncached_generation explains all of it."""

    kind = "step_time_growth"
    summary = "Steps get slower over the run: something each step works on grows with every step."
    docs = DOCS["tuning"]
    evidence_type = StepGrowthEvidence
    saving_basis = ("the named lines' growing time, taken as rising linearly from nothing over the steps after the "
                    "profiled window (3/4 of its growth between the first and last thirds, a step)")
    explains = ("python_hotspot", "op_hotspot", "dispatch_overhead")
    MIN_GROWTH = 1.5
    """The last third's mean step at least 1.5x the first third's: a drift of a few tens of percent
    is a machine's load or a cache warming, not a trend."""
    MIN_SHARE = 0.10
    """The growth adds a tenth of the steps' time, as python_hotspot's tenth."""
    LINE_SHARE = 0.30
    """A user function whose lines hold this share of the step's growth is named as where it grows:
    less is the machine's load or the growth of many things at once, with no one line to change."""
    NAMED_GROWTH = 0.2
    """The function's lines named: those whose growth is a fifth of its most grown line's or more
    (the others drift with the machine)."""
    LINEAR_MEAN = 0.75
    """For a cost rising linearly from nothing over the steps, the first and last thirds' means sit
    at 1/6 and 5/6 of its last value, its mean over the steps at 1/2: 3/4 of their difference."""

    def check(self, facts: Facts) -> list[Finding]:
        g = (facts.python or {}).get("growth")
        if facts.analysis is not None and facts.analysis.gpu.present:
            return []  # the device's queue fills over the first steps: the host's step clock grows
        if not g or g["early_step_s"] <= 0 or g["late_step_s"] < self.MIN_GROWTH * g["early_step_s"]:
            return []
        share = (g["mean_step_s"] - g["early_step_s"]) / g["mean_step_s"]
        if share < self.MIN_SHARE:
            return []
        early = {(ln["file"], ln["line"]): ln["step_s"] for ln in g.get("early_lines") or []}
        grown: dict[tuple[str, str], list[tuple[float, dict]]] = {}  # per function, its lines' growth
        for ln in g.get("late_lines") or []:
            delta = ln["step_s"] - early.get((ln["file"], ln["line"]), 0.0)
            if delta > 0:
                grown.setdefault((ln["file"], ln["function"]), []).append((delta, ln))
        if not grown:  # no line of the user's grew: the machine's load, or data that grows by design
            return []
        # the function whose lines grew most (a buffer concatenating its five fields: five lines)
        lines = sorted(max(grown.values(), key=lambda d: sum(x for x, _ in d)), key=lambda d: -d[0])
        lines = [d for d in lines if d[0] >= self.NAMED_GROWTH * lines[0][0]]
        on_line = sum(x for x, _ in lines) / (g["late_step_s"] - g["early_step_s"])
        if on_line < self.LINE_SHARE:
            return []
        top = lines[0][1]
        ev = StepGrowthEvidence(steps=g["steps"], early_step_s=g["early_step_s"], late_step_s=g["late_step_s"],
                                mean_step_s=g["mean_step_s"],
                                line_early_s=sum(early.get((ln["file"], ln["line"]), 0.0) for _, ln in lines),
                                line_late_s=sum(ln["step_s"] for _, ln in lines), growth_on_line=min(on_line, 1.0),
                                hint=_hint(top["file"], top["line"]))
        at = f"line {top['line']}" if len(lines) == 1 else f"lines {', '.join(str(ln['line']) for _, ln in lines[:3])}"
        title = (f"Steps get slower over the run: {1e3 * ev.early_step_s:.1f} ms a step in the first third of the "
                 f"{ev.steps} steps after the profiled window, {1e3 * ev.late_step_s:.1f} ms in the last; "
                 f"{top['function']}() ({at}) grew from {1e3 * ev.line_early_s:.1f} to {1e3 * ev.line_late_s:.1f} ms "
                 "a step")
        # a cost growing by a step's worth each step: what it adds on average is 3/4 of the growth
        # between the thirds' means (they sit at 1/6 and 5/6 of the way)
        grows = min(self.LINEAR_MEAN * (ev.line_late_s - ev.line_early_s) / ev.mean_step_s, 1.0)
        lost = grows * facts.window_s
        return [self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost),
                             where=where_of([ln for _, ln in lines[:3]] + top.get("callers", [])[:2]))]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """A hotspot at the line that grows is the growth's time (what the early steps spent there
        stays)."""
        if cause.where and symptom.where and (cause.where[0].file, cause.where[0].line) == \
                (symptom.where[0].file, symptom.where[0].line):
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s))
        return None

    def fix(self, evidence: StepGrowthEvidence) -> str:
        named = {
            "cat": "what it concatenates grows at every step (a tensor concatenated onto, a list concatenated whole): "
                   "concatenate once at the end, or keep a bounded window (a preallocated ring buffer, "
                   "collections.deque(maxlen=...))",
            "backward": "the graph it backpropagates through grows: a loss or state carried from step to step "
                        "keeps every earlier step's graph; accumulate loss.item() or loss.detach() instead",
            "hooks": "it registers hooks again at every step: register them once and keep the handles",
            "list": "the Python container it processes whole grows at every step: keep a running total or a "
                    "bounded window (collections.deque(maxlen=...)) instead of reprocessing everything",
        }.get(evidence.hint)
        what = f"At the line shown, {named}." if named else (
            "Find what the step works on that grows with every step (a tensor concatenated onto, a list summed or "
            "converted whole, hooks registered again, a loss kept with its graph) and keep it bounded.")
        return what + " The time per step should then stay at its early level."


def _hint(file: str, line: int) -> str:
    """What the line does that usually grows, from its source."""
    path = enclosing(file, line)
    if not path:
        return ""
    names = {call_name(n) for n in ast.walk(path[-1]) if isinstance(n, ast.Call)}
    if names & {"cat", "concatenate", "hstack", "vstack", "stack"}:
        return "cat"
    if "backward" in names:
        return "backward"
    if any(n and n.startswith("register_") and n.endswith("hook") for n in names):
        return "hooks"
    if names & {"sum", "tensor", "mean", "sorted", "max", "min", "array"}:
        return "list"
    return ""
