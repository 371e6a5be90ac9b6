"""Rules on how the loop is driven: data loading, the optimizer, zeroing gradients, autograd
left on in inference."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from ...model.analysis import Annotation, OpRow, SpanOps
from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts, where_of
from ..idioms import (
    EMBEDDINGS,
    computed_then_sliced,
    indexes_own_tensors,
    invariant_call,
    keyword_line,
    lazy_archive_at,
    written_parameter,
)
from ..rule import DOCS, Explanation, Rule, register
from ..source import LOOPS, _tree, call_name, enclosing, function_at, walk_own
from .ops_evidence import is_backward_op


class InputPipelineEvidence(Record):
    dataloader_s: float
    """Time the steps spent waiting in DataLoader iteration (the step breakdown's `dataloader`)."""
    window_s: float
    sampled_share: float | None = None
    """The share of the whole sampled steady state spent inside DataLoader iteration, when the
    Python sampler ran (it counts every step, not the profiled few)."""
    made_in_loop: int | None = None
    """A line that builds the DataLoader inside a loop (a new loader, and its workers, every epoch)."""
    loader_call: str = ""
    """What the main loading line spends its time in (the sampler's callee), e.g. an iterator's
    `__init__` or `__del__`: iterators made and torn down, not batches loaded."""
    per_sample_from: str | None = None
    """The in-memory dataset class (`TensorDataset`) a DataLoader indexes one sample at a time and
    collates again, batch by batch (capture/callsites.py's DataLoader record)."""
    batch_size: int | None = None
    invariant_call: str | None = None
    """A helper the Dataset's code calls for every sample with the same arguments (statistics of
    the whole training span recomputed per window): computed once, its time goes."""
    invariant_at: int | None = None
    sliced_at: int | None = None
    """A line of the loading code computing over a whole input to keep a window of the result
    (features of a whole recording for a 1 s crop)."""
    archive_at: int | None = None
    """The line keeping a lazy `np.load` archive whose arrays the Dataset reads by key per sample:
    every read loads and decompresses a whole array from the file for one sample."""


@register
class InputPipeline(Rule[InputPipelineEvidence]):
    """The steps wait for the DataLoader: loading, decoding or collating in the main process
    (num_workers=0), or workers too few or too slow. Where: the sampled lines inside DataLoader
    iteration, then the Dataset's line that calls them when one call path carries the first (a
    tokenizer's inner loop is where time goes; the `__getitem__` line that tokenizes every epoch
    is where a fix goes: tokenize once, or in the workers).

    Time lost: the steps' time inside DataLoader iteration (what parallel loading that keeps up
    would hide)."""

    kind = "input_pipeline"
    summary = "The steps wait for the DataLoader (loading or per-sample work in the main process)."
    docs = DOCS["dataloader"]
    evidence_type = InputPipelineEvidence
    confidence = "measured"
    saving_basis = "the steps' time inside DataLoader iteration (what loading that keeps up would hide)"
    explains = ("gpu_idle", "launch_bound", "python_hotspot", "dispatch_overhead")
    MIN_SHARE = 0.10
    """Waiting 10 % of the step for data is recoverable with loader workers."""
    LINES_SHOWN = 3
    """The sampled lines inside DataLoader iteration named as where the loading time goes."""
    ITERATOR_CHURN = ("__init__", "__iter__", "__del__", "_shutdown_workers", "_get_iterator")
    """A DataLoader's own functions that make or tear down an iterator (and its workers): when
    the loading line spends its time in them, iterators are made too often, batches are not slow."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or facts.window_s <= 0:
            return []
        dl = a.steps.breakdown_total_us.get("dataloader", 0.0) / 1e6
        if dl <= 0:
            return []
        loading = (facts.python or {}).get("loading") or {}
        sampled = ((facts.python or {}).get("window") or {}).get("sampled_s") or 0.0
        share = dl / facts.window_s
        sampled_share = None
        if sampled > 0 and "sampled_s" in loading:
            # The whole steady state, every step in its true proportion: a window of a few steps
            # holding an epoch's start (a new iterator, its workers) is not every step's wait.
            sampled_share = min(loading["sampled_s"] / sampled, 1.0)
            share = sampled_share
        if share < self.MIN_SHARE:
            return []
        lost = share * facts.window_s
        lines = loading.get("lines", [])
        ev = InputPipelineEvidence(dataloader_s=dl, window_s=facts.window_s, sampled_share=sampled_share,
                                   loader_call=(lines[0].get("library") or "") if lines else "")
        where = facts.with_callers(where_of(lines[: self.LINES_SHOWN]), "loading")
        made = next((w for w in where if _builds_loader_in_loop(w)), None)
        loaders = facts.sites_of("dataloader")
        built = [Where(file=w.file, line=keyword_line(w.file, w.line, "num_workers") or w.line, function=w.function)
                 if not site.get("num_workers") else w  # no workers: the keyword to change, in a call of many lines
                 for site in loaders[:2] for w in where_of([site])]
        # a __getitem__ indexing its tensors, and the loading time in it or in the loader's own fetch and
        # collate, not in a transform it calls (a featurizer's loop: batching the fetch leaves that)
        own = [ln for ln in lines[:5] if indexes_own_tensors(ln["file"], int(ln["line"]))]
        rows = bool(own) and (own[0] is lines[0] or (lines[0].get("library") or "").startswith(self.LOADER_NEXT))
        per_sample = next((s for s in loaders if s.get("per_sample")
                           and (s.get("dataset") in self.IN_MEMORY_DATASETS or rows)), None)
        helpers = {w.function.rsplit(".", 1)[-1] for w in where if w.function}
        hoisted = next(((w, name) for w in where  # the Dataset's code runs once per sample
                        if (name := invariant_call(w.file, w.line, helpers, called_repeatedly=True))), None)
        archive = next((Where(file=w.file, line=kept, function="") for w in where
                        if (kept := lazy_archive_at(w.file, w.line)) is not None), None)
        sliced = next((w for w in where if computed_then_sliced(w.file, w.line)), None)
        if made is not None:  # a loader (and its workers) made every epoch: that line is the fix
            ev.made_in_loop = made.line
            where = [made, *(w for w in where if w is not made)]
        elif archive is not None:  # a whole array read from the file for each sample
            ev.archive_at = archive.line
            where = [archive, *where]
        elif hoisted is not None:  # the same result computed for every sample: compute it once
            at, ev.invariant_call = hoisted
            ev.invariant_at = at.line
            where = [at, *(w for w in where if w is not at)]
        elif sliced is not None:  # a whole recording featurised for the window kept: slice it first
            ev.sliced_at = sliced.line
            where = [sliced, *(w for w in where if w is not sliced)]
        elif per_sample is not None:  # rows indexed one by one, then stacked again: fetch batches
            ev.per_sample_from, ev.batch_size = per_sample["dataset"], per_sample.get("batch_size")
            where = [*where_of([per_sample]), *where]
        where += [w for w in built if (w.file, w.line) not in {(x.file, x.line) for x in where}]
        return [self.finding(ev, title=f"Waiting for the DataLoader takes {100 * share:.0f}% of each step",
                             lost_s=lost, pct=facts.pct(lost), where=where,
                             ops=[n.name for n in a.ops.annotations if "DataLoader" in n.name][:2])]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """While the host waits for the next batch, it launches nothing: the GPU idles as long. A
        Python hotspot on a line the loader runs (the Dataset's code) is that same wait."""
        loading = {(w.file, w.line) for w in cause.where}
        inside = any((w.file, w.line) in loading for w in symptom.where)
        if symptom.kind == "python_hotspot":
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s)) if inside else None
        if symptom.kind == "dispatch_overhead":  # the per-sample fetch's index ops and collate, issued one by one
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s)) \
                if inside and cause.evidence.get("per_sample_from") else None
        return Explanation(min(cause.time_lost_s, symptom.time_lost_s))

    LOADER_NEXT = "_BaseDataLoaderIter.__next__"
    """The library frame of the loop line iterating a DataLoader: time there is the loader's own."""
    IN_MEMORY_DATASETS = ("TensorDataset",)
    """Datasets of tensors already in memory, which index a whole batch of rows in one op: fetched
    one sample at a time (automatic batching), each batch is `batch_size` index ops and a stack.
    A Dataset of the program's own whose `__getitem__` indexes its tensors with the index (and the
    loader's time runs there) is one too."""

    def fix(self, evidence: InputPipelineEvidence) -> str:
        if evidence.archive_at is not None and evidence.made_in_loop is None:
            return (f"Line {evidence.archive_at} keeps np.load's lazy .npz archive, and every `archive[key]` reads "
                    "and decompresses that whole array from the file again, for one sample: load the arrays once "
                    "(`dict(np.load(path))`, or `np.load(path)['images']` in __init__; mmap_mode='r' on a .npy "
                    "for data larger than memory).")
        if evidence.invariant_call is not None and evidence.made_in_loop is None:
            return (f"Line {evidence.invariant_at} computes {evidence.invariant_call}() with the same arguments for "
                    "every sample the DataLoader fetches: compute it once (in the Dataset's __init__, or before "
                    "building it) and reuse the result; only the per-sample work stays in __getitem__.")
        if evidence.sliced_at is not None and evidence.made_in_loop is None:
            return (f"Line {evidence.sliced_at} computes over the whole input and keeps a window of the result: "
                    "slice the input to what that window needs first (for frames of a spectrogram, the samples "
                    "from start * hop to (start + frames - 1) * hop + n_fft), so each sample pays for its window "
                    "only; or precompute the whole features once, outside __getitem__.")
        if evidence.per_sample_from is not None and evidence.made_in_loop is None:
            size = evidence.batch_size or "B"
            own = "" if evidence.per_sample_from in self.IN_MEMORY_DATASETS else (
                " (its __getitem__ then gets the list of indices: index and transform the rows with one op each)")
            return (f"Fetch whole batches: the DataLoader indexes the {evidence.per_sample_from} one row at a time "
                    f"and stacks {size} rows again for every batch. Index it with a batch of indices at once: "
                    f"DataLoader(ds, batch_size=None, sampler=BatchSampler(RandomSampler(ds), {size}, "
                    f"drop_last=False)){own}, or index the tensors directly (`perm = torch.randperm(n)`, then "
                    "`x[perm[i:i + B]]`); workers do not help data already in memory.")
        if evidence.made_in_loop is not None:
            return (f"Create the DataLoader once, before the loop (line {evidence.made_in_loop} builds a new one, and "
                    "starts its workers, every pass), with persistent_workers=True so its workers live across "
                    "epochs; a few batches per pass cannot pay for starting workers each time.")
        function = evidence.loader_call.split(" (")[0]
        if "DataLoader" in function and function.endswith(self.ITERATOR_CHURN):
            return ("Start workers less often: each new iterator of a DataLoader with num_workers > 0 starts its "
                    "workers again and drops the batches they prefetched. Pass persistent_workers=True (workers "
                    "kept across passes), create the iterator once per pass (`for batch in loader`, not iter() per "
                    "batch), and for data already in memory (a TensorDataset) use num_workers=0: workers only add "
                    "start-up and inter-process copies there.")
        return ("Load data in parallel: DataLoader(num_workers=N, persistent_workers=True, "
                "pin_memory=True on GPU); move per-sample Python work into the workers.")


