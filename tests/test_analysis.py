"""Analyses of the trace table that rules build on: ops placed at the user's lines, the last op
started inside a span."""

import json

import pytest
from conftest import DATA


def test_ops_by_line_leaves_out_ops_that_nothing_places(tmp_path):
    """An op outside every `torchneck@` span with no Python sample at its moment has no line:
    it is left out (it used to appear without `file`/`line`, breaking the report schema)."""
    from torchneck.analysis.python_stacks import load_samples
    from torchneck.analysis.run import ops_by_user_line
    from torchneck.sites import site_name
    from torchneck.trace.loader import load_trace

    def ev(name, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    events = [ev("ProfilerStep#1", 0, 1000, "user_annotation"),
              ev(site_name("train", 12, "/home/u/train.py"), 10, 100, "user_annotation"),
              ev("aten::mm", 20, 80),
              ev("aten::sum", 500, 300)]  # the bigger op, placed by nothing
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    rows = ops_by_user_line(load_trace(p), load_samples({}), offset_us=None)
    assert rows == [{"op": "aten::mm", "self_us": 80.0, "count": 1, "file": "/home/u/train.py", "line": 12,
                     "function": "train", "source": "trace"}]


def test_an_op_running_while_the_sampled_thread_waits_on_another_is_not_placed_on_the_wait(tmp_path):
    """A server's main thread waits in `Future.result()` while its worker runs the model: the
    sample covering the worker's op is the main thread's wait (its innermost frame in
    threading.py), which issued nothing; the op stays unplaced. A sample in the user's own code
    places the op running then."""
    import threading

    import numpy as np

    from torchneck.analysis.python_stacks import Samples, hotspots
    from torchneck.analysis.run import ops_by_user_line
    from torchneck.trace.loader import load_trace

    def ev(name, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 7, "ts": ts, "dur": dur}

    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [ev("ProfilerStep#1", 0, 1000, "user_annotation"),
                                             ev("aten::mm", 100, 200), ev("aten::addmm", 600, 200)]}))
    frames = [["main", "/srv/serve.py", 157], ["Condition.wait", threading.__file__, 320],
              ["pool", "/srv/model.py", 50]]
    s = Samples(frames=frames, end_s=np.array([0.0005, 0.001]), dur_s=np.array([0.0005, 0.0005]),
                user_frame=np.array([0, 2]), leaf_is_user=np.array([False, True]), leaf_frame=np.array([1, 2]),
                tool=np.zeros(2, bool), importing=np.zeros(2, bool), compiling=np.zeros(2, bool),
                loading=np.zeros(2, bool), start_monotonic_ns=0, stacks=[[0, 1], [2]])
    rows = ops_by_user_line(load_trace(p), s, offset_us=0.0)
    assert [(r["op"], r["line"]) for r in rows] == [("aten::addmm", 50)]
    lines = {ln["line"]: ln for ln in hotspots(s, op_s=np.zeros(2))["lines"]}
    assert lines[157].get("waits_on_thread") is True and "waits_on_thread" not in lines[50]  # op_hotspot skips it


