"""Findings: what is slow, what it costs, where, and what to change."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}

HIGH_SHARE = 0.25
"""A problem costing a quarter of the profiled time or more is `high`: fixing it alone is a
>1.33x speed-up."""
MEDIUM_SHARE = 0.08
"""8 % or more is `medium`: worth a change; below it a finding is `low`."""


@dataclass
class Where:
    file: str
    line: int
    function: str = ""


def where_of(items) -> list[Where]:
    """`Where`s from dicts that carry `file`, `line` and `function` (hotspot lines, call sites,
    compile frames...)."""
    return [Where(d["file"], d["line"], d.get("function", "")) for d in items]


@dataclass
class Finding:
    kind: str
    title: str
    time_lost_s: float
    time_lost_pct: float
    fix: str
    severity: str = ""
    where: list[Where] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    evidence: dict = field(default_factory=dict)
    docs: str = ""
    rank: int | None = None

    def __post_init__(self) -> None:
        if not self.severity:
            self.severity = severity_for(self.time_lost_pct / 100.0)

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["rank"] is None:
            d.pop("rank")
        return d


def severity_for(share: float) -> str:
    if share >= HIGH_SHARE:
        return "high"
    if share >= MEDIUM_SHARE:
        return "medium"
    return "low"


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """By severity, then most time lost first. Severity follows the time lost for rules that
    can measure it; rules that cannot (anomaly detection left on, too many threads) set it,
    and must not sink below a measured trifle because their estimate is zero."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], -f.time_lost_s))
