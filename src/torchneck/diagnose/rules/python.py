"""Rules on the user's own Python: lines that compute (or wait) outside torch ops."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection

from ...analysis.ops import BACKWARD_NODE
from ...model.base import Record
from ...model.findings import Finding, Where
from ..chains import broadcast_product
from ..facts import Facts, where_of
from ..filters import FilteredAfter, filter_first_fix, filter_first_title, filter_first_where, filtered_call
from ..idioms import invariant_call, modulo_setting_lines, tensor_from_lists
from ..loop_invariants import invariant_parameters
from ..rule import DOCS, Explanation, Rule, register
from ..source import (
    COMPREHENSIONS,
    LOOPS,
    _tree,
    call_name,
    enclosing,
    function_at,
    in_loop,
    names_in,
    repeats,
    walk_own,
)


def _runs_the_model(callee: str, files: tuple[str, ...]) -> bool:
    """True when `callee` ("function (file.py)", as the sampler names it) is torch's machinery
    for running the model: a module call, a functional op, backward, an optimizer step."""
    function, _, file = callee.partition(" (")
    return file.rstrip(")") in files or function.endswith("backward")


REPEATED_WORK_FIXES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("deepcopy",), "Copy the model once, outside the loop, and update the copy in place (e.g. an EMA with "
                    "torch._foreach_lerp_ or p.copy_()); a deepcopy per step or request copies every parameter "
                    "and buffer and rebuilds every module."),
    (("load (serialization.py)", "_load (serialization.py)", "load_state_dict", "Unpickler"),
     "Load the checkpoint (and build the model) once, outside the loop, and reuse it: each load builds every "
     "module, initialises its weights and reads every tensor of the file again."),
    (("serialization.py", "pickle", "Pickler"),
     "Serialise less often: save checkpoints every N steps or minutes (and at the end), or hand a copy of "
     "the state to a background thread; writing the whole state every step costs more than the step."),
    (("dataloader.py",), "Create the DataLoader iterator once per pass (`for batch in loader`, or keep "
                         "`it = iter(loader)` and call next(it)): each new iterator starts its workers again and "
                         "drops the batches they prefetched."),
    (("get_parametrized",), "This weight is a parametrization (torch.nn.utils.parametrize: a LoRA adapter, "
                            "weight_norm, orthogonal) recomputed at every access, so every call rebuilds it. At "
                            "inference merge it once: parametrize.remove_parametrizations(module, 'weight', "
                            "leave_parametrized=True), or run the loop under `with parametrize.cached():`."),
    (("gc.collect",), "Do not collect garbage inside the loop: gc.collect() walks every object the program holds "
                      "(and torch.cuda.empty_cache() makes the next allocations ask the driver again). Python frees "
                      "a tensor when its last reference goes; collect once after the loop if at all."),
    (("__repr__", "__format__", "_tensor_str"), "Do not format tensors every step: log a few scalars "
                                                "(loss.item()) every N steps, or format only when that log "
                                                "level is on (logging evaluates f-strings even when it drops them)."),
)
"""Fixes that depend on what the line calls: a call that is set-up or reporting work (a deep copy,
a checkpoint, a new DataLoader iterator, a tensor printed) is done too often, not too slowly."""


REPLACED_IN_PLACE = ("deepcopy", "get_parametrized")
"""Repeated work fixed where it is made (a copy kept and updated, a weight merged once), not by
calling the helper holding it less: the helper's other work stays."""


def registered_parametrizations(where: list[Where]) -> list[Where]:
    """The lines of the files of `where` calling `register_parametrization`."""
    found = []
    for file in dict.fromkeys(w.file for w in where):
        tree = _tree(file)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and call_name(node) == "register_parametrization":
                found.append(Where(file=file, line=node.lineno, function=function_at(file, node.lineno)))
    return found


def c_call_of(file: str, line: int) -> str:
    """What a line calls that the sampler sees no frame of (a C function), named from the source as
    the sampler names callees: `gc.collect()` -> "gc.collect (gc)"; "" otherwise."""
    path = enclosing(file, int(line))
    for node in walk_own(path[-1]) if path else ():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "collect" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "gc":
            return "gc.collect (gc)"
    return ""


def asks_too_often(callee: str) -> bool:
    """True when the line's time goes to set-up or reporting work (`REPEATED_WORK_FIXES`)."""
    return any(n in callee for needles, _ in REPEATED_WORK_FIXES for n in needles)


ELEMENT_READ_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
"""What `.item()` (and `float(t)`, `int(t)`, `t.tolist()` on one element) runs: a tensor's
value read into Python. Among a line's tiny ops they mean a loop reading elements one at a time."""


ELEMENT_READ_MIN_SHARE = 0.25
"""Element reads must be this share of the op calls a line makes (an element's select and its
read are half of them): one `loss.item()` a step beside a loop of adds is not such a loop."""


