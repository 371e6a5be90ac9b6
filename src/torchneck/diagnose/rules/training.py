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
from ..rule import DOCS, Explanation, Rule, register
from ..source import LOOPS, call_name, enclosing, names_in, walk_own
from .ops import is_backward_op


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
    explains = ("gpu_idle", "launch_bound", "python_hotspot")
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
        if made is not None:  # a loader (and its workers) made every epoch: that line is the fix
            ev.made_in_loop = made.line
            where = [made, *(w for w in where if w is not made)]
        return [self.finding(ev, title=f"Waiting for the DataLoader takes {100 * share:.0f}% of each step",
                             lost_s=lost, pct=facts.pct(lost), where=where,
                             ops=[n.name for n in a.ops.annotations if "DataLoader" in n.name][:2])]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """While the host waits for the next batch, it launches nothing: the GPU idles as long. A
        Python hotspot on a line the loader runs (the Dataset's code) is that same wait."""
        if symptom.kind == "python_hotspot":
            loading = {(w.file, w.line) for w in cause.where}
            inside = any((w.file, w.line) in loading for w in symptom.where)
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s)) if inside else None
        return Explanation(min(cause.time_lost_s, symptom.time_lost_s))

    def fix(self, evidence: InputPipelineEvidence) -> str:
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
                    "per-op floor; every op's for foreach)")
    MIN_SHARE = 0.15
    """An optimizer step under 15 % of the window is not worth changing. No parameter-count
    threshold: the step's share of the window already says whether the loop matters."""
    FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")
    """The classes with `fused=True` on CPU and CUDA (torch >= 2.4; the others take foreach only)."""

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
        return [self.finding(
            evidence,
            title=f"{', '.join(names)} steps take {100 * step_s / facts.window_s:.0f}% of the time, one "
                  "parameter tensor at a time (single-tensor implementation)",
            lost_s=lost, pct=facts.pct(lost), where=where_of(sites[:3]), ops=[n.name for n in steps])]

    @staticmethod
    def _kept(facts: Facts, in_place_only: bool) -> tuple[float, float]:
        """(the step spans' wall µs, the µs of their ops the fix keeps: each op's self time less
        the per-op floor a call; with `in_place_only`, only ops that write their input in place)."""
        a = facts.analysis
        assert a is not None
        floor = a.ops.dispatch.floor_op_us
        spans = [s for s in a.ops.optimizer.spans if s.name.startswith("Optimizer.step#")]
        kept = sum(max(0.0, o.self_us - o.count * floor) for s in spans for o in s.ops
                   if not in_place_only or o.name.endswith("_"))
        return sum(s.total_us for s in spans), kept

    def fix(self, evidence: OptimizerEvidence) -> str:
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


class AutogradInInferenceEvidence(Record):
    model_calls: int
    outputs_with_grad: int
    backward_in_trace: bool
    estimated_overhead: float
    grad_mode_ops: int = 0
    graph_nodes: int = 0
    threads: int = 0
    """Other threads that made the model calls (a server's workers); 0: the main thread."""
    model_calls_s: float = 0.0
    """Wall seconds inside those threads' model calls, summed over the threads."""
    share_of: str | None = None
    """`run_wall` when the cost is measured over the whole run (the threads' calls)."""
    probe: dict[str, Any] | None = None
    """The autograd probe's timings of one model call (capture/autograd_probe.py), when it ran."""
    after_training: bool = False
    """The calls came after the program's last optimizer step (an evaluation or sampling after
    training), counted by the capture's hooks over the rest of the run."""
    chained: int = 0
    """Of those calls, the ones fed a tensor that already carried a graph (the previous call's
    output): every call's graph and activations then stay alive to the end of the loop."""


