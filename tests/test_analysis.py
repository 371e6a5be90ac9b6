"""Analyses of the trace table that rules build on: ops placed at the user's lines, the last op
started inside a span."""

import json

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
    columns = {f.name: getattr(table, f.name) for f in dataclasses.fields(table)}
    for name in ("ts", "dur", "cat", "name", "thread", "device", "stream", "args"):
        columns[name] = columns[name][shuffle]
    shuffled = dataclasses.replace(table, **columns)
    new_row = np.argsort(shuffle)  # old row -> new row
    again = _last_started_within(shuffled, np.sort(new_row[cpu]), new_row[rows])
    same = shuffle[again]  # events alike in start and duration are interchangeable
    np.testing.assert_array_equal(table.ts[same], table.ts[got])
    np.testing.assert_array_equal(table.dur[same], table.dur[got])
