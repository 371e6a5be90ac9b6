"""Command line: `torchneck run`, `torchneck analyze`, and `python -m torchneck script.py`."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .errors import TorchneckError

if TYPE_CHECKING:
    from .model.report import Report

RUN_EPILOG = """\
Everything after the script (or -m module) is passed to it unchanged, its own --help included.

examples:
  torchneck run train.py --epochs 1
  torchneck run --steps 10 --warmup 5 -m mypackage.train
  python -m torchneck train.py --epochs 1      (the torch.utils.bottleneck form)
"""


BISECT_EPILOG = """\
exit code: 0 when the compiled run works, 1 when a stage failed (the report names it), 2 on bad usage.

examples:
  torchneck bisect train.py --epochs 1
  torchneck bisect --accuracy --tolerance 1e-4 infer.py
  torchneck bisect --minify train.py
"""


def _add_target(parser: argparse.ArgumentParser) -> None:
    """What to run: `script [args...]` or `-m module [args...]`, as with python."""
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like python -m")
    parser.add_argument("script", nargs="?", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", help="run directory (default ./torchneck-runs/<time>-<script>/)")
    p.add_argument("--warmup", type=int, default=None, metavar="N",
                   help="steps to skip before profiling (warm-up, compilation; default 3, or 2 when the "
                        "steps last seconds each)")
    p.add_argument("--steps", type=int, default=5, metavar="N", help="steps to profile (default 5)")
    p.add_argument("--duration", type=float, metavar="S",
                   help="profile for S seconds after warm-up instead of a number of steps")
    p.add_argument("--all", action="store_true", help="profile the whole run, warm-up included")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="stop the script after S seconds; the report of what ran is still written (exit 124)")
    p.add_argument("--no-shapes", action="store_true", help="do not record input shapes (less overhead)")
    p.add_argument("--no-memory", action="store_true", help="do not record memory events (less overhead)")
    p.add_argument("--with-stack", action="store_true",
                   help="record Python stacks in the profiler too (slow; the sampler is used otherwise)")
    p.add_argument("--max-window-s", type=float, default=None, metavar="S",
                   help="stop the profiled window after S seconds, whatever started it (default 10)")
    p.add_argument("--max-window-mb", type=float, default=None, metavar="MB",
                   help="stop the profiled window once the profiler holds MB of events (default 4; "
                        "a window of steps keeps at least 2 steps)")
    p.add_argument("--slice", type=float, default=None, metavar="S",
                   help="length of the time slice profiled in a program without steps (default 1)")
    p.add_argument("--nvtx", action="store_true",
                   help="annotate steps and record_function labels for Nsight Systems (NVTX, CUDA) "
                        "or VTune (ITT, CPU) captured alongside")
    p.add_argument("--json", metavar="FILE", help="also write the report JSON here ('-' for stdout)")
    p.add_argument("--quiet", action="store_true", help="print no report (files are still written)")
    _add_fail_on(p)
    dist = p.add_argument_group("multi-process jobs (launched with torchrun, torch.distributed.run)")
    dist.add_argument("--nproc-per-node", type=int, metavar="N",
                      help="run the script as N processes under torchrun, each rank profiled into RUN_DIR/rank-<R>/, "
                           "then one merged report (stragglers, communication)")
    dist.add_argument("--nnodes", metavar="N|MIN:MAX", help="torchrun --nnodes")
    dist.add_argument("--node-rank", type=int, metavar="R", help="torchrun --node-rank")
    dist.add_argument("--master-addr", metavar="HOST", help="torchrun --master-addr")
    dist.add_argument("--master-port", type=int, metavar="PORT", help="torchrun --master-port")
    dist.add_argument("--rdzv-backend", metavar="NAME", help="torchrun --rdzv-backend")
    dist.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="torchrun --rdzv-endpoint")
    dist.add_argument("--rdzv-id", metavar="ID", help="torchrun --rdzv-id")
    _add_target(p)


def _add_fail_on(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fail-on", choices=("high", "medium", "low"), metavar="SEVERITY",
                   help="exit 1 when a finding of this severity or worse exists (high|medium|low; for CI gates)")


def _add_table_options(p: argparse.ArgumentParser) -> None:
    """The profiler recipe's `key_averages(...).table(...)` options: the terminal shows the table
    when one is given (report.json and the HTML always hold it)."""
    g = p.add_argument_group("key_averages table (as torch.profiler's prof.key_averages(...).table(...))")
    g.add_argument("--sort-by", metavar="KEY",
                   help="sort the table by this column: self_cpu_time_total (default), cpu_time_total, "
                        "self_cuda_time_total, cuda_time_total, self_cpu_memory_usage, cpu_memory_usage, "
                        "self_cuda_memory_usage, cuda_memory_usage, count, cpu_time, cuda_time")
    g.add_argument("--row-limit", type=int, metavar="N", help="rows to show (default 25; -1 for all)")
    g.add_argument("--group-by-shape", action="store_true",
                   help="one row per op and input shapes (group_by_input_shape=True; needs record_shapes)")
    g.add_argument("--group-by-stack", type=int, metavar="N",
                   help="one row per op and its N innermost Python frames (group_by_stack_n=N; needs with_stack)")


def _table_options(ns: argparse.Namespace):
    from .analysis.key_averages import TableOptions

    return TableOptions.make(ns.sort_by, ns.row_limit, ns.group_by_shape, ns.group_by_stack)


SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2, "info": 3}


def failed_gate(report: Report, fail_on: str | None) -> bool:
    """True when `--fail-on` is set and a finding is at least that severe."""
    if not fail_on:
        return False
    limit = SEVERITY_RANK[fail_on]
    return any(SEVERITY_RANK.get(f.severity, 3) <= limit for f in report.findings)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchneck",
        description="Why is my PyTorch program slow? Runs a script once (or reads profiler traces) "
                    "and reports what costs time, where in your code, and what to change.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"torchneck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run a script once and diagnose it", epilog=RUN_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         description="Run a script once, unmodified, under a Python sampler and a "
                                     "windowed torch.profiler, then print a diagnosis.")
    _add_run_options(run)
    comp = sub.add_parser("compile", help="run a script once and report on torch.compile only",
                          description="Run a script once and report its torch.compile behaviour: graph "
                                      "breaks (line, reason), recompilations (the guard that failed), "
                                      "compile time by stage, most costly first.")
    comp.add_argument("--cold", action="store_true",
                      help="also run it once more with inductor's caches disabled "
                           "(TORCHINDUCTOR_FORCE_DISABLE_CACHES=1) and show the cold compile time")
    _add_run_options(comp)
    bis = sub.add_parser("bisect", help="find which torch.compile stage breaks a script (or its numbers)",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=BISECT_EPILOG,
                         description="Run a script whose compiled run fails, crashes, hangs or (with "
                                     "--accuracy) computes different numbers, with every torch.compile "
                                     "call forced onto backend eager, aot_eager, aot_eager_decomp_partition "
                                     "and its own, each in a subprocess, and name the first stage that fails.")
    bis.add_argument("--accuracy", action="store_true",
                     help="also compare each compiled graph's outputs with the graph run eagerly")
    bis.add_argument("--tolerance", type=float, default=1e-3, metavar="TOL",
                     help="--accuracy: rtol and atol of the comparison (default 1e-3)")
    bis.add_argument("--check-calls", type=int, default=2, metavar="N",
                     help="--accuracy: calls checked per compiled graph (default 2)")
    bis.add_argument("--timeout", type=float, metavar="S",
                     help="time limit of each stage (default: 600 s for the first run, then "
                          "max(120 s, 4x the first run))")
    bis.add_argument("--minify", action="store_true",
                     help="then run PyTorch's minifier on the failing stage and point at its repro.py")
    bis.add_argument("--minify-timeout", type=float, default=1800.0, metavar="S",
                     help="time limit of the minifier (default 1800 s)")
    bis.add_argument("--out", metavar="DIR", help="output directory (default ./torchneck-runs/<time>-<script>/)")
    bis.add_argument("--json", metavar="FILE", help="also write the bisection JSON here ('-' for stdout)")
    bis.add_argument("--quiet", action="store_true", help="print no report (files are still written)")
    _add_target(bis)
    an = sub.add_parser("analyze", help="diagnose existing profiler traces (.json / .json.gz, or a directory)",
                        description="Diagnose torch.profiler / Kineto traces from any PyTorch since 1.8.")
    an.add_argument("paths", nargs="+", metavar="TRACE|DIR")
    an.add_argument("--rank", type=int, help="report on this rank only")
    an.add_argument("--json", metavar="FILE", help="write the report JSON here ('-' for stdout)")
    an.add_argument("--quiet", action="store_true", help="print no terminal report")
    an.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report here")
    _add_fail_on(an)
    _add_table_options(an)
    many = an.add_argument_group("many ranks (Dask distributed: pip install 'torchneck[cluster]')")
    many.add_argument("--workers", type=int, metavar="N",
                      help="analyse the ranks on N local worker processes (an embedded Dask LocalCluster; "
                           "0 = in this process). Default: one a core from 8 ranks on, when Dask is installed")
    many.add_argument("--scheduler", metavar="tcp://HOST:8786",
                      help="analyse the ranks on an existing Dask cluster (default: $TORCHNECK_SCHEDULER); "
                           "its workers read the traces themselves (a shared path, or a URL: s3://, gs://, https://)")
    rep = sub.add_parser("report", help="re-analyse a run directory written by `torchneck run`")
    rep.add_argument("run_dir", metavar="RUN_DIR")
    rep.add_argument("--json", metavar="FILE", help="write the report JSON here ('-' for stdout)")
    rep.add_argument("--html", action="store_true",
                     help="(re)write RUN_DIR/report.html and say where it is, instead of the terminal report")
    rep.add_argument("--quiet", action="store_true", help="print no terminal report")
    _add_fail_on(rep)
    _add_table_options(rep)
    dif = sub.add_parser("diff", help="compare two runs: step time, findings, ops, Python lines",
                         description="Compare two runs (run directories, report.json files or traces; "
                                     "`last` and `last~1` are the newest runs in ./torchneck-runs).")
    dif.add_argument("a", metavar="A", help="the baseline: RUN_DIR, report.json, trace, or last~1")
    dif.add_argument("b", metavar="B", help="the new run: RUN_DIR, report.json, trace, or last")
    dif.add_argument("--json", metavar="FILE", help="write the diff JSON here ('-' for stdout)")
    dif.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page of the diff")
    dif.add_argument("--quiet", action="store_true", help="print no terminal report")
    dif.add_argument("--fail-on-regression", type=float, metavar="PCT",
                     help="exit 1 when B's step time is more than PCT %% slower than A's")
    return parser


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def write_output(target: str, text: str | bytes) -> None:
    """Write a report file given on the command line, creating its folder when missing; a path
    that cannot be written (a file where a folder should be, no permission) is one line."""
    path = Path(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise TorchneckError(f"{target}: cannot write the report there ({exc.strerror or exc})") from None


def _emit(report: Report, json_target: str | None, quiet: bool) -> None:
    from .model.base import to_json
    from .report.console import ConsoleRenderer

    if json_target == "-":
        sys.stdout.write(to_json(report, indent=1).decode() + "\n")
    else:
        if json_target:
            write_output(json_target, to_json(report, indent=1))
        if not quiet:
            ConsoleRenderer().render(report)


def cmd_run(ns: argparse.Namespace) -> int:
    report, run_dir, code = _capture_and_analyse(ns)
    if report is not None:
        _emit(report, ns.json, ns.quiet)
        _stderr_console().print(f"torchneck: run directory {run_dir}")
        if failed_gate(report, ns.fail_on) and not code:
            code = 1
    return code


COMPILE_KINDS = ("graph_break", "recompile", "compile_time", "internal")


def cmd_compile(ns: argparse.Namespace) -> int:
    """`run`, with the report narrowed to torch.compile; `--cold` adds a cache-less second run."""
    report, run_dir, code = _capture_and_analyse(ns)
    if report is None or run_dir is None:
        return code
    from .model.base import to_json

    if ns.cold and report.compile is not None:
        report.compile["cold"] = _cold_compile(ns, run_dir)
    report.kind = "compile"
    report.findings = [f for f in report.findings if f.kind in COMPILE_KINDS]
    (run_dir / "report-compile.json").write_bytes(to_json(report, indent=1))
    _emit(report, ns.json, ns.quiet)
    _stderr_console().print(f"torchneck: run directory {run_dir}")
    if failed_gate(report, ns.fail_on) and not code:
        code = 1
    return code


def _cold_compile(ns: argparse.Namespace, run_dir: Path) -> dict:
    """Run the script again in a fresh process with inductor's caches disabled; its compile figures."""
    import subprocess

    cold_dir = run_dir / "cold"
    argv = [sys.executable, "-m", "torchneck", "run", "--quiet", "--out", str(cold_dir),
            "--steps", str(ns.steps)] + (["--warmup", str(ns.warmup)] if ns.warmup is not None else [])
    if ns.timeout:
        argv += ["--timeout", str(ns.timeout)]
    argv += ["-m", ns.module] if ns.module else []
    argv += ([ns.script] if ns.script else []) + list(ns.args)
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    _stderr_console().print("torchneck: compiling again with inductor's caches disabled (--cold)…")
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        cold = json.loads((cold_dir / "report.json").read_text())
    except (OSError, json.JSONDecodeError):
        tail = proc.stderr.strip().splitlines()[-1:] or ["no report written"]
        return {"ok": False, "error": tail[0], "run_dir": str(cold_dir)}
    comp = cold.get("compile") or {}
    return {"ok": True, "run_dir": str(cold_dir), "wall_s": cold["run"]["wall_s"],
            "time_s": comp.get("time_s"), "exit_code": cold["run"]["exit_code"]}


