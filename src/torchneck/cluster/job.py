"""`torchneck analyze DIR|URL` over many rank traces: list, summarise each rank on the engine,
reduce, report. The client holds the ranks' summaries and one rank's full analysis (the main
rank's, for the report's tables and pictures; every rank's up to `FULL_RANKS_MAX` ranks)."""

from __future__ import annotations

import functools
from collections import defaultdict

from ..analysis.key_averages import TableOptions
from ..errors import TorchneckError
from ..model.findings import Finding
from ..model.report import Report
from ..ranks import FULL_RANKS_MAX, merge_rank_findings
from .engine import Progress, make_engine
from .reduce import failure_row, rank_ranges, reduce_ranks, straggler_sentence
from .remote import hosts_by_layout
from .summary import RankFailure, RankSummary, decode
from .tasks import RankItem, TaskOptions, summarise_batch


def report_from_rank_files(files: list[str], rank: int | None = None, workers: int | None = None,
                           scheduler: str | None = None, progress: Progress | None = None,
                           engine_notice=None, tables: TableOptions | None = None) -> Report:
    """The report of several rank trace files (local paths or URLs). `rank`: that rank's own
    report only. `engine_notice(name)` is told which engine runs the tasks; `tables`: the
    key_averages table's options."""
    hosts = hosts_by_layout(files)
    everyone = rank is not None or len(files) <= FULL_RANKS_MAX
    items = [RankItem(path=f, host=hosts.get(f), full=everyone or i == 0) for i, f in enumerate(files)]
    order = {f: i for i, f in enumerate(files)}
    with make_engine(workers, scheduler, ranks=len(files)) as engine:
        if engine_notice:
            engine_notice(engine.name)
        options = TaskOptions(rank=rank, one_lane=engine.parallel, tables=tables)
        task = functools.partial(summarise_batch, options=options)
        results = _collect(engine.map(task, items, progress))
        summaries = [r for r in results if isinstance(r, RankSummary)]
        for s in summaries:  # neither the trace nor its name gave a rank: its place in the listing
            if s.rank is None:
                s.rank = order[s.path]
        failures = [r for r in results if isinstance(r, RankFailure)]
        if rank is not None:
            return _one_rank(summaries, failures, rank, len(files))
        if not summaries:
            raise TorchneckError(f"none of the {len(files)} trace files could be read (the first: "
                                 f"{_failure_line(failures[0]) if failures else 'none listed'})")
        if not any(s.full for s in summaries):  # the first file failed: the lowest rank read instead
            first = min(summaries, key=lambda s: s.rank if s.rank is not None else 0)
            again = _collect(engine.map(task, [RankItem(path=first.path, host=first.host, full=True)]))
            if again and isinstance(again[0], RankSummary):
                first.full = again[0].full
    return _report(summaries, failures, len(files))


def _collect(batches) -> list:
    """Every item's result: decoded summaries, or a failure for each item of a batch that raised."""
    out: list = []
    for batch, result in batches:
        if isinstance(result, BaseException):
            out += [RankFailure(path=item.path, status="error", error=f"task failed ({type(result).__name__}: "
                                f"{str(result).strip().splitlines()[0] if str(result).strip() else ''})")
                    for item in batch]
        else:
            out += decode(result)
    return out


def _one_rank(summaries: list[RankSummary], failures: list[RankFailure], rank: int, files: int) -> Report:
    from ..pipeline import verdict

    found = [s for s in summaries if s.rank == rank and s.full]
    if not found:
        bad = f" ({len(failures)} unreadable: {failures[0].error})" if failures else ""
        raise TorchneckError(f"no trace for rank {rank} among {files} file(s){bad}")
    s = found[0]
    assert s.full is not None
    analysis = s.full.analysis
    return Report(kind="analyze", verdict=verdict(analysis, None, s.findings), findings=s.findings,
                  ranks=[analysis], warnings=list(analysis.trace.warnings), views=s.full.views,
                  ops_by_line=s.full.ops_by_line)


def _report(summaries: list[RankSummary], failures: list[RankFailure], files: int) -> Report:
    from ..diagnose.causes import rank_findings
    from ..diagnose.distributed_rules import diagnose_job, fold_waits
    from ..pipeline import verdict

    full = sorted((s for s in summaries if s.full), key=lambda s: s.rank or 0)
    main = full[0]
    assert main.full is not None
    analyses = [s.full.analysis for s in full if s.full]
    dist = reduce_ranks(summaries, [failure_row(f) for f in failures])
    per_rank: dict[int, list[Finding]] = defaultdict(list)
    for s in summaries:
        per_rank[s.rank if s.rank is not None else -1] += s.findings
    findings = rank_findings(fold_waits(diagnose_job(dist, analyses[0].steps.count) + merge_rank_findings(per_rank)))
    main_verdict = verdict(analyses[0], None, []).replace(" No significant problem found.", "")
    top = [f for f in findings if f.severity != "info"]
    text = " ".join(filter(None, [
        f"{len(summaries) + len(failures)} ranks.",
        straggler_sentence(dist.get("straggler")),
        f"{len(failures)} rank file(s) could not be analysed (listed)." if failures else "",
        f"Rank {main.rank}: {main_verdict}",
        f"Biggest problem: {top[0].title}." if top else "No significant problem found.",
    ]))
    warnings = _warnings(summaries, dist)
    if failures:  # the ranks analysed without them
        warnings += [f"{len(failures)} of {files} trace files could not be read and were left out:",
                     *(_failure_line(f) for f in failures)]
    return Report(kind="analyze", verdict=text, findings=findings, ranks=analyses, warnings=warnings,
                  views=main.full.views, ops_by_line=main.full.ops_by_line, distributed=dist)


def _failure_line(f: RankFailure) -> str:
    """A failed rank file in one line, naming the file."""
    return f.error if f.path in f.error else f"{f.path}: {f.error}"


def _warnings(summaries: list[RankSummary], dist: dict) -> list[str]:
    """Each distinct warning once, with the ranks that had it."""
    by_text: dict[str, list[int]] = defaultdict(list)
    for s in summaries:
        for w in s.warnings:
            by_text[w].append(s.rank if s.rank is not None else -1)
    out = [f"rank {rank_ranges(r)}: {w}" if len(r) == 1 else f"ranks {rank_ranges(r)}: {w}"
           for w, r in by_text.items()]
    if dist.get("duplicate_ranks"):
        out.append(f"rank(s) {rank_ranges(dist['duplicate_ranks'])} appear in several files (traces of "
                   "different jobs or windows?): each file is a row of its own")
    return out
