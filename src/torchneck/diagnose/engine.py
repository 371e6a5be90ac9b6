"""Run every rule over the facts of one rank; causes first, with their symptoms under them."""

from __future__ import annotations

import os
from typing import Any

from ..analysis.labels import label_of
from ..model.base import to_builtins
from ..model.findings import Finding
from ..trace.normalise import COMPILE_STAGE_SUFFIX
from . import rules  # noqa: F401  (registers the rule families)
from .causes import estimate_savings, fold_symptoms, rank_findings
from .facts import Facts
from .rule import RULES


def all_rules() -> list[Any]:
    """The rules run on each rank (the job's rules across ranks are distributed_rules.JOB_RULES)."""
    return list(RULES)


def diagnose(facts: Facts) -> list[Finding]:
    """Run every rule, put each finding's saving on the run's horizon, fold symptoms under their
    causes, rank (causes.py). A broken rule never hides the others."""
    findings: list[Finding] = []
    for rule in all_rules():
        try:
            findings.extend(rule.check(facts))
        except Exception as exc:  # pragma: no cover - reported, not fatal
            if os.environ.get("TORCHNECK_DEBUG"):
                raise
            findings.append(Finding(kind="internal", severity="info", title=f"rule {rule.kind} failed: {exc}",
                                    time_lost_s=0.0, time_lost_pct=0.0, fix="", confidence="unmeasured"))
    name_labels(findings, facts)
    estimate_savings(findings, facts)
    return rank_findings(fold_symptoms(findings, facts))


def name_labels(findings: list[Finding], facts: Facts) -> None:
    """A finding whose ops or line lie inside one of the user's `record_function` labels names
    it (`analysis.labels.label_of`): in `label`, and at the end of its title."""
    if facts.analysis is None or not facts.analysis.labels:
        return
    labels = to_builtins(facts.analysis.labels)
    op_self_us = {row.name: row.self_us for row in facts.analysis.ops.by_name}
    for f in findings:
        if f.label is not None or f.kind == "internal":
            continue
        found = label_of(labels, f.ops, [(w.file, w.line) for w in f.where], op_self_us)
        if found is not None:
            f.label = found["name"]
            if f.label.endswith(COMPILE_STAGE_SUFFIX):  # torch.compile's own stage, not the user's label
                f.title = f"{f.title} (while torch.compile compiled: {f.label.removesuffix(COMPILE_STAGE_SUFFIX)})"
            else:
                f.title = f'{f.title} (in record_function "{f.label}")'