def _target(ns: argparse.Namespace):
    """The script or module to run, from `run`/`compile`/`bisect` arguments."""
    from .capture.runner import Target

    if ns.module:
        args = ([ns.script] if ns.script else []) + list(ns.args)
        return Target(module=ns.module, args=tuple(args))
    if ns.script:
        return Target(script=Path(ns.script), args=tuple(ns.args))
    raise TorchneckError(f"nothing to run: give a script (torchneck {ns.command} script.py) or -m module")


def _capture_and_analyse(ns: argparse.Namespace) -> tuple[Report | None, Path | None, int]:
    """Run the target under capture, write the raw evidence, then analyse it: (report, run dir,
    exit code). The report is None when the analysis failed (the evidence is kept)."""
    from .capture.window import WindowOptions

    target = _target(ns)
    for name in ("warmup", "steps"):
        if (getattr(ns, name) or 0) < 0 or (name == "steps" and ns.steps == 0):
            raise TorchneckError(f"--{name} must be a positive number of steps")
    bounds = {}
    for name in ("max_window_s", "max_window_mb", "slice"):
        value = getattr(ns, name)
        if value is not None:
            if value <= 0:
                raise TorchneckError(f"--{name.replace('_', '-')} must be a positive number")
            bounds["slice_s" if name == "slice" else name] = value
    warmup = {} if ns.warmup is None else {"warmup": ns.warmup, "warmup_s": None}  # asked for: as many steps
    options = WindowOptions(**warmup, steps=ns.steps, duration=ns.duration, all=ns.all,
                            record_shapes=not ns.no_shapes, profile_memory=not ns.no_memory,
                            with_stack=ns.with_stack, nvtx=ns.nvtx, **bounds)
    err = _stderr_console()
    if ns.nproc_per_node is not None:
        return _launch_and_analyse(ns, target, options)
    from .capture.session import capture_run

    status = (lambda msg: err.print(f"torchneck: {msg}…")) if err.is_terminal and not ns.quiet else None
    result = capture_run(target, options, ns.out, ns.timeout, status=status,
                         on_hard_exit=lambda result: _report_hard_exit(ns, result))
    return _analyse_result(result)


