"""The native slice scanner (trace/_scan.c) against the msgspec decoder it accelerates.

The scanner may decline a slice (the Python decoder then takes it); whenever it accepts one, its
columns must equal the Python decoder's, value for value. Checked on every real trace, on edge
cases of the JSON and of the trace format, and on thousands of damaged slices.
"""

import contextlib
import gzip
import json
import random

import numpy as np
import pytest
from conftest import DATA

import torchneck.trace.decode as decode
import torchneck.trace.slices as slices
from torchneck.errors import TraceError
from torchneck.trace.loader import load_trace

SHARED = sorted(DATA.glob("*.json.gz"))


def test_the_native_scanner_is_built():
    """`pip install` compiles it (setup.py); without a C compiler torchneck still works, only
    slower, but this project's CI must exercise it."""
    assert decode._scan is not None, "torchneck.trace._scan was not built: install with a C compiler"


def _python_only(monkeypatch):
    monkeypatch.setattr(decode, "_scan", None)


def chunk_view(chunk):
    """A chunk's content with string ids resolved, so tables with different id orders compare."""
    if chunk is None:
        return None
    strings = chunk.strings

    def text(ids):
        return [strings[i] if i >= 0 else None for i in np.asarray(ids).tolist()]

    view = {"meta": chunk.meta_events, "flows": chunk.flow_count, "unknown": chunk.unknown_phases,
            "negative": chunk.negative_dur, "grad": chunk.grad}
    for part, cols in (("x", chunk.x), ("mem", chunk.mem)):
        for k, v in cols.items():
            if k in ("name", "pid", "tid", "shapes", "types", "stack"):
                view[f"{part}.{k}"] = text(v)
            else:
                view[f"{part}.{k}"] = (str(np.asarray(v).dtype), np.asarray(v).tobytes())  # bit-exact
    return view


def outcome(data: bytes):
    """What decode_to_columns makes of a slice: its content, or the exception type."""
    try:
        return chunk_view(decode.decode_to_columns(data))
    except Exception as exc:  # the Python path may raise (invalid UTF-8); the native must alike
        return type(exc).__name__


def both_ways(data: bytes, monkeypatch) -> tuple[object, object, bool]:
    """(native outcome, Python outcome, whether the scanner accepted the slice)."""
    accepted = decode._scan_columns(data) is not None
    native = outcome(data)
    with monkeypatch.context() as m:
        _python_only(m)
        python = outcome(data)
    return native, python, accepted


def load_both(path, monkeypatch):
    """The trace loaded with the native scanner, and with msgspec alone."""
    native = load_trace(path, workers=1, keep_correlation=True)
    with monkeypatch.context() as m:
        _python_only(m)
        return native, load_trace(path, workers=1, keep_correlation=True)


def _tables_equal(a, b):
    for col in ("ts", "dur", "cat", "correlation", "device", "stream", "nbytes", "launcher"):
        np.testing.assert_array_equal(np.asarray(getattr(a, col)), np.asarray(getattr(b, col)), err_msg=col)
    for col in ("name", "shapes", "types"):
        assert [a.strings[i] if i >= 0 else None for i in getattr(a, col)] == \
            [b.strings[i] if i >= 0 else None for i in getattr(b, col)], col
    assert [(a.threads.pid[t], a.threads.tid[t]) for t in a.thread] == \
        [(b.threads.pid[t], b.threads.tid[t]) for t in b.thread]


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name[:30])
def test_native_tables_equal_the_python_decoders_on_real_traces(path, monkeypatch):
    accepted = []
    real = decode._scan_columns
    monkeypatch.setattr(decode, "_scan_columns", lambda d: accepted.append(real(d)) or accepted[-1])
    native, python = load_both(path, monkeypatch)
    _tables_equal(native.events, python.events)
    _tables_equal(native.python, python.python)
    for col in ("ts", "nbytes", "total_allocated", "total_reserved", "device_type", "device_id", "addr"):
        np.testing.assert_array_equal(getattr(native.memory, col), getattr(python.memory, col))
    for attr in ("process_names", "thread_names", "process_labels", "flow_count", "unknown_phases",
                 "warnings", "event_count", "grad"):
        assert getattr(native.meta, attr) == getattr(python.meta, attr), attr
    if "amd_trace" in path.name:  # ROCm writes `stream` as a string: declined, decoded by msgspec
        assert not any(c is not None for c in accepted)
    else:
        assert accepted and all(c is not None for c in accepted)


