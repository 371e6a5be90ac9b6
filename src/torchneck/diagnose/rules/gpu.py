"""Rules on GPU evidence: host syncs, an idle or launch-bound GPU, host-device copies, FP32
matrix products that skip the tensor cores, memory near the device's capacity."""

from __future__ import annotations

import ast
import re
from typing import Any

import msgspec

from ...analysis.run import PROFILING_SLOWDOWN_WARN
from ...model.analysis import (
    Allocator,
    Device,
    FilledThenCopied,
    IdleBreakdown,
    KernelRow,
    LaunchStats,
    MemoryDevice,
    ShapeExample,
    Syncs,
)
from ...model.base import Record
from ...model.findings import Finding
from ..facts import Facts, Where, where_of
from ..idioms import setting_lines
from ..rule import DOCS, Explanation, Rule, register
from ..source import _tree, call_name, function_at
from .calls import model_call_sites, sampled_under
from .python import reads_elements


class HostSyncEvidence(Syncs):
    element_reads_per_step: float = 0.0
    """Scalar reads per step at the lines that sync most, when those lines are a loop reading a
    tensor element by element (`t[i].item()`): the loop is what to remove, not one sync."""
    loop_s: float = 0.0
    """That loop's time in the window (its lines' sampled time, at least its ops' wall time)."""
    gpu_idle_s: float | None = None
    """The busiest GPU's idle time in the window, when under the time the syncs cost: the CPU
    waited for work the GPU ran anyway, and no sync removed gives back more than the idle."""


@register
class HostSync(Rule[HostSyncEvidence]):
    """The CPU stops and waits for the GPU: `.item()`, `.cpu()`, `.numpy()`, printing a tensor,
    data-dependent shapes (nonzero, masked_select). The GPU then runs dry until the CPU has
    launched new work.

    Time lost: the sync calls' wall time in the window (what the CPU spent blocked); for a loop
    reading elements one by one (`pred[i].item()` per example), the whole loop's time: each read
    is a tiny op, a copy and a sync, and reading the values at once removes all of them. At most
    the busiest GPU's idle time: while the CPU waits on a GPU that stays busy (slow kernels), the
    wait is the GPU's work, which no removed sync shortens."""

    kind = "host_sync"
    summary = "The CPU blocks on the GPU inside the step (.item(), .cpu(), printing tensors)."
    docs = DOCS["tuning"]
    evidence_type = HostSyncEvidence
    confidence = "measured"
    saving_basis = ("the sync calls' wall time (the CPU blocked, launching nothing); for element-by-element reads, "
                    "the reading loop's sampled time")
    explains = ("gpu_idle", "launch_bound", "dispatch_overhead", "python_hotspot")
    MIN_SHARE = 0.05
    """Syncs that block the CPU 5 % of the window keep the GPU starved."""
    ELEMENT_READS_PER_STEP = 16
    """Scalar reads a step at one place that make a loop over elements, not a loss or two logged."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.gpu.present:
            return []  # on a CPU-only run a scalar read is not a device sync
        s = a.syncs
        wait = s.sync_wait_us / 1e6
        if facts.window_s <= 0 or wait / facts.window_s < self.MIN_SHARE:
            return []
        causes = [c.op for c in s.by_cause[:3]]
        # The code that waited, when the trace places the syncs' ops; else the lines running
        # ops of those names.
        where = where_of(s.where) or facts.lines_for_ops(set(causes))
        ev = HostSyncEvidence(**msgspec.structs.asdict(s))
        reads_per_step = max((site.count for site in s.where), default=0) / max(facts.steps, 1)
        lost, title = wait, (f"{s.sync_calls} host syncs block the CPU for "
                             f"{100 * wait / facts.window_s:.0f}% of the time")
        if reads_per_step >= self.ELEMENT_READS_PER_STEP and reads_elements(facts, where[:1]):
            ev.element_reads_per_step = reads_per_step
            sampled = sampled_under(facts, where[0].file, where[0].line) * facts.window_s
            ev.loop_s = max(sampled, sum(o.time_us for o in s.scalar_ops) / 1e6, wait)
            lost = min(ev.loop_s, facts.window_s)
            title = (f"{reads_per_step:.0f} tensor elements read one by one per step at line {where[0].line}: "
                     "each read is a tiny op, a copy to the host and a sync")
        busiest = max(a.gpu.devices, key=lambda d: d.busy_us, default=None)
        if busiest is not None and busiest.idle_us / 1e6 < lost:  # a GPU kept busy: the wait was its work
            ev.gpu_idle_s = lost = busiest.idle_us / 1e6
        return [self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost), ops=causes, where=where)]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """After each sync the queue is empty and the GPU idles until the CPU launches again. A
        loop reading elements one by one is also the tiny ops it issues and the Python it runs."""
        if symptom.kind in ("dispatch_overhead", "python_hotspot"):
            reading = {(w.file, w.line) for w in cause.where[:1]}
            if not cause.evidence.get("element_reads_per_step") \
                    or not any((w.file, w.line) in reading for w in symptom.where[:3]):
                return None
            # the same loop: its tiny ops' overhead or its Python, seen by another rule
            return Explanation(symptom.time_lost_s, beyond_s=max(symptom.time_lost_s - cause.time_lost_s, 0.0))
        return Explanation(min(cause.time_lost_s, symptom.time_lost_s))

    def fix(self, evidence: HostSyncEvidence) -> str:
        if evidence.element_reads_per_step:
            return ("Do not read the tensor element by element: each .item() is a device-to-host copy and a sync. "
                    "Keep the computation on the device (compare or reduce whole tensors, accumulate in a GPU "
                    "tensor) and read one number at the end, or copy the values at once (.tolist(), one .cpu()).")
        return ("Avoid .item(), .cpu(), .numpy() and printing tensors inside the step; keep values "
                "on the device (e.g. torch.nonzero instead of a NumPy round trip), log every N steps.")


class GpuIdleEvidence(Record):
    busy_pct: float
    unprofiled_busy_pct: float
    """Busy % with the profiler's slowdown of the host side taken out (live runs)."""
    idle_breakdown_us: IdleBreakdown
    launch: LaunchStats


