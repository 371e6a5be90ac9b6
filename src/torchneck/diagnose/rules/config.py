"""Rules on how the run is configured and what it pays once: settings left on, threads, start-up."""

from __future__ import annotations

import math
from typing import Any

from ...model.base import Record
from ...model.findings import Finding
from ..facts import Facts, where_of
from ..rule import DOCS, Explanation, Rule, register


class AnomalyEvidence(Record):
    anomaly_detection: bool
    stack_capture_share: float | None = None
    """Share of the sampled steady state inside the forward stack captures C++ made (None: no samples)."""
    stack_capture_s: float = 0.0
    """Those captures' sampled seconds in the steady state."""
    nan_checks: int = 0
    """NaN checks of backward outputs in the profiled window (see `NAN_CHECK_ANCHORS`)."""
    nan_check_share: float = 0.0
    """Their ops' share of the profiled window."""


@register
class AnomalyDetection(Rule[AnomalyEvidence]):
    """Autograd anomaly detection left on (on at the end of the run, or turned on by the script's
    own call, which a Trainer may turn off again after its epochs): every forward op that makes a
    graph node records its Python stack (torch's C++ calls `format_stack`, which reads every
    frame's source line), and every backward output is checked for NaN (`isnan`,
    `_is_any_true`, `item`).

    Time lost: the sampled time inside the stack captures C++ made (analysis/python_stacks.py
    tells them from a script's own calls by the caller's source line), as a share of the sampled
    steady state, plus the NaN checks' ops (`NAN_CHECK_OPS`) as a share of the profiled window
    (none with `check_nan=False`). What anomaly mode adds in C++ around a capture (the call into
    Python, keeping the stack) is not counted.
    Without samples (a trace alone) the captures cannot be told from the ops' time: `high`,
    unmeasured."""

    kind = "anomaly_detection"
    summary = "Autograd anomaly detection is on (a debugging mode that slows every backward op)."
    docs = DOCS["anomaly"]
    evidence_type = AnomalyEvidence
    confidence = "measured"
    saving_basis = ("sampled time of the forward stack captures C++ made, as a share of the steady state, plus the "
                    "NaN checks' ops as a share of the window")
    explains = ("dispatch_overhead",)
    NAN_CHECK_OPS = ("aten::isnan", "aten::ne", "aten::_is_any_true", "aten::any", "aten::item",
                     "aten::_local_scalar_dense")
    """A NaN check's ops, with their children: `isnan(out)._is_any_true().item()` (older torch:
    `.any()`), `isnan` running `ne` on floats."""
    NAN_CHECK_ANCHORS = ("aten::_is_any_true", "aten::isnan", "aten::any")
    """The op whose calls count the checks, the first the window's op table holds: autograd's
    engine is `_is_any_true`'s only caller; small ops can be missing from the table's top rows."""

    def check(self, facts: Facts) -> list[Finding]:
        settings = facts.env.get("settings_at_end") or facts.env.get("settings") or {}
        if not (settings.get("anomaly_detection") or facts.sites_of("anomaly_detection")):
            return []  # neither on at the end nor turned on by the script (a fit() that turns it off after)
        where = where_of(facts.sites_of("anomaly_detection")[:3])
        steady = (facts.python or {}).get("window") or {}
        sampled = steady.get("sampled_s") or 0.0
        if sampled <= 0:
            return [self.finding(AnomalyEvidence(anomaly_detection=True),
                                 title="Autograd anomaly detection is on (every backward op is checked and traced)",
                                 lost_s=0.0, pct=0.0, severity="high", where=where, confidence="unmeasured")]
        capture_s = float(steady.get("stack_capture_s") or 0.0)
        checks, nan_share = self._nan_checks(facts) if settings.get("anomaly_check_nan") is not False else (0, 0.0)
        share = min(capture_s / sampled + nan_share, 1.0)
        lost = share * facts.window_s
        ev = AnomalyEvidence(anomaly_detection=True, stack_capture_share=capture_s / sampled, stack_capture_s=capture_s,
                             nan_checks=checks, nan_check_share=nan_share)
        title = (f"Autograd anomaly detection is on: recording every graph node's forward stack and checking "
                 f"backward outputs for NaN take {100 * share:.0f}% of the steady state")
        return [self.finding(ev, title=title, lost_s=lost, pct=100 * share, where=where)]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """Per-op overhead measured while anomaly mode is on holds its stack captures (made inside
        each forward op that builds a graph node) and its NaN checks (tiny ops, one set per
        backward node): that part of it is this cause's."""
        share = (cause.evidence.get("stack_capture_share") or 0.0) + (cause.evidence.get("nan_check_share") or 0.0)
        return Explanation(min(symptom.time_lost_s, share * facts.window_s)) if share > 0 else None

    def _nan_checks(self, facts: Facts) -> tuple[int, float]:
        """NaN checks in the window and their ops' share of it, from the window's op table: each
        op's self time, prorated to as many calls as there are checks (the script's own `isnan`,
        `!=` or `item` calls are not the checks')."""
        if not facts.analysis or facts.window_s <= 0:
            return 0, 0.0
        rows = {o.name: o for o in facts.analysis.ops.by_name}
        checks = next((rows[n].count for n in self.NAN_CHECK_ANCHORS if n in rows), 0)
        us = sum(rows[n].self_us * min(1.0, checks / rows[n].count)
                 for n in self.NAN_CHECK_OPS if n in rows and rows[n].count)
        return checks, min(us / 1e6 / facts.window_s, 1.0)

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

    Evidence: the thread probe run after the script (capture/thread_probe.py) times a training
    layer of each kind of op (linear, convolution, element-wise; small and large, forward and
    backward) with the script's thread count and with one thread per core on this machine. What
    too many threads cost depends on the op: each parallel region wakes and joins every thread,
    time-sliced on too few cores, which a small op pays in full and a big one amortises, and a
    convolution's backward opens many regions a call. Time lost: each op's self time x (1 -
    1/slowdown), the slowdown of its kind at the size of its calls (interpolated between the
    probe's two sizes by time per call). A probe without kinds (an older run) gives its one
    matmul's slowdown to every op. A slowdown under MIN_SLOWDOWN is no measured cost: the finding
    is then `low` (the setting is still wrong, and costly on another machine or load)."""

    kind = "thread_oversubscription"
    summary = "More intra-op threads than usable cores: threads fight over the cores."
    docs = DOCS["threads"]
    evidence_type = ThreadsEvidence
    confidence = "measured"
    saving_basis = ("each op's self time x (1 - 1/slowdown), the slowdown measured after the run by a probe of its "
                    "kind of op (linear, convolution, element-wise) at the size of its calls")
    explains = ("op_hotspot",)
    MIN_SLOWDOWN = 1.05
    """Below 5 % the probe cannot tell a cost from this machine's noise."""
    MATMULS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                         "aten::addmv", "aten::mv", "aten::_addmm_activation"})
    """The ops the probe's linear layer stands for (BLAS products); names with `conv` are the
    convolution's, any other op the element-wise ops'."""

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
        ops = facts.analysis.ops.by_name if facts.analysis else []
        ops_s = sum(o.self_us for o in ops) / 1e6
        lost = sum(o.self_us / 1e6 * (1 - 1 / self._slowdown(probe, o.name, o.self_us / 1e6 / max(o.count, 1)))
                   for o in ops) if probe else 0.0
        slowdown = ops_s / (ops_s - lost) if ops_s > lost else (probe or {}).get("slowdown") or 0.0
        measured = slowdown >= self.MIN_SLOWDOWN
        lost = lost if measured else 0.0
        if measured:
            title = (f"{threads} intra-op threads on {cores} usable cores: the ops ran {slowdown:.2f}x slower "
                     f"than with {cores} threads would (probed after the run)")
        elif probe:
            title = (f"{threads} intra-op threads on {cores} usable cores (no slowdown measured on this "
                     "machine; it depends on the OpenMP runtime and the load)")
        else:
            title = f"{threads} intra-op threads on {cores} usable cores"
        ev = ThreadsEvidence(torch_threads=threads, cores=cores, thread_env=env.get("thread_env"), probe=probe,
                             op_self_s=ops_s)
        return [self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost), where=where,
                             severity=None if measured else ("low" if probe else "medium"),
                             confidence=None if measured else "unmeasured")]

    def _slowdown(self, probe: dict[str, Any], name: str, call_s: float) -> float:
        """The probe's slowdown for an op of this name whose calls take `call_s` each (at the
        script's threads): its kind's, interpolated in log time per call between the probed sizes
        and held at the ends; never under 1 (a faster run with more threads is noise)."""
        kind = "conv" if "conv" in name else "matmul" if name in self.MATMULS else "elementwise"
        sizes = sorted(((e["seconds_at_threads"], e["slowdown"]) for e in ((probe.get("kinds") or {}).get(kind) or [])
                        if e.get("slowdown") and e.get("seconds_at_threads", 0) > 0), key=lambda e: e[0])
        if not sizes:
            return max(probe.get("slowdown") or 1.0, 1.0)
        (t0, s0), (t1, s1) = sizes[0], sizes[-1]
        if call_s <= t0 or t1 <= t0:
            return max(s0 if call_s <= t0 else s1, 1.0)
        at = min((math.log(call_s) - math.log(t0)) / (math.log(t1) - math.log(t0)), 1.0)
        return max(s0 + (s1 - s0) * at, 1.0)

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """A dominant op runs slower with the threads fighting over the cores."""
        return Explanation(min(cause.time_lost_s, symptom.time_lost_s))

    def fix(self, evidence: ThreadsEvidence) -> str:
        return (f"Set OMP_NUM_THREADS={evidence.cores} (or torch.set_num_threads({evidence.cores})); with several "
                "processes, divide the cores between them.")


