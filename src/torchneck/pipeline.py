"""Evidence -> analysis -> findings -> the report dict that every renderer reads."""

from __future__ import annotations

import json
from pathlib import Path

from . import __version__
from .analysis.compile import compile_summary, wall_split
from .analysis.python_stacks import load_samples
from .analysis.run import (
    ops_by_user_line,
    profiling_warning,
    python_phases,
    run_phases,
    sample_op_seconds,
    trace_clock_offset_us,
)
from .analysis.steps import find_steps
from .analysis.summary import analyze_with_nesting
from .analysis.views import memory_timeline, representative_step, stack_tree, step_timeline
from .diagnose.rules import Evidence, diagnose
from .errors import TorchneckError
from .trace.loader import load_trace

SCHEMA_VERSION = 1


GPU_TAIL_NOTE_SHARE = 0.2
"""Say that the CPU runs ahead when the GPU finishes the steps' work this long (as a share of
their CPU span) after them: then the CPU step times understate the steps."""


def verdict(analysis: dict | None, phases: dict | None, findings: list) -> str:
    """One paragraph: where the steady-state step time goes, and the top finding."""
    parts = []
    if analysis:
        st = analysis["steps"]
        total = sum(st["breakdown_total_us"].values()) or 1.0  # the steps' own spans
        shares = sorted(((v / total, k) for k, v in st["breakdown_total_us"].items()), reverse=True)
        described = ", ".join(f"{k.replace('_', ' ')} {100 * s:.0f}%" for s, k in shares if s >= 0.05)
        parts.append(f"{st['count']} step(s) profiled, median {st['median_us'] / 1e3:.1f} ms per step; "
                     f"the time goes to: {described or 'nothing measurable'}.")
        gpu = analysis["gpu"]
        if gpu.get("present"):
            busy = ", ".join(f"GPU {d['device']} busy {d['busy_pct']:.0f}%" for d in gpu["devices"])
            parts.append(busy + ".")
            tail = st.get("gpu_tail_us", 0.0)
            if tail > GPU_TAIL_NOTE_SHARE * (st["window_us"] - tail):
                parts.append(f"The GPU finished these steps' work {tail / 1e3:.1f} ms after their CPU side "
                             f"ended ({st['window_us'] / st['count'] / 1e3:.1f} ms a step counting it): the CPU "
                             "runs ahead, the steps are bound by the GPU.")
        else:
            parts.append("No GPU activity in the trace (CPU run).")
    if phases:
        p = phases["phases"]
        parts.append(f"Start-up before the first step took {p['startup_s']:.1f} s.")
    top = [f for f in (x if isinstance(x, dict) else x.to_dict() for x in findings) if f["severity"] != "info"]
    if top:
        parts.append(f"Biggest problem: {top[0]['title']}.")
    elif findings or analysis:
        parts.append("No significant problem found.")
    return " ".join(parts)


def report_from_run_dir(run_dir: Path) -> dict:
    """Analyse a run directory written by `torchneck run`."""
    run_dir = Path(run_dir)
    run = _read_json(run_dir / "run.json")
    env = _read_json(run_dir / "env.json", required=False) or {}
    env["settings_at_end"] = run.get("settings_at_end")
    samples = load_samples(_read_json(run_dir / "samples.json", required=False) or {})
    phases = run_phases(run)
    analysis = None
    op_s = None
    ops_lines: list[dict] = []
    trace_path = run_dir / "trace.json.gz"
    warnings = []
    if trace_path.exists():
        trace = load_trace(trace_path)
        analysis, nesting = analyze_with_nesting(trace)  # the nesting is used three times
        offset_us = trace_clock_offset_us(trace, run)  # sample clock -> trace clock, once
        ops_lines = ops_by_user_line(trace, samples, offset_us, nesting)
        op_s = sample_op_seconds(trace, samples, offset_us)
        views = trace_views(trace, nesting)
    else:
        views = {}
        warnings.append("no trace was recorded" + (f": {run['trace_error']}" if run.get("trace_error") else ""))
    python = python_phases(samples, phases, op_s)
    if profiling_warning(phases):
        warnings.append(profiling_warning(phases))
    views["stacks"] = stack_tree(samples)
    if not phases["phases"].get("window_s") or (run.get("clock") or {}).get("whole_run"):
        views["stacks_window"] = None
    else:  # the profiled steps alone: start-up (imports) would dwarf them in the whole run's graph
        w0, w1 = phases["window_offsets_s"]
        views["stacks_window"] = stack_tree(samples, w0, w1)
    compiled = compile_summary(_read_json(run_dir / "compile.json", required=False))
    if compiled.get("present"):
        compiled["wall_split"] = wall_split(compiled, analysis["compiled"] if analysis else None,
                                            run.get("wall_s") or 0.0, phases["phases"].get("window_s") or 0.0)
    ev = Evidence(analysis=analysis, env=env, phases=phases, python=python, ops_by_line=ops_lines,
                  compile=compiled, run_wall_s=run.get("wall_s") or 0.0,
                  call_sites=run.get("call_sites") or [], clock=run.get("clock") or {})
    findings = diagnose(ev)
    return report_envelope(
        "run", verdict(analysis, phases, findings), findings,
        run= {k: run.get(k) for k in ("target", "exit_code", "status", "error", "traceback", "wall_s", "cpu_s",
                                       "call_sites")}
        | {"phases": phases, "run_dir": str(run_dir)},
        env=env, python=python, ops_by_line=ops_lines, compile=compiled,
        ranks=[analysis] if analysis else [], warnings=warnings, views=views)