MAX_BUSY_PCT = 60.0
"""A GPU busy less than 60 % of the window is waiting on something; below that it pays to
find out what."""
LAUNCH_BOUND_SHORT_SHARE = 0.5
"""Launch-bound: most kernels are short (the launch costs more than the kernel) and most
idle time is the GPU waiting for the CPU, not for syncs or dependencies ('other')."""
GRAPH_KERNELS_PER_LAUNCH = 2.0
"""A step whose launches start this many kernels each on average is already replayed as a
CUDA graph: its advice is not "use CUDA graphs"."""


class _IdleDevice(Record):
    """One device that is idle too much, with what decides between the two idle rules."""

    device: Device
    busy_pct: float
    idle_s: float
    note: str
    host_wait_us: float
    launch_bound: bool


def _idle_devices(facts: Facts) -> list[_IdleDevice]:
    """Devices busy under `MAX_BUSY_PCT`, each marked launch-bound or not."""
    a = facts.analysis
    if not a or not a.gpu.present:
        return []
    out = []
    launch = a.gpu.launch
    for dev in a.gpu.devices:
        busy_pct, idle_s, note = _unprofiled_busy(facts, dev)
        if busy_pct >= MAX_BUSY_PCT:
            continue
        idle = dev.idle_breakdown
        # Idle at the window's edges is the GPU with nothing queued yet (or any more): the
        # host's side too, as are gaps waiting for a launch and launch-latency gaps.
        host = idle.host_wait_us + idle.kernel_wait_us + idle.edges_us
        launch_bound = launch.short_share >= LAUNCH_BOUND_SHORT_SHARE and host >= 0.5 * dev.idle_us
        out.append(_IdleDevice(device=dev, busy_pct=busy_pct, idle_s=idle_s, note=note, host_wait_us=host,
                               launch_bound=launch_bound))
    return out