def test_a_stand_in_sample_of_a_worker_reads_and_places_the_worker_s_own_ops(tmp_path):
    """The main thread (tid 7) waits on a worker (tid 9) that runs the model; the watcher's
    samples of the worker (format 5: the fifth value names the thread) read op time from the
    worker's rows, not the main thread's, which ran no op then: the worker's line is in ops, not
    Python. The worker's op is placed at that line; a main-thread sample of the same instant
    places none of the worker's ops, and a sample standing for another thread none either."""
    import numpy as np

    from torchneck.analysis.python_stacks import load_samples
    from torchneck.analysis.run import ops_by_user_line, sample_op_seconds
    from torchneck.trace.loader import load_trace

    def ev(name, ts, dur, tid, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [
        ev("ProfilerStep#1", 0, 4000, 7, "user_annotation"), ev("aten::add", 50, 100, 7), ev("aten::add", 200, 100, 7),
        ev("aten::addmm", 1050, 850, 9), ev("aten::gelu", 2100, 800, 9), ev("aten::relu", 3100, 800, 11)]}))
    frames = [["worker", "/srv/serve.py", 19], ["main", "/srv/serve.py", 28], ["other", "/srv/serve.py", 40]]
    data = {"format": 5, "start_monotonic_ns": 0, "frames": frames, "stacks": [[0], [1], [2]],
            "samples": [[1, 0.001, 0.001, 0.0], [0, 0.001, 0.001, -1, 9], [0, 0.001, 0.001, -1, 9],
                        [2, 0.001, 0.001, -1, 12]]}
    samples = load_samples(data)
    assert samples.thread.tolist() == [0, 9, 9, 12]
    trace = load_trace(p)
    op_s = sample_op_seconds(trace, samples, offset_us=0.0)
    assert np.allclose(op_s, [0.0002, 0.00085, 0.0008, 0.0]), op_s  # tid 12 left no rows: the main thread's reading
    placed = {(r["op"], r["line"]) for r in ops_by_user_line(trace, samples, offset_us=0.0)}
    assert placed == {("aten::add", 28), ("aten::addmm", 19), ("aten::gelu", 19)}, placed


def test_last_started_within_is_the_last_op_of_the_thread_inside_the_span():
    """On a real trace: against a brute-force scan, and the same answer (row for row) when the
    table's rows are shuffled out of start order."""
    import dataclasses

    import numpy as np

    from torchneck.analysis.patterns import _last_started_within
    from torchneck.trace.loader import load_trace

    table = load_trace(DATA / "trace_diff__control__control.json.gz").events
    cpu = np.flatnonzero(table.cat == 1)
    rows = cpu[::97]
    got = _last_started_within(table, cpu, rows)
    for r, g in zip(rows.tolist(), got.tolist()):
        start, end = table.ts[r], table.ts[r] + table.dur[r]
        inside = [h for h in cpu.tolist() if table.thread[h] == table.thread[r] and start <= table.ts[h] <= end]
        assert g == (inside[-1] if inside else r)  # rows in start order: the last is the latest start
    assert (got != rows).sum() > len(rows) // 4  # many ops have children: not just themselves
    shuffle = np.random.default_rng(0).permutation(len(table))  # new row i holds old row shuffle[i]
    columns = {f.name: getattr(table, f.name) for f in dataclasses.fields(table) if f.init}
    for name in ("ts", "dur", "cat", "name", "thread", "device", "stream", "args"):
        columns[name] = columns[name][shuffle]
    shuffled = dataclasses.replace(table, **columns)
    new_row = np.argsort(shuffle)  # old row -> new row
    again = _last_started_within(shuffled, np.sort(new_row[cpu]), new_row[rows])
    same = shuffle[again]  # events alike in start and duration are interchangeable
    np.testing.assert_array_equal(table.ts[same], table.ts[got])
    np.testing.assert_array_equal(table.dur[same], table.dur[got])


