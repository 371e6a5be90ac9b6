"""Loops of tiny ops: per-op overhead (the Python issuing each op, the dispatcher, the
allocator, autograd's node for each) costing more than the arithmetic."""

from __future__ import annotations

import ast
from typing import Any, NamedTuple

from ...analysis.ops import TINY_RUN_MIN_OPS
from ...model.analysis import Dispatch
from ...model.findings import Finding, Where
from ..facts import Facts, where_of
from ..filters import FilteredAfter, filter_first_fix, filter_first_title, filter_first_where, filtered_call
from ..idioms import invariant_call
from ..rule import DOCS, Explanation, Rule, register
from ..source import (
    COMPREHENSIONS,
    LOOPS,
    _scope_body,
    _tree,
    call_name,
    calls_of,
    enclosing,
    function_at,
    names_in,
    repeats,
    walk_own,
)
from .ops import OpHotspot
from .ops_evidence import is_backward_op


class TinyOpLoop(Dispatch):
    """The trace's per-op figures, and the sampled loop the estimate is built from."""

    loop_s: float = 0.0
    """Sampled seconds of the loop issuing the tiny ops, start-up included (0 when the samples
    cannot place it: the trace's runs of tiny ops, `tiny_run_share`, stand for it)."""
    sampled_s: float = 0.0
    """Sampled seconds of the steady state, the share's denominator."""
    backward_part: float = 0.0
    """The part of the `.backward()` lines' time that is the loop's: its share of the forward
    time inside torch ops (0 when the window's backward pass ran too few ops to hold a loop's)."""
    loop_share: float = 0.0
    """The loop's time as a share of the steady state (at most all of it)."""
    work_share: float = 0.0
    """Of the loop's profiled time, what its ops spend beyond the cheapest op's cost
    (`floor_op_us` per call): the arithmetic a batched version still does."""
    invariant_call: str | None = None
    """The helper issuing the tiny ops, called on every pass of an outer loop with the same
    arguments (`mel_filterbank()` per clip): computed once, all its time goes."""
    invariant_at: int | None = None
    filtered_after: FilteredAfter | None = None
    """The loop's function called on every candidate, its result filtered afterwards by a
    condition the call's input already held (`diagnose/filters.py`)."""


class _Loop(NamedTuple):
    """A loop of the user's code: lines `first`..`last` of `file`, or, for a recursive function
    (`function` set), every line of it."""

    file: str
    first: int = 0
    last: int = 0
    function: str = ""

    def holds(self, frame: dict[str, Any]) -> bool:
        return frame.get("file") == self.file and ((frame.get("function") or "").rsplit(".", 1)[-1] == self.function
                                                   if self.function else self.first <= frame["line"] <= self.last)