def _report_hard_exit(ns: argparse.Namespace, result) -> None:
    """The script called os._exit: its report, before the process ends (the command's own
    printing never runs)."""
    report, run_dir, _ = _analyse_result(result)
    if report is not None:
        _emit(report, ns.json, ns.quiet)
        _stderr_console().print(f"torchneck: run directory {run_dir}")
    sys.stdout.flush()
    sys.stderr.flush()


def _status(console, message: str):
    """A spinner on a terminal; nothing otherwise (rich's spinners cost ~65 ms of imports, paid by
    every run a script or CI makes)."""
    return console.status(message) if console.is_terminal else contextlib.nullcontext()


def _analyse_result(result) -> tuple[Report | None, Path | None, int]:
    """Analyse a captured run: (report, run dir, exit code); the report is None when the
    analysis failed (the evidence is kept)."""
    err = _stderr_console()
    outcome = result.outcome
    if outcome.traceback and outcome.status in ("exception", "timeout", "interrupted", "terminated"):
        sys.stderr.write(outcome.traceback)
    if outcome.error:
        err.print(f"[yellow]torchneck: {outcome.error}[/]")
    from .trace.allocator import return_large_frees_promptly

    # The script is over: torchneck's allocator settings from here, never during the script (all
    # its allocations of 1 MB or more mapped afresh: its tensors' page faults, not its own speed).
    return_large_frees_promptly()
    # The script's objects (and torch's: ~1 M after its import) are left out of the collections
    # the analysis triggers: each full one walked them all (~0.09 s a run, measured).
    gc.freeze()
    try:
        with _status(err, "torchneck: analysing the run…"):
            report = build_run_report(result.run_dir)
    except TorchneckError as exc:
        err.print(f"torchneck: analysis failed: {exc}; the raw evidence is kept in {result.run_dir}")
        return None, result.run_dir, outcome.exit_code or 2
    except Exception as exc:  # an analysis bug must not hide the run
        if os.environ.get("TORCHNECK_DEBUG"):
            raise
        err.print(f"torchneck: analysis failed ({type(exc).__name__}: {exc}); "
                  f"the raw evidence is kept in {result.run_dir}")
        return None, result.run_dir, outcome.exit_code or 2
    finally:
        gc.unfreeze()  # as they were: the interpreter's last collection at exit sees them all again
    return report, result.run_dir, outcome.exit_code


