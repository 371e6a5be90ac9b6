"""Evidence -> analysis -> findings -> the `Report` every renderer reads.

    report_from_run_dir: a run directory written by `torchneck run` (one process)
    report_from_traces: existing trace files (one rank, or a directory of ranks)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import msgspec

from .analysis.compile import compile_summary, wall_split
from .analysis.key_averages import TableOptions
from .analysis.python_stacks import load_samples
from .analysis.run import (
    capture_summary,
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
from .diagnose.engine import diagnose
from .diagnose.facts import Facts
from .diagnose.source import sources_relative_to
from .errors import TorchneckError
from .model.analysis import Compiled, RankAnalysis
from .model.base import Record, to_builtins, to_json
from .model.findings import Finding
from .model.report import OpLine, Report, RunSection, Target
from .trace.loader import load_trace

GPU_TAIL_NOTE_SHARE = 0.2
"""Say that the CPU runs ahead when the GPU finishes the steps' work this long (as a share of
their CPU span) after them: then the CPU step times understate the steps."""


def verdict(analysis: RankAnalysis | None, phases: dict | None, findings: list[Finding],
            capture: dict | None = None) -> str:
    """One paragraph: where the steady-state step time goes, and the top finding."""
    parts = []
    if analysis:
        st = analysis.steps
        total = sum(st.breakdown_total_us.values()) or 1.0  # the steps' own spans
        shares = sorted(((v / total, k) for k, v in st.breakdown_total_us.items()), reverse=True)
        described = ", ".join(f"{k.replace('_', ' ')} {100 * s:.0f}%" for s, k in shares if s >= 0.05)
        if capture and capture.get("plan") in ("loop", "slice"):  # no steps: one time slice
            parts.append(f"No step markers: a {st.window_us / 1e6:.2f} s slice of the "
                         f"{'loop' if capture['plan'] == 'loop' else 'run'} was profiled; "
                         f"the time goes to: {described or 'nothing measurable'}.")
        elif capture and (capture.get("window") or {}).get("inside_step") and st.count <= 1:
            parts.append(f"Part of one step profiled ({st.window_us / 1e3:.1f} ms: the window stopped inside the "
                         f"step at its bound); the time goes to: {described or 'nothing measurable'}.")
        else:
            cut = ("; the last one cut short by the window's bound"
                   if capture and (capture.get("window") or {}).get("inside_step") else "")
            parts.append(f"{st.count} step(s) profiled{cut}, median {st.median_us / 1e3:.1f} ms per step; "
                         f"the time goes to: {described or 'nothing measurable'}.")
        gpu = analysis.gpu
        if gpu.present:
            parts.append(", ".join(f"GPU {d.device} busy {d.busy_pct:.0f}%" for d in gpu.devices) + ".")
            tail = st.gpu_tail_us
            if tail > GPU_TAIL_NOTE_SHARE * (st.window_us - tail):
                parts.append(f"The GPU finished these steps' work {tail / 1e3:.1f} ms after their CPU side "
                             f"ended ({st.window_us / st.count / 1e3:.1f} ms a step counting it): the CPU "
                             "runs ahead, the steps are bound by the GPU.")
        else:
            parts.append("No GPU activity in the trace (CPU run).")
    if phases:
        parts.append(f"Start-up before the steady state took {phases['phases']['startup_s']:.1f} s.")
    top = [f for f in findings if f.severity != "info"]
    if top:
        parts.append(f"Biggest problem: {top[0].title}.")
    elif findings or analysis:
        parts.append("No significant problem found.")
    return " ".join(parts)


def report_from_run_dir(run_dir: Path, tables: TableOptions | None = None) -> Report:
    """Analyse a run directory written by `torchneck run` (`tables`: the key_averages table's options)."""
    from .capture.recover import load_run_evidence, read_json

    run_dir = Path(run_dir)
    run, samples_data, warnings = load_run_evidence(run_dir)  # whatever the run left: see capture/recover.py
    env = read_json(run_dir / "env.json", required=False) or {}
    env["settings_at_end"] = run.get("settings_at_end")
    samples = load_samples(samples_data or {})
    phases = run_phases(run, samples)
    analysis = None
    op_s = None
    ops_lines: list[dict] = []
    trace_path = run_dir / "trace.json.gz"
    events = None
    if trace_path.exists():
        trace = load_trace(trace_path)
        events = trace.meta.event_count
        analysis, nesting = analyze_with_nesting(trace, tables=tables)  # the nesting is used three times
        offset_us = trace_clock_offset_us(trace, run)  # sample clock -> trace clock, once
        ops_lines = ops_by_user_line(trace, samples, offset_us, nesting)
        op_s = sample_op_seconds(trace, samples, offset_us)
        views = trace_views(trace, nesting)
    else:
        views = {}
        if not any(w.startswith("no trace") for w in warnings):
            warnings.append("no trace was recorded" + (f": {run['trace_error']}" if run.get("trace_error") else ""))
    python = python_phases(samples, phases, op_s, source_dir=(run.get("target") or {}).get("cwd"))
    profiling_note = profiling_warning(phases)
    if profiling_note:
        warnings.append(profiling_note)
    views["stacks"] = stack_tree(samples)
    if not phases["phases"].get("window_s") or (run.get("clock") or {}).get("whole_run"):
        views["stacks_window"] = None
    else:  # the profiled steps alone: start-up (imports) would dwarf them in the whole run's graph
        w0, w1 = phases["window_offsets_s"]
        views["stacks_window"] = stack_tree(samples, w0, w1)
    compiled = compile_summary(read_json(run_dir / "compile.json", required=False), env.get("torch"))
    if compiled.get("present"):
        trace_compiled = to_builtins(analysis.compiled) if analysis else None
        compiled["wall_split"] = wall_split(compiled, trace_compiled, run.get("wall_s") or 0.0,
                                            phases["phases"].get("window_s") or 0.0)
        if analysis and trace_compiled:  # the compile log names the graph each op and kernel came from
            analysis.compiled = msgspec.convert(trace_compiled, Compiled)
    facts = Facts(analysis=analysis, env=env, phases=phases, python=python, ops_by_line=ops_lines,
                  compile=compiled, run_wall_s=run.get("wall_s") or 0.0,
                  call_sites=run.get("call_sites") or [], clock=run.get("clock") or {})
    target = run.get("target") or {}
    with sources_relative_to(target.get("cwd")):
        findings = diagnose(facts)
    capture = capture_summary(run, phases, events)
    section = RunSection(
        target=Target(script=target.get("script"), module=target.get("module"), args=list(target.get("args") or []),
                      cwd=target.get("cwd")),
        exit_code=-1 if run.get("exit_code") is None else run["exit_code"], status=run["status"],
        wall_s=run.get("wall_s") or 0.0, error=run.get("error"), traceback=run.get("traceback"), cpu_s=run.get("cpu_s"),
        call_sites=run.get("call_sites"), phases=phases, run_dir=str(run_dir))
    return Report(kind="run", verdict=verdict(analysis, phases, findings, capture), findings=findings, run=section,
                  env=env, python=python, ops_by_line=op_lines(ops_lines), compile=compiled,
                  ranks=[analysis] if analysis else [], warnings=warnings, views=views, capture=capture)


def op_lines(entries: list[dict]) -> list[OpLine]:
    """`analysis/run.ops_by_user_line`'s entries, typed."""
    return [msgspec.convert(e, OpLine) for e in entries]


def write_reports(run_dir: Path, report: Report) -> Report:
    """Write report.json, report.txt and report.html into a run directory; returns `report`."""
    from .report.console import render_text
    from .report.html import render_html

    run_dir = Path(run_dir)
    (run_dir / "report.json").write_bytes(to_json(report, indent=1))
    (run_dir / "report.txt").write_text(render_text(report))
    (run_dir / "report.html").write_text(render_html(report), encoding="utf-8")
    return report


def write_run_report(run_dir: Path, tables: TableOptions | None = None) -> Report:
    """Analyse a one-process run directory and write its reports."""
    return write_reports(run_dir, report_from_run_dir(Path(run_dir), tables))


class TraceResult(Record):
    """One trace's analysis, what crosses back from a worker process for multi-rank input."""

    analysis: RankAnalysis
    views: dict[str, Any] = {}
    ops_by_line: list[OpLine] = []


def analyse_trace_file(path: str, rank: int | None = None, progress=None, with_views: bool = True,
                       tables: TableOptions | None = None, pool=None) -> TraceResult | None:
    """One trace file -> its analysis; None when it is not the wanted rank. `pool`: a cluster's
    workers decode the file's byte ranges (`cluster.engine.RangePool`)."""
    trace = load_trace(path, progress=progress, pool=pool)
    if rank is not None and trace.meta.rank is not None and trace.meta.rank != rank:
        return None
    analysis, nesting = analyze_with_nesting(trace, tables=tables)
    return TraceResult(analysis=analysis, views=trace_views(trace, nesting) if with_views else {},
                       ops_by_line=op_lines(ops_by_user_line(trace, None, None, nesting)))  # with_stack: by function


def analyse_trace_file_or_error(path: str, rank: int | None = None, tables: TableOptions | None = None
                                ) -> TraceResult | str | None:
    """`analyse_trace_file`, with a file that cannot be read given as its one-line error: one
    broken rank file must not cost the report of the others."""
    try:
        return analyse_trace_file(path, rank, tables=tables)
    except TorchneckError as exc:
        return str(exc)


def report_from_traces(paths: list[str], rank: int | None = None, progress=None,
                       tables: TableOptions | None = None, *, workers: int | None = None,
                       scheduler: str | None = None, rank_progress=None, engine_notice=None) -> Report:
    """Analyse existing trace files (a file, or a directory of per-rank traces; local paths or
    fsspec URLs). With several ranks (`cluster.job`: per-rank tasks on `workers` local Dask
    processes or an existing `scheduler`, `rank_progress(done, total)` as ranks finish): each
    rank's findings (tagged with its rank), plus the stragglers and communication findings
    from comparing them; a rank file that cannot be read is listed in the warnings."""
    from .cluster.engine import RangePool
    from .cluster.job import report_from_rank_files
    from .cluster.remote import list_traces, local_copy

    files = list_traces(paths)
    if len(files) > 1:
        return report_from_rank_files(files, rank, workers, scheduler, rank_progress, engine_notice, tables)
    split = _split_engine(files[0], workers, scheduler)
    if split is not None:  # one huge trace: its byte ranges decoded on the cluster's workers
        with split as engine:
            if engine_notice:
                engine_notice(f"{engine.name}: byte ranges of one trace")
            shared = str(Path(files[0]).resolve())  # the workers' working directory may differ
            result = analyse_trace_file(shared, rank, progress, tables=tables, pool=RangePool(engine))
            if result is not None:
                tr = result.analysis.trace
                tr.path, tr.warnings = files[0], [w.replace(shared, files[0]) for w in tr.warnings]
    else:
        with local_copy(files[0]) as local:  # in this process, with the progress bar
            result = analyse_trace_file(str(local), rank, progress, tables=tables)
            if result is not None and str(local) != files[0]:  # a remote file: named by its URL, not its copy's path
                tr = result.analysis.trace
                tr.path, tr.warnings = files[0], [w.replace(str(local), files[0]) for w in tr.warnings]
    if result is None:
        raise TorchneckError(f"no trace for rank {rank} among 1 file(s)")
    analysis = result.analysis
    findings = diagnose(Facts(analysis=analysis, ops_by_line=[to_builtins(e) for e in result.ops_by_line]))
    for f in findings:
        f.rank = analysis.trace.rank
    return Report(kind="analyze", verdict=verdict(analysis, None, findings), findings=findings, ranks=[analysis],
                  warnings=list(analysis.trace.warnings), views=result.views, ops_by_line=result.ops_by_line)


def _split_engine(file: str, workers: int | None, scheduler: str | None):
    """The Dask engine that decodes one trace's byte ranges, or None: only when a cluster was
    asked for (`--workers N`, `--scheduler`, `TORCHNECK_SCHEDULER`) and the trace is a local
    (or shared) uncompressed file of at least `SPLIT_MIN_BYTES`. A compressed file is one
    stream that cannot be entered in the middle; a URL is fetched, then read here."""
    from .cluster.engine import SCHEDULER_ENV, SPLIT_MIN_BYTES, Dask, make_engine
    from .trace.source import GZIP_MAGIC

    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    if not scheduler and not workers:
        return None
    try:
        st = os.stat(file)
        if not stat.S_ISREG(st.st_mode) or st.st_size < SPLIT_MIN_BYTES:  # a pipe is never opened here
            return None
        with open(file, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                return None
    except (OSError, ValueError):  # a URL, or unreadable: the usual path says why
        return None
    engine = make_engine(workers, scheduler)
    return engine if isinstance(engine, Dask) else None


def trace_views(trace, nesting) -> dict:
    """Data for the HTML report's pictures: a typical step's timeline, memory over the steps."""
    steps = find_steps(trace.events)
    step = representative_step(steps)
    if step is None:
        return {}
    lo, hi = min(s.start for s in steps), max(s.end for s in steps)
    return {"timeline": step_timeline(trace, step, nesting), "memory": memory_timeline(trace.memory, lo, hi)}


def read_report(path: Path) -> Report:
    """A report.json (of this or an earlier version of schema 1) as a `Report`."""
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=Report)
    except OSError as exc:
        raise TorchneckError(f"{path}: unreadable ({exc.strerror or exc})") from None
    except msgspec.ValidationError as exc:
        raise TorchneckError(f"{path}: not a torchneck report ({exc})") from None
    except msgspec.DecodeError as exc:
        raise TorchneckError(f"{path}: not JSON ({exc})") from None