@register
class DispatchOverhead(Rule[TinyOpLoop]):
    """Loops of tiny ops: back-to-back ops so small (within 4x of the trace's cheapest, pure
    overhead) that the per-op cost of eager PyTorch (the Python issuing each op, the dispatcher,
    the allocator, autograd's node for each: ~5-15 µs an op on a fast CPU) is most of the time.
    Found from the trace: runs of at least 50 such ops with only small gaps between them, those
    gaps (the Python of the loop) included (`Dispatch.tiny_run_us`).

    Time lost: what batching the loop removes. The loop is the innermost `for`/`while`,
    comprehension or recursive function around the lines issuing the ops (or the line calling
    their helper); its time is the sampled time of its lines and all below them, start-up
    included (a first step, or a stepless run's part before its profiled slice), plus its share
    of the `.backward()` lines (its share of the forward time in torch ops), over the steady
    state's sampled time; less the arithmetic a batched version still does (`work_share`).
    Without samples, the trace's runs of tiny ops stand for the loop."""

    kind = "dispatch_overhead"
    summary = "Loops of tiny ops: per-op overhead (Python, dispatcher) costs more than the arithmetic."
    docs = DOCS["tuning"]
    evidence_type = TinyOpLoop
    saving_basis = ("the sampled time of the loop issuing the tiny ops (its lines, the calls below them, its share "
                    "of the backward pass) over the steady state, less its ops' time beyond the per-op floor "
                    "(the arithmetic a batched version still does)")
    explains = ("python_hotspot", "op_hotspot", "launch_bound", "gpu_idle", "input_pipeline")
    MIN_SHARE = 0.30
    """When a third of the window goes to loops of tiny ops, per-op overhead costs more than the
    arithmetic."""
    MIN_OPS_PER_STEP = 200
    """Fewer tiny ops per step are too few for their overhead to add up, whatever their size."""
    NAMED_OPS = 5
    """The top ops by self time named in the finding (and whose lines are shown)."""
    SMALL_CALL_US = 50.0
    """A dominant op whose calls average under this is many small calls: the tiny-op pattern."""
    CALLERS_READ = 5
    """Top sampled lines read for one calling the helper that issues the tiny ops."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a:
            return []
        d = a.ops.dispatch
        per_step = d.tiny_run_ops / max(facts.steps, 1)
        if d.tiny_run_share < self.MIN_SHARE or per_step < self.MIN_OPS_PER_STEP:
            return []
        # The forward ops name the loop to change: their backward runs at the backward() line.
        forward = [o for o in a.ops.by_name if not is_backward_op(o.name)] or a.ops.by_name
        names = {o.name for o in forward[: self.NAMED_OPS]}
        issuing = facts.lines_for_ops(names)
        # A `.backward()` line runs the loop's backward (ops of the same names): never the place to
        # change, and its callers are the training loop's; the forward lines and theirs come first.
        steady = {(ln["file"], ln["line"]): ln for ln in ((facts.python or {}).get("window") or {}).get("lines", [])}
        backward = [w for w in issuing if _runs_backward(facts, steady.get((w.file, w.line))
                                                         or {"file": w.file, "line": w.line})]
        issued: dict[tuple[str, int], int] = {}
        for e in facts.ops_by_line:
            if e["op"] in names:
                issued[(e["file"], e["line"])] = issued.get((e["file"], e["line"]), 0) + (e.get("count") or 0)
        # the line issuing the most of them leads (a per-element comprehension: thousands of calls
        # of a few µs), not the one spending most self time in them (a model's few larger calls)
        issuing = sorted((w for w in issuing if w not in backward), key=lambda w: -issued.get((w.file, w.line), 0)) \
            + backward
        where = facts.with_callers(issuing)
        if where == issuing:  # the helper's lines were not sampled: a sampled line calling it, if one does
            helpers = {w.function.rsplit(".", 1)[-1] for w in issuing}
            seen = {(w.file, w.line) for w in where}
            sampled = where_of(((facts.python or {}).get("window") or {}).get("lines", [])[:self.CALLERS_READ])
            where += [w for w in sampled if (w.file, w.line) not in seen and _calls_one_of(w, helpers)][:1]
        ev = _tiny_op_loop(facts, d, issuing, where)
        paths = [[w, *where_of((steady.get((w.file, w.line)) or {}).get("callers") or [])]
                 for w in issuing if w not in backward]
        where = _loop_first(where, [*paths, [w for w in where if w not in backward]])
        share = ev.loop_share * (1 - ev.work_share)
        title = (f"{per_step:.0f} tiny ops per step, issued one by one: per-op overhead takes {100 * share:.0f}% of "
                 "the time")
        helpers = {w.function.rsplit(".", 1)[-1] for w in issuing if w.function}
        def called_repeatedly(w: Where) -> bool:
            """The function holding `w` is called once per item: `w`'s caller, on the sampled call
            paths (its own line's, or one passing through it), repeats."""
            for ln in steady.values():
                path = [ln, *(ln.get("callers") or [])]
                for i, frame in enumerate(path[:-1]):
                    if (frame.get("file"), frame.get("line")) == (w.file, w.line):
                        caller = path[i + 1]
                        return repeats(caller["file"], int(caller["line"]), caller.get("function") or "")
            return False

        hoisted = next(((w, name) for w in where
                        if (name := invariant_call(w.file, w.line, helpers, called_repeatedly(w)))), None)
        if hoisted is not None:  # the same result computed on every pass: computing it once saves all of it
            at, ev.invariant_call = hoisted
            ev.invariant_at, share = at.line, ev.loop_share
            where = [at, *(w for w in where if w is not at)]
            title = (f"{ev.invariant_call}() is called with the same arguments on every pass at line {at.line}: its "
                     f"{per_step:.0f} tiny ops per step take {100 * share:.0f}% of the time")
        filtered = filtered_call([w for path in [*paths, where] for w in path]) if hoisted is None else None
        if filtered is not None:  # the loop runs over every candidate; a later line keeps few of its results
            site, ev.filtered_after = filtered
            where = filter_first_where(site, ev.filtered_after, where)
            title += filter_first_title(ev.filtered_after)
        lost = share * facts.window_s
        return [self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost), where=where, ops=sorted(names))]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """The Python of a loop issuing tiny ops is the same problem as their per-op overhead (one
        fix, vectorising the loop); on a GPU each tiny op is a tiny kernel the CPU must launch."""
        if symptom.kind == "python_hotspot":
            from .python import asks_too_often, reads_elements  # here: at the top, python's rules would register first

            if asks_too_often(symptom.evidence.get("calls_into") or "") or symptom.evidence.get("reads_elements") \
                    or reads_elements(facts, symptom.where[:1]):
                return None  # work the line asks for too often, or elements read one by one: the line's problem
            # The functions issuing the ops, and the very lines calling them; not the whole function
            # that calls the helper: a loop elsewhere in it is a problem of its own.
            issuing = facts.lines_for_ops(set(cause.ops)) or cause.where
            here = {(w.file, w.function) for w in issuing}
            calling = {(w.file, w.line) for w in cause.where}
            hot = symptom.where[0] if symptom.where else None  # the line itself, not its callers
            same = hot is not None and ((hot.file, hot.function) in here or (hot.file, hot.line) in calling
                                        or _calls_one_of(hot, {w.function.rsplit(".", 1)[-1] for w in issuing}))
            return Explanation(symptom.time_lost_s) if same else None
        if symptom.kind == "input_pipeline":  # the loader waits on a tiny-op loop of its own (a collate_fn
            # writing a tensor element by element): vectorising that loop is the fix, not more workers.
            # The `for batch in loader` line is both's: torch's own per-sample fetch is the loader's.
            if symptom.evidence.get("per_sample_from"):
                return None  # rows fetched one by one: the loader's fetch is the cause, its tiny ops the symptom
            mine = {(w.file, w.line) for w in cause.where}
            shared = any((w.file, w.line) in mine and not _iterates(w) for w in symptom.where)
            return Explanation(min(cause.time_lost_s, symptom.time_lost_s)) if shared else None
        if symptom.kind == "op_hotspot":  # the dominant op is one of the tiny ones, called many times
            small = symptom.evidence.get("mean_us", float("inf")) < self.SMALL_CALL_US
            return Explanation(symptom.time_lost_s) if small and set(symptom.ops) & set(cause.ops) else None
        return Explanation(min(cause.time_lost_s, symptom.time_lost_s))

    def fix(self, evidence: TinyOpLoop) -> str:
        if evidence.filtered_after is not None:
            return filter_first_fix(evidence.filtered_after)
        if evidence.invariant_call:
            return (f"Call {evidence.invariant_call}() once, before the loop at line {evidence.invariant_at}, and "
                    "reuse its result: its arguments do not change from pass to pass, so every call computes the same "
                    "thing (a constant such as a filterbank, a mask or a table). Vectorising it is then optional.")
        return ("Batch the work into fewer, larger tensor ops (vectorise loops over elements/rows), "
                "use torch._foreach_* for lists of tensors, or torch.compile the step to fuse them.")


