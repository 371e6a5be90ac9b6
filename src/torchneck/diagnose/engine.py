"""Run every rule over the facts of one rank; findings in the order they are shown."""

from __future__ import annotations

import os
from typing import Any

from ..model.findings import Finding
from . import rules  # noqa: F401  (registers the rule families)
from .facts import Facts
from .ranking import rank_findings
from .rule import RULES


def all_rules() -> list[Any]:
    """The rules run on each rank (the job's rules across ranks are distributed_rules.JOB_RULES)."""
    return list(RULES)


def diagnose(facts: Facts) -> list[Finding]:
    """Run every rule; findings most costly first. A broken rule never hides the others."""
    findings: list[Finding] = []
    for rule in all_rules():
        try:
            findings.extend(rule.check(facts))
        except Exception as exc:  # pragma: no cover - reported, not fatal
            if os.environ.get("TORCHNECK_DEBUG"):
                raise
            findings.append(Finding(kind="internal", severity="info", title=f"rule {rule.kind} failed: {exc}",
                                    time_lost_s=0.0, time_lost_pct=0.0, fix=""))
    return rank_findings(fold_same_line(findings))


def fold_same_line(findings: list[Finding]) -> list[Finding]:
    """A Python hotspot on the very line that a dispatch-overhead finding names is the same
    problem seen twice (the Python between thousands of tiny ops *is* the per-op overhead): it
    is folded into the dispatch finding's evidence instead of being listed again."""
    dispatch_lines = {(f.where[0].file, f.where[0].line): f for f in findings
                      if f.kind == "dispatch_overhead" and f.where}
    out = []
    for f in findings:
        twin = (dispatch_lines.get((f.where[0].file, f.where[0].line))
                if f.kind == "python_hotspot" and f.where else None)
        if twin is not None and not f.evidence.get("waits"):
            twin.evidence = dict(twin.evidence, python_outside_ops_on_this_line_s=f.evidence.get("outside_torch_s"))
            continue
        out.append(f)
    return out
