"""Rules on the host ops of the steps: one dominant op, thousands of tiny ones, float64 data,
a convolution bias that BatchNorm cancels."""

from __future__ import annotations

from ...model.analysis import CodeSite as CodeSiteRecord
from ...model.analysis import ConvBiasBn, Dispatch, OpRow
from ...model.base import Record
from ...model.findings import Finding
from ..facts import Facts, where_of
from ..rule import DOCS, Rule, register


class OpHotspotEvidence(Record):
    self_us: float
    count: int
    mean_us: float
    share: float
    """The op's self time over the window."""
    time_lost_is: str
    shapes: list[str | None] = []
    """Its most frequent input shapes (when recorded)."""


@register
class OpHotspot(Rule[OpHotspotEvidence]):
    """One operator dominates the steady state. It says where the time goes, not why: a clean
    model's main op (a convolution, a matmul) legitimately dominates. So it is `medium` at most,
    and ranks after a finding of equal severity that names a cause (`ranking.GENERIC_KINDS`).

    Time lost: the op's self time, an upper bound (what removing the op entirely would save)."""

    kind = "op_hotspot"
    summary = "One operator takes a large share of the steps (where the time goes; a cheaper op or size may do)."
    docs = DOCS["profiler"]
    evidence_type = OpHotspotEvidence
    MIN_SHARE = 0.20
    """One operator taking a fifth of the steady state is the place to look first."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.ops.by_name or facts.window_s <= 0:
            return []
        top = a.ops.by_name[0]
        share = top.self_us / 1e6 / facts.window_s
        if share < self.MIN_SHARE:
            return []
        lost = top.self_us / 1e6
        ev = OpHotspotEvidence(self_us=top.self_us, count=top.count, mean_us=top.mean_us, share=share,
                               time_lost_is="upper bound (the op's whole self time)",
                               shapes=[s.shapes for s in a.ops.by_shape if s.name == top.name][:3])
        return [self.finding(ev, title=f"{top.name} takes {100 * share:.0f}% of the profiled time ({top.count} calls)",
                             lost_s=lost, pct=facts.pct(lost), severity="medium",
                             where=facts.lines_for_ops({top.name}), ops=[top.name])]

    def fix(self, evidence: OpHotspotEvidence) -> str:
        return ("Check whether this op is needed at this size and precision: reduce its input, "
                "batch its calls, or use a cheaper equivalent; it dominates the step.")


@register
class DispatchOverhead(Rule[Dispatch]):
    """Thousands of tiny ops per step: the per-op cost of eager PyTorch (Python, dispatcher,
    allocator: ~5-15 µs an op) exceeds the arithmetic.

    Time lost: `FUSED_SAVING` of the tiny ops' wall time (fusing or batching them recovers most,
    not all, of the per-op cost)."""

    kind = "dispatch_overhead"
    summary = "Many tiny ops per step: per-op overhead costs more than the arithmetic."
    docs = DOCS["tuning"]
    evidence_type = Dispatch
    MIN_SHARE = 0.30
    """When a third of the window goes to ops under 20 µs, per-op overhead (Python, dispatcher,
    allocator) costs more than the arithmetic."""
    MIN_OPS_PER_STEP = 200
    """Fewer ops per step are too few for their overhead to add up, whatever their size."""
    FUSED_SAVING = 0.7
    """Fusing recovers most, not all, of the per-op cost."""
    NAMED_OPS = 5
    """The top ops by self time named in the finding (and whose lines are shown)."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a:
            return []
        d = a.ops.dispatch
        if d.tiny_share < self.MIN_SHARE or d.ops_per_step < self.MIN_OPS_PER_STEP:
            return []
        lost = d.tiny_us / 1e6 * self.FUSED_SAVING
        names = {o.name for o in a.ops.by_name[: self.NAMED_OPS]}
        return [self.finding(d, title=f"{d.ops_per_step:.0f} small ops per step: per-op overhead dominates",
                             lost_s=lost, pct=facts.pct(lost), where=facts.lines_for_ops(names), ops=sorted(names))]

    def fix(self, evidence: Dispatch) -> str:
        return ("Batch the work into fewer, larger tensor ops (vectorise loops over elements/rows), "
                "use torch._foreach_* for lists of tensors, or torch.compile the step to fuse them.")


