"""Finding rules. Each is a small class: a `kind`, a named threshold with the reason for it, and
`check(evidence)` returning findings with their evidence. A rule without evidence stays silent.

Time lost is estimated per rule (see each docstring) as a share of the profiled steady-state
window, so findings from different rules compare.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..analysis.run import PROFILING_SLOWDOWN_WARN
from .compile_rules import COMPILE_RULES
from .findings import Finding, Where, rank_findings, where_of
from .gpu_rules import GPU_RULES

DOCS = {
    "profiler": "https://pytorch.org/tutorials/recipes/recipes/profiler_recipe.html",
    "tuning": "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
    "dataloader": "https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
    "compile": "https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html",
    "cuda_graphs": "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",
    "inference_mode": "https://pytorch.org/docs/stable/generated/torch.inference_mode.html",
    "anomaly": "https://pytorch.org/docs/stable/autograd.html#anomaly-detection",
    "threads": "https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html",
    "zero_grad": "https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html",
    "memory": "https://pytorch.org/docs/stable/torch_cuda_memory.html",
}


@dataclass
class Evidence:
    """What the rules read: the analysis of the main trace and, for live runs, the run's data."""

    analysis: dict | None = None
    env: dict | None = None
    phases: dict | None = None
    python: dict | None = None
    ops_by_line: list[dict] = field(default_factory=list)
    compile: dict | None = None  # analysis/compile.py: compile_summary of a live run's compile log
    run_wall_s: float = 0.0
    call_sites: list[dict] = field(default_factory=list)  # capture/callsites.py: configuration calls
    clock: dict = field(default_factory=dict)  # run.json's clock: how steps were found, module outputs

    def sites_of(self, what: str) -> list[dict]:
        return [c for c in self.call_sites if c.get("what") == what]

    @property
    def window_s(self) -> float:
        if self.analysis:
            return self.analysis["steps"]["window_us"] / 1e6
        if self.phases:
            return self.phases["phases"]["window_s"]
        return 0.0

    @property
    def steps(self) -> int:
        return self.analysis["steps"]["count"] if self.analysis else 0

    def lines_for_ops(self, names: set[str] | None, limit: int = 3) -> list[Where]:
        """User lines under which these ops (None: all ops together) spent most self time. With
        all ops, these are the lines where the CPU issues the work, and the kernel launches."""
        acc: dict[tuple, float] = {}
        for e in self.ops_by_line:
            if (names is None or e["op"] in names) and e.get("file"):
                k = (e["file"], e["line"], e["function"])
                acc[k] = acc.get(k, 0.0) + e["self_us"]
        best = sorted(acc.items(), key=lambda kv: -kv[1])[:limit]
        return [Where(f, ln, fn) for (f, ln, fn), _ in best]


def _pct(seconds: float, ev: Evidence) -> float:
    return 100 * seconds / ev.window_s if ev.window_s > 0 else 0.0