GROWN_STEPS = 1.25
"""The run's steps take 1.25x the profiled ones on average at least: the steps grew (generation
over a longer prefix) or others are long (an evaluation, a checkpoint), the window saw short ones.
The GPU's idle time per step, the host's launches, recurs per step: over the run, its share of
the mean step."""


def _unprofiled_busy(facts: Facts, dev: Device) -> tuple[float, float, str]:
    """(busy %, idle seconds in the window, a note for the title) of a device. On a live run
    whose profiled steps ran markedly slower than its unprofiled ones, the profiler's per-op
    cost lengthened the CPU side only (kernels run as fast): the GPU then looks idle because
    of the profiler. Busy % is then the GPU time per step over the unprofiled step time. When the
    run's steps are the longer ones (`GROWN_STEPS`), the idle time per step over their mean."""
    busy_pct, idle_s = dev.busy_pct, dev.idle_us / 1e6
    phases = facts.phases or {}
    slow, unprofiled = phases.get("profiling_slowdown"), phases.get("unprofiled_step_s")
    profiled, steps_s = phases.get("profiled_step_s"), phases.get("step_s") or []
    run_step_s = sum(steps_s[1:]) / (len(steps_s) - 1) if len(steps_s) > 2 else None  # the first: set-up
    if profiled and run_step_s and run_step_s >= GROWN_STEPS * profiled and facts.steps:  # short ones profiled
        per_step_s = idle_s / facts.steps
        return (100.0 * (1.0 - min(per_step_s / run_step_s, 1.0)), idle_s * profiled / run_step_s,
                f" over the run's steps ({run_step_s * 1e3:.1f} ms on average; {100 - busy_pct:.0f}% of the "
                f"profiled ones, {profiled * 1e3:.1f} ms)")
    if not (slow and slow >= PROFILING_SLOWDOWN_WARN and unprofiled and facts.steps):
        return busy_pct, idle_s, ""
    gpu_per_step_s = dev.busy_us / 1e6 / facts.steps
    real_pct = min(100.0, 100.0 * gpu_per_step_s / unprofiled)
    real_idle_s = facts.steps * max(unprofiled - gpu_per_step_s, 0.0)
    return real_pct, min(real_idle_s, idle_s), (
        f" without the profiler ({100 - busy_pct:.0f}% under it: it slowed the steps {slow:.1f}x)")


class _IdleRule(Rule[GpuIdleEvidence]):
    """Shared by the two idle rules: one finding per device, from `_idle_devices`."""

    evidence_type = GpuIdleEvidence
    launch_bound: bool

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        out = []
        for d in _idle_devices(facts):
            if d.launch_bound != self.launch_bound or a is None:
                continue
            dev = d.device
            ev = GpuIdleEvidence(busy_pct=dev.busy_pct, unprofiled_busy_pct=d.busy_pct,
                                 idle_breakdown_us=dev.idle_breakdown, launch=a.gpu.launch)
            out.append(self.finding(
                ev, title=f"GPU {dev.device} is idle {100 - d.busy_pct:.0f}% of the time{d.note}",
                lost_s=d.idle_s, pct=100.0 - d.busy_pct if d.note else facts.pct(d.idle_s),
                where=facts.lines_for_ops(None) if d.host_wait_us >= 0.5 * dev.idle_us else []))
        return out


