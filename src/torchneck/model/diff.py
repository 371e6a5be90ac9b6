"""`torchneck diff A B`: what changed from one report to another (the `diff` section)."""

from __future__ import annotations

from typing import Literal

from .base import Record


class FindingChange(Record):
    """One finding of A and/or B: `new` (B only), `gone` (A only), `worse`, `better` or `same`."""

    kind: str
    status: Literal["new", "worse", "gone", "better", "same"]
    title: str
    unit: Literal["ms/run", "ms/step"]
    where: str
    a_ms: float | None
    b_ms: float | None
    a_severity: str | None
    b_severity: str | None


class OpChange(Record):
    op: str
    a_us_per_step: float
    b_us_per_step: float
    change_us: float


class KernelChange(Record):
    kernel: str
    a_us_per_step: float
    b_us_per_step: float
    change_us: float


class LineChange(Record):
    line: str
    a_ms_per_step: float
    b_ms_per_step: float
    change_ms: float


class Side(Record):
    label: str
    kind: str | None
    verdict: str | None


class StepChange(Record):
    a_us: float | None
    b_us: float | None
    change_pct: float | None


class DiffSection(Record):
    """What changed from A to B (report kind "diff"; B's own findings are the report's)."""

    a: Side
    b: Side
    step: StepChange
    findings: list[FindingChange]
    ops: list[OpChange]
    kernels: list[KernelChange]
    python: list[LineChange]
