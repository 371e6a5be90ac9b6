"""A multi-rank job directory (`torchneck run --nproc-per-node N`) -> one merged report.

Each rank is analysed on its own (its own process when there are several cores: memory stays
bounded per rank) into the usual RUN_DIR/rank-<R>/report.*; the merge then reads only the
per-rank summaries, with the reducer `torchneck analyze DIR` uses (`cluster/reduce.py`), never
two traces at once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .analysis.distributed import compare_ranks, rank_summary
from .capture.recover import is_job_dir  # noqa: F401  (the API's name for it)
from .cluster.reduce import straggler_sentence
from .diagnose.causes import rank_findings
from .diagnose.distributed_rules import diagnose_job, fold_waits
from .diagnose.facts import Facts
from .errors import TorchneckError
from .model.base import Record, to_builtins
from .model.report import Report, RunSection, Target
from .pipeline import report_from_traces, write_run_report
from .ranks import FULL_RANKS_MAX, map_per_rank, merge_rank_findings


def rank_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    out = []
    for d in Path(run_dir).glob("rank-*"):
        try:
            out.append((int(d.name[5:]), d))
        except ValueError:
            continue
    return sorted(out)


class RankOutcome(Record):
    """One rank's report (written into its directory), or a note of what went wrong."""

    report: Report | None = None
    note: str | None = None


def analyse_rank(rank_dir: str) -> RankOutcome:
    """One rank's report (written into its directory), or what is known when it died early."""
    d = Path(rank_dir)
    try:
        if (d / "run.json").exists():
            return RankOutcome(report=write_run_report(d))
        if (d / "trace.json.gz").exists():  # killed after its window, before run.json
            report = report_from_traces([str(d / "trace.json.gz")])
            report.env = _read(d / "env.json") or {}  # written at its start: the machine is known
            return RankOutcome(report=report, note="killed before it finished (no run.json); its trace was analysed")
        return RankOutcome(note="killed before it wrote any evidence beyond env.json")
    except TorchneckError as exc:
        return RankOutcome(note=f"analysis failed: {exc}")


