"""The model given the same thing again: across calls, the same unchanged input (a corpus encoded
at every request, or re-encoded each time a too-small cache evicts it); within a call, the same
rows many times (a request's features copied to every candidate, `user_ids[row_of]` with `row_of`
from `repeat_interleave`, before a row-wise tower). Seen by the capture's module hooks
(capture/call_inputs.py: each input's identity and sampled content, and each 2-D input's share
of distinct rows), with the lines that keep a cache or repeat the rows read from the source."""

from __future__ import annotations

import ast
from typing import ClassVar

from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts, where_of
from ..rule import DOCS, Explanation, Rule, register
from ..source import _tree, function_at
from .calls import ModelCallsEvidence, _SiteRule, _under_site, arithmetic_share, model_call_sites, sampled_under


def workers_share(facts: Facts, site: dict, line: dict) -> float:
    """`sampled_under` the line; for a model called in worker threads (a server's pool), of the
    time the sampled thread did not spend waiting on them (`waits_on_thread`: its samples there
    stood for the workers', whose own lines the watcher's stand-in samples name): a dispatcher
    blocked half the run on a semaphore until a worker frees a slot goes as fast as the workers."""
    share = sampled_under(facts, line["file"], int(line["line"]))
    threaded = {(s.get("file"), s.get("line")) for s in (facts.clock or {}).get("thread_module_sites") or []}
    if (site.get("file"), site.get("line")) not in threaded:
        return share
    window = (facts.python or {}).get("window") or {}
    total = window.get("sampled_s") or 0.0
    waiting = sum(ln["total_s"] for ln in window.get("lines", []) if ln.get("waits_on_thread"))
    return min(share * total / (total - waiting), 1.0) if total - waiting > 0 else share


@register
class RepeatedCall(_SiteRule):
    """The model is called again on the very tensor it was given before, unchanged (a corpus
    encoded again at every request, a constant batch scored every step), or on one rebuilt with
    the same content, in a program that does not train: the output is the same every time, and
    could be computed once and kept. Seen by the capture's module hooks (the same tensor object
    with the same version counter as a recent call's input, or a large input whose sampled
    elements match a recent one's, at the same line), which also note the line that called from
    there: where the constant input comes from, and where the result can be kept. A
    `functools.lru_cache` in those files keeping fewer results than the distinct inputs that
    come back is named first, with the cache-size fix (`undersized_cache`).

    Time lost: the sampled share of the steady state under that calling line (at most the model
    call's own line's: the caller may make other calls; with a cache too small, all the cached
    function's work, its preprocessing too), times the share of its calls that repeated an
    input: the first computation of each input stays (a corpus encoded in 8 chunks, 9 times: 64
    of 72 calls go). A model called in worker threads takes its share of the time the sampled
    thread did not spend waiting on them (`workers_share`)."""

    kind = "repeated_call"
    summary = "The model is called again and again on the same unchanged input (compute it once, keep it)."
    docs = DOCS["tuning"]
    evidence_type = ModelCallsEvidence
    saving_basis = ("the sampled time under the line that passes the unchanged input again, times the share of its "
                    "calls that repeated an input (each input's first computation stays)")
    MIN_REPEATS = 10
    """Fewer repeats are a warm-up or a check, not a loop recomputing a constant."""
    MIN_SHARE = 0.10
    """What keeping the result would save must be a tenth of the steady state to be worth it."""
    MAX_REPEATED_SHARE = 0.9
    """The line also takes other inputs (a query between two encodings of the corpus), or other
    lines call a model on new inputs (each request's own work): when nearly every call repeats
    one input and nothing else varies, the loop is a benchmark timing one call (the profiler
    tutorial's), whose repetition is its point."""
    BENCHMARK_INPUTS = 2
    """A benchmark times one input (or two); a program asking again for 25 images' embeddings
    out of 40 (a matcher re-embedding its gallery for every query) is not one."""
    MIN_VARIED_SHARE = 0.5
    """Calls on new inputs at another line, per repeated call, that make the repeats a request's
    constant part rather than a benchmark's loop."""
    explains: ClassVar[tuple[str, ...]] = (*_SiteRule.explains, "unbatched_calls")

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """Requests served one at a time whose time is mostly the constant recomputed for each
        (a catalog encoded again per request, under the request loop): the per-request calls'
        sampled time holds the recomputation, which keeping its result removes."""
        if symptom.kind == "unbatched_calls":  # the repeated call's lines (the call, the model's) under a request's
            if not any(_under_site(c, w, facts) for c in cause.where[:2] for w in symptom.where):
                return None
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s))
        return super().explained(cause, symptom, facts)

    def check(self, facts: Facts) -> list[Finding]:
        if (facts.clock or {}).get("kind") == "optimizer" or (facts.analysis and facts.analysis.ops.training_ops):
            return []  # training: the weights change between two calls on the same input
        out = []
        sites = model_call_sites(facts)
        for site in sites:
            repeated = site.get("repeated") or 0
            origins = site.get("repeated_from") or []
            varied = max(((s.get("calls") or 0) - (s.get("repeated") or 0) for s in sites if s is not site), default=0)
            benchmark = repeated > self.MAX_REPEATED_SHARE * (site.get("calls") or 0) \
                and varied < self.MIN_VARIED_SHARE * repeated \
                and int(site.get("repeated_inputs") or 1) <= self.BENCHMARK_INPUTS
            if repeated < self.MIN_REPEATS or benchmark:
                continue
            origin = origins[0] if origins else site
            calls = site.get("calls") or 0
            # the origin's own callers: a helper (`encode_corpus`) called again for every request
            where = facts.with_callers(where_of([origin] if origin is site else [origin, site]))[:4]
            distinct = int(site.get("repeated_inputs") or 0)
            cache = undersized_cache(list(dict.fromkeys(w.file for w in where)), distinct)
            share = workers_share(facts, site, origin)
            if origin is not site and cache is None:  # the origin may call the model at other lines too
                share = min(share, workers_share(facts, site, site) or share)  # (test-time flips); a cache's
                # miss redoes all the cached function's work, its decoding and preprocessing with the model
            firsts = max(int(site.get("repeated_inputs") or 1), 1)  # each input's first computation stays
            saving = share * repeated / (repeated + firsts)
            if saving < self.MIN_SHARE:
                continue
            evidence = ModelCallsEvidence(calls=calls, matching_calls=repeated, calls_share=share,
                                          work_share=arithmetic_share(facts), share_kept=1.0 - saving / share)
            if cache is not None:  # the results were kept, but evicted before they were asked again
                evidence.cache_at, evidence.cache_entries, evidence.distinct_inputs = cache[1], cache[2], distinct
                where = [Where(file=cache[0], line=cache[1], function=function_at(cache[0], cache[1])), *where][:4]
            out.append(self.found(evidence, f"{repeated:,} model calls are given again an input they had before, "
                                            f"unchanged: {100 * saving:.0f}% of the time recomputes the same output",
                                  saving, facts, where))
        return out[:1]

    def fix(self, evidence: ModelCallsEvidence) -> str:
        if evidence.cache_at is not None:
            return (f"The lru_cache at line {evidence.cache_at} keeps {evidence.cache_entries} results "
                    f"(functools' default is 128), fewer than the ~{evidence.distinct_inputs} distinct inputs that "
                    "come back: each is evicted before it is asked again, and the model computes it anew. Raise "
                    "maxsize above the working set (a few times the distinct inputs; maxsize=None keeps all), or "
                    "key the cache on something smaller than the input when memory is the limit.")
        return ("Compute it once and keep the result (in __init__, or cached by the input), then reuse it: the "
                "same input through the same weights gives the same output every call. Recompute only when the "
                "input or the model changes.")



