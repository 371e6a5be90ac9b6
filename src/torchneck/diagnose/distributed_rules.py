"""Rules over many ranks (the merged summaries of `analysis/distributed.py`): the straggler
the others wait for, and communication that costs time even on the rank that waits least."""

from __future__ import annotations

from ..model.findings import Finding
from .facts import where_of
from .rule import make_finding

DOCS_DDP = "https://pytorch.org/docs/stable/notes/ddp.html"


class Straggler:
    """One rank arrives last at the collectives; the others wait for it.

    Time lost: the other ranks' mean wait per step (their time in collectives minus the
    straggler's, see `analysis/distributed.py`), times the profiled steps. `where`: the
    straggler's own costliest finding, i.e. what makes it late."""

    kind = "straggler"
    summary = "One rank arrives last at the collectives; the others wait for it."
    docs = DOCS_DDP

    def check(self, dist: dict, steps: int) -> list[Finding]:
        s = dist.get("straggler")
        if not s:
            return []
        cause = s.get("cause") or {}
        lost = s["wait_per_step_us"] * steps / 1e6
        because = f"; its biggest problem: {cause['title']}" if cause.get("title") else ""
        return [make_finding(
            kind=self.kind,
            title=(f"Rank {s['rank']} is the straggler: the other ranks wait {s['wait_per_step_us'] / 1e3:.1f} ms "
                   f"per step ({100 * s['wait_share']:.0f}% of a step) in collectives for it{because}"),
            time_lost_s=lost, time_lost_pct=100 * s["wait_share"],
            where=where_of(cause.get("where") or []),
            evidence={"rank": s["rank"], "wait_per_step_us": s["wait_per_step_us"], "waits_us": s["waits_us"],
                      "comm_per_step_us": s["comm_per_step_us"], "median_step_us": s["median_step_us"],
                      "cause": cause or None},
            fix=(f"Make rank {s['rank']} as fast as the others: " + _cause_fix(cause.get("kind"))
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
    summary = "Collectives take much of each step even on the rank that waits least."
    docs = DOCS_DDP
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
        return [make_finding(
            kind=self.kind,
            title=(f"Communication takes {100 * share:.0f}% of each step even on rank {least['rank']}, "
                   f"the one that waits least ({types})"),
            time_lost_s=comm["per_step_us"] * steps / 1e6, time_lost_pct=100 * share,
            evidence={"rank": least["rank"], "per_step_us": comm["per_step_us"], "by_type": comm["by_type"],
                      "side": comm["side"], "median_step_us": least["median_step_us"]},
            fix=("Overlap it with compute and send less: DDP overlaps gradient all-reduce with backward by "
                 "buckets (tune bucket_cap_mb; gradient_as_bucket_view=True), accumulate gradients locally "
                 "with model.no_sync() over several micro-batches, compress gradients (DDP comm hooks, e.g. "
                 "fp16/bf16 compression), or use a larger batch per rank."),
            docs=DOCS_DDP, rank=least["rank"])]


JOB_RULES = (Straggler(), Communication())


def diagnose_job(dist: dict, steps: int) -> list[Finding]:
    """Findings across ranks; `steps`: the profiled steps of the main rank."""
    out: list[Finding] = []
    for rule in JOB_RULES:
        out += rule.check(dist, steps)
    return out