class OneTimeEvidence(Record):
    startup_s: float
    """Wall time from the script's start to the end of its first step."""
    own_s: float
    """Of it, the script's own set-up: not importing modules, not torchneck's hooks."""
    importing_s: float = 0.0
    share_of: str = "run_wall"
    steady_step_s: float | None = None
    lines: list[dict[str, Any]] = []
    """Where start-up went: the top sampled lines before the first step."""


@register
class OneTimeCost(Rule[OneTimeEvidence]):
    """The script's own set-up before its first step (loading data, building the model, first-call
    initialisation, compilation), importing left out: a library's import time is not the user's
    to change. Not part of the step time: `info`, for short jobs."""

    kind = "one_time_cost"
    summary = "Time before the first step: imports, set-up, lazy initialisation (matters for short jobs)."
    docs = DOCS["profiler"]
    evidence_type = OneTimeEvidence
    confidence = "upper_bound"
    saving_basis = "the set-up's wall time before the first step, imports left out (paid once)"
    max_severity = "info"
    MIN_S = 1.0
    """Set-up under a second is not worth a user's attention."""
    MIN_LINE_S = 0.2
    """Lines that took less of the start-up are not listed."""

    def check(self, facts: Facts) -> list[Finding]:
        if not facts.phases or not facts.python:
            return []
        startup = facts.phases["phases"]["startup_s"]
        sampled = facts.python.get("startup") or {}
        importing = float(sampled.get("importing_s") or 0.0)
        own = max(startup - importing - float(sampled.get("torchneck_hooks_s") or 0.0), 0.0)
        if own < self.MIN_S:
            return []
        lines = [ln for ln in sampled.get("lines", []) if ln["total_s"] >= self.MIN_LINE_S][:3]
        ev = OneTimeEvidence(startup_s=startup, own_s=own, importing_s=importing,
                             steady_step_s=facts.phases.get("steady_step_s"),
                             lines=[{k: ln.get(k) for k in ("file", "line", "function", "total_s", "library")}
                                    for ln in lines])
        return [self.finding(ev, title=f"{own:.1f} s of set-up before the first step (loading, building, first-call "
                                       f"initialisation; {importing:.1f} s more importing)",
                             lost_s=own, pct=100 * own / facts.run_wall_s if facts.run_wall_s > 0 else 0.0,
                             severity="info", where=where_of(lines))]

    def fix(self, evidence: OneTimeEvidence) -> str:
        return ("One-time cost, not part of the step time: it matters for short jobs. The lines "
                "listed are where it goes (imports, lazy initialisation, compilation).")


