"""Rules on the user's `record_function` labels: the part of the program the user named."""

from __future__ import annotations

from ...model.analysis import Label
from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts
from ..rule import DOCS, Explanation, Rule, register

HOST_READS = {"aten::item": ".item()", "aten::_local_scalar_dense": ".item()", "aten::to": ".to()/.cpu()",
              "aten::_to_copy": ".to()/.cpu()", "aten::cpu": ".cpu()"}
"""Ops under a label that bring a tensor's data to the host (a copy off the device, a value read
as a Python number): what host work after them, NumPy on the copy, starts from. On a GPU they
also wait for the device (a sync)."""


class LabelOutsideOpsEvidence(Record):
    label: str
    count: int
    """Instances of the label in the window."""
    share: float
    """The label's time over the window, in %."""
    outside_ops_pct: float
    """Of the label's time, the part no torch op covers, in %."""
    outside_ops_s: float
    """That time, less torch work on the process's other threads meanwhile (a wait on them)."""
    host_reads: list[str] = []
    """The ops under it that bring data to the host (aten::item, aten::to...)."""
    calls: list[str] = []
    """The calls under it outside torch ops, with their share of that time (`with_stack` traces)."""
    numpy: bool = False
    """The largest of those calls is NumPy's."""


@register
class LabelOutsideOps(Rule[LabelOutsideOpsEvidence]):
    """A `record_function` label covers a large share of the profiled time and most of it is
    outside torch ops: Python, NumPy or another library working on data brought to the host
    (`.item()`, `.cpu()`), or a wait. The label says where, in the user's own name for that part
    of the program; the ops under it say what starts the host work, and with `with_stack` the
    trace's Python events name the calls that take it (the PyTorch profiler tutorial's
    "MASK INDICES": NumPy's `argwhere` on a float64 mask copied off the device).

    A trace alone only: a `torchneck run` samples the Python, and `python_hotspot` names the
    very line measured the same way (it names the label it ran under). Labels open while a
    backward pass runs are left out: their thread waits for autograd's threads, whose ops a
    filtered trace may lack. Of nested labels the innermost that explains the time is named.

    Time lost: the label's time outside torch ops, less torch work on the process's other
    threads meanwhile: an upper bound of what doing the work with torch ops saves (they take
    some time too)."""

    kind = "label_outside_ops"
    summary = "A record_function label takes much of the time, mostly outside torch ops (Python, NumPy, waits)."
    docs = DOCS["profiler"]
    evidence_type = LabelOutsideOpsEvidence
    confidence = "upper_bound"
    saving_basis = "the label's time outside torch ops (the most moving that work into torch ops could save)"
    explains = ("gpu_idle", "launch_bound")
    MIN_SHARE = 0.10
    """Time outside torch ops under one label taking a tenth of the window is worth moving into
    tensor ops (the threshold `python_hotspot` uses for one line)."""
    MOSTLY_OUTSIDE = 0.5
    """And at least half of the label's time: otherwise the label is mostly torch's work, which
    the rules on ops judge."""
    MIN_OUTSIDE_S = 0.001
    """And at least a millisecond: less is the order of the profiler's own cost of opening and
    closing labels and tracing Python calls."""
    CALL_SHARE = 1.0
    """Calls taking less than 1 % of the label's time outside ops are not listed."""
    INNER_EXPLAINS = 0.5
    """A label is not named when labels nested in it that fire hold half its time outside ops:
    the inner one says where more precisely (the rest of it is judged on its own)."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        window = facts.window_s
        if a is None or not a.labels or window <= 0:
            return []
        if facts.python and (facts.python.get("window") or {}).get("sampled_s", 0) > 0:
            return []  # sampled: python_hotspot measures this time line by line
        net = {lab.name: self._outside_s(lab) for lab in a.labels}
        firing = {lab.name for lab in a.labels if self._fires(lab, net[lab.name], window)}
        out = []
        for lab in a.labels:
            if lab.name not in firing:
                continue
            inner = sum(net[o.name] for o in a.labels if o.inside == lab.name and o.name in firing)
            if inner >= self.INNER_EXPLAINS * net[lab.name]:
                continue
            lost = net[lab.name] - inner
            if not self._fires(lab, lost, window):
                continue
            out.append(self._finding(lab, lost, facts))
        return out

    def _outside_s(self, lab: Label) -> float:
        return max(lab.outside_ops_us - lab.other_threads_us, 0.0) / 1e6

    def _fires(self, lab: Label, outside_s: float, window: float) -> bool:
        return (not lab.runs_backward and outside_s >= self.MIN_SHARE * window and outside_s >= self.MIN_OUTSIDE_S
                and outside_s * 1e6 >= self.MOSTLY_OUTSIDE * lab.total_us)

    def _finding(self, lab: Label, lost: float, facts: Facts) -> Finding:
        names = {o.name for o in lab.top_ops}
        reads = sorted({HOST_READS[n] for n in names if n in HOST_READS}, key=list(HOST_READS.values()).index)
        read_ops = [n for n in HOST_READS if n in names]
        calls = [f"{c.name} ({c.file.split('/')[0] or 'built-in'}) {c.share:.0f} %" for c in lab.calls
                 if c.share >= self.CALL_SHARE]
        ev = LabelOutsideOpsEvidence(label=lab.name, count=lab.count, share=lab.pct,
                                     outside_ops_pct=lab.outside_ops_pct, outside_ops_s=lost, host_reads=read_ops,
                                     calls=calls, numpy=bool(lab.calls) and lab.calls[0].file.startswith("numpy"))
        # Shares truncated, not rounded: 99.5 % outside ops is not "100 %", which would say no op ran.
        outside_pct = int(100 * lost / (lab.total_us / 1e6))
        title = f"{lab.name}: {int(lab.pct)} % of the time, {outside_pct} % of it outside torch ops"
        if lab.calls and lab.calls[0].share >= 100 * self.MOSTLY_OUTSIDE:
            top = lab.calls[0]
            library = top.file.split("/")[0].removesuffix(".py")
            title += f" in {library + ' ' if library else ''}{top.name} ({int(top.share)} %)"
        if reads:
            title += f", after {' and '.join(f'`{r}`' for r in reads)} brought data to the host"
        where: list[Where] = []
        for site in ([lab.opened_at] if lab.opened_at else []) + list(lab.where):
            w = Where(file=site.file, line=site.line, function=site.function)
            if w not in where:
                where.append(w)
        if where:
            at = f"{where[0].function}() at " if where[0].function else ""
            title += f" ({at}{where[0].file.rsplit('/', 1)[-1]}:{where[0].line})"
        f = self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost), where=where[:3],
                         ops=sorted(names & set(HOST_READS)))
        f.label = lab.name
        return f

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """While the host works outside torch ops under the label, it launches nothing: the GPU
        idles as long."""
        return Explanation(min(cause.time_lost_s, symptom.time_lost_s))

    def fix(self, evidence: LabelOutsideOpsEvidence) -> str:
        steps = []
        if evidence.numpy or evidence.host_reads:
            steps.append("do this work with torch ops on the tensors where they are (e.g. `(mask > threshold)"
                         ".nonzero()`, torch.argwhere or torch.where instead of NumPy on a `.cpu()` copy)")
        if "aten::item" in evidence.host_reads or "aten::_local_scalar_dense" in evidence.host_reads:
            steps.append("keep values as tensors instead of reading them with `.item()`")
        steps.append("vectorise Python loops into tensor ops, or move the work out of the step; if the time "
                     "is a wait (I/O, a queue, sleep), overlap it with compute (DataLoader workers, a thread)")
        text = "; ".join(steps)
        return f"Under \"{evidence.label}\": {text[0].lower()}{text[1:]}."
