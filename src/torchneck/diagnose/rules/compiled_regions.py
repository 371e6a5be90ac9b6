"""torch.compile as a trace alone shows it, for traces without the run's compile log
(`torchneck analyze`): nested compiled regions mean graph breaks, compile ids recompiles."""

from __future__ import annotations

from ...model.analysis import Compiled, CompiledFrame
from ...model.base import Record
from ...model.findings import Finding
from ..facts import Facts
from ..rule import DOCS, Rule, evidence_dict


class RecompiledFramesEvidence(Record):
    frames: list[CompiledFrame]


class CompiledRegions(Rule[Compiled]):
    """Graph breaks and recompiles as a trace shows them (`Torch-Compiled Region` nesting and
    compile ids). Time lost: the eager time between compiled graphs. Silent when the run's
    compile log is there: compile_rules.py says the same with lines and reasons.

    Not registered on its own: it reports the kinds of compile_rules.py's rules (graph_break,
    recompile) and runs beside them (see diagnose/engine.py)."""

    kind = "graph_break"
    summary = "Graph breaks and recompiles seen in a trace's compiled regions (no compile log)."
    docs = DOCS["compile"]
    evidence_type = Compiled

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.compiled.present or (facts.compile and facts.compile.get("present")):
            return []
        c = a.compiled
        out = []
        if c.nested_region_calls:
            eager = c.eager_top_level_us / 1e6
            out.append(self.finding(c, title=f"Graph breaks: compiled code resumes in {c.nested_region_calls} "
                                             "nested region(s)",
                                    lost_s=eager, pct=facts.pct(eager)))
        recompiled = [f for f in c.frames if f.recompiles_seen > 0]
        if recompiled:
            out.append(Finding(
                kind="recompile", title=f"{len(recompiled)} compiled frame(s) were recompiled in the window",
                time_lost_s=0.0, time_lost_pct=0.0, severity="medium",
                evidence=evidence_dict(RecompiledFramesEvidence(frames=recompiled)), docs=DOCS["compile"],
                fix="Mark changing dimensions dynamic (torch._dynamo.mark_dynamic / dynamic=True) or "
                    "pad inputs to a few fixed shapes."))
        return out

    def fix(self, evidence: Compiled) -> str:
        return ("Run with torch.compile(fullgraph=True) to see the first break, then remove it "
                "(print, .item(), data-dependent if, unsupported call).")