class PythonHotspot:
    kind = "python_hotspot"
    MIN_SHARE = 0.10
    """A line whose work outside torch ops (its own Python, NumPy, other libraries) takes 10 % of
    the steady state is worth moving into tensor ops; below that it is noise next to the ops."""
    MIN_SAMPLED_S = 0.01
    """And at least 10 ms of it: ten samples of the 1 ms wall-clock sampler; fewer are too few to
    tell a line from its neighbours. Measured over the whole steady state, not inflated by the
    profiler's window nor by other processes' load (run-queue time is left out), a short script's
    dominant line can hold no more: a per-row loop costing a third of each of 12 steps was 15 ms."""
    WAITING_SHARE = 0.5
    """When most of that time the thread was off the CPU, the line waits (sleep, I/O, a lock)
    rather than computes, and the fix is to overlap the wait, not to vectorise."""

    def check(self, ev: Evidence) -> list[Finding]:
        if not ev.python:
            return []
        win = ev.python["window"]
        total = win["sampled_s"]
        if total <= 0:
            return []
        op_s: dict[tuple, float] = {}
        for e in ev.ops_by_line:
            if e.get("file"):
                k = (e["file"], e["line"])
                op_s[k] = op_s.get(k, 0.0) + e["self_us"] / 1e6
        # Lines running inside DataLoader iteration belong to the input_pipeline finding.
        loading = {(ln["file"], ln["line"]): ln["total_s"] for ln in ev.python.get("loading", {}).get("lines", [])}
        out = []
        for line in win["lines"][:5]:
            if loading.get((line["file"], line["line"]), 0.0) >= 0.5 * line["total_s"]:
                continue
            if "outside_ops_s" in line:  # samples aligned with the trace's ops: measured directly
                outside = line["outside_ops_s"]
            else:
                outside = max(line["total_s"] - op_s.get((line["file"], line["line"]), 0.0), line["self_s"])
            share = outside / total
            if share < self.MIN_SHARE or outside < self.MIN_SAMPLED_S:
                continue
            if line.get("library_is_torch") and line["self_s"] < 0.5 * outside:
                continue  # torch's own overhead (autograd engine, optimizer loop): other rules' evidence
            lost = share * ev.window_s
            callee = line.get("library") or ""
            waiting = line.get("waiting_s") or 0.0
            evidence = {"outside_torch_s": outside, "self_python_s": line["self_s"], "waiting_s": waiting,
                        "line_total_s": line["total_s"], "sampled_s": total, "calls_into": callee}
            if waiting >= self.WAITING_SHARE * outside:
                what = f" in {callee.split(' (')[0]}" if callee else ""
                out.append(Finding(
                    kind=self.kind,
                    title=(f"{line['function']}() waits{what} {100 * share:.0f}% of each step, off the CPU "
                           "(blocked: sleep, I/O, a lock or a queue)"),
                    time_lost_s=lost, time_lost_pct=_pct(lost, ev), where=where_of([line]), evidence=evidence,
                    fix="Overlap the wait with compute instead of blocking the step: load and decode in "
                        "DataLoader workers (num_workers > 0, prefetch_factor) or a background thread, "
                        "cache what is read every step, and avoid sleeping or polling inside the loop.",
                    docs=DOCS["dataloader"]))
                continue
            what = f"in {callee.split(' (')[0]}" if callee and line["self_s"] < 0.5 * outside else "in Python"
            out.append(Finding(
                kind=self.kind,
                title=f"{line['function']}() spends {100 * share:.0f}% of each step {what}, outside torch ops",
                time_lost_s=lost, time_lost_pct=_pct(lost, ev),
                where=where_of([line]),
                evidence=evidence,
                fix="Do this work with torch ops on the tensors you already have (e.g. torch.nonzero / "
                    "torch.where instead of a NumPy round trip, vectorised ops instead of Python loops), "
                    "or move it out of the step.",
                docs=DOCS["tuning"]))
        return out


class OpHotspot:
    """One operator dominates the steady state. It says where the time goes, not why: a clean
    model's main op (a convolution, a matmul) legitimately dominates. So it is `medium` at most,
    and ranks after a finding of equal severity that names a cause (`findings.GENERIC_KINDS`).

    Time lost: the op's self time, an upper bound (what removing the op entirely would save)."""

    kind = "op_hotspot"
    MIN_SHARE = 0.20
    """One operator taking a fifth of the steady state is the place to look first."""

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        if not a or not a["ops"]["by_name"] or ev.window_s <= 0:
            return []
        top = a["ops"]["by_name"][0]
        share = top["self_us"] / 1e6 / ev.window_s
        if share < self.MIN_SHARE:
            return []
        lost = top["self_us"] / 1e6
        return [Finding(
            kind=self.kind,
            title=f"{top['name']} takes {100 * share:.0f}% of the profiled time ({top['count']} calls)",
            time_lost_s=lost, time_lost_pct=_pct(lost, ev), severity="medium",
            where=ev.lines_for_ops({top["name"]}), ops=[top["name"]],
            evidence={"self_us": top["self_us"], "count": top["count"], "mean_us": top["mean_us"],
                      "share": share, "time_lost_is": "upper bound (the op's whole self time)",
                      "shapes": [s["shapes"] for s in a["ops"]["by_shape"] if s["name"] == top["name"]][:3]},
            fix="Check whether this op is needed at this size and precision: reduce its input, "
                "batch its calls, or use a cheaper equivalent; it dominates the step.",
            docs=DOCS["profiler"])]