class SlowSettingEvidence(Record):
    setting: str
    """The variable or switch: an environment variable, `debug build`, `deterministic algorithms`."""
    value: str
    effect: str
    """What it costs, in words."""


SLOW_SETTINGS: dict[str, tuple[str, str, str]] = {
    # name: (severity, when it applies: "always" | "gpu" | "compile", what to do)
    "CUDA_LAUNCH_BLOCKING": ("high", "gpu", "Unset CUDA_LAUNCH_BLOCKING: it is for locating CUDA errors, and makes "
                                            "every kernel launch wait for the GPU."),
    "PYTORCH_NO_CUDA_MEMORY_CACHING": ("high", "gpu", "Unset PYTORCH_NO_CUDA_MEMORY_CACHING: without the caching "
                                                      "allocator every allocation calls cudaMalloc and synchronises."),
    "TORCH_COMPILE_DEBUG": ("medium", "compile", "Unset TORCH_COMPILE_DEBUG: it writes debug files for every "
                                                 "compilation."),
    "TORCHINDUCTOR_FORCE_DISABLE_CACHES": ("medium", "compile", "Unset TORCHINDUCTOR_FORCE_DISABLE_CACHES: every run "
                                                                "compiles every kernel from scratch."),
    "TORCHDYNAMO_VERBOSE": ("low", "compile", "Unset TORCHDYNAMO_VERBOSE outside debugging."),
    "TORCH_LOGS": ("low", "always", "Unset TORCH_LOGS outside debugging: logging runs in the hot path of what it "
                                    "logs (dynamo, inductor, recompiles)."),
    "TORCH_SHOW_CPP_STACKTRACES": ("low", "always", "Unset TORCH_SHOW_CPP_STACKTRACES outside debugging."),
    "TORCH_CPP_LOG_LEVEL": ("low", "always", "Unset TORCH_CPP_LOG_LEVEL outside debugging."),
    "KINETO_LOG_LEVEL": ("low", "always", "Unset KINETO_LOG_LEVEL outside debugging."),
    "TORCH_DISTRIBUTED_DEBUG": ("medium", "always", "Unset TORCH_DISTRIBUTED_DEBUG: it checks every collective's "
                                                    "arguments across ranks."),
    "NCCL_DEBUG": ("low", "gpu", "Set NCCL_DEBUG=WARN (or unset it) outside debugging."),
}
"""Environment variables that slow a program down, how much it matters and the fix (the effects
are capture/env.py's SLOW_ENV_VARS)."""


