"""From findings to causes: what each would save over the run, symptoms folded under the cause
that explains them, and the order they are shown in.

GPU idle, launch-bound, compile time, recompilations and communication waits are usually
consequences: of data loading, host syncs, Python between ops, a graph break. A symptom that a
cause explains (mostly) is listed under that cause instead of beside it, and what stays
unexplained of a symptom is all it can still rank by. Findings rank by the time a fix would save
(`saving_s`), not by their share of some span; near-ties go to the better-known saving, so two
findings a few percent apart do not swap places from one run to the next.
"""

from __future__ import annotations

from ..model.findings import CONFIDENCE_ORDER, Finding
from .facts import Facts
from .rule import HIGH_SHARE, MEDIUM_SHARE, Explanation, Rule, cap, severity_for, worse

FOLD_SHARE = 0.5
"""A symptom whose time is at least half explained by its causes is listed under the main one;
below that it stays a finding of its own, ranked by the part nothing explains."""
NEAR_TIE = 0.25
"""Savings within 25 % of each other are a near-tie (the same run measured twice moves a figure
by that much on a shared machine): the better-known saving (measured over estimated over an
upper bound) ranks first."""
RUN_LEVEL = "run_wall"
"""`evidence.share_of` of findings measured over the whole run (one-time costs), not the window."""


def estimate_savings(findings: list[Finding], facts: Facts) -> None:
    """Set each finding's `saving_s` / `saving_pct`: one horizon, the whole run, so that a
    one-time cost (compile seconds) and a steady-state one (a share of each step) compare. A
    share of the profiled window applies to the run's steady state, the run after start-up
    (its steps); without a run (a trace alone) the window is the horizon. Severity stays what
    the rule judged from the share of the span the problem affects (a problem taking half of
    every step is high even in a short run dominated by start-up); the ranking uses the saving."""
    wall, steady = facts.run_wall_s, facts.steady_s
    window = facts.window_s
    for f in findings:
        f.saving_of = "run" if wall > 0 else "window"
        if f.evidence.get("share_of") == RUN_LEVEL:
            f.saving_s, f.saving_pct = f.time_lost_s, f.time_lost_pct
        elif wall > 0 and window > 0 and steady > 0:
            f.saving_s = f.time_lost_pct / 100 * steady
            f.saving_pct = 100 * f.saving_s / wall
        else:
            f.saving_s, f.saving_pct = f.time_lost_s, f.time_lost_pct
        # never more than the horizon: a fix cannot save more time than the run (or window) took
        horizon = wall if wall > 0 else window
        f.saving_s = min(max(f.saving_s, 0.0), horizon) if horizon > 0 else max(f.saving_s, 0.0)
        f.saving_pct = min(max(f.saving_pct, 0.0), 100.0)


def _set_severity(f: Finding, share: float) -> None:
    """Severity from the share of its span the problem takes, within its rule's cap and floor."""
    if f.confidence == "unmeasured" or f.severity == "info":
        return
    rule = _rule(f.kind)
    if rule is None:
        return
    f.severity = worse(cap(severity_for(share), rule.max_severity), rule.least_severity(f))


def _rule(kind: str) -> Rule | None:
    from .rule import RULES

    return next((r for r in RULES if r.kind == kind), None)