@register
class AutogradInInference(Rule[AutogradInInferenceEvidence]):
    """Forward passes that record autograd graphs nobody uses, and no backward in the trace. Seen
    two ways: the steps are calls of a model (no optimizer step) whose outputs carry a `grad_fn`
    (the capture's module clock); or, whatever the clock (an evaluation after training, a trace
    from elsewhere), the trace's ops carry autograd's sequence numbers and those advanced by at
    least `MIN_GRAPH_NODES`: graph nodes were built (ops on tensors needing no gradient in grad
    mode repeat one number, and build nothing). Model calls in other threads (a server's
    workers), which neither the profiler nor the sampler sees, are counted by the capture's
    module hooks in those threads: most of them building a graph is the third way; the main
    thread's wait for them (a python_hotspot waiting in `Queue.get`, `join`...) is then a symptom.

    Time lost: the model calls' time x (1 - t_inference / t_grad), the times of one of the
    script's own model calls, made again after the script with autograd on and under
    `inference_mode` (the capture's autograd probe): what autograd costs depends on the model and
    its input (recording the graph is ~10 % of a small MLP's call; a padded batch through
    `nn.TransformerEncoder` loses its inference fast path, nested tensors that skip the padding,
    and took twice as long). Without the probe (no call kept, one too slow, a compiled model,
    a trace from elsewhere), `AUTOGRAD_OVERHEAD` of that time. The model calls' time is the
    self time of the ops run at the model-call line (the line the capture saw call the
    top-level module) when the trace places ops at lines, else the whole window; in worker
    threads, their calls' wall time side by side."""

    kind = "autograd_in_inference"
    explains = ("python_hotspot", "op_hotspot")
    summary = "Inference records autograd graphs that no backward uses (no inference_mode / no_grad)."
    docs = DOCS["inference_mode"]
    evidence_type = AutogradInInferenceEvidence
    saving_basis = ("the model calls' time x (1 - inference-mode time / grad-mode time of one model call, "
                    "re-timed by a probe after the run); without the probe, 10% of it")
    MIN_GRAD_SHARE = 0.5
    """Most model calls must have built a graph (one stray call is not a pattern)."""
    MIN_GRAPH_NODES = 20
    """Graph nodes the trace's sequence numbers must span: a few calls of even a small model (a
    Linear + activation builds 2-3 a layer; a window bounded by memory may hold only two calls of
    a 6-layer MLP, 43 nodes); a stray `requires_grad` tensor builds a handful."""
    GRAD_CONTEXTS = ("inference_mode", "no_grad", "enable_grad", "set_grad_enabled", "nullcontext")
    """Context managers that set the grad mode of their block, and `contextlib.nullcontext`, the
    stand-in of an optional context (`torch.no_grad() if eval else nullcontext()`)."""
    AUTOGRAD_OVERHEAD = 0.10
    """Without the probe. Measured here: an 8-layer Linear+GELU stack, 64x256 inputs, 1 thread:
    0.28-0.31 s per 200 calls with grad, 0.264 s under inference_mode (7-15 %); more for small
    ops, far more for models with an inference fast path (the probe measures those)."""

    MIN_THREAD_CALLS = 5
    """Model calls in other threads to speak of a pattern there."""

    MIN_AFTER_CALLS = 10
    """Model calls after the last optimizer step to speak of an evaluation or sampling loop."""
    MAX_REACHED_SHARE = 0.1
    """At most this share of those calls' graphs may have had a backward go through them (an
    adversarial attack or a gradient penalty after training uses them)."""
    MIN_CHAINED_SHARE = 0.5
    """Most calls fed the previous call's graph: the loop keeps them all, and its cost is the
    memory of every activation, not the bookkeeping one call's probe measures."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        in_threads = self._in_threads(facts) or self._after_training(facts)
        if in_threads:
            return in_threads
        if not a or facts.window_s <= 0:
            return []
        calls = facts.clock.get("top_module_calls") or 0
        with_grad = facts.clock.get("top_module_outputs_with_grad") or 0
        counted = facts.clock.get("kind") == "module" and calls > 0
        if counted:  # the capture saw the model calls: it decides
            if with_grad / calls < self.MIN_GRAD_SHARE:
                return []
        elif a.trace.autograd_nodes < self.MIN_GRAPH_NODES or self._trains_after(facts.clock):
            return []
        names = [o.name for o in a.ops.by_name] + [n.name for n in a.ops.annotations]
        if a.ops.training_ops or any("evaluate_function" in n or "Backward" in n for n in names):
            return []  # a backward or an optimizer step ran: this is training
        # The line that called the model, counted by the capture's module hook; runs of older
        # versions: the hottest sampled line, or the line that ran the most ops (exact, from the
        # line spans) when the window ended between two samples.
        sites = (facts.clock.get("top_module_sites") or []) if counted else []  # else: counted before the window
        lines = (facts.python or {}).get("window", {}).get("lines", [])[:1]
        where = where_of(sites[:1]) or self._model_call(facts, where_of(lines)) or facts.lines_for_ops(None, limit=1)
        at = {(w.file, w.line) for w in where}
        where = self._grad_context(facts, where)
        in_calls = sum(e["self_us"] for e in facts.ops_by_line if (e.get("file"), e.get("line")) in at) / 1e6
        overhead, probe = self._overhead(facts)
        lost = (in_calls or facts.window_s) * overhead
        nodes = a.trace.autograd_nodes
        title = (f"{with_grad} of {calls} model calls built an autograd graph that no backward used" if counted else
                 f"ops ran in grad mode and built {nodes:,} autograd graph nodes that no backward used")
        return [self.finding(AutogradInInferenceEvidence(model_calls=calls, outputs_with_grad=with_grad,
                                                         backward_in_trace=False, estimated_overhead=overhead,
                                                         grad_mode_ops=a.trace.grad_mode_ops, graph_nodes=nodes,
                                                         probe=probe),
                             title=title + self._measured(probe), lost_s=lost, pct=facts.pct(lost), where=where,
                             confidence="measured" if probe else None)]

    def _after_training(self, facts: Facts) -> list[Finding]:
        """Model calls after the program's last optimizer step (an evaluation, sampling or export
        after training) that built graphs no backward went through, counted by the capture's
        hooks over the rest of the run (the window holds training steps). Time lost, measured:
        the calls' seconds times the probe's autograd share; with each call fed the previous
        one's graph, the calls' seconds less the probe's inference-mode seconds of one call for
        each. Every graph is then kept to the end of the loop and each call's activations take
        fresh memory (page faults: ~1/3 of a 512-wide MLP's call, 2/3 of a diffusion sampler's),
        which the probe's call, made after the script with its memory free again, does not pay."""
        if not self._trained(facts):
            return []
        probe = (facts.env.get("settings_at_end") or {}).get("autograd_probe") or {}
        after = probe.get("since_last_step") or {}
        calls, spent = int(after.get("calls") or 0), float(after.get("seconds") or 0.0)
        chained = int(after.get("chained") or 0)
        if calls < self.MIN_AFTER_CALLS or (after.get("backward_reached") or 0) > self.MAX_REACHED_SHARE * calls:
            return []
        overhead, timed = self._overhead(facts)
        lost = spent * overhead
        inference_s = (timed or {}).get("seconds_inference_mode")
        if chained >= self.MIN_CHAINED_SHARE * calls and isinstance(inference_s, (int, float)):
            lost = min(max(spent - calls * inference_s, lost), spent)
        wall = facts.run_wall_s
        where = self._grad_context(facts, facts.with_callers(where_of((after.get("sites") or [])[:1])))
        title = f"{calls:,} model calls after the last optimizer step built autograd graphs that no backward used"
        if chained >= self.MIN_CHAINED_SHARE * calls:
            title += (f", each fed the previous call's graph: all {calls:,} graphs and their activations were kept "
                      f"({spent:.1f} s in those calls)")
        evidence = AutogradInInferenceEvidence(model_calls=calls, outputs_with_grad=calls, backward_in_trace=False,
                                               estimated_overhead=lost / spent if spent > 0 else overhead,
                                               model_calls_s=spent, share_of="run_wall", probe=timed,
                                               after_training=True, chained=chained)
        return [self.finding(evidence, title=title + self._measured(timed), lost_s=lost,
                             pct=100 * lost / wall if wall > 0 else 0.0, where=where[:4],
                             confidence="measured" if timed else None)]

    @staticmethod
    def _trained(facts: Facts) -> bool:
        """The program stepped an optimizer (its clock, its ops, or a recorded optimizer)."""
        a = facts.analysis
        return ((facts.clock or {}).get("kind") == "optimizer" or bool(a and a.ops.training_ops)
                or bool(facts.sites_of("optimizer")))

    def _overhead(self, facts: Facts) -> tuple[float, dict | None]:
        """The share of a model call's time that autograd costs, and the probe it comes from: 1 -
        t_inference / t_grad when the autograd probe timed a call (capture/autograd_probe.py),
        else `AUTOGRAD_OVERHEAD`, with no probe."""
        probe = (facts.env.get("settings_at_end") or {}).get("autograd_probe") or {}
        ratio = probe.get("inference_over_grad")
        if isinstance(ratio, (int, float)) and ratio > 0:
            return max(0.0, 1.0 - ratio), probe
        return self.AUTOGRAD_OVERHEAD, None

    @staticmethod
    def _measured(probe: dict | None) -> str:
        """What the probe measured, for the title."""
        if not probe:
            return ""
        return (f" (one call of {probe.get('module') or 'the model'} took {probe['seconds_with_grad'] * 1e3:.0f} ms "
                f"with autograd, {probe['seconds_inference_mode'] * 1e3:.0f} ms under inference_mode)")

    def _in_threads(self, facts: Facts) -> list[Finding]:
        """Model calls made in other threads, most building a graph, in a run that does not train
        (no optimizer clock, no backward in the trace): the capture's own counts and timing."""
        clock = facts.clock
        calls = clock.get("thread_module_calls") or 0
        with_grad = clock.get("thread_module_outputs_with_grad") or 0
        if calls < self.MIN_THREAD_CALLS or with_grad / calls < self.MIN_GRAD_SHARE or clock.get("kind") == "optimizer":
            return []
        if facts.analysis and facts.analysis.ops.training_ops:
            return []
        threads = max(int(clock.get("thread_module_threads") or 1), 1)
        spent = float(clock.get("thread_module_s") or 0.0)
        wall = facts.run_wall_s
        overlapped = min(spent / threads, wall) if wall > 0 else spent / threads  # the threads run side by side
        overhead, probe = self._overhead(facts)
        lost = overlapped * overhead
        where = self._grad_context(facts, where_of((clock.get("thread_module_sites") or [])[:1]))
        title = (f"{with_grad} of {calls} model calls in {threads} worker thread{'s' if threads > 1 else ''} built an "
                 "autograd graph that no backward used" + self._measured(probe))
        evidence = AutogradInInferenceEvidence(model_calls=calls, outputs_with_grad=with_grad, backward_in_trace=False,
                                               estimated_overhead=overhead, threads=threads, model_calls_s=spent,
                                               share_of="run_wall", probe=probe)
        return [self.finding(evidence, title=title, lost_s=lost, pct=100 * lost / wall if wall > 0 else 0.0,
                             where=where, confidence="measured" if probe else None)]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """The main thread waiting (off the CPU) while the worker threads run the model: its wait
        is their model calls' time, of which this cause is a part. After training: the model's
        ops and Python under the calling line (its time holds what the kept graphs cost)."""
        if cause.evidence.get("after_training") and symptom.kind in ("python_hotspot", "op_hotspot"):
            calls = {(w.file, w.line) for w in cause.where[:1]}  # the model-call line: its ops and Python ran below it
            if any((w.file, w.line) in calls for w in symptom.where):
                return Explanation(seconds=min(symptom.time_lost_s, cause.time_lost_s))
            return None
        threads = cause.evidence.get("threads") or 0
        if not threads or not symptom.evidence.get("waits"):
            return None
        return Explanation(seconds=min(symptom.time_lost_s, (cause.evidence.get("model_calls_s") or 0.0) / threads))

    @staticmethod
    def _model_call(facts: Facts, hot: list[Where]) -> list[Where]:
        """The hottest sampled line, or where a model's `forward` holding it was called from: the
        line a grad-mode fix goes around (the capture's module sites say it when it counted)."""
        path = facts.with_callers(hot[:1])
        for i, frame in enumerate(path):
            if frame.function.rsplit(".", 1)[-1] != "forward":
                return [frame] if i else hot[:1]
        return hot[:1]

    @staticmethod
    def _trains_after(clock: dict) -> bool:
        """The optimizer stepped after the window began: its forward ops were a training step's,
        cut before their backward (a window bounded by memory inside one long step)."""
        start = clock.get("window_start_ns")
        return clock.get("kind") == "optimizer" and (start is None or any(t > start for t in clock.get("ticks") or ()))

    def _grad_context(self, facts: Facts, where: list[Where]) -> list[Where]:
        """The line that decides the model call's grad mode first: the innermost `with` around
        the call, in its function or up its sampled call path, that sets the grad mode
        (`inference_mode(False)`, `enable_grad()`) or leaves it to a condition
        (`... if fixed else nullcontext()`): the call is right, the context around it is what to
        change. Without one, the outermost loop around the call follows it (the loop to wrap)."""
        if not where:
            return where
        call = where[0]
        frames = facts.with_callers([call])
        for frame in frames:
            for stmt in reversed(enclosing(frame.file, frame.line)):
                if isinstance(stmt, (ast.With, ast.AsyncWith)) and \
                        any(names_in(item.context_expr) & set(self.GRAD_CONTEXTS) for item in stmt.items):
                    context = Where(file=frame.file, line=stmt.lineno, function=frame.function)
                    return [context] + [w for w in where if (w.file, w.line) != (context.file, context.line)]
        loops = [s for s in enclosing(call.file, call.line) if isinstance(s, LOOPS)]
        if loops and loops[0].lineno != call.line:
            return [*where, Where(file=call.file, line=loops[0].lineno, function=call.function)]
        return where

    def fix(self, evidence: AutogradInInferenceEvidence) -> str:
        fix = ("Run inference under `with torch.inference_mode():` (or torch.no_grad()); model.eval() "
               "alone does not turn autograd off.")
        if evidence.after_training:
            fix = ("Run the evaluation or sampling after training under `with torch.inference_mode():` (or "
                   "torch.no_grad(), or decorate its function with @torch.no_grad()); model.eval() alone does not "
                   "turn autograd off.")
        if evidence.chained:
            fix += (" Each call here is fed the previous call's output, so without it every step's graph and "
                    "activations stay in memory until the loop ends (or .detach() what you feed back).")
        return fix