class DispatchOverhead:
    kind = "dispatch_overhead"
    MIN_SHARE = 0.30
    """When a third of the window goes to ops under 20 µs, per-op overhead (Python, dispatcher,
    allocator) costs more than the arithmetic."""
    MIN_OPS_PER_STEP = 200

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        if not a:
            return []
        d = a["ops"]["dispatch"]
        if d["tiny_share"] < self.MIN_SHARE or d["ops_per_step"] < self.MIN_OPS_PER_STEP:
            return []
        lost = d["tiny_us"] / 1e6 * 0.7  # fusing recovers most, not all, of the per-op cost
        names = {o["name"] for o in a["ops"]["by_name"][:5]}
        return [Finding(
            kind=self.kind,
            title=f"{d['ops_per_step']:.0f} small ops per step: per-op overhead dominates",
            time_lost_s=lost, time_lost_pct=_pct(lost, ev),
            where=ev.lines_for_ops(names), ops=sorted(names),
            evidence=d,
            fix="Batch the work into fewer, larger tensor ops (vectorise loops over elements/rows), "
                "use torch._foreach_* for lists of tensors, or torch.compile the step to fuse them.",
            docs=DOCS["tuning"])]


class InputPipeline:
    kind = "input_pipeline"
    MIN_SHARE = 0.10
    """Waiting 10 % of the step for data is recoverable with loader workers."""

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        if not a or ev.window_s <= 0:
            return []
        dl = a["steps"]["breakdown_total_us"]["dataloader"] / 1e6
        if dl / ev.window_s < self.MIN_SHARE:
            return []
        loading = (ev.python or {}).get("loading") or {}
        where = where_of(loading.get("lines", [])[:3])
        return [Finding(
            kind=self.kind, where=where,
            title=f"Waiting for the DataLoader takes {100 * dl / ev.window_s:.0f}% of each step",
            time_lost_s=dl, time_lost_pct=_pct(dl, ev),
            ops=[n["name"] for n in a["ops"]["annotations"] if "DataLoader" in n["name"]][:2],
            evidence={"dataloader_s": dl, "window_s": ev.window_s},
            fix="Load data in parallel: DataLoader(num_workers=N, persistent_workers=True, "
                "pin_memory=True on GPU); move per-sample Python work into the workers.",
            docs=DOCS["dataloader"])]


class DtypeFloat64:
    kind = "dtype_float64"
    MIN_SHARE = 0.05
    """float64 work costs 2x float32 (and much more on GPUs); 5 % of the window is worth a cast."""

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        if not a or not a["ops"]["float64"]["recorded"]:
            return []
        f = a["ops"]["float64"]
        s = f["self_us"] / 1e6
        if ev.window_s <= 0 or s / ev.window_s < self.MIN_SHARE:
            return []
        names = {o["name"] for o in f["ops"]}
        lost = s / 2
        return [Finding(
            kind=self.kind,
            title=f"float64 (double) tensors in {len(names)} op(s): {100 * s / ev.window_s:.0f}% of the time",
            time_lost_s=lost, time_lost_pct=_pct(lost, ev),
            # The lines that ran these very ops when the trace places them; else every line
            # running ops of these names (live runs' samples), float64 or not.
            where=where_of(f.get("where") or []) or ev.lines_for_ops(names), ops=sorted(names),
            evidence={"float64_self_s": s, "ops": f["ops"][:5], "where": f.get("where") or []},
            fix="Create these tensors as float32 (NumPy arrays default to float64: "
                "torch.from_numpy(x).float(), or dtype=torch.float32).",
            docs=DOCS["tuning"])]


class HostSync:
    kind = "host_sync"
    MIN_SHARE = 0.05
    """Syncs that block the CPU 5 % of the window keep the GPU starved."""

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        if not a or not a["gpu"].get("present"):
            return []  # on a CPU-only run a scalar read is not a device sync
        s = a["syncs"]
        wait = s["sync_wait_us"] / 1e6
        if ev.window_s <= 0 or wait / ev.window_s < self.MIN_SHARE:
            return []
        causes = [c["op"] for c in s["by_cause"][:3]]
        return [Finding(
            kind=self.kind,
            title=f"{s['sync_calls']} host syncs block the CPU for {100 * wait / ev.window_s:.0f}% of the time",
            time_lost_s=wait, time_lost_pct=_pct(wait, ev),
            # The code that waited, when the trace places the syncs' ops; else the lines
            # running ops of those names.
            where=where_of(s.get("where") or []) or ev.lines_for_ops(set(causes)), ops=causes, evidence=s,
            fix="Avoid .item(), .cpu(), .numpy() and printing tensors inside the step; keep values "
                "on the device (e.g. torch.nonzero instead of a NumPy round trip), log every N steps.",
            docs=DOCS["tuning"])]


