"""`torchneck diff A B`: what changed between two runs (or traces): step time, findings, ops,
Python lines. A and B are run directories, report.json files, traces, or `last` / `last~N`
(the newest runs under ./torchneck-runs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from .errors import TorchneckError
from .model.diff import DiffSection, FindingChange, KernelChange, LineChange, OpChange, Side, StepChange
from .model.findings import Finding
from .model.report import Report

RUNS_DIR = Path("torchneck-runs")
FINDING_CHANGE_MIN = 0.10
"""A finding is `better`/`worse` when its time lost moved by more than 10 % ..."""
FINDING_CHANGE_MIN_MS = 0.05
"""... and by more than 0.05 ms per step: smaller moves are noise."""
TOP_CHANGES = 15


def resolve_input(spec: str, runs_dir: Path = RUNS_DIR) -> Path:
    """`last`, `last~1`, ... -> the newest run directories (by name: they start with the time)."""
    if spec == "last" or spec.startswith("last~"):
        try:
            back = int(spec[5:]) if spec != "last" else 0
        except ValueError:
            raise TorchneckError(f"{spec!r}: write last, last~1, last~2, ...") from None
        runs = sorted((d for d in runs_dir.glob("*") if (d / "run.json").exists()), key=lambda d: d.name)
        if back >= len(runs):
            raise TorchneckError(f"{spec}: only {len(runs)} run(s) under {runs_dir}/")
        return runs[-1 - back]
    path = Path(spec)
    if not path.exists():
        raise TorchneckError(f"{spec}: no such run directory, report.json or trace")
    return path


def load_report(path: Path) -> Report:
    """The report of a run directory (its report.json, or analysed now), a report.json, or a trace."""
    from .pipeline import read_report, report_from_run_dir, report_from_traces

    if path.is_dir():
        if (path / "report.json").exists():
            return read_report(path / "report.json")
        if (path / "run.json").exists():
            return report_from_run_dir(path)
        return report_from_traces([str(path)])
    if path.name.endswith(".json") and not path.name.endswith((".pt.trace.json", ".trace.json")) \
            and _looks_like_report(path):
        return read_report(path)
    return report_from_traces([str(path)])


def _looks_like_report(path: Path) -> bool:
    """A report.json starts with its schema version (a trace never has one)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b'"schema_version"' in head


def step_us(report: Report) -> float | None:
    """Median profiled step (trace), else the steady-state step from the step clock."""
    if report.ranks:
        return report.ranks[0].steps.median_us
    phases = (report.run.phases if report.run else None) or {}
    s = phases.get("steady_step_s")
    return s * 1e6 if s is not None else None


def _steps(report: Report) -> int:
    return max(1, report.ranks[0].steps.count) if report.ranks else 1


def _finding_key(f: Finding) -> tuple:
    if f.where:
        return f.kind, os.path.basename(f.where[0].file), f.where[0].line
    if f.ops:
        return f.kind, f.ops[0]
    return (f.kind,)


RUN_LEVEL_KINDS = {"one_time_cost", "compile_time"}
"""Findings about the whole run (start-up, compilation): compared in ms per run, not per step."""


def _finding_ms(f: Finding, steps: int) -> float:
    """Time lost per profiled step (ms), so runs with different window lengths compare; run-level
    kinds in ms per run."""
    per = 1 if f.kind in RUN_LEVEL_KINDS else steps
    return 1e3 * (f.time_lost_s or 0.0) / per


def compare_findings(a: Report, b: Report) -> list[FindingChange]:
    sa, sb = _steps(a), _steps(b)
    fa = {_finding_key(f): f for f in a.findings}
    fb = {_finding_key(f): f for f in b.findings}
    out = []
    for key in list(fa) + [k for k in fb if k not in fa]:
        x, y = fa.get(key), fb.get(key)
        f = y or x
        assert f is not None
        a_ms = _finding_ms(x, sa) if x else None
        b_ms = _finding_ms(y, sb) if y else None
        status: Literal["new", "worse", "gone", "better", "same"]
        if a_ms is None:
            status = "new"
        elif b_ms is None:
            status = "gone"
        else:
            delta = b_ms - a_ms
            moved = abs(delta) > FINDING_CHANGE_MIN_MS and abs(delta) > FINDING_CHANGE_MIN * max(a_ms, 1e-9)
            status = ("worse" if delta > 0 else "better") if moved else "same"
        where = f"{f.where[0].file}:{f.where[0].line}" if f.where else ""
        out.append(FindingChange(kind=f.kind, status=status, title=f.title,
                                 unit="ms/run" if f.kind in RUN_LEVEL_KINDS else "ms/step", where=where,
                                 a_ms=a_ms, b_ms=b_ms, a_severity=x.severity if x else None,
                                 b_severity=y.severity if y else None))
    order = {"new": 0, "worse": 1, "gone": 2, "better": 3, "same": 4}
    return sorted(out, key=lambda d: (order[d.status], -max(d.a_ms or 0, d.b_ms or 0)))


