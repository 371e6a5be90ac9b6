"""Trace engine on real traces: loader formats, numbers against a plain-json reference, bad input."""

import gzip
import json

import numpy as np
import pytest
import torch
from conftest import DATA, torchneck, validate_report

from torchneck.analysis.intervals import claim_by_priority, claim_by_priority_in_windows
from torchneck.analysis.nesting import _nest_by_stack, _nest_thread, host_nesting
from torchneck.analysis.summary import analyze_trace as analyze_typed
from torchneck.errors import TraceError
from torchneck.model.base import to_builtins
from torchneck.trace.loader import load_trace
from torchneck.trace.table import Cat

SHARED = sorted(DATA.glob("*.json.gz"))


def analyze_trace(trace):
    """The analysis as report.json holds it."""
    return to_builtins(analyze_typed(trace))


def reference_events(path):
    data = json.loads(gzip.open(path).read() if str(path).endswith(".gz") else open(path).read())
    return data["traceEvents"] if isinstance(data, dict) else data


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    """A real CPU trace from torch.profiler: 4 steps of a small model, shapes and memory."""
    path = tmp_path_factory.mktemp("t") / "cpu.json"
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1)
    with torch.profiler.profile(schedule=sched, record_shapes=True, profile_memory=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(6):
            loss = model(torch.randn(16, 32).double().float()).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return path


def test_steps_match_a_plain_json_reference(cpu_trace):
    trace = load_trace(cpu_trace)
    a = analyze_trace(trace)
    ref = sorted((e["ts"], e["dur"]) for e in reference_events(cpu_trace)
                 if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    assert a["steps"]["count"] == len(ref) == 4
    got = [(s["start_us"], s["duration_us"]) for s in a["steps"]["items"]]
    # durations are float32 in the table: exact to 1e-3 µs below ~16 ms, to float32's
    # precision beyond (a step of a loaded machine takes 64 ms: +-0.004 µs)
    np.testing.assert_allclose(got, ref, rtol=2e-7, atol=1e-3)
    # The breakdown claims every microsecond of each step exactly once.
    for s in a["steps"]["items"]:
        assert sum(s["breakdown_us"].values()) == pytest.approx(s["duration_us"], abs=1e-3)
    assert a["gpu"]["present"] is False and a["gpu"]["devices"] == []
    assert a["memory"]["recorded"]


def test_compact_indented_and_gzip_give_identical_tables(cpu_trace, tmp_path):
    events = reference_events(cpu_trace)
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps({"traceEvents": events}, separators=(",", ":")))
    bare = tmp_path / "bare.json.gz"
    bare.write_bytes(gzip.compress(json.dumps(events, indent=2).encode()))
    t0 = load_trace(cpu_trace).events
    for other in (load_trace(compact).events, load_trace(bare).events):
        assert len(other) == len(t0)
        np.testing.assert_array_equal(other.ts, t0.ts)
        assert [other.strings[i] for i in other.name] == [t0.strings[i] for i in t0.name]


def test_false_boundaries_inside_strings_are_not_split(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": 'weird}, {"name": "x', "pid": 1, "tid": 1,
               "ts": 10.0 + i, "dur": 0.5, "args": {"Input Dims": [[1, 2]]}} for i in range(1000)]
    p = tmp_path / "weird.json"
    p.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(p).events
    assert len(t) == 1000 and t.strings[t.name[0]] == 'weird}, {"name": "x'


def test_parallel_decoding_equals_serial(tmp_path):
    src = DATA / "trace_diff__control__control.json.gz"
    serial = load_trace(src, workers=1, keep_correlation=True).events
    parallel = load_trace(src, workers=2, keep_correlation=True).events
    assert len(serial) == len(parallel)
    np.testing.assert_array_equal(serial.ts, parallel.ts)
    np.testing.assert_array_equal(serial.correlation, parallel.correlation)


def _same_tables(a, b):
    assert len(a) == len(b)
    for col in ("ts", "dur", "cat", "correlation", "device", "stream", "nbytes", "launcher"):
        np.testing.assert_array_equal(np.asarray(getattr(a, col)), np.asarray(getattr(b, col)))
    assert [a.strings[i] for i in a.name] == [b.strings[i] for i in b.name]
    assert [a.strings[i] if i >= 0 else None for i in a.shapes] == [b.strings[i] if i >= 0 else None for i in b.shapes]


def test_parallel_ranges_of_a_plain_file_equal_serial(tmp_path, monkeypatch):
    """Uncompressed files are cut into byte ranges that worker processes read themselves."""
    import torchneck.trace.decode as decode
    import torchneck.trace.loader as loader
    import torchneck.trace.slices as slices

    plain = tmp_path / "control.json"
    plain.write_bytes(gzip.open(DATA / "trace_diff__control__control.json.gz").read())
    serial = load_trace(plain, workers=1).events
    monkeypatch.setattr(slices, "BLOCK_BYTES", 256 << 10)
    monkeypatch.setattr(slices, "_PROBE_BYTES", 8 << 10)
    ranges = []
    real = loader.slice_events

    def counting(*args, **kwargs):
        gen, sent = real(*args, **kwargs), None
        while True:
            try:
                item = gen.send(sent)
            except StopIteration:
                return
            if isinstance(item, tuple):
                ranges.append(item)
            sent = yield item

    monkeypatch.setattr(loader, "slice_events", counting)
    mapped = []
    real_map = decode.map_range
    monkeypatch.setattr(decode, "map_range", lambda *a: mapped.append(a) or real_map(*a))
    _same_tables(serial, load_trace(plain, workers=2).events)
    assert len(ranges) > 20  # most of the file went as ranges
    assert len(mapped) == len(ranges) - 1  # each but the probe scanned where it lies in the file (mmap)

    def no_mmap(*a):
        raise OSError("no mmap on this file system")

    monkeypatch.setattr(decode, "map_range", no_mmap)  # then each range is read into a buffer
    _same_tables(serial, load_trace(plain, workers=2).events)
    with open(plain, "r+b") as f:  # a file cut after its ranges were planned is not mapped past its end
        f.truncate(plain.stat().st_size - 10)
    with pytest.raises(ValueError, match="shorter"):
        real_map(str(plain), 0, plain.stat().st_size + 10)


def test_parallel_ranges_survive_cuts_inside_strings(tmp_path, monkeypatch):
    """A planned cut that lands on `}, {` inside a name fails to decode in the worker; the main
    process joins it with the next range, so no event is lost or split."""
    import torchneck.trace.slices as slices

    weird = 'weird}, {"name": "x' * 40
    names = [weird if i % 5 == 0 else f"op{i % 3}" for i in range(3000)]
    events = [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
               "ts": 10.0 + i, "dur": 0.5, "args": {"Input Dims": [[1, i]]}} for i, name in enumerate(names)]
    p = tmp_path / "weird.json"
    p.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(slices, "BLOCK_BYTES", 16 << 10)
    monkeypatch.setattr(slices, "_PROBE_BYTES", 2 << 10)
    t = load_trace(p, workers=2).events
    assert len(t) == 3000
    assert [t.strings[i] for i in t.name] == names
    assert [json.loads(t.strings[i])[0][1] for i in t.shapes] == list(range(3000))


def _pools_used(monkeypatch):
    """Record which kind of worker pool `_load_parallel` starts."""
    import multiprocessing.pool as mp_pool

    used = []
    real_threads = mp_pool.ThreadPool

    def threads(*args, **kwargs):
        used.append("threads")
        return real_threads(*args, **kwargs)

    monkeypatch.setattr(mp_pool, "ThreadPool", threads)
    return used


def _numbered_events(n, pid=1):
    return [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": pid, "tid": 1,
             "ts": 10.0 + i, "dur": 0.5, "args": {"correlation": i}} for i in range(n)]


def test_parallel_native_slices_use_threads_and_declined_ones_still_decode(tmp_path, monkeypatch):
    """The scanner takes the first slice, so threads decode the rest; a slice it declines
    midway (a float pid: msgspec's to judge) is decoded by msgspec in its thread, in order."""
    import torchneck.trace.decode as decode
    import torchneck.trace.slices as slices

    if decode._scan is None:
        pytest.skip("the native scanner is not built")
    events = _numbered_events(6000)
    events[3000]["pid"] = 1.5  # the scanner declines the slice holding this one
    p = tmp_path / "mixed.json"
    p.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(slices, "BLOCK_BYTES", 16 << 10)
    monkeypatch.setattr(slices, "_PROBE_BYTES", 2 << 10)
    used = _pools_used(monkeypatch)
    t = load_trace(p, workers=2, keep_correlation=True).events
    assert used == ["threads"]
    assert len(t) == 6000
    np.testing.assert_array_equal(t.correlation, np.arange(6000))
    assert t.threads.pid[t.thread[3000]] == "1.5"


