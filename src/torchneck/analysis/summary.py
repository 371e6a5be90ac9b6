"""One pass of every analysis over a loaded trace, producing the JSON-ready `analysis` section."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import msgspec
import numpy as np

from ..model.analysis import (
    Comm,
    Compiled,
    KeyAverages,
    Label,
    MainThread,
    Ops,
    RankAnalysis,
    StepItem,
    Steps,
    TraceInfo,
)
from ..model.base import to_builtins
from ..trace.table import Trace
from .compiled import compiled_summary
from .distributed import collectives
from .gpu import end_of_launched_work, gpu_summary
from .groups import totals_by_id
from .key_averages import TableOptions, key_averages
from .labels import label_table
from .layouts import strided_inputs
from .memory import memory_summary
from .nesting import Nesting, host_nesting
from .ops import (
    annotation_table,
    backward_nodes,
    conv_bias_before_batch_norm,
    dispatch_overhead,
    enclosing_sites,
    float64_ops,
    has_line_marks,
    op_table,
    rows_starting_in,
)
from .optimizer import optimizer_work
from .patterns import filled_then_copied_to_gpu, unaligned_half_matmuls
from .steps import BREAKDOWN_CATEGORIES, find_steps, step_breakdown
from .syncs import host_syncs
from .trace_stacks import user_code_of

STRIDES_READ_FOR = 5
"""The top ops (by self time) whose inputs' strides are read (`layouts.strided_inputs`): a rule
names an op's layout only when the op dominates the window."""
OPS_BY_NAME = 30
"""Op names kept in the analysis's by-name table (most self time first); the backward nodes
are read from all of them."""


def analyze_trace(trace: Trace, nesting: Nesting | None = None,
                  tables: TableOptions | None = None) -> RankAnalysis:
    """All analyses of one trace (one rank). Times are µs; the window is the steps' span.
    `nesting` may be passed when the caller already computed it for this table; `tables`: the
    key_averages table's options (`--sort-by`, ...)."""
    return analyze_with_nesting(trace, nesting, tables)[0]