LRU_CACHE_DEFAULT = 128
"""`functools.lru_cache`'s maxsize when none is given."""


def undersized_cache(files: list[str], distinct: int) -> tuple[str, int, int] | None:
    """(file, line, maxsize) of the first `functools.lru_cache` of `files` (a decorator, bare or
    called, or a call wrapping a function) keeping fewer results than `distinct` inputs: a
    working set larger than the cache is evicted before it comes back. A maxsize that is not a
    literal, or None (unbounded), is not judged. None when there is none."""
    for file in files:
        tree = _tree(file)
        if tree is None:
            continue
        for node in ast.walk(tree):
            decorators = node.decorator_list if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
            bare = [d for d in decorators if _lru_cache_name(d)]  # `@lru_cache`: the default size
            calls = [node] if isinstance(node, ast.Call) and _lru_cache_name(node.func) else []
            for found in [*bare, *calls]:
                size = LRU_CACHE_DEFAULT if not isinstance(found, ast.Call) else _maxsize(found)
                if size is not None and size < distinct:
                    return file, found.lineno, size
    return None


def _lru_cache_name(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "lru_cache" or \
        isinstance(node, ast.Attribute) and node.attr == "lru_cache"


def _maxsize(call: ast.Call) -> int | None:
    """The literal maxsize of an `lru_cache(...)` call: its keyword or first argument, else the default."""
    given = next((k.value for k in call.keywords if k.arg == "maxsize"), call.args[0] if call.args else None)
    if given is None:
        return LRU_CACHE_DEFAULT
    return given.value if isinstance(given, ast.Constant) and type(given.value) is int else None


class RepeatedRowsEvidence(Record):
    calls_looked: int
    """Model calls at the line whose 2-D inputs were looked at for repeated rows."""
    rows: int
    """The mean number of rows of the most repeated input."""
    distinct_share: float
    """The mean share of distinct rows in it (of the first 65,536 rows)."""
    calls_share: float
    """The sampled share of the steady state spent in those calls (the line and all below it)."""
    argument: str | None = None
    """The call's argument holding the repeated rows (its position from 0, or its keyword)."""
    repeated_at: int | None = None
    """The line of the calling file that repeats the rows (an index made by `repeat_interleave`,
    `.repeat`, `.expand`, `.tile`), nearest before the call."""


REPEATING_CALLS = frozenset({"repeat_interleave", "repeat", "expand", "expand_as", "tile", "broadcast_to"})
"""Calls whose result holds the same rows several times, or an index that picks them so."""


@register
class RepeatedRows(Rule[RepeatedRowsEvidence]):
    """A top-level model call is given an input most of whose rows are copies of a few (the
    request's user features copied to each of its 300 candidates before a two-tower ranker): a
    row-wise model (an MLP tower, an embedding lookup and pooling) computes each distinct row as
    many times as it is repeated. Computing the distinct rows once and repeating the output (or
    gathering it per candidate after the tower) gives the same result.

    Time lost: the sampled share of the steady state under the calling line, times the share of
    its most repeated input's rows that are copies: an upper bound (the model's other inputs, the
    candidates' own rows, still cost what they cost)."""

    kind = "repeated_rows"
    summary = "The model computes the same input rows many times in each call (rows repeated before the model)."
    docs = "https://pytorch.org/docs/stable/generated/torch.unique.html"
    evidence_type = RepeatedRowsEvidence
    confidence = "upper_bound"
    saving_basis = ("the sampled time under the calling line, times the share of its most repeated input's rows "
                    "that are copies of another")
    explains: ClassVar[tuple[str, ...]] = ("python_hotspot", "dispatch_overhead", "op_hotspot")
    MIN_LOOKS = 3
    """Calls looked at before a pattern is a habit of the line, not one odd batch."""
    MAX_DISTINCT = 0.5
    """At least half the rows are copies: each distinct row is computed twice or more."""
    MIN_SHARE = 0.10
    """What computing each row once would save must be a tenth of the steady state."""

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """The model's own lines and ops while called so: the copies' work is theirs."""
        site = cause.where[-1] if cause.where else None
        if site is None or symptom.kind not in self.explains or not symptom.where:
            return None
        if any(_under_site(w, site, facts) for w in symptom.where[:1]):
            return Explanation(symptom.time_lost_s)
        return None

    def check(self, facts: Facts) -> list[Finding]:
        out = []
        for site in model_call_sites(facts):
            looked, distinct = site.get("rows_looked") or 0, site.get("distinct_rows_share")
            if looked < self.MIN_LOOKS or distinct is None or distinct > self.MAX_DISTINCT:
                continue
            share = workers_share(facts, site, site)
            saving = share * (1.0 - distinct)
            if saving < self.MIN_SHARE:
                continue
            argument = site.get("repeated_rows_argument")
            ev = RepeatedRowsEvidence(calls_looked=looked, rows=int(site.get("rows_mean") or 0),
                                      distinct_share=distinct, calls_share=share,
                                      argument=None if argument is None else str(argument),
                                      repeated_at=rows_repeated_at(site["file"], int(site["line"])))
            where = where_of([site])
            if ev.repeated_at is not None:
                where = [Where(file=site["file"], line=ev.repeated_at,
                               function=function_at(site["file"], ev.repeated_at)), *where]
            lost = saving * facts.window_s
            copies = 1.0 / max(distinct, 1e-6)
            out.append(self.finding(
                ev, title=f"the model's input holds each distinct row ~{copies:,.0f} times ({ev.rows:,} rows, "
                          f"{100 * distinct:.1f}% distinct): {100 * saving:.0f}% of the time computes the same rows "
                          "again", lost_s=lost, pct=facts.pct(lost), where=where))
        return sorted(out, key=lambda f: -f.time_lost_s)[:1]

    def fix(self, evidence: RepeatedRowsEvidence) -> str:
        at = f" (line {evidence.repeated_at})" if evidence.repeated_at else ""
        return (f"Run the model on the distinct rows before repeating them{at}: encode each user or request once "
                "and repeat or gather the output per candidate after the tower (`user_vec[row_of]`), not the "
                "input before it. Where the copies are not made by the program, `torch.unique(x, dim=0, "
                "return_inverse=True)` gives the distinct rows and the index to spread their outputs back.")


def rows_repeated_at(file: str, line: int) -> int | None:
    """The line of `file` that repeats rows: the call's own line when it does, else the nearest
    before `line` (else after it) of an index by a name assigned from `repeat_interleave`
    (`history[row_of]`), then of a call that repeats (`REPEATING_CALLS`: `.repeat(n, 1)`,
    `.expand(n, -1)`) not merely making such an index. None when the file holds none or cannot
    be read."""
    tree = _tree(file)
    if tree is None:
        return None
    index_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and _called(node.value) == "repeat_interleave":
            index_names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    indexed: set[int] = set()
    repeating: set[int] = set()
    for stmt in ast.walk(tree):
        if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and node.slice.id in index_names:
                indexed.add(stmt.lineno)
            elif isinstance(node, ast.Call) and _called(node) in REPEATING_CALLS \
                    and not (isinstance(stmt, ast.Assign) and _called(node) == "repeat_interleave"
                             and any(isinstance(t, ast.Name) and t.id in index_names for t in stmt.targets)):
                repeating.add(stmt.lineno)
    if line in indexed | repeating:  # the call's own statement repeats them (`model(q.expand(n, -1))`)
        return line
    for found in (indexed, repeating):
        if found:
            before = [n for n in found if n <= line]
            return max(before) if before else min(found)
    return None


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