def test_parallel_declined_first_slice_uses_processes(tmp_path, monkeypatch):
    """A trace whose first slice the scanner declines (ROCm's string fields, odd types) is
    decoded by msgspec in worker processes, as fast as before the scanner existed."""
    import torchneck.trace.loader as loader
    import torchneck.trace.slices as slices

    events = _numbered_events(6000, pid="rocm")
    p = tmp_path / "strings.json"
    p.write_text(json.dumps({"traceEvents": [{**events[0], "pid": 2.5}, *events[1:]]}))
    monkeypatch.setattr(slices, "BLOCK_BYTES", 16 << 10)
    monkeypatch.setattr(slices, "_PROBE_BYTES", 2 << 10)
    used = _pools_used(monkeypatch)
    t = load_trace(p, workers=2, keep_correlation=True).events
    assert used == []
    assert len(t) == 6000
    np.testing.assert_array_equal(t.correlation, np.arange(6000))
    # Chosen by size instead: threads from THREAD_MIN_BYTES, and a declined trace under
    # PARALLEL_MIN_BYTES stays in them (msgspec as serial) rather than paying for a fork.
    monkeypatch.setattr(loader, "THREAD_MIN_BYTES", 1 << 10)
    t = load_trace(p, keep_correlation=True).events
    assert used == ["threads"]
    np.testing.assert_array_equal(t.correlation, np.arange(6000))
    monkeypatch.setattr(loader, "PARALLEL_MIN_BYTES", 1 << 10)
    np.testing.assert_array_equal(load_trace(p, keep_correlation=True).events.correlation, np.arange(6000))
    assert used == ["threads"]  # the large one went to processes


def test_gpu_busy_equals_independent_interval_union():
    path = DATA / "trace_diff__control__control.json.gz"
    a = analyze_trace(load_trace(path))
    lo = a["steps"]["items"][0]["start_us"]
    hi = lo + a["steps"]["window_us"]
    spans = sorted((max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in reference_events(path)
                   if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                   and e["ts"] < hi and e["ts"] + e["dur"] > lo)
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in spans:  # textbook merge, independent of torchneck's numpy version
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    dev = a["gpu"]["devices"][0]
    assert dev["busy_us"] == pytest.approx(busy, rel=1e-6)
    idle = dev["idle_breakdown"]
    assert sum(idle.values()) == pytest.approx(dev["idle_us"], rel=1e-6)
    assert a["steps"]["count"] == 6


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name[:30])
def test_every_shared_trace_analyses(path):
    trace = load_trace(path)
    ref = [e for e in reference_events(path) if e.get("ph") == "X"]
    assert len(trace.events) + len(trace.python) == len(ref)
    a = analyze_trace(trace)
    assert a["steps"]["count"] >= 1
    r = torchneck("analyze", str(path), "--json", "-")
    assert r.returncode == 0, r.stderr
    assert validate_report(json.loads(r.stdout))["schema_version"] == 1


def test_rocm_and_old_categories(tmp_path):
    amd = load_trace(DATA / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert (amd.events.cat == Cat.KERNEL).sum() == 14 and amd.meta.base_time_ns
    old = [{"ph": "X", "cat": c, "name": n, "pid": p, "tid": t, "ts": ts, "dur": 5,
            "args": {"correlation": 1} if c in ("Kernel", "Runtime") else {}}
           for c, n, p, t, ts in [("Operator", "aten::mm", 1, 1, 0), ("Runtime", "cudaLaunchKernel", 1, 1, 1),
                                  ("Kernel", "gemm", 0, "stream 7", 3), ("Memcpy", "Memcpy HtoD", 0, "stream 7", 9)]]
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"traceEvents": old}))
    t = load_trace(p).events
    assert sorted(t.cat.tolist()) == sorted([Cat.CPU_OP, Cat.RUNTIME, Cat.KERNEL, Cat.GPU_MEMCPY])
    assert set(t.stream[t.cat == Cat.KERNEL].tolist()) == {7}


def test_truncated_json_keeps_the_steps_before_the_cut(cpu_trace, tmp_path):
    raw = cpu_trace.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: int(len(raw) * 0.8)])
    trace = load_trace(cut)
    assert any("truncated" in w for w in trace.meta.warnings)
    assert len(trace.events) > 0.5 * len(load_trace(cpu_trace).events)
    r = torchneck("analyze", str(cut), "--quiet")
    assert r.returncode == 0


def test_truncated_gzip_is_a_warning(tmp_path):
    raw = (DATA / "nccl_parser_config__nccl_data.json.gz").read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(raw[: len(raw) // 2])
    trace = load_trace(p)
    assert trace.meta.warnings and len(trace.events) > 1000


@pytest.mark.parametrize("content,message", [
    (b"hello world", "not JSON"),
    (b'{"foo": 1}', "no \\\"traceEvents\\\""),
    (b'{"traceEvents": []}', "holds no events"),
    (b"", "empty"),
])
def test_bad_input_is_one_clear_line(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceError):
        load_trace(p)
    r = torchneck("analyze", str(p))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "bad.json" in r.stderr and "Traceback" not in r.stderr


def test_negative_duration_and_unknown_phase_are_tolerated(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": -5},
              {"ph": "Z", "name": "?", "pid": 1, "tid": 1, "ts": 1},
              {"ph": "X", "cat": "new_thing", "name": "b", "pid": "p", "tid": "t", "ts": 2}]
    p = tmp_path / "odd.json"
    p.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(p)
    assert len(trace.events) == 2 and trace.events.dur.min() == 0
    assert trace.meta.unknown_phases == {"Z": 1}


def test_events_still_running_at_the_profilers_stop_end_at_the_last_finished_one(tmp_path):
    """Kineto ends an op that was running when the profiler stopped at the stop itself, after
    its own processing: a backward node cut by a window's bound claimed 85 % of the window."""
    def op(name, ts, dur):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
    events = [op("ProfilerStep#1", 1000.0, 400.0), op("aten::mm", 1010.0, 300.0),
              op("line 90", 1500.0, 8500.0),  # open at the stop, as is the node under it
              op("autograd::engine::evaluate_function: DivBackward0", 1600.0, 8400.0),
              op("aten::div", 1610.0, 40.0),
              dict(op("kernel", 1620.0, 9000.0), cat="kernel"),  # the device's own end: kept
              {"ph": "i", "s": "t", "name": "Record Window End", "pid": 1, "tid": 1, "ts": 10000.0}]
    p = tmp_path / "cut.json"
    p.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(p)
    names = [trace.events.strings[i] for i in trace.events.name]
    ends = dict(zip(names, (trace.events.ts + trace.events.dur).tolist()))
    assert ends["line 90"] == ends["autograd::engine::evaluate_function: DivBackward0"] == 1650.0
    assert ends["aten::mm"] == 1310.0 and ends["kernel"] == 10620.0 and trace.meta.open_at_stop == 2
    late = [dict(e, ts=e["ts"] + 1.2e12) for e in events]  # a clock of 1e12 µs (float32 cannot hold it)
    late.insert(0, op("earlier", 1.2e12 + 500.0, 10.0))
    p.write_text(json.dumps({"traceEvents": late}))
    trace = load_trace(p)
    durs = dict(zip([trace.events.strings[i] for i in trace.events.name], trace.events.dur.tolist()))
    assert trace.meta.open_at_stop == 2 and durs["line 90"] == 150.0 and durs["earlier"] == 10.0
    events[-1]["name"] = "Something Else"  # no stop recorded: nothing changes
    p.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(p)
    assert trace.meta.open_at_stop == 0 and float((trace.events.ts + trace.events.dur).max()) == 10620.0


@pytest.mark.parametrize("big", [False, True])
def test_ids_are_stored_in_the_narrowest_type_that_holds_every_value(tmp_path, big):
    base = 2**40 if big else 7
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 1,
               "args": {"correlation": base + 2 * i, "device": 0, "stream": 7}}
              for i in range(3)]
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 5, "dur": 1,
                   "args": {"bytes": 3 * 2**31 if big else 64, "device": 0, "stream": 7}})
    p = tmp_path / "ids.json"
    p.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(p, keep_correlation=True).events
    assert t.correlation.dtype == np.dtype(np.int64 if big else np.int8)
    assert t.nbytes.rows.tolist() == [3]  # kept only where set
    assert t.stream.dtype == t.device.dtype == t.thread.dtype == np.int8
    assert t.correlation[:3].tolist() == [base, base + 2, base + 4]
    assert t.nbytes[3] == (3 * 2**31 if big else 64)