def test_native_tables_equal_on_a_torch_cpu_trace_with_memory_shapes_and_stacks(tmp_path, monkeypatch):
    import torch

    path = tmp_path / "cpu.json"
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    with torch.profiler.profile(record_shapes=True, profile_memory=True, with_stack=True) as prof:
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
            prof.step()
    prof.export_chrome_trace(str(path))
    native, python = load_both(path, monkeypatch)
    _tables_equal(native.events, python.events)
    _tables_equal(native.python, python.python)
    assert len(native.memory) == len(python.memory) > 0
    assert native.meta.thread_names == python.meta.thread_names
    assert len(native.python) > 0 and (native.events.shapes >= 0).any()  # stacks and shapes came through


def test_ops_recorded_in_grad_mode_and_the_graph_nodes_they_built(tmp_path, monkeypatch):
    """autograd's "Sequence number" marks ops run in grad mode; it advances with each graph node
    (autograd_in_inference reads both). None under inference_mode; one repeated number for ops
    on tensors that need no gradient."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    data = torch.randn(4, 8)
    cases = {"grad": contextlib.nullcontext, "inference": torch.inference_mode, "data only": contextlib.nullcontext}
    for case, mode in cases.items():
        path = tmp_path / f"{case}.json"
        with torch.profiler.profile() as prof, mode():
            for _ in range(5):
                model(data) if case != "data only" else (data * 2).sum()
        prof.export_chrome_trace(str(path))
        native, python = load_both(path, monkeypatch)
        assert native.meta.grad == python.meta.grad, case
        if case == "grad":
            assert native.meta.grad.nodes >= 5 * 5 and native.meta.grad.rows >= 5 * 5  # linear, addmm, relu...
        elif case == "inference":
            assert native.meta.grad is None
        else:
            assert native.meta.grad.nodes == 1 and native.meta.grad.rows >= 5


def _event(**fields) -> bytes:
    base = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 10.5, "dur": 2,
            "args": {"External id": 3, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}}
    base.update(fields)
    return json.dumps(base).encode()


ACCEPTED = {
    "plain": _event(),
    "in grad mode": _event(args={"Sequence number": 41}) + b"," + _event(args={"Sequence number": 7}),
    "escaped and unicode names": _event(name='a\\"b\u00e9\u2603 \n\t') + b"," +
                                 b'{"ph":"X","name":"caf\\u00e9 \\ud83d\\ude00","ts":1,"cat":"cpu_op"}',
    "pid and tid as strings": _event(pid="Spans", tid="stream 7 7"),
    "kernel with device and stream": _event(cat="kernel", args={"device": 0, "stream": 7, "correlation": 9,
                                                                "bytes": 4096}),
    "gpu placement from pid/tid": _event(cat="kernel", pid=1, tid="stream 12", args={}),
    "missing ts, negative dur": _event(ts=None, dur=-3).replace(b'"ts": null, ', b""),
    "numbers": b",".join(_event(ts=t) for t in (0, -0.0, 1e3, 1.5e-3, 0.1, 2.5e16, 1661203462598738.123,
                                                 1661203462598738123, 18446744073709551615, 123.456789012345678,
                                                 9007199254740993, 0.30000000000000004, 5e-324, 1e-400, 2.4e-320,
                                                 1.7976931348623157e308)),
    "args torchneck does not keep": _event(args={"Collective name": "allreduce", "Call stack": None}) + b"," +
                                    _event(args={"Call stack": "a.py(3): f\nb.py(4): g", "External id": 1.5}),
    "call stacks (PyTorch 1.8-1.12), escaped or empty": _event(args={"Call stack": "C:\\u\\t.py(3): f;b.py(4): g;"})
    + b"," + _event(args={"Call stack": ""}) + b"," + _event(cat="kernel", args={"Call stack": "a.py(1): h"}),
    "flows, metadata, memory, others": b",".join([
        b'{"ph":"f","id":1,"pid":1,"tid":1,"ts":1,"cat":"ac2g","name":"ac2g","bp":"e"}',
        b'{"ph":"s","id":1,"pid":1,"tid":1,"ts":1,"cat":"ac2g","name":"ac2g"}',
        b'{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"python"}}',
        b'{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"main"}}',
        b'{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":5,"s":"t","args":{"Bytes":512,"Addr":99,'
        b'"Total Allocated":512,"Total Reserved":2048,"Device Type":0,"Device Id":-1}}',
        b'{"ph":"C","name":"counter","pid":1,"ts":1,"args":{"v":1}}',
        _event()]),
    "indented with trailing comma": json.dumps(json.loads(_event()), indent=4).encode() + b",\n  ",
    "empty": b"  \n",
    "unknown fields of every type": _event(extra={"a": [1, {"b": None}], "c": True}, more=[[[]]],
                                           args={"Trace name": "x", "Sequence number": 5, "n": None}),
    "args keys of other events, checked": _event(args={"Bytes": 3, "name": None, "labels": "x",
                                                       "Addr": 1}),
    # Keys are recognised by repeating the previous event's bytes: the same keys with other
    # spacing, in another order, and skipped values that grow or change must all still read.
    "repeated keys, other spacing and order": b",".join([
        b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":2,"args":{"n":5,"s":"x"}}',
        b'{"ph": "X","cat" :"cpu_op", "name":"b","pid":1,"tid":1,"ts":2,"dur":2,"args":{"n":55,"s":"x"}}',
        b'{"ph":"X","name":"c","cat":"kernel","tid":2,"pid":1,"ts":3,"dur":1,"args":{"s":"x","n":5}}',
        b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":4,"dur":2,"args":{"n":5.5,"s":"xy"}}',
        b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":5,"dur":2,"args":{"n":5 ,"s":"x"} }',
        json.dumps(json.loads(_event()), indent=2).encode(), _event(), _event(ts=11.5)]),
}

DECLINED = {
    "float id": _event(args={"correlation": 1.0}),
    "null id": _event(args={"correlation": None}),
    "id beyond int64": _event(args={"correlation": 2**63}),
    "stream as string (ROCm)": _event(cat="kernel", args={"stream": "7"}),
    "sequence number as string": _event(args={"Sequence number": "12"}),
    "float pid": _event(pid=1.5),
    "name not a string": _event(name=5),
    "ts as string": _event(ts="5"),
    "ts out of range": _event().replace(b'"ts": 10.5', b'"ts": 1e400'),
    "args not an object": _event(args=None),
    "two phase tags": _event().replace(b'"ph": "X"', b'"ph": "X", "ph": "X"'),
    "escaped key": _event().replace(b'"name"', b'"na\\u006de"'),
    "unknown phase": b'{"ph":"Q","ts":1}',
    "missing phase": b'{"ts":1,"name":"a"}',
    "not an object": b"[1, 2]",
    "labels not a string": _event(args={"labels": 3}),
    "call stack not a string": _event(args={"Call stack": ["a.py(1): f"]}),
    "negative zero pid": _event().replace(b'"pid": 7', b'"pid": -0'),
    "invalid utf-8": _event(name="x").replace(b'"x"', b'"\xff"'),
    "lone high surrogate, even in a skipped field": _event().replace(b'"ph"', b'"x": "\\ud800", "ph"'),
    "lone low surrogate": _event().replace(b'"ph"', b'"x": "\\udc00", "ph"'),
    "high surrogate with a non-surrogate": _event().replace(b'"ph"', b'"x": "\\ud800\\u0041", "ph"'),
    "nesting too deep": _event(extra=json.loads("[" * 300 + "]" * 300)),
    "malformed": _event()[:-1],
    "two trailing commas": _event() + b",,",
    "leading comma": b"," + _event(),
}


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepted_slices_decode_exactly_as_msgspec_does(name, monkeypatch):
    native, python, accepted = both_ways(ACCEPTED[name], monkeypatch)
    assert accepted, "the scanner declined an ordinary slice"
    assert native == python


@pytest.mark.parametrize("name", DECLINED)
def test_unusual_slices_are_left_to_msgspec(name, monkeypatch):
    native, python, accepted = both_ways(DECLINED[name], monkeypatch)
    assert not accepted
    assert native == python


def test_damaged_slices_never_differ_from_msgspec(monkeypatch):
    """Thousands of mutations of a real slice (bytes flipped, dropped, inserted, cut): whatever
    the scanner accepts it must decode as msgspec does, and it must never crash."""
    rng = random.Random(1234)
    trace = json.loads(gzip.decompress((DATA / "trace_diff__control__control.json.gz").read_bytes()))
    events = [e for e in trace["traceEvents"][:4000] if e.get("ph") in ("X", "f", "s", "i", "M")]
    specials = b'{}[]":,\\ -.0123456789eEtfnul\x00\xff'
    accepted = 0
    for case in range(1500):
        if case % 2:  # events in a random order and layout
            chosen = rng.sample(events, 6)
            data = bytearray(b",\n".join(json.dumps(e, indent=rng.choice([None, 2])).encode() for e in chosen))
        else:  # a run as the exporter writes it, so later events repeat the earlier ones' keys
            start = rng.randrange(len(events) - 8)
            indent = rng.choice([None, 2])
            data = bytearray(b",\n".join(json.dumps(e, indent=indent).encode() for e in events[start:start + 8]))
        for _ in range(rng.randint(1, 3)):
            if not data:
                break
            i = rng.randrange(len(data))
            op = rng.random()
            if op < 0.4:
                data[i] = rng.choice(specials)
            elif op < 0.6:
                del data[i:i + rng.randint(1, 8)]
            elif op < 0.8:
                data[i:i] = bytes(rng.choice(specials) for _ in range(rng.randint(1, 3)))
            else:
                del data[i:]
        if not data:
            continue
        native, python, ok = both_ways(bytes(data), monkeypatch)
        accepted += ok
        assert native == python, f"case {case}: {bytes(data)[:300]!r}"
    assert accepted > 100  # many mutations leave valid events (a flipped digit, a changed letter)


def test_a_bad_file_reads_the_same_either_way(tmp_path, monkeypatch):
    """Loader-level: a damaged region in a file yields the same warning and rows both ways."""
    good = [json.loads(_event(ts=i)) for i in range(50)]
    text = json.dumps({"traceEvents": good})
    damaged = text.replace('"ts": 25', '"ts": 25}}]]', 1)
    p = tmp_path / "damaged.json"
    p.write_text(damaged)
    outcomes = []
    for native in (True, False):
        with monkeypatch.context() as m:
            if not native:
                _python_only(m)
            try:
                t = load_trace(p, workers=1)
                outcomes.append((len(t.events), t.meta.warnings))
            except TraceError as exc:
                outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]


def test_shapes_and_types_read_back_through_their_pair_id(tmp_path, monkeypatch):
    """Rows store one id for their (shapes, types) pair: every row's shapes and types text reads
    back as written, across many slices (pairs first seen in different ones), with either
    decoder; rows without them read -1; the column compares like a numpy one."""
    rng = np.random.default_rng(5)
    events, expected = [], []
    for i in range(4000):
        args = {}
        if rng.random() < 0.8:
            args["Input Dims"] = [[int(rng.integers(1, 40)), 3]]
        if rng.random() < 0.7:
            args["Input type"] = [str(rng.choice(["float", "double", "c10::Half"]))]
        events.append({"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": float(i), "dur": 1.0,
                       "args": args})
        expected.append((json.dumps(args["Input Dims"]).replace(" ", "") if "Input Dims" in args else None,
                         json.dumps(args["Input type"]).replace(" ", "") if "Input type" in args else None))
    p = tmp_path / "pairs.json"
    p.write_text(json.dumps({"traceEvents": events}, separators=(",", ":")))
    monkeypatch.setattr(slices, "BLOCK_BYTES", 16 << 10)
    native, plain = load_both(p, monkeypatch)
    for t in (native.events, plain.events):
        got = [(t.strings[s] if s >= 0 else None, t.strings[y] if y >= 0 else None)
               for s, y in zip(t.shapes, t.types)]
        assert got == expected
        assert len(t.arg_pairs) - 1 == len({e for e in expected if e != (None, None)})
        assert t.args.dtype.itemsize <= 2  # a few hundred pairs: int16 at most
        np.testing.assert_array_equal(t.shapes >= 0, [s is not None for s, _ in expected])
        assert t.types[3] == t.types[3:4][0]
