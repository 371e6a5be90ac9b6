"""Rules on how the program drives autograd: model calls that record graphs no backward uses
(inference without `inference_mode`, read from the capture's module hooks and autograd probe),
and a backward pass run again through a graph it keeps (`retain_graph=True`), read from the
window's backward nodes (analysis/ops.backward_nodes) and the user's `.backward()` lines."""

from __future__ import annotations

import ast
from typing import Any

from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts, where_of
from ..rule import DOCS, Explanation, Rule, register
from ..source import LOOPS, call_name, enclosing, in_loop, names_in, walk_own
from .calls import model_call_sites
from .ops_evidence import is_backward_op


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
    carried_at: int | None = None
    """The line handing a pass's outputs to the next pass without `.detach()` (a state carried
    from window to window): every backward then runs through all the earlier passes again."""
    carried: list[str] = []
    """The names carried that way (`pos`, `vel`)."""


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


def carried_graph(file: str, line: int) -> tuple[int, list[str]] | None:
    """(line, names) of an unconditional statement of the loop holding the backward at `line`,
    after it, that rebinds names the loop reads before the backward to values made in the loop
    (`pos, vel = pos_end, vel_end`, from `pred, pos_end, vel_end = rollout(pos, vel)`), with no
    `.detach()`: the next pass's graph hangs on this one's. None when there is none or unclear."""
    path = enclosing(file, line)
    loop = next((s for s in reversed(path[:-1]) if isinstance(s, (ast.For, ast.While))), None) if path else None
    if loop is None:
        return None
    body = loop.body
    at = next((i for i, st in enumerate(body) if st.lineno <= line <= (st.end_lineno or st.lineno)), None)
    if at is None:
        return None
    names = [(n, i) for i, st in enumerate(body[:at + 1]) for n in ast.walk(st) if isinstance(n, ast.Name)]
    made = {n.id for n, i in names if i < at and isinstance(n.ctx, ast.Store)}
    read = {n.id for n, _ in names if isinstance(n.ctx, ast.Load)}
    for st in body[at + 1:]:
        if not isinstance(st, ast.Assign) or any(call_name(c) == "detach" for c in ast.walk(st.value)
                                                 if isinstance(c, ast.Call)):
            continue
        targets = [n.id for t in st.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        sources = {n.id for n in ast.walk(st.value) if isinstance(n, ast.Name)}
        carried = [t for t in targets if t in read]
        if carried and sources and sources <= made:
            return st.lineno, carried
    return None


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
        carried = carried_graph(at.file, at.line)
        if carried is not None:  # the state handed on keeps its graph: that line is the one to change
            evidence.carried_at, evidence.carried = carried
            where = [Where(file=at.file, line=carried[0], function=at.function), *where]
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
        if evidence.carried_at is not None:
            names = ", ".join(evidence.carried)
            return (f"Line {evidence.carried_at} hands this pass's {names} to the next pass with their graph, so "
                    "every backward runs through all the earlier passes again (retain_graph=True only keeps "
                    f"that from failing): detach them there ({names} = ... .detach(), truncated "
                    "backpropagation) and drop retain_graph=True; to learn across passes on purpose, sum the "
                    "passes' losses and call backward once.")
        return ("Add the losses up and call backward once (`sum(losses.values()).backward()`, or "
                "torch.autograd.backward(list_of_losses)): the gradients are the same sums, the shared part of the "
                "graph is differentiated once instead of once per loss, and retain_graph=True (which keeps every "
                "activation alive between the calls) is no longer needed.")


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


class UnsteppedGradientsEvidence(Record):
    module: str
    params: int
    """Parameters that got a gradient but are in no optimizer."""
    numel: int
    with_grad_numel: int
    """Elements of all the model's parameters that got a gradient."""
    names: list[str]
    backward_share: float
    """The backward passes' share of the window (the backward nodes' time)."""


@register
class UnsteppedGradients(Rule[UnsteppedGradientsEvidence]):
    """Backward computes gradients for parameters no optimizer updates: a backbone "frozen" by
    leaving it out of the optimizer while it keeps `requires_grad=True` (a linear probe, a
    fine-tuned head), so every backward runs through it and every forward keeps its activations
    for gradients nothing reads. Seen by the capture at each optimizer's first step
    (capture/unstepped.py): the trained model's parameters that hold a gradient and are in no
    optimizer.

    Time lost: the backward nodes' time in the window, times the unstepped parameters' share of
    the elements that got a gradient (the frozen part's weight gradients and the activation
    gradients flowing into it)."""

    kind = "unstepped_gradients"
    summary = "Gradients are computed for parameters no optimizer updates (freeze them with requires_grad_(False))."
    docs = "https://pytorch.org/docs/stable/notes/autograd.html#setting-requires-grad"
    evidence_type = UnsteppedGradientsEvidence
    saving_basis = ("the backward nodes' time times the unstepped parameters' share of the elements that got a "
                    "gradient")
    explains = ("op_hotspot",)
    MIN_NUMEL_SHARE = 0.2
    """A few stray parameters (a buffer-like scale left out) are not a frozen part."""
    MIN_SHARE = 0.05
    """What freezing would save must be a twentieth of the window."""

    def check(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        found = (facts.env.get("settings_at_end") or {}).get("unstepped_gradients") or {}
        numel, total = int(found.get("numel") or 0), int(found.get("with_grad_numel") or 0)
        if a is None or facts.window_s <= 0 or total <= 0 or numel < self.MIN_NUMEL_SHARE * total:
            return []
        backward = min(sum(n.total_us for n in a.ops.backward_nodes) / 1e6 / facts.window_s, 1.0)
        saving = backward * numel / total
        if saving < self.MIN_SHARE:
            return []
        evidence = UnsteppedGradientsEvidence(
            module=str(found.get("module") or ""), params=int(found.get("params") or 0), numel=numel,
            with_grad_numel=total, names=list(found.get("names") or []), backward_share=backward)
        title = (f"{evidence.params} parameters ({100 * numel / total:.0f}% of the elements that get a gradient) "
                 "are in no optimizer: backward computes their gradients for nothing")
        lost = saving * facts.window_s
        # a whole top-level module left out (a distillation's teacher): the lines calling it, where
        # torch.no_grad() goes, lead; the optimizer's line follows
        owners = {name.split(".", 1)[0] for name in evidence.names}
        trained = set(evidence.module.split(" + "))  # the top-level modules the step ran
        whole = len(owners) == 1 and len(trained) > 1 and owners <= trained  # one of several, not a part of one
        called = [s for s in model_call_sites(facts) if whole and s.get("module") in owners]
        return [self.finding(evidence, title=title, lost_s=lost, pct=facts.pct(lost),
                             where=where_of([*called[:2], *facts.sites_of("optimizer")[:1]]))]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """A backward op dominating the window is, in part, the frozen part's backward."""
        if symptom.ops and all(is_backward_op(op) for op in symptom.ops):
            return Explanation(seconds=min(symptom.time_lost_s, cause.time_lost_s))
        return None

    def fix(self, evidence: UnsteppedGradientsEvidence) -> str:
        names = ", ".join(evidence.names[:3])
        return (f"Freeze what the optimizer leaves out ({names}...): call .requires_grad_(False) on that part of the "
                "model (e.g. model.encoder.requires_grad_(False)) before building the optimizer, or run it under "
                "torch.no_grad(); backward then stops at the trained part and its activations are not kept. If "
                "those parameters should train, add them to the optimizer.")
