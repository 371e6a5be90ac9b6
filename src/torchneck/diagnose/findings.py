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


GENERIC_KINDS = frozenset({"op_hotspot"})
"""Findings that say where time goes without naming a cause. Their time lost is an upper bound
(the op's whole time), so at equal severity they rank by a fifth of it (`GENERIC_WEIGHT`): a
finding that names a cause (autograd graphs nobody uses...) and saves a comparable amount comes
first, while a dominant op still outranks a cause that costs next to nothing."""
GENERIC_WEIGHT = 0.2


def order_key(kind: str, severity: str, time_lost_s: float) -> tuple:
    """The ranking: severity, then time lost (a generic finding's discounted, see GENERIC_KINDS)."""
    weight = GENERIC_WEIGHT if kind in GENERIC_KINDS else 1.0
    return (SEVERITY_ORDER.get(severity, 3), -weight * (time_lost_s or 0.0))


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """By severity, then most time lost first (see `order_key`). Severity follows the time lost
    for rules that can measure it; rules that cannot (anomaly detection left on, too many
    threads) set it, and must not sink below a measured trifle because their estimate is zero."""
    return sorted(findings, key=lambda f: order_key(f.kind, f.severity, f.time_lost_s))


def rank_finding_dicts(findings: list[dict]) -> list[dict]:
    return sorted(findings, key=lambda f: order_key(f["kind"], f["severity"], f["time_lost_s"]))