def _builds_loader_in_loop(line: Where) -> bool:
    """The statement at `line` constructs a DataLoader inside a `for`/`while` of its function."""
    found = enclosing(line.file, line.line)
    return bool(found) and any(isinstance(s, LOOPS) and s.lineno != line.line for s in found) and any(
        isinstance(n, ast.Call) and call_name(n) == "DataLoader" for n in walk_own(found[-1]))


def _sampled_share(facts: Facts, calls: Callable[[str], bool]) -> float | None:
    """The share of the sampled steady state spent on lines whose callee (the sampler's
    "function (file.py)") passes `calls`; None when the Python sampler did not run or named no
    such callee (it leaves a line's callee blank when nearly all its samples were inside traced
    ops: a line of big ops is not a line of none)."""
    window = (facts.python or {}).get("window") or {}
    total = window.get("sampled_s") or 0.0
    lines = [ln for ln in window.get("lines", []) if calls(ln.get("library") or "")]
    if total <= 0 or not lines:
        return None
    return sum(ln["total_s"] for ln in lines) / total


class OptimizerEvidence(Record):
    optimizer_step_s: float
    expected_saving: float
    """The share of the step's time the fix saves: 1 - `kept_us` / `step_span_us`."""
    optimizers: list[dict[str, Any]] = []
    """The optimizers' constructor calls (file, line, class, parameter count, foreach/fused)."""
    step_span_us: float = 0.0
    """The `Optimizer.step` spans' wall time in the window."""
    kept_us: float = 0.0
    """What the fix still does of it: the self time, net of the per-op floor, of the in-place
    ops (a fused step) or of every op (foreach)."""
    fix_kind: str = "fused"
    """`fused` when the optimizer class has a fused implementation, else `foreach`."""
    state_parameter: str | None = None
    """An `nn.Parameter` the program writes itself (a queue, a memory bank): the optimizer updates
    it every step, its moments as large as it, and backward computes its gradient."""
    state_made_at: int | None = None
    state_written_at: int | None = None
    scalar_parameters: int = 0
    """Parameter tensors of one element among the optimizer's (a ParameterList of per-neuron
    scalars): each costs the optimizer, zero_grad and autograd their per-tensor ops every step."""
    scalars_made_at: int | None = None
    dense_embedding_backward_s: float = 0.0
    """Backward's dense embedding gradients (`aten::embedding_dense_backward`, mostly zeroing a
    gradient as large as the table) when they are most of that op's time: with the step, what
    sparse gradients save."""
    embedding_made_at: int | None = None


