"""A finding: what is slow, what it costs, where in the user's code, and what to change."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from .base import Record

Severity = Literal["high", "medium", "low", "info"]
SEVERITY_ORDER: dict[str, int] = {"high": 0, "medium": 1, "low": 2, "info": 3}
Confidence = Literal["measured", "estimated", "upper_bound", "unmeasured"]
"""How a finding's saving is known: measured (the time itself was observed: a wait, a sync,
compile seconds), estimated (a model applied to measured time: fusing recovers ~70 % of
per-op overhead), upper_bound (the most a fix could save: an op's whole time), unmeasured (the
cost cannot be read from the evidence: the severity is the rule's judgement)."""
CONFIDENCE_ORDER: dict[str, int] = {"measured": 0, "estimated": 1, "upper_bound": 2, "unmeasured": 3}
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class Where(Record):
    """A line of the user's code."""

    file: str
    line: int
    function: str = ""


class Finding(Record):
    """One problem, found by the rule of its `kind`.

    `time_lost_s` is what the problem costs where it was measured: the profiled window, or the
    whole run for one-time costs (`evidence.share_of == "run_wall"`); `time_lost_pct` is the same
    as a share of that span. `saving_s` is what fixing it would save over the whole run (the
    window's share applied to the run's steady state; one-time costs as they are; for a trace
    alone, the window), `saving_pct` that as a share of the run: findings are ranked by it.
    `symptoms` are other findings this one explains (GPU idle explained by data loading,
    compile time explained by a graph break...), each with the seconds it explains in
    `explained_s`. `evidence` holds the rule's own figures (its evidence type, in
    docs/rules.md). `label` names the user's `record_function` label the problem
    lies in. `rank` is set on findings of one rank of a multi-rank job.
    """

    kind: str
    title: Annotated[str, msgspec.Meta(min_length=1)]
    time_lost_s: NonNegative
    time_lost_pct: NonNegative
    fix: str
    severity: Severity = "low"
    where: list[Where] = []
    ops: list[str] = []
    evidence: dict[str, Any] = {}
    docs: str = ""
    rank: int | None = None
    saving_s: NonNegative = 0.0
    saving_pct: NonNegative = 0.0
    saving_of: Literal["run", "window"] = "window"
    """What `saving_pct` is a share of: the run (a live run), or the profiled window (a trace alone)."""
    confidence: Confidence = "estimated"
    saving_basis: str = ""
    """How the saving was estimated, in one line."""
    label: str | None = None
    """The user's `record_function` label its ops or line ran under, when they did."""
    symptoms: list[Finding] = []
    explained_s: float | None = None
    """On a symptom: the seconds of its time its cause explains."""
