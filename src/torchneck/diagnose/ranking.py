"""The order findings are shown in: most severe first, then most time lost."""

from __future__ import annotations

from ..model.findings import SEVERITY_ORDER, Finding

GENERIC_KINDS = frozenset({"op_hotspot"})
"""Findings that say where time goes without naming a cause. Their time lost is an upper bound
(the op's whole time), so at equal severity they rank by a fifth of it (`GENERIC_WEIGHT`): a
finding that names a cause (autograd graphs nobody uses...) and saves a comparable amount comes
first, while a dominant op still outranks a cause that costs next to nothing."""
GENERIC_WEIGHT = 0.2


def order_key(f: Finding) -> tuple[int, float]:
    """The ranking: severity, then time lost (a generic finding's discounted, see GENERIC_KINDS)."""
    weight = GENERIC_WEIGHT if f.kind in GENERIC_KINDS else 1.0
    return (SEVERITY_ORDER.get(f.severity, 3), -weight * (f.time_lost_s or 0.0))


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """By severity, then most time lost first (see `order_key`). Severity follows the time lost
    for rules that can measure it; rules that cannot (anomaly detection left on, too many
    threads) set it, and must not sink below a measured trifle because their estimate is zero."""
    return sorted(findings, key=order_key)
