"""Rules on how the program calls its model: once per sample instead of once per batch, on a
whole prefix again for every generated token, on the same unchanged input again, or on batches
padded far past their longest sequence. Read from the capture's module hooks, which note the
tensor inputs of every top-level module call at the user's line that made it
(capture/call_inputs.py), and from the sampled time under that line."""

from __future__ import annotations

import ast
from typing import Any, ClassVar

import msgspec
import numpy as np

from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts, where_of
from ..idioms import chunk_size_setting, loader_lines_of_loop
from ..padding import fixed_length_lines, pads_to_max_length
from ..rule import DOCS, Explanation, Rule, register
from ..source import _tree, argument_assigned_at, calls_backward, enclosing, function_at, repeats


class ModelCallsEvidence(Record):
    calls: int
    """Top-level module calls made at the line."""
    matching_calls: int
    """Of them, the calls that show the pattern (a batch of one; an input grown by one)."""
    calls_share: float
    """The sampled share of the steady state spent in those calls (the line and all below it)."""
    work_share: float
    """Of the profiled window, the ops' own time beyond the per-op floor: the arithmetic."""
    mean_length: float | None = None
    """The mean length of the grown dimension (generation: the prefix fed again)."""
    share_kept: float = 0.0
    """What the fixed program still spends of the calls' time, as a share of it."""
    padded_length: float | None = None
    """The mean length the padded batches were given."""
    longest_length: float | None = None
    """The mean length of each padded batch's longest sequence: what it needed."""
    backward_share: float = 0.0
    """The sampled share of the steady state under the lines calling `.backward()` (training:
    the padding's positions are paid again there)."""
    length_squared_share: float = 0.0
    """Of the ops' arithmetic, the share in ops growing with the square of the padded length
    (attention's scores): the padding costs them its square."""
    loader_at: int | None = None
    """The line making the DataLoader of batch_size=1 whose samples the model is called on."""
    batch_size_at: int | None = None
    """The line choosing that batch size (the variable passed as `batch_size=`), when not the loader's;
    or the line setting the chunk a loop calls the model on to one sample."""
    cache_off_at: int | None = None
    """The line turning off the cache the calls' branch depends on (`use_cache=False`)."""
    cache_at: int | None = None
    """The line making an `lru_cache` smaller than the inputs that come back (their results are
    evicted before they are asked again)."""
    cache_entries: int | None = None
    """That cache's maxsize."""
    distinct_inputs: int | None = None
    """Distinct inputs the model was given again."""


def model_call_sites(facts: Facts) -> list[dict[str, Any]]:
    """The lines that called top-level modules, the main thread's and other threads', with the
    capture's tallies of their inputs (none in runs recorded before them)."""
    clock = facts.clock or {}
    return [s for s in [*(clock.get("top_module_sites") or []), *(clock.get("thread_module_sites") or [])]
            if s.get("file") and s.get("line")]


def sampled_under(facts: Facts, file: str, line: int) -> float:
    """The share of the sampled steady state spent at `file:line` and in everything it called
    (`inclusive_lines`; in older runs, the sampled lines below it that name it as a caller)."""
    window = (facts.python or {}).get("window") or {}
    total = window.get("sampled_s") or 0.0
    if total <= 0:
        return 0.0
    inclusive = window.get("inclusive_lines")
    if inclusive is not None:  # every user line on the stacks (runs recorded before: the callers below)
        return min(sum(ln["total_s"] for ln in inclusive if (ln.get("file"), ln.get("line")) == (file, line))
                   / total, 1.0)
    spent = 0.0
    for ln in window.get("lines", []):
        if (ln.get("file"), ln.get("line")) == (file, line):
            spent += ln["total_s"]
            continue
        through = [c.get("share", 1.0) for c in ln.get("callers") or []
                   if (c.get("file"), c.get("line")) == (file, line)]
        if through:
            spent += ln["total_s"] * min(max(through), 1.0)
    return min(spent / total, 1.0)


