"""Rules on how the program drives autograd: a backward pass run again through a graph it keeps
(`retain_graph=True`), read from the window's backward nodes (analysis/ops.backward_nodes) and
the user's `.backward()` lines."""

from __future__ import annotations

import ast

from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts
from ..rule import Explanation, Rule, register
from ..source import call_name, enclosing, in_loop, walk_own


class RepeatedBackwardEvidence(Record):
    repeated_nodes: list[str]
    """The node kinds run more often than their forward op (`ConvolutionBackward0`)."""
    node_runs: int
    """Runs of those nodes in the window."""
    forward_calls: int
    """Calls of their forward ops in the window."""
    repeated_us: float
    """Their runs' time beyond one run per forward call: the backward done again."""
    backward_us: float
    """All backward nodes' time in the window."""
    in_loop: bool = False
    """The `.backward(retain_graph=True)` call is inside a loop (a backward per loss)."""


def retains_graph(file: str, line: int) -> bool:
    """True when the statement at `line` calls `.backward(...)` or `torch.autograd.backward` with
    `retain_graph=` given anything but a false constant."""
    path = enclosing(file, line)
    for call in (c for c in walk_own(path[-1]) if isinstance(c, ast.Call)) if path else ():
        if call_name(call) != "backward":
            continue
        for kw in call.keywords:
            if kw.arg == "retain_graph" and not (isinstance(kw.value, ast.Constant) and not kw.value.value):
                return True
    return False


@register
class RepeatedBackward(Rule[RepeatedBackwardEvidence]):
    """A backward pass per loss through a shared part of the graph (`for loss in losses:
    loss.backward(retain_graph=True)`): every backward runs the shared part's nodes again (a
    multi-task trunk differentiated once per head), where one backward of the summed losses runs
    them once (gradients add up the same). Seen in the trace: nodes of a kind run more often than
    the forward op they differentiate was called, at a `.backward()` line that passes
    `retain_graph=True`. A graph differentiated twice on purpose (a gradient penalty, a physics
    loss on `torch.autograd.grad`) passes `create_graph`, not `retain_graph`, to its backward.

    Time lost: of the repeated nodes' time, the share beyond one run per forward call."""

    kind = "repeated_backward"
    summary = "A backward per loss through a shared graph (retain_graph=True) runs its shared part again."
    docs = "https://pytorch.org/docs/stable/generated/torch.Tensor.backward.html"
    evidence_type = RepeatedBackwardEvidence
    saving_basis = "the repeated backward nodes' time beyond one run per call of their forward op"
    explains = ("op_hotspot",)
    MIN_RUNS_PER_CALL = 1.5
    """A node kind run at least this many times per forward call was differentiated again (ops
    of a kind called also under no_grad only lower the ratio)."""
    MIN_SHARE = 0.05
    """The backward done again must be a twentieth of the window."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if a is None or facts.window_s <= 0 or not a.ops.backward_nodes:
            return []
        repeated = [n for n in a.ops.backward_nodes
                    if n.forward_count > 0 and n.count >= self.MIN_RUNS_PER_CALL * n.forward_count]
        again_us = sum(n.total_us * (1.0 - n.forward_count / n.count) for n in repeated)
        if again_us / 1e6 < self.MIN_SHARE * facts.window_s:
            return []
        names = {f"autograd::engine::evaluate_function: {n.node}" for n in repeated}
        lines = [w for w in facts.lines_for_ops(names, limit=4) if retains_graph(w.file, w.line)]
        if not lines:
            return []  # no backward asked to keep its graph: differentiated twice on purpose
        at = lines[0]
        where = [at] + self._losses_line(at)
        evidence = RepeatedBackwardEvidence(
            repeated_nodes=[n.node for n in repeated], node_runs=sum(n.count for n in repeated),
            forward_calls=sum(n.forward_count for n in repeated), repeated_us=again_us,
            backward_us=sum(n.total_us for n in a.ops.backward_nodes), in_loop=in_loop(at.file, at.line))
        runs = evidence.node_runs / max(evidence.forward_calls, 1)
        title = (f"backward runs the shared graph {runs:.1f} times per forward pass (retain_graph=True): "
                 f"{', '.join(evidence.repeated_nodes[:3])} run again")
        lost = again_us / 1e6
        return [self.finding(evidence, title=title, lost_s=lost, pct=facts.pct(lost), where=where)]

    @staticmethod
    def _losses_line(at: Where) -> list[Where]:
        """The loop around the backward call (the losses it walks), when there is one."""
        loops = [s for s in enclosing(at.file, at.line) if isinstance(s, (ast.For, ast.While)) and s.lineno != at.line]
        return [Where(file=at.file, line=loops[-1].lineno, function=at.function)] if loops else []

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """A backward op dominating at the repeated backward's line is that backward, run again."""
        if cause.where and symptom.where and (symptom.where[0].file, symptom.where[0].line) == \
                (cause.where[0].file, cause.where[0].line):
            return Explanation(seconds=min(symptom.time_lost_s, cause.time_lost_s))
        return None

    def fix(self, evidence: RepeatedBackwardEvidence) -> str:
        return ("Add the losses up and call backward once (`sum(losses.values()).backward()`, or "
                "torch.autograd.backward(list_of_losses)): the gradients are the same sums, the shared part of the "
                "graph is differentiated once instead of once per loss, and retain_graph=True (which keeps every "
                "activation alive between the calls) is no longer needed.")
