"""Work done on some steps only (an evaluation, a checkpoint, a report every N steps) that makes
those steps many times slower, read from the step clock and the samples of the steps outside the
profiled window (analysis/periodic.py)."""

from __future__ import annotations

import ast

from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts
from ..idioms import modulo_setting_lines
from ..rule import DOCS, Explanation, Rule, register
from ..source import enclosing, function_at


class PeriodicWorkEvidence(Record):
    steps: int
    """Steps outside the profiled window (the first step aside)."""
    slow_steps: int
    """Of them, those at least `periodic.SLOW_FACTOR` times the median step."""
    every: int | None
    """Steps from one slow step to the next, when most are that far apart."""
    median_step_s: float
    slow_step_s: float
    """The median slow step."""
    share: float
    """The slow steps' time beyond the median step, as a share of all those steps' time."""
    entry_at: int
    """The line entering the work that runs only in the slow steps."""
    guard_at: int | None = None
    """The `if` deciding when it runs (`if step % self.log_every == 0`)."""


def guard_of(file: str, line: int) -> tuple[int, list[int]] | None:
    """(the line of the innermost `if` around `line` in its function that decides when it runs,
    preferring one taking a modulo (`step % n == 0`), the lines giving the modulo's setting a
    number); None when no `if` holds the line."""
    path = enclosing(file, line)
    ifs = [s for s in _own_statements(path[:-1]) if isinstance(s, ast.If) and s.lineno != line]
    if not ifs:
        return None
    modulo = [s for s in ifs if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(s.test))]
    guard = (modulo or ifs)[-1]
    return guard.lineno, modulo_setting_lines(file, guard.test, guard.lineno)[:2]


def _own_statements(path: list) -> list:
    """The statements of `path` inside its innermost function (all of it at module level)."""
    last_def = max((i for i, s in enumerate(path) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))),
                   default=-1)
    return path[last_def + 1:]


@register
class PeriodicWork(Rule[PeriodicWorkEvidence]):
    """Some steps run extra work that the others do not (an evaluation of the validation set, a
    checkpoint, a report every N steps) and take several times a normal step. A profiled window of
    a few steps usually falls between two of them and sees none; the step clock sees every step,
    and the samples of the slow steps name the line entering that work: the outermost user line
    sampled (almost) only in them, or the call under the `if` deciding when, where a callback
    called every step is outermost.

    Time lost: the slow steps' time beyond the median step, as a share of the steps outside the
    profiled window, applied to the window: what running that work once at the end (or never
    mid-run) saves; running it less often saves in proportion."""

    kind = "periodic_work"
    summary = "Some steps run extra work (an evaluation, a checkpoint, a report every N steps) that makes them slow."
    docs = DOCS["tuning"]
    evidence_type = PeriodicWorkEvidence
    saving_basis = ("the slow steps' time beyond the median step, over the steps outside the profiled window (what "
                    "not running that work mid-run saves; running it less often saves in proportion)")
    explains = ("op_hotspot", "step_time_growth")
    MIN_SHARE = 0.10
    """The extra work adds a tenth of the steps' time: below that it is the cost of watching a run."""

    def check(self, facts: Facts) -> list[Finding]:
        p = (facts.python or {}).get("periodic")
        if not p or not p.get("lines") or p["steps_s"] <= 0:
            return []
        share = p["excess_s"] / p["steps_s"]
        if share < self.MIN_SHARE:
            return []
        lines = p["lines"]
        guarded = next(((ln, g) for ln in lines if (g := guard_of(ln["file"], ln["line"])) is not None), None)
        entry, guard = guarded if guarded is not None else (lines[0], None)
        ev = PeriodicWorkEvidence(steps=p["steps"], slow_steps=p["slow_steps"], every=p.get("every"),
                                  median_step_s=p["median_step_s"], slow_step_s=p["slow_step_s"], share=share,
                                  entry_at=entry["line"], guard_at=guard[0] if guard else None)
        where = [Where(file=entry["file"], line=entry["line"], function=entry["function"])]
        if guard is not None:
            where += [Where(file=entry["file"], line=n, function=function_at(entry["file"], n) or "")
                      for n in [guard[0], *guard[1]]]
        where += [Where(file=ln["file"], line=ln["line"], function=ln["function"]) for ln in lines
                  if (ln["file"], ln["line"]) not in {(w.file, w.line) for w in where}][:2]
        how_often = f"every {ev.every} steps" if ev.every else f"on {ev.slow_steps} of {ev.steps} steps"
        lost = share * facts.window_s
        return [self.finding(ev, title=f"{entry['function']}() at line {entry['line']} runs {how_often}, making those "
                                       f"steps {ev.slow_step_s / max(ev.median_step_s, 1e-9):.0f}x slower: "
                                       f"{100 * share:.0f}% of the steps' time",
                             lost_s=lost, pct=facts.pct(lost), where=where)]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """Ops found at a line the slow steps alone run (the evaluation's model call: the model's
        compute, not a slower way named there, which says more) are that work's; steps that seem to
        grow because slow ones come later in the run are those steps."""
        lines = {(ln["file"], ln["line"]) for ln in ((facts.python or {}).get("periodic") or {}).get("lines", [])}
        if symptom.kind == "step_time_growth" or (not symptom.evidence.get("avoidable") and symptom.where and (
                symptom.where[0].file, symptom.where[0].line) in lines):
            return Explanation(min(cause.time_lost_s, symptom.time_lost_s))
        return None

    def fix(self, evidence: PeriodicWorkEvidence) -> str:
        when = f" (its `if` at line {evidence.guard_at})" if evidence.guard_at else ""
        return (f"The steps that run line {evidence.entry_at}{when} take "
                f"{evidence.slow_step_s / max(evidence.median_step_s, 1e-9):.0f}x a normal step: the work it starts "
                "(an evaluation, a checkpoint, a report) is most of the run. Run it less often (once an epoch, or "
                "rarely enough to cost a few percent), on less (a fixed subset of the validation set; only the "
                "state that changed), or cheaper (torch.inference_mode() around an evaluation).")