def site_share(facts: Facts, site: dict[str, Any]) -> float:
    """The share of the steady state spent calling the model at `site`: sampled under its line
    (`sampled_under`); for a line only other threads ran (a server's worker; the sampler follows
    the main thread), the capture's own timing of those threads' model calls as a share of the
    whole run (their steady state is not known: a long model load makes it an underestimate),
    split between their lines by calls."""
    share = sampled_under(facts, site["file"], site["line"])
    clock = facts.clock or {}
    threaded = clock.get("thread_module_sites") or []
    at = (site["file"], site["line"])
    if share > 0 or at not in {(s.get("file"), s.get("line")) for s in threaded} or facts.run_wall_s <= 0:
        return share
    threads = max(int(clock.get("thread_module_threads") or 1), 1)
    calls = sum(s.get("calls") or 0 for s in threaded)
    spent = float(clock.get("thread_module_s") or 0.0) / threads * (site.get("calls") or 0) / max(calls, 1)
    return min(spent / facts.run_wall_s, 1.0)


def in_ops_share_under(facts: Facts, file: str, line: int) -> float | None:
    """Of the sampled time at `file:line` and the lines below it (those naming it as a caller),
    the part inside torch ops; None when the samples were not aligned with the trace's ops. The
    rest is Python (every module's `__call__`, hooks, the loop), which a batched call pays once."""
    lines = ((facts.python or {}).get("window") or {}).get("lines", [])
    total = inside = 0.0
    for ln in lines:
        here = (ln.get("file"), ln.get("line")) == (file, line)
        below = any((c.get("file"), c.get("line")) == (file, line) for c in ln.get("callers") or [])
        if not (here or below):
            continue
        if "outside_ops_s" not in ln:
            return None
        total += ln["total_s"]
        inside += max(ln["total_s"] - ln["outside_ops_s"], 0.0)
    return inside / total if total > 0 else None


def arithmetic_share(facts: Facts) -> float:
    """Of the profiled window, the ops' self time beyond the trace's per-op floor a call: the
    work a batched or cached program still does per element (the rest is per-call overhead)."""
    a = facts.analysis
    if a is None or facts.window_s <= 0:
        return 0.0
    floor = a.ops.dispatch.floor_op_us
    work_us = sum(o.beyond_floor_us(floor) for o in a.ops.by_name)
    return min(work_us / 1e6 / facts.window_s, 1.0)


ROW_PRODUCTS = frozenset({"aten::addmm", "aten::mm", "aten::matmul", "aten::linear"})
"""Products whose inputs may be one row by a matrix (a linear layer called on a batch of one)."""


def one_row_products_share(facts: Facts) -> float:
    """Of the profiled window, the self time beyond the per-op floor of products of one row by a
    matrix (`[1, K] x [K, N]`, from the recorded input shapes): each reads the whole matrix for one
    row, memory-bound, where a batched call reads it once for all its rows (measured: a 2048-wide
    MLP served one request at a time, 3.7x slower than in batches of 64)."""
    a = facts.analysis
    if a is None or facts.window_s <= 0:
        return 0.0
    floor = a.ops.dispatch.floor_op_us
    total_us = 0.0
    for row in a.ops.by_shape:
        if row.name not in ROW_PRODUCTS:
            continue
        dims = [d for d in row.input_dims() if len(d) == 2]
        if any(d[0] == 1 for d in dims) and any(min(d) > 1 for d in dims):
            total_us += row.beyond_floor_us(floor)
    return min(total_us / 1e6 / facts.window_s, 1.0)


SQUARE_PRODUCTS = frozenset({"aten::bmm", "aten::matmul", "aten::baddbmm", "aten::mm"})
"""Products whose result may be length by length (attention's scores, `q @ k.transpose(-2, -1)`)."""