def test_narrow_columns_widen_when_a_later_slice_needs_it(tmp_path, monkeypatch):
    """Columns start as int8 and widen as slices bring bigger values; earlier values survive."""
    import torchneck.trace.slices as slices

    values = [i if i < 2500 else 2**20 + i for i in range(3000)] + [2**40, -5]
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 1,
               "args": {"correlation": v, "device": 0, "stream": 7 + i % 300}}
              for i, v in enumerate(values)]
    p = tmp_path / "widening.json"
    p.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(slices, "BLOCK_BYTES", 16 << 10)
    t = load_trace(p, workers=1, keep_correlation=True).events
    assert t.correlation.dtype == np.int64 and t.correlation.tolist() == values
    assert t.stream.dtype == np.int16 and t.stream.tolist() == [7 + i % 300 for i in range(len(values))]


def test_start_order_is_start_then_longest_first_then_file_order(monkeypatch):
    import torchneck.trace.merge as merge
    from torchneck.trace.merge import _start_order

    monkeypatch.setattr(merge, "ORDER_BLOCK", 64)  # ties across the blocks of the tie search
    rng = np.random.default_rng(0)
    for _ in range(20):
        ts = rng.integers(0, 300, 5000).astype(np.float64)  # many equal starts
        dur = rng.integers(0, 5, 5000).astype(np.float32)
        rows = np.flatnonzero(rng.random(5000) < 0.7)
        np.testing.assert_array_equal(_start_order(ts, dur, rows), rows[np.lexsort((-dur[rows], ts[rows]))])
        np.testing.assert_array_equal(_start_order(ts, dur), np.lexsort((-dur, ts)))


def test_every_phase_is_sorted_out_alike_by_the_typed_and_the_loose_decoder():
    """The typed decoder picks a struct per phase (flows decode empty); the loose one reads `ph`
    as data. Both must give the same columns, counts and side tables."""
    from torchneck.trace.decode import events_to_columns
    from torchneck.trace.schema import EVENT_LIST_DECODER, LOOSE_EVENT_LIST_DECODER

    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "main"}},
        {"name": "aten::mm", "ph": "X", "cat": "cpu_op", "pid": 7, "tid": 8, "ts": 1.5, "dur": 4,
         "args": {"External id": 3, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 3, "dur": 2,
         "args": {"correlation": 9, "device": 0, "stream": 7}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 7, "tid": 8, "ts": 2,
         "args": {"Bytes": 48, "Total Allocated": 48, "Device Type": 0, "Addr": 99}},
        {"ph": "I", "name": "marker", "pid": 7, "tid": 8, "ts": 2},
        {"ph": "s", "id": 9, "pid": 7, "tid": 8, "ts": 2, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 3, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "t", "id": 9, "pid": 0, "tid": 7, "ts": 3},
        {"ph": "B", "name": "b", "pid": 7, "tid": 8, "ts": 1},
        {"ph": "E", "pid": 7, "tid": 8, "ts": 2},
        {"ph": "C", "name": "counter", "pid": 7, "ts": 2, "args": {"v": 1}},
    ]
    data = json.dumps(events).encode()
    typed = events_to_columns(EVENT_LIST_DECODER.decode(data))
    loose = events_to_columns(LOOSE_EVENT_LIST_DECODER.decode(data))
    for chunk in (typed, loose):
        assert chunk.flow_count == 3
        assert chunk.unknown_phases == {"B": 1, "E": 1, "C": 1}
        assert len(chunk.x["ts"]) == 2 and chunk.mem["nbytes"].tolist() == [48]
        assert sorted(chunk.meta_events) == [("process_name", "7", "", "python"),
                                             ("thread_name", "7", "8", "main")]
    for key in typed.x:
        got = [typed.strings[i] if i >= 0 else None for i in typed.x[key]] if key in ("name", "shapes", "types") \
            else typed.x[key].tolist()
        want = [loose.strings[i] if i >= 0 else None for i in loose.x[key]] if key in ("name", "shapes", "types") \
            else loose.x[key].tolist()
        if key not in ("pid", "tid"):
            assert got == want, key
    assert typed.strings[typed.x["shapes"][0]] == "[[2, 3], [3, 4]]"


def _walk_nesting(table):
    """The reference: the call-stack walk over each thread's host events, one by one."""
    from torchneck.analysis.nesting import HOST_CATEGORIES

    parent = np.full(len(table), -1)
    self_time = table.dur.astype(np.float64)
    host = np.flatnonzero(np.isin(table.cat, HOST_CATEGORIES))
    rows = host[np.lexsort((-table.dur[host], table.ts[host], table.thread[host]))]
    for th in np.unique(table.thread[rows]):
        seg = rows[table.thread[rows] == th]
        ts, dur = table.ts[seg], table.dur[seg].astype(np.float64)
        par, _, child = _nest_by_stack(ts, dur, ts + dur)
        parent[seg[par >= 0]] = seg[par[par >= 0]]
        self_time[seg] = np.maximum(dur - child, 0)
    return parent, self_time


@pytest.mark.parametrize("epoch", [0.0, 1.6612e15])
@pytest.mark.parametrize("seed", range(6))
def test_vectorised_nesting_equals_the_stack_walk_on_messy_intervals(seed, epoch):
    """Nested calls plus the mess real traces hold: equal starts, zero-length events, children
    sticking out of their parent, siblings that overlap; and timestamps in µs since 1970, where
    float64 steps by 0.25 µs, so a 0.1 µs event ends where it starts."""
    rng = np.random.default_rng(seed)
    ts, dur = [], []

    def call(start, length, level):
        ts.append(start)
        dur.append(length)
        t = start
        while level < 6 and rng.random() < 0.7 and t < start + length:
            child = float(rng.choice([0.0, rng.uniform(0, length / 2)]))
            call(t, child, level + 1)
            t += child + float(rng.choice([0.0, rng.uniform(0, length / 4)]))

    t = 0.0
    for _ in range(200):
        call(t, float(rng.integers(1, 100)), 0)
        t += float(rng.choice([0.0, rng.integers(0, 120)]))  # 0: the next one starts at once
    ts = np.round(np.array(ts), 1) + epoch
    dur = np.round(np.array(dur), 1)
    messy = rng.random(len(dur)) < 0.02  # ~2% stick out of their parent or overlap a sibling
    dur[messy] += rng.uniform(0, 30, int(messy.sum())).round(1)
    tiny = rng.random(len(dur)) < 0.05
    dur[tiny] = 0.1
    order = np.lexsort((-dur, ts))
    ts, dur = ts[order], dur[order]
    par, depth, child = _nest_thread(ts, dur, ts + dur)
    ref_par, ref_depth, ref_child = _nest_by_stack(ts, dur, ts + dur)
    assert messy.any() and (ref_depth > 3).any()
    np.testing.assert_array_equal(par, ref_par)
    np.testing.assert_array_equal(depth, ref_depth)
    np.testing.assert_allclose(child, ref_child)


