"""Rules on how the run is configured and what it pays once: settings left on, threads, start-up."""

from __future__ import annotations

from typing import Any

from ...model.base import Record
from ...model.findings import Finding
from ..facts import Facts, where_of
from ..rule import DOCS, Rule, register


class AnomalyEvidence(Record):
    anomaly_detection: bool


@register
class AnomalyDetection(Rule[AnomalyEvidence]):
    """Autograd anomaly detection left on: every backward op is checked for NaNs and records the
    forward stack trace, several times slower than plain autograd. Its cost cannot be told apart
    from the ops' in a trace, so it is `high` without a time estimate."""

    kind = "anomaly_detection"
    summary = "Autograd anomaly detection is on (a debugging mode that slows every backward op)."
    docs = DOCS["anomaly"]
    evidence_type = AnomalyEvidence

    def check(self, facts: Facts) -> list[Finding]:
        settings = facts.env.get("settings_at_end") or facts.env.get("settings") or {}
        if not settings.get("anomaly_detection"):
            return []
        return [self.finding(AnomalyEvidence(anomaly_detection=True),
                             title="Autograd anomaly detection is on (every backward op is checked and traced)",
                             lost_s=0.0, pct=0.0, severity="high",
                             where=where_of(facts.sites_of("anomaly_detection")[:3]))]

    def fix(self, evidence: AnomalyEvidence) -> str:
        return "Remove torch.autograd.set_detect_anomaly(True) / detect_anomaly() outside debugging."


class ThreadsEvidence(Record):
    torch_threads: int
    cores: int
    thread_env: dict[str, Any] | None = None
    probe: dict[str, Any] | None = None
    """The thread probe's timings (capture/thread_probe.py), when it ran."""
    op_self_s: float = 0.0


@register
class ThreadOversubscription(Rule[ThreadsEvidence]):
    """More intra-op threads than usable cores (OMP_NUM_THREADS, torch.set_num_threads).

    Evidence: the thread probe run after the script (capture/thread_probe.py) times a matmul
    with the script's thread count and with one thread per core on this machine. Time lost: the
    window's op self time x (1 - 1/slowdown), an estimate that applies the probe's slowdown to
    every op (ops that do not split over threads lose less). A slowdown under MIN_SLOWDOWN is no
    measured cost: the finding is then `info` (the setting is still wrong for other machines)."""

    kind = "thread_oversubscription"
    summary = "More intra-op threads than usable cores: threads fight over the cores."
    docs = DOCS["threads"]
    evidence_type = ThreadsEvidence
    MIN_SLOWDOWN = 1.05
    """Below 5 % the probe cannot tell a cost from this machine's noise."""

    def check(self, facts: Facts) -> list[Finding]:
        env = facts.env
        cores = env.get("cpu_affinity") or env.get("cpu_count") or 0
        at_end = env.get("settings_at_end") or {}
        threads = max(env.get("torch_threads") or 0, at_end.get("torch_threads") or 0,
                      *(c.get("threads", 0) for c in facts.sites_of("set_num_threads")))
        if not cores or threads <= cores:
            return []
        where = where_of([c for c in facts.sites_of("set_num_threads") if c.get("threads", 0) > cores][:3])
        probe = at_end.get("thread_probe")
        slowdown = (probe or {}).get("slowdown") or 0.0
        ops_s = sum(o.self_us for o in facts.analysis.ops.by_name) / 1e6 if facts.analysis else 0.0
        measured = slowdown >= self.MIN_SLOWDOWN
        lost = ops_s * (1 - 1 / slowdown) if measured else 0.0
        if measured:
            title = (f"{threads} intra-op threads on {cores} usable cores: a matmul ran {slowdown:.2f}x "
                     f"slower than with {cores} threads")
        elif probe:
            title = (f"{threads} intra-op threads on {cores} usable cores (no slowdown measured on this "
                     "machine; it depends on the OpenMP runtime and the load)")
        else:
            title = f"{threads} intra-op threads on {cores} usable cores"
        ev = ThreadsEvidence(torch_threads=threads, cores=cores, thread_env=env.get("thread_env"), probe=probe,
                             op_self_s=ops_s)
        return [self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost), where=where,
                             severity=None if measured else ("info" if probe else "medium"))]

    def fix(self, evidence: ThreadsEvidence) -> str:
        return (f"Set OMP_NUM_THREADS={evidence.cores} (or torch.set_num_threads({evidence.cores})); with several "
                "processes, divide the cores between them.")


class OneTimeEvidence(Record):
    startup_s: float
    steady_step_s: float | None = None
    lines: list[dict[str, Any]] = []
    """Where start-up went: the top sampled lines before the first step."""


@register
class OneTimeCost(Rule[OneTimeEvidence]):
    """Start-up before the first step (imports, data and model set-up, first-call
    initialisation, compilation). Not part of the step time: `info`, for short jobs."""

    kind = "one_time_cost"
    summary = "Time before the first step: imports, set-up, lazy initialisation (matters for short jobs)."
    docs = DOCS["profiler"]
    evidence_type = OneTimeEvidence
    MIN_S = 1.0
    """Start-up under a second is not worth a user's attention."""
    MIN_LINE_S = 0.2
    """Lines that took less of the start-up are not listed."""

    def check(self, facts: Facts) -> list[Finding]:
        if not facts.phases or not facts.python:
            return []
        startup = facts.phases["phases"]["startup_s"]
        if startup < self.MIN_S:
            return []
        lines = [ln for ln in facts.python["startup"]["lines"] if ln["total_s"] >= self.MIN_LINE_S][:3]
        ev = OneTimeEvidence(startup_s=startup, steady_step_s=facts.phases.get("steady_step_s"),
                             lines=[{k: ln.get(k) for k in ("file", "line", "function", "total_s", "library")}
                                    for ln in lines])
        return [self.finding(ev, title=f"{startup:.1f} s before the first step (imports, set-up, first-call "
                                       "initialisation)",
                             lost_s=startup, pct=0.0, severity="info", where=where_of(lines))]

    def fix(self, evidence: OneTimeEvidence) -> str:
        return ("One-time cost, not part of the step time: it matters for short jobs. The lines "
                "listed are where it goes (imports, lazy initialisation, compilation).")