def report_from_job_dir(run_dir: Path, workers: int | None = None) -> Report:
    """Analyse every rank of a job and merge: per-rank steps and communication, the straggler,
    which ranks failed and why, and the ranks' findings (each tagged with its rank)."""
    run_dir = Path(run_dir)
    ranks = rank_dirs(run_dir)
    if not ranks:
        raise TorchneckError(f"{run_dir}: no rank-<R> directories (did the job start?)")
    job = _read(run_dir / "job.json") or {}
    results = map_per_rank(analyse_rank, [str(d) for _, d in ranks], workers=workers)
    summaries, failed, reports = [], [], {}
    for (rank, d), res in zip(ranks, results):
        report = res.report
        run = report.run if report else None
        status = run.status if run else ("unknown" if report else "lost")
        exit_code = run.exit_code if run else None
        if res.note or (exit_code not in (None, 0)):
            failed.append({"rank": rank, "status": status, "exit_code": exit_code,
                           "error": (run.error if run else None) or res.note, "run_dir": str(d),
                           "ended_monotonic_ns": _ended_ns(d)})
        if report is None:
            continue
        if rank != min(r for r, _ in ranks) and len(ranks) > FULL_RANKS_MAX:
            # Thousands of ranks: keep what the merge reads (findings, steps, run, warnings).
            report.env = report.views = report.compile = None
            report.ops_by_line = []
        reports[rank] = report
        analysis = report.ranks[0] if report.ranks else None
        summaries.append(rank_summary(rank, analysis, report.findings, status=status, exit_code=exit_code,
                                      path=str(d), host=(report.env or {}).get("hostname")))
    if not reports:
        raise TorchneckError(f"{run_dir}: no rank left evidence to analyse: "
                             + "; ".join(f"rank {f['rank']}: {f['error']}" for f in failed))
    failed.sort(key=_root_cause_first)
    for f in failed:
        f.pop("ended_monotonic_ns", None)
    dist = compare_ranks(summaries)
    dist["failed"] = failed
    if failed and dist.get("straggler"):
        # A failed rank leaves the others blocked in a collective until it is noticed: that
        # wait says nothing about a slow rank.
        dist["straggler"], dist["stragglers"] = None, []
        dist["straggler_skipped"] = "a rank failed; the others' last collective waited for the failure"
    straggler = dist.get("straggler")
    if straggler and straggler["rank"] in reports:
        straggler["cause"] = _likely_cause(reports[straggler["rank"]])
    main_rank = min(reports)
    main = reports[main_rank]
    main_steps = main.ranks[0].steps.count if main.ranks else 1
    findings = rank_findings(fold_waits(diagnose_job(dist, main_steps, _run_facts(main))
                                        + merge_rank_findings({r: rep.findings for r, rep in reports.items()})))
    run = main.run or RunSection(target=Target(), exit_code=0, status="unknown", wall_s=0.0)
    if job.get("target"):
        t = job["target"]
        run.target = Target(script=t.get("script"), module=t.get("module"), args=list(t.get("args") or []),
                            cwd=t.get("cwd"))
    run.run_dir = str(run_dir)
    if job:
        run.exit_code = job["exit_code"]
        run.wall_s = job["wall_s"]
    if failed:
        first = failed[0]
        run.status = "rank_failed"
        run.error = f"rank {first['rank']} {first['status']}: {first['error']}"
    main_verdict = main.verdict.split(" Biggest problem:")[0].replace(" No significant problem found.", "")
    top = [f for f in findings if f.severity != "info"]
    verdict = " ".join(filter(None, [
        f"{len(ranks)} ranks.",
        straggler_sentence(straggler),
        f"{len(failed)} rank(s) did not finish normally ({run.error})." if failed else "",
        f"Rank {main_rank}: {main_verdict}",
        f"Biggest problem: {top[0].title}." if top else "No significant problem found.",
    ]))
    # (a rank killed after its window has an `analyze` report, without run-only sections)
    return Report(
        kind="run", verdict=verdict, findings=findings, run=run, env=main.env or {}, python=main.python or {},
        ops_by_line=main.ops_by_line, compile=main.compile or {"present": False, "available": False},
        ranks=[reports[r].ranks[0] for r in sorted(reports)
               if reports[r].ranks and (len(reports) <= FULL_RANKS_MAX or r == main_rank)],
        warnings=[f"rank {r}: {w}" for r in sorted(reports) for w in reports[r].warnings],
        views=main.views or {}, distributed=dist)


def _run_facts(report: Report) -> Facts:
    """The main rank's run, for the job findings' savings: over the same horizon as the ranks'
    own findings (the run's steady state)."""
    run = report.run
    return Facts(analysis=report.ranks[0] if report.ranks else None, phases=run.phases if run else None,
                 run_wall_s=run.wall_s if run else 0.0)


_PEER_FAILURE = re.compile(r"closed by peer|remote worker|connection reset|communicator was aborted|"
                           r"watchdog|SIGTERM|terminated", re.IGNORECASE)


def _root_cause_first(failed: dict) -> tuple:
    """The rank that failed on its own before ranks that failed because a peer went away
    (gloo "Connection closed by peer", NCCL aborts, torchrun's SIGTERM), then the earliest."""
    text = f"{failed.get('status')} {failed.get('error')}"
    return (bool(_PEER_FAILURE.search(text)), failed.get("ended_monotonic_ns") or float("inf"), failed["rank"])


def _ended_ns(rank_dir: Path) -> int | None:
    run = _read(Path(rank_dir) / "run.json") or {}
    return run.get("ended_monotonic_ns")


def _likely_cause(report: Report) -> dict | None:
    """The straggler's own most costly finding: what makes it late."""
    for f in report.findings:
        if f.severity != "info" and f.kind not in ("communication", "straggler"):
            return {"kind": f.kind, "title": f.title, "where": to_builtins(f.where), "time_lost_s": f.time_lost_s}
    lines = ((report.python or {}).get("window") or {}).get("lines") or []
    if lines:
        top = lines[0]
        return {"kind": "python", "title": f"{top['function']}() at line {top['line']}",
                "where": [{"file": top["file"], "line": top["line"], "function": top["function"]}],
                "time_lost_s": top["total_s"]}
    return None


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