def write_reports(run_dir: Path, report: dict) -> dict:
    """Write report.json, report.txt and report.html into a run directory; returns `report`."""
    from .report.console import render_text
    from .report.html import render_html

    run_dir = Path(run_dir)
    (run_dir / "report.json").write_text(json.dumps(report, indent=1))
    (run_dir / "report.txt").write_text(render_text(report))
    (run_dir / "report.html").write_text(render_html(report), encoding="utf-8")
    return report


def write_run_report(run_dir: Path) -> dict:
    """Analyse a one-process run directory and write its reports."""
    return write_reports(run_dir, report_from_run_dir(Path(run_dir)))


def map_per_rank(fn, items: list, *extra: list, workers: int | None = None) -> list:
    """`fn` over per-rank items, each in its own spawned process when there are several and
    more than one core (bounded memory per rank; as many at once as there are cores); in this
    process otherwise. `extra` are further argument lists, as for `map`."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    workers = workers or min(len(items), os.cpu_count() or 1)
    if workers <= 1 or len(items) <= 1:
        return [fn(*args) for args in zip(items, *extra)]
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        return list(pool.map(fn, items, *extra))


def analyse_trace_file(path: str, rank: int | None = None, progress=None, with_views: bool = True) -> dict | None:
    """One trace file -> {"analysis", "views"}; None when it is not the wanted rank. Runs in a
    worker process for multi-rank input, so only this small summary crosses back."""
    trace = load_trace(path, progress=progress)
    if rank is not None and trace.meta.rank is not None and trace.meta.rank != rank:
        return None
    analysis, nesting = analyze_with_nesting(trace)
    return {"analysis": analysis, "views": trace_views(trace, nesting) if with_views else {},
            "ops_by_line": ops_by_user_line(trace, None, None, nesting)}  # with_stack traces: by function


def report_from_traces(paths: list[str], rank: int | None = None, progress=None, *, workers: int | None = None,
                       scheduler: str | None = None, rank_progress=None, engine_notice=None) -> dict:
    """Analyse existing trace files (a file, or a directory of per-rank traces; local paths or
    fsspec URLs). With several ranks (`cluster.job`: per-rank tasks on `workers` local Dask
    processes or an existing `scheduler`, `rank_progress(done, total)` as ranks finish): each
    rank's findings (tagged with its rank), plus the stragglers and communication findings
    from comparing them."""
    from .cluster.job import report_from_rank_files
    from .cluster.remote import list_traces, local_copy

    files = list_traces(paths)
    if len(files) > 1:
        return report_from_rank_files(files, rank, workers, scheduler, rank_progress, engine_notice)
    with local_copy(files[0]) as local:  # in this process, with the progress bar
        result = analyse_trace_file(str(local), rank, progress)
    if result is None:
        raise TorchneckError(f"no trace for rank {rank} among 1 file(s)")
    analysis = result["analysis"]
    if str(local) != files[0]:  # a remote file: named by its URL, not the local copy's path
        analysis["trace"]["path"] = files[0]
        analysis["trace"]["warnings"] = [w.replace(str(local), files[0]) for w in analysis["trace"]["warnings"]]
    findings = diagnose(Evidence(analysis=analysis, ops_by_line=result["ops_by_line"]))
    for f in findings:
        f.rank = analysis["trace"]["rank"]
    return report_envelope("analyze", verdict(analysis, None, findings), findings, ranks=[analysis],
                           warnings=list(analysis["trace"]["warnings"]), views=result["views"],
                           ops_by_line=result["ops_by_line"])


def trace_views(trace, nesting) -> dict:
    """Data for the HTML report's pictures: a typical step's timeline, memory over the steps."""
    steps = find_steps(trace.events)
    step = representative_step(steps)
    if step is None:
        return {}
    lo, hi = min(s.start for s in steps), max(s.end for s in steps)
    return {"timeline": step_timeline(trace, step, nesting), "memory": memory_timeline(trace.memory, lo, hi)}


def report_envelope(kind: str, verdict_text: str, findings: list, **sections) -> dict:
    """The report dict common to every kind: version, verdict and findings first."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "torchneck", "version": __version__},
        "kind": kind,
        "verdict": verdict_text,
        "findings": [f if isinstance(f, dict) else f.to_dict() for f in findings],
        **sections,
    }


def _read_json(path: Path, required: bool = True):
    if not path.exists():
        if required:
            raise TorchneckError(f"{path.parent}: not a torchneck run directory (no {path.name})")
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TorchneckError(f"{path}: unreadable ({exc})") from None
