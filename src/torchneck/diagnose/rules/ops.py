"""Rules on the host ops of the steps: one dominant op, a convolution bias that BatchNorm
cancels (a tensor rebuilt every step: rebuilt.py; thousands of tiny ops: dispatch.py; float64
data: dtype.py)."""

from __future__ import annotations

import os
import re

from ...model.analysis import OpRow
from ...model.findings import Finding, Where
from ..chains import (
    CONVOLUTION_OPS,
    DECOMPOSITION_OPS,
    GRADIENT_FILL_OPS,
    INDEXING_OPS,
    broadcast_product,
    chain_ends_in_vector,
    dense_diagonal_distribution,
    determinant_of_product,
    diagonal_of_product,
    full_factorisation,
    gradient_asked_for,
    jacobian_kept_diagonal,
    kept_diagonal,
    multi_hot_made_at,
    one_hot_product,
    pairwise_comparison_count,
    pairwise_difference,
    separable_kernel,
    separable_share,
    thin_share,
    views_returned_near,
)
from ..dense import buffer_built_at, dense_built_in, densified_operand
from ..facts import Facts, where_of
from ..idioms import (
    copied_then_indexed,
    embedding_defined_at,
    factorises_invariant_matrix,
    invariant_call,
    inverse_then_multiply,
    sorted_then_searched,
    sorted_then_sliced,
)
from ..indexing import repeated_index
from ..line_fixes import backward_fix, line_idiom_fix
from ..loop_invariants import invariant_statement, reads_recomputed, restacks_window
from ..masks import mask_group_by, mask_loop_us
from ..rule import DOCS, Explanation, Rule, register
from ..source import (
    argument_assigned_at,
    function_at,
)
from .calls import model_call_sites, sampled_under
from .ops_evidence import AVOIDABLE_OPS, IDIOM_FIELDS, OpHotspotEvidence, is_backward_op