def reads_elements(facts: Facts, lines: list[dict] | list[Where]) -> bool:
    """Whether the ops run at `lines` are a Python loop reading tensor elements one by one
    (`[t[i].item() for i in ...]`): the loop is the problem, fixed by reading the values in one
    call (`t.tolist()`) or keeping the work in tensor ops, not by batching ops it would no longer
    run."""
    at = {(w["file"], w["line"]) if isinstance(w, dict) else (w.file, w.line) for w in lines}
    calls = reads = 0
    for e in facts.ops_by_line:
        if (e.get("file"), e.get("line")) in at:
            n = e.get("count") or 0
            calls += n
            reads += n if e.get("op") in ELEMENT_READ_OPS else 0
    return reads > 0 and reads >= ELEMENT_READ_MIN_SHARE * calls


class PythonHotspotEvidence(Record):
    outside_torch_s: float
    """Sampled seconds on the line outside torch ops (its Python, NumPy, other libraries)."""
    self_python_s: float
    """Of them, seconds in the line's own frame."""
    waiting_s: float
    """Seconds the thread was off the CPU on that line (sleep, I/O, a lock)."""
    line_total_s: float
    sampled_s: float
    """All sampled seconds of the profiled steps."""
    calls_into: str
    """The library the line spends its time in, if not its own code."""
    waits: bool = False
    """Most of the time is waiting, not computing: the fix is to overlap, not to vectorise."""
    reads_elements: bool = False
    """The line reads tensor elements into Python one at a time (`.item()` in a loop)."""
    called_at: int | None = None
    """The line calling the helper that does only this work (`model = load_model(path)`), whose
    whole time the fix saves: the place to change."""
    invariant_call: str | None = None
    """The helper called at `called_at` with the same arguments on every pass (a table of
    constants built per batch): computed once, all its time goes."""
    broadcast_product: bool = False
    """The line reduces a broadcast product (`(a[:, None] * b[None]).sum(-1)`): a matmul's work done
    as element-wise passes over a pairwise tensor (its samples may lie outside the traced ops)."""
    from_lists: bool = False
    """The line builds a tensor from nested Python lists it makes (`torch.tensor([[...] for ...])`)."""
    element_ops_per_step: float = 0.0
    """Torch ops a step the line issues as a loop over elements (a comprehension, a `for` and its
    body): with `ELEMENT_OPS_PER_STEP` or more, vectorising removes their host time too."""
    filtered_after: FilteredAfter | None = None
    """The loop's function called on every candidate, its result filtered afterwards by a
    condition the call's input already held (`diagnose/filters.py`)."""


