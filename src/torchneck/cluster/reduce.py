"""Merge per-rank summaries into the report's `distributed` section: O(ranks x summary), no event.

Stragglers are found two ways, each robust to hundreds of ranks (medians, not means or extremes):

- **By collective wait.** A collective cannot end before its last participant arrives, so the
  time a rank spends in collectives is its wait plus the transfer: a rank that arrives late
  spends *less* than the others. Its lateness is the median of the other ranks' time in
  collectives per step minus its own; the others wait about that long for it every step.
  Durations need no clock alignment between hosts, unlike start times.
- **By step time.** A rank whose steps take longer than the other ranks' median (traces of
  ranks that do not synchronise within the window, or whose collectives were not recorded).

A rank is flagged when its excess is at least `STRAGGLER_MIN_US`, at least
`STRAGGLER_MIN_SHARE` of a step, and (with `OUTLIER_MIN_RANKS` ranks or more) an outlier of the
ranks' own spread: `OUTLIER_SIGMAS` robust standard deviations (1.4826 x the median absolute
deviation). The report names the top `TOP_RANKS` with the distribution, groups them by host,
and lines the ranks' collective calls up one by one (the k-th call of one type and size is the
same collective on every rank) to tell how long each waits and who arrives last.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from ..model.base import to_builtins
from ..model.findings import Finding
from .summary import CollectiveGroup, RankFailure, RankSummary

STRAGGLER_MIN_SHARE = 0.05
"""A straggler costs the others >= 5 % of the median step ..."""
STRAGGLER_MIN_US = 500.0
"""... and >= 0.5 ms per step: below that, collective jitter, not a slow rank."""
OUTLIER_SIGMAS = 4.0
"""... and lies this many robust standard deviations beyond the other ranks: among hundreds of
ranks with natural spread, only ranks outside it are named (one in ~30,000 by chance)."""
OUTLIER_MIN_RANKS = 3
"""With fewer ranks there is no spread to speak of: the thresholds above decide alone."""
ROBUST_SIGMA = 1.4826
"""Median absolute deviation -> standard deviation of a normal distribution."""
TOP_RANKS = 10
"""Ranks named in the terminal and in the straggler finding; report.json carries every rank."""
SLOW_HOST_SHARE = 0.5
"""A host is slow when at least half of its ranks (and two or more) are stragglers: one cause
(a throttled GPU, a noisy neighbour, a slow NIC) rather than one rank's work."""
TOP_GROUPS = 8
"""Collective groups (type x message size) described in the report, most time first."""

DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
               "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
               "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8}