@pytest.mark.parametrize("block", [None, 50])
@pytest.mark.parametrize("path", SHARED[:6], ids=lambda p: p.name[:40])
def test_vectorised_nesting_equals_the_stack_walk_on_real_traces(path, block, cpu_trace, monkeypatch):
    """Also with threads cut into small blocks (as large traces are) at empty-stack points."""
    import torchneck.analysis.nesting as nesting_mod

    monkeypatch.setattr(nesting_mod, "_nest", None)  # the numpy path (test_native_walk_* checks the C one)
    calls = []
    real = nesting_mod._nest_thread
    monkeypatch.setattr(nesting_mod, "_nest_thread", lambda *a: calls.append(len(a[0])) or real(*a))
    if block:
        monkeypatch.setattr(nesting_mod, "NESTING_BLOCK", block)
    for p in (path, cpu_trace):
        table = load_trace(p).events
        nesting = host_nesting(table)
        parent, self_time = _walk_nesting(table)
        np.testing.assert_array_equal(nesting.parent, parent)
        ops = np.flatnonzero(table.cat == 1)  # self time is kept for the CPU ops
        np.testing.assert_array_equal(nesting.ops, ops)
        np.testing.assert_allclose(nesting.self_time(ops), self_time[ops])
    if block:  # the threads were really cut into blocks
        assert max(calls) <= block * 2 or len(calls) > len(table.threads.pid)


def test_claim_by_priority_sums_to_span():
    s = [(np.array([0.0, 5.0]), np.array([4.0, 6.0])), (np.array([2.0]), np.array([8.0]))]
    parts = claim_by_priority(s, 0.0, 10.0)
    assert parts == [5.0, 3.0, 2.0]


@pytest.mark.parametrize("seed", range(5))
def test_claims_in_all_windows_at_once_equal_one_window_at_a_time(seed):
    """The step breakdown claims every step in one pass (`claim_by_priority_in_windows`); it must
    give what `claim_by_priority` gives window by window: windows that overlap, touch, hold no
    interval, or lie outside all of them; intervals of zero length, nested, or ending where
    the next starts."""
    rng = np.random.default_rng(seed)
    spans = []
    for _ in range(4):
        n = int(rng.integers(0, 300))
        starts = np.sort(np.round(rng.uniform(0, 1000, n), 1))
        spans.append((starts, starts + np.round(rng.exponential(5, n) * (rng.random(n) > 0.1), 1)))
    lo = np.concatenate([np.round(rng.uniform(-50, 1000, 40), 1), [0.0, 1000.0, 2000.0]])
    hi = lo + np.concatenate([np.round(rng.exponential(60, 40), 1), [0.0, 500.0, 10.0]])
    together = claim_by_priority_in_windows(spans, lo, hi)
    for i in range(len(lo)):
        one = claim_by_priority(spans, lo[i], hi[i])
        np.testing.assert_allclose(together[i], one, atol=1e-6)


def test_multi_rank_directory(tmp_path):
    for name in ("timeline_analysis__sampled_rank-0.json.gz", "trace_filter__sampled_rank-1.json.gz"):
        (tmp_path / name).write_bytes((DATA / name).read_bytes())
    r = torchneck("analyze", str(tmp_path), "--json", "-")
    assert r.returncode == 0, r.stderr
    ranks = validate_report(json.loads(r.stdout))["ranks"]
    assert sorted(a["trace"]["rank"] for a in ranks) == [0, 1]
    assert all(a["steps"]["count"] == 2 for a in ranks)


def test_ruff_clean():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks"], cwd=root,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_sampler_survives_a_handler_slower_than_its_interval():
    """A sample that takes longer than the timer's interval must not nest samples into itself
    (CPython runs pending handlers at the handler's own bytecode boundaries)."""
    import time

    from torchneck.capture.sampler import StackSampler

    sampler = StackSampler(0.0002)  # 0.2 ms: shorter than the slowed sample below
    original = sampler._stack_id

    def slow_stack_id(frame):
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass
        return original(frame)

    sampler._stack_id = slow_stack_id
    sampler.start()
    try:
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            sum(range(100))
    finally:
        sampler.stop()
    assert len(sampler.samples) > 50
    assert sampler.method == "wall-timer"


@pytest.mark.parametrize("block", [7, 1 << 18])
@pytest.mark.parametrize("span", [40, 10**12])  # keys counted into slots / sorted by np.unique
def test_grouped_totals_in_blocks_equal_one_unique_over_all_rows(block, span, monkeypatch):
    import torchneck.analysis.groups as groups
    import torchneck.analysis.intervals as intervals

    monkeypatch.setattr(intervals, "ROW_BLOCK", block)
    rng = np.random.default_rng(1)
    rows = np.sort(rng.choice(10_000, 3000, replace=False)).astype(np.int32)
    key_col = rng.integers(-span // 2, span // 2, 10_000) if span < 100 else rng.choice(
        rng.integers(-span, span, 50), 10_000)
    weight = rng.random(10_000).astype(np.float32)
    g = groups.grouped_totals(rows, lambda r: key_col[r], [lambda r: weight[r]])
    uniq, inverse = np.unique(key_col[rows], return_inverse=True)
    np.testing.assert_array_equal(g.keys, uniq)
    np.testing.assert_array_equal(g.count, np.bincount(inverse))
    np.testing.assert_allclose(g.sums[0], np.bincount(inverse, weights=weight[rows]), rtol=1e-12)
    np.testing.assert_array_equal(g.first_row, [rows[np.argmax(key_col[rows] == k)] for k in uniq])
    empty = groups.grouped_totals(rows[:0], lambda r: key_col[r], [lambda r: weight[r]])
    assert len(empty.keys) == 0 and len(empty.sums[0]) == 0


@pytest.mark.parametrize("strict", [True, False])
def test_blocked_row_helpers_equal_whole_column_numpy(strict, monkeypatch):
    import torchneck.analysis.intervals as iv

    monkeypatch.setattr(iv, "ROW_BLOCK", 37)
    rng = np.random.default_rng(2)
    ts = np.sort(rng.integers(0, 2000, 1000)).astype(np.float64)
    dur = rng.integers(0, 60, 1000).astype(np.float32)
    mask = rng.random(1000) < 0.6
    lo, hi = 400.0, 1500.0
    end = ts + dur
    want = (ts < hi) & (end > lo) if strict else (ts <= hi) & (end >= lo)
    np.testing.assert_array_equal(iv.overlapping_rows(ts, dur, lo, hi, strict), np.flatnonzero(want))
    np.testing.assert_array_equal(iv.overlapping_rows(ts, dur, lo, hi, strict, mask), np.flatnonzero(want & mask))
    rows = np.flatnonzero(mask)
    got, ref = iv.union_of_rows(ts, dur, rows), iv.merge(ts[rows], ts[rows] + dur[rows])
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])


@pytest.mark.parametrize("name", ["trace_diff__control__control.json.gz", "gpu_h100__launch_bound.json.gz",
                                  "gpu_h100__two_streams.json.gz"])
def test_step_breakdown_in_small_batches_equals_one_batch(name, monkeypatch):
    """Batches of steps carry the events still open into the next batch: the same numbers as
    claiming every step at once, for batches of a step or two."""
    import torchneck.analysis.steps as steps_mod

    table = load_trace(DATA / name).events
    steps = steps_mod.find_steps(table)
    assert len(steps) >= 3
    whole = steps_mod.step_breakdown(table, steps)
    batches = []
    real = steps_mod._step_batches
    monkeypatch.setattr(steps_mod, "_step_batches", lambda *a: (batches.append(b) or b for b in real(*a)))
    monkeypatch.setattr(steps_mod, "STEP_BATCH_ROWS", 50)
    small = steps_mod.step_breakdown(table, steps)
    assert len(batches) >= len(steps) // 2
    for w, s in zip(whole, small):
        assert w.keys() == s.keys()
        np.testing.assert_allclose(list(s.values()), list(w.values()), rtol=1e-9, atol=1e-6)


@pytest.mark.parametrize("path", SHARED[:6], ids=lambda p: p.name[:40])
def test_native_walk_equals_the_numpy_nesting_exactly(path, cpu_trace, monkeypatch):
    import torchneck.analysis.nesting as nesting_mod

    if nesting_mod._nest is None:
        pytest.skip("the C walk is not built")
    for p in (path, cpu_trace):
        table = load_trace(p).events
        _assert_every_walk_agrees(table, monkeypatch)