def _launch_and_analyse(ns: argparse.Namespace, target, options) -> tuple[Report | None, Path | None, int]:
    """`run --nproc-per-node N`: the job under torchrun, then one merged analysis of its ranks."""
    from .capture.launch import TorchrunOptions, launch_job
    from .capture.runner import check_target
    from .capture.session import make_run_dir

    if ns.nproc_per_node < 1:
        raise TorchneckError("--nproc-per-node must be at least 1")
    check_target(target)
    run_dir = make_run_dir(ns.out, target.label)
    torchrun = TorchrunOptions(ns.nproc_per_node, ns.nnodes, ns.node_rank, ns.master_addr, ns.master_port,
                               ns.rdzv_backend, ns.rdzv_endpoint, ns.rdzv_id)
    code = launch_job(target, options, run_dir, torchrun, ns.timeout)
    from .trace.allocator import return_large_frees_promptly

    return_large_frees_promptly()  # the ranks ran in their own processes; the analysis runs here
    err = _stderr_console()
    try:
        with _status(err, "torchneck: analysing the ranks…"):
            report = write_job_report(run_dir)
    except TorchneckError as exc:
        err.print(f"torchneck: analysis failed: {exc}; the raw evidence is kept in {run_dir}")
        return None, run_dir, code or 2
    return report, run_dir, code