class GpuIdle:
    kind = "gpu_idle"
    MAX_BUSY_PCT = 60.0
    """A GPU busy less than 60 % of the window is waiting on something; below that it pays to
    find out what."""
    LAUNCH_BOUND_SHORT_SHARE = 0.5
    """Launch-bound: most kernels are short (the launch costs more than the kernel) and most
    idle time is the GPU waiting for the CPU, not for syncs or dependencies ('other')."""
    GRAPH_KERNELS_PER_LAUNCH = 2.0
    """A step whose launches start this many kernels each on average is already replayed as a
    CUDA graph: its advice is not "use CUDA graphs"."""

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        if not a or not a["gpu"].get("present"):
            return []
        out = []
        launch = a["gpu"]["launch"]
        for dev in a["gpu"]["devices"]:
            busy_pct, idle_s, note = self.unprofiled_busy(ev, dev)
            if busy_pct >= self.MAX_BUSY_PCT:
                continue
            idle = dev["idle_breakdown"]
            # Idle at the window's edges is the GPU with nothing queued yet (or any more): the
            # host's side too, as are gaps waiting for a launch and launch-latency gaps.
            host = idle["host_wait_us"] + idle["kernel_wait_us"] + idle.get("edges_us", 0.0)
            launch_bound = (launch.get("short_share", 0) >= self.LAUNCH_BOUND_SHORT_SHARE
                            and host >= 0.5 * dev["idle_us"])
            graphs = launch.get("kernels_per_launch", 1.0) >= self.GRAPH_KERNELS_PER_LAUNCH
            kind = "launch_bound" if launch_bound else self.kind
            if launch_bound and graphs:
                fix = (f"The step already replays CUDA graphs ({launch['kernels_per_launch']:.0f} kernels a "
                       "launch), and the GPU still waits for the CPU: the time goes to the Python and "
                       "framework work between replays. Do more work per step (a larger batch), move the "
                       "rest of the step (optimizer, loss, data) into the compiled region, or overlap it.")
            elif launch_bound:
                fix = ("The CPU cannot launch kernels fast enough: capture the step with CUDA graphs "
                       "(torch.compile(mode='reduce-overhead')), fuse small ops, or raise the batch size.")
            else:
                fix = ("Find what the GPU waits for in the idle breakdown: host wait means the CPU side "
                       "(data loading, Python) is slow; 'other' means syncs or dependencies.")
            out.append(Finding(
                kind=kind,
                title=f"GPU {dev['device']} is idle {100 - busy_pct:.0f}% of the time{note}",
                time_lost_s=idle_s, time_lost_pct=100.0 - busy_pct if note else _pct(idle_s, ev),
                where=ev.lines_for_ops(None) if host >= 0.5 * dev["idle_us"] else [],
                evidence={"busy_pct": dev["busy_pct"], "unprofiled_busy_pct": busy_pct, "idle_breakdown_us": idle,
                          "launch": launch},
                fix=fix, docs=DOCS["cuda_graphs"] if launch_bound else DOCS["profiler"]))
        return out

    @staticmethod
    def unprofiled_busy(ev: Evidence, dev: dict) -> tuple[float, float, str]:
        """(busy %, idle seconds in the window, a note for the title) of a device. On a live run
        whose profiled steps ran markedly slower than its unprofiled ones, the profiler's per-op
        cost lengthened the CPU side only (kernels run as fast): the GPU then looks idle because
        of the profiler. Busy % is then the GPU time per step over the unprofiled step time."""
        busy_pct, idle_s = dev["busy_pct"], dev["idle_us"] / 1e6
        phases = ev.phases or {}
        slow, unprofiled = phases.get("profiling_slowdown"), phases.get("unprofiled_step_s")
        if not (slow and slow >= PROFILING_SLOWDOWN_WARN and unprofiled and ev.steps):
            return busy_pct, idle_s, ""
        gpu_per_step_s = dev["busy_us"] / 1e6 / ev.steps
        real_pct = min(100.0, 100.0 * gpu_per_step_s / unprofiled)
        real_idle_s = ev.steps * max(unprofiled - gpu_per_step_s, 0.0)
        return real_pct, min(real_idle_s, idle_s), (
            f" without the profiler ({100 - busy_pct:.0f}% under it: it slowed the steps {slow:.1f}x)")