def _steps_optimizer(callee: str) -> bool:
    """Whether a sampled line's callee ("function (file.py)") is the optimizer's step, or the
    wrapper an LR scheduler puts around it (`patch_track_step_called`)."""
    return ("Optimizer." in callee or "(optimizer.py)" in callee
            or "patch_track_step_called" in callee) and "zero_grad" not in callee


STEP_LINES_READ = 8
"""Top sampled lines read for the one calling `.step()`."""


def _step_lines_share(facts: Facts) -> float | None:
    """The share of the sampled steady state on the lines whose statement calls `.step()`
    (`opt.step()`, `scaler.step(opt)`) and whose callee the sampler left blank or named the
    optimizer: the sampler leaves a line's callee blank when most of its samples fell inside
    traced ops, as a single-tensor optimizer's many small ops do. None when no such line was
    sampled. Unlike the trace's spans, the samples are not inflated by the profiler's per-op
    cost (an AdamW step over 4 tensors took 50 % of a profiled window and 21 % unprofiled)."""
    window = (facts.python or {}).get("window") or {}
    total = window.get("sampled_s") or 0.0
    if total <= 0:
        return None
    spent, found = 0.0, False
    for ln in window.get("lines", [])[:STEP_LINES_READ]:
        callee = ln.get("library") or ""
        if callee and not _steps_optimizer(callee):
            continue
        stmt = enclosing(ln.get("file") or "", int(ln.get("line") or 0))
        if stmt and any(isinstance(n, ast.Call) and call_name(n) == "step" for n in walk_own(stmt[-1])):
            spent += ln["total_s"]
            found = True
    return spent / total if found else None