def _assert_every_walk_agrees(table, monkeypatch) -> None:
    """The C walk in row order with a stack per thread (the default on a loaded table), the C
    walk over host rows grouped by thread, and the numpy path give identical arrays."""
    import torchneck.analysis.nesting as nesting_mod

    calls = []
    real = nesting_mod._native_table_walk
    with monkeypatch.context() as m:
        m.setattr(nesting_mod, "_native_table_walk", lambda *a: calls.append(1) or real(*a))
        by_table = host_nesting(table)
    assert calls, "a loaded table is in start order: the row-order walk must be used"
    with monkeypatch.context() as m:
        m.setattr(nesting_mod, "_native_table_walk", lambda *a: None)
        by_rows = host_nesting(table)
    with monkeypatch.context() as m:
        m.setattr(nesting_mod, "_nest", None)
        vectorised = host_nesting(table)
    for other in (by_rows, vectorised):
        np.testing.assert_array_equal(by_table.parent, other.parent)
        np.testing.assert_array_equal(by_table.ops, other.ops)
        np.testing.assert_array_equal(by_table.op_self_time, other.op_self_time)
    assert by_table.op_self_time.dtype == np.float32 and by_table.ops.dtype == np.int32


def test_native_walks_agree_with_hundreds_of_interleaved_threads(tmp_path, monkeypatch):
    """300 threads (ids beyond int8: the thread column is int16), their events interleaved in
    time, nested a few deep, with ties and GPU rows between: every walk gives the same arrays."""
    import torchneck.analysis.nesting as nesting_mod

    if nesting_mod._nest is None:
        pytest.skip("the C walk is not built")
    rng = np.random.default_rng(11)
    events = []
    for i in range(6000):
        tid = int(rng.integers(0, 300))
        ts = float(rng.integers(0, 2000))
        for depth in range(int(rng.integers(1, 4))):  # nested: each inside the one before
            events.append({"ph": "X", "cat": "cpu_op", "name": f"op{depth}", "pid": 1, "tid": tid,
                           "ts": ts + depth, "dur": float(40 - 10 * depth)})
        if i % 7 == 0:
            events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": 3.0,
                           "args": {"device": 0, "stream": 7}})
    p = tmp_path / "threads.json"
    p.write_text(json.dumps({"traceEvents": events}))
    table = load_trace(p).events
    assert table.thread.dtype == np.int16
    _assert_every_walk_agrees(table, monkeypatch)


@pytest.mark.parametrize("native", [True, False])
def test_a_stack_40000_deep_nests_and_its_depths_count_the_enclosing_events(tmp_path, native, monkeypatch):
    """40000 events each inside the one before (deeper than an int16 holds), by the C walk and
    by the numpy path; `depth_of` climbs the parents."""
    import torchneck.analysis.nesting as nesting_mod

    if not native:
        monkeypatch.setattr(nesting_mod, "_nest", None)
    n = 40_000
    events = [{"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1, "tid": 1, "ts": float(i), "dur": float(2 * (n - i))}
              for i in range(n)]
    events.append({"ph": "X", "cat": "cpu_op", "name": "g", "pid": 1, "tid": 2, "ts": 5.0, "dur": 1.0})
    p = tmp_path / "deep.json"
    p.write_text(json.dumps({"traceEvents": events}))
    table = load_trace(p).events
    nesting = host_nesting(table)
    deep = np.flatnonzero(table.thread == table.thread[0])
    np.testing.assert_array_equal(nesting.parent[deep], np.append(-1, deep[:-1]))
    assert nesting.self_time(deep[[-1, 0]]).tolist() == [2.0, 2.0]
    other = int(np.flatnonzero(table.thread != table.thread[0])[0])
    np.testing.assert_array_equal(nesting_mod.depth_of(nesting, [deep[0], deep[7], deep[-1], other]), [0, 7, n - 1, 0])


def test_distinct_equals_numpy_unique_for_small_and_wide_ranges():
    from torchneck.analysis.groups import distinct

    rng = np.random.default_rng(3)
    for values in (rng.integers(-1, 20, 5000).astype(np.int8), rng.integers(-5, 3000, 5000).astype(np.int16),
                   rng.integers(0, 2**40, 5000), np.array([-1], dtype=np.int32), np.empty(0, dtype=np.int64)):
        got = distinct(values)
        np.testing.assert_array_equal(got, np.unique(values))
        assert got.dtype == values.dtype


@pytest.mark.parametrize("block", [97, 1 << 16])
def test_totals_by_id_equal_unique_and_bincount(block, monkeypatch):
    import torchneck.analysis.intervals as iv
    from torchneck.analysis.groups import totals_by_id

    monkeypatch.setattr(iv, "ROW_BLOCK", block)  # counted in many blocks, or in one
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 300, 4000).astype(np.int16)
    w = rng.random(4000)
    present, count, total = totals_by_id(ids, w)
    uniq, inverse = np.unique(ids, return_inverse=True)
    np.testing.assert_array_equal(present, uniq)
    np.testing.assert_array_equal(count, np.bincount(inverse))
    np.testing.assert_allclose(total, np.bincount(inverse, weights=w), rtol=1e-12)
    assert len(totals_by_id(ids[:0], w[:0])[0]) == 0


def test_union_length_in_blocks_equals_the_merged_union(monkeypatch):
    """The running-end sum over blocks (spans sorted by start) equals merging every span; spans
    out of order take the merge."""
    import torchneck.analysis.intervals as iv

    monkeypatch.setattr(iv, "ROW_BLOCK", 37)
    rng = np.random.default_rng(5)
    for n in (1, 36, 37, 38, 1000):
        starts = np.sort(rng.uniform(0, 500, n))
        ends = starts + rng.exponential(4, n)
        ends[::9] += 60  # long spans covering later blocks
        for lo, hi in ((-np.inf, np.inf), (100.0, 300.0), (250.0, 250.5)):
            s, e = iv.merge(np.clip(starts, lo, hi), np.clip(ends, lo, hi))
            want = float(np.sum(e - s))
            assert iv.union_length(starts, ends, lo, hi) == pytest.approx(want, rel=1e-12, abs=1e-9)
            shuffled = rng.permutation(n)
            assert iv.union_length(starts[shuffled], ends[shuffled], lo, hi) == pytest.approx(want, rel=1e-12, abs=1e-9)


def test_rows_starting_in_a_window_on_sorted_and_unsorted_tables(monkeypatch):
    import torchneck.analysis.ops as ops_mod

    monkeypatch.setattr(ops_mod, "ROW_BLOCK", 37)
    table = load_trace(DATA / "timeline_analysis__sampled_rank-0.json.gz").events
    lo, hi = float(table.ts[50]), float(table.ts[4000])
    shuffled = table.select(np.random.default_rng(0).permutation(len(table)))
    for t in (table, shuffled):
        got = ops_mod.rows_starting_in(t, lo, hi)
        want = np.flatnonzero((t.ts >= lo) & (t.ts < hi))
        if t is table:  # sorted, as loaded: one range of it
            assert isinstance(got, slice)
            got = np.arange(len(t))[got]
        else:
            assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    assert len(want) > 3000
    # Rows picked by a mask over the window are the same from a slice as from its index array.
    window = ops_mod.rows_starting_in(table, lo, hi)
    as_array = np.arange(window.start, window.stop, dtype=np.int32)
    mask = table.cat[window] == Cat.CPU_OP
    from_slice = ops_mod.rows_where(window, mask)
    assert from_slice.dtype == np.int32 and len(from_slice) > 37
    np.testing.assert_array_equal(from_slice, as_array[mask])
    np.testing.assert_array_equal(ops_mod.cpu_ops_among(table, window), ops_mod.cpu_ops_among(table, as_array))


def test_analyses_on_a_second_thread_equal_one_thread(monkeypatch):
    """The GPU and step-time analyses run on a worker thread beside the host-op ones: the same
    result as one thread, and an error there reaches the caller."""
    import threading

    import torchneck.analysis.summary as summary_mod

    seen = []
    real = summary_mod.gpu_summary
    monkeypatch.setattr(summary_mod, "gpu_summary",
                        lambda *a: seen.append(threading.current_thread().name) or real(*a))
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("TORCHNECK_ANALYSIS_THREADS", threads)
        results.append(analyze_trace(load_trace(DATA / "gpu_h100__two_streams.json.gz")))
    assert results[0] == results[1] and results[0]["gpu"]["present"]
    assert seen[0] == threading.main_thread().name and seen[1].startswith("torchneck-analysis")

    def broken(*a):
        raise RuntimeError("gpu analysis failed")

    monkeypatch.setattr(summary_mod, "gpu_summary", broken)
    with pytest.raises(RuntimeError, match="gpu analysis failed"):
        analyze_trace(load_trace(DATA / "gpu_h100__two_streams.json.gz"))