class CompiledRegions:
    """Graph breaks and recompiles as a trace shows them (`Torch-Compiled Region` nesting and
    compile ids). Time lost: the eager time between compiled graphs."""

    kind = "graph_break"

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        if not a or not a["compiled"].get("present"):
            return []
        c = a["compiled"]
        out = []
        if ev.compile and ev.compile.get("present"):
            return []  # the compile log says the same with lines and reasons (compile_rules.py)
        if c["nested_region_calls"]:
            eager = c["eager_top_level_us"] / 1e6
            out.append(Finding(
                kind="graph_break",
                title=f"Graph breaks: compiled code resumes in {c['nested_region_calls']} nested region(s)",
                time_lost_s=eager, time_lost_pct=_pct(eager, ev), evidence=c,
                fix="Run with torch.compile(fullgraph=True) to see the first break, then remove it "
                    "(print, .item(), data-dependent if, unsupported call).",
                docs=DOCS["compile"]))
        recompiled = [f for f in c["frames"] if f["recompiles_seen"] > 0]
        if recompiled:
            out.append(Finding(
                kind="recompile", severity="medium",
                title=f"{len(recompiled)} compiled frame(s) were recompiled in the window",
                time_lost_s=0.0, time_lost_pct=0.0, evidence={"frames": recompiled},
                fix="Mark changing dimensions dynamic (torch._dynamo.mark_dynamic / dynamic=True) or "
                    "pad inputs to a few fixed shapes.",
                docs=DOCS["compile"]))
        return out


class SingleTensorOptimizer:
    """An optimizer running its per-parameter for-loop (`foreach=False`, the default on CPU)
    over many parameters, when its step is a large part of the window.

    Time lost: `FOREACH_SAVING` of the time inside `Optimizer.step` (from the trace)."""

    kind = "optimizer"
    MIN_SHARE = 0.15
    """An optimizer step under 15 % of the window is not worth changing."""
    MIN_PARAMS = 20
    """With a handful of parameter tensors the loop is short; foreach gains little."""
    FOREACH_SAVING = 0.45
    """Measured here: Adam over 300 small tensors, 11 ms per step single-tensor, 5.9 ms with
    foreach=True (CPU, 1 thread); on GPUs the gain is larger."""

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        if not a or ev.window_s <= 0:
            return []
        steps = [n for n in a["ops"]["annotations"] if n["name"].startswith("Optimizer.step#")]
        if not steps:
            return []
        step_s = sum(n["total_us"] for n in steps) / 1e6
        if step_s / ev.window_s < self.MIN_SHARE:
            return []
        if any(o["name"].startswith(("aten::_foreach", "aten::_fused")) for o in a["ops"]["by_name"]):
            return []  # already multi-tensor
        sites = [c for c in ev.sites_of("optimizer") if not c.get("foreach") and not c.get("fused")]
        if ev.call_sites and not any(c.get("params", 0) >= self.MIN_PARAMS for c in sites):
            return []
        lost = step_s * self.FOREACH_SAVING
        names = sorted({n["name"].split("#", 1)[1].rsplit(".", 1)[0] for n in steps})
        return [Finding(
            kind=self.kind,
            title=f"{', '.join(names)} steps take {100 * step_s / ev.window_s:.0f}% of the time, one "
                  "parameter tensor at a time (single-tensor implementation)",
            time_lost_s=lost, time_lost_pct=_pct(lost, ev),
            where=where_of(sites[:3]),
            ops=[n["name"] for n in steps],
            evidence={"optimizer_step_s": step_s, "optimizers": sites[:3], "expected_saving": self.FOREACH_SAVING},
            fix="Pass foreach=True to the optimizer (one kernel per op for all parameters), or "
                "fused=True where supported (Adam/AdamW/SGD on CUDA and CPU).",
            docs="https://pytorch.org/docs/stable/optim.html#algorithms")]