def length_squared_share(facts: Facts, length: int) -> float:
    """Of the ops' arithmetic (their self time beyond the per-op floor), the share in ops that grow
    with the square of a sequence `length`, from the recorded input shapes: an input holding the
    length twice (attention's scores, their softmax, mask and the product with the values), or a
    product of `[.., length, d]` by `[.., d, length]`. A hidden size equal to the length passes
    for a square too (a 256-wide feed-forward at 256 positions): its ops then count as attention's."""
    a = facts.analysis
    if a is None or length <= 1:
        return 0.0
    floor = a.ops.dispatch.floor_op_us
    total_us = sum(o.beyond_floor_us(floor) for o in a.ops.by_name)
    square_us = 0.0
    for row in a.ops.by_shape:
        dims = row.input_dims()
        twice = any(d.count(length) >= 2 for d in dims)
        scores = (row.name in SQUARE_PRODUCTS and len(dims) >= 2 and len(dims[0]) >= 2 and len(dims[1]) >= 2
                  and dims[0][-2] == length and dims[1][-1] == length)
        if twice or scores:
            square_us += row.beyond_floor_us(floor)
    return min(square_us / total_us, 1.0) if total_us > 0 else 0.0


def _under_site(hot: Where, site: Where, facts: Facts) -> bool:
    """`hot` is the site, or a line that ran below it (its sampled callers name the site): the
    model's own lines while it was called that way."""
    if (hot.file, hot.line) == (site.file, site.line):
        return True
    for ln in ((facts.python or {}).get("window") or {}).get("lines", []):
        if (ln.get("file"), ln.get("line")) == (hot.file, hot.line):
            return any((c.get("file"), c.get("line")) == (site.file, site.line) for c in ln.get("callers") or [])
    return False


def cache_switched_off(file: str, line: int) -> int | None:
    """The line turning a cache off for the model call at `line`, when that call runs under an
    `if` on a cache flag (`if self.use_cache: ... else: logits = self.model(tokens)`): where the
    flag is given something other than True (`Generator(model, use_cache=FIXED)`, a keyword, or
    an assignment of False). None when none or unreadable."""
    path, tree = enclosing(file, line), _tree(file)
    if not path or tree is None:
        return None
    flags = {n.attr if isinstance(n, ast.Attribute) else n.id for stmt in path if isinstance(stmt, ast.If)
             for n in ast.walk(stmt.test) if isinstance(n, (ast.Attribute, ast.Name))
             and "cache" in (n.attr if isinstance(n, ast.Attribute) else n.id).lower()}
    if not flags:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in flags \
                and not (isinstance(node.value, ast.Constant) and node.value.value is True):
            return node.value.lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is False \
                and any(getattr(t, "id", getattr(t, "attr", None)) in flags for t in node.targets):
            return node.lineno
    return None


class _SiteRule(Rule[ModelCallsEvidence]):
    """What the two rules share: the site's sampled time is the cost; the model's Python, its
    tiny ops and their dominant op are symptoms of calling it that way."""

    explains: ClassVar[tuple[str, ...]] = ("python_hotspot", "dispatch_overhead", "op_hotspot")

    def found(self, evidence: ModelCallsEvidence, title: str, saving: float, facts: Facts,
              where: list[Where]) -> Finding:
        """The finding for a saving given as a share of the steady state."""
        lost = saving * facts.window_s
        return self.finding(evidence, title=title, lost_s=lost, pct=facts.pct(lost), where=where)

    @staticmethod
    def call_site(cause: Finding) -> Where | None:
        """The line calling the model (after the line setting a chunk of one, when named first)."""
        chunk = cause.evidence.get("batch_size_at") if cause.evidence.get("loader_at") is None else None
        return next((w for w in cause.where if w.line not in (chunk, cause.evidence.get("cache_off_at"))), None)

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        site = self.call_site(cause)
        if site is None:
            return None
        if symptom.kind in ("python_hotspot", "op_hotspot") and symptom.where \
                and _under_site(symptom.where[0], site, facts):
            return Explanation(symptom.time_lost_s)
        if symptom.kind == "dispatch_overhead" and any(_under_site(w, site, facts) for w in symptom.where):
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s))
        return None