class Float64Evidence(Record):
    float64_self_s: float
    """Self time of the ops with a float64 tensor input."""
    ops: list[OpRow] = []
    where: list[CodeSiteRecord] = []
    """The user's lines that ran those very ops, when the trace places them."""


@register
class DtypeFloat64(Rule[Float64Evidence]):
    """Ops run on float64 (double) tensors, mostly by accident: NumPy arrays default to float64,
    and torch.from_numpy keeps it. float64 halves the throughput of CPU vector units (and is
    many times slower on GPUs), doubles memory and bandwidth.

    Time lost: half the float64 ops' self time (what float32 would take on a CPU)."""

    kind = "dtype_float64"
    summary = "Ops run on float64 tensors (often NumPy's default dtype carried into torch)."
    docs = DOCS["tuning"]
    evidence_type = Float64Evidence
    MIN_SHARE = 0.05
    """float64 work costs 2x float32 (and much more on GPUs); 5 % of the window is worth a cast."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.ops.float64.recorded:
            return []
        f = a.ops.float64
        s = f.self_us / 1e6
        if facts.window_s <= 0 or s / facts.window_s < self.MIN_SHARE:
            return []
        names = {o.name for o in f.ops}
        lost = s / 2
        # The lines that ran these very ops when the trace places them; else every line
        # running ops of these names (live runs' samples), float64 or not.
        where = where_of(f.where) or facts.lines_for_ops(names)
        return [self.finding(Float64Evidence(float64_self_s=s, ops=f.ops[:5], where=f.where),
                             title=f"float64 (double) tensors in {len(names)} op(s): "
                                   f"{100 * s / facts.window_s:.0f}% of the time",
                             lost_s=lost, pct=facts.pct(lost), where=where, ops=sorted(names))]

    def fix(self, evidence: Float64Evidence) -> str:
        return ("Create these tensors as float32 (NumPy arrays default to float64: "
                "torch.from_numpy(x).float(), or dtype=torch.float32).")


@register
class ConvBiasBeforeBatchNorm(Rule[ConvBiasBn]):
    """A convolution with `bias=True` feeding straight into BatchNorm (torch's profiler pattern
    `Conv2dBiasFollowedByBatchNorm2dPattern`, the performance tuning guide's "disable bias for
    convolutions directly followed by a batch norm"): BatchNorm subtracts the channel mean, so
    the bias cancels out. Time lost: not measurable from a trace (the bias add is fused into
    the convolution); reported as `low` with the number of such convolutions."""

    kind = "conv_bias_bn"
    summary = "A convolution's bias is computed and then cancelled by the BatchNorm right after it."
    docs = DOCS["tuning"]
    evidence_type = ConvBiasBn

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        pairs = a.ops.conv_bias_bn if a else None
        if not pairs or not pairs.pairs:
            return []
        per_step = pairs.pairs / max(facts.steps, 1)
        return [self.finding(pairs, title=f"{pairs.pairs} convolution call(s) with bias=True feed straight into "
                                          f"BatchNorm ({per_step:.0f} per step): the bias is computed and cancelled",
                             lost_s=0.0, pct=0.0, severity="low",
                             where=facts.lines_for_ops({"aten::conv1d", "aten::conv2d", "aten::conv3d"}),
                             ops=["aten::conv2d", "aten::batch_norm"])]

    def fix(self, evidence: ConvBiasBn) -> str:
        return ("Create those convolutions with bias=False (nn.Conv2d(..., bias=False)) when a BatchNorm "
                "follows: BatchNorm's own shift (beta) replaces it; the output does not change.")