def test_streamed_quantiles_equal_numpy_s_without_holding_the_values():
    import numpy as np

    from torchneck.analysis.ops import streamed_median, streamed_quantiles

    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 1000, 12_345):
        x = rng.exponential(10, n).astype(np.float32)
        x[: n // 7] = 0.0  # ties and zeros
        got = streamed_quantiles(lambda x=x, n=n: [x[: n // 2], x[n // 2:]], (0.1, 0.5, 0.9))
        np.testing.assert_allclose(got, np.quantile(x.astype(np.float64), [0.1, 0.5, 0.9]), rtol=0, atol=1e-9)
        assert streamed_median(lambda x=x: [x]) == float(np.median(x.astype(np.float64)))
    assert streamed_quantiles(lambda: [], (0.5,)) == []


def test_op_loops_equal_a_scan_of_the_ops_one_by_one_whatever_the_blocks():
    """Sequences of ops with gaps under the limit, of at least TINY_RUN_MIN_OPS ops mostly small,
    fed in blocks cut anywhere: the same wall time and op count as a plain scan."""
    import numpy as np

    from torchneck.analysis.ops import TINY_RUN_MIN_OPS, TINY_RUN_SMALL_SHARE, TinyRuns

    def scan(start, end, small, gap):
        covered, ops, i = 0.0, 0, 0
        while i < len(start):
            j, reach = i, end[i]
            while j + 1 < len(start) and start[j + 1] - reach < gap:
                j += 1
                reach = max(reach, end[j])
            n = j - i + 1
            if n >= TINY_RUN_MIN_OPS and small[i:j + 1].sum() >= TINY_RUN_SMALL_SHARE * n:
                covered, ops = covered + reach - start[i], ops + n
            i = j + 1
        return covered, ops

    rng = np.random.default_rng(1)
    for _ in range(100):
        n = int(rng.integers(1, 3000))
        durs = rng.exponential(8, n)
        start = np.cumsum(rng.exponential(rng.uniform(10, 40), n) + np.r_[0, durs[:-1]])
        end, small = start + durs, durs < rng.uniform(5, 30)
        cuts = sorted(set(rng.integers(1, max(n, 2), size=int(rng.integers(0, 20))).tolist()) - {n})
        runs = TinyRuns(60.0)
        for a, b in zip([0, *cuts], [*cuts, n]):
            runs.add(start[a:b], end[a:b], small[a:b])
        covered, ops = runs.finish()
        want = scan(start, end, small, 60.0)
        assert abs(covered - want[0]) < 1e-6 and ops == want[1]


def test_run_queue_time_read_late_goes_back_to_the_preempted_sample():
    """Linux reports a run-queue wait when the thread gets the CPU back: a long C call preempted
    on a busy machine shows its wait in the next samples' readings. Moved back, the call is
    computing-and-preempted, not waiting; a real wait (a sleep, no excess after it) stays one."""
    import numpy as np
    import pytest

    from torchneck.analysis.python_stacks import _runq_to_its_interval

    dur = np.array([0.040, 0.001, 0.001, 0.050, 0.001])
    cpu = np.array([0.010, 0.001, 0.000, 0.000, 0.001])
    runq = np.array([0.005, 0.010, 0.016, 0.000, 0.000])  # 25 ms of the first call's wait read late
    fixed = _runq_to_its_interval(dur, cpu, runq)
    assert fixed.sum() == pytest.approx(runq.sum())  # moved, never made up
    assert fixed[0] == pytest.approx(0.030) and (dur - cpu - fixed)[:3] == pytest.approx([0.0, 0.0, 0.0])
    assert fixed[3] == 0.0 and dur[3] - cpu[3] - fixed[3] == pytest.approx(0.050)  # the sleep still waits
    unknown = np.full(5, np.nan)
    assert np.isnan(_runq_to_its_interval(dur, cpu, unknown)).all()


def test_a_long_c_call_outside_the_window_is_what_the_window_saw_on_that_line():
    """A sample holding one long C call is taken for op time outside the trace's window, unless
    the window saw the same line's long calls outside ops (NumPy's tanh is not a torch op)."""
    import numpy as np

    from torchneck.analysis.python_stacks import Samples
    from torchneck.analysis.run import _op_seconds_beyond_window

    # frame 0: a NumPy line, frame 1: a line after a big torch product; two samples of each in
    # the window (by in_window), two outside; every sample one 10 ms C call.
    uf = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    n = len(uf)
    s = Samples(frames=[["f", "a.py", 10], ["f", "a.py", 11]], end_s=np.arange(1, n + 1) * 0.01,
                dur_s=np.full(n, 0.01), user_frame=uf, leaf_is_user=np.ones(n, bool), leaf_frame=uf,
                tool=np.zeros(n, bool), importing=np.zeros(n, bool), compiling=np.zeros(n, bool),
                loading=np.zeros(n, bool), start_monotonic_ns=0, stacks=[[int(f)] for f in uf],
                cpu_s=np.full(n, 0.01), runq_s=np.zeros(n))
    in_window = np.array([True] * 4 + [False] * 4)
    op_s = np.array([0.0, 0.01, 0.0, 0.01, 0, 0, 0, 0])  # the trace: line 10's calls ran no op
    est = _op_seconds_beyond_window(s, op_s, in_window)
    assert est[4:].tolist() == [0.0, 0.01, 0.0, 0.01]
    unseen = _op_seconds_beyond_window(s, op_s, np.zeros(n, bool))  # no window: the old guess
    assert unseen.tolist() == [0.01] * n


def test_one_long_call_seen_in_the_window_does_not_decide_for_the_whole_run():
    """float64_mask: in the window, line 17's samples were mostly inside its 20 ms ops, but the one
    long-C-call sample there fell just past its op (clock alignment): that single sample must not
    make the line's 70 long-call samples outside the window Python. Too few seen: the line's
    share over all its window samples decides."""
    import numpy as np

    from torchneck.analysis.python_stacks import Samples
    from torchneck.analysis.run import _op_seconds_beyond_window

    n_in, n_out = 6, 4
    n = n_in + n_out
    uf = np.zeros(n, dtype=np.int64)
    leaf = np.array([False] * 5 + [True] + [True] * n_out)  # one long call in the window, all outside
    s = Samples(frames=[["f", "a.py", 17]], end_s=np.arange(1, n + 1) * 0.02, dur_s=np.full(n, 0.02),
                user_frame=uf, leaf_is_user=leaf, leaf_frame=uf, tool=np.zeros(n, bool), importing=np.zeros(n, bool),
                compiling=np.zeros(n, bool), loading=np.zeros(n, bool), start_monotonic_ns=0,
                stacks=[[0]] * n, cpu_s=np.full(n, 0.02), runq_s=np.zeros(n))
    in_window = np.array([True] * n_in + [False] * n_out)
    op_s = np.array([0.02] * 5 + [0.0] + [0.0] * n_out)
    est = _op_seconds_beyond_window(s, op_s, in_window)
    assert np.allclose(est[n_in:], 0.02 * 5 / 6)


def test_a_long_c_call_the_window_never_saw_is_an_op_unless_the_line_calls_outside_torch(tmp_path):
    """v_ddpm_sampler: `gc.collect()` on every snapshot, after the profiled window: each sample
    there stands for one long C call. Taken for the previous line's op on a line calling torch,
    it is the line's own work on one calling only `gc` or NumPy (read from the run's directory)."""
    import numpy as np

    from torchneck.analysis.python_stacks import Samples
    from torchneck.analysis.run import _op_seconds_beyond_window, calls_outside_torch

    (tmp_path / "ddpm.py").write_text("import gc\nimport numpy as np\ngc.collect()\nu, s, vt = np.linalg.svd(a)\n"
                                      "y = torch.mm(a, np.ones(3))\nfor i in range(\n")
    d = str(tmp_path)
    assert calls_outside_torch("ddpm.py", 3, d) and calls_outside_torch("ddpm.py", 4, d)
    assert not calls_outside_torch("ddpm.py", 5, d) and not calls_outside_torch("ddpm.py", 6, d)
    assert not calls_outside_torch("ddpm.py", 1, d)  # no call at all
    n = 4
    frames = [["release", "ddpm.py", 3], ["step", "ddpm.py", 5]]
    uf = np.array([0, 0, 1, 1], dtype=np.int64)
    s = Samples(frames=frames, end_s=np.arange(1, n + 1) * 0.3, dur_s=np.full(n, 0.3), user_frame=uf,
                leaf_is_user=np.ones(n, bool), leaf_frame=uf, tool=np.zeros(n, bool), importing=np.zeros(n, bool),
                compiling=np.zeros(n, bool), loading=np.zeros(n, bool), start_monotonic_ns=0,
                stacks=[[0], [0], [1], [1]], cpu_s=np.full(n, 0.3), runq_s=np.zeros(n))
    est = _op_seconds_beyond_window(s, np.zeros(n), np.zeros(n, bool), d)
    assert np.allclose(est, [0.0, 0.0, 0.3, 0.3])
    assert np.allclose(_op_seconds_beyond_window(s, np.zeros(n), np.zeros(n, bool)), 0.3)  # sources unknown


def test_a_line_the_window_barely_saw_takes_its_function_s_share_outside_it():
    """A CG solver (n_heat_cg): in the window the line marker keeps `Ap = A @ p`'s samples on its
    own line (84); outside it each 3 ms product's signal is handled at the next call, line 85,
    which the window saw twice (both between ops). Two samples are no share: the function's
    (mostly ops) stands for the line, so its 3 ms samples outside are not taken for Python. A line
    seen long enough in the window keeps its own share."""
    import numpy as np

    from torchneck.analysis.python_stacks import Samples
    from torchneck.analysis.run import _op_seconds_beyond_window

    # window: 20 samples of line 84 inside ops, 2 of line 85 outside them, 20 of line 86 (Python);
    # then 10 samples of each of lines 85 and 86 outside the window
    uf = np.array([0] * 20 + [1] * 2 + [2] * 20 + [1] * 10 + [2] * 10)
    n = len(uf)
    dur = np.full(n, 0.003)
    s = Samples(frames=[["pcg", "a.py", 84], ["pcg", "a.py", 85], ["pcg", "a.py", 86]],
                end_s=np.cumsum(dur), dur_s=dur, user_frame=uf, leaf_is_user=np.ones(n, bool), leaf_frame=uf,
                tool=np.zeros(n, bool), importing=np.zeros(n, bool), compiling=np.zeros(n, bool),
                loading=np.zeros(n, bool), start_monotonic_ns=0, stacks=[[int(f)] for f in uf],
                cpu_s=dur.copy(), runq_s=np.zeros(n))
    in_window = np.arange(n) < 42
    op_s = np.where((uf == 0) & in_window, 0.003, 0.0)
    est = _op_seconds_beyond_window(s, op_s, in_window)
    share = 20 / 42  # pcg's window time in ops
    assert np.allclose(est[42:52], 0.003 * share)  # line 85: the function's share
    assert np.allclose(est[52:], 0.0)  # line 86: seen 60 ms in the window, all Python


def test_a_model_call_line_names_the_module_machinery_even_when_no_sample_is_mostly_outside_ops():
    """`scores = model(batch)` in a worker thread: every sample of the line is mostly inside the
    model's ops, the module call's Python spread thin between them. The line still says what it
    calls (module.py, torch's), so python_hotspot leaves that Python to the op rules."""
    import os

    import numpy as np
    import pytest
    import torch

    from torchneck.analysis.python_stacks import Samples, hotspots

    n = 20
    torch_file = os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "module.py")
    frames = [["worker", "/srv/app.py", 19], ["Module._call_impl", torch_file, 1780]]
    s = Samples(frames=frames, end_s=np.arange(1, n + 1) * 0.001, dur_s=np.full(n, 0.001),
                user_frame=np.zeros(n, dtype=np.int64), leaf_is_user=np.zeros(n, bool),
                leaf_frame=np.ones(n, dtype=np.int64), tool=np.zeros(n, bool), importing=np.zeros(n, bool),
                compiling=np.zeros(n, bool), loading=np.zeros(n, bool), start_monotonic_ns=0,
                stacks=[[0, 1]] * n, cpu_s=np.full(n, 0.001), runq_s=np.zeros(n))
    line = hotspots(s, op_s=np.full(n, 0.0008))["lines"][0]
    assert line["outside_ops_s"] == pytest.approx(0.004)
    assert line["library"] == "Module._call_impl (module.py)" and line["library_is_torch"]


def test_a_loop_gathering_a_few_rows_from_a_big_table_is_a_loop_of_tiny_ops(tmp_path):
    """`h[nbrs].mean(0)` per node: the profiler records the index's source ([2000, 64], 128 k
    elements), not the few rows it gathers; a gather op is judged by its duration, so the loop
    counts as tiny ops. A loop of element-wise ops over that big tensor does not."""
    from torchneck.analysis.nesting import host_nesting
    from torchneck.analysis.ops import dispatch_overhead
    from torchneck.trace.loader import load_trace

    def ev(name, ts, dur, dims):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"Input Dims": dims}}

    def loop(first, second, second_dims):
        events = []
        for i in range(200):
            t = 30.0 * i
            events += [ev(first, t, 6.0, [[2000, 64], []]), ev(second, t + 12.0, 8.0, second_dims)]
        path = tmp_path / f"{first}.json"
        path.write_text(json.dumps({"traceEvents": events}))
        table = load_trace(path).events
        nesting = host_nesting(table)
        return dispatch_overhead(table, nesting, nesting.ops_in(slice(0, len(table))), 6000.0, 1)

    gathers = loop("aten::index", "aten::mean", [[3, 64], [], [], []])
    assert gathers.tiny_run_ops == 400 and gathers.tiny_run_share > 0.9
    adds = loop("aten::add", "aten::mul", [[2000, 64], []])  # big by their tensors: no tiny-op loop
    assert adds.tiny_run_ops == 0


def test_samples_under_torchneck_s_pass_through_wrappers_are_the_program_s():
    """The DataLoader's `__next__` that torchneck wraps (a step tick) runs the program's fetch
    below it: the program's time; a sample inside torchneck's own tick is torchneck's."""
    from torchneck.analysis.python_stacks import _classify_stacks
    from torchneck.sites import TORCHNECK_ROOT

    window = TORCHNECK_ROOT + "capture/window.py"
    frames = [["<module>", "/x/train.py", 9], ["ProfiledWindow._install_clocks.<locals>.__next__", window, 538],
              ["_BaseDataLoaderIter.__next__", "/usr/lib/python3/site-packages/torch/utils/data/dataloader.py", 700],
              ["ProfiledWindow._tick", window, 300]]
    stacks = [[0, 1, 2], [0, 1, 3], [0, 1]]
    tool = _classify_stacks(frames, stacks)[3]
    assert tool.tolist() == [False, True, True]


def test_a_parametrized_weight_s_rebuilds_count_under_whichever_line_read_it():
    """u_beam_translate: the tied embedding's weight is a parametrization, rebuilt both where the
    decoder step reads it (line 106) and under the lookup's module call (line 102); the window's
    `parametrized_s` counts both, the lines only their own."""
    from torchneck.analysis.python_stacks import hotspots, load_samples

    torch_dir = "/usr/lib/python3/site-packages/torch/"
    frames = [["step", "/x/beam.py", 106], ["step", "/x/beam.py", 102],
              ["_inject_property.<locals>.get_parametrized", torch_dir + "nn/utils/parametrize.py", 419],
              ["Module._call_impl", torch_dir + "nn/modules/module.py", 1750],
              ["Embedding.forward", torch_dir + "nn/modules/sparse.py", 190], ["step", "/x/beam.py", 110]]
    data = {"frames": frames, "stacks": [[0, 2], [1, 3, 4, 2], [5]],
            "samples": [[0, 0.01]] * 4 + [[1, 0.01]] * 3 + [[2, 0.01]] * 3}
    hot = hotspots(load_samples(data))
    assert abs(hot["parametrized_s"] - 0.07) < 1e-9 and abs(hot["sampled_s"] - 0.10) < 1e-9
    by_line = {ln["line"]: ln for ln in hot["lines"]}
    assert "get_parametrized" in by_line[106]["library"] and "get_parametrized" not in by_line[102]["library"]


def test_strided_inputs_read_the_trace_s_strides_of_the_ops_asked(tmp_path):
    """A transposed [20000, 384] input (strides [1, 20000]) is against the grain; a contiguous one,
    a broadcast (a zero stride), a channels-last image and a small transposed matrix are not. The
    share is of the op's time; a gzipped trace reads the same; a trace without strides, a file
    too large to read again and a damaged one give nothing."""
    import gzip
    import os

    from torchneck.analysis import layouts
    from torchneck.analysis.layouts import against_the_grain, strided_inputs

    assert against_the_grain([20000, 384], [1, 20000])
    assert not against_the_grain([20000, 384], [384, 1])
    assert not against_the_grain([20000, 384], [0, 1]) and not against_the_grain([384, 20000], [1, 0])
    assert not against_the_grain([8, 64, 56, 56], [200704, 1, 3584, 64])  # channels_last
    assert not against_the_grain([64, 64], [1, 64])  # 4096 elements: too small to matter
    assert not against_the_grain([20000], [2]) and not against_the_grain("[20000, 384]", [1, 20000])

    def ev(name, dur, dims, strides):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 0, "dur": dur,
                "args": {"Input Dims": dims, "Input Strides": strides}}

    events = [ev("aten::embedding_bag", 900, [[20000, 384], [159898], [20000]], [[1, 20000], [1], [1]]),
              ev("aten::embedding_bag", 100, [[20000, 32], [159898], [20000]], [[32, 1], [1], [1]]),
              ev("aten::addmm", 50, [[384], [20000, 384], [384, 384]], [[1], [384, 1], [1, 384]]),
              ev("aten::sum", 10, [[1000, 100]], [[1, 1000]])]
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": events}))
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (plain, packed):
        found, weight = strided_inputs(str(path), ["aten::embedding_bag", "aten::addmm"])  # not sum: not asked
        assert (found.op, found.dims, found.strides, found.calls) == ("aten::embedding_bag", [20000, 384],
                                                                      [1, 20000], 1)
        assert found.share == pytest.approx(0.9)
        assert (weight.op, weight.dims, weight.share) == ("aten::addmm", [384, 384], 1.0)  # the rule skips matmuls
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(events))  # a bare list of events
    assert [s.op for s in strided_inputs(str(bare), ["aten::embedding_bag"])] == ["aten::embedding_bag"]
    unrecorded = tmp_path / "u.json"
    unrecorded.write_text(json.dumps({"traceEvents": [dict(events[0], args={"Input Dims": [[20000, 384]]})]}))
    damaged = tmp_path / "d.json"
    damaged.write_bytes(plain.read_bytes()[:-40])
    assert strided_inputs(str(unrecorded), ["aten::embedding_bag"]) == []
    assert strided_inputs(str(damaged), ["aten::embedding_bag"]) == []
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(packed.read_bytes()[:60])  # a gzip stream cut short
    assert strided_inputs(str(cut), ["aten::embedding_bag"]) == []
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"traceEvents": [dict(events[0], args=5)]}))  # args of another type
    assert strided_inputs(str(odd), ["aten::embedding_bag"]) == []
    deep = tmp_path / "deep.json"  # nesting past msgspec's depth in a field read as it is (round 24's fuzz)
    deep.write_text('{"traceEvents": [' + json.dumps(events[0]) + ', {"ph": "X", "name": ' + "[" * 5000
                    + "]" * 5000 + "}]}")
    assert strided_inputs(str(deep), ["aten::embedding_bag"]) == []
    assert strided_inputs(str(tmp_path / "missing.json"), ["aten::embedding_bag"]) == []
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # read once by the loader; opening it again would wait for a writer forever
    assert strided_inputs(str(fifo), ["aten::embedding_bag"]) == []
    layouts.READ_MAX_BYTES, kept = 100, layouts.READ_MAX_BYTES
    try:
        assert strided_inputs(str(plain), ["aten::embedding_bag"]) == []
    finally:
        layouts.READ_MAX_BYTES = kept