@register
class UnbatchedCalls(_SiteRule):
    """The model is called once per sample, in a loop (`[model(x[None]) for x in batch]`): every
    call pays the Python of every module and the dispatch of every op for one row, which a batched
    call pays once for all of them. Seen by the capture's module hooks: nearly every call made at
    one line of the user's code takes a batch of one, many times, and the line repeats. Or, where
    the hooks do not look (a compiled model; calls after training's step clock took over), by a
    DataLoader made with `batch_size=1` and a sampled loop iterating that loader (read from the
    source: the name it iterates, assigned or passed to its function) that calls a module: the
    batch size's line is named first.

    Time lost: the sampled share of the steady state under that line (the calls and all below
    them), less what the batched call still does: the part of it inside torch ops (sampled, so
    neither the profiler nor the machine's load inflates it) times the ops' arithmetic share (their
    time beyond the per-op floor over the window), products of one row by a matrix left out (each
    reads the whole matrix for its row; batched, it is read once). The Python of every module call
    goes."""

    kind = "unbatched_calls"
    summary = "The model is called once per sample in a loop instead of once on a batch."
    docs = DOCS["tuning"]
    evidence_type = ModelCallsEvidence
    saving_basis = ("the sampled time under the calling line, less its part inside torch ops times their "
                    "arithmetic share (their time beyond the per-op floor): what a batched call still does")
    explains: ClassVar[tuple[str, ...]] = (*_SiteRule.explains, "launch_bound", "gpu_idle")
    MIN_CALLS = 200
    """Fewer calls of one line are too few for their per-call overhead to add up."""
    MIN_SINGLE_SHARE = 0.9
    """Nearly every call at the line has a batch of one: a last partial batch or a warm-up call
    does not make a loop of batches per-sample calls."""
    MIN_SHARE = 0.10
    """What batching would save must be a tenth of the steady state to be worth the change."""
    MAX_SAMPLE_ELEMENTS = 65_536
    """A sample this large (a 512 x 512 frame) keeps every call busy with its own arithmetic: the
    per-call overhead batching removes is small beside it (a video denoiser's frames)."""

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """On a GPU, a model called per sample launches its tiny kernels one row at a time and the
        GPU idles between them: the launches a batched call saves are the idle time (the symptom's
        lines, the model's, run under the calling line)."""
        if symptom.kind in ("launch_bound", "gpu_idle"):
            site = self.call_site(cause)
            if site is None or (symptom.where and not any(_under_site(w, site, facts) for w in symptom.where)):
                return None
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s))
        return super().explained(cause, symptom, facts)

    def check(self, facts: Facts) -> list[Finding]:
        out = []
        for site in model_call_sites(facts):
            calls, single = site.get("calls") or 0, site.get("batch_of_one") or 0
            if calls < self.MIN_CALLS or single < self.MIN_SINGLE_SHARE * calls:
                continue
            if (site.get("single_mean_elements") or 0) > self.MAX_SAMPLE_ELEMENTS:
                continue
            loop = self._loop_of(facts, site)
            if loop is None:
                continue
            share = max(sampled_under(facts, site["file"], site["line"]), sampled_under(facts, loop.file, loop.line))
            work = max(arithmetic_share(facts) - one_row_products_share(facts), 0.0)  # batched: one read of each matrix
            in_ops = in_ops_share_under(facts, site["file"], site["line"])
            kept = work if in_ops is None else in_ops * work
            saving = share * (1.0 - kept)
            if saving < self.MIN_SHARE:
                continue
            evidence = ModelCallsEvidence(calls=calls, matching_calls=single, calls_share=share, work_share=work,
                                          share_kept=kept)
            at = where_of([site])
            where = at if (loop.file, loop.line) == (site["file"], site["line"]) else [loop, *at]
            chunk = chunk_size_setting(site["file"], site["line"])  # `range(0, n, cfg.max_batch)`, max_batch = 1
            if chunk is not None:
                evidence.batch_size_at = chunk
                where = [Where(file=site["file"], line=chunk, function=function_at(site["file"], chunk)), *where]
            out.append(self.found(evidence, f"the model is called once per sample: {single:,} calls with a batch of "
                                            f"one at this line take {100 * share:.0f}% of the time",
                                  saving, facts, where))
        return (out or self._loader_of_one(facts))[:1]

    LOADER_NEXT = "_BaseDataLoaderIter.__next__"
    """The library frame of a line iterating a DataLoader (`for xb, yb in loader:`)."""
    MODULE_CALLS = ("Module._wrapped_call_impl", "Module._call_impl", "OptimizedModule.__call__")
    """The library frames of a line calling a module (eager, or compiled by torch.compile)."""

    def _loader_of_one(self, facts: Facts) -> list[Finding]:
        """A loop over a DataLoader of `batch_size=1` that calls a module: the capture's record of
        the loader and the sampled loop. For what the module hooks do not see: a compiled model,
        or calls after a better step clock took over (an evaluation sweep after training)."""
        loaders = [s for s in facts.sites_of("dataloader") if s.get("batch_size") == 1
                   and (s.get("sample_elements") or 0) <= self.MAX_SAMPLE_ELEMENTS]
        window = (facts.python or {}).get("window") or {}
        total, lines = window.get("sampled_s") or 0.0, window.get("lines") or []
        inclusive = window.get("inclusive_lines") or lines
        if not loaders or total <= 0:
            return []
        for header in lines:
            if not (header.get("library") or "").startswith(self.LOADER_NEXT):
                continue
            stmts = enclosing(header["file"], header["line"])
            loop = stmts[-1] if stmts else None
            if not isinstance(loop, ast.For) or loop.lineno != header["line"]:
                continue
            frame, lo, hi = (header["file"], header.get("function")), loop.lineno, loop.end_lineno or loop.lineno
            body = [ln for ln in inclusive if (ln.get("file"), ln.get("function")) == frame and lo <= ln["line"] <= hi]
            call = next((ln for ln in lines if (ln.get("file"), ln.get("function")) == frame
                         and lo <= ln["line"] <= hi and (ln.get("library") or "").startswith(self.MODULE_CALLS)), None)
            if call is None:
                continue
            share = min(sum(ln["total_s"] for ln in body) / total, 1.0)  # compiling's samples are left out
            work = arithmetic_share(facts)
            in_ops = in_ops_share_under(facts, call["file"], call["line"])
            kept = work if in_ops is None else in_ops * work
            if share * (1.0 - kept) < self.MIN_SHARE:
                continue
            made = loader_lines_of_loop(header["file"], header["line"])  # the loader this loop iterates
            loader = next((ld for ld in loaders if ld["file"] == header["file"] and ld["line"] in made), None)
            if loader is None:
                continue
            chosen = argument_assigned_at(loader["file"], loader["line"], "batch_size")
            where = [Where(file=loader["file"], line=chosen, function=function_at(loader["file"], chosen))] \
                if chosen else []
            where += where_of([loader, header, call])
            evidence = ModelCallsEvidence(calls=0, matching_calls=0, calls_share=share, work_share=work,
                                          share_kept=kept, loader_at=loader["line"], batch_size_at=chosen)
            title = (f"the model is called once per sample: a DataLoader with batch_size=1 (line {loader['line']}) "
                     f"feeds the loop at line {header['line']}, {100 * share:.0f}% of the time")
            return [self.found(evidence, title, share * (1.0 - kept), facts, where)]
        return []

    @staticmethod
    def _loop_of(facts: Facts, site: dict[str, Any]) -> Where | None:
        """The line that makes the calls once per sample: the calling line itself when it repeats
        (a loop or comprehension around it), else its sampled caller when that repeats (a policy's
        `act(obs[i])` helper called per environment)."""
        path = facts.with_callers(where_of([site]))
        for w in path[:2]:
            if repeats(w.file, w.line, w.function or ""):
                return w
        return None

    def fix(self, evidence: ModelCallsEvidence) -> str:
        if evidence.loader_at is not None:
            at = evidence.batch_size_at or evidence.loader_at
            return (f"Give the DataLoader a real batch size (line {at}: e.g. 256) and keep per-sample records by "
                    "splitting the batched outputs (torch.cat of the per-batch results, or .unbind()); at "
                    "batch_size=1 every sample pays the loader's fetch and collate, and every module's Python and "
                    "op dispatch (a compiled model's guards too).")
        if evidence.batch_size_at is not None:
            return (f"Line {evidence.batch_size_at} sets the chunk the loop calls the model on to one sample: raise "
                    "it (e.g. 64) and split the batched outputs per sample; called per sample, every module's Python "
                    "and every op's dispatch (on a GPU, every kernel launch) is paid once per row.")
        return ("Call the model once on a batch: stack the samples (torch.stack, or pad them to one length) and "
                "call it once, then split its output; called per sample, every module's Python and every op's "
                "dispatch is paid once per row. Requests that arrive one by one can be collected for a few "
                "milliseconds first (dynamic batching).")


