"""Rules on the data types of the steps' tensors: float64 data where float32 would do (NumPy's
default carried into torch, a dtype constant, `set_default_dtype`)."""

from __future__ import annotations

from typing import Any

from ...model.analysis import CodeSite as CodeSiteRecord
from ...model.analysis import OpRow
from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts, where_of
from ..idioms import float64_conversions, float64_dtype_constant
from ..rule import DOCS, Explanation, Rule, register
from ..source import argument_origin, function_at
from .ops_evidence import IDIOM_FIELDS


class Float64Evidence(Record):
    float64_self_s: float
    """Self time of the ops with a float64 tensor input."""
    ops: list[OpRow] = []
    where: list[CodeSiteRecord] = []
    """The user's lines that ran those very ops, when the trace places them."""
    sources: list[dict[str, Any]] = []
    """Where float64 entered torch (capture/callsites.py): `torch.set_default_dtype(torch.float64)`,
    `torch.from_numpy` of a float64 array; the lines to change."""
    conversion_line: int | None = None
    """Else the line converting a model or tensor to float64 (`model.to(dtype=torch.float64)`)."""


@register
class DtypeFloat64(Rule[Float64Evidence]):
    """Ops run on float64 (double) tensors, mostly by accident: NumPy arrays default to float64,
    and torch.from_numpy keeps it. float64 halves the throughput of CPU vector units (and is
    many times slower on GPUs), doubles memory and bandwidth.

    Time lost: half the float64 ops' self time (what float32 would take on a CPU:
    `benchmarks/float64_cost.py` measures the share float32 saves over 8 ops from inside the L2
    cache to 128 MB, median 0.52, 0.27-0.73 on this project's 2-core VM, the most where the
    float32 copy fits a cache the float64 one does not); on a GPU, when more, half their
    kernels' time and `CONV_GPU_SAVING` of their convolutions' kernels' time."""

    kind = "dtype_float64"
    summary = "Ops run on float64 tensors (often NumPy's default dtype carried into torch)."
    docs = DOCS["tuning"]
    evidence_type = Float64Evidence
    saving_basis = ("half the self time of the ops with float64 tensor inputs (float32 runs twice as fast); on a GPU, "
                    "half their kernels' time, three quarters of their convolutions' (TF32 Tensor Cores in float32)")
    explains = ("op_hotspot",)
    MIN_SHARE = 0.05
    """float64 work costs 2x float32 (and much more on GPUs); 5 % of the window is worth a cast."""
    CONV_GPU_SAVING = 0.75
    """A float64 convolution runs on CUDA cores (cuDNN has no Tensor Core kernels for it) while a
    float32 one runs on TF32 Tensor Cores (`torch.backends.cudnn.allow_tf32`, on by default):
    4x at least on an A100 or H100, so three quarters of its kernels' time go. Other kernels move
    twice the bytes (half goes); a float64 matmul keeps FP64 Tensor Cores, as fast as float32
    without TF32, so it counts as the others, an upper bound for it."""
    SOURCES_SHOWN = 2
    """The places float64 entered torch named first: more are listed in the evidence's order."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.ops.float64.recorded:
            return []
        f = a.ops.float64
        s = f.self_us / 1e6
        gpu_s = f.kernel_us / 1e6
        gpu_lost = (self.CONV_GPU_SAVING * f.conv_kernel_us + 0.5 * (f.kernel_us - f.conv_kernel_us)) / 1e6
        if facts.window_s <= 0 or max(s, gpu_s) / facts.window_s < self.MIN_SHARE:
            return []
        names = {o.name for o in f.ops}
        lost = min(max(s / 2, gpu_lost), facts.window_s)
        # Where float64 entered torch (the default dtype first: it makes every tensor float64),
        # then the lines that ran these very ops when the trace places them; else every line
        # running ops of these names (live runs' samples), float64 or not.
        sources = sorted(facts.sites_of("float64_source"), key=lambda c: c.get("how") != "set_default_dtype")
        sources = sources[: self.SOURCES_SHOWN]
        ran = where_of(f.where) or facts.lines_for_ops(names)
        entered = []
        for w in where_of(sources):  # the NumPy array made float64 before torch.from_numpy took it
            made = argument_origin(w.file, w.line, "from_numpy")
            entered += [Where(file=w.file, line=made, function=w.function)] if made else []
            entered.append(w)
        for file in dict.fromkeys(w.file for w in ran):  # `DTYPE = torch.float64` passed as dtype=DTYPE
            chosen = float64_dtype_constant(file)
            if chosen is not None and all((w.file, w.line) != (file, chosen) for w in entered):
                entered.insert(0, Where(file=file, line=chosen, function="<module>"))
        # a model converted to float64 (`net = net.double()`): its inputs are converted to its dtype
        # (`x.to(param.dtype)`), so the conversion comes before the data's own entry; after the
        # default dtype, which makes the model float64 in the first place
        files = dict.fromkeys(w.file for w in ran)
        converted = [Where(file=file, line=line, function=function_at(file, line))
                     for file in files for line in float64_conversions(file)][: self.SOURCES_SHOWN]
        by_default = any(c.get("how") == "set_default_dtype" for c in sources)
        conversion = converted[0].line if converted and not by_default else None
        if conversion is not None:
            entered = converted + [w for w in entered if (w.file, w.line) not in {(c.file, c.line) for c in converted}]
        at = {(w.file, w.line) for w in entered}
        where = entered + [w for w in ran if (w.file, w.line) not in at]
        return [self.finding(Float64Evidence(float64_self_s=s, ops=f.ops[:5], where=f.where, sources=sources,
                                             conversion_line=conversion),
                             title=f"float64 (double) tensors in {len(names)} op(s): "
                                   f"{100 * min(max(s, gpu_s) / facts.window_s, 1.0):.0f}% of the "
                                   f"{'GPU ' if gpu_s > s else ''}time",
                             lost_s=lost, pct=facts.pct(lost), where=where, ops=sorted(names))]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """A dominant op that runs on float64 data is slow because of its dtype, unless the op
        names a slow way of getting its result (`IDIOM_FIELDS`): a cause of its own, whose fix
        saves its time in either dtype."""
        if not set(symptom.ops) & set(cause.ops) or any(symptom.evidence.get(k) for k in IDIOM_FIELDS):
            return None
        return Explanation(min(symptom.time_lost_s, cause.evidence.get("float64_self_s", 0.0)))

    def fix(self, evidence: Float64Evidence) -> str:
        if any(c.get("how") == "set_default_dtype" for c in evidence.sources):
            return ("Remove torch.set_default_dtype(torch.float64) (every new tensor and parameter becomes "
                    "float64): keep float32, and use float64 only where the precision is needed.")
        if evidence.conversion_line is not None:
            return (f"Keep float32: drop the conversion to float64 at line {evidence.conversion_line} (a model "
                    "converted so runs its whole forward in float64), and use float64 only where the precision "
                    "is needed.")
        return ("Create these tensors as float32 (NumPy arrays default to float64: "
                "torch.from_numpy(x).float(), or dtype=torch.float32).")