def write_job_report(run_dir: Path) -> Report:
    from .jobs import report_from_job_dir
    from .pipeline import write_reports

    return write_reports(run_dir, report_from_job_dir(run_dir))


def build_run_report(run_dir: Path, tables=None) -> Report:
    """report.json/.txt/.html of a run directory: one process, or a multi-rank job (`tables`:
    the key_averages table's options, for one process)."""
    from .capture.recover import is_job_dir
    from .pipeline import write_run_report

    if is_job_dir(run_dir):
        return write_job_report(run_dir)
    return write_run_report(run_dir, tables)


def _write_html(report: Report, target: str | None) -> None:
    if target:
        from .report.html import render_html

        write_output(target, render_html(report))
        _stderr_console().print(f"torchneck: HTML report {target}")


def cmd_analyze(ns: argparse.Namespace) -> int:
    from .pipeline import report_from_traces

    tables = _table_options(ns)
    if len(ns.paths) == 1 and Path(ns.paths[0]).is_file():
        # One trace, loaded here (or its ranges merged here): the settings for big traces. Not
        # before many ranks' worker processes fork from this one: they would inherit them, and
        # fresh pages for every block cost their small rank traces ~20 % more CPU (measured).
        from .trace.allocator import return_large_frees_promptly

        return_large_frees_promptly()
    big = any(Path(p).is_file() and Path(p).stat().st_size > 50 << 20 for p in ns.paths)
    if big and not ns.quiet and ns.json != "-":
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                      TimeRemainingColumn(), console=_stderr_console(), transient=True) as bar:
            task = bar.add_task("reading trace", total=None)

            def progress(done: int, size: int) -> None:
                bar.update(task, completed=done)

            def engine(name: str) -> None:  # the trace's byte ranges go to a cluster's workers
                bar.update(task, description=f"reading trace ({name})")

            report = report_from_traces(ns.paths, ns.rank, progress, tables, workers=ns.workers,
                                        scheduler=ns.scheduler, engine_notice=engine)
    elif not ns.quiet and ns.json != "-":
        report = _analyze_with_rank_progress(ns, tables)
    else:
        report = report_from_traces(ns.paths, ns.rank, tables=tables, workers=ns.workers, scheduler=ns.scheduler)
    _emit(report, ns.json, ns.quiet)
    _write_html(report, ns.html)
    return 1 if failed_gate(report, ns.fail_on) else 0