"""Bytes per element of the dtype names PyTorch writes in collective args."""
QUANTILES = (("min", 0.0), ("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))


def quantiles(values) -> dict[str, float] | None:
    """The distribution of a per-rank figure: min, p10, p50, p90, p99, max and the mean."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    if not len(x):
        return None
    out = {name: float(np.quantile(x, q)) for name, q in QUANTILES}
    out["mean"] = float(x.mean())
    return out


def others_median(x: np.ndarray) -> np.ndarray:
    """For each entry, the median of all the *other* entries: what rank r is compared with, so
    that with two ranks each is compared with the other, and with many the median is the bulk's."""
    n = len(x)
    if n < 2:
        return np.full(n, np.nan)
    order = np.argsort(x, kind="stable")
    s = x[order]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)

    def other_at(k: int) -> np.ndarray:  # the k-th smallest of the others, for every entry
        return np.where(pos > k, s[k], s[min(k + 1, n - 1)])

    m = n - 1
    if m % 2:
        return other_at(m // 2)
    return (other_at(m // 2 - 1) + other_at(m // 2)) / 2.0


def robust_sigma(x: np.ndarray) -> float:
    if not len(x):
        return 0.0
    return float(ROBUST_SIGMA * np.median(np.abs(x - np.median(x))))


def flag_excess(excess: np.ndarray, base: np.ndarray, spread_of: np.ndarray, step_us: np.ndarray) -> np.ndarray:
    """Which ranks' `excess` (over the others' median `base`) makes them stragglers (see the
    module's docstring); NaN entries (no data) never are."""
    n = int(np.isfinite(spread_of).sum())
    threshold = np.maximum(STRAGGLER_MIN_US, STRAGGLER_MIN_SHARE * np.nan_to_num(step_us))
    if n >= OUTLIER_MIN_RANKS:
        threshold = np.maximum(threshold, OUTLIER_SIGMAS * robust_sigma(spread_of[np.isfinite(spread_of)]))
    with np.errstate(invalid="ignore"):
        return np.isfinite(excess) & np.isfinite(base) & (excess >= threshold)


def _leave_one_out(values: np.ndarray) -> np.ndarray:
    """`others_median` over the finite entries; NaN where a rank has no value."""
    out = np.full(len(values), np.nan)
    ok = np.isfinite(values)
    if ok.sum() >= 2:
        out[ok] = others_median(values[ok])
    return out


def rank_ranges(ranks) -> str:
    """`0-7, 9, 12-13`: a set of ranks, short."""
    rs = sorted(set(int(r) for r in ranks))
    parts = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(f"{rs[i]}-{rs[j]}" if j > i else str(rs[i]))
        i = j + 1
    return ", ".join(parts)


def reduce_ranks(summaries: list[RankSummary], failed: list[dict] | None = None) -> dict[str, Any]:
    """The `distributed` section: every rank's row, the step and collective distributions, the
    stragglers (top `TOP_RANKS`, the headline one in `straggler`), hosts, overlap, failures."""
    ranks = sorted(summaries, key=lambda s: (s.rank if s.rank is not None else -1, s.path))
    n = len(ranks)
    step = np.array([s.steps.median_us if s.steps and s.steps.count else np.nan for s in ranks])
    comm = np.array([s.comm.per_step_us if s.comm.present else np.nan for s in ranks])
    overlap = np.array([_overlap_pct(s) for s in ranks])
    job_step = float(np.nanmedian(step)) if np.isfinite(step).any() else 0.0

    step_base = _leave_one_out(step)
    step_excess = step - step_base
    by_step = flag_excess(step_excess, step_base, step, step_base)
    comm_base = _leave_one_out(comm)
    lateness = comm_base - comm
    by_wait = flag_excess(lateness, comm_base, comm, np.full(n, job_step))

    rows = [_row(s, step_excess[i], lateness[i], overlap[i]) for i, s in enumerate(ranks)]
    finite = step[np.isfinite(step)]
    out: dict[str, Any] = {
        "world_size": n + len(failed or []),
        "ranks": rows,
        "step_spread_pct": float(100.0 * (finite.max() - finite.min()) / finite.min())
        if len(finite) > 1 and finite.min() > 0 else 0.0,
        "step_time_us": quantiles(step),
        "comm_per_step_us": quantiles(comm),
        "overlap_pct": quantiles(overlap),
        "straggler": None,
        "stragglers": [],
        "failed": list(failed or []),
    }
    flagged = np.flatnonzero(by_step | by_wait)
    if len(flagged):
        cost = np.where(by_wait, np.nan_to_num(lateness), 0.0)
        cost = np.maximum(cost, np.where(by_step, np.nan_to_num(step_excess), 0.0))
        flagged = flagged[np.argsort(-cost[flagged], kind="stable")]
        out["stragglers_flagged"] = int(len(flagged))
        out["stragglers"] = [dict(rows[i], basis=[b for b, f in (("collective_wait", by_wait[i]),
                                                                ("step_time", by_step[i])) if f])
                             for i in flagged[:TOP_RANKS]]
        top = int(flagged[0])
        out["straggler"] = _headline(ranks, top, by_wait[top], comm, step_excess[top], step_base[top], job_step)
    hosts = _hosts(ranks, set(flagged.tolist()), step, lateness)
    if hosts:
        out["hosts"] = hosts
    out["collectives"] = _collective_groups(ranks)
    out["duplicate_ranks"] = sorted(r for r, c in Counter(s.rank for s in ranks).items() if c > 1)
    out["cost_s"] = {k: quantiles(getattr(s.times, k) for s in ranks) for k in ("fetch_s", "load_s", "analyse_s",
                                                                              "sizes_s")}
    return out


def _overlap_pct(s: RankSummary) -> float:
    """Share of the rank's GPU communication that ran beside compute (its GPUs' mean)."""
    if not s.devices or not s.comm.present:
        return np.nan
    return float(np.mean([d.comm_overlap_pct for d in s.devices]))


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _row(s: RankSummary, step_excess: float, lateness: float, overlap: float) -> dict[str, Any]:
    """One rank in report.json's `distributed.ranks`."""
    c = s.comm
    return {
        "rank": s.rank, "host": s.host, "path": s.path, "status": s.status, "exit_code": s.exit_code,
        "steps": s.steps.count if s.steps else 0,
        "median_step_us": s.steps.median_us if s.steps else None,
        "step_excess_us": _num(step_excess),
        "comm": {"present": c.present, "side": c.side, "time_us": c.time_us, "per_step_us": c.per_step_us,
                 "by_type": [{"type": t.type, "count": t.count, "time_us": t.time_us, "per_step_us": t.per_step_us}
                             for t in c.by_type]} if c.present else {"present": False},
        "lateness_us": _num(lateness),
        "overlap_pct": _num(overlap),
        "gpu_busy_pct": float(np.mean([d.busy_pct for d in s.devices])) if s.devices else None,
        "host_wait_us": sum(d.host_wait_us for d in s.devices) if s.devices else None,
        "findings": sorted({f.kind for f in s.findings if f.severity != "info"}),
    }


def _headline(ranks: list[RankSummary], top: int, by_wait: bool, comm: np.ndarray, step_excess: float,
              step_base: float, job_step: float) -> dict[str, Any]:
    """The `straggler` of the report's schema: the costliest flagged rank."""
    s = ranks[top]
    head: dict[str, Any] = {"rank": s.rank, "host": s.host, "median_step_us": job_step,
                            "cause": likely_cause(s.findings)}
    if by_wait:
        own = comm[top]
        waits = {str(r.rank): float(comm[i] - own) for i, r in enumerate(ranks) if i != top and np.isfinite(comm[i])}
        wait = float(np.mean(list(waits.values())))
        comm_us = {str(r.rank): float(comm[i]) for i, r in enumerate(ranks) if np.isfinite(comm[i])}
        head.update(basis="collective_wait", wait_per_step_us=max(wait, 0.0),
                    wait_share=wait / job_step if job_step else 0.0, waits_us=waits, comm_per_step_us=comm_us)
    else:
        head.update(basis="step_time", wait_per_step_us=float(step_excess),
                    wait_share=float(step_excess / step_base) if step_base else 0.0,
                    own_step_us=s.steps.median_us if s.steps else None, others_step_us=float(step_base),
                    waits_us={}, comm_per_step_us={})
    return head


def likely_cause(findings: list[Finding]) -> dict | None:
    """A rank's own most costly finding that is not about waiting: what makes it late (a
    rank's findings come ranked by their saving)."""
    for f in findings:
        if f.severity != "info" and f.kind not in ("communication", "straggler"):
            return {"kind": f.kind, "title": f.title, "where": to_builtins(f.where), "time_lost_s": f.time_lost_s}
    return None


def _hosts(ranks: list[RankSummary], flagged: set[int], step: np.ndarray, lateness: np.ndarray) -> list[dict]:
    """Ranks per host (when the files say which), the hosts whose ranks are the stragglers first."""
    by_host: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(ranks):
        if s.host:
            by_host[s.host].append(i)
    if len(by_host) < 2:
        return []
    out = []
    for host, idx in by_host.items():
        slow = [i for i in idx if i in flagged]
        out.append({
            "host": host, "ranks": [ranks[i].rank for i in idx], "stragglers": [ranks[i].rank for i in slow],
            "slow": len(slow) >= 2 and len(slow) >= SLOW_HOST_SHARE * len(idx),
            "median_step_us": _num(float(np.nanmedian(step[idx]))) if np.isfinite(step[idx]).any() else None,
            "median_lateness_us": _num(float(np.nanmedian(lateness[idx]))) if np.isfinite(lateness[idx]).any()
            else None,
        })
    return sorted(out, key=lambda h: (not h["slow"], -len(h["stragglers"]), h["host"]))


def dtype_bytes(dtype: str) -> int | None:
    return DTYPE_BYTES.get(re.sub(r"[^a-z0-9_]", "", dtype.lower()))


def _collective_groups(ranks: list[RankSummary]) -> list[dict]:
    """Each (collective type, message size) group: its calls lined up across the ranks that made
    the same number of them. Per call, the ranks' median time minus the least is how long the
    typical rank waited for the last to arrive (the skew); who was least is who arrived last."""
    members: dict[tuple, list[tuple[int, CollectiveGroup]]] = defaultdict(list)
    out: list[dict[str, Any]] = []
    for s in ranks:
        for g in s.comm.groups:
            members[(g.type, g.dtype, g.nelems, g.group_size)].append((s.rank if s.rank is not None else -1, g))
    for (kind, dtype, nelems, group_size), found in members.items():
        calls = Counter(len(g.durations_us) for _, g in found).most_common(1)[0][0]
        aligned = [(r, g) for r, g in found if len(g.durations_us) == calls]
        if not calls:
            continue
        d = np.array([g.durations_us for _, g in aligned], dtype=np.float64)  # ranks x calls
        least = d.min(axis=0)
        skew = np.median(d, axis=0) - least
        last = Counter(aligned[int(i)][0] for i in d.argmin(axis=0)) if len(aligned) > 1 else Counter()
        size = dtype_bytes(dtype) if dtype else None
        nbytes = nelems * size if size and nelems else None
        transfer_us = float(np.median(least))
        out.append({
            "type": kind, "dtype": dtype or None, "nelems": nelems or None, "bytes": nbytes,
            "group_size": group_size or None, "calls_per_rank": calls, "ranks": len(found),
            "ranks_aligned": len(aligned), "time_per_call_us": float(np.median(d)),
            "transfer_per_call_us": transfer_us,
            "skew_per_call_us": float(skew.mean()) if len(aligned) > 1 else 0.0,
            "last_to_arrive": [{"rank": r, "calls": c} for r, c in last.most_common(3)],
            "algbw_gbps": (nbytes / transfer_us / 1e3) if nbytes and transfer_us > 0 else None,
            "_total": float(np.median(d.sum(axis=1))),
        })
    out.sort(key=lambda row: -row["_total"])
    for row in out:
        row.pop("_total")
    return out[:TOP_GROUPS]


def failure_row(f: RankFailure) -> dict:
    return {"rank": f.rank, "status": f.status, "exit_code": None, "error": f.error, "path": f.path}


def straggler_sentence(s: dict | None) -> str:
    """The verdict's words for the headline straggler."""
    if not s:
        return ""
    if s.get("basis") == "step_time":
        return (f"Rank {s['rank']} is the straggler: its steps take {s['own_step_us'] / 1e3:.1f} ms against "
                f"{s['others_step_us'] / 1e3:.1f} ms for the other ranks.")
    return f"Rank {s['rank']} is the straggler: the others wait {s['wait_per_step_us'] / 1e3:.1f} ms per step for it."
