"""What single- and multi-rank reports share: analysing ranks in their own processes, and
merging every rank's findings into one list."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from .model.findings import Finding

FULL_RANKS_MAX = 16
"""Up to 16 ranks, the merged report carries every rank's full analysis (ops, memory...); beyond
that only the main rank's, the others being summarised in `distributed.ranks`: a job of
thousands of ranks must not make a report of hundreds of MB."""


def map_per_rank(fn: Callable[..., Any], items: list, *extra: list, workers: int | None = None) -> list:
    """`fn` over per-rank items, each in its own spawned process when there are several and
    more than one core (bounded memory per rank; as many at once as there are cores); in this
    process otherwise. `extra` are further argument lists, as for `map`."""
    workers = workers or min(len(items), os.cpu_count() or 1)
    if workers <= 1 or len(items) <= 1:
        return [fn(*args) for args in zip(items, *extra)]
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        return list(pool.map(fn, items, *extra))


def _finding_key(f: Finding) -> tuple:
    return (f.kind, f.where[0].file, f.where[0].line) if f.where else (f.kind, tuple(f.ops))


def merge_rank_findings(findings_by_rank: dict[int, list[Finding]]) -> list[Finding]:
    """Every rank's findings, one per (kind, place): the costliest rank's, tagged with its rank
    and listing every rank that had it (`evidence.ranks`)."""
    best: dict[tuple, Finding] = {}
    seen: dict[tuple, list[int]] = {}
    for rank in sorted(findings_by_rank):
        for f in findings_by_rank[rank]:
            key = _finding_key(f)
            seen.setdefault(key, []).append(rank)
            if key not in best or f.time_lost_s > best[key].time_lost_s:
                best[key] = f
                f.rank = rank
    for key, f in best.items():
        f.evidence = dict(f.evidence, ranks=seen[key])
    return list(best.values())