def _analyze_with_rank_progress(ns: argparse.Namespace, tables) -> Report:
    """`analyze` of several ranks with a progress bar over them on a terminal (started once the
    ranks are listed and their engine is up)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from .pipeline import report_from_traces

    err = _stderr_console()
    if not err.is_terminal:
        return report_from_traces(ns.paths, ns.rank, tables=tables, workers=ns.workers, scheduler=ns.scheduler)
    bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=err, transient=True)
    task = bar.add_task("ranks", total=None)

    def engine(name: str) -> None:
        bar.update(task, description=f"ranks ({name})")
        bar.start()

    def ranks_done(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    try:
        return report_from_traces(ns.paths, ns.rank, tables=tables, workers=ns.workers, scheduler=ns.scheduler,
                                  rank_progress=ranks_done, engine_notice=engine)
    finally:
        bar.stop()


def cmd_report(ns: argparse.Namespace) -> int:
    run_dir = Path(ns.run_dir)
    report = build_run_report(run_dir, _table_options(ns))
    _emit(report, ns.json, ns.quiet or ns.html)
    if ns.html:
        _stderr_console().print(f"torchneck: HTML report {run_dir / 'report.html'}")
    return 1 if failed_gate(report, ns.fail_on) else 0


def cmd_bisect(ns: argparse.Namespace) -> int:
    from .bisect import BisectOptions, bisect
    from .capture.runner import check_target
    from .capture.session import make_run_dir
    from .model.base import to_json
    from .model.report import Report

    target = _target(ns)
    check_target(target)
    if ns.tolerance <= 0 or ns.check_calls < 1:
        raise TorchneckError("--tolerance must be > 0 and --check-calls >= 1")
    out = make_run_dir(ns.out, target.label)
    options = BisectOptions(accuracy=ns.accuracy, tolerance=ns.tolerance, check_calls=ns.check_calls,
                            timeout=ns.timeout, minify=ns.minify, minify_timeout=ns.minify_timeout)
    err = _stderr_console()
    result = bisect(target, options, out, progress=None if ns.quiet else (lambda m: err.print(f"torchneck: {m}")))
    report = Report(kind="bisect", verdict=result["verdict"], bisect=result)
    (out / "bisect.json").write_bytes(to_json(report, indent=1))
    _emit(report, ns.json, ns.quiet)
    err.print(f"torchneck: bisection files in {out}")
    return 1 if result["culprit"] else 0


def cmd_diff(ns: argparse.Namespace) -> int:
    from .diff import diff_reports, load_report, resolve_input

    a_path, b_path = resolve_input(ns.a), resolve_input(ns.b)
    report = diff_reports(load_report(a_path), load_report(b_path), str(a_path), str(b_path))
    _emit(report, ns.json, ns.quiet)
    _write_html(report, ns.html)
    change = report.diff.step.change_pct if report.diff else None
    if ns.fail_on_regression is not None and change is not None and change > ns.fail_on_regression:
        _stderr_console().print(f"torchneck: step time regressed {change:.1f}% (> {ns.fail_on_regression:g}%)")
        return 1
    return 0


_RUN_VALUE_FLAGS = {"--out", "--warmup", "--steps", "--duration", "--timeout", "--json", "--fail-on",
                    "--max-window-s", "--max-window-mb", "--slice",
                    "--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
                    "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--tolerance", "--check-calls",
                    "--minify-timeout"}


def _split_run_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `run` arguments into torchneck's own and the script's: the script's start at the
    first token that is not a torchneck option (the script), or right after `-m MODULE`."""
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "-m":
            return argv[: i + 2], argv[i + 2:]
        if tok.startswith("-m") and len(tok) > 2 and not tok.startswith("--"):
            return argv[: i + 1], argv[i + 1:]
        if tok == "--":
            return argv[:i] + argv[i + 1: i + 2], argv[i + 2:]
        if not tok.startswith("-"):
            return argv[: i + 1], argv[i + 1:]
        i += 2 if tok in _RUN_VALUE_FLAGS else 1
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    script_args: list[str] = []
    if argv and argv[0] in ("run", "compile", "bisect"):
        own, script_args = _split_run_argv(argv[1:])
        argv = [argv[0], *own]
    ns = parser.parse_args(argv)
    if ns.command in ("run", "compile", "bisect"):
        ns.args = list(ns.args) + script_args
    if ns.command is None:
        parser.print_help()
        return 2
    if ns.command not in ("run", "compile", "analyze"):  # run/compile: the user's script runs here first;
        from .trace.allocator import return_large_frees_promptly  # analyze: see cmd_analyze

        return_large_frees_promptly()
    try:
        if ns.command == "run":
            return cmd_run(ns)
        if ns.command == "compile":
            return cmd_compile(ns)
        if ns.command == "analyze":
            return cmd_analyze(ns)
        if ns.command == "report":
            return cmd_report(ns)
        if ns.command == "diff":
            return cmd_diff(ns)
        if ns.command == "bisect":
            return cmd_bisect(ns)
    except TorchneckError as exc:
        print(f"torchneck: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("torchneck: interrupted", file=sys.stderr)
        return 130
    return 2


def bottleneck_main(argv: list[str] | None = None) -> int:
    """`python -m torchneck script.py args`: the torch.utils.bottleneck form, i.e. `run`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("run", "compile", "bisect", "analyze", "report", "diff", "-h", "--help", "--version"):
        return main(argv)
    return main(["run", *argv])