@register
class PythonHotspot(Rule[PythonHotspotEvidence]):
    """A line of the user's code spends a large share of the steps outside torch ops: Python
    loops, NumPy round trips, string work, waiting on I/O. Lines running inside DataLoader
    iteration are left to `input_pipeline`, torch's own overhead (autograd engine, optimizer
    loop) to the rules on ops. A hot `for`/`while` line and the hot lines of its body are one
    finding, at the loop (iterating and the per-element work are replaced together).

    Time lost: the line's sampled time outside torch ops, as a share of the sampled steady
    state applied to the window (what moving the work into tensor ops, or overlapping the
    wait, would save at most). When the line asks a library for work too often (formatting a
    tensor, a deep copy, a checkpoint: `asks_too_often`) or reads elements one at a time, the
    fix removes the call or the loop with the ops it runs: then the line's whole time counts."""

    kind = "python_hotspot"
    summary = "A line of your code spends much of each step in Python, NumPy or waiting, outside torch ops."
    docs = DOCS["tuning"]
    evidence_type = PythonHotspotEvidence
    confidence = "measured"
    saving_basis = ("the line's sampled time outside torch ops (its share of the steps, over the run); its whole "
                    "time, ops included, when the fix removes the call (work asked too often, elements read one "
                    "at a time)")
    explains = ("gpu_idle", "launch_bound", "dispatch_overhead", "op_hotspot", "periodic_work")
    MIN_SHARE = 0.10
    """A line whose work outside torch ops (its own Python, NumPy, other libraries) takes 10 % of
    the steady state is worth moving into tensor ops; below that it is noise next to the ops."""
    MIN_SAMPLED_S = 0.01
    """And at least 10 ms of it: ten samples of the 1 ms wall-clock sampler; fewer are too few to
    tell a line from its neighbours. Measured over the whole steady state, not inflated by the
    profiler's window nor by other processes' load (run-queue time is left out), a short script's
    dominant line can hold no more: a per-row loop costing a third of each of 12 steps was 15 ms."""
    WAITING_SHARE = 0.5
    """When most of that time the thread was off the CPU, the line waits (sleep, I/O, a lock)
    rather than computes, and the fix is to overlap the wait, not to vectorise."""
    ELEMENT_OPS_PER_STEP = 64
    """A loop over elements issuing this many torch ops a step (`torch.stack([x[i, :n].mean(0) for
    i, n in ...])` over a batch of 256): replaced by a few batched ops, the loop's ops go with its
    Python, their dispatch and, on a GPU, the launches the device waits for (a text CNN's pooling
    loop: 73 % of the program's work, of which 21 points were Python)."""
    ELEMENT_TAKING_OPS = frozenset({"aten::unbind", "aten::select", "aten::as_strided", "aten::slice"})
    """What iterating a tensor runs (`for x in t`, `zip(a, b)`: an unbind, then a view per element):
    on a `for` line, the loop takes a tensor's elements one by one (a step loop's line runs none)."""
    LINES_CONSIDERED = 5
    """Only the top sampled lines: below them no line reaches MIN_SHARE."""
    TORCH_MACHINERY_FILES = ("module.py", "optimizer.py", "lr_scheduler.py", "functional.py", "_compile.py",
                             "eval_frame.py", "_contextlib.py", "grad_mode.py", "graph.py", "anomaly_mode.py")
    """torch's own files that run the model (module calls, torch.nn.functional, optimizer and
    scheduler steps, autograd, compiled frames, grad-mode switches): their Python is per-op
    overhead the op rules measure. Any other torch Python a line calls (formatting a tensor,
    torch.save, starting a DataLoader iterator) is work the line asked for, and the line's."""

    def check(self, facts: Facts) -> list[Finding]:
        if not facts.python:
            return []
        win = facts.python["window"]
        total = win["sampled_s"]
        if total <= 0:
            return []
        op_s: dict[tuple, float] = {}
        taken_s: dict[tuple, float] = {}  # per line, the ops that take a tensor's elements one by one
        for e in facts.ops_by_line:
            if e.get("file"):
                k = (e["file"], e["line"])
                op_s[k] = op_s.get(k, 0.0) + e["self_us"] / 1e6
                if e["op"] in self.ELEMENT_TAKING_OPS:
                    taken_s[k] = taken_s.get(k, 0.0) + e["self_us"] / 1e6
        loading = {(ln["file"], ln["line"]): ln["total_s"]
                   for ln in facts.python.get("loading", {}).get("lines", [])}
        hot: list[tuple[dict, float]] = []  # the lines considered, with their time outside torch ops
        for line in win["lines"][: self.LINES_CONSIDERED]:
            if loading.get((line["file"], line["line"]), 0.0) >= 0.5 * line["total_s"]:
                continue  # the DataLoader's work: input_pipeline's
            if "outside_ops_s" in line:  # samples aligned with the trace's ops: measured directly
                outside = line["outside_ops_s"]
            else:
                outside = max(line["total_s"] - op_s.get((line["file"], line["line"]), 0.0), line["self_s"])
            if asks_too_often(line.get("library") or ""):  # the work asked for is the line's, its torch ops too
                outside = line["total_s"]  # (a deepcopy of a model: mostly its tensors' copy_ ops)
            if line.get("library_is_torch") and line["self_s"] < 0.5 * outside \
                    and _runs_the_model(line.get("library") or "", self.TORCH_MACHINERY_FILES):
                continue  # torch's own overhead (autograd engine, optimizer loop): other rules' evidence
            hot.append((line, outside))
        hot = _with_shared_headers(_one_place(hot), win["lines"])
        iterating = {k for k, s in taken_s.items() if facts.window_s > 0 and s >= self.MIN_SHARE * facts.window_s}
        out = []
        for line, outside, body, helper in _one_call(_loops(hot, total * self.MIN_SHARE, iterating),
                                                     total * self.MIN_SHARE):
            share = outside / total
            if share < self.MIN_SHARE or outside < self.MIN_SAMPLED_S:
                continue
            lines = [line, *helper]
            # work asked too often is asked in a loop, or by a helper called in one: a save after
            # the loop, in the function holding it, runs once
            called_in_loop = any(in_loop(c["file"], int(c["line"])) for c in (line.get("callers") or [])[:1])
            repeated = [ln for ln in lines
                        if ln is line or called_in_loop or in_loop(ln["file"], int(ln["line"]))]
            callee = next((c for c in (ln.get("library") or "" for ln in repeated) if asks_too_often(c)),
                          line.get("library") or "") or c_call_of(line["file"], line["line"])
            waiting = sum(ln.get("waiting_s") or 0.0 for ln in lines)
            ev = PythonHotspotEvidence(outside_torch_s=outside, self_python_s=sum(ln["self_s"] for ln in lines),
                                       waiting_s=waiting,
                                       line_total_s=line["total_s"], sampled_s=total, calls_into=callee,
                                       waits=waiting >= self.WAITING_SHARE * outside,
                                       reads_elements=reads_elements(facts, [*lines, *body]),
                                       from_lists=any(tensor_from_lists(ln["file"], ln["line"]) for ln in lines),
                                       broadcast_product=any(broadcast_product(ln["file"], ln["line"])
                                                             for ln in lines))
            if ev.waits and line.get("waits_on_thread") and (facts.clock or {}).get("thread_module_calls"):
                continue  # a dispatcher waiting on workers that call the model: their lines are named instead
            removed = outside
            ev.element_ops_per_step, backward_share = _element_ops(facts, [line, *body])
            if not ev.waits and ev.element_ops_per_step >= self.ELEMENT_OPS_PER_STEP:
                # the loop's ops and their backward (run at the .backward() line) go; a few batched ops remain
                removed = max(outside, sum(ln["total_s"] for ln in [line, *body]) + backward_share * total)
            if not ev.waits and (asks_too_often(callee) or ev.reads_elements or ev.broadcast_product):
                removed = max(outside, sum(ln["total_s"] for ln in [*lines, *body]))  # the call's ops go too
            # a helper that only does that work (a load_model()); a deep copy is replaced where it is made
            if not ev.waits and asks_too_often(callee) and not any(k in callee for k in REPLACED_IN_PLACE):
                below = _helper_call_s(facts, line)  # calling it less saves all below its call
                if below > removed:
                    removed, ev.called_at = below, int(line["callers"][0]["line"])
            if not ev.waits and "get_parametrized" in callee:  # every read's rebuild goes, under any line's call
                removed = max(removed, float(win.get("parametrized_s") or 0.0))
            hoist = _invariant_caller(facts, line) if not ev.waits and ev.called_at is None else None
            if hoist is not None:  # the same helper call on every pass: once is enough
                ev.called_at, ev.invariant_call, below = hoist
                removed = max(removed, below)
            lost = removed / total * facts.window_s
            library = callee.split(" (")[0]
            if ev.waits:
                what = f" in {library}" if callee else ""
                title = (f"{line['function']}() waits{what} {100 * share:.0f}% of each step, off the CPU "
                         "(blocked: sleep, I/O, a lock or a queue)")
            else:
                what = f"in {library}" if callee and (ev.self_python_s < 0.5 * outside or asks_too_often(callee)) \
                    else "in Python"
                title = f"{line['function']}() spends {100 * share:.0f}% of each step {what}" \
                    + ("" if asks_too_often(callee) else ", outside torch ops")
            if ev.element_ops_per_step >= self.ELEMENT_OPS_PER_STEP and not ev.waits and not ev.reads_elements:
                title = (f"{line['function']}() issues {ev.element_ops_per_step:.0f} torch ops a step one element at a "
                         f"time at line {line['line']}: the loop takes {100 * removed / total:.0f}% of each step")
            if ev.broadcast_product:
                title = (f"{line['function']}() sums a broadcast product at line {line['line']} (a matrix product "
                         f"done element-wise): {100 * removed / total:.0f}% of each step")
            if ev.called_at:
                title = (f"{line['function']}(), called at line {ev.called_at}, takes {100 * removed / total:.0f}% of "
                         f"each step" + (f" (in {library})" if library else ""))
            if ev.invariant_call:
                title = (f"{ev.invariant_call}() is called with the same arguments on every pass at line "
                         f"{ev.called_at}: it takes {100 * removed / total:.0f}% of each step"
                         + (f" (in {library})" if library else ""))
            if "get_parametrized" in callee and not ev.waits and not ev.called_at:
                title = (f"{line['function']}() reads a parametrized weight at line {line['line']}, recomputed on "
                         f"every read: the rebuilds take {100 * removed / total:.0f}% of each step")
            if body:
                title += f" (the loop at line {line['line']} and its body)"
            callers = line.get("callers") or []  # one call path carries the line's time: the fix may go there
            if helper and callers and not ev.called_at:
                title += f" (lines {', '.join(str(ln['line']) for ln in lines)}, called at line {callers[0]['line']})"
            body = sorted(body, key=lambda ln: -ln["total_s"])  # the loop's own lines before the helper's others
            where = where_of([*callers[:1], line, *body, *helper, *callers[1:]] if ev.called_at
                             else [line, *body, *helper, *callers])
            if line.get("shared_header") and body:  # a cold `for` line: its body's busiest line first
                busiest = max(body, key=lambda ln: ln["total_s"])
                first = [w for w in where if w.line == busiest["line"]][:1]
                where = first + [w for w in where if w not in first]
            if ev.reads_elements and not body and not ev.called_at and not asks_too_often(callee):
                # `for t, p in zip(a, b): m[t, p] += 1` (work asked too often is changed at its own line)
                loop = next((s for s in reversed(enclosing(line["file"], int(line["line"]))[:-1])
                             if isinstance(s, (ast.For, ast.AsyncFor))), None)
                # a loop over the tensors themselves (their elements are taken there, one by one), not
                # over indices (`for i in range(len(t))`: the reading line is the one to change)
                if loop is not None and loop.lineno != line["line"] and not (
                        isinstance(loop.iter, ast.Call) and call_name(loop.iter) == "range"):
                    where = [Where(file=line["file"], line=loop.lineno, function=line["function"]), *where]
            if ev.invariant_call:  # the call to make once first
                first = [w for w in where if w.line == ev.called_at][:1]
                where = first + [w for w in where if w not in first]
            if asks_too_often(callee):  # done too often: the condition that says how often is the place
                where = _with_guard(where)
            if "get_parametrized" in callee:  # where the parametrization is registered (an adapter's set-up)
                where += [w for w in registered_parametrizations(where) if w not in where][:1]
            elif (filtered := filtered_call(where)) is not None:  # a loop over candidates mostly filtered out after
                site, ev.filtered_after = filtered
                where = filter_first_where(site, ev.filtered_after, where)
                title += filter_first_title(ev.filtered_after)
            out.append(self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost), where=where,
                                    docs=DOCS["dataloader"] if ev.waits else None))
        return _one_per_call(out)

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """While the line runs Python (or waits), the host launches nothing: the GPU idles as long.
        Tiny ops issued from this very line by work it asks a library for too often (formatting a
        tensor every step, a deep copy, a checkpoint: `asks_too_often`) are that call's cost: the
        fix is to call it less, not to vectorise the ops. So are a loop's element reads
        (`reads_elements`): the fix is one read of all the values; and the ops of a loop issuing
        them one element at a time (`element_ops_per_step`) when the per-op finding leads with
        their backward's line."""
        if symptom.kind == "periodic_work":  # the slow steps' work is this line's (a checkpoint every N steps)
            mine = {(w.file, w.line) for w in cause.where}
            return Explanation(min(cause.time_lost_s, symptom.time_lost_s)) \
                if symptom.where and (symptom.where[0].file, symptom.where[0].line) in mine else None
        if symptom.kind == "op_hotspot":  # ops run below a helper call that the fix makes rarer
            same_line = bool(cause.where and symptom.where) \
                and (symptom.where[0].file, symptom.where[0].line) == (cause.where[0].file, cause.where[0].line)
            if same_line and (cause.evidence.get("broadcast_product")  # the same product, seen in the trace
                              or asks_too_often(cause.evidence.get("calls_into") or "")):  # the copy's copy_ ops
                return Explanation(symptom.time_lost_s)
            at = cause.evidence.get("called_at")
            if at is None or not cause.where or not symptom.where:
                return None
            site = (cause.where[0].file, at)
            hot = (symptom.where[0].file, symptom.where[0].line)
            lines = ((facts.python or {}).get("window") or {}).get("lines", [])
            under = any((ln["file"], ln["line"]) == hot and any((c.get("file"), c.get("line")) == site
                                                                for c in ln.get("callers") or []) for ln in lines)
            return Explanation(symptom.time_lost_s) if under else None
        if symptom.kind == "dispatch_overhead":
            # the line issuing them (after the `for` line, named first, of a loop reading elements)
            heres = {(w.file, w.line) for w in cause.where[:2 if cause.evidence.get("reads_elements") else 1]}
            issued_here = any((w.file, w.line) in heres for w in symptom.where)  # it may lead with its loop
            # a loop issuing its ops one element at a time, whose backward's ops the symptom leads with
            # (at the .backward() line: autograd.grad per point); one leading with the loop's own line
            # is the per-op cost of that loop, a cause of its own
            mine = {(w.file, w.line) for w in cause.where}
            looped = (cause.evidence.get("element_ops_per_step") or 0.0) >= self.ELEMENT_OPS_PER_STEP and \
                bool(symptom.where) and (symptom.where[0].file, symptom.where[0].line) not in mine and \
                bool(mine & {(w.file, w.line) for w in symptom.where})
            if not (looped or issued_here and (asks_too_often(cause.evidence.get("calls_into") or "")
                                               or cause.evidence.get("reads_elements"))):
                return None
        return Explanation(min(cause.time_lost_s, symptom.time_lost_s))

    def fix(self, evidence: PythonHotspotEvidence) -> str:
        callee = evidence.calls_into
        for needles, text in REPEATED_WORK_FIXES:
            if any(n in callee for n in needles):
                return text
        if evidence.filtered_after is not None:
            return filter_first_fix(evidence.filtered_after)
        if evidence.invariant_call:
            return (f"Call {evidence.invariant_call}() once, before the loop (or in __init__), and reuse its result: "
                    f"line {evidence.called_at} calls it with the same arguments on every pass, so every call "
                    "builds the same thing (a table of constants, a basis, a filterbank).")
        if evidence.element_ops_per_step >= self.ELEMENT_OPS_PER_STEP and not evidence.reads_elements \
                and not evidence.waits:
            return ("Replace the loop over elements with a few ops over the whole batch (a mask or lengths "
                    "compared with torch.arange, then sum / mean; gather, index_add_ or scatter_reduce for "
                    "groups; padded or nested tensors for ragged rows): every small op it issues pays its "
                    "dispatch and, on a GPU, a kernel launch the device waits for.")
        if evidence.broadcast_product:
            return ("This line builds every pairwise product of two broadcast tensors and sums it: that is a matrix "
                    "product, a @ b.T (or torch.einsum('id,jd->ij', a, b)): no pairwise tensor in memory, and a "
                    "BLAS kernel instead of element-wise passes.")
        if evidence.from_lists:
            return ("Build the tensor from arrays, not nested Python lists: torch.from_numpy(np.stack(arrays)), "
                    "torch.stack(tensors), or one preallocated tensor filled by slices; torch.tensor on lists "
                    "converts every element in Python.")
        if evidence.reads_elements:
            return ("Read the values in one call (`t.tolist()`, or `t.cpu().numpy()`) instead of indexing and "
                    "`.item()` per element, or keep the computation in tensor ops on the whole tensor: each "
                    "element read costs an indexing op, a read into Python and its dispatch.")
        if evidence.waits:
            return ("Overlap the wait with compute instead of blocking the step: load and decode in "
                    "DataLoader workers (num_workers > 0, prefetch_factor) or a background thread, "
                    "cache what is read every step, and avoid sleeping or polling inside the loop.")
        return ("Do this work with torch ops on the tensors you already have (e.g. torch.nonzero / "
                "torch.where instead of a NumPy round trip, vectorised ops instead of Python loops), "
                "or move it out of the step.")