def _iterates(line: Where) -> bool:
    """The statement at `line` is a `for` loop's header (`for x, y in loader:`)."""
    found = enclosing(line.file, line.line)
    return bool(found) and isinstance(found[-1], (ast.For, ast.AsyncFor)) and found[-1].lineno == line.line


def _calls_one_of(line: Where, functions: set[str]) -> bool:
    """The statement at `line` calls one of these functions (by name, read from the source): the
    line driving a helper that issues tiny ops, when the samples charged its loop to it rather
    than to the helper's lines (which named it as their caller otherwise)."""
    found = enclosing(line.file, line.line)
    if not found or not functions:
        return False
    calls = {n.func for n in ast.walk(found[-1]) if isinstance(n, ast.Call)}
    return any(names_in(f) & functions for f in calls)


def _tiny_op_loop(facts: Facts, d: Dispatch, issuing: list[Where], where: list[Where]) -> TinyOpLoop:
    """`d`, with the loop issuing the tiny ops measured from the samples (see DispatchOverhead)."""
    ev = TinyOpLoop(**{f: getattr(d, f) for f in d.__struct_fields__})
    steady, before = ((facts.python or {}).get(part) or {} for part in ("window", "startup"))
    ev.sampled_s = steady.get("sampled_s") or 0.0
    by_line = {(ln["file"], ln["line"]): ln for ln in steady.get("lines", [])}
    sampled = [by_line.get((w.file, w.line)) or {"file": w.file, "line": w.line} for w in issuing]
    least = TINY_RUN_MIN_OPS * max(facts.steps, 1)  # a run's worth of ops a step: fewer do not make a loop
    issuing = [w for w, ln in zip(issuing, sampled)  # the forward lines that do
               if not _runs_backward(facts, ln) and not 0 < _ops_run(facts, {(w.file, w.line)}) < least]
    paths = [[w, *where_of((by_line.get((w.file, w.line)) or {}).get("callers") or [])] for w in issuing]
    loops = {loop for path in [*paths, where] if (loop := _loop_around(path)) is not None}
    entries = [e for e in facts.ops_by_line if e.get("file")]
    if ev.sampled_s <= 0 or not loops:  # the samples cannot place the loop: the trace's runs stand for it
        at = {(w.file, w.line) for w in issuing}
        ev.loop_share = d.tiny_run_share
        ev.work_share = _work_share(facts, d, [(e, 1.0) for e in entries if (e["file"], e["line"]) in at])
        return ev

    def inside(ln: dict[str, Any]) -> bool:
        return any(loop.holds(f) for loop in loops for f in [ln, *(ln.get("callers") or [])])

    lines = [*steady.get("lines", []), *before.get("lines", [])]
    loop_lines = {(ln["file"], ln["line"]) for ln in lines if inside(ln)} | {(w.file, w.line) for w in issuing}
    backward = {(ln["file"], ln["line"]) for ln in lines if (ln["file"], ln["line"]) not in loop_lines
                and _runs_backward(facts, ln)}
    in_ops = {True: 0.0, False: 0.0}  # forward time inside torch ops: the loop's, the other lines'
    for ln in steady.get("lines", []):
        if (ln["file"], ln["line"]) not in backward:
            in_ops[(ln["file"], ln["line"]) in loop_lines] += ln["total_s"] - ln.get("outside_ops_s", ln["self_s"])
    if backward and _backward_of_tiny_ops(facts, backward, least) and in_ops[True] > 0:
        ev.backward_part = in_ops[True] / (in_ops[True] + max(in_ops[False], 0.0))
    weight = {**dict.fromkeys(backward, ev.backward_part), **dict.fromkeys(loop_lines, 1.0)}
    ev.loop_s = sum(ln["total_s"] * weight.get((ln["file"], ln["line"]), 0.0) for ln in lines)
    ev.loop_share = min(ev.loop_s / ev.sampled_s, 1.0)
    ev.work_share = _work_share(facts, d, [(e, weight[(e["file"], e["line"])]) for e in entries
                                           if weight.get((e["file"], e["line"]))])
    return ev


