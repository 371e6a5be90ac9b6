"""A finding: what is slow, what it costs, where in the user's code, and what to change."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from .base import Record

Severity = Literal["high", "medium", "low", "info"]
SEVERITY_ORDER: dict[str, int] = {"high": 0, "medium": 1, "low": 2, "info": 3}
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class Where(Record):
    """A line of the user's code."""

    file: str
    line: int
    function: str = ""


class Finding(Record):
    """One problem, found by one rule (`rule`) and named by its `kind`.

    `time_lost_s` is what the problem costs in the profiled window (or in the whole run, for
    one-time costs: `evidence.share_of == "run_wall"`), `time_lost_pct` the same as a share of
    it. `evidence` holds the rule's own figures (the rule's evidence type, documented in
    docs/rules.md). `rank` is set on findings of one rank of a multi-rank job.
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