def _helper_call_s(facts: Facts, line: dict) -> float:
    """The sampled time under the line that calls the hot line's function, when that statement
    runs in a loop and calls nothing else (`model = load_model(path)` per chunk): everything the
    helper does (building the model, initialising its weights, reading the file) goes when it is
    called less often. 0 when the caller does more, runs once, or is unknown."""
    callers = _call_path(facts, line)[1:]
    function = (line.get("function") or "").rsplit(".", 1)[-1]
    if not callers or not function or function.startswith("<"):
        return 0.0
    caller = callers[0]
    if not any(repeats(c["file"], int(c["line"]), c.get("function") or "") for c in callers) \
            or in_loop(line["file"], line["line"]):
        return 0.0  # called once (a main()), or the helper loops itself: its caller is not the repetition
    found = enclosing(caller["file"], caller["line"])
    calls = [n for n in walk_own(found[-1]) if isinstance(n, ast.Call)] if found else []
    if not calls or any(call_name(c) != function for c in calls if not _is_argument_call(c, calls)):
        return 0.0
    inclusive = ((facts.python or {}).get("window") or {}).get("inclusive_lines") or []
    return sum(ln["total_s"] for ln in inclusive if (ln["file"], ln["line"]) == (caller["file"], caller["line"]))


def _is_argument_call(call: ast.Call, calls: list[ast.Call]) -> bool:
    """`call` is an argument of another call of the statement (`load_model(path(x))`'s `path`)."""
    return any(call is not other and any(call is n for a in [*other.args, *(k.value for k in other.keywords)]
                                         for n in ast.walk(a)) for other in calls)