@pytest.mark.parametrize("by_mask", [16, 0])
def test_host_rows_grouped_by_thread_equal_a_stable_sort(by_mask, monkeypatch):
    """Nesting groups host rows by thread a block and a thread at a time (few threads) or by one
    stable sort (many): the same rows in the same order either way."""
    import torchneck.analysis.nesting as nesting_mod
    from torchneck.trace.table import in_categories

    monkeypatch.setattr(nesting_mod, "ROW_BLOCK", 101)
    monkeypatch.setattr(nesting_mod, "THREADS_BY_MASK", by_mask)
    table = load_trace(DATA / "nccl_parser_config__nccl_data.json.gz").events
    host = np.flatnonzero(in_categories(table.cat, nesting_mod.HOST_CATEGORIES))
    want = host[np.argsort(table.thread[host], kind="stable")]
    got = nesting_mod._host_rows_by_thread(table)
    assert len(np.unique(table.thread[host])) >= 2 and len(want) > 1000
    np.testing.assert_array_equal(got, want)
    reversed_table = table.select(np.arange(len(table))[::-1])
    assert nesting_mod._sorted_by_start(table) and not nesting_mod._sorted_by_start(reversed_table)


def test_with_stack_trace_places_ops_and_findings_in_the_users_functions(tmp_path):
    """A `with_stack=True` trace: `analyze` lists ops by the user's function that ran them (its
    first line) and points the float64 finding there; counts equal a reading of the JSON."""
    import subprocess
    import sys

    from conftest import SCRIPTS, planted_line

    # Run under the name of a standard-library module: a script is the user's code whatever its name.
    script = tmp_path / "trace.py"
    script.write_text((SCRIPTS / "with_stack_trace.py").read_text())
    trace = tmp_path / "stack.json"
    subprocess.run([sys.executable, script.name, str(trace)], check=True, capture_output=True, timeout=300,
                   cwd=tmp_path, env=dict(__import__("os").environ, OMP_NUM_THREADS="1"))
    r = torchneck("analyze", str(trace), "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    report = validate_report(json.loads((tmp_path / "r.json").read_text()))
    lines = report["ops_by_line"]
    assert lines and all(e["source"] == "stack" and e["file"] == "trace.py" for e in lines)
    mask_line, forward_line = planted_line(script, "# DEF make_mask"), planted_line(script, "# DEF forward")
    by = {(e["op"], e["function"]): e for e in lines}
    assert by[("aten::mm", "make_mask")]["line"] == mask_line
    assert by[("aten::mm", "forward")]["line"] == forward_line

    # Independently: aten::mm events inside each function's frames on the same thread.
    events = json.loads(trace.read_text())["traceEvents"]
    frames = [e for e in events
              if e.get("cat") == "python_function" and e["name"].endswith((": make_mask", ": forward"))]
    count = {"make_mask": 0, "forward": 0}
    for op in (e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"):
        inside = [f for f in frames if f["tid"] == op["tid"] and f["ts"] <= op["ts"] <= f["ts"] + f["dur"]]
        assert len(inside) == 1
        count[inside[0]["name"].rsplit(": ", 1)[1]] += 1
    assert count == {"make_mask": 6, "forward": 6}
    assert by[("aten::mm", "make_mask")]["count"] == 6 and by[("aten::mm", "forward")]["count"] == 6

    f64 = next(f for f in report["findings"] if f["kind"] == "dtype_float64")
    # Only the function whose ops had float64 inputs: forward runs ops of the same names on float32.
    assert f64["where"] == [{"file": "trace.py", "line": mask_line, "function": "make_mask"}]
    placed = report["ranks"][0]["ops"]["float64"]["where"]
    assert placed[0]["source"] == "stack" and placed[0]["count"] == report["ranks"][0]["ops"]["float64"]["count"]
    assert "make_mask() at" in r.stdout  # the console names the function (its line may fold)


def test_a_pytorch_1_12_with_stack_trace_places_ops_as_its_own_call_stacks_do(tmp_path):
    """A real trace written by PyTorch 1.12 (tests/scripts/torch112_with_stack.py): relative frame
    names and the old per-op "Call stack" arg beside the python_function events. Each op is
    placed in the user's function its own "Call stack" names (outermost first there, the def
    line, as the frames give it), and the float64 finding points at make_mask."""
    from conftest import SCRIPTS, planted_line

    path = DATA / "torch112_cpu__with_stack.json.gz"
    r = torchneck("analyze", str(path), "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    report = validate_report(json.loads((tmp_path / "r.json").read_text()))
    script = SCRIPTS / "torch112_with_stack.py"
    mask_line, forward_line = planted_line(script, "# DEF make_mask"), planted_line(script, "# DEF forward")
    got = {(e["op"], e["function"], e["line"]): e["count"] for e in report["ops_by_line"]}

    # The reference: each op's innermost frame of the script in its own "Call stack".
    expected: dict = {}
    for e in json.loads(gzip.open(path).read())["traceEvents"]:
        stack = (e.get("args") or {}).get("Call stack") or ""
        mine = [f for f in stack.split(";") if f.startswith("torch112_with_stack.py(")]
        if e.get("cat") == "cpu_op" and mine:
            line, function = mine[-1][len("torch112_with_stack.py("):].split("): ")
            key = (e["name"], function, int(line))
            expected[key] = expected.get(key, 0) + 1
    assert expected[("aten::mm", "make_mask", mask_line)] == expected[("aten::mm", "forward", forward_line)] == 5
    for key in (("aten::mm", "make_mask", mask_line), ("aten::mm", "forward", forward_line),
                ("aten::copy_", "make_mask", mask_line), ("aten::clamp_min", "forward", forward_line)):
        assert got[key] == expected[key]
    f64 = next(f for f in report["findings"] if f["kind"] == "dtype_float64")
    assert f64["where"][0] == {"file": "torch112_with_stack.py", "line": mask_line, "function": "make_mask"}


def test_a_pytorch_1_8_trace_reads_like_a_current_one(tmp_path):
    """A real trace written by PyTorch 1.8.1 (tests/scripts/torch18_train.py): ops filed as
    `Operator`, string tids, "Input dims", the profiler's step and the optimizer's spans filed
    as ops too, and each op's Python stack in its "Call stack" arg (innermost first, each frame
    at the line it was running). Steps, shapes and ops by the user's exact line all read."""
    from conftest import SCRIPTS, planted_line

    path = DATA / "torch18_cpu__train.json.gz"
    r = torchneck("analyze", str(path), "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    report = validate_report(json.loads((tmp_path / "r.json").read_text()))
    events = json.loads(gzip.open(path).read())["traceEvents"]
    a = report["ranks"][0]
    spans = sorted((e["ts"], e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
    assert [s["duration_us"] for s in a["steps"]["items"]] == [d for _, d in spans] and len(spans) == 3
    names = {o["name"] for o in a["ops"]["by_name"]}
    assert not any(n.startswith(("ProfilerStep#", "Optimizer.")) for n in names)  # spans, not ops
    assert {x["name"] for x in a["ops"]["annotations"]} == {"Optimizer.step#SGD.step",
                                                             "Optimizer.zero_grad#SGD.zero_grad"}
    assert any(o["name"] == "aten::pow" and o["shapes"] == "[[32, 64], []]" for o in a["ops"]["by_shape"])

    # The reference: each op's innermost frame of the script in its own "Call stack".
    script = SCRIPTS / "torch18_train.py"
    lo, hi = spans[0][0], spans[-1][0] + spans[-1][1]
    expected: dict = {}
    for e in events:
        frames = [f for f in (e.get("args") or {}).get("Call stack", "").split(";") if "torch18_train.py(" in f]
        if e.get("cat") == "Operator" and frames and lo <= e["ts"] < hi and not e["name"].startswith(
                ("ProfilerStep#", "Optimizer.")):
            line, function = frames[0].split("torch18_train.py(")[1].split("): ")
            expected[(e["name"], function, int(line))] = expected.get((e["name"], function, int(line)), 0) + 1
    got = {(e["op"], e["function"], e["line"]): e["count"] for e in report["ops_by_line"]}
    assert all(e["source"] == "stack" and e["file"].endswith("torch18_train.py") for e in report["ops_by_line"])
    assert got == {k: v for k, v in expected.items() if k in got} and len(got) == 25  # the top 25
    forward, pow_line = planted_line(script, "# CALL model"), planted_line(script, "# CALL float64")
    # two Linear layers and one pow a step, 3 steps; 1.8 records each op twice, nested (its
    # autograd and its CPU kernel)
    assert got[("aten::addmm", "train_step", forward)] == 12 and got[("aten::pow", "features", pow_line)] == 6


def test_which_trace_frames_are_the_users_code():
    from torchneck.analysis.trace_stacks import is_user_frame_file, parse_frame_name

    assert parse_frame_name("models/net.py(42): forward") == ("forward", 42, "models/net.py")
    assert parse_frame_name("<built-in method mm of type object at 0x7f>") is None
    for library in ("torch/nn/modules/module.py", "typing.py", "logging/__init__.py", "numpy/_core/x.py",
                    "transformers/trainer.py", "<frozen importlib._bootstrap>", "<string>",
                    "/opt/venv/lib/python3.11/site-packages/timm/models/vit.py"):
        assert not is_user_frame_file(library), library
    for mine in ("train.py", "models/resnet.py", "my-scripts/run.py", "/home/me/project/train.py"):
        assert is_user_frame_file(mine), mine


def test_bytes_moved_follow_their_rows_through_the_sort(tmp_path):
    """Bytes moved are kept only on the rows that have them; after the start-time sort each
    copy still carries its own count (events written out of order, python rows split off)."""
    rng = np.random.default_rng(3)
    events = []
    for i in rng.permutation(400).tolist():
        if i % 7 == 0:
            events.append({"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy HtoD {i}", "pid": 0, "tid": 7,
                           "ts": i, "dur": 1, "args": {"bytes": 1000 + i, "device": 0, "stream": 7}})
        elif i % 5 == 0:
            events.append({"ph": "X", "cat": "python_function", "name": f"f{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1})
        else:
            events.append({"ph": "X", "cat": "cpu_op", "name": f"op {i}", "pid": 1, "tid": 1, "ts": i, "dur": 1})
    p = tmp_path / "moved.json"
    p.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(p).events
    names = [t.strings[i] for i in t.name]
    expected = [1000 + int(s.rsplit(" ", 1)[1]) if s.startswith("Memcpy") else 0 for s in names]
    assert np.asarray(t.nbytes).tolist() == expected and len(t.nbytes.rows) == 58


def test_a_sparse_column_reads_like_the_dense_one():
    from torchneck.trace.table import SparseColumn

    dense = np.zeros(50, dtype=np.int64)
    dense[[0, 7, 8, 31, 49]] = [5, -2, 3**30, 11, 4]
    col = SparseColumn.from_dense(dense)
    rows = np.array([49, 0, 1, 8, 8, 30, 31])
    np.testing.assert_array_equal(col[rows], dense[rows])
    np.testing.assert_array_equal(col[dense > 3], dense[dense > 3])
    for key in (slice(None), slice(5, 32), slice(8, 9), slice(40, 10), slice(1, 50, 7)):
        np.testing.assert_array_equal(col[key], dense[key])
    assert [col[i] for i in (0, 1, 8, -1)] == [5, 0, 3**30, 4] and len(col) == 50
    assert len(SparseColumn.from_dense(np.zeros(3, dtype=np.int64))[np.array([0, 2])]) == 2


def _tables_equal(a, b):
    assert len(a) == len(b)
    for col in ("ts", "dur", "cat", "name", "thread", "correlation", "device", "stream", "shapes", "types"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    np.testing.assert_array_equal(np.asarray(a.nbytes), np.asarray(b.nbytes))
    np.testing.assert_array_equal(np.asarray(a.launcher), np.asarray(b.launcher))


def test_the_in_place_sort_gives_the_numpy_sort(tmp_path, monkeypatch):
    """The C sort and permutation (`_order.c`) and numpy's argsort and gathers give the same
    tables: ties on start (longer first, then file order), python rows split off, rows without
    a start dropped, runs out of order as a trace's CPU and GPU parts are."""
    import torchneck.trace.merge as merge

    if merge._order is None:
        pytest.skip("built without a C compiler: only the numpy path exists")
    rng = np.random.default_rng(11)
    events = []
    for i in range(3000):
        kind = rng.choice(["cpu_op", "python_function", "kernel", "gpu_memcpy"])
        e = {"ph": "X", "cat": str(kind), "name": f"e{i % 37}", "pid": int(kind in ("kernel", "gpu_memcpy")),
             "tid": int(rng.integers(3)), "ts": float(rng.integers(0, 400)) + (0.5 if i % 11 == 0 else 0),
             "dur": float(rng.integers(0, 5)), "args": {"correlation": i, "device": 0, "stream": 7}}
        if kind == "gpu_memcpy":
            e["args"]["bytes"] = 10 + i
        if i % 97 == 0:
            del e["ts"]
        events.append(e)
    events.sort(key=lambda e: (e["cat"] in ("kernel", "gpu_memcpy"), e.get("ts", 0) // 50))  # runs
    p = tmp_path / "ties.json"
    p.write_text(json.dumps({"traceEvents": events}))
    native = load_trace(p, keep_correlation=True)
    monkeypatch.setattr(merge, "_order", None)
    numpy_sorted = load_trace(p, keep_correlation=True)
    _tables_equal(native.events, numpy_sorted.events)
    _tables_equal(native.python, numpy_sorted.python)
    assert len(native.python) > 500 and len(native.events) + len(native.python) == 3000 - 31


def test_the_c_permutation_refuses_what_is_not_a_permutation():
    from torchneck.trace import merge

    if merge._order is None:
        pytest.skip("built without a C compiler")
    col, wide = np.arange(6, dtype=np.int16) * 10, np.arange(6, dtype=np.float64) / 2
    merge._order.permute((col, wide), np.array([4, 0, 3, 1, 2, 5], dtype=np.int32))
    assert col.tolist() == [40, 0, 30, 10, 20, 50] and wide.tolist() == [2, 0, 1.5, 0.5, 1, 2.5]
    for bad in ([0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 6], [-1, 1, 2, 3, 4, 5], [1, 0]):
        with pytest.raises(ValueError):  # and nothing moved
            merge._order.permute((col, wide), np.array(bad, dtype=np.int32))
    assert col.tolist() == [40, 0, 30, 10, 20, 50]


def test_the_c_sort_and_permutation_on_random_runs():
    """`_order.start_order` equals a lexsort on (start, longer first, row) and `permute` equals
    numpy's gather, for every column width, on inputs shaped like traces (sorted runs, ties,
    reversed stretches) and on shuffled ones."""
    from torchneck.trace import merge

    if merge._order is None:
        pytest.skip("built without a C compiler")
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 31, 32, 33, 1000, 40_000):
        runs = np.concatenate([np.sort(rng.integers(0, 500, size=k)) for k in rng.multinomial(n, [0.5, 0.3, 0.2])])
        for ts in (runs.astype(np.float64), rng.permutation(runs).astype(np.float64), runs[::-1].astype(np.float64)):
            dur = rng.integers(0, 4, size=n).astype(np.float32)
            order = np.arange(n, dtype=np.int32)
            merge._order.start_order(ts, dur, order)
            expected = np.lexsort((np.arange(n), -dur, ts))
            np.testing.assert_array_equal(order, expected)
            rows = np.flatnonzero(rng.random(n) < 0.5)  # a subset, as for python rows
            subset = rows.astype(np.int32)
            merge._order.start_order(ts, dur, subset)
            np.testing.assert_array_equal(subset, rows[np.lexsort((rows, -dur[rows], ts[rows]))])
            columns = [rng.integers(-100, 100, size=n).astype(dt) for dt in (np.int8, np.int16, np.float32, np.float64)]
            before = [c.copy() for c in columns]
            merge._order.permute(tuple(columns), order)
            for c, b in zip(columns, before):
                np.testing.assert_array_equal(c, b[order])


def test_op_self_times_read_alike_through_a_view_and_by_search(cpu_trace):
    """`Nesting.ops_in` a window is a view of the ops; `self_time` of a view (sliced) equals
    the binary-searched answer for a copy, in any order; rows that are no CPU op read 0."""
    from torchneck.analysis.ops import cpu_ops_among, rows_starting_in

    table = load_trace(cpu_trace).events
    nesting = host_nesting(table)
    window = rows_starting_in(table, float(table.ts[len(table) // 4]), float(table.ts[3 * len(table) // 4]))
    ops = nesting.ops_in(window)
    assert np.shares_memory(ops, nesting.ops)
    np.testing.assert_array_equal(ops, cpu_ops_among(table, window))
    np.testing.assert_array_equal(nesting.ops_in(np.arange(len(table))[window]), ops)
    view = nesting.self_time(ops[5:105])
    assert np.shares_memory(view, nesting.op_self_time)
    shuffled = np.random.default_rng(1).permutation(ops[5:105].astype(np.int64))
    np.testing.assert_array_equal(nesting.self_time(shuffled), nesting.self_time(np.sort(shuffled))[
        np.argsort(np.argsort(shuffled))])
    np.testing.assert_array_equal(nesting.self_time(ops[5:105].copy().astype(np.int64)), view)
    others = np.flatnonzero(table.cat != 1)[:20]
    assert (nesting.self_time(others) == 0).all()
    every = np.arange(len(table))
    assert nesting.self_time(every).sum() == pytest.approx(nesting.op_self_time.sum(dtype=np.float64), rel=1e-6)


@pytest.mark.parametrize("side", ["left", "right"])
def test_search_sorted_answers_as_numpy_for_needles_of_any_width(side):
    """Needles wider than the haystack (int64 rows into int32 ops), beyond its range, equal to
    its extremes, floats: the same positions as `np.searchsorted` in the common type."""
    from torchneck.trace.table import search_sorted

    hay = np.array([-(2**31), -5, 0, 0, 7, 2**31 - 1], dtype=np.int32)
    needles = np.array([-(2**40), -(2**31), -6, 0, 3, 7, 2**31 - 1, 2**31, 2**50], dtype=np.int64)
    expected = np.searchsorted(hay.astype(np.int64), needles, side=side)
    np.testing.assert_array_equal(search_sorted(hay, needles, side=side), expected)
    np.testing.assert_array_equal(search_sorted(hay, [0, 2**62], side=side),
                                  np.searchsorted(hay.astype(np.int64), [0, 2**62], side=side))
    np.testing.assert_array_equal(search_sorted(hay, needles.astype(np.int8).clip(-5, 7), side=side),
                                  np.searchsorted(hay, needles.astype(np.int8).clip(-5, 7), side=side))
    np.testing.assert_array_equal(search_sorted(hay, np.array([0.5, 7.0]), side=side),
                                  np.searchsorted(hay, np.array([0.5, 7.0]), side=side))


def test_streamed_median_equals_numpy_median():
    """Two passes over blocks, keeping only the middle bins: numpy's median (float64 mean of
    the two middle float32 values) for odd and even counts, ties, zeros and -0.0, one value."""
    from torchneck.analysis.ops import streamed_median

    rng = np.random.default_rng(9)
    cases = [rng.exponential(20, 100_001).astype(np.float32),
             rng.integers(0, 50, 40_000).astype(np.float32),  # whole µs: heavy ties
             np.array([5.0], dtype=np.float32), np.array([0.0, -0.0, 0.0, 3.5], dtype=np.float32),
             np.concatenate([np.zeros(1000, np.float32), np.full(1000, 7.25, np.float32)])]
    for values in cases:
        blocks = [values[a:a + 777] for a in range(0, len(values), 777)]
        assert streamed_median(lambda blocks=blocks: iter(blocks)) == float(np.median(values.astype(np.float64)))
    assert streamed_median(lambda: iter([np.empty(0, np.float32)])) == 0.0


@pytest.mark.parametrize("name", ["nccl_parser_config__nccl_data.json.gz", "torch112_cpu__with_stack.json.gz"])
def test_a_spilled_table_analyses_exactly_like_one_in_memory(name, monkeypatch):
    """Past `spill.SPILL_ROWS` the table, its sort order and the host nesting live in temporary
    files: the same arrays, the same analysis, also when the watcher lets go of every mapped page
    at each of its looks (`RELEASE_AT` 0) while the loader and the analyses read and write them.
    The with_stack trace has python_function rows: the spilled sort's row sets."""
    from torchneck.pipeline import trace_views
    from torchneck.trace import spill

    def analysed():
        trace = load_trace(DATA / name)
        nesting = host_nesting(trace.events)
        return trace, nesting, analyze_typed(trace, nesting), trace_views(trace, nesting)

    heap, heap_nesting, heap_analysis, heap_views = analysed()
    assert not spill.is_mapped(heap.events.ts)
    monkeypatch.setattr(spill, "SPILL_ROWS", 100)
    monkeypatch.setattr(spill, "RELEASE_AT", 0)
    releases = spill.releases()
    spilled, nesting, analysis, views = analysed()
    assert spill.is_mapped(spilled.events.ts) and spill.is_mapped(spilled.events.name)
    assert spill.is_mapped(nesting.parent) and spill.is_mapped(nesting.ops)
    assert spill.releases() > releases  # pages were let go while it ran
    for col in ("ts", "dur", "cat", "name", "thread", "device", "stream", "args"):
        np.testing.assert_array_equal(getattr(spilled.events, col), getattr(heap.events, col))
    np.testing.assert_array_equal(spilled.python.ts, heap.python.ts)
    np.testing.assert_array_equal(nesting.parent, heap_nesting.parent)
    np.testing.assert_array_equal(nesting.op_self_time, heap_nesting.op_self_time)
    assert analysis == heap_analysis and views == heap_views


_ASKED: list[str] = []


def _starts_with_aten(s: str) -> bool:
    _ASKED.append(s)
    return s.startswith("aten::")


def _starting(prefix: str):
    return lambda s: s.startswith(prefix)


def test_name_masks_are_remembered_only_for_pure_predicates_over_the_same_strings():
    """Ranks of one job ask the same predicates of the same names: answers are reused, but never
    for a closure, never across different strings, and a caller's edits never reach the cache."""
    first = load_trace(DATA / "nccl_parser_config__nccl_data.json.gz", workers=1).events
    other = load_trace(DATA / "torch18_cpu__train.json.gz", workers=1).events

    def fresh(table, pred):
        return np.array([bool(pred(s)) for s in table.strings])

    for table in (first, other, first):
        for pred in (lambda s: s.startswith("aten::"), _starts_with_aten):
            got = table.names_matching(pred)
            assert np.array_equal(got, fresh(table, pred))
            got[:] = True  # the caller's copy
            assert np.array_equal(table.names_matching(pred), fresh(table, pred))
        for prefix in ("aten::", "nccl", "ProfilerStep#"):  # a closure: its cell changes the answer
            assert np.array_equal(table.names_matching(_starting(prefix)), fresh(table, _starting(prefix)))
    expected = fresh(first, _starts_with_aten)
    again = load_trace(DATA / "nccl_parser_config__nccl_data.json.gz", workers=1).events  # another rank
    _ASKED.clear()
    assert np.array_equal(again.names_matching(_starts_with_aten), expected)
    assert _ASKED == []  # answered from what the first rank's table asked
    class Prefix:  # a bound method answers by its object's state: never remembered
        def __init__(self, p: str):
            self.p = p

        def test(self, s: str) -> bool:
            return s.startswith(self.p)

    for prefix in ("aten::", "nccl"):
        assert np.array_equal(first.names_matching(Prefix(prefix).test), fresh(first, _starting(prefix)))
    n = len(first.strings)
    first.intern("aten::made_up_by_an_analysis")  # strings grow: the answer covers the new one
    grown = first.names_matching(_starts_with_aten)
    assert len(grown) == n + 1 and grown[-1]


def test_largest_input_of_recorded_shapes_parsed_once_a_string():
    from torchneck.analysis.ops import max_numel_of_shapes

    table = load_trace(DATA / "torch18_cpu__train.json.gz", workers=1).events
    a, b, c = (table.intern(t) for t in ("[[16, 64], [64], []]", "not json", "[[2, 3], [4], 7]"))
    got = max_numel_of_shapes(table, np.array([-1, a, b, a, c]))
    assert got.tolist() == [-1, 1024, -1, 1024, 6]
    d = table.intern("[[1, 2, 3, 4]]")  # a string interned after the first call
    assert max_numel_of_shapes(table, np.array([d, a, -1])).tolist() == [24, 1024, -1]
    assert max_numel_of_shapes(table, np.array([], dtype=np.int32)).tolist() == []