@register
class LaunchBound(_IdleRule):
    """The GPU waits for the CPU to launch kernels: most kernels are shorter than their launch,
    and most idle time is the GPU with nothing queued. Time lost: the GPU's idle time in the
    window."""

    kind = "launch_bound"
    summary = "The GPU is idle because the CPU cannot launch its many short kernels fast enough."
    docs = DOCS["cuda_graphs"]
    confidence = "measured"
    saving_basis = "the GPU's idle time in the window (capturing the step as a CUDA graph removes launches)"
    launch_bound = True

    def fix(self, evidence: GpuIdleEvidence) -> str:
        if evidence.launch.kernels_per_launch >= GRAPH_KERNELS_PER_LAUNCH:
            return (f"The step already replays CUDA graphs ({evidence.launch.kernels_per_launch:.0f} kernels a "
                    "launch), and the GPU still waits for the CPU: the time goes to the Python and "
                    "framework work between replays. Do more work per step (a larger batch), move the "
                    "rest of the step (optimizer, loss, data) into the compiled region, or overlap it.")
        return ("The CPU cannot launch kernels fast enough: capture the step with CUDA graphs "
                "(torch.compile(mode='reduce-overhead')), fuse small ops, or raise the batch size.")


@register
class GpuIdle(_IdleRule):
    """A GPU idle much of the window for another reason than launches: syncs, dependencies,
    the host doing other work. Time lost: the GPU's idle time in the window."""

    kind = "gpu_idle"
    summary = "The GPU is idle much of the time (waiting for the host, syncs or dependencies)."
    docs = DOCS["profiler"]
    confidence = "upper_bound"
    saving_basis = "the GPU's idle time in the window (the most that keeping it busy could save)"
    launch_bound = False

    def fix(self, evidence: GpuIdleEvidence) -> str:
        return ("Find what the GPU waits for in the idle breakdown: host wait means the CPU side "
                "(data loading, Python) is slow; 'other' means syncs or dependencies.")


class CopyDirection(Record):
    count: int
    time_us: float
    bytes: int
    gb_per_s: float | None


class MemcpyEvidence(Record):
    directions: dict[str, CopyDirection]
    """Per direction ("HtoD", "DtoH (pageable)", ...), the copies' count, time, bytes and speed."""
    pageable: bool


