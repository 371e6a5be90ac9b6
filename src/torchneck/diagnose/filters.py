"""Work done on every candidate and filtered afterwards by a condition its input already held.

`keep = cand[nms(boxes[cand], scores[cand])]` then `keep = keep[scores[keep] > thr]`: the loop
inside the call runs over all the candidates, and the next statement drops the ones whose score
is under a threshold, a condition the scores passed to the call already answered. Filtering the
candidates first (`cand = nonzero(scores > thr)`) gives the same result whenever the call's
result for an element it keeps does not depend on the ones dropped (per-element work; greedy
non-maximum suppression, where a lower score never suppresses a higher one), and the loop then
runs over the few that pass: an evaluation loop ran 3.4x faster so (benchmarks/zoo/e_eval_detector.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ..model.base import Record
from ..model.findings import Where
from .source import _tree, block_of, enclosing, walk_own

LOOKAHEAD = 3
"""Statements after the call searched for the filter: the lines that post-process its result."""


class FilteredAfter(Record):
    """A loop's work filtered afterwards (evidence of `dispatch_overhead` and `python_hotspot`)."""

    call_line: int
    """The statement running the work on every candidate."""
    filter_line: int
    """The statement keeping the results whose input passes a condition."""
    condition: str
    """The condition as written (`scores[keep] > self.score_thr`)."""
    candidates_line: int | None
    """Where the candidates passed to the call are chosen (the filter's place), when that is a
    statement of the same function before the call."""


def filtered_after(file: str, line: int) -> FilteredAfter | None:
    """The statement at `line` assigns the result of a call given arrays indexed by one
    candidate set (`f(boxes[cand], scores[cand])`), and one of the next `LOOKAHEAD` statements
    indexes that result by a comparison on one of those arrays (`keep[scores[keep] > thr]`, or a
    mask so made): a filter the call's input already held. None when not so or unreadable."""
    path = enclosing(file, line)
    if not path or not isinstance(path[-1], ast.Assign):
        return None
    stmt = path[-1]
    results = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    indexed: set[str] = set()  # arrays passed to a call as `array[candidates]`
    candidates: set[str] = set()
    for node in walk_own(stmt.value):
        if isinstance(node, ast.Call):
            for arg in node.args:
                if (
                    isinstance(arg, ast.Subscript)
                    and isinstance(arg.value, ast.Name)
                    and isinstance(arg.slice, ast.Name)
                ):
                    indexed.add(arg.value.id)
                    candidates.add(arg.slice.id)
    if not results or not indexed or len(candidates) != 1:
        return None
    tree = _tree(file)
    body = block_of(tree, stmt) if tree is not None else [stmt]
    after = body[body.index(stmt) + 1 : body.index(stmt) + 1 + LOOKAHEAD]
    masks: dict[str, ast.Compare] = {}
    for later in after:
        if isinstance(later, ast.Assign) and isinstance(later.value, ast.Compare):
            masks.update({t.id: later.value for t in later.targets if isinstance(t, ast.Name)})
            continue
        for node in walk_own(later):
            if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in results):
                continue
            cond = (
                node.slice
                if isinstance(node.slice, ast.Compare)
                else masks.get(node.slice.id)
                if isinstance(node.slice, ast.Name)
                else None
            )
            if cond is not None and _reads_one_of(cond, indexed):
                (name,) = candidates
                chosen = [
                    s.lineno
                    for s in body[: body.index(stmt)]
                    if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in s.targets)
                ]
                return FilteredAfter(
                    call_line=stmt.lineno,
                    filter_line=later.lineno,
                    condition=ast.unparse(cond),
                    candidates_line=chosen[-1] if chosen else None,
                )
    return None


def _reads_one_of(cond: ast.Compare, arrays: set[str]) -> bool:
    """The comparison reads one of `arrays` (`scores[keep] > t`, `scores > t`)."""
    return any(isinstance(n, ast.Name) and n.id in arrays for n in ast.walk(cond))


def filtered_call(lines: Iterable[Where]) -> tuple[Where, FilteredAfter] | None:
    """The first of `lines` (a loop's lines and the sampled lines calling it) that calls it on
    every candidate and filters the result afterwards."""
    return next(((w, f) for w in lines if (f := filtered_after(w.file, w.line))), None)


def filter_first_where(site: Where, f: FilteredAfter, where: list[Where]) -> list[Where]:
    """Where the candidates are chosen (the filter's place), the call, the filter; then `where`."""
    first = [
        Where(file=site.file, line=ln, function=site.function)
        for ln in (f.candidates_line, f.call_line, f.filter_line)
        if ln is not None
    ]
    return first + [w for w in where if (w.file, w.line) not in {(x.file, x.line) for x in first}]


def filter_first_title(f: FilteredAfter) -> str:
    return (
        f": the loop runs over every candidate passed at line {f.call_line}, and line {f.filter_line} then keeps "
        f"the results with {f.condition}"
    )


def filter_first_fix(f: FilteredAfter) -> str:
    at = f" at line {f.candidates_line}" if f.candidates_line is not None else ""
    return (
        f"Filter before the work: choose the candidates{at} with the condition line {f.filter_line} applies "
        f"afterwards (a threshold on the call's own input: {f.condition}), so the loop called at line "
        f"{f.call_line} runs over the few that pass. The result is the same when the call's result for a kept "
        "element does not depend on the dropped ones (per-element work; non-maximum suppression, where a lower "
        "score never suppresses a higher one: torchvision.ops.batched_nms also does it in one op)."
    )
