"""A tensor rebuilt on every pass of a loop: concatenated onto itself, or allocated and filled
again, read from the sampled steady state (split from ops.py)."""

from __future__ import annotations

from ...model.base import Record
from ...model.findings import Finding
from ..facts import Facts, where_of
from ..rule import DOCS, Explanation, Rule, register
from ..source import in_loop, rebuilt_tensor
from .growth import growth_removed


class RebuiltTensorEvidence(Record):
    pattern: str
    """"grows" (a concatenation fed its own result) or "allocates" (a torch.zeros/ones/empty/full)."""
    line_total_s: float
    """Sampled seconds on the line over the steady state, its torch ops included."""
    sampled_s: float
    """All sampled seconds of the steady state."""
    growth_share: float = 0.0
    """Of the mean step after the window, the steps' growth the lines hold, with their first steps'
    time (`growth_removed`; 0 when the steps did not grow)."""


@register
class RebuiltTensor(Rule[RebuiltTensorEvidence]):
    """A line that runs again and again (in a loop, or in a function called from one) rebuilds a
    tensor it could keep: `x = torch.cat([x, y])` copies everything gathered so far on every pass
    (quadratic), `buf = torch.zeros(...)` allocates and fills a buffer on every call. Read from
    the sampled steady state, not the trace: a profiled window of a few early steps sees the
    concatenation while it is still small, or a window inside one request misses the allocation.

    Time lost: the line's sampled share of the steady state (its ops included) applied to the
    window: what keeping the tensor saves at most (one final concatenation, or one fill of the
    part used, remains). A tensor concatenated onto makes the steps grow: when the lines hold
    that growth, all of it goes, with their first steps' time (`growth_removed`), if more."""

    kind = "rebuilt_tensor"
    explains = ("python_hotspot", "op_hotspot", "dispatch_overhead", "step_time_growth", "periodic_work")
    summary = "A loop rebuilds a tensor every pass: torch.cat onto a growing tensor, a buffer allocated per call."
    docs = DOCS["tuning"]
    evidence_type = RebuiltTensorEvidence
    confidence = "upper_bound"
    saving_basis = "the line's sampled time over the steady state, its ops included (keeping the tensor saves most)"
    MIN_SHARE = 0.10
    """As python_hotspot's: a line taking a tenth of the steady state is worth changing."""
    MIN_SAMPLED_S = 0.01
    """As python_hotspot's: ten samples of the 1 ms sampler, fewer do not tell a line from its neighbours."""
    LINES_READ = 12
    """The top sampled lines read: several lines of one function, each under MIN_SHARE, may
    together pass it."""

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """Another finding on the rebuilding line itself (its Python, its copy ops) is part of the
        line's time, which this cost already counts; a Python hotspot of the loop around it (the
        loop's header, its body lines) holds it too, all but the header's own time."""
        at = (cause.where[0].file, cause.where[0].line) if cause.where else None
        if not symptom.where or at is None:
            return None
        rebuilding = {(w.file, w.line) for w in cause.where if w.function == cause.where[0].function}
        if (symptom.where[0].file, symptom.where[0].line) in rebuilding:  # one of the rebuilding lines
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s))
        if symptom.kind == "python_hotspot" and at in {(w.file, w.line) for w in symptom.where[1:]}:
            sampled = symptom.evidence.get("sampled_s") or 0.0
            header = (symptom.evidence.get("line_total_s") or 0.0) / sampled * facts.window_s if sampled > 0 else 0.0
            return Explanation(max(0.0, min(symptom.time_lost_s - header, cause.time_lost_s)))
        return None

    def check(self, facts: Facts) -> list[Finding]:
        win = (facts.python or {}).get("window") or {}
        total = win.get("sampled_s") or 0.0
        if total <= 0 or facts.window_s <= 0:
            return []
        # the lines of one function rebuilding tensors the same way are one change (a replay buffer
        # concatenating each of its five fields onto its store: five lines, one buffer)
        groups: dict[tuple[str, str, str], list[dict]] = {}
        for line in win.get("lines", [])[: self.LINES_READ]:
            if (line.get("total_s") or 0.0) < self.MIN_SAMPLED_S:
                continue
            pattern = rebuilt_tensor(line["file"], line["line"])
            callers = line.get("callers") or []
            if pattern is None or not (in_loop(line["file"], line["line"])
                                       or any(in_loop(c["file"], c["line"]) for c in callers)):
                continue  # runs once: nothing to keep between passes
            groups.setdefault((line["file"], line.get("function") or "", pattern), []).append(line)
        out = []
        for (_, function, pattern), lines in groups.items():
            seconds = sum(ln["total_s"] for ln in lines)
            if seconds < self.MIN_SHARE * total:
                continue
            lines.sort(key=lambda ln: ln["line"])
            grown = growth_removed(facts, {(ln["file"], ln["line"]) for ln in lines}) if pattern == "grows" else 0.0
            share = max(seconds / total, grown)  # the steps' growth goes with it, as the step clock measures it
            lost = share * facts.window_s
            what = ("concatenates onto a growing tensor on every pass" if pattern == "grows"
                    else "allocates a new tensor on every call")
            at = f"line {lines[0]['line']}" if len(lines) == 1 else \
                f"lines {', '.join(str(ln['line']) for ln in lines)}"
            callers = lines[0].get("callers") or []
            title = f"{function}() {what}: {100 * share:.0f}% of the steady state at {at}"
            if grown > seconds / total:
                title = (f"{function}() {what} at {at}: the steps grow with it, {100 * share:.0f}% of the "
                         "steady state")
            out.append(self.finding(
                RebuiltTensorEvidence(pattern=pattern, line_total_s=seconds, sampled_s=total, growth_share=grown),
                title=title,
                lost_s=lost, pct=facts.pct(lost), where=where_of([*lines, *callers])))
        return out

    def fix(self, evidence: RebuiltTensorEvidence) -> str:
        if evidence.pattern == "grows":
            return ("Collect the pieces in a list and call torch.cat once after the loop, or preallocate the "
                    "full tensor and write each piece into its slice (out[i:i + n] = piece): torch.cat in a loop "
                    "copies everything gathered so far on every pass, quadratic in the result's size.")
        return ("Allocate the buffer once (outside the loop, or in __init__) and reuse it, resetting only the "
                "part each call uses (buf[:, :n].zero_(), or overwrite it): a new tensor per call pays the "
                "allocation and the fill of all of it every time, however little is used.")
