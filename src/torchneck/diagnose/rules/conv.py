"""A convolution's bias computed and then cancelled by the BatchNorm right after it (torch's
profiler pattern `Conv2dBiasFollowedByBatchNorm2dPattern`)."""

from __future__ import annotations

from ...model.analysis import ConvBiasBn
from ...model.findings import Finding
from ..facts import Facts
from ..rule import DOCS, Rule, register


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
    confidence = "unmeasured"
    saving_basis = "not measurable from a trace (the bias add is fused into the convolution)"

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