@register
class MemcpyTime(Rule[MemcpyEvidence]):
    """Host<->device copies take a large share of the GPU's time in the steps.

    Time lost: the copies' GPU time (HtoD + DtoH). Copies from pageable memory are flagged in the
    evidence: they run at a fraction of pinned bandwidth and cannot overlap compute."""

    kind = "memcpy"
    summary = "Host-device copies take much of the steps (pageable memory, copies back and forth)."
    docs = DOCS["pinned"]
    evidence_type = MemcpyEvidence
    confidence = "upper_bound"
    saving_basis = "the HtoD and DtoH copies' GPU time (what overlapping them with compute could hide)"
    MIN_SHARE = 0.10
    """A tenth of the window spent copying is worth pinning and overlapping."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.gpu.present or facts.window_s <= 0:
            return []
        copies = {k: v for k, v in a.gpu.memcpy.items() if k.startswith(("HtoD", "DtoH"))}
        time_s = sum(v.time_us for v in copies.values()) / 1e6
        share = time_s / facts.window_s
        if share < self.MIN_SHARE:
            return []
        pageable = any("pageable" in k for k in copies)
        directions = {k: CopyDirection(count=v.count, time_us=v.time_us, bytes=v.bytes,
                                       gb_per_s=v.bytes / v.time_us / 1e3 if v.time_us else None)
                      for k, v in copies.items()}
        return [self.finding(MemcpyEvidence(directions=directions, pageable=pageable),
                             title=f"Host-device copies take {100 * share:.0f}% of the profiled time"
                                   + (" (some from pageable memory)" if pageable else ""),
                             lost_s=time_s, pct=100 * share, ops=sorted(copies))]

    def fix(self, evidence: MemcpyEvidence) -> str:
        return ("Pin the host memory and copy asynchronously: DataLoader(pin_memory=True) and "
                "tensor.to(device, non_blocking=True); keep tensors on the GPU between steps instead of "
                "moving them back and forth; move results to the CPU only every N steps.")


@register
class ExtraCopy(Rule[FilledThenCopied]):
    """A tensor filled on the CPU and immediately copied to the GPU (`torch.zeros(n).to("cuda")`,
    torch's `ExtraCUDACopyPattern`). Time lost: the host time of those copies (`aten::to`),
    which creating the tensor on the GPU (`device="cuda"`) avoids along with the host fill."""

    kind = "extra_copy"
    summary = "Tensors are filled on the CPU and then copied to the GPU instead of created there."
    docs = DOCS["on_device"]
    evidence_type = FilledThenCopied
    confidence = "measured"
    saving_basis = "the host time of those copies (creating the tensor on the GPU needs none)"
    MIN_SHARE = 0.02
    """A copy that creating the tensor in place removes for free is worth fixing from 2 %."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        hits = a.ops.filled_then_copied if a else None
        if not hits or not hits.count or facts.window_s <= 0:
            return []
        lost = hits.copy_us / 1e6
        share = lost / facts.window_s
        if share < self.MIN_SHARE:
            return []
        return [self.finding(hits, title=f"{hits.count} tensor(s) filled on the CPU and then copied to the GPU "
                                         f"({100 * share:.0f}% of the profiled time in the copies)",
                             lost_s=lost, pct=100 * share, ops=["aten::to"])]

    def fix(self, evidence: FilledThenCopied) -> str:
        return ("Create the tensor on the GPU directly: torch.zeros(..., device='cuda') (also ones, full, "
                "randn, empty), not torch.zeros(...).to('cuda').")


_FP32_GEMM = re.compile(r"sgemm|gemm.*f32f32|gemm_f32|fp32.*gemm", re.IGNORECASE)
_TENSOR_CORE = re.compile(r"tf32|tensorop|s1688|s16816|hmma|bf16|f16|half|fp16|i8|xmma_gemm_f16|wgmma", re.IGNORECASE)
_PRE_AMPERE = ("volta_", "turing_", "maxwell_", "pascal_")


class TensorCoresEvidence(Record):
    kernels: list[KernelRow]
    share: float
    pre_ampere_kernels: bool
    """The kernels are named for a GPU older than Ampere: no TF32, fp16 is the tensor-core type."""
    turned_off_at: int | None = None
    """A line of the program turning TF32 off (`torch.backends.cuda.matmul.allow_tf32 = False`,
    `set_float32_matmul_precision("highest")`): the place to change, first."""
    turned_off: str | None = None


@register
class TensorCores(Rule[TensorCoresEvidence]):
    """Matrix products run as plain FP32 kernels (`sgemm`), not on the tensor cores.

    Time lost: three quarters of those kernels' time, a floor: TF32 runs matrix products about
    7x faster than FP32 at peak on an A100 or H100, bf16 about 15x; on an H100, a step of FP32
    products went from 130 ms to 16 ms under bf16 autocast (benchmarks/zoo/g_fp32_hf_loop.py).
    Only as far as the GPU sets the pace (`Facts.gpu_cut_saving`).
    `where`: the lines calling the model (where autocast goes), then the lines running the
    products and their callers."""

    kind = "tensor_cores"
    summary = "FP32 matrix products run without the tensor cores (no TF32, no autocast)."
    docs = DOCS["tf32"]
    evidence_type = TensorCoresEvidence
    saving_basis = ("three quarters of the FP32 GEMM kernels' time (TF32 is ~7x faster, bf16 ~15x: a floor), "
                    "down to the host's own time per step")
    MIN_SHARE = 0.15
    """FP32 GEMMs worth a sixth of the window are worth a one-line precision setting."""
    SAVING = 0.75
    """Of those kernels' time: a 4x speed-up, under TF32's and bf16's (7x and 15x at peak)."""
    MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::matmul",
                            "aten::linear"})
    """Host ops whose kernels are the matrix products (their lines are where the work is issued)."""
    MODEL_CALLS_SHOWN = 2
    """Model call sites named first (a training and an evaluation call, say)."""
    KERNELS_KEPT = 10
    """FP32 kernels listed in the evidence (the costliest; the rest add little)."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.gpu.present or facts.window_s <= 0:
            return []
        fp32 = [k for k in a.gpu.top_kernels if _FP32_GEMM.search(k.name) and not _TENSOR_CORE.search(k.name)]
        # Kernel time summed over streams can exceed the window (kernels run side by side, or
        # overhang its edges): then they fill it.
        time_s = min(sum(k.time_us for k in fp32) / 1e6, facts.window_s)
        share = time_s / facts.window_s
        if share < self.MIN_SHARE:
            return []
        lost = facts.gpu_cut_saving(self.SAVING * time_s)
        paced = lost <= 0  # the host sets the pace: faster products would wait for it
        ev = TensorCoresEvidence(kernels=fp32[: self.KERNELS_KEPT], share=share,
                                 pre_ampere_kernels=any(k.name.startswith(_PRE_AMPERE) for k in fp32))
        paced_note = "; the host, not the GPU, sets the pace, so faster products would not shorten the steps"
        where = self._where(facts)
        off = next(((file, ln, text) for file in dict.fromkeys(w.file for w in where)  # each file once
                    for ln, text in _tf32_turned_off(file)), None)
        if off is not None:  # the program turns TF32 off itself: that line first
            ev.turned_off_at, ev.turned_off = off[1], off[2]
            where = [Where(file=off[0], line=off[1], function=function_at(off[0], off[1])),
                     *(w for w in where if (w.file, w.line) != off[:2])]
        return [self.finding(ev, title=f"FP32 matrix products without tensor cores take {100 * share:.0f}% "
                                       "of the profiled time" + (f" (line {off[1]} turns TF32 off)" if off else "")
                                       + (paced_note if paced else ""),
                             lost_s=lost, pct=100 * lost / facts.window_s, ops=[k.name for k in fp32[:5]],
                             where=where, severity="info" if paced else None)]

    def _where(self, facts: Facts) -> list[Where]:
        """The lines calling the model (the capture's module sites: where autocast goes), then
        the lines running the products and their callers."""
        calls = where_of(model_call_sites(facts))[: self.MODEL_CALLS_SHOWN]
        seen = {(w.file, w.line) for w in calls}
        products = facts.with_callers(facts.lines_for_ops(set(self.MATMUL_OPS)))
        return calls + [w for w in products if (w.file, w.line) not in seen]

    def fix(self, evidence: TensorCoresEvidence) -> str:
        if evidence.turned_off_at is not None and not evidence.pre_ampere_kernels:
            return (f"Line {evidence.turned_off_at} turns TF32 off ({evidence.turned_off}): drop it, or set "
                    "torch.backends.cuda.matmul.allow_tf32 = True / torch.set_float32_matmul_precision('high'), so "
                    "FP32 matmuls run on the tensor cores (or run the forward pass under torch.autocast(device_type="
                    "'cuda', dtype=torch.bfloat16)).")
        if evidence.pre_ampere_kernels:  # no TF32 and no fast bf16 before Ampere: fp16 is the tensor-core type
            return ("This GPU predates TF32: run the forward pass under torch.autocast(device_type='cuda', "
                    "dtype=torch.float16) with a torch.amp.GradScaler for training, so matmuls use the "
                    "tensor cores.")
        return ("Let matmuls use the tensor cores: torch.set_float32_matmul_precision('high') (TF32) at "
                "the start of the script, or run the forward pass under torch.autocast(device_type='cuda', "
                "dtype=torch.bfloat16).")


class UnalignedMatmulEvidence(Record):
    recorded: bool
    count: int
    kernel_us: float
    shapes: list[ShapeExample]
    kernel_share: float
    odd_kernel_us: float = 0.0


@register
class UnalignedHalfMatmul(Rule[UnalignedMatmulEvidence]):
    """fp16/bf16 matrix products whose leading dimensions (K, N) are not multiples of 8 (torch's
    `MatMulDimInFP16Pattern`): the rows are not 16-byte aligned, so cuBLAS falls back to kernels
    with narrow loads (`align1`, `align2`).

    Time lost: of those products' kernel time, the part padding would save, as far as the GPU
    sets the pace (`Facts.gpu_cut_saving`: a step no longer GPU-bound goes at the host's pace).
    On an H100 (benchmarks/gemm_alignment.py) an odd K or N alone ran 4.8-6.3x slower than the
    padded product, a K of 4 mod 8 2.8x; the rule counts the lower ends. A bf16 training step
    (benchmarks/zoo/g_bow_half.py) with the host at 2.2 ms and the products at 12.4 ms a step
    saved 67 % of its time when padded; with the products at 6.3 ms, what the host left over."""

    kind = "unaligned_matmul"
    summary = "Half-precision matmuls with dimensions that are not multiples of 8."
    docs = DOCS["amp"]
    evidence_type = UnalignedMatmulEvidence
    confidence = "estimated"
    saving_basis = ("the unaligned products' kernel time less what padded ones take (4.8x faster with an odd "
                    "dimension, 2.8x otherwise, measured on an H100), down to the host's own time per step")
    ODD_SLOWDOWN = 4.8
    """An odd K or N: 4.8-6.3x slower than padded on an H100 (`align1` kernels, one-element loads)."""
    EVEN_SLOWDOWN = 2.8
    """K or N even but not a multiple of 8: 2.8x slower than padded (K of 4 mod 8 on an H100)."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        hits = a.ops.half_matmul_unaligned if a else None
        if not a or not hits or not hits.count or not a.gpu.present:
            return []
        window = facts.window_s
        share = hits.kernel_us / 1e6 / window if window > 0 else 0.0
        odd_s, even_s = hits.odd_kernel_us / 1e6, max(hits.kernel_us - hits.odd_kernel_us, 0.0) / 1e6
        lost = facts.gpu_cut_saving(odd_s * (1 - 1 / self.ODD_SLOWDOWN) + even_s * (1 - 1 / self.EVEN_SLOWDOWN))
        ev = UnalignedMatmulEvidence(recorded=hits.recorded, count=hits.count, kernel_us=hits.kernel_us,
                                     shapes=hits.shapes, kernel_share=share, odd_kernel_us=hits.odd_kernel_us)
        in_kernels = f" ({100 * share:.0f}% of the profiled time in their kernels)" if share else ""
        if lost <= 0 and window > 0:  # the host sets the pace: faster kernels would wait for it
            in_kernels += "; the host, not the GPU, sets the pace, so padding would not shorten the steps"
        where = where_of(hits.where) or facts.lines_for_ops({x.op for x in hits.shapes})
        return [self.finding(ev, title=f"{hits.count} half-precision matmul(s) with dimensions that are not "
                                       f"multiples of 8{in_kernels}",
                             lost_s=lost, pct=facts.pct(lost), where=facts.with_callers(where),
                             ops=sorted({x.op for x in hits.shapes}),
                             severity="info" if lost <= 0 and window > 0 else None)]

    def fix(self, evidence: UnalignedMatmulEvidence) -> str:
        example = evidence.shapes[0] if evidence.shapes else None
        return ("Pad the matrix dimensions (hidden sizes, vocabulary, batch x sequence) to multiples of 8 "
                "(64 is better still) so fp16/bf16 matmuls run on the tensor cores without padding"
                + (f"; e.g. {example.op} on {example.shapes}" if example else "") + ".")


class MemoryEvidence(Record):
    device: MemoryDevice
    capacity_bytes: int
    top_allocators: list[Allocator] = []
    fragmentation_bytes: int = 0
    """Reserved beyond allocated at the peaks (the caching allocator's unused blocks)."""


@register
class MemoryNearCapacity(Rule[MemoryEvidence]):
    """Peak GPU memory close to the device's capacity (from the trace's memory events and the
    device's total memory). Near the limit, the caching allocator frees and re-allocates
    (cudaFree/cudaMalloc stalls), fragmentation causes out-of-memory errors, and the batch size
    cannot grow. Time lost: none measured (memory is a risk, not a cost)."""

    kind = "memory"
    summary = "Peak GPU memory is close to the device's capacity."
    docs = DOCS["memory"]
    evidence_type = MemoryEvidence
    confidence = "unmeasured"
    saving_basis = "none measured: memory near capacity is a risk (stalls, out-of-memory), not a time cost"
    NEAR = 0.90
    """Reserved (or allocated) bytes at 90 % of the device's memory leave no headroom."""
    FRAGMENTED = 0.1
    """Reserved exceeding allocated by a tenth of the device is worth the expandable-segments setting."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.memory.recorded:
            return []
        capacity: dict[str, Any] = {str(g["index"]): g["memory_bytes"] for g in facts.env.get("gpus", [])}
        capacity.update(a.trace.device_memory_bytes)
        out = []
        for dev in a.memory.devices:
            kind, _, index = dev.device.partition(":")
            total = capacity.get(index) if kind == "cuda" else None
            peak = max(dev.peak_reserved_bytes or 0, dev.peak_allocated_bytes or 0)
            if not total or peak < self.NEAR * total:
                continue
            allocators = [x for x in a.memory.top_allocators if (x.device or dev.device) == dev.device]
            gap = (dev.peak_reserved_bytes or 0) - (dev.peak_allocated_bytes or 0)
            ev = MemoryEvidence(device=dev, capacity_bytes=total, top_allocators=allocators[:5],
                                fragmentation_bytes=max(gap, 0))
            out.append(self.finding(ev, title=f"Peak memory on {dev.device} is {peak / 1e9:.1f} of "
                                               f"{total / 1e9:.1f} GB ({100 * peak / total:.0f}%)",
                                    lost_s=0.0, pct=0.0, severity="medium", where=where_of(allocators[:3]),
                                    ops=[x.op for x in allocators[:4] if x.op]))
        return out

    def fix(self, evidence: MemoryEvidence) -> str:
        fix = ("Cut activation memory: torch.utils.checkpoint on the largest blocks, a smaller batch with "
               "gradient accumulation, bf16 autocast, optimizer.zero_grad(set_to_none=True)")
        if evidence.fragmentation_bytes > self.FRAGMENTED * evidence.capacity_bytes:
            fix += (f"; reserved exceeds allocated by {evidence.fragmentation_bytes / 1e9:.1f} GB (fragmentation): "
                    "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
        return fix + "."


def _tf32_turned_off(file: str) -> list[tuple[int, str]]:
    """Statements of `file` that turn TF32 matmuls off: `...matmul.allow_tf32 = <anything but
    True>` (a flag of the program's included: `= args.fixed`), or `set_float32_matmul_precision`
    given "highest" or a name. (line, statement) pairs; [] when none or unreadable."""
    tree = _tree(file)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and not (isinstance(node.value, ast.Constant) and node.value.value is True) \
                and any(isinstance(t, ast.Attribute) and t.attr == "allow_tf32"
                        and ast.unparse(t.value).endswith("matmul") for t in node.targets):
            out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and call_name(node) == "set_float32_matmul_precision" and node.args \
                and not (isinstance(node.args[0], ast.Constant) and node.args[0].value in ("high", "medium")):
            out.append((node.lineno, ast.unparse(node)))
            setting = node.args[0]
            name = setting.attr if isinstance(setting, ast.Attribute) else getattr(setting, "id", None)
            out += [(ln, text) for ln, text in _settings_to_highest(tree, name)] if tree is not None and name else []
    return sorted(set(out))


def _settings_to_highest(tree: ast.Module, name: str) -> list[tuple[int, str]]:
    """Where a setting `name` given to `set_float32_matmul_precision` gets "highest": a config
    class's field (`matmul_precision: str = "highest"`) or an assignment of it; the line to change
    before the call passing it on."""
    statements = {n.lineno: n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))}
    highest = setting_lines(tree, {name}, lambda value: any(
        isinstance(c, ast.Constant) and c.value == "highest" for c in ast.walk(value)))
    return [(ln, ast.unparse(statements[ln])) for ln in highest if ln in statements]
