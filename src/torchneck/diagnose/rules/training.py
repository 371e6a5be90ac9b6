"""Rules on how the loop is driven: data loading, the optimizer, zeroing gradients, autograd
left on in inference."""

from __future__ import annotations

from typing import Any

from ...model.analysis import Annotation, OpRow
from ...model.base import Record
from ...model.findings import Finding
from ..facts import Facts, where_of
from ..rule import DOCS, Explanation, Rule, register


class InputPipelineEvidence(Record):
    dataloader_s: float
    """Time the steps spent waiting in DataLoader iteration (the step breakdown's `dataloader`)."""
    window_s: float


@register
class InputPipeline(Rule[InputPipelineEvidence]):
    """The steps wait for the DataLoader: loading, decoding or collating in the main process
    (num_workers=0), or workers too few or too slow.

    Time lost: the steps' time inside DataLoader iteration (what parallel loading that keeps up
    would hide)."""

    kind = "input_pipeline"
    summary = "The steps wait for the DataLoader (loading or per-sample work in the main process)."
    docs = DOCS["dataloader"]
    evidence_type = InputPipelineEvidence
    confidence = "measured"
    saving_basis = "the steps' time inside DataLoader iteration (what loading that keeps up would hide)"
    explains = ("gpu_idle", "launch_bound", "python_hotspot")
    MIN_SHARE = 0.10
    """Waiting 10 % of the step for data is recoverable with loader workers."""
    LINES_SHOWN = 3
    """The sampled lines inside DataLoader iteration named as where the loading time goes."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or facts.window_s <= 0:
            return []
        dl = a.steps.breakdown_total_us.get("dataloader", 0.0) / 1e6
        if dl / facts.window_s < self.MIN_SHARE:
            return []
        loading = (facts.python or {}).get("loading") or {}
        return [self.finding(InputPipelineEvidence(dataloader_s=dl, window_s=facts.window_s),
                             title=f"Waiting for the DataLoader takes {100 * dl / facts.window_s:.0f}% of each step",
                             lost_s=dl, pct=facts.pct(dl), where=where_of(loading.get("lines", [])[: self.LINES_SHOWN]),
                             ops=[n.name for n in a.ops.annotations if "DataLoader" in n.name][:2])]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """While the host waits for the next batch, it launches nothing: the GPU idles as long. A
        Python hotspot on a line the loader runs (the Dataset's code) is that same wait."""
        if symptom.kind == "python_hotspot":
            loading = {(w.file, w.line) for w in cause.where}
            inside = any((w.file, w.line) in loading for w in symptom.where)
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s)) if inside else None
        return Explanation(min(cause.time_lost_s, symptom.time_lost_s))

    def fix(self, evidence: InputPipelineEvidence) -> str:
        return ("Load data in parallel: DataLoader(num_workers=N, persistent_workers=True, "
                "pin_memory=True on GPU); move per-sample Python work into the workers.")


class OptimizerEvidence(Record):
    optimizer_step_s: float
    expected_saving: float
    optimizers: list[dict[str, Any]] = []
    """The optimizers' constructor calls (file, line, class, parameter count, foreach/fused)."""


@register
class SingleTensorOptimizer(Rule[OptimizerEvidence]):
    """An optimizer running its per-parameter for-loop (`foreach=False`, the default on CPU)
    over many parameters, when its step is a large part of the window.

    Time lost: `FOREACH_SAVING` of the time inside `Optimizer.step` (from the trace)."""

    kind = "optimizer"
    summary = "The optimizer updates one parameter tensor at a time (single-tensor implementation)."
    docs = DOCS["optim"]
    evidence_type = OptimizerEvidence
    saving_basis = "45% of the time in Optimizer.step (foreach=True measured against the for-loop)"
    MIN_SHARE = 0.15
    """An optimizer step under 15 % of the window is not worth changing."""
    MIN_PARAMS = 20
    """With a handful of parameter tensors the loop is short; foreach gains little."""
    FOREACH_SAVING = 0.45
    """Measured here: Adam over 300 small tensors, 11 ms per step single-tensor, 5.9 ms with
    foreach=True (CPU, 1 thread); on GPUs the gain is larger."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or facts.window_s <= 0:
            return []
        steps = [n for n in a.ops.annotations if n.name.startswith("Optimizer.step#")]
        if not steps:
            return []
        step_s = sum(n.total_us for n in steps) / 1e6
        if step_s / facts.window_s < self.MIN_SHARE:
            return []
        if any(o.name.startswith(("aten::_foreach", "aten::_fused")) for o in a.ops.by_name):
            return []  # already multi-tensor
        sites = [c for c in facts.sites_of("optimizer") if not c.get("foreach") and not c.get("fused")]
        if facts.call_sites and not any(c.get("params", 0) >= self.MIN_PARAMS for c in sites):
            return []
        lost = step_s * self.FOREACH_SAVING
        names = sorted({n.name.split("#", 1)[1].rsplit(".", 1)[0] for n in steps})
        return [self.finding(
            OptimizerEvidence(optimizer_step_s=step_s, optimizers=sites[:3], expected_saving=self.FOREACH_SAVING),
            title=f"{', '.join(names)} steps take {100 * step_s / facts.window_s:.0f}% of the time, one "
                  "parameter tensor at a time (single-tensor implementation)",
            lost_s=lost, pct=facts.pct(lost), where=where_of(sites[:3]), ops=[n.name for n in steps])]

    def fix(self, evidence: OptimizerEvidence) -> str:
        return ("Pass foreach=True to the optimizer (one kernel per op for all parameters), or "
                "fused=True where supported (Adam/AdamW/SGD on CUDA and CPU).")


class ZeroGradEvidence(Record):
    zero_grad_spans: list[Annotation] = []
    fill_ops: list[OpRow] = []


@register
class ZeroGradKernels(Rule[ZeroGradEvidence]):
    """`optimizer.zero_grad(set_to_none=False)` (or `model.zero_grad()` on torch < 2.0) launches a
    fill per parameter every step; setting gradients to None costs nothing and lets the next
    backward write them directly.

    Time lost: the self time of `aten::zero_` / `aten::fill_` in the window when the trace has
    `Optimizer.zero_grad` spans (the fills run inside them)."""

    kind = "zero_grad"
    summary = "Gradients are zeroed with fills every step instead of being set to None."
    docs = DOCS["zero_grad"]
    evidence_type = ZeroGradEvidence
    confidence = "measured"
    saving_basis = "the fills' self time inside Optimizer.zero_grad (None costs nothing)"
    MIN_SHARE = 0.03
    """Zeroing is pure overhead: 3 % of the window is worth a keyword argument."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or facts.window_s <= 0:
            return []
        spans = [x for x in a.ops.annotations if x.name.startswith("Optimizer.zero_grad")]
        if not spans:
            return []
        fills = [o for o in a.ops.by_name if o.name in ("aten::zero_", "aten::fill_")]
        time_s = min(sum(o.self_us for o in fills), sum(x.total_us for x in spans)) / 1e6
        share = time_s / facts.window_s
        if share < self.MIN_SHARE:
            return []
        return [self.finding(ZeroGradEvidence(zero_grad_spans=spans, fill_ops=fills),
                             title=f"Zeroing gradients takes {100 * share:.0f}% of the profiled time "
                                   f"({sum(x.count for x in spans)} zero_grad calls)",
                             lost_s=time_s, pct=100 * share, ops=[o.name for o in fills],
                             where=where_of(facts.sites_of("optimizer")[:1]))]

    def fix(self, evidence: ZeroGradEvidence) -> str:
        return ("Call optimizer.zero_grad(set_to_none=True) (the default since PyTorch 2.0; "
                "do not pass set_to_none=False), or model.zero_grad(set_to_none=True).")