def _with_shared_headers(hot: list[tuple[dict, float]], lines: list[dict]) -> list[tuple[dict, float]]:
    """`hot`, with the header of a loop over a tensor's elements holding two or more of its lines
    (`for i in range(target.shape[0])` reading `target[i].item()` on one line and `logp[i, t].item()`
    two lines below): the loop is one problem, fixed by replacing it, though its `for` line spends
    little time of its own. A step loop's lines (`for step in range(300)`) stay problems of their
    own. The header's own sampled entry when there is one, else an empty one."""
    headers: dict[tuple[str, int], list[int]] = {}
    for i, (ln, _) in enumerate(hot):
        loops = [st for st in enclosing(ln["file"], ln["line"]) if isinstance(st, LOOPS) and st.lineno != ln["line"]]
        if loops and isinstance(loops[-1], ast.For) and _over_elements(loops[-1].iter):
            headers.setdefault((ln["file"], loops[-1].lineno), []).append(i)
    present = {(ln["file"], ln["line"]) for ln, _ in hot}
    out = list(hot)
    for (file, line), members in headers.items():
        if len(members) < 2 or (file, line) in present:
            continue
        entry = next((ln for ln in lines if (ln["file"], ln["line"]) == (file, line)), None)
        first = hot[members[0]][0]
        base = dict(entry) if entry else {"file": file, "line": line, "function": first["function"], "total_s": 0.0,
                                          "self_s": 0.0, "callers": first.get("callers") or []}
        own = (base.get("outside_ops_s") if "outside_ops_s" in base else base.get("self_s")) or 0.0
        out.append(({**base, "shared_header": True}, own))
    return out


