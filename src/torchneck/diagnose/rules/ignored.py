"""Positions the loss skips, computed anyway: a masked language model's targets are the ignore
index (-100) at every position but the masked ones, yet the output head projects every position
onto the vocabulary, and the loss normalises all of them, forward and backward."""

from __future__ import annotations

import ast

from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts, where_of
from ..rule import Rule, register
from ..source import _assigned_before, _tree, enclosing, function_at, walk_own
from .calls import model_call_sites


class IgnoredPositionsEvidence(Record):
    calls: int
    """Model calls looked at whose targets held the ignore index."""
    ignored_share: float
    """The mean share of their target positions set to the ignore index (the loss skips them)."""
    classes: int
    """The width the loss normalises over (the vocabulary, or the classes), read from the recorded
    shapes of its (log-)softmax."""
    head_share: float
    """Of the profiled window, the ops working on tensors of that width: the output head's
    products, the loss's softmax, and their backward."""
    loss_at: int | None = None
    """The line computing the loss (running its softmax)."""
    head_output_at: int | None = None
    """The line making the loss's input, where the kept positions can be selected first."""


@register
class IgnoredPositions(Rule[IgnoredPositionsEvidence]):
    """The model is called with targets the loss mostly skips (`ignore_index=-100`: masked language
    modelling, where 15 % of the positions carry a label), but its output head and the loss run on
    every position: a projection onto the whole vocabulary, and a softmax over it, for positions
    whose result is thrown away (forward and backward). Seen by the capture's module hooks (the
    calls' 2-D integer inputs, `call_inputs.ignored_share`) and the trace's shapes (the width the
    loss normalises over).

    Time lost: the ops on tensors of that width (the head's products, the softmax, their backward)
    as a share of the profiled window, times the share of positions the loss skips: selecting the
    kept positions before the head leaves the rest."""

    kind = "ignored_positions"
    summary = "The loss skips most positions (targets set to -100), but the output head and the loss compute them all."
    docs = "https://pytorch.org/docs/stable/generated/torch.nn.functional.cross_entropy.html"
    evidence_type = IgnoredPositionsEvidence
    confidence = "estimated"
    saving_basis = ("the ops on tensors as wide as the loss's classes (head, softmax, their backward) over the window, "
                    "times the share of target positions the loss skips")
    explains = ("op_hotspot",)
    MIN_CALLS = 4
    """Fewer calls with such targets are a check, not the training."""
    MIN_IGNORED = 0.5
    """Most target positions skipped: fewer leave little to select away (token classification's
    padded positions are padding_waste's)."""
    MIN_CLASSES = 256
    """A head this wide costs more per position than the layers under it (a vocabulary, many
    classes); a narrow one is cheap whatever the positions."""
    MIN_SHARE = 0.05
    """The skipped positions' share of the head must be a twentieth of the window."""
    SOFTMAX_OPS = frozenset({"aten::_log_softmax", "aten::log_softmax", "aten::_softmax", "aten::softmax"})
    """The loss's normalisation over the classes: its input's last dimension is their number."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if a is None or facts.window_s <= 0:
            return []
        classes = max((dims[0][-1] for row in a.ops.by_shape if row.name in self.SOFTMAX_OPS
                       and (dims := row.input_dims())), default=0)
        if classes < self.MIN_CLASSES:
            return []
        head_us = sum(row.self_us for row in a.ops.by_shape if any(classes in d for d in row.input_dims()))
        head = min(head_us / 1e6 / facts.window_s, 1.0)
        for site in model_call_sites(facts):
            looked, ignored = site.get("ignored_looked") or 0, site.get("ignored_mean_share") or 0.0
            if looked < self.MIN_CALLS or ignored < self.MIN_IGNORED or head * ignored < self.MIN_SHARE:
                continue
            ev = IgnoredPositionsEvidence(calls=looked, ignored_share=ignored, classes=classes, head_share=head)
            places: list[Where] = []
            loss = next(iter(facts.lines_for_ops(set(self.SOFTMAX_OPS), limit=1)), None)
            if loss is not None:
                ev.loss_at = loss.line
                ev.head_output_at = loss_input_assigned_at(loss.file, loss.line)
                if ev.head_output_at is not None:
                    places.append(Where(file=loss.file, line=ev.head_output_at,
                                        function=function_at(loss.file, ev.head_output_at)))
                places.append(loss)
            places += [w for w in where_of([site]) if (w.file, w.line) not in {(p.file, p.line) for p in places}]
            lost = head * ignored * facts.window_s
            title = (f"the loss skips {100 * ignored:.0f}% of the target positions (set to -100), but the output "
                     f"head and the loss compute all of them over {classes:,} classes: "
                     f"{100 * head * ignored:.0f}% of the time")
            return [self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost), where=places)]
        return []

    def fix(self, evidence: IgnoredPositionsEvidence) -> str:
        at = f" at line {evidence.head_output_at}" if evidence.head_output_at else ""
        return (f"Select the positions the loss uses before the output head{at}: keep = labels != -100; "
                "logits = head(hidden[keep]); loss = F.cross_entropy(logits, labels[keep]). The encoder still "
                "sees every position (the context); only the projection onto the classes and the softmax shrink, "
                "to the positions that carry a target (Hugging Face's masked-LM heads compute them all).")


def loss_input_assigned_at(file: str, line: int) -> int | None:
    """The line assigning the tensor a loss call at `line` takes first (`F.cross_entropy(logits.view
    (-1, V), labels)` after `logits = self.cls(hidden)`): where the positions can be selected before
    the head. None when the input is not a name assigned earlier in the function, or unreadable."""
    path, tree = enclosing(file, line), _tree(file)
    if not path or tree is None:
        return None
    for call in (n for n in walk_own(path[-1]) if isinstance(n, ast.Call) and n.args):
        root = call.args[0]
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if isinstance(root, ast.Name) and (assigned := _assigned_before(tree, file, path[-1].lineno, root.id)):
            return assigned.lineno
    return None