@register
class OpHotspot(Rule[OpHotspotEvidence]):
    """One operator dominates the steady state. When it moves, converts or creates data (a
    copy, a conversion, torch.cat in a loop) it is work a code change usually removes: `medium`
    at most (its time is an upper bound of the saving). When it is the model's own compute (a
    matmul, a convolution), it is where the time goes, not a problem: `info`, context for the
    rules that name a cause (dtype, tiny ops, threads), which explain it when they apply. A
    product whose operand the code made dense from a sparse tensor (`.to_dense()`, on the lines
    that run it or up their call path) is avoidable too: a sparse product skips the zeros. So is
    a selection by a boolean mask built per group inside a loop (`mask = key == k` then
    `x[mask]`, a group-by done one mask at a time): every pass scans the whole table; the mask's
    line is named first.

    A profiled window that does not hold the steady state's work (a slice taken during set-up
    when the program has no step clock) cannot name it: a line the sampler finds inside torch
    ops for much of the steady state, but hardly in the window, is reported from the samples.

    Slower ways to the op's result read from the source (idioms.py, loop_invariants.py,
    chains.py) make it a cause too: a broadcast product or a squared broadcast difference reduced
    (a matmul, `torch.cdist`), a value recomputed on every pass of its loop, a matrix chain
    multiplied left to right into a vector, a gradient asked of data the step indexes, every pair
    of two tensors compared to count them (a sort and `searchsorted`), and more. So is a gather
    or reduction fed, in most of its time, a view whose last dimension is not contiguous (a
    transposed tensor kept as it is: the trace's strides, `analysis/layouts.py`).

    Time lost: the op's self time, an upper bound (what removing the op entirely would save); for
    a per-group mask, the ops of the mask's line and the selecting ops of the lines using it
    (grouping once removes them all); for a recomputed value, all the ops of its line (or, for a
    helper called the same way on every pass of a loop, the sampled time under that call); for a
    squared broadcast difference or a one-hot product, the ops of its line (its sampled time, for
    the one-hot matrix) and the backward nodes differentiating them (`Facts.backward_us_at`); for
    pairs compared to count them, all the ops of the line; for a strided input, the op's self time
    in the calls fed it; for a line outside the window, its sampled time inside torch ops."""

    kind = "op_hotspot"
    summary = "One operator takes a large share of the steps (avoidable data movement, or context)."
    docs = DOCS["profiler"]
    evidence_type = OpHotspotEvidence
    confidence = "upper_bound"
    saving_basis = "the op's whole self time (the most removing or shrinking it could save)"
    max_severity = "medium"
    explains = ("python_hotspot",)
    MIN_SHARE = 0.20
    """One operator taking a fifth of the steady state is the place to look first."""

    MISSED_MIN_EXPECTED_S = 0.005
    """A line is called missing from the window only when, at its steady-state share, the window's
    samples should hold five of its 1 ms samples at least (94 % of the steady state against a
    window of 18 samples: 17 expected, none there); fewer are chance."""
    MISSED_FACTOR = 0.5
    """A line missed by the window takes under half its steady-state share there."""

    def check(self, facts: Facts) -> list[Finding]:
        top = self._top_op(facts)  # a line its idiom names is not a missed line of its own too
        idioms = {f.evidence.get(k) for f in top for k in IDIOM_FIELDS if k.endswith("_at")} - {None}
        found = [f for f in self._missed_lines(facts) if f.where[0].line not in idioms] + top
        named = {f.evidence.get("recomputed_at") for f in found}
        return found + [f for f in self._recomputed_lines(facts) if f.where[0].line not in named]

    def _recomputed_lines(self, facts: Facts) -> list[Finding]:
        """Lines whose ops take `MIN_SHARE` of the window together, none of them the top op, that
        compute the same value on every pass of their loop (`unit = F.normalize(self.table)` per
        query chunk): all their ops but the first pass's go."""
        if facts.window_s <= 0:
            return []
        by_line: dict[tuple[str, int, str], float] = {}
        for e in facts.ops_by_line:
            if e.get("file"):
                key = (e["file"], e["line"], e.get("function", ""))
                by_line[key] = by_line.get(key, 0.0) + e["self_us"] / 1e6
        out = []
        for (file, line, function), seconds in sorted(by_line.items(), key=lambda kv: -kv[1]):
            share = seconds / facts.window_s
            if share < self.MIN_SHARE:
                break
            if not invariant_statement(file, line):
                continue
            ev = OpHotspotEvidence(self_us=seconds * 1e6, count=0, mean_us=0.0, share=share, avoidable=True,
                                   recomputed_at=line,
                                   time_lost_is="upper bound (all the ops of the line, which the fix removes)")
            out.append(self.finding(ev, title=f"line {line} computes the same value on every pass of its loop: its "
                                              f"ops take {100 * share:.0f}% of the profiled time",
                                    lost_s=seconds, pct=facts.pct(seconds),
                                    where=[Where(file=file, line=line, function=function)]))
        return out

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """A value recomputed on every pass: the loop's lines using it spend, outside torch ops,
        the release of the previous pass's copy (a python_hotspot there) - time its ops do not count.
        A costlier way to a result at a line (a pairwise difference, a one-hot product): that
        line's Python time outside the ops (Tensor operators' wrappers, freeing the big
        intermediate: 18 % of a 230 MB broadcast difference's line) goes with the statement; the
        ops' time already bounds what replacing it saves."""
        hot = symptom.where[0] if symptom.where else None
        if hot is None or not cause.where or hot.file != cause.where[0].file:
            return None
        at = cause.evidence.get("recomputed_at")
        if at is not None and reads_recomputed(hot.file, at, hot.line):
            return Explanation(symptom.time_lost_s, adds=True)
        idiom_lines = {cause.evidence.get(f) for f in IDIOM_FIELDS if f.endswith("_at") and f != "recomputed_at"}
        if hot.line in idiom_lines:
            return Explanation(symptom.time_lost_s)
        return None

    def _missed_lines(self, facts: Facts) -> list[Finding]:
        """Lines inside torch ops for `MIN_SHARE` of the sampled steady state that the profiled
        window hardly holds: the trace describes other work."""
        steady = (facts.python or {}).get("window") or {}
        profiled = (facts.python or {}).get("profiled_window") or {}
        total, in_window = steady.get("sampled_s") or 0.0, profiled.get("sampled_s") or 0.0
        if total <= 0 or facts.window_s <= 0:
            return []
        w0 = ((facts.phases or {}).get("window_offsets_s") or (None,))[0]
        seen = {(ln["file"], ln["line"]): ln["total_s"] / in_window for ln in profiled.get("lines", [])}
        out = []
        for line in steady.get("lines", [])[:5]:
            if "outside_ops_s" not in line or line.get("waits_on_thread"):  # the other thread's line is named
                continue
            in_ops = line["total_s"] - line["outside_ops_s"]
            share = in_ops / total
            ended = w0 is not None and line.get("last_s") is not None and line["last_s"] <= w0  # before the window
            if share < self.MIN_SHARE or share * in_window < self.MISSED_MIN_EXPECTED_S and not ended \
                    or seen.get((line["file"], line["line"]), 0.0) >= self.MISSED_FACTOR * share:
                continue
            lost = share * facts.window_s
            ev = OpHotspotEvidence(self_us=in_ops * 1e6, count=0, mean_us=0.0, share=share, outside_window=True,
                                   time_lost_is="upper bound (the line's sampled time inside torch ops)")
            # the trace cannot name its ops, the source may name a costlier way to get the result
            file, at = line["file"], line["line"]
            ev.broadcast_at = at if broadcast_product(file, at) else None
            ev.pairwise_at = at if ev.broadcast_at is None and pairwise_difference(file, at) else None
            ev.top_k_by_sort = at if ev.broadcast_at is None and sorted_then_sliced(file, at) else None
            ev.inverse_at = at if inverse_then_multiply(file, at) else None
            diagonal = kept_diagonal(file, at)  # the product line, the matrices made for it, the diagonals
            ev.diagonal_at = diagonal[0] if diagonal else None
            if diagonal:  # the line's neighbours in the idiom go too (a long call's time lands a line late)
                lost = max(lost, sum(sampled_under(facts, file, n) for n in dict.fromkeys([at, *diagonal]))
                           * facts.window_s)
            ev.determinant_at = at if determinant_of_product(file, at) else None
            ev.jacobian_diagonal_at = at if jacobian_kept_diagonal(file, at) else None
            ev.rank_by_sort = at if sorted_then_searched(file, at) else None
            ev.full_factors_at = at if full_factorisation(file, at) else None
            ev.separable_at = at if separable_kernel(file, at) else None
            ev.pair_count_at = at if pairwise_comparison_count(file, at) else None
            ev.avoidable = any(getattr(ev, f) for f in IDIOM_FIELDS)
            out.append(self.finding(ev, title=f"{line['function']}() spends {100 * share:.0f}% of the steady state "
                                              f"inside torch ops at line {at}, outside the profiled window",
                                    lost_s=lost, pct=facts.pct(lost), severity=None if ev.avoidable else "info",
                                    where=([Where(file=file, line=ev.diagonal_at, function=line["function"])]
                                           if ev.diagonal_at not in (None, at) else [])
                                    + where_of([line, *(line.get("callers") or [])])))
        return out

    def _top_op(self, facts: Facts) -> list[Finding]:
        a = facts.analysis
        if not a or not a.ops.by_name or facts.window_s <= 0:
            return []
        top = a.ops.by_name[0]
        share = top.self_us / 1e6 / facts.window_s
        if share < self.MIN_SHARE:
            return []
        lost = top.self_us / 1e6
        where = facts.lines_for_ops({top.name}) or facts.sampled_line_in_ops(self.MIN_SHARE)
        dense = densified_operand(facts, where) if top.name in self.MATMULS else None
        zeros = self._mostly_zero(facts, a.ops.by_shape, [w.file for w in where]) \
            if top.name in self.MATMULS and dense is None else None
        if zeros is not None:  # what a sparse product of the zero-heavy operand would not spend
            lost = zeros[3] / 1e6 * max(0.0, 1.0 - self.SPARSE_COST * zeros[0]["nonzero_share"])
        grouped = self._grouped_by_mask(where) if top.name in self.MASK_OPS else None
        avoidable = top.name in AVOIDABLE_OPS or dense is not None or grouped is not None or zeros is not None
        if grouped is not None:
            mask, hot = grouped
            lost = max(lost, mask_loop_us(facts.ops_by_line, mask, hot, self.MASK_OPS) / 1e6)
        sliced = next((w for w in where if sorted_then_sliced(w.file, w.line)), None) \
            if top.name in self.SORT_OPS else None
        searched = next((w for w in where if sorted_then_searched(w.file, w.line)), None) \
            if top.name in self.SORT_OPS and sliced is None else None
        inverse = next((w for w in where if inverse_then_multiply(w.file, w.line)), None) \
            if top.name in self.INVERSE_OPS else None
        broadcast = next((w for w in where if broadcast_product(w.file, w.line)), None) \
            if top.name in self.BROADCAST_OPS else None
        diagonal = next((w for w in where if diagonal_of_product(w.file, w.line)), None) \
            if top.name in self.MATMULS else None
        jacobian = next((w for w in where if jacobian_kept_diagonal(w.file, w.line)), None)
        if jacobian is not None:  # the whole Jacobian's passes go, most of them: all the line's sampled time
            lost = max(lost, sampled_under(facts, jacobian.file, jacobian.line) * facts.window_s)
        determinant = next((w for w in facts.with_each_caller(where) if determinant_of_product(w.file, w.line)),
                           None) if top.name in {*self.MATMULS, *self.FACTOR_OPS} else None  # at a line, or its caller
        if determinant is not None:  # the product's assembly and its factorisation go
            lost = max(lost, sampled_under(facts, determinant.file, determinant.line) * facts.window_s)
        one_hot = next((w for w in where if one_hot_product(w.file, w.line)), None)  # its product, or its fill
        if one_hot is not None:  # the one-hot matrix's own ops, their Python and their backward go too
            bag = [Where(file=one_hot.file, line=n) for n in multi_hot_made_at(one_hot.file, one_hot.line)]
            lost = max(lost, sum(e["self_us"] for e in facts.ops_at(one_hot)) / 1e6,
                       sampled_under(facts, one_hot.file, one_hot.line) * facts.window_s) \
                + (facts.backward_us_at(one_hot) + sum(e["self_us"] for w in bag for e in facts.ops_at(w))) / 1e6
        strided = next((s for s in a.ops.strided_inputs if s.op == top.name and s.share >= self.STRIDED_MIN_SHARE),
                       None) if where and top.name not in {*self.MATMULS, *CONVOLUTION_OPS, *self.LAYOUT_OPS} else None
        if strided is not None:  # its calls on the view, an upper bound: a contiguous input still costs a pass
            lost = top.self_us * strided.share / 1e6
        copied_index = next((Where(file=w.file, line=at, function=function_at(w.file, at)) for w in where
                             if (at := repeated_index(w.file, w.line)) is not None), None)
        if copied_index is not None:  # the copy goes, and the index's half of the gathers' and scatters' reads
            users = [w for w in facts.lines_for_ops(list(self.INDEXED_ROW_OPS), limit=4)
                     if repeated_index(w.file, w.line) == copied_index.line]
            lost = max(lost, (sum(e["self_us"] for e in facts.ops_at(copied_index))
                              + self.INDEX_READ_SHARE * sum(e["self_us"] for w in users for e in facts.ops_at(w)
                                                            if e["op"] in self.INDEXED_ROW_OPS)) / 1e6)
        counted = next((w for w in where if pairwise_comparison_count(w.file, w.line)), None)
        if counted is not None:  # every op of the line goes: a sort and a search replace them
            lost = max(lost, sum(e["self_us"] for e in facts.ops_at(counted)) / 1e6)
        restacked = next((w for w in where if restacks_window(w.file, w.line)), None)
        if restacked is not None:  # the window's stack and reduction go: a running one adds and subtracts
            lost = max(lost, sum(e["self_us"] for e in facts.ops_at(restacked)) / 1e6)
        dense_diag: Where | None = None
        if top.name in {*self.FACTOR_OPS, *self.TRIANGULAR_OPS}:  # a dense diagonal's factor and solves go
            busiest = where_of(((facts.python or {}).get("window") or {}).get("lines", [])[:self.LINES_SEARCHED])
            dense_diag = next((w for w in [*where, *busiest] if dense_diagonal_distribution(w.file, w.line)), None)
            if dense_diag is not None:
                made_s = sampled_under(facts, dense_diag.file, dense_diag.line) * facts.window_s
                lost = max(lost, top.self_us / 1e6 + made_s)
        full = next((w for w in where if full_factorisation(w.file, w.line)), None) \
            if top.name in DECOMPOSITION_OPS else None
        if full is not None:  # the full factors' extra columns go (shapes unrecorded: all; a square matrix: none)
            shaped = [(o.self_us, dims) for o in a.ops.by_shape if o.name == top.name and (dims := o.input_dims())]
            thin = sum(us * thin_share(dims) for us, dims in shaped)
            full, lost = (full, thin / 1e6 if thin else lost) if thin or not shaped else (None, lost)
        copied = next((w for w in where if copied_then_indexed(w.file, w.line)), None)
        if copied is not None:  # the whole copy goes (over the steady state: the copied part may grow)
            lost = max(lost, sum(e["self_us"] for e in facts.ops_at(copied)) / 1e6,
                       sampled_under(facts, copied.file, copied.line) * facts.window_s)
        factorised = next(((w, m) for w in where if (m := factorises_invariant_matrix(w.file, w.line))), None) \
            if top.name in self.FACTOR_OPS and top.count >= self.MIN_FACTORISATIONS else None
        if factorised is not None:  # the factorisation goes with the copies of the matrix it works on
            lost = max(lost, sum(e["self_us"] for e in facts.ops_at(factorised[0])
                                 if e["op"] not in self.KEPT_SOLVE_OPS) / 1e6)
        table = self._dense_embedding_grad(facts, top)
        paired = self._backward_of(facts, top, where) if grouped is None and dense is None and table is None else None
        separable = next((w for w in [*where, *(paired[2] if paired else []), *facts.lines_for_ops(CONVOLUTION_OPS)]
                          if separable_kernel(w.file, w.line)), None) if top.name in CONVOLUTION_OPS else None
        if separable is not None:  # the k x k kernel's passes become 1-D ones, forward and backward
            lost = sum(o.self_us * separable_share(o.input_dims(), "backward" in o.name)
                       for o in a.ops.by_shape if o.name in CONVOLUTION_OPS) / 1e6 or lost
        # a squared broadcast difference: at a line running the op, or whose forward the op is the backward of
        pairwise = next((w for w in [*where, *(paired[2] if paired else [])] if pairwise_difference(w.file, w.line)),
                        None) if top.name in self.PAIRWISE_OPS and broadcast is None else None
        chain = next((w for w in where if chain_ends_in_vector(w.file, w.line, {e["op"] for e in facts.ops_at(w)})),
                     None) if top.name in self.MATMULS else None
        if chain is not None:  # the whole matrix's product and the ops building its factors go: mat-vecs stay
            lost = max(lost, sum(e["self_us"] for e in facts.ops_at(chain)) / 1e6)
        recomputed = next((w for w in where if invariant_statement(w.file, w.line)), None) \
            if pairwise is None and broadcast is None else None
        if recomputed is not None:  # every pass after the first redoes all of that line's ops
            lost = max(lost, sum(e["self_us"] for e in facts.ops_at(recomputed)) / 1e6)
        elif pairwise is None and broadcast is None:  # or a helper running the op, called so from a loop
            helpers = {(w.function or "").rsplit(".", 1)[-1] for w in where} - {""}
            recomputed = next((c for c in facts.with_each_caller(where)[len(where):]
                               if invariant_call(c.file, c.line, helpers, item_used_elsewhere=True)), None)
            if recomputed is not None:  # all the helper's work under that call goes, but its first
                lost = max(lost, sampled_under(facts, recomputed.file, recomputed.line) * facts.window_s)
        if pairwise is not None:  # the difference, its square and its sum at that line all go, and their backward
            at_line = facts.ops_at(pairwise)
            line_s = sum(e["self_us"] for e in at_line) / 1e6
            back = facts.backward_us_at(pairwise) / 1e6  # holding the top op's time when it runs in that backward
            lost = max(lost, line_s) + back if any(e["op"] == top.name for e in at_line) \
                else line_s + (max(lost, back) if paired else lost + back)
        ev = OpHotspotEvidence(self_us=top.self_us, count=top.count, mean_us=top.mean_us, share=share,
                               time_lost_is="upper bound (the op's whole self time)"
                               if not (recomputed or pairwise or factorised or restacked or copied or counted or chain)
                               else "upper bound (all the ops of the line, which the fix removes)" if not factorised
                               else "upper bound (the line's ops but the solves with the factors, which stay)",
                               avoidable=avoidable,
                               backward_of=paired[0] if paired else None,
                               shapes=[s.shapes for s in a.ops.by_shape if s.name == top.name][:3],
                               densified_at=dense.line if dense else None,
                               grouped_by_mask=grouped[0].line if grouped else None,
                               top_k_by_sort=sliced.line if sliced else None,
                               inverse_at=inverse.line if inverse else None,
                               broadcast_at=broadcast.line if broadcast else None,
                               pairwise_at=pairwise.line if pairwise else None,
                               recomputed_at=recomputed.line if recomputed else None,
                               window_restacked_at=restacked.line if restacked else None,
                               copied_whole_at=copied.line if copied else None,
                               dense_diagonal_at=dense_diag.line if dense_diag else None,
                               full_factors_at=full.line if full else None,
                               separable_at=separable.line if separable else None,
                               pair_count_at=counted.line if counted else None,
                               strided_at=where[0].line if strided else None,
                               strided_input=f"{strided.dims} with strides {strided.strides}" if strided else None,
                               chain_at=chain.line if chain else None,
                               diagonal_at=diagonal.line if diagonal else None,
                               jacobian_diagonal_at=jacobian.line if jacobian else None,
                               determinant_at=determinant.line if determinant else None,
                               rank_by_sort=searched.line if searched else None,
                               one_hot_at=one_hot.line if one_hot else None,
                               index_copied_at=copied_index.line if copied_index else None,
                               refactorised=factorised[1] if factorised else None,
                               refactorised_at=factorised[0].line if factorised else None,
                               dense_embedding_rows=table[0] if table else None,
                               embedding_at=table[1].line if table and table[1] else None,
                               mostly_zero_shape=zeros[0]["shape"] if zeros else None,
                               nonzero_share=zeros[0]["nonzero_share"] if zeros else None,
                               mostly_zero_at=zeros[2].line if zeros and zeros[2] else None,
                               mostly_zero_multiplied_at=zeros[0].get("product_line") if zeros else None)
        what = "" if avoidable else " (the model's compute: where the time goes, not a problem by itself)"
        if dense is not None:
            what = f" (an operand made dense from a sparse tensor at line {dense.line})"
            where = [dense, *(w for w in where if (w.file, w.line) != (dense.file, dense.line))]
        if zeros is not None:
            entry, call, made, _ = zeros
            rows, cols = entry["shape"]
            ev.time_lost_is = ("the products with the matrix, less what a sparse product of its non-zeros "
                               f"costs (~{self.SPARSE_COST:g}x the dense one per stored value)")
            held = str(entry["argument"]).startswith("buffer:")
            how = f"held by the model as {entry['argument'].removeprefix('buffer:')}" if held else \
                f"multiplied at line {call.line}" if entry.get("product_line") else \
                f"passed to the model at line {call.line}"
            what = (f": a {rows:,} x {cols:,} matrix that is {100 * (1 - entry['nonzero_share']):.1f}% zeros "
                    f"({how}) is multiplied densely")
            first = ([made] if made else []) + [call]
            where = first + [w for w in where if (w.file, w.line) not in {(f.file, f.line) for f in first}]
        if paired is not None:
            forward, node, lines = paired
            what += f" in autograd's {node}: the backward of {forward} at line {lines[0].line}"
            where = lines + [w for w in where if (w.file, w.line) not in {(f.file, f.line) for f in lines}]

        for idiom, does in ((broadcast, "materialises every pairwise product to sum it (a matrix product)"),
                            (pairwise, "materialises every pairwise difference to sum its squares (a distance matrix)"),
                            (recomputed, "computes the same value on every pass of its loop (its inputs never change)"),
                            (chain, "multiplies a matrix chain left to right, building a whole matrix for a vector"),
                            (diagonal, "computes a whole matrix product to keep its diagonal"),
                            (jacobian, "computes the whole Jacobian of the batch to keep its per-sample blocks"),
                            (determinant, "takes the determinant of a matrix product it builds"),
                            (inverse, "inverts a matrix to multiply by its inverse"),
                            (searched, "sorts a whole tensor to find where given elements rank"),
                            (one_hot, "multiplies a one-hot matrix by a table (an embedding lookup)"),
                            (counted, "compares every pair of two tensors' elements to count them"),
                            (copied_index, "copies a row index across every column for a gather or scatter"),
                            (where[0] if strided else None, f"runs it on a view whose last dimension is not "
                             f"contiguous ({ev.strided_input}: a transposed or permuted tensor)"),
                            (restacked, "stacks the whole window it keeps again on every pass to reduce it"),
                            (copied, "copies a whole tensor or array to keep the rows an index picks"),
                            (dense_diag, "builds a multivariate normal from a diagonal made dense"),
                            (full, "asks for the full factors of a tall matrix, where the thin ones do"),
                            (separable, "convolves with an outer product of 1-D filters (a separable kernel) in 2-D"),
                            (factorised[0] if factorised else None,
                             f"factorises {factorised[1] if factorised else ''}, which never changes, on every call")):
            if idiom is not None:  # a slow idiom on a line running the op: that line first
                ev.avoidable = avoidable = True
                what = f": line {idiom.line} {does}"
                where = [idiom, *(w for w in where if (w.file, w.line) != (idiom.file, idiom.line))]
        returned = views_returned_near([w.file for w in where]) if strided is not None else []
        if len(returned) == 1:  # the one function of the program returning a transposed view: where it comes from
            (file, line), = returned
            what += f", the view returned at line {line} of {os.path.basename(file)}"
            where = [where[0], Where(file=file, line=line, function=function_at(file, line)), *where[1:]]
        indexing = ([*paired[2]] if paired else []) + facts.lines_for_ops(set(INDEXING_OPS))
        asked = next(((w, at) for w in indexing if (at := gradient_asked_for(w.file, w.line))), None) \
            if paired or top.name in GRADIENT_FILL_OPS else None
        if asked is not None:  # data asked for a gradient: the backward's fill and accumulation of it go
            ev.avoidable = avoidable = True
            ev.gradient_asked_at = asked[1]
            node_name = self.BACKWARD_NODE + paired[1] if paired else None
            lost = max(lost, sum(o.total_us for o in a.ops.by_name if o.name == node_name) / 1e6)
            what += f", for a gradient of data asked at line {asked[1]} (indexed at line {asked[0].line})"
            first = [Where(file=asked[0].file, line=asked[1], function=function_at(asked[0].file, asked[1])), asked[0]]
            where = first + [w for w in where if (w.file, w.line) not in {(f.file, f.line) for f in first}]
        if sliced is not None:
            what = f": line {sliced.line} sorts a whole tensor to keep its first elements"
            where = [sliced, *(w for w in where if (w.file, w.line) != (sliced.file, sliced.line))]
        if table is not None:  # a sparse gradient skips the embedding's whole dense backward
            rows, made, calls = table
            lost = max(lost, sum(o.total_us for o in a.ops.by_name if o.name.startswith(self.BACKWARD_NODE)
                                 and o.name[len(self.BACKWARD_NODE):] in self.EMBEDDING_NODES) / 1e6)
            ev.time_lost_is = "upper bound (the embedding's backward nodes: the dense gradient's fill and writes)"
            what = f" for the dense gradient of a {rows:,}-row embedding table, every step"
            first = ([made] if made else []) + calls
            where = first + [w for w in where if (w.file, w.line) not in {(f.file, f.line) for f in first}]
        if grouped is not None:
            mask, hot = grouped
            ev.time_lost_is = "upper bound (the mask's line and the selections with it)"
            what = f": a boolean mask built per group in a loop at line {mask.line}, and selections with it"
            first = [mask] + ([hot] if hot.line != mask.line else [])
            where = first + [w for w in where if (w.file, w.line) not in {(f.file, f.line) for f in first}]
        return [self.finding(ev, title=f"{top.name} takes {100 * share:.0f}% of the profiled time "
                                       f"({top.count} calls){what}",
                             lost_s=lost, pct=facts.pct(lost), severity=None if avoidable else "info",
                             where=where, ops=[top.name],
                             confidence="measured" if factorised else None)]  # the factorisations all go

    PAIRWISE_OPS = frozenset({"aten::sub", "aten::pow", "aten::square", "aten::abs", "aten::mul", "aten::sum",
                              "aten::mean", "aten::norm", "aten::linalg_vector_norm"})
    """Ops of a squared broadcast difference reduced, and of its backward (the square's is a mul)."""
    INDEXED_ROW_OPS = frozenset({"aten::gather", "aten::scatter_add_", "aten::scatter_add", "aten::scatter_",
                                 "aten::scatter", "aten::scatter_reduce", "aten::scatter_reduce_"})
    """Ops reading a full-shape index beside their values."""
    INDEX_READ_SHARE = 0.5
    """Of a gather's or scatter's time, what reading its [E, F] int64 index costs: it is twice the
    bytes of the float32 values read beside it, so at least half the traffic; index_select and
    index_add_ read one index per row."""
    MASK_OPS = frozenset({
        "aten::nonzero", "aten::index", "aten::masked_select", "aten::argwhere", "aten::index_put_",
        "aten::_index_put_impl_", "aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge",
        "aten::isin", "aten::logical_and", "aten::bitwise_and", "aten::__and__",
    })
    """Ops of a selection by a boolean mask (`x[mask]` runs index, then nonzero on the mask) and
    of building one (a comparison, its combination): the ops a per-group mask in a loop repeats."""

    def _grouped_by_mask(self, where: list[Where]) -> tuple[Where, Where] | None:
        """(the line building a per-group mask, the line selecting with it) among the lines that
        run the op (see `masks.mask_group_by`); None when none of them plainly does."""
        for w in where:
            found = mask_group_by(w.file, w.line)
            if found is not None:
                return tuple(Where(file=w.file, line=at, function=w.function) for at in found)  # type: ignore[return-value]
        return None

    FACTOR_OPS = frozenset({"aten::linalg_lu_factor_ex", "aten::linalg_lu_factor", "aten::_linalg_solve_ex",
                            "aten::linalg_solve", "aten::linalg_solve_ex", "aten::linalg_cholesky_ex",
                            "aten::linalg_cholesky", "aten::linalg_inv_ex", "aten::linalg_inv", "aten::inverse",
                            "aten::linalg_lstsq", "aten::linalg_eigh", "aten::_linalg_eigh", "aten::linalg_eig",
                            "aten::_linalg_svd", "aten::linalg_svd", "aten::linalg_qr"})
    """Ops that factorise a matrix (a solve's LU, a Cholesky, an inverse, a decomposition)."""
    KEPT_SOLVE_OPS = frozenset({"aten::linalg_lu_solve", "aten::lu_solve", "aten::cholesky_solve",
                                "aten::linalg_solve_triangular", "aten::triangular_solve"})
    """What a factorisation done once leaves of each call: the solves with its factors. The rest of the
    line's ops go with it (a batched LU copies its matrices first: a fifth of the line's time)."""
    TRIANGULAR_OPS = frozenset({"aten::linalg_solve_triangular", "aten::triangular_solve", "aten::cholesky_solve"})
    """Solves with a triangular factor (a multivariate normal's log_prob, rsample and KL)."""
    LINES_SEARCHED = 5
    """The top sampled lines searched for where a factorised matrix was made (a distribution's
    constructor factorises it; the solves run where it is used)."""
    MIN_FACTORISATIONS = 10
    """Fewer factorisations in the window are not a matrix factorised again and again."""
    INVERSE_OPS = frozenset({"aten::linalg_inv", "aten::linalg_inv_ex", "aten::inverse", "aten::linalg_lu_solve",
                             "aten::linalg_lu_factor_ex", "aten::linalg_solve_ex", "aten::bmm", "aten::matmul"})
    """Ops of an inversion (torch inverts by an LU factorisation and a solve against the identity)
    and of the product with the inverse."""
    BROADCAST_OPS = frozenset({"aten::mul", "aten::sum", "aten::mean"})
    """The ops of a broadcast product reduced: the multiply over the pairwise grid, its sum."""
    SORT_OPS = frozenset({"aten::sort", "aten::argsort", "aten::msort"})
    """Ops of a full sort, which a top-k by sorting runs."""
    EMBEDDING_GRAD_OPS = frozenset({"aten::fill_", "aten::zero_", "aten::add_", "aten::_embedding_bag_dense_backward",
                                    "aten::embedding_dense_backward", "aten::index_add_", "aten::copy_"})
    """What a dense embedding gradient costs: the table-sized gradient zeroed, accumulated into
    and copied, and the dense backward that writes it."""
    EMBEDDING_NODES = ("EmbeddingBackward0", "EmbeddingBagBackward0")
    """The autograd nodes of an embedding lookup, whose dense backward writes a table-sized gradient."""
    EMBEDDING_FORWARD = frozenset({"aten::embedding", "aten::embedding_bag", "aten::_embedding_bag",
                                   "aten::_embedding_bag_forward_only"})
    """The forward ops of a lookup: their lines call the embedding module (`self.items(ids)`)."""
    MIN_TABLE_ROWS = 100_000
    """A table this tall is touched in a small part by each batch: its dense gradient (every row
    zeroed, written and updated each step) is mostly zeros a sparse gradient skips."""

    def _dense_embedding_grad(self, facts: Facts, top: OpRow) -> tuple[int, Where | None, list[Where]] | None:
        """(the table's rows, the line making the embedding module, the lines calling it) when the
        top op handles an embedding's dense gradient: it runs in the backward of an embedding node
        on a table-shaped tensor of `MIN_TABLE_ROWS` rows or more; None otherwise."""
        a = facts.analysis
        if a is None or top.name not in self.EMBEDDING_GRAD_OPS:
            return None
        nodes = [o for o in a.ops.by_name if o.name.startswith(self.BACKWARD_NODE)
                 and o.name[len(self.BACKWARD_NODE):] in self.EMBEDDING_NODES]
        if not nodes or sum(o.total_us for o in nodes) < 0.5 * top.self_us:
            return None
        rows = 0
        for shape in [s.shapes for s in a.ops.by_shape if s.name == top.name][:3]:
            found = re.match(r"\[\[(\d+), \d+\]", shape or "")
            rows = max(rows, int(found.group(1)) if found else 0)
        if rows < self.MIN_TABLE_ROWS:
            return None
        calls = facts.lines_for_ops(set(self.EMBEDDING_FORWARD))
        made = next((Where(file=w.file, line=at, function="") for w in calls
                     if (at := embedding_defined_at(w.file, w.line)) is not None), None)
        return rows, made, calls

    BACKWARD_NODE = "autograd::engine::evaluate_function: "
    """The prefix of the op autograd records around each node it runs in the backward pass."""

    def _backward_of(self, facts: Facts, top: OpRow, where: list[Where]) -> tuple[str, str, list[Where]] | None:
        """(the forward op, its autograd node, the user's lines calling the forward op) when the
        top op runs inside the backward of one kind of node (a node of that kind holds at least the
        op's self time, on the op's own line: the `.backward()` call) and the forward op runs on
        other lines; None otherwise. The backward runs at the `.backward()` line, but the code to
        change is the forward call it differentiates (`table[i]` per row: each backward of it fills
        a zero gradient as big as the table)."""
        if not where or is_backward_op(top.name) or not facts.analysis:
            return None
        nodes = [o for o in facts.analysis.ops.by_name if o.name.startswith(self.BACKWARD_NODE)]
        node = max(nodes, key=lambda o: o.total_us, default=None)
        if node is None or node.total_us < top.self_us:
            return None
        ran = facts.lines_for_ops({node.name}, limit=1)
        if not ran or (ran[0].file, ran[0].line) != (where[0].file, where[0].line):
            return None
        name = node.name[len(self.BACKWARD_NODE):]
        forward = "aten::" + re.sub(r"(?<!^)(?=[A-Z])", "_", name.split("Backward")[0]).lower()
        backward_lines = {(w.file, w.line) for w in where}
        lines = [w for w in facts.lines_for_ops({forward}, limit=6) if (w.file, w.line) not in backward_lines][:3]
        return (forward, name, lines) if lines else None

    LAYOUT_OPS = frozenset({"aten::t", "aten::transpose", "aten::permute", "aten::view", "aten::reshape",
                            "aten::as_strided", "aten::expand", "aten::contiguous", "aten::clone", "aten::copy_",
                            "aten::to", "aten::_to_copy", "aten::numpy_T"})
    """Ops that make or copy a view: a strided input is what they take (a `.contiguous()` is the fix)."""
    STRIDED_MIN_SHARE = 0.5
    """An op fed a view against the grain in most of its time is slowed by it (the trace's strides,
    `analysis/layouts.py`); a few such calls among many are not its cost."""
    MATMULS = ("aten::mm", "aten::addmm", "aten::matmul", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::mv",
               "aten::addmv", "aten::addmv_")
    """Products whose work a sparse operand would shrink to its non-zeros."""

    MIN_CALLS_WITH_MATRIX = 2
    """The same mostly-zero matrix given to the model again (a graph's adjacency, built once): a
    batch of sparse features, new every call, wants another fix (an EmbeddingBag)."""
    SPARSE_COST = 20.0
    """A sparse (COO) product's cost per stored value, its backward included, against a dense
    product's per element: measured ~21x (700 rows, 1.9 % non-zeros) and ~30x (2,000 rows, 0.65 %)
    for three graph layers of 32 features with their backward, one thread (a CSR product alone is
    ~3x, but its backward transposes it every time)."""

    def _mostly_zero(self, facts: Facts, by_shape: list[OpRow], files: list[str]
                     ) -> tuple[dict, Where, Where | None, float] | None:
        """(the capture's note of a mostly-zero model input or tensor the model holds (a buffer,
        looked for in the calling line's file and `files`, the op's lines'), the line calling the
        model with it, the line building it, the self time of the products taking it) for the input whose
        products (by recorded input shapes, either orientation: the backward multiplies by its
        transpose) take the most time; None when no such input was seen or no product takes it."""
        best = None
        products = (facts.clock or {}).get("product_operands") or []
        for site, multiplied in [*((s, False) for s in model_call_sites(facts)), *((s, True) for s in products)]:
            for entry in site.get("mostly_zero") or []:
                if (entry.get("calls") or 0) < self.MIN_CALLS_WITH_MATRIX:
                    continue
                rows, cols = entry["shape"]
                operand = re.compile(rf"\[({rows}, {cols}|{cols}, {rows})\]")
                spent = sum(o.self_us for o in by_shape if o.name in self.MATMULS and operand.search(o.shapes or ""))
                if spent > 0 and (best is None or spent > best[3]):
                    call = Where(file=site["file"], line=site["line"], function=site.get("function") or "")
                    argument = entry["argument"]
                    if multiplied:  # an operand of the user's product, at that line
                        inner = at = None
                        entry = {**entry, "product_line": site["line"]}
                    elif isinstance(argument, str) and argument.startswith("buffer:"):  # a tensor the model holds
                        attribute = argument.removeprefix("buffer:").rsplit(".", 1)[-1]
                        inner = next(filter(None, (buffer_built_at(f, attribute)
                                                   for f in dict.fromkeys([site["file"], *files]))), None)
                        at = None
                    else:
                        at = argument_assigned_at(site["file"], site["line"], argument)
                        inner = dense_built_in(site["file"], at) if at else None  # the helper building it, if one does
                    made = Where(file=site["file"], line=at, function=function_at(site["file"], at)) if at else None
                    if inner is not None:
                        made = Where(file=inner[0], line=inner[1], function=function_at(*inner))
                    best = (entry, call, made, spent)
        return best

    def fix(self, evidence: OpHotspotEvidence) -> str:
        if evidence.outside_window and not evidence.avoidable:
            return ("The profiled window missed this line's work (profile it with `--duration` once it runs, or "
                    "mark its loop's steps, to see its ops). If its result needs less than its ops compute, use "
                    "a cheaper op (e.g. topk instead of a full sort) or reduce their input; else it is the "
                    "program's work.")
        idiom = line_idiom_fix(evidence)
        if idiom is not None:
            return idiom
        if evidence.dense_embedding_rows is not None:
            at = f" at line {evidence.embedding_at}" if evidence.embedding_at else ""
            return (f"Make the embedding{at} with sparse=True (and update it with torch.optim.SparseAdam, SGD or "
                    f"Adagrad): its dense gradient zeroes, fills and updates all {evidence.dense_embedding_rows:,} "
                    "rows every step, while a batch touches only the rows it looks up.")
        if evidence.backward_of is not None and (evidence.backward_of in INDEXING_OPS or not evidence.avoidable):
            return backward_fix(evidence.backward_of)
        if evidence.grouped_by_mask is not None:
            return (f"Line {evidence.grouped_by_mask} builds a boolean mask over the whole table for one group "
                    "per pass of a loop, and the selection with it scans every row again: a group-by costing "
                    "groups x rows. Group once: sort by the key and split (order = key.argsort(); "
                    "parts = x[order].split(torch.bincount(key).tolist())), or reduce every group in one op "
                    "(index_add_, scatter_reduce, torch.bincount(key, weights=x)).")
        if evidence.mostly_zero_shape is not None:
            rows, cols = evidence.mostly_zero_shape
            at = f"built at line {evidence.mostly_zero_at}" if evidence.mostly_zero_at else \
                f"multiplied at line {evidence.mostly_zero_multiplied_at}" if evidence.mostly_zero_multiplied_at \
                else "passed to the model"
            zeros = 100 * (1 - (evidence.nonzero_share or 0.0))
            return (f"The {rows:,} x {cols:,} matrix {at} is {zeros:.1f}% zeros, and every product with it "
                    "multiplies each zero: store it sparse once, where it is built (m = m.to_sparse(); `m @ x` or "
                    "torch.sparse.mm(m, x) then costs its non-zeros, backward included; m.to_sparse_csr() is "
                    "faster still without a backward): a graph's adjacency, an interaction or a mask matrix.")
        if evidence.densified_at is not None:
            return (f"Keep the matrix made dense at line {evidence.densified_at} sparse and multiply with "
                    "torch.sparse.mm (or `@` on the sparse tensor): a dense product multiplies every zero, a "
                    "sparse one only the stored values.")
        if evidence.avoidable:
            return ("This op moves or creates data rather than computing: create tensors where and how they "
                    "are used (device=, dtype=, preallocated instead of torch.cat in a loop), avoid copies and "
                    "conversions inside the step.")
        return ("If this op is needed at this size and precision, it is the model's work; otherwise reduce its "
                "input, batch its calls, or use a cheaper equivalent (the lines shown run it).")