def _over_elements(iterable: ast.expr) -> bool:
    """A loop's iterable counts a tensor's elements: `range(x.shape[0])`, `range(len(x))`, `x.size(0)`."""
    return any((isinstance(n, ast.Attribute) and n.attr == "shape")
               or (isinstance(n, ast.Call) and call_name(n) in ("size", "numel", "len")) for n in ast.walk(iterable))


def _one_place(hot: list[tuple[dict, float]]) -> list[tuple[dict, float]]:
    """Entries of one file:line are one line of code: a comprehension runs in a frame of its own
    (before Python 3.12), so its samples and those of the statement holding it come as two
    entries, which were reported as two findings. Their times add up, under the enclosing
    function's name."""
    merged: dict[tuple[str, int], int] = {}
    out: list[tuple[dict, float]] = []
    for line, outside in hot:
        key = (line["file"], line["line"])
        if key not in merged:
            merged[key] = len(out)
            out.append((line, outside))
            continue
        first, seconds = out[merged[key]]
        both = dict(first)
        for field in ("total_s", "self_s", "waiting_s", "outside_ops_s"):
            if field in first or field in line:
                both[field] = (first.get(field) or 0.0) + (line.get(field) or 0.0)
        names = [ln["function"] for ln in (first, line)]
        both["function"] = min(names, key=lambda n: ("<" in n.rsplit(".", 1)[-1], len(n)))
        out[merged[key]] = (both, seconds + outside)
    return out