def _optimizer_class(span: str) -> str:
    """The class of an `Optimizer.step#Adam.step` span: `Adam`."""
    return span.split("#", 1)[-1].rsplit(".", 1)[0]


@register
class SingleTensorOptimizer(Rule[OptimizerEvidence]):
    """An optimizer running its per-parameter for-loop (`foreach=False`, the default on CPU)
    over many parameters, when its step is a large part of the window.

    Time lost: the step's time (the trace's `Optimizer.step` spans, bounded by the sampled share
    of the lines that call it) less what the fix still does, read from the ops inside the spans.
    A fused step (`FUSED_OPTIMIZERS`) updates each tensor in one pass: it keeps at most the
    in-place passes over the parameters and their state (`lerp_`, `addcdiv_`...), and drops the
    loop's Python, each op's dispatch, and the out-of-place temporaries (`sqrt`, `div`: a tensor
    allocated, written and read back per parameter). foreach runs the same math in multi-tensor
    ops: it keeps every op's own work and drops the Python and the per-parameter dispatch. Each
    kept op counts its self time less the trace's per-op floor (`Dispatch.floor_op_us`) a call,
    the overhead a multi-tensor op pays once."""

    kind = "optimizer"
    summary = "The optimizer updates one parameter tensor at a time (single-tensor implementation)."
    docs = DOCS["optim"]
    evidence_type = OptimizerEvidence
    saving_basis = ("the Optimizer.step time less what a fused step keeps (the in-place ops' self time net of the "
                    "per-op floor; every op's for foreach); with hundreds of single-number parameters, the whole "
                    "step and the tiny ops they cost elsewhere (dispatch_overhead, folded under it); with dense "
                    "embedding gradients, the whole step and backward's aten::embedding_dense_backward")
    explains = ("dispatch_overhead", "op_hotspot")
    MIN_SHARE = 0.15
    """An optimizer step under 15 % of the window is not worth changing. No parameter-count
    threshold: the step's share of the window already says whether the loop matters."""
    FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")
    """The classes with `fused=True` on CPU and CUDA (torch >= 2.4; the others take foreach only)."""

    DENSE_GRADIENT_FILL = 5.0
    """`aten::embedding_dense_backward`'s total time over its self time from which the dense
    gradient (a table of zeros, filled) is its work, not the batch's rows: 23x in a two-tower
    model of 200,000 ids and 512 a batch."""
    SCALAR_PARAMETERS = 64
    """Single-number parameter tensors (and half the optimizer's at least) from which they are the
    cause: a few scalars (a temperature, a learned scale) cost a few ops; per-neuron ones, hundreds."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or facts.window_s <= 0:
            return []
        steps = [n for n in a.ops.annotations if n.name.startswith("Optimizer.step#")]
        if not steps:
            return []
        step_s = sum(n.total_us for n in steps) / 1e6
        sampled = _sampled_share(facts, _steps_optimizer)
        if sampled is None:
            sampled = _step_lines_share(facts)
        step_s = min(step_s, facts.window_s)  # spans that outlast the window (two steps profiled) stop at it
        if sampled is not None:
            # An annotation span can outlast the step it labels (closed late in the trace: two SGD
            # steps over two tensors "took" 87 % of a window); the sampled time of the lines that
            # call the optimizer, over every step, bounds it.
            step_s = min(step_s, sampled * facts.window_s)
        if step_s / facts.window_s < self.MIN_SHARE:
            return []
        if any(o.name.startswith(("aten::_foreach", "aten::_fused")) for o in a.ops.by_name):
            return []  # already multi-tensor
        sites = [c for c in facts.sites_of("optimizer") if not c.get("foreach") and not c.get("fused")]
        if facts.sites_of("optimizer") and not sites:
            return []  # every optimizer the script built is multi-tensor already
        names = sorted({_optimizer_class(n.name) for n in steps})
        fused = all(name in self.FUSED_OPTIMIZERS for name in names)
        span_us, kept_us = self._kept(facts, in_place_only=fused)
        if span_us <= 0:
            return []
        saving = max(0.0, 1.0 - kept_us / span_us)
        lost = step_s * saving
        evidence = OptimizerEvidence(optimizer_step_s=step_s, optimizers=sites[:3], expected_saving=saving,
                                     step_span_us=span_us, kept_us=kept_us, fix_kind="fused" if fused else "foreach")
        where = where_of(sites[:3])
        title = (f"{', '.join(names)} steps take {100 * step_s / facts.window_s:.0f}% of the time, one parameter "
                 "tensor at a time (single-tensor implementation)")
        state = next((found for file in dict.fromkeys(w.file for w in where) if (found := written_parameter(file))),
                     None)
        if state is not None:  # state kept as a parameter: the optimizer should not see it at all
            evidence.state_parameter, evidence.state_made_at, evidence.state_written_at = state
            where = [Where(file=where[0].file, line=state[1], function=""),
                     Where(file=where[0].file, line=state[2], function=""), *where]
            title = (f"{', '.join(names)} steps take {100 * step_s / facts.window_s:.0f}% of the time, updating "
                     f"self.{state[0]}, a parameter the program writes itself (line {state[2]})")
            lost = step_s  # the step is that parameter's update, and its gradient is not needed either
        # the largest optimizer's: a second one (LBFGS after Adam) usually holds the same tensors
        scalars, tensors = max((c.get("scalars") or 0, c.get("params") or 0) for c in sites) if sites else (0, 0)
        if state is None and scalars >= self.SCALAR_PARAMETERS and 2 * scalars >= tensors:
            # one tensor of n numbers: its step is a handful of ops, whatever the class or flags
            evidence.scalar_parameters = scalars
            made = _first_found(scalar_parameters_made, [*(w.file for w in where), *facts.sampled_files()])
            if made is not None:
                evidence.scalars_made_at = made.line
                where = [made, *where]
            title = (f"{', '.join(names)} steps take {100 * step_s / facts.window_s:.0f}% of the time: {scalars} of "
                     "their parameter tensors hold one number each" + (f" (line {made.line})" if made else ""))
            lost = step_s
        dense = next((o for o in a.ops.by_name if o.name == "aten::embedding_dense_backward"), None)
        if state is None and not evidence.scalar_parameters and dense is not None \
                and dense.total_us >= self.DENSE_GRADIENT_FILL * max(dense.self_us, 1.0):
            # whole tables' gradients written and stepped for the rows a batch looks up
            evidence.dense_embedding_backward_s = min(dense.total_us / 1e6, facts.window_s)
            made = _first_found(dense_embedding_made, [*facts.sampled_files(), *(w.file for w in where)])
            if made is not None:
                evidence.embedding_made_at = made.line
                where = [made, *where]
            lost = min(step_s + evidence.dense_embedding_backward_s, facts.window_s)
            title = (f"{', '.join(names)} steps take {100 * step_s / facts.window_s:.0f}% of the time and backward "
                     f"{100 * evidence.dense_embedding_backward_s / facts.window_s:.0f}% more, over whole embedding "
                     "tables: their gradients are dense" + (f" (line {made.line})" if made else ""))
        return [self.finding(evidence, title=title, lost_s=lost, pct=facts.pct(lost), where=where,
                             ops=[n.name for n in steps])]

    @staticmethod
    def _kept(facts: Facts, in_place_only: bool) -> tuple[float, float]:
        """(the step spans' wall µs, the µs of their ops the fix keeps: each op's self time less
        the per-op floor a call; with `in_place_only`, only ops that write their input in place)."""
        a = facts.analysis
        assert a is not None
        floor = a.ops.dispatch.floor_op_us
        spans = [s for s in a.ops.optimizer.spans if s.name.startswith("Optimizer.step#")]
        kept = sum(o.beyond_floor_us(floor) for s in spans for o in s.ops
                   if not in_place_only or o.name.endswith("_"))
        return sum(s.total_us for s in spans), kept

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """Hundreds of single-number parameters are hundreds of tiny ops a step beyond the optimizer's
        (stacked in forward, their gradients, zero_grad): the tiny ops' overhead is theirs. Dense
        embedding gradients are tables of zeros filled every backward: a fill_ hotspot is theirs."""
        if cause.evidence.get("dense_embedding_backward_s") and symptom.kind == "op_hotspot" \
                and set(symptom.ops) <= {"aten::fill_", "aten::zero_", "aten::embedding_dense_backward"}:
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s))  # the dense gradients' zeros
        if symptom.kind != "dispatch_overhead" or not cause.evidence.get("scalar_parameters"):
            return None
        return Explanation(symptom.time_lost_s, beyond_s=max(0.0, symptom.time_lost_s - cause.time_lost_s))

    def fix(self, evidence: OptimizerEvidence) -> str:
        if evidence.dense_embedding_backward_s:
            at = f" (line {evidence.embedding_made_at})" if evidence.embedding_made_at else ""
            return (f"Give the large embeddings sparse gradients{at}: nn.Embedding(n, d, sparse=True), with an "
                    "optimizer that takes them (SGD and Adagrad as they are, torch.optim.SparseAdam for Adam; the "
                    "dense parameters in a second optimizer). Backward then writes only the rows a batch looked "
                    "up, and the step updates only those, instead of a gradient and an update as large as the "
                    "whole table every step.")
        if evidence.scalar_parameters:
            at = f" (line {evidence.scalars_made_at})" if evidence.scalars_made_at else ""
            return (f"Keep the {evidence.scalar_parameters} single-number parameters{at} in one tensor: "
                    "nn.Parameter(torch.full((n,), value)) indexed or broadcast where used, instead of a "
                    "ParameterList of scalars stacked in forward. The optimizer, zero_grad and autograd pay a few "
                    "ops per parameter tensor every step, whatever its size; foreach or fused only shortens the "
                    "optimizer's part.")
        if evidence.state_parameter is not None:
            return (f"self.{evidence.state_parameter} (line {evidence.state_made_at}) is an nn.Parameter the "
                    f"program overwrites itself (line {evidence.state_written_at}): state, not a weight, yet the "
                    "optimizer updates it and keeps moments as large as it, and backward computes its gradient, "
                    "every step. Make it a buffer (self.register_buffer(name, tensor)) or create it with "
                    "requires_grad=False, and leave it out of the optimizer.")
        if evidence.fix_kind == "foreach":
            return ("Pass foreach=True to the optimizer (one multi-tensor op per step of the update for all "
                    "parameters; this optimizer has no fused implementation).")
        return ("Pass fused=True to the optimizer where supported (Adam/AdamW/SGD/Adagrad on CUDA and CPU: one "
                "pass over each tensor), else foreach=True (one kernel per op for all parameters).")


class ZeroGradEvidence(Record):
    zero_grad_spans: list[Annotation] = []
    fill_ops: list[OpRow] = []
    """The zeroing ops inside the zero_grad calls."""
    sampled_share: float | None = None
    """The share of the sampled steady state on the lines that ran the fills, when it is the
    larger measure of the calls' time (the window's steps ran before most gradients existed)."""
    zero_grad_s: float = 0.0
    """The zero_grad calls' time: their spans in the window, or the sampled lines' share."""
    accumulate_add_s: float = 0.0
    """Backward's adds into the zeroed gradients that a None gradient skips."""
    gradients_written: float = 0.0
    """Gradients backward wrote per zero_grad call (autograd's `AccumulateGrad` calls)."""
    gradients_zeroed: float = 0.0
    """Gradients one zero_grad call zeroes in the steady state."""
    idle_update_s: float = 0.0
    """The optimizer steps' time on the gradients backward did not write (zeros, updated all the same)."""