def analyze_with_nesting(trace: Trace, nesting: Nesting | None = None,
                         tables: TableOptions | None = None, lean: bool = False) -> tuple[RankAnalysis, Nesting]:
    """`analyze_trace`, and the host nesting it used, for callers that need it afterwards (the
    views, ops per source line): computed here, when not given, while the GPU analyses run.
    `lean`: without the key_averages table, which no rule reads (the ranks of a many-rank job
    that only give a summary: a quarter of a small rank's analysis time)."""
    t = trace.events
    steps = find_steps(t)
    lo = min(s.start for s in steps)
    cpu_hi = max(s.end for s in steps)
    with _Background() as background:
        # Two lanes on two cores (numpy releases the GIL in its loops): the nesting first, while
        # this thread finds where the steps' GPU work ends; then the GPU and step-time analyses,
        # which need neither the nesting nor the host-op analyses this thread goes on with.
        nested = background.submit(host_nesting, t) if nesting is None else None
        hi = end_of_launched_work(t, lo, cpu_hi)  # the steps' GPU work may finish after their CPU side
        span = hi - lo
        gpu = background.submit(gpu_summary, t, lo, hi)
        breakdown = background.submit(step_breakdown, t, steps)
        comm = background.submit(collectives, t, steps)
        rows = rows_starting_in(t, lo, cpu_hi)  # the events of the profiled steps
        if nested is not None:
            nesting = nested.result()
        assert nesting is not None
        averages = None if lean else background.submit(key_averages, trace, nesting, tables)  # as torch's
        cpu_ops = nesting.ops_in(rows)  # what the op analyses read of them (a view, not a copy)
        every_op = op_table(t, nesting, cpu_ops, top=None)
        ops = Ops(
            by_name=every_op[:OPS_BY_NAME],
            backward_nodes=backward_nodes(every_op),
            by_shape=op_table(t, nesting, cpu_ops, by_shape=True, top=20),
            dispatch=dispatch_overhead(t, nesting, cpu_ops, span, len(steps)),
            annotations=annotation_table(t, rows),
            float64=float64_ops(t, nesting, cpu_ops, place=lambda hit: user_code_of(trace, nesting, hit)),
            conv_bias_bn=conv_bias_before_batch_norm(t, nesting, cpu_ops),
            half_matmul_unaligned=unaligned_half_matmuls(
                t, nesting, cpu_ops, place=lambda hit: user_code_of(trace, nesting, hit)),
            filled_then_copied=filled_then_copied_to_gpu(t, nesting, cpu_ops),
            main_thread=_busiest_cpu_thread(t, cpu_ops),
            optimizer=optimizer_work(t, nesting, rows, cpu_ops),
            training_ops=int(np.count_nonzero(t.names_matching(is_training_event)[t.name])) if len(t) else 0,
        )
        strided = None if lean else background.submit(  # a second read of a small file, beside this thread's work
            strided_inputs, trace.meta.path, [o.name for o in every_op[:STRIDES_READ_FOR]])
        del cpu_ops
        syncs = host_syncs(t, nesting, rows, place=lambda ops, waits: user_code_of(trace, nesting, ops, waits))
        memory = memory_summary(t, trace.memory, lo, hi, nesting,
                                sites=enclosing_sites(t, nesting) if has_line_marks(t) else None)
        compiled = compiled_summary(t, nesting, rows, lo, cpu_hi)
        labels = label_table(trace, nesting, rows, span)
        gpu, breakdown, comm = gpu.result(), breakdown.result(), comm.result()
        averaged = averages.result() if averages is not None else None
        ops.strided_inputs = strided.result() if strided is not None else []
    durations = np.array([s.duration for s in steps])
    totals = {k: float(sum(b[k] for b in breakdown)) for k in BREAKDOWN_CATEGORIES}
    analysis = RankAnalysis(
        trace=TraceInfo(
            path=trace.meta.path, rank=trace.meta.rank, world_size=trace.meta.world_size, events=len(t),
            python_events=len(trace.python), memory_events=len(trace.memory),
            devices=[d.get("name") for d in trace.meta.devices],
            device_memory_bytes={str(d.get("id", i)): d["totalGlobalMem"] for i, d in enumerate(trace.meta.devices)
                                 if isinstance(d.get("totalGlobalMem"), int)},
            warnings=list(trace.meta.warnings), bytes=trace.meta.uncompressed_bytes,
            grad_mode_ops=grad.rows if (grad := trace.meta.grad) else 0, autograd_nodes=grad.nodes if grad else 0),
        steps=Steps(
            source=steps[0].source, count=len(steps), window_us=span, gpu_tail_us=hi - cpu_hi,
            mean_us=float(durations.mean()), median_us=float(np.median(durations)),
            min_us=float(durations.min()), max_us=float(durations.max()),
            items=[StepItem(index=s.index, start_us=s.start, duration_us=s.duration, breakdown_us=b)
                   for s, b in zip(steps, breakdown)],
            breakdown_total_us=totals),
        ops=ops, gpu=gpu, syncs=syncs, memory=memory,
        # Still dicts from their modules (analysis/compiled.py, analysis/distributed.py): typed here.
        compiled=compiled if isinstance(compiled, Compiled) else msgspec.convert(compiled, Compiled),
        comm=comm if isinstance(comm, Comm) else msgspec.convert(comm, Comm),
        labels=msgspec.convert(to_builtins(labels), list[Label]),
        key_averages=msgspec.convert(averaged, KeyAverages) if averaged is not None else None,
    )
    return analysis, nesting


def is_training_event(name: str) -> bool:
    """A backward pass's op or an optimizer step's span (torch names them so since 1.8)."""
    return "Backward" in name or name.startswith(("autograd::engine::evaluate_function", "Optimizer.step#"))


def _busiest_cpu_thread(t, cpu_ops) -> MainThread:
    if not len(cpu_ops):
        return MainThread()
    threads, counts, _ = totals_by_id(t.thread[cpu_ops])
    th = int(threads[np.argmax(counts)])
    return MainThread(pid=t.threads.pid[th], tid=t.threads.tid[th], ops=int(counts.max()))


class _Background:
    """Runs submitted analyses on one worker thread, in order, while the caller goes on with
    others, or inline where there is one core (or `TORCHNECK_ANALYSIS_THREADS=1`). Analyses are
    pure functions of the table; the cache they share (`find_steps`) is built before an
    analysis that reads it is submitted."""

    def __enter__(self) -> _Background:
        threads = os.environ.get("TORCHNECK_ANALYSIS_THREADS")
        wanted = int(threads) if threads and threads.isdigit() else min(2, os.cpu_count() or 1)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="torchneck-analysis") if wanted > 1 else None
        return self

    def submit(self, fn, *args) -> Future:
        if self.pool is not None:
            return self.pool.submit(fn, *args)
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # handed over as the pool would, raised by result()
            done.set_exception(exc)
        return done

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