class AutogradInInference:
    """Forward passes that record autograd graphs nobody uses: the steps are calls of a model
    (no optimizer step), their outputs carry a `grad_fn`, and the trace has no backward.

    Time lost: `AUTOGRAD_OVERHEAD` of the window (recording the graph and keeping activations
    alive), an estimate: the trace cannot separate it from the ops."""

    kind = "autograd_in_inference"
    MIN_GRAD_SHARE = 0.5
    """Most model calls must have built a graph (one stray call is not a pattern)."""
    AUTOGRAD_OVERHEAD = 0.10
    """Measured here: an 8-layer Linear+GELU stack, 64x256 inputs, 1 thread: 0.28-0.31 s per
    200 calls with grad, 0.264 s under inference_mode (7-15 %); more for small ops."""

    def check(self, ev: Evidence) -> list[Finding]:
        calls = ev.clock.get("top_module_calls") or 0
        with_grad = ev.clock.get("top_module_outputs_with_grad") or 0
        if not calls or with_grad / calls < self.MIN_GRAD_SHARE or ev.clock.get("kind") != "module":
            return []
        a = ev.analysis
        if not a or ev.window_s <= 0:
            return []
        names = [o["name"] for o in a["ops"]["by_name"]] + [n["name"] for n in a["ops"]["annotations"]]
        if any("evaluate_function" in n or "Backward" in n for n in names):
            return []  # a backward ran: this is training
        lost = ev.window_s * self.AUTOGRAD_OVERHEAD
        lines = [ln for ln in (ev.python or {}).get("window", {}).get("lines", [])][:1]
        # A fast machine can finish the window between two samples: then the line that ran the
        # most ops (exact, from the line spans) is the model call.
        where = where_of(lines) or ev.lines_for_ops(None, limit=1)
        return [Finding(
            kind=self.kind,
            title=f"{with_grad} of {calls} model calls built an autograd graph that no backward used",
            time_lost_s=lost, time_lost_pct=_pct(lost, ev),
            where=where,
            evidence={"model_calls": calls, "outputs_with_grad": with_grad, "backward_in_trace": False,
                      "estimated_overhead": self.AUTOGRAD_OVERHEAD},
            fix="Run inference under `with torch.inference_mode():` (or torch.no_grad()); model.eval() "
                "alone does not turn autograd off.",
            docs=DOCS["inference_mode"])]


class OneTimeCost:
    kind = "one_time_cost"
    MIN_S = 1.0
    """Start-up under a second is not worth a user's attention."""

    def check(self, ev: Evidence) -> list[Finding]:
        if not ev.phases or not ev.python:
            return []
        startup = ev.phases["phases"]["startup_s"]
        if startup < self.MIN_S:
            return []
        lines = [ln for ln in ev.python["startup"]["lines"] if ln["total_s"] >= 0.2][:3]
        steady = ev.phases.get("steady_step_s")
        return [Finding(
            kind=self.kind, severity="info",
            title=f"{startup:.1f} s before the first step (imports, set-up, first-call initialisation)",
            time_lost_s=startup, time_lost_pct=0.0,
            where=where_of(lines),
            evidence={"startup_s": startup, "steady_step_s": steady,
                      "lines": [{k: ln[k] for k in ("file", "line", "function", "total_s", "library")}
                                for ln in lines]},
            fix="One-time cost, not part of the step time: it matters for short jobs. The lines "
                "listed are where it goes (imports, lazy initialisation, compilation).",
            docs=DOCS["profiler"])]


class AnomalyDetection:
    kind = "anomaly_detection"

    def check(self, ev: Evidence) -> list[Finding]:
        env = ev.env or {}
        settings = env.get("settings_at_end") or env.get("settings") or {}
        if not settings.get("anomaly_detection"):
            return []
        where = where_of(ev.sites_of("anomaly_detection")[:3])
        return [Finding(
            kind=self.kind, severity="high",
            title="Autograd anomaly detection is on (every backward op is checked and traced)",
            time_lost_s=0.0, time_lost_pct=0.0, evidence={"anomaly_detection": True}, where=where,
            fix="Remove torch.autograd.set_detect_anomaly(True) / detect_anomaly() outside debugging.",
            docs=DOCS["anomaly"])]