ZERO_GRAD = "Optimizer.zero_grad#"


@register
class ZeroGradKernels(Rule[ZeroGradEvidence]):
    """`optimizer.zero_grad(set_to_none=False)` keeps every gradient and zeroes it, a fill per
    parameter, every step; gradients set to None cost next to nothing, let the next backward take
    its gradients without adding them to zeros, and let the optimizer skip the parameters that got
    none. Seen by the zeroing ops inside the trace's `Optimizer.zero_grad` spans.

    Time lost, three parts: (1) the zero_grad calls: their spans' wall time (fills and the
    Python over every parameter) or, when larger, the sampled share of the steady state of the
    lines that ran the fills (lines that ran little else): gradients that exist only once a part
    of the model has run (one head per task) are few in an early window, all of them later;
    (2) backward's adds into the zeroed gradients (the ops inside `AccumulateGrad`), the first
    per gradient and call (more are gradient accumulation's, kept); (3) when a call zeroes more
    gradients than backward writes between two calls, the parts of the model a step did not use
    keep zero gradients that the optimizer updates anyway: that share of the optimizer step's
    time (its sampled lines, else its spans). Zeroed gradients only accumulate: when their count
    grew in the window, the steady state holds one for each of the optimizer's parameters."""

    kind = "zero_grad"
    summary = "Gradients are zeroed with fills every step instead of being set to None."
    docs = DOCS["zero_grad"]
    evidence_type = ZeroGradEvidence
    confidence = "measured"
    saving_basis = ("the zero_grad calls' time, backward's adds into the zeroed gradients, and the optimizer's "
                    "updates of the gradients backward did not write (None skips all three)")
    MIN_SHARE = 0.03
    """Zeroing is pure overhead: 3 % of the window is worth a keyword argument."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or facts.window_s <= 0:
            return []
        calls_ops = [s for s in a.ops.optimizer.spans if s.name.startswith(ZERO_GRAD)]
        fills = [o for s in calls_ops for o in s.ops if o.name in self.FILLS]
        if not fills:
            return []  # set_to_none=True (or no zero_grad call): nothing zeroed
        calls = sum(s.count for s in calls_ops)
        zero_s = sum(s.total_us for s in calls_ops) / 1e6
        sampled = self._sampled_share(facts)
        if sampled is not None and sampled * facts.window_s > zero_s:
            zero_s = sampled * facts.window_s
        else:
            sampled = None
        written = a.ops.optimizer.gradients_accumulated / calls
        zeroed = sum(o.count for o in fills if o.name == "aten::zero_") / calls  # one per gradient
        first_adds = min(1.0, zeroed / written) if zeroed and written else 1.0
        added_s = a.ops.optimizer.accumulate_added_us / 1e6 * first_adds
        idle_s, zeroed = self._idle_updates(facts, calls_ops, written, zeroed)
        lost = zero_s + added_s + idle_s
        if lost / facts.window_s < self.MIN_SHARE:
            return []
        title = (f"Zeroing gradients takes {100 * zero_s / facts.window_s:.0f}% of the "
                 f"{'steady state' if sampled is not None else 'profiled time'} ({calls} zero_grad calls)")
        if idle_s > 0:
            title += (f"; the optimizer updates {zeroed - written:.0f} of its {zeroed:.0f} gradients a step "
                      "as zeros, backward never wrote them")
        evidence = ZeroGradEvidence(zero_grad_spans=[x for x in a.ops.annotations if x.name.startswith(ZERO_GRAD)],
                                    fill_ops=fills, sampled_share=sampled, zero_grad_s=zero_s,
                                    accumulate_add_s=added_s, gradients_written=written, gradients_zeroed=zeroed,
                                    idle_update_s=idle_s)
        return [self.finding(evidence, title=title, lost_s=lost, pct=facts.pct(lost), ops=[o.name for o in fills],
                             where=self._where(facts, {o.name for o in fills}))]

    def _idle_updates(self, facts: Facts, calls_ops: list[SpanOps], written: float,
                      zeroed: float) -> tuple[float, float]:
        """(the optimizer steps' time on gradients backward did not write, the gradients a call
        zeroes in the steady state): none when each call zeroes no more than backward wrote."""
        if not written or zeroed <= written:
            return 0.0, zeroed
        classes = {_optimizer_class(s.name) for s in calls_ops}
        params = sum(int(c.get("params") or 0) for c in facts.sites_of("optimizer") if c.get("optimizer") in classes)
        if any(s.last_call_ops > s.first_call_ops for s in calls_ops) and params > zeroed:
            zeroed = float(params)  # still growing: in the steady state, every parameter has one
        return self._step_s(facts) * (1.0 - written / zeroed), zeroed

    @staticmethod
    def _step_s(facts: Facts) -> float:
        """The optimizer steps' time: the sampled share of the steady state of the lines that
        call `Optimizer.step`, else its spans' time in the window."""
        sampled = _sampled_share(facts, _steps_optimizer)
        if sampled is not None:
            return sampled * facts.window_s
        a = facts.analysis
        assert a is not None
        return sum(n.total_us for n in a.ops.annotations if n.name.startswith("Optimizer.step#")) / 1e6

    FILLS = ("aten::zero_", "aten::fill_", "aten::_foreach_zero_")
    """The ops zero_grad(set_to_none=False) runs (one per gradient, or one foreach call)."""
    LINE_FILL_SHARE = 0.5
    """A line whose trace ops are at least half fills, and no backward (whose gradients of indexing
    are fills too), does little else: its sampled time is the zeroing's."""

    def _sampled_share(self, facts: Facts) -> float | None:
        """The share of the sampled steady state on the lines where the trace places the fills and
        that run little else (`_zeroing_lines`); None without samples or such lines."""
        steady = (facts.python or {}).get("window") or {}
        total = steady.get("sampled_s") or 0.0
        lines = self._zeroing_lines(facts)
        if total <= 0 or not lines:
            return None
        return sum(ln["total_s"] for ln in steady.get("lines", []) if (ln["file"], ln["line"]) in lines) / total

    def _zeroing_lines(self, facts: Facts) -> set[tuple[str, int]]:
        """The lines whose trace ops are mostly fills (`LINE_FILL_SHARE`), none of a backward."""
        op_us: dict[tuple[str, int], list[float]] = {}
        backward: set[tuple[str, int]] = set()  # lines running a backward: their fills are autograd's
        for e in facts.ops_by_line:
            if e.get("file"):
                acc = op_us.setdefault((e["file"], e["line"]), [0.0, 0.0])
                acc[0] += e["self_us"] if e["op"] in self.FILLS else 0.0
                acc[1] += e["self_us"]
                if is_backward_op(e["op"]):
                    backward.add((e["file"], e["line"]))
        return {k for k, (fill, every) in op_us.items()
                if fill > 0 and fill >= self.LINE_FILL_SHARE * every and k not in backward}

    def _zero_grad_line(self, facts: Facts) -> list[Where]:
        """The sampled line whose statement calls `zero_grad`, among the lines running mostly fills
        or, when the trace placed the fills on none, all sampled lines: `loss.backward()` runs
        fills too (autograd's), and one in a hook method is called from the training loop."""
        zeroing = self._zeroing_lines(facts)
        lines = ((facts.python or {}).get("window") or {}).get("lines", [])
        for only in (True, False):
            for ln in lines:
                if only and (ln["file"], ln["line"]) not in zeroing:
                    continue
                stmt = enclosing(ln["file"], ln["line"])
                if stmt and any(isinstance(n, ast.Call) and call_name(n) == "zero_grad" for n in walk_own(stmt[-1])):
                    return where_of([ln])
        return []

    def _where(self, facts: Facts, fills: set[str]) -> list[Where]:
        """The line that ran the fills (the zero_grad call: the line to change), then the
        optimizer's constructor; the constructor alone when the trace places no op at a line."""
        at = self._zero_grad_line(facts) or facts.lines_for_ops(fills, limit=1)
        site = where_of(facts.sites_of("optimizer")[:1])
        return at + [w for w in site if (w.file, w.line) not in {(x.file, x.line) for x in at}]

    def fix(self, evidence: ZeroGradEvidence) -> str:
        return ("Call optimizer.zero_grad(set_to_none=True) (the default since PyTorch 2.0; "
                "do not pass set_to_none=False), or model.zero_grad(set_to_none=True).")