def fold_symptoms(findings: list[Finding], facts: Facts) -> list[Finding]:
    """Fold each symptom under the cause that explains most of it, when causes explain at least
    `FOLD_SHARE` of it; a symptom explained less keeps its place with the unexplained part as
    its saving. Time a cause explains that is not part of its own cost (`Explanation.adds`) is
    added to its saving. Returns the findings left at the top level."""
    causes_of: dict[int, list[tuple[Finding, Explanation]]] = {}
    for cause in findings:
        rule = _rule(cause.kind)
        if rule is None or not rule.explains:
            continue
        for symptom in findings:
            if symptom is cause or symptom.kind not in rule.explains:
                continue
            why = rule.explained(cause, symptom, facts)
            if why is not None and why.seconds > 0:
                causes_of.setdefault(id(symptom), []).append((cause, why))
    folded: set[int] = set()
    beyond: dict[int, tuple[Finding, float]] = {}  # per cause, the largest overlapping symptom's excess
    # Symptoms whose causes are symptoms themselves go under them first (a recompile under the
    # graph break that caused it, then compile time under that break).
    for symptom in sorted(findings, key=lambda f: len(causes_of.get(id(f), []))):
        explained = causes_of.get(id(symptom))
        if not explained:
            continue
        lost = symptom.time_lost_s
        total = min(sum(w.seconds for _, w in explained), lost) if lost > 0 else 0.0
        main, why = max(explained, key=lambda cw: cw[1].seconds)
        if main is symptom or id(main) in folded and _is_below(symptom, main, findings):
            continue
        share = total / lost if lost > 0 else 1.0
        for cause, w in explained:
            if w.adds:
                _add_saving(cause, w.seconds / lost * symptom.saving_s if lost > 0 else 0.0, facts)
            elif w.beyond_s > 0 and lost > 0:
                gain = min(w.beyond_s, lost) / lost * symptom.saving_s
                if gain > beyond.get(id(cause), (cause, 0.0))[1]:
                    beyond[id(cause)] = (cause, gain)
        if share >= FOLD_SHARE:
            symptom.explained_s = total
            main.symptoms.append(symptom)
            folded.add(id(symptom))
        else:
            unexplained = 1.0 - share
            symptom.saving_s *= unexplained
            symptom.saving_pct *= unexplained
            symptom.evidence = dict(symptom.evidence, partly_explained_by=[
                {"kind": c.kind, "title": c.title, "seconds": w.seconds} for c, w in explained])
            _set_severity(symptom, symptom.time_lost_pct / 100 * unexplained)
    for cause, gain in beyond.values():
        _add_saving(cause, gain, facts)
    return [f for f in findings if id(f) not in folded]


def _add_saving(cause: Finding, gain_s: float, facts: Facts) -> None:
    """Time a cause explains beyond its own cost is saved by its fix too (never more than the run)."""
    cause.saving_s += gain_s
    cause.saving_pct += gain_s / facts.run_wall_s * 100 if facts.run_wall_s > 0 else 0.0
    if facts.run_wall_s > 0:
        cause.saving_s, cause.saving_pct = min(cause.saving_s, facts.run_wall_s), min(cause.saving_pct, 100.0)


def _is_below(symptom: Finding, cause: Finding, findings: list[Finding]) -> bool:
    """True when `cause` is (transitively) listed under `symptom`: folding would make a loop."""
    stack = list(symptom.symptoms)
    while stack:
        f = stack.pop()
        if f is cause:
            return True
        stack.extend(f.symptoms)
    return False


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Problems before context (`info`), the largest saving first; near-ties (`NEAR_TIE`) to the
    better-known saving. A problem whose cost cannot be measured ranks as if it saved what its
    severity stands for (`judged_saving`). Symptoms under each cause are ordered the same way."""
    judged = judged_saving(findings)
    out = sorted(findings, key=lambda f: (f.severity == "info", -judged[id(f)], f.kind))
    swapped = True
    while swapped:  # adjacent near-ties: the better-known saving first
        swapped = False
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if (a.severity == "info") == (b.severity == "info") and judged[id(b)] * (1 + NEAR_TIE) >= judged[id(a)] \
                    and CONFIDENCE_ORDER[b.confidence] < CONFIDENCE_ORDER[a.confidence]:
                out[i], out[i + 1] = b, a
                swapped = True
    for f in out:
        if f.symptoms:
            f.symptoms = rank_findings(f.symptoms)
    return out


JUDGED_SHARE = {"high": HIGH_SHARE, "medium": MEDIUM_SHARE, "low": 0.0, "info": 0.0}
"""The share of the horizon an unmeasured problem is ranked as saving: the least its severity
stands for (a rule that judges a switch `high` says it costs a quarter of the time or more)."""


def judged_saving(findings: list[Finding]) -> dict[int, float]:
    """Per finding (by id), the saving it ranks by: its own, or for an unmeasured one, the share
    of the horizon its severity stands for (the horizon read back from the measured findings)."""
    horizon = max((f.saving_s / (f.saving_pct / 100) for f in findings if f.saving_pct > 0), default=0.0)
    out = {}
    for f in findings:
        out[id(f)] = f.saving_s
        if f.confidence == "unmeasured":
            out[id(f)] = max(f.saving_s, JUDGED_SHARE[f.severity] * horizon)
    return out