@register
class UncachedGeneration(_SiteRule):
    """Autoregressive generation that feeds the whole prefix to the model again for every new
    token (no key/value cache): each call recomputes every earlier position, so generating N
    tokens costs O(N^2) positions instead of O(N). Seen by the capture's module hooks: most calls
    at one line take the previous call's input grown by one along one dimension.

    Time lost: the sampled share of the steady state under that line, times the arithmetic's
    share of the window (the ops' time beyond the per-op floor), less the one position in
    `mean_length` a cached call still computes; the calls' per-op overhead stays. On a GPU, the
    CPU ops' time is launch overhead, not the arithmetic, and the window sees only a few calls
    (early ones, short prefixes): there, when the model's calls are the step clock, each call's
    time beyond the shortest calls' (`SHORT_CALLS_PERCENTILE`) is what the prefix's growth cost,
    over the whole run, if more."""

    kind = "uncached_generation"
    summary = "Generation feeds the whole prefix to the model for every new token (no KV cache)."
    docs = "https://huggingface.co/docs/transformers/main/en/kv_cache"
    evidence_type = ModelCallsEvidence
    saving_basis = ("the sampled time under the calling line, times the ops' arithmetic share, less the one "
                    "position in the mean prefix length a cached call still computes")
    MIN_GROWN_CALLS = 16
    """Fewer calls growing by one are not a generation loop."""
    MIN_GROWN_SHARE = 0.5
    """Most calls at the line grow the input by one (a loop over prompts starts each anew)."""
    MIN_MEAN_LENGTH = 8.0
    """A prefix shorter than this on average costs little to recompute."""
    MIN_SHARE = 0.10
    """What a cache would save must be a tenth of the steady state to be worth the change."""
    SHORT_CALLS_PERCENTILE = 5
    """The calls of the shortest prefixes (a round's first tokens): what every call would cost
    with a cache, at most (a cached call computes one position)."""
    explains: ClassVar[tuple[str, ...]] = (*_SiteRule.explains, "padding_waste", "step_time_growth")

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """Padding of the very calls that recompute their prefix: with a cache each call takes the
        new token alone, and no padded prefix is computed again (an LM server padding each step's
        whole sequence); and steps growing with the prefix they compute again, all of that growth
        (with a cache a call computes one position, however long the prefix)."""
        if symptom.kind == "step_time_growth":
            return Explanation(symptom.time_lost_s)
        if symptom.kind == "padding_waste":
            call = self.call_site(cause)
            site = (call.file, call.line) if call is not None else None
            padded_here = site in {(w.file, w.line) for w in symptom.where}
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s)) if padded_here else None
        return super().explained(cause, symptom, facts)

    def check(self, facts: Facts) -> list[Finding]:
        out = []
        for site in model_call_sites(facts):
            calls, grown = site.get("calls") or 0, site.get("grew_by_one") or 0
            length = site.get("grown_mean_len") or 0.0
            if grown < self.MIN_GROWN_CALLS or grown < self.MIN_GROWN_SHARE * calls or length < self.MIN_MEAN_LENGTH:
                continue
            share = sampled_under(facts, site["file"], site["line"])
            work = arithmetic_share(facts)
            saving = share * work * (1.0 - 1.0 / length)
            if facts.analysis is not None and facts.analysis.gpu.present:
                saving = max(saving, self._growth_share(facts, calls))
            if saving < self.MIN_SHARE:
                continue
            evidence = ModelCallsEvidence(calls=calls, matching_calls=grown, calls_share=share, work_share=work,
                                          mean_length=length, share_kept=1.0 - work * (1.0 - 1.0 / length))
            where = where_of([site])
            switched = cache_switched_off(site["file"], site["line"])  # `use_cache=False` given to the generator
            if switched is not None:
                evidence.cache_off_at = switched
                where = [Where(file=site["file"], line=switched, function=function_at(site["file"], switched)), *where]
            out.append(self.found(evidence, f"{grown:,} model calls each recompute the whole prefix (one position "
                                            f"longer than the last, {length:.0f} on average) take {100 * share:.0f}% "
                                            "of the time", saving, facts, where))
        return out[:1]

    def _growth_share(self, facts: Facts, calls: int) -> float:
        """Of the steady state (the run after start-up), what each model call spent beyond the
        shortest calls, from one tick of the step clock to the next (the call and the sampling
        between calls), when the calls at the line are its ticks (the module clock)."""
        clock = facts.clock or {}
        ticks = clock.get("ticks") or []
        if clock.get("kind") != "module" or len(ticks) < 16 or abs(len(ticks) - calls) > 0.1 * calls:
            return 0.0
        took = np.diff(np.asarray(ticks, dtype=np.float64))
        took = took[took > 0]
        if not len(took):
            return 0.0
        floor = float(np.percentile(took, self.SHORT_CALLS_PERCENTILE))
        return min(float(np.clip(took - floor, 0.0, None).sum()) / max(facts.steady_s * 1e9, float(took.sum())), 1.0)

    def fix(self, evidence: ModelCallsEvidence) -> str:
        if evidence.cache_off_at is not None:
            return (f"Line {evidence.cache_off_at} turns the key/value cache off: turn it on, so that each call "
                    "feeds only the new token; re-running the whole prefix makes generation quadratic in its length.")
        return ("Keep a key/value cache and feed only the new token each call (Hugging Face: use_cache=True and "
                "past_key_values, or model.generate(); your own attention: append each step's keys and values to a "
                "preallocated cache); re-running the whole prefix makes generation quadratic in its length.")


