"""Rules over many ranks (the merged `distributed` section, `cluster/reduce.py`): the stragglers
(by collective wait or by step time, grouped by host), and communication that costs time even on
the rank that waits least."""

from __future__ import annotations

from ..cluster.reduce import rank_ranges
from ..model.findings import Finding
from .causes import FOLD_SHARE, estimate_savings
from .facts import Facts, where_of
from .rule import make_finding

DOCS_DDP = "https://pytorch.org/docs/stable/notes/ddp.html"


class Straggler:
    """Ranks the others wait for (see `cluster/reduce.py`); one finding, naming the costliest
    and the others flagged (top 10, with the distribution), a slow host as such.

    Time lost: by collective wait, the other ranks' mean wait per step (their time in
    collectives minus the straggler's); by step time, the straggler's excess over the other
    ranks' median step (what they wait for it once they synchronise); times the profiled steps.
    `where`: the straggler's own costliest finding, i.e. what makes it late."""

    kind = "straggler"
    summary = "Ranks the others wait for at the collectives (slow steps, or a slow host)."
    docs = DOCS_DDP
    saving_basis = "the other ranks' wait for it per step (collective wait or step-time excess), times the steps"

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
        return [make_finding(
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
            docs=DOCS_DDP, rank=s["rank"], confidence="estimated", saving_basis=self.saving_basis)]


def _cause_fix(kind: str | None) -> str:
    return {
        "input_pipeline": "its data loading is slow (more DataLoader workers, pin_memory, prefetching).",
        "python_hotspot": "its own Python in the step is slow (the line shown).",
        "python": "its own Python in the step is slow (the line shown).",
    }.get(kind or "", "look at its own findings (tagged with its rank).")


class Communication:
    """Collectives take a large share of the step even on the rank that waits least (the
    straggler): that part is transfer, not waiting, and is not hidden behind compute.

    Time lost: that rank's exposed time in collectives per step (the part not overlapped by its
    GPU's compute, when the trace shows kernels; all of it for host-side collectives), times the
    profiled steps: the most that overlapping and sending less could save."""

    kind = "communication"
    summary = "Collectives take much of each step even on the rank that waits least."
    docs = DOCS_DDP
    saving_basis = "that rank's communication not overlapped by compute per step, times the steps (at most)"
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
        own_overlap = least.get("overlap_pct")
        exposed_us = comm["per_step_us"] * (1 - own_overlap / 100 if own_overlap is not None else 1.0)
        overlap = dist.get("overlap_pct")
        hidden = (f"; {overlap['p50']:.0f}% of it overlaps compute on the median rank"
                  f" (p10 {overlap['p10']:.0f}%, p90 {overlap['p90']:.0f}%)") if overlap else ""
        return [make_finding(
            kind=self.kind,
            title=(f"Communication takes {100 * share:.0f}% of each step even on rank {least['rank']}, "
                   f"the one that waits least ({types}){hidden}"),
            time_lost_s=exposed_us * steps / 1e6, time_lost_pct=100 * exposed_us / least["median_step_us"],
            evidence={"rank": least["rank"], "per_step_us": comm["per_step_us"], "exposed_per_step_us": exposed_us,
                      "by_type": comm["by_type"],
                      "side": comm["side"], "median_step_us": least["median_step_us"], "overlap_pct": overlap,
                      "collectives": dist.get("collectives") or []},
            fix=("Overlap it with compute and send less: DDP overlaps gradient all-reduce with backward by "
                 "buckets (tune bucket_cap_mb; gradient_as_bucket_view=True), accumulate gradients locally "
                 "with model.no_sync() over several micro-batches, compress gradients (DDP comm hooks, e.g. "
                 "fp16/bf16 compression), or use a larger batch per rank."),
            docs=DOCS_DDP, rank=least["rank"], confidence="upper_bound", saving_basis=self.saving_basis)]


JOB_RULES = (Straggler(), Communication())
WAITING_SYMPTOMS = ("gpu_idle", "launch_bound")
"""Another rank's idle GPU while it waits in a collective for the straggler: the straggler's time."""


def fold_waits(findings: list[Finding]) -> list[Finding]:
    """The job's findings, with the other ranks' GPU idle folded under the straggler that explains
    it: a rank that reaches the all-reduce first idles until the straggler arrives, so its idle
    share is (up to) the straggler's wait share of a step. Explained at least `FOLD_SHARE`, the
    idle finding is listed under the straggler; less, it keeps the unexplained part as its saving.
    The straggler's own finding that makes it late (`evidence.cause`) goes under it too."""
    straggler = next((f for f in findings if f.kind == "straggler" and f.rank is not None), None)
    if straggler is None:
        return findings
    cause = straggler.evidence.get("cause") or {}
    places = [(w.get("file"), w.get("line")) for w in cause.get("where") or []]
    out = []
    for f in findings:
        if f.rank == straggler.rank and f.kind == cause.get("kind") and [(w.file, w.line) for w in f.where] == places:
            # what makes the straggler late: the straggler's finding names it, with its lines, and
            # says what it costs the job (the others' wait), which is what fixing it saves
            f.explained_s = f.time_lost_s
            straggler.symptoms.append(f)
            continue
        if f.kind in WAITING_SYMPTOMS and f.rank is not None and f.rank != straggler.rank and f.time_lost_pct > 0:
            share = min(straggler.time_lost_pct / f.time_lost_pct, 1.0)
            if share >= FOLD_SHARE:
                f.explained_s = share * f.time_lost_s
                straggler.symptoms.append(f)
                continue
            f.saving_s *= 1 - share
            f.saving_pct *= 1 - share
        out.append(f)
    return out


def diagnose_job(dist: dict, steps: int, facts: Facts | None = None) -> list[Finding]:
    """Findings across ranks; `steps`: the profiled steps of the main rank. Their savings are
    put on the same horizon as the ranks' own findings (`causes.estimate_savings`): `facts`
    of the main rank's run (its wall time and start-up) for a job run; the window for traces."""
    out: list[Finding] = []
    for rule in JOB_RULES:
        out += rule.check(dist, steps)
    estimate_savings(out, facts or Facts())
    return out