class ThreadOversubscription:
    """More intra-op threads than usable cores (OMP_NUM_THREADS, torch.set_num_threads).

    Evidence: the thread probe run after the script (capture/thread_probe.py) times a matmul
    with the script's thread count and with one thread per core on this machine. Time lost: the
    window's op self time x (1 - 1/slowdown), an estimate that applies the probe's slowdown to
    every op (ops that do not split over threads lose less). A slowdown under MIN_SLOWDOWN is no
    measured cost: the finding is then `info` (the setting is still wrong for other machines)."""

    kind = "thread_oversubscription"
    MIN_SLOWDOWN = 1.05
    """Below 5 % the probe cannot tell a cost from this machine's noise."""

    def check(self, ev: Evidence) -> list[Finding]:
        env = ev.env or {}
        cores = env.get("cpu_affinity") or env.get("cpu_count") or 0
        at_end = env.get("settings_at_end") or {}
        threads = max(env.get("torch_threads") or 0, at_end.get("torch_threads") or 0,
                      *(c.get("threads", 0) for c in ev.sites_of("set_num_threads")))
        if not cores or threads <= cores:
            return []
        where = where_of([c for c in ev.sites_of("set_num_threads") if c.get("threads", 0) > cores][:3])
        probe = at_end.get("thread_probe")
        slowdown = (probe or {}).get("slowdown") or 0.0
        ops_s = sum(o["self_us"] for o in ev.analysis["ops"]["by_name"]) / 1e6 if ev.analysis else 0.0
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
        return [Finding(
            kind=self.kind, severity="" if measured else ("info" if probe else "medium"), where=where,
            title=title, time_lost_s=lost, time_lost_pct=_pct(lost, ev),
            evidence={"torch_threads": threads, "cores": cores, "thread_env": env.get("thread_env"),
                      "probe": probe, "op_self_s": ops_s},
            fix=f"Set OMP_NUM_THREADS={cores} (or torch.set_num_threads({cores})); with several "
                "processes, divide the cores between them.",
            docs=DOCS["threads"])]


class ConvBiasBeforeBatchNorm:
    """A convolution with `bias=True` feeding straight into BatchNorm (torch's profiler pattern
    `Conv2dBiasFollowedByBatchNorm2dPattern`, the performance tuning guide's "disable bias for
    convolutions directly followed by a batch norm"): BatchNorm subtracts the channel mean, so
    the bias cancels out. Time lost: not measurable from a trace (the bias add is fused into
    the convolution); reported as `low` with the number of such convolutions."""

    kind = "conv_bias_bn"

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        pairs = (a or {}).get("ops", {}).get("conv_bias_bn") or {}
        if not pairs.get("pairs"):
            return []
        per_step = pairs["pairs"] / max(ev.steps, 1)
        return [Finding(
            kind=self.kind, severity="low",
            title=f"{pairs['pairs']} convolution call(s) with bias=True feed straight into BatchNorm "
                  f"({per_step:.0f} per step): the bias is computed and cancelled",
            time_lost_s=0.0, time_lost_pct=0.0,
            where=ev.lines_for_ops({"aten::conv1d", "aten::conv2d", "aten::conv3d"}),
            ops=["aten::conv2d", "aten::batch_norm"],
            evidence=pairs,
            fix="Create those convolutions with bias=False (nn.Conv2d(..., bias=False)) when a BatchNorm "
                "follows: BatchNorm's own shift (beta) replaces it; the output does not change.",
            docs=DOCS["tuning"])]