@register
class PaddingWaste(_SiteRule):
    """Every batch is padded to a fixed maximum length far past its longest sequence
    (`padding="max_length"`, a collate function padding to `MAX_LEN`): the model computes every
    pad position in every layer, and attention pays for them squared. Seen by the capture's
    module hooks: the calls' token ids or padding mask (a 2-D integer or boolean input) end, in
    every row, with a run of one value, and even the batch's longest row leaves a large part of
    the length to it.

    Time lost: the sampled share of the steady state under the calling line, and, when the
    program trains, under the lines calling `.backward()`, times the ops' arithmetic share (their
    time beyond the per-op floor: each op's launch stays whatever the length), times what the
    batches' longest sequences would cut of it: the share of the padded length they did not need
    (each layer's arithmetic grows with the length), squared for the ops that grow with its square
    (attention's scores, read from the recorded shapes: `length_squared_share`)."""

    kind = "padding_waste"
    summary = "Batches are padded to a fixed maximum length far past their longest sequence."
    docs = "https://huggingface.co/docs/transformers/pad_truncation"
    evidence_type = ModelCallsEvidence
    saving_basis = ("the sampled time under the model-call line (and the backward lines when training), times "
                    "the ops' arithmetic share, times the share of the padded length past each batch's longest "
                    "sequence (of its square for attention's ops)")
    MIN_PADDED_CALLS = 4
    """Fewer padded calls are a warm-up or a check."""
    MIN_PADDED_SHARE = 0.5
    """Most looked-at calls at the line were padded past their longest row (a last batch alone is not a pattern)."""
    MIN_UNNEEDED = 0.25
    """The longest rows leave at least a quarter of the length to padding: less is close to what
    bucketing or a few lengths would give anyway."""
    MIN_SHARE = 0.05
    """What the shorter batches would save must be a twentieth of the steady state."""

    def check(self, facts: Facts) -> list[Finding]:
        out = []
        for site in model_call_sites(facts):
            padded, looked = site.get("padded") or 0, site.get("padding_looked") or 0
            length, needed = site.get("padded_mean_len") or 0.0, site.get("needed_mean_len") or 0.0
            if padded < self.MIN_PADDED_CALLS or padded < self.MIN_PADDED_SHARE * looked or length <= 0:
                continue
            unneeded = 1.0 - needed / length
            if unneeded < self.MIN_UNNEEDED:
                continue
            share = site_share(facts, site)
            backward = self._backward_share(facts)
            work = arithmetic_share(facts)
            # attention's part shrinks with the square of the length, the rest in proportion
            square = length_squared_share(facts, round(length)) if float(length).is_integer() else 0.0
            cut = square * (1.0 - (needed / length) ** 2) + (1.0 - square) * unneeded
            saving = min(share + backward, 1.0) * work * cut
            if saving < self.MIN_SHARE:
                continue
            evidence = ModelCallsEvidence(calls=site.get("calls") or 0, matching_calls=padded, calls_share=share,
                                          work_share=work, padded_length=length, longest_length=needed,
                                          backward_share=backward, share_kept=1.0 - work * cut,
                                          length_squared_share=square)
            title = (f"batches are padded to {length:.0f} positions where their longest sequence needs "
                     f"{needed:.0f}: {100 * unneeded:.0f}% of the model's work is padding")
            out.append(self.found(evidence, title, saving, facts, self._where(facts, site, length)))
        return out[:1]

    @staticmethod
    def _backward_share(facts: Facts) -> float:
        """The sampled share under the lines calling `.backward()` (0 when the program does not train)."""
        window = (facts.python or {}).get("window") or {}
        total = window.get("sampled_s") or 0.0
        if total <= 0:
            return 0.0
        spent = sum(ln["total_s"] for ln in window.get("inclusive_lines") or []
                    if ln.get("file") and calls_backward(ln["file"], int(ln["line"])))
        return min(spent / total, 1.0)

    @staticmethod
    def _where(facts: Facts, site: dict[str, Any], length: float) -> list[Where]:
        """Where the length is chosen first: in the user's files the trace or the sampler saw, the
        lines asking a tokenizer to pad to `max_length`, then those making a padded buffer of that
        fixed length (`torch.full((n, pad_len), PAD)` after `pad_len = MAX_LEN`); then the model
        call."""
        files = [site["file"], *(w.file for w in facts.lines_for_ops(None, limit=20))]
        window = (facts.python or {}).get("window") or {}
        files += [ln["file"] for ln in window.get("inclusive_lines") or [] if ln.get("file")]
        out: list[Where] = []
        for file in dict.fromkeys(files):
            # asking for max_length first (the program's choice), then the lines padding to it
            lines = pads_to_max_length(file)
            lines += [ln for ln in (fixed_length_lines(file, round(length)) if float(length).is_integer() else [])
                      if ln not in lines]
            out += [Where(file=file, line=ln, function=function_at(file, ln)) for ln in lines]
        for w in where_of([site]):
            if (w.file, w.line) not in {(o.file, o.line) for o in out}:
                out.append(w)
        return out[:6]

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """The model's ops and Python under its call (the last line named) are the padded work."""
        if not cause.where:
            return None
        return super().explained(msgspec.structs.replace(cause, where=cause.where[-1:]), symptom, facts)

    def fix(self, evidence: ModelCallsEvidence) -> str:
        return ("Pad each batch to its own longest sequence, not to the maximum length (Hugging Face: "
                "padding=\"longest\" or DataCollatorWithPadding; your own collate_fn: the longest length in the "
                "batch, a multiple of 8 if you like); group sequences of similar length into a batch (a sampler that "
                "buckets by length) to cut the rest, or pass nested tensors to skip the padding.")