def _loop_first(where: list[Where], paths: list[list[Where]]) -> list[Where]:
    """`where`, led by the header of the loop that issues the tiny ops when it is a loop of its own:
    a comprehension or `for` calling a per-row helper is the line to change. Tried on each path (a
    forward line issuing the ops, then its sampled callers) until one is in such a loop; not the
    training loop (a loop that runs a backward pass), nor a recursive function."""
    for path in paths:
        head = _own_loop(path)
        if head is not None:
            return [head, *(w for w in where if (w.file, w.line) != (head.file, head.line))]
    return where


def _own_loop(path: list[Where]) -> Where | None:
    """The innermost comprehension or loop header around the path's first frame that runs in one,
    unless that loop is the training loop (it runs a backward pass, itself or in a function the
    path came through: `for upd in ...: update(model, batch)`) or a recursion."""
    trains = False
    for frame in path:
        stmts = enclosing(frame.file, frame.line)
        at = stmts[-1] if stmts else None
        if at is not None and not hasattr(at, "body") and any(isinstance(n, COMPREHENSIONS) for n in walk_own(at)):
            return Where(file=frame.file, line=at.lineno, function=frame.function)
        loop = next((st for st in reversed(stmts) if isinstance(st, LOOPS)), None)
        if loop is not None:
            return None if trains or _calls_backward(loop) else \
                Where(file=frame.file, line=loop.lineno, function=frame.function)
        tree = _tree(frame.file)
        trains = trains or (tree is not None and bool(stmts) and frame.function != "<module>"
                            and any(_calls_backward(s) for s in _scope_body(tree, stmts)))
        if _recursive(frame):
            return None  # the recursion is the loop: its leaf size decides, not a loop around it
    return None