def _biggest_changes(pa: dict[str, float], pb: dict[str, float], top: int) -> list[tuple[str, float, float]]:
    """(name, A per step, B per step) of the largest changes first."""
    rows = [(k, pa.get(k, 0.0), pb.get(k, 0.0)) for k in set(pa) | set(pb)]
    rows.sort(key=lambda r: -abs(r[2] - r[1]))
    return rows[:top]


def _op_us_per_step(r: Report) -> dict[str, float]:
    return {o.name: o.self_us / _steps(r) for o in r.ranks[0].ops.by_name} if r.ranks else {}


def _kernel_us_per_step(r: Report) -> dict[str, float]:
    if not r.ranks or not r.ranks[0].gpu.present:
        return {}
    return {k.name: k.time_us / _steps(r) for k in r.ranks[0].gpu.top_kernels}


def _line_ms_per_step(r: Report) -> dict[str, float]:
    py = (r.python or {}).get("window") or {}
    return {f"{os.path.basename(x['file'])}:{x['line']} {x.get('function', '')}": 1e3 * x["total_s"] / _steps(r)
            for x in py.get("lines") or []}


def compare_ops(a: Report, b: Report, top: int = TOP_CHANGES) -> list[OpChange]:
    """Ops whose self time per step changed most (µs per step)."""
    return [OpChange(op=k, a_us_per_step=x, b_us_per_step=y, change_us=y - x)
            for k, x, y in _biggest_changes(_op_us_per_step(a), _op_us_per_step(b), top)]


def compare_kernels(a: Report, b: Report, top: int = TOP_CHANGES) -> list[KernelChange]:
    """GPU kernels whose time per step changed most (µs per step); empty for CPU runs."""
    return [KernelChange(kernel=k, a_us_per_step=x, b_us_per_step=y, change_us=y - x)
            for k, x, y in _biggest_changes(_kernel_us_per_step(a), _kernel_us_per_step(b), top)]


def compare_python(a: Report, b: Report, top: int = TOP_CHANGES) -> list[LineChange]:
    """User lines whose sampled time per profiled step moved most (ms per step)."""
    return [LineChange(line=k, a_ms_per_step=x, b_ms_per_step=y, change_ms=y - x)
            for k, x, y in _biggest_changes(_line_ms_per_step(a), _line_ms_per_step(b), top)]


def diff_reports(a: Report, b: Report, label_a: str = "A", label_b: str = "B") -> Report:
    """The diff report (kind "diff"): B's findings, plus `diff` with the changes from A to B."""
    ua, ub = step_us(a), step_us(b)
    change = 100.0 * (ub - ua) / ua if ua and ub is not None else None
    findings = compare_findings(a, b)
    counts = {s: sum(1 for f in findings if f.status == s) for s in ("new", "gone", "better", "worse")}
    if change is None or ua is None or ub is None:
        head = "Step time not comparable (one side has no steps)."
    else:
        word = "slower" if change > 0 else "faster"
        head = (f"Step time {ua / 1e3:.2f} ms -> {ub / 1e3:.2f} ms ({abs(change):.1f}% {word}; "
                f"{ua / ub:.2f}x).") if ub else f"Step time {ua / 1e3:.2f} ms -> 0 ms."
    verdict = head + " Findings: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v) + "." \
        if any(counts.values()) else head + " No finding changed."
    section = DiffSection(
        a=Side(label=label_a, kind=a.kind, verdict=a.verdict), b=Side(label=label_b, kind=b.kind, verdict=b.verdict),
        step=StepChange(a_us=ua, b_us=ub, change_pct=change), findings=findings, ops=compare_ops(a, b),
        kernels=compare_kernels(a, b), python=compare_python(a, b))
    return Report(kind="diff", verdict=verdict, findings=b.findings, ranks=b.ranks, views=b.views or {},
                  diff=section)