@register
class SlowSettings(Rule[SlowSettingEvidence]):
    """A debugging switch left on: a debug build of torch, CUDA_LAUNCH_BLOCKING=1, TORCH_LOGS,
    TORCH_COMPILE_DEBUG, the caching allocator turned off, deterministic algorithms... Each costs
    time on every op, launch or compilation it touches; none can be told apart from the ops in a
    trace, so the severity is the rule's judgement (`high` for those that slow every op or launch),
    and a switch only counts where it applies (a CUDA switch on a GPU run, a compiler switch on a
    compiled one). One finding per switch."""

    kind = "slow_setting"
    summary = "A debugging switch is left on (debug build, CUDA_LAUNCH_BLOCKING, TORCH_LOGS, ...)."
    docs = DOCS["tuning"]
    evidence_type = SlowSettingEvidence
    confidence = "unmeasured"
    saving_basis = "not separable from the ops' time in a trace"

    def check(self, facts: Facts) -> list[Finding]:
        env = facts.env
        settings = env.get("settings_at_end") or env.get("settings") or {}
        gpu = bool(env.get("gpus")) or bool(facts.analysis and facts.analysis.gpu.present)
        compiled = bool((facts.compile or {}).get("present")) or bool(
            facts.analysis and facts.analysis.compiled.present)
        out = []
        if env.get("torch_debug_build"):
            ev = SlowSettingEvidence(setting="debug build", value=str(env.get("torch", "")),
                                     effect="a debug build of torch runs every op unoptimised, with checks")
            out.append(self.finding(ev, title=f"torch {env.get('torch', '')} is a debug build", lost_s=0.0,
                                    pct=0.0, severity="high"))
        found = dict(settings.get("slow_env") or {})
        if settings.get("torch_logs"):
            found["TORCH_LOGS"] = settings["torch_logs"]
        for name, value in sorted(found.items()):
            severity, applies, _ = SLOW_SETTINGS.get(name, ("low", "always", ""))
            if (applies == "gpu" and not gpu) or (applies == "compile" and not compiled):
                continue
            ev = SlowSettingEvidence(setting=name, value=str(value), effect=_effect(name))
            out.append(self.finding(ev, title=f"{name}={value} is set: {_effect(name)}", lost_s=0.0, pct=0.0,
                                    severity=severity))  # type: ignore[arg-type]
        if settings.get("deterministic_algorithms"):
            ev = SlowSettingEvidence(setting="deterministic algorithms", value="True",
                                     effect="deterministic kernels, slower where a faster one exists")
            out.append(self.finding(ev, title="torch.use_deterministic_algorithms(True) is on: slower kernels where "
                                              "a nondeterministic one is faster", lost_s=0.0, pct=0.0,
                                    severity="low", where=where_of(facts.sites_of("deterministic_algorithms")[:3])))
        return out

    def fix(self, evidence: SlowSettingEvidence) -> str:
        if evidence.setting == "debug build":
            return "Install a release build of torch (pip install torch) for anything but debugging torch itself."
        if evidence.setting == "deterministic algorithms":
            return ("Turn deterministic algorithms off (torch.use_deterministic_algorithms(False)) unless bit-exact "
                    "reruns are required.")
        return SLOW_SETTINGS.get(evidence.setting, ("", "", f"Unset {evidence.setting} outside debugging."))[2]


def _effect(name: str) -> str:
    from ...capture.env import SLOW_ENV_VARS

    if name == "TORCH_LOGS":
        return "torch logs every event it was asked to (dynamo, inductor, recompiles)"
    return SLOW_ENV_VARS.get(name, "a debugging switch")
