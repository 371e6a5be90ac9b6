"""Rules over many ranks (the merged `distributed` section, `cluster/reduce.py`): the stragglers
(by collective wait or by step time, grouped by host), and communication that costs time even on
the rank that waits least."""

from __future__ import annotations

from ..cluster.reduce import rank_ranges
from .findings import Finding, where_of

DOCS_DDP = "https://pytorch.org/docs/stable/notes/ddp.html"


class Straggler:
    """Ranks the others wait for (see `cluster/reduce.py`); one finding, naming the costliest
    and the others flagged (top 10, with the distribution), a slow host as such.

    Time lost: by collective wait, the other ranks' mean wait per step (their time in
    collectives minus the straggler's); by step time, the straggler's excess over the other
    ranks' median step (what they wait for it once they synchronise); times the profiled steps.
    `where`: the straggler's own costliest finding, i.e. what makes it late."""

    kind = "straggler"

    def check(self, dist: dict, steps: int) -> list[Finding]:
        s = dist.get("straggler")
        if not s:
            return []
        cause = s.get("cause") or {}
        lost = s["wait_per_step_us"] * steps / 1e6
        because = f"; its biggest problem: {cause['title']}" if cause.get("title") else ""
        flagged = dist.get("stragglers") or []
        slow_hosts = [h for h in dist.get("hosts") or [] if h["slow"]]
        count = dist.get("stragglers_flagged", len(flagged))
        if slow_hosts and s["rank"] in slow_hosts[0]["stragglers"]:
            h = slow_hosts[0]
            who = (f"Host {h['host']} is slow: its ranks {rank_ranges(h['stragglers'])} "
                   f"({len(h['stragglers'])} of {len(h['ranks'])}) are the stragglers")
            subject = "them"
        else:
            who = f"Rank {s['rank']} is the straggler"
            subject = "it"
        if s.get("basis") == "step_time":
            what = (f"{who}: {'its' if subject == 'it' else 'their'} steps take {s['own_step_us'] / 1e3:.1f} ms, "
                    f"{s['own_step_us'] / s['others_step_us']:.2f}x the other ranks' median "
                    f"({s['others_step_us'] / 1e3:.1f} ms)")
        else:
            what = (f"{who}: the other ranks wait {s['wait_per_step_us'] / 1e3:.1f} ms per step "
                    f"({100 * s['wait_share']:.0f}% of a step) in collectives for {subject}")
        others = count - (len(slow_hosts[0]["stragglers"]) if subject == "them" else 1)
        more = f"; {others} more rank(s) are slow too" if others > 0 else ""
        return [Finding(
            kind=self.kind,
            title=what + more + because,
            time_lost_s=lost, time_lost_pct=100 * s["wait_share"],
            where=where_of(cause.get("where") or []),
            evidence={"rank": s["rank"], "basis": s.get("basis"), "wait_per_step_us": s["wait_per_step_us"],
                      "median_step_us": s["median_step_us"], "stragglers": flagged, "flagged": count,
                      "step_time_us": dist.get("step_time_us"), "comm_per_step_us": dist.get("comm_per_step_us"),
                      "slow_hosts": [{k: h[k] for k in ("host", "ranks", "stragglers")} for h in slow_hosts],
                      "cause": cause or None},
            fix=(f"Make rank {s['rank']} as fast as the others: " + _cause_fix(cause.get("kind"))
                 + (" Every rank of one host being slow points at the host: its GPUs' clocks and temperature "
                    "(nvidia-smi -q -d PERFORMANCE), its network link, other jobs on it." if slow_hosts else "")
                 + " Uneven work per rank (unbalanced shards, variable sequence lengths, rank-0-only logging or "
                   "checkpointing inside the step) has the same effect."),
            docs=DOCS_DDP, rank=s["rank"])]


def _cause_fix(kind: str | None) -> str:
    return {
        "input_pipeline": "its data loading is slow (more DataLoader workers, pin_memory, prefetching).",
        "python_hotspot": "its own Python in the step is slow (the line shown).",
        "python": "its own Python in the step is slow (the line shown).",
    }.get(kind or "", "look at its own findings (tagged with its rank).")


class Communication:
    """Collectives take a large share of the step even on the rank that waits least (the
    straggler): that part is transfer, not waiting, and is not hidden behind compute.

    Time lost: that rank's time in collectives per step, times the profiled steps."""

    kind = "communication"
    MIN_SHARE = 0.15
    """Below 15 % of a step, communication is normal for data-parallel training."""

    def check(self, dist: dict, steps: int) -> list[Finding]:
        ranks = [r for r in dist.get("ranks", []) if (r.get("comm") or {}).get("present") and r.get("median_step_us")]
        if len(ranks) < 2:
            return []
        least = min(ranks, key=lambda r: r["comm"]["per_step_us"])
        comm = least["comm"]
        share = comm["per_step_us"] / least["median_step_us"]
        if share < self.MIN_SHARE:
            return []
        types = ", ".join(f"{t['type']} {t['per_step_us'] / 1e3:.1f} ms" for t in comm["by_type"][:3])
        overlap = dist.get("overlap_pct")
        hidden = (f"; {overlap['p50']:.0f}% of it overlaps compute on the median rank"
                  f" (p10 {overlap['p10']:.0f}%, p90 {overlap['p90']:.0f}%)") if overlap else ""
        return [Finding(
            kind=self.kind,
            title=(f"Communication takes {100 * share:.0f}% of each step even on rank {least['rank']}, "
                   f"the one that waits least ({types}){hidden}"),
            time_lost_s=comm["per_step_us"] * steps / 1e6, time_lost_pct=100 * share,
            evidence={"rank": least["rank"], "per_step_us": comm["per_step_us"], "by_type": comm["by_type"],
                      "side": comm["side"], "median_step_us": least["median_step_us"], "overlap_pct": overlap,
                      "collectives": dist.get("collectives") or []},
            fix=("Overlap it with compute and send less: DDP overlaps gradient all-reduce with backward by "
                 "buckets (tune bucket_cap_mb; gradient_as_bucket_view=True), accumulate gradients locally "
                 "with model.no_sync() over several micro-batches, compress gradients (DDP comm hooks, e.g. "
                 "fp16/bf16 compression), or use a larger batch per rank."),
            docs=DOCS_DDP, rank=least["rank"])]


JOB_RULES = (Straggler(), Communication())


def diagnose_job(dist: dict, main_report: dict) -> list[dict]:
    """Findings across ranks, as dicts (the per-rank findings are dicts already)."""
    analysis = (main_report.get("ranks") or [None])[0]
    steps = analysis["steps"]["count"] if analysis else 1
    out = []
    for rule in JOB_RULES:
        out += [f.to_dict() for f in rule.check(dist, steps)]
    return out