class MemoryNearCapacity:
    """Peak GPU memory close to the device's capacity (from the trace's memory events and the
    device's total memory). Near the limit, the caching allocator frees and re-allocates
    (cudaFree/cudaMalloc stalls), fragmentation causes out-of-memory errors, and the batch size
    cannot grow. Time lost: none measured (memory is a risk, not a cost)."""

    kind = "memory"
    NEAR = 0.90
    """Reserved (or allocated) bytes at 90 % of the device's memory leave no headroom."""

    def check(self, ev: Evidence) -> list[Finding]:
        a = ev.analysis
        mem = (a or {}).get("memory") or {}
        if not mem.get("recorded"):
            return []
        capacity = {str(g["index"]): g["memory_bytes"] for g in (ev.env or {}).get("gpus", [])}
        capacity.update((a.get("trace") or {}).get("device_memory_bytes") or {})
        out = []
        for dev in mem["devices"]:
            kind, _, index = dev["device"].partition(":")
            total = capacity.get(index) if kind == "cuda" else None
            peak = max(dev.get("peak_reserved_bytes") or 0, dev.get("peak_allocated_bytes") or 0)
            if not total or peak < self.NEAR * total:
                continue
            allocators = [x for x in mem.get("top_allocators", []) if x.get("device", dev["device"]) == dev["device"]]
            gap = (dev.get("peak_reserved_bytes") or 0) - (dev.get("peak_allocated_bytes") or 0)
            fix = ("Cut activation memory: torch.utils.checkpoint on the largest blocks, a smaller batch with "
                   "gradient accumulation, bf16 autocast, optimizer.zero_grad(set_to_none=True)")
            if gap > 0.1 * total:
                fix += (f"; reserved exceeds allocated by {gap / 1e9:.1f} GB (fragmentation): set "
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
            out.append(Finding(
                kind=self.kind, severity="medium",
                title=f"Peak memory on {dev['device']} is {peak / 1e9:.1f} of {total / 1e9:.1f} GB "
                      f"({100 * peak / total:.0f}%)",
                time_lost_s=0.0, time_lost_pct=0.0,
                where=[w for x in allocators[:3] for w in where_of([x]) if x.get("file")],
                ops=[x["op"] for x in allocators[:4] if x.get("op")],
                evidence={"device": dev, "capacity_bytes": total, "top_allocators": allocators[:5]},
                fix=fix + ".", docs=DOCS["memory"]))
        return out


class ZeroGradKernels:
    """`optimizer.zero_grad(set_to_none=False)` (or `model.zero_grad()` on torch < 2.0) launches a
    fill per parameter every step; setting gradients to None costs nothing and lets the next
    backward write them directly.

    Time lost: the self time of `aten::zero_` / `aten::fill_` in the window when the trace has
    `Optimizer.zero_grad` spans (the fills run inside them)."""

    kind = "zero_grad"
    MIN_SHARE = 0.03
    """Zeroing is pure overhead: 3 % of the window is worth a keyword argument."""

    def check(self, ev) -> list[Finding]:
        a = ev.analysis
        if not a or ev.window_s <= 0:
            return []
        spans = [x for x in a["ops"].get("annotations") or [] if x["name"].startswith("Optimizer.zero_grad")]
        if not spans:
            return []
        fills = [o for o in a["ops"]["by_name"] if o["name"] in ("aten::zero_", "aten::fill_")]
        time_s = min(sum(o["self_us"] for o in fills), sum(x["total_us"] for x in spans)) / 1e6
        share = time_s / ev.window_s
        if share < self.MIN_SHARE:
            return []
        sites = ev.sites_of("optimizer")
        return [Finding(
            kind=self.kind,
            title=f"Zeroing gradients takes {100 * share:.0f}% of the profiled time "
                  f"({sum(x['count'] for x in spans)} zero_grad calls)",
            time_lost_s=time_s, time_lost_pct=100 * share, ops=[o["name"] for o in fills],
            where=where_of(sites[:1]),
            evidence={"zero_grad_spans": spans, "fill_ops": fills},
            fix="Call optimizer.zero_grad(set_to_none=True) (the default since PyTorch 2.0; "
                "do not pass set_to_none=False), or model.zero_grad(set_to_none=True).",
            docs=DOCS["zero_grad"])]


RULES = [PythonHotspot(), OpHotspot(), DispatchOverhead(), InputPipeline(), DtypeFloat64(), SingleTensorOptimizer(),
         AutogradInInference(),
         HostSync(), GpuIdle(), CompiledRegions(), OneTimeCost(), AnomalyDetection(),
         ThreadOversubscription(), ZeroGradKernels(), ConvBiasBeforeBatchNorm(),
         MemoryNearCapacity(), *GPU_RULES, *COMPILE_RULES]


def diagnose(ev: Evidence) -> list[Finding]:
    """Run every rule; findings most costly first. A broken rule never hides the others."""
    findings: list[Finding] = []
    for rule in RULES:
        try:
            findings.extend(rule.check(ev))
        except Exception as exc:  # pragma: no cover - reported, not fatal
            if os.environ.get("TORCHNECK_DEBUG"):
                raise
            findings.append(Finding(kind="internal", severity="info", title=f"rule {rule.kind} failed: {exc}",
                                    time_lost_s=0.0, time_lost_pct=0.0, fix=""))
    return rank_findings(fold_same_line(findings))


def fold_same_line(findings: list[Finding]) -> list[Finding]:
    """A Python hotspot on the very line that a dispatch-overhead finding names is the same
    problem seen twice (the Python between thousands of tiny ops *is* the per-op overhead): it
    is folded into the dispatch finding's evidence instead of being listed again."""
    dispatch_lines = {(f.where[0].file, f.where[0].line): f for f in findings
                      if f.kind == "dispatch_overhead" and f.where}
    out = []
    for f in findings:
        twin = (dispatch_lines.get((f.where[0].file, f.where[0].line))
                if f.kind == "python_hotspot" and f.where else None)
        if twin is not None and "waits" not in f.title:
            twin.evidence = dict(twin.evidence, python_outside_ops_on_this_line_s=f.evidence.get("outside_torch_s"))
            continue
        out.append(f)
    return out