def test_the_steady_state_of_a_loop_without_steps_begins_where_the_loop_was_entered():
    """f_newton_logreg: the capture plan saw the Newton loop steady at 0.82 s (its stacks must
    repeat for a while), but the loop was entered at 0.03 s; a fifth of the run was counted as
    start-up and every window share applied to too short a steady state. The steady samples
    share main's call of the solver: walking back, the samples under that call belong to the
    loop (a line below those seen is an earlier pass's tail); the data set-up above does not."""
    import pytest

    from torchneck.analysis.python_stacks import load_samples
    from torchneck.analysis.run import run_phases

    frames = [["<module>", "n.py", 127], ["main", "n.py", 106], ["make_data", "n.py", 24],
              ["main", "n.py", 114], ["newton", "n.py", 84], ["newton", "n.py", 88], ["cg", "n.py", 59],
              ["newton", "n.py", 91]]
    stacks = [[0, 1, 2], [0, 3, 4], [0, 3, 5, 6], [0, 3, 7]]
    # 30 ms of data set-up, then the loop: passes of 10 x 23 ms in cg, a 1 ms test at line 91
    samples = [[0, 0.01, 0.01, 0.0]] * 3
    for _ in range(8):
        samples += [[1, 0.001, 0.001, 0.0]] + [[2, 0.023, 0.023, 0.0]] * 10 + [[3, 0.001, 0.001, 0.0]]
    data = {"format": 5, "frames": frames, "stacks": stacks, "samples": samples, "start_monotonic_ns": 1_000_000}
    start = 0  # the run's clock began 1 ms before the sampler
    ended = 1_000_000 + int(sum(s[1] for s in samples) * 1e9)
    seen_at = 1_000_000 + int(1.2 * 1e9)  # the plan's steady state: late in the loop
    run = {"started_monotonic_ns": start, "ended_monotonic_ns": ended,
           "clock": {"ticks": [], "window_start_ns": seen_at + 100_000_000, "window_end_ns": ended - 50_000_000},
           "capture": {"plan": "loop", "steady_from_ns": seen_at}}
    assert run_phases(run)["phases"]["startup_s"] == pytest.approx(1.201, abs=1e-3)  # without the samples
    phases = run_phases(run, load_samples(data))["phases"]
    assert phases["startup_s"] == pytest.approx(0.031, abs=1e-3)  # the loop's first sample began at 30 ms
    # a slice (no repeating stacks) or a step clock keeps its own start
    assert run_phases(dict(run, capture={"plan": "slice", "steady_from_ns": seen_at}),
                      load_samples(data))["phases"]["startup_s"] == pytest.approx(1.201, abs=1e-3)
    # an import on the way back ends the walk: a one-time cost stays start-up
    stacks_imp = stacks + [[0, 3, 4, 8]]
    frames_imp = frames + [["_find_and_load", "<frozen importlib._bootstrap>", 1]]
    imported = [list(s) for s in samples]
    imported[20] = [4, 0.023, 0.023, 0.0]
    phases = run_phases(run, load_samples(dict(data, frames=frames_imp, stacks=stacks_imp, samples=imported)))["phases"]
    # (sample 20, in the second pass: the first pass, the second's start and its five cg samples)
    assert phases["startup_s"] == pytest.approx(0.001 + 0.03 + (0.001 + 10 * 0.023 + 0.001) + 0.001 + 5 * 0.023,
                                                abs=1e-3)