def _one_call(entries: list[tuple[dict, float, list[dict]]],
              least_s: float = 0.0) -> list[tuple[dict, float, list[dict], list[dict]]]:
    """Hot lines of one helper function reached through the same call (`torch.save(...)` then
    `os.replace(...)` in a `save_checkpoint()` called at one line) are one problem: that call's
    cost, changed where it is made. Lines in a loop of their function (a `main()` that runs the
    steps) are problems apart, unless the function is called over and over and a line of it outside
    its loops is hot (`least_s` of its own) through the same call too (a helper building a table
    row by row for every batch, then converting it). Each entry gains the other lines of its call
    (`helper`)."""
    def key_of(line: dict) -> tuple | None:
        callers = line.get("callers") or []
        return (line["file"], line["function"], callers[0]["file"], callers[0]["line"]) if callers else None

    def straight(line: dict) -> bool:  # neither in a loop nor a loop's own header
        found = enclosing(line["file"], line["line"])
        return not in_loop(line["file"], line["line"]) and not (found and isinstance(found[-1], LOOPS)
                                                               and found[-1].lineno == line["line"])

    outside = {key_of(ln) for ln, seconds, _ in entries if seconds >= least_s and straight(ln)}
    out: list[tuple[dict, float, list[dict], list[dict]]] = []
    first: dict[tuple, int] = {}
    for line, seconds, body in entries:
        callers = line.get("callers") or []
        key = key_of(line)
        if in_loop(line["file"], line["line"]) and not (key in outside and any(
                repeats(c["file"], int(c["line"]), c.get("function") or "") for c in callers)):
            key = None  # a loop's lines: problems apart
        if key is not None and key in first:
            main, total, main_body, helper = out[first[key]]
            out[first[key]] = (main, total + seconds, main_body + body, [*helper, line])
            continue
        if key is not None:
            first[key] = len(out)
        out.append((line, seconds, body, []))
    return out


def _with_guard(where: list[Where]) -> list[Where]:
    """`where`, with the `if` that decides how often a repeated line runs (its test reads the loop's
    counter or takes a modulo: `if step % 1 == 0: save_checkpoint(...)`) inserted after the first
    line that runs inside a loop under one, and after it the lines giving the modulo's setting a
    number (`Trainer(save_every_steps=8)` for `step % self.save_every_steps`)."""
    for i, w in enumerate(where):
        path = enclosing(w.file, w.line)
        loops = [j for j, s in enumerate(path)
                 if isinstance(s, LOOPS) and s.lineno != w.line]
        if not loops:
            continue
        loop = path[loops[-1]]
        counters = names_in(loop.target) if isinstance(loop, (ast.For, ast.AsyncFor)) else set()
        guards = [s for s in path[loops[-1] + 1:] if isinstance(s, ast.If) and s.lineno != w.line
                  and (names_in(s.test) & counters or any(isinstance(n, ast.Mod) for n in ast.walk(s.test)))]
        if guards and all((g.file, g.line) != (w.file, guards[-1].lineno) for g in where):
            set_at = modulo_setting_lines(w.file, guards[-1].test, guards[-1].lineno)
            return where[: i + 1] + [Where(file=w.file, line=n, function=w.function if n == guards[-1].lineno else "")
                                     for n in [guards[-1].lineno, *set_at[:2]]] + where[i + 1:]
        return where
    return where


def _loops(hot: list[tuple[dict, float]], least_s: float,
           iterating: Collection[tuple[str, int]] = ()) -> list[tuple[dict, float, list[dict]]]:
    """The hot lines, with the lines of a hot loop's body folded into its header's: iterating
    (`for p, t in zip(pred, target)`: a 0-d tensor per element) and the per-element work in the
    body (`conf[t.item(), p.item()] += 1`) are one problem, fixed by replacing the loop. A header
    counts as hot with `least_s` of its own outside torch ops, or when it is among `iterating`:
    a `for` whose own torch ops (a tensor's elements taken one by one) hold a tenth of the window;
    each entry is (line, seconds, body lines)."""
    at = {(ln["file"], ln["line"]): i for i, (ln, s) in enumerate(hot)}
    into: dict[int, int] = {}
    for i, (ln, _) in enumerate(hot):
        for stmt in enclosing(ln["file"], ln["line"]):
            header = at.get((ln["file"], stmt.lineno))
            if isinstance(stmt, LOOPS) and stmt.lineno != ln["line"] and header is not None \
                    and (hot[header][1] >= least_s or hot[header][0].get("shared_header")
                         or isinstance(stmt, ast.For) and (ln["file"], stmt.lineno) in iterating):
                into[i] = header
                break  # the outermost hot loop
    out = []
    for i, (ln, seconds) in enumerate(hot):
        if i in into:
            continue
        body = [j for j, h in into.items() if h == i]
        out.append((ln, seconds + sum(hot[j][1] for j in body), [hot[j][0] for j in body]))
    return out