def _first_found(find: Callable[[str], Where | None], files: list[str]) -> Where | None:
    """What `find` finds in the first of `files` (each read once) that holds it."""
    return next((found for file in dict.fromkeys(files) if (found := find(file)) is not None), None)


def scalar_parameters_made(file: str) -> Where | None:
    """The line making parameters of one number each in a loop or a comprehension
    (`nn.ParameterList(nn.Parameter(torch.tensor(0.1)) for _ in range(width))`), or None."""
    tree = _tree(file)
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, (*LOOPS, ast.ListComp, ast.GeneratorExp)):
            continue
        for call in walk_own(node):
            if isinstance(call, ast.Call) and call_name(call) == "Parameter" and call.args \
                    and isinstance(inner := call.args[0], ast.Call) and call_name(inner) == "tensor" and inner.args \
                    and not isinstance(inner.args[0], (ast.List, ast.Tuple, ast.ListComp)):
                return Where(file=file, line=call.lineno, function=function_at(file, call.lineno))
    return None


def dense_embedding_made(file: str) -> Where | None:
    """The first `nn.Embedding(...)` (or EmbeddingBag) made without `sparse=True` (a table whose
    gradient is dense)."""
    tree = _tree(file)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call) and call_name(node) in EMBEDDINGS and not any(
                k.arg == "sparse" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords):
            return Where(file=file, line=node.lineno, function=function_at(file, node.lineno))
    return None
