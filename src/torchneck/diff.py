"""`torchneck diff A B`: what changed between two runs (or traces): step time, findings, ops,
Python lines. A and B are run directories, report.json files, traces, or `last` / `last~N`
(the newest runs under ./torchneck-runs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import TorchneckError

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


def load_report(path: Path) -> dict:
    """The report of a run directory (its report.json, or analysed now), a report.json, or a trace."""
    if path.is_dir():
        if (path / "report.json").exists():
            return _read(path / "report.json")
        if (path / "run.json").exists():
            from .pipeline import report_from_run_dir

            return report_from_run_dir(path)
        from .pipeline import report_from_traces

        return report_from_traces([str(path)])
    if path.name.endswith(".json") and not path.name.endswith((".pt.trace.json", ".trace.json")):
        data = _read(path)
        if isinstance(data, dict) and "schema_version" in data and "findings" in data:
            return data
    from .pipeline import report_from_traces

    return report_from_traces([str(path)])


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TorchneckError(f"{path}: unreadable ({exc})") from None


def step_us(report: dict) -> float | None:
    """Median profiled step (trace), else the steady-state step from the step clock."""
    ranks = report.get("ranks") or []
    if ranks and ranks[0].get("steps"):
        return ranks[0]["steps"]["median_us"]
    phases = (report.get("run") or {}).get("phases") or {}
    s = phases.get("steady_step_s")
    return s * 1e6 if s is not None else None


def _steps(report: dict) -> int:
    ranks = report.get("ranks") or []
    return max(1, ranks[0]["steps"]["count"]) if ranks and ranks[0].get("steps") else 1


def _finding_key(f: dict) -> tuple:
    where = f.get("where") or []
    if where:
        return f["kind"], os.path.basename(where[0]["file"]), where[0]["line"]
    if f.get("ops"):
        return f["kind"], f["ops"][0]
    return (f["kind"],)


RUN_LEVEL_KINDS = {"one_time_cost", "compile_time"}
"""Findings about the whole run (start-up, compilation): compared in ms per run, not per step."""


def _finding_ms(f: dict, steps: int) -> float:
    """Time lost per profiled step (ms), so runs with different window lengths compare; run-level
    kinds in ms per run."""
    per = 1 if f["kind"] in RUN_LEVEL_KINDS else steps
    return 1e3 * (f.get("time_lost_s") or 0.0) / per


def compare_findings(a: dict, b: dict) -> list[dict]:
    sa, sb = _steps(a), _steps(b)
    fa = {_finding_key(f): f for f in a.get("findings") or []}
    fb = {_finding_key(f): f for f in b.get("findings") or []}
    out = []
    for key in list(fa) + [k for k in fb if k not in fa]:
        x, y = fa.get(key), fb.get(key)
        f = y or x
        a_ms = _finding_ms(x, sa) if x else None
        b_ms = _finding_ms(y, sb) if y else None
        if x is None:
            status = "new"
        elif y is None:
            status = "gone"
        else:
            delta = b_ms - a_ms
            moved = abs(delta) > FINDING_CHANGE_MIN_MS and abs(delta) > FINDING_CHANGE_MIN * max(a_ms, 1e-9)
            status = ("worse" if delta > 0 else "better") if moved else "same"
        where = (f.get("where") or [{}])[0]
        out.append({"kind": f["kind"], "status": status, "title": f["title"],
                    "unit": "ms/run" if f["kind"] in RUN_LEVEL_KINDS else "ms/step",
                    "where": f"{where.get('file', '')}:{where.get('line', '')}" if where else "",
                    "a_ms": a_ms, "b_ms": b_ms,
                    "a_severity": x["severity"] if x else None, "b_severity": y["severity"] if y else None})
    order = {"new": 0, "worse": 1, "gone": 2, "better": 3, "same": 4}
    return sorted(out, key=lambda d: (order[d["status"]], -max(d["a_ms"] or 0, d["b_ms"] or 0)))


def _biggest_changes(key: str, unit: str, pa: dict[str, float], pb: dict[str, float], top: int) -> list[dict]:
    """Rows `{key, a_<unit>_per_step, b_<unit>_per_step, change_<unit>}`, largest change first."""
    rows = [{key: k, f"a_{unit}_per_step": pa.get(k, 0.0), f"b_{unit}_per_step": pb.get(k, 0.0),
             f"change_{unit}": pb.get(k, 0.0) - pa.get(k, 0.0)} for k in set(pa) | set(pb)]
    rows.sort(key=lambda d: -abs(d[f"change_{unit}"]))
    return rows[:top]


def _op_us_per_step(r: dict) -> dict[str, float]:
    ranks = r.get("ranks") or []
    return {o["name"]: o["self_us"] / _steps(r) for o in ranks[0]["ops"]["by_name"]} if ranks else {}


def _kernel_us_per_step(r: dict) -> dict[str, float]:
    ranks = r.get("ranks") or []
    gpu = ranks[0].get("gpu") if ranks else None
    if not gpu or not gpu.get("present"):
        return {}
    return {k["name"]: k["time_us"] / _steps(r) for k in gpu.get("top_kernels") or []}


def _line_ms_per_step(r: dict) -> dict[str, float]:
    py = (r.get("python") or {}).get("window") or {}
    return {f"{os.path.basename(x['file'])}:{x['line']} {x.get('function', '')}": 1e3 * x["total_s"] / _steps(r)
            for x in py.get("lines") or []}


def compare_ops(a: dict, b: dict, top: int = TOP_CHANGES) -> list[dict]:
    """Ops whose self time per step changed most (µs per step)."""
    return _biggest_changes("op", "us", _op_us_per_step(a), _op_us_per_step(b), top)


def compare_kernels(a: dict, b: dict, top: int = TOP_CHANGES) -> list[dict]:
    """GPU kernels whose time per step changed most (µs per step); empty for CPU runs."""
    return _biggest_changes("kernel", "us", _kernel_us_per_step(a), _kernel_us_per_step(b), top)


def compare_python(a: dict, b: dict, top: int = TOP_CHANGES) -> list[dict]:
    """User lines whose sampled time per profiled step moved most (ms per step)."""
    return _biggest_changes("line", "ms", _line_ms_per_step(a), _line_ms_per_step(b), top)


def diff_reports(a: dict, b: dict, label_a: str = "A", label_b: str = "B") -> dict:
    """The diff report (kind "diff"): B's findings, plus `diff` with the changes from A to B."""
    from . import __version__
    from .pipeline import SCHEMA_VERSION

    ua, ub = step_us(a), step_us(b)
    change = 100.0 * (ub - ua) / ua if ua and ub is not None else None
    findings = compare_findings(a, b)
    counts = {s: sum(1 for f in findings if f["status"] == s) for s in ("new", "gone", "better", "worse")}
    if change is None:
        head = "Step time not comparable (one side has no steps)."
    else:
        word = "slower" if change > 0 else "faster"
        head = (f"Step time {ua / 1e3:.2f} ms -> {ub / 1e3:.2f} ms ({abs(change):.1f}% {word}; "
                f"{ua / ub:.2f}x).") if ub else f"Step time {ua / 1e3:.2f} ms -> 0 ms."
    verdict = head + " Findings: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v) + "." \
        if any(counts.values()) else head + " No finding changed."
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "torchneck", "version": __version__},
        "kind": "diff",
        "verdict": verdict,
        "findings": b.get("findings") or [],
        "ranks": b.get("ranks") or [],
        "views": b.get("views") or {},
        "diff": {
            "a": {"label": label_a, "kind": a.get("kind"), "verdict": a.get("verdict")},
            "b": {"label": label_b, "kind": b.get("kind"), "verdict": b.get("verdict")},
            "step": {"a_us": ua, "b_us": ub, "change_pct": change},
            "findings": findings,
            "ops": compare_ops(a, b),
            "kernels": compare_kernels(a, b),
            "python": compare_python(a, b),
        },
        "warnings": [],
    }