class AutogradInInferenceEvidence(Record):
    model_calls: int
    outputs_with_grad: int
    backward_in_trace: bool
    estimated_overhead: float


@register
class AutogradInInference(Rule[AutogradInInferenceEvidence]):
    """Forward passes that record autograd graphs nobody uses: the steps are calls of a model
    (no optimizer step), their outputs carry a `grad_fn`, and the trace has no backward.

    Time lost: `AUTOGRAD_OVERHEAD` of the time the model calls take (recording the graph and
    keeping activations alive), an estimate: the trace cannot separate it from the ops. The model
    calls' time is the self time of the ops run at the model-call line (the line the capture saw
    call the top-level module) when the trace places ops at lines, else the whole window."""

    kind = "autograd_in_inference"
    summary = "Inference records autograd graphs that no backward uses (no inference_mode / no_grad)."
    docs = DOCS["inference_mode"]
    evidence_type = AutogradInInferenceEvidence
    saving_basis = ("10% of the model calls' time (recording graphs and keeping activations, measured on a "
                    "typical MLP)")
    MIN_GRAD_SHARE = 0.5
    """Most model calls must have built a graph (one stray call is not a pattern)."""
    AUTOGRAD_OVERHEAD = 0.10
    """Measured here: an 8-layer Linear+GELU stack, 64x256 inputs, 1 thread: 0.28-0.31 s per
    200 calls with grad, 0.264 s under inference_mode (7-15 %); more for small ops."""

    def check(self, facts: Facts) -> list[Finding]:
        calls = facts.clock.get("top_module_calls") or 0
        with_grad = facts.clock.get("top_module_outputs_with_grad") or 0
        if not calls or with_grad / calls < self.MIN_GRAD_SHARE or facts.clock.get("kind") != "module":
            return []
        a = facts.analysis
        if not a or facts.window_s <= 0:
            return []
        names = [o.name for o in a.ops.by_name] + [n.name for n in a.ops.annotations]
        if any("evaluate_function" in n or "Backward" in n for n in names):
            return []  # a backward ran: this is training
        # The line that called the model, counted by the capture's module hook; runs of older
        # versions: the hottest sampled line, or the line that ran the most ops (exact, from the
        # line spans) when the window ended between two samples.
        sites = facts.clock.get("top_module_sites") or []
        lines = (facts.python or {}).get("window", {}).get("lines", [])[:1]
        where = where_of(sites[:1]) or where_of(lines) or facts.lines_for_ops(None, limit=1)
        at = {(w.file, w.line) for w in where}
        in_calls = sum(e["self_us"] for e in facts.ops_by_line if (e.get("file"), e.get("line")) in at) / 1e6
        lost = (in_calls or facts.window_s) * self.AUTOGRAD_OVERHEAD
        return [self.finding(AutogradInInferenceEvidence(model_calls=calls, outputs_with_grad=with_grad,
                                                         backward_in_trace=False,
                                                         estimated_overhead=self.AUTOGRAD_OVERHEAD),
                             title=f"{with_grad} of {calls} model calls built an autograd graph that no backward used",
                             lost_s=lost, pct=facts.pct(lost), where=where)]

    def fix(self, evidence: AutogradInInferenceEvidence) -> str:
        return ("Run inference under `with torch.inference_mode():` (or torch.no_grad()); model.eval() "
                "alone does not turn autograd off.")