def _recursive(frame: Where) -> bool:
    """The frame's function calls itself (by name, read from the source)."""
    name = frame.function.rsplit(".", 1)[-1]
    return bool(name) and not name.startswith("<") and any(
        function_at(frame.file, c) == name for c in calls_of(frame.file, name) + calls_of(frame.file, f"self.{name}"))


def _loop_around(path: list[Where]) -> _Loop | None:
    """The innermost loop around the first frame of a call path (the line, then its callers) that
    runs in one: a comprehension on the line, a `for`/`while`, or a function calling itself. A
    loop running a backward pass is the training loop, one pass a step: the tiny ops then loop
    inside the line's own call (a library's loop), and the line is the loop."""
    for frame in path:
        stmts = enclosing(frame.file, frame.line)
        name = frame.function.rsplit(".", 1)[-1]
        at = stmts[-1] if stmts else None
        if at is not None and not hasattr(at, "body") and any(isinstance(n, COMPREHENSIONS) for n in walk_own(at)):
            return _Loop(frame.file, at.lineno, at.end_lineno or at.lineno)
        loop = next((s for s in reversed(stmts) if isinstance(s, LOOPS)), None)
        if loop is not None:
            one = _calls_backward(loop)  # the training loop
            return _Loop(frame.file, frame.line if one else loop.lineno, frame.line if one else loop.end_lineno or 0)
        if not stmts and name.endswith(("comp>", "<genexpr>")):  # source unreadable: the frame's name says
            return _Loop(frame.file, frame.line, frame.line)
        if _recursive(frame):
            return _Loop(frame.file, function=name)
    return None


def _runs_backward(facts: Facts, line: dict[str, Any]) -> bool:
    """The sampled line runs a backward pass: the trace puts autograd's ops on it, it calls into
    `Tensor.backward`, or its statement calls `backward`."""
    at = (line["file"], line["line"])
    if any((e.get("file"), e.get("line")) == at and is_backward_op(e["op"]) for e in facts.ops_by_line):
        return True
    stmts = enclosing(line["file"], line["line"])
    return (line.get("library") or "").startswith(("Tensor.backward", "backward ")) or bool(stmts) and \
        _calls_backward(stmts[-1])


def _calls_backward(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and call_name(n) == "backward" for n in walk_own(node))


def _ops_run(facts: Facts, lines: set[tuple[str, int]]) -> int:
    """Ops the trace places on these lines (0 when its entries carry no counts)."""
    return sum(e.get("count") or 0 for e in facts.ops_by_line if (e.get("file"), e.get("line")) in lines)


def _backward_of_tiny_ops(facts: Facts, backward: set[tuple[str, int]], least: int) -> bool:
    """The backward pass is the loop's too: the window's backward ran a run's worth of ops a step
    (the backward of a tiny-op loop is as many tiny nodes; a model's few big nodes are not), or the
    window did not reach it (the samples still saw it)."""
    ran = any((e.get("file"), e.get("line")) in backward for e in facts.ops_by_line)
    nodes = [o for o in facts.analysis.ops.by_name if o.name.startswith(OpHotspot.BACKWARD_NODE)] \
        if facts.analysis else []
    return not (ran or nodes) or (_ops_run(facts, backward) or sum(o.count for o in nodes)) >= least


def _work_share(facts: Facts, d: Dispatch, entries: list[tuple[dict[str, Any], float]]) -> float:
    """Of the loop's profiled time, the part its ops (ops_by_line entries, weighted) spend beyond
    the cheapest op's cost per call: the arithmetic on their data, which a batched op still does.
    The loop's profiled time is the window's share of op time on its lines."""
    loop_us = sum(e["self_us"] * w for e, w in entries)
    all_us = max(sum(o.self_us for o in facts.analysis.ops.by_name) if facts.analysis else 0.0, loop_us)
    if loop_us <= 0 or facts.window_s <= 0:
        return 0.0
    work_us = sum(max(e["self_us"] - (e.get("count") or 0) * d.floor_op_us, 0.0) * w for e, w in entries
                  if e.get("count"))
    return min(work_us / (facts.window_s * 1e6 * loop_us / all_us), 1.0)