def _one_per_call(found: list[Finding]) -> list[Finding]:
    """Hot lines of one helper named at the same call (two lines of a schedule rebuilt per step,
    both "called at line 78") are one finding: the first, with the others' lines added."""
    out: list[Finding] = []
    by_call: dict[tuple, Finding] = {}
    for f in found:
        at = f.evidence.get("called_at")
        first = by_call.get((at, f.evidence.get("invariant_call"))) if at is not None else None
        if first is None:
            out.append(f)
            if at is not None:
                by_call[(at, f.evidence.get("invariant_call"))] = f
            continue
        first.where += [w for w in f.where if (w.file, w.line) not in {(x.file, x.line) for x in first.where}]
    return out


def _call_path(facts: Facts, line: dict, frames: int = 5) -> list[dict]:
    """The hot line and the user lines calling it, innermost first: its sampled callers, and, as
    the kept paths are short, on along another sampled line's path that passes the last frame. A
    generator's or comprehension's frame and the function holding it on the same line are one
    step (`return sum(i * i for i in ...)`): whether the samples kept the outer frame as a caller
    must not change the path."""
    path = [line, *(c for c in line.get("callers") or []
                    if (c.get("file"), c.get("line")) != (line.get("file"), line.get("line")))]
    paths = [[ln, *(ln.get("callers") or [])] for ln in ((facts.python or {}).get("window") or {}).get("lines") or []]
    while len(path) < frames:
        last = (path[-1].get("file"), path[-1].get("line"))
        more = next((p[i + 1:] for p in paths for i, f in enumerate(p[:-1]) if (f.get("file"), f.get("line")) == last),
                    None)
        if not more:
            break
        path += more
    return path[:frames]


_COMPREHENSION_FRAME = re.compile(r"\.<locals>\.<(?:genexpr|listcomp|setcomp|dictcomp)>$")
"""The suffix of a generator's or comprehension's frame name (Python 3.11: frames of their own)."""


def _invariant_caller(facts: Facts, line: dict) -> tuple[int, str, float] | None:
    """Up the sampled call path of the hot line (three calls at most), a call made with the same
    arguments on every pass: in a loop with arguments the loop does not change, or in a function
    called from one whose arguments read only parameters its caller passes unchanged
    (`log_mel(wave, device)` calling `make_frontend_consts(device)`). Its line, the function it
    calls, and the sampled seconds under it; None when none."""
    path = _call_path(facts, line)
    inclusive = ((facts.python or {}).get("window") or {}).get("inclusive_lines") or []
    for k in range(1, min(len(path), 4)):
        below, caller = path[k - 1], path[k]
        # a generator's or comprehension's frame stands for the function holding it (the same step,
        # `_call_path`): `slow_penalty.<locals>.<genexpr>` is a call of slow_penalty
        called = _COMPREHENSION_FRAME.sub("", below.get("function") or "").rsplit(".", 1)[-1]
        if not called or called.startswith("<") or not caller.get("file"):
            continue
        up = path[k + 1] if k + 1 < len(path) else None
        looped = in_loop(caller["file"], int(caller["line"]))
        if not looped and not (up and repeats(up["file"], int(up["line"]), up.get("function") or "")):
            continue  # called once
        holder = (caller.get("function") or "").rsplit(".", 1)[-1]
        passed = invariant_parameters(up["file"], int(up["line"]), holder) if up and not looped else frozenset()
        name = invariant_call(caller["file"], int(caller["line"]), {called}, called_repeatedly=not looped,
                              invariant_params=passed)
        if name:
            at = (caller["file"], caller["line"])
            return int(caller["line"]), name, sum(ln["total_s"] for ln in inclusive if (ln["file"], ln["line"]) == at)
    return None


def _element_ops(facts: Facts, lines: list[dict]) -> tuple[float, float]:
    """Torch ops a step the trace places at `lines` when the first is a loop over elements (a
    comprehension in its statement, or a `for`/`while` header with those lines its body), and the
    share of the window their backward takes (autograd's nodes for those ops: `SelectBackward0`
    for `aten::select`, run at the `.backward()` line); (0, 0) otherwise."""
    head = lines[0]
    found = enclosing(head["file"], int(head["line"]))
    if not found or not (isinstance(found[-1], LOOPS) and found[-1].lineno == head["line"]
                         or any(isinstance(n, COMPREHENSIONS) for n in walk_own(found[-1]))):
        return 0.0, 0.0
    entries = [e for ln in lines for e in facts.ops_at(Where(file=ln["file"], line=int(ln["line"]), function=""))]
    issued = sum(e.get("count") or 0 for e in entries) / max(facts.steps, 1)
    a = facts.analysis
    if not a or a.steps.window_us <= 0:
        return issued, 0.0
    nodes = {"".join(part.capitalize() for part in e["op"].split("::")[-1].strip("_").split("_")) + "Backward"
             for e in entries}
    backward_us = sum(o.total_us for o in a.ops.by_name if o.name.startswith(BACKWARD_NODE)
                      and o.name[len(BACKWARD_NODE):].rstrip("0123456789") in nodes)
    return issued, min(backward_us / a.steps.window_us, 1.0)

