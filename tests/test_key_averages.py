"""torchneck's key_averages table against torch's own `prof.key_averages()` of the same run.

A real workload is profiled here with torch.profiler (record_shapes, profile_memory, with_stack)
and its trace exported; torchneck's rows, read from the exported file, must be torch's rows:
the same groups, counts and memory, and the same times within what the export keeps (times in
µs with 3 decimals, durations held as float32: `TIME_TOL_US` a call, `TIME_TOL_REL` of a total).
Synthetic traces (hypothesis) check the parent rule, the merging of duplicate nodes and memory
against torch's own `EventList` code on events a real run rarely produces (overhangs, chains of
one name, zero-length events).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import DATA, validate_report
from conftest import torchneck as run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent, MemRecordsAcc, _filter_stack_entry
from torch.profiler import ProfilerActivity, profile, record_function

import torchneck
from torchneck.analysis.key_averages import KIND_NAMES, TableOptions, key_averages, sort_key
from torchneck.analysis.nesting import host_nesting
from torchneck.errors import TorchneckError
from torchneck.model.base import to_builtins
from torchneck.pipeline import report_from_traces
from torchneck.trace.loader import load_trace

TIME_TOL_US = 0.01
"""Per call: the export writes ns as µs with 3 decimals; torchneck holds durations as float32."""
TIME_TOL_REL = 1e-6
"""Of a row's total (float32 durations: 6e-8 of each; self times subtract the children's)."""


def workload(train: bool, steps: int = 3) -> None:
    """A small model with what key_averages must get right: labels, NumPy between ops, an op
    calling one of its own name (`aten::sum`), a TensorList input (`torch.cat`), a tensor freed
    outside any op (torch's `[memory]` row), and backward and the optimizer when `train`."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for _ in range(steps):
        with record_function("FORWARD"):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
            torch.cat([out, out[:3]]).sum()
        with record_function("MASK"):
            idx = np.argwhere(out.detach().double().numpy() > 0.1)
            torch.from_numpy(idx).sum(dim=0).sum().item()
        scratch = torch.empty(1000)
        del scratch
        if train:
            loss.backward()
            opt.step()
            opt.zero_grad()


def profiled(tmp_path: Path, train: bool, with_stack: bool, verbose: bool = False):
    """(torch's profiler, the exported trace's path) of `workload`, warmed up first."""
    workload(train, steps=1)
    extra = {"experimental_config": torch._C._profiler._ExperimentalConfig(verbose=True)} if verbose else {}
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True, with_stack=with_stack,
                 **extra) as prof:
        workload(train)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return prof, path


def torch_rows(averages, by_shape: bool = False, stack_n: int = 0) -> dict:
    out = {}
    for a in averages:
        key = (a.key, bool(a.is_user_annotation)) + ((str(a.input_shapes),) if by_shape else ()) \
            + tuple(a.stack[:stack_n])
        assert key not in out
        out[key] = {"count": a.count, "cpu_time_total": a.cpu_time_total, "self_cpu_time_total": a.self_cpu_time_total,
                    "cpu_memory_usage": a.cpu_memory_usage, "self_cpu_memory_usage": a.self_cpu_memory_usage}
    return out


def torchneck_rows(path: Path, by_shape: bool = False, stack_n: int = 0, **options) -> tuple[dict, dict]:
    trace = load_trace(path)
    table = key_averages(trace, host_nesting(trace.events),
                         TableOptions(row_limit=-1, group_by_input_shape=by_shape, group_by_stack_n=stack_n, **options))
    out = {}
    for r in table["rows"]:
        if r["kind"] in ("device", "device_label"):  # GPU events: rows of torch's own only when CUDA was profiled
            continue
        key = (r["name"], r["kind"] == "label") + ((r["input_shapes"],) if by_shape else ()) + tuple(r.get("stack", []))
        assert key not in out
        out[key] = r
    return out, table


def assert_same_rows(ours: dict, theirs: dict) -> None:
    assert sorted(ours, key=str) == sorted(theirs, key=str)
    for key, want in theirs.items():
        got = ours[key]
        assert got["count"] == want["count"], key
        assert got["cpu_memory_usage"] == want["cpu_memory_usage"], key
        assert got["self_cpu_memory_usage"] == want["self_cpu_memory_usage"], key
        for field in ("cpu_time_total", "self_cpu_time_total"):
            tol = TIME_TOL_US * want["count"] + TIME_TOL_REL * (abs(want[field]) + want["cpu_time_total"])
            assert abs(got[field] - want[field]) <= tol, (key, field, got[field], want[field])


@pytest.mark.parametrize("train,with_stack", [(True, False), (True, True), (False, True)],
                         ids=["train", "train-with-stack", "inference-with-stack"])
def test_rows_equal_torch(tmp_path, train, with_stack):
    prof, path = profiled(tmp_path, train, with_stack)
    for by_shape in (False, True):
        ours, table = torchneck_rows(path, by_shape=by_shape)
        assert_same_rows(ours, torch_rows(prof.key_averages(group_by_input_shape=by_shape), by_shape))
    if not with_stack:  # the tensor freed outside any op (with Python events, inside the workload's frame)
        assert ("[memory]", False, "[]") in ours
    assert table["has_memory"] and not table["has_device_time"]
    assert ("MASK", True) in torchneck_rows(path)[0]
    if with_stack:  # the Python calls are rows of torch's table too
        assert any(r["kind"] == "python" for r in torchneck_rows(path)[0].values())


def test_totals_and_order_equal_torch(tmp_path):
    prof, path = profiled(tmp_path, train=True, with_stack=False)
    averages = prof.key_averages()
    _, table = torchneck_rows(path)
    want_total = sum(a.self_cpu_time_total for a in averages)
    tolerance = TIME_TOL_US * len(prof.events()) + TIME_TOL_REL * want_total
    assert abs(table["self_cpu_time_total"] - want_total) <= tolerance
    for column in ("cpu_time_total", "self_cpu_time_total", "cpu_memory_usage", "count"):
        trace = load_trace(path)
        ours = key_averages(trace, host_nesting(trace.events), TableOptions.make(column, 6))["rows"]
        theirs = sorted(averages, key=lambda a: getattr(a, column), reverse=True)
        want = [getattr(a, column) for a in theirs[:6]]
        got = [r[column] for r in ours]
        assert len(ours) == 6
        assert got == sorted(got, reverse=True)
        assert np.allclose(got, want, rtol=1e-5, atol=0.05)  # the same values, largest first


def test_stacks_equal_torch(tmp_path):
    """group_by_stack_n from the trace's Python events: torch's stacks (recorded with its verbose
    config, which also writes them into the trace; torchneck reads the Python events instead)."""
    prof, path = profiled(tmp_path, train=False, with_stack=True, verbose=True)
    for n in (1, 5):
        ours, table = torchneck_rows(path, stack_n=n)
        assert table["stack_source"] == "python_function"
        assert_same_rows(ours, torch_rows(prof.key_averages(group_by_stack_n=n), stack_n=n))
    frames = {f for key in ours for f in key[2:]}
    assert any(f.startswith("test_key_averages.py(") and f.endswith(": workload") for f in frames)


def test_backward_ops_keep_the_backward_call_stack(tmp_path):
    """Documented difference: torch gives ops of the backward pass their forward op's stack (by
    sequence numbers the loader does not keep); torchneck the `.backward()` call's, and says so."""
    _, path = profiled(tmp_path, train=True, with_stack=True)
    ours, table = torchneck_rows(path, stack_n=5)
    backward = [key for key in ours if key[0] == "AddmmBackward0"]
    assert backward and all(any("backward" in f for f in key[2:]) for key in backward)
    assert any("backward" in note for note in table["notes"])


def test_call_stack_traces_group_by_their_frames():
    """PyTorch 1.8 traces carry each op's stack as a "Call stack" arg (innermost first): the
    groups are (name, first N frames of it). The reference is torch's own EventList built from
    the trace's events with those stacks."""
    path = DATA / "torch18_cpu__train.json.gz"
    events = json.loads(gzip.open(path).read())["traceEvents"]
    fes = []
    for i, e in enumerate(e for e in events if e.get("ph") == "X" and e.get("cat") in ("Operator", "cpu_op")):
        if e["name"] in ("aten::is_leaf", "aten::output_nr", "aten::_version"):
            continue
        stack = [f for f in ((e.get("args") or {}).get("Call stack") or "").split(";") if f and _filter_stack_entry(f)]
        fes.append(FunctionEvent(id=i, name="ProfilerStep*" if e["name"].startswith("ProfilerStep#") else e["name"],
                                 thread=e["tid"], start_us=e["ts"], end_us=e["ts"] + e["dur"], stack=stack))
    fes.sort(key=lambda e: [e.time_range.start, -e.time_range.end])
    reference = EventList(fes)
    reference._build_tree()
    want = {(a.key, tuple(a.stack)): a.count for a in reference.key_averages(group_by_stack_n=2)}
    ours, table = torchneck_rows(path, stack_n=2)
    assert table["stack_source"] == "call_stack"
    assert {(k[0], k[2:]): r["count"] for k, r in ours.items()} == want
    assert sum(1 for k in want if k[1]) > 20  # most ops have their stack


@pytest.mark.parametrize("name", ["trace_diff__control__control", "gpu_h100__eager_train"])
def test_sorted_totals_equal_dense_totals(name, monkeypatch):
    """Group totals go into dense arrays when the key space is small, else are sorted and merged
    block by block: both give the same table (and the label table's op totals likewise)."""
    from torchneck.analysis import key_averages_groups, labels

    path = str(DATA / f"{name}.json.gz")
    options = TableOptions(row_limit=-1, group_by_input_shape=True)
    trace = load_trace(path)
    nesting = host_nesting(trace.events)
    dense = key_averages(trace, nesting, options)
    dense_labels = to_builtins(report_from_traces([path]).ranks[0].labels)
    monkeypatch.setattr(key_averages_groups, "DENSE_KEYS", 0)
    monkeypatch.setattr(labels._OpTotals, "DENSE", 0)
    assert key_averages(trace, nesting, options) == dense
    assert to_builtins(report_from_traces([path]).ranks[0].labels) == dense_labels


# -- GPU: device time, on the traces recorded on an H100 ------------------------------------------

LINKED = ["gpu_h100__eager_train", "gpu_h100__host_sync", "gpu_h100__launch_bound", "gpu_h100__float64_mask_run",
          "gpu_h100__compiled_train", "amd_trace__mi250_minitoy_train_ROCm6_2_kineto"]
"""Traces whose kernels name the op that launched them ("External id", as torch links them)."""


@pytest.mark.parametrize("name", LINKED)
def test_device_time_follows_the_launching_op(name):
    """Each op's self device time is the kernels linked to it in the JSON by their "External id"
    (torch's `linked_correlation_id`); each kernel is a row of its own; totals add up."""
    path = DATA / f"{name}.json.gz"
    events = json.loads(gzip.open(path).read())["traceEvents"]
    owner = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            ext = (e.get("args") or {}).get("External id")
            if ext is not None:
                owner.setdefault(ext, "ProfilerStep*" if e["name"].startswith("ProfilerStep#") else e["name"])
    want, kernel_us = defaultdict(float), 0.0
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernel_us += e["dur"]
            ext = e["args"].get("External id")
            if ext is not None:  # (a copy the runtime made on its own belongs to no op)
                want[owner[ext]] += e["dur"]
    rows, table = torchneck_rows(path)
    got = defaultdict(float)
    for r in rows.values():
        if r["kind"] in ("cpu", "label"):
            got[r["name"]] += r["self_device_time_total"]
    assert {k for k, v in got.items() if v > 0} == set(want)
    for op, us in want.items():
        assert got[op] == pytest.approx(us, rel=1e-5, abs=0.05), op
    assert table["has_device_time"]
    assert table["self_device_time_total"] == pytest.approx(kernel_us, rel=1e-5)
    step = rows.get(("ProfilerStep*", True))
    if step is not None:  # the kernels launched from the steps' thread count in the steps' device time
        assert 0 < step["device_time_total"] <= kernel_us + 0.05


# -- synthetic traces against torch's own EventList ------------------------------------------------

NAMES = ["aten::a", "aten::b", "aten::b", "aten::c"]


@st.composite
def host_events(draw):
    """Per thread, events (whole µs) that mostly nest (children drawn inside a parent), some
    sticking out of their parent, some of their parent's name, some of zero length; and memory
    records, half a µs off any event boundary (the export's rounding is not what is tested)."""
    events = []
    for tid in (1, 2):
        def spawn(lo: int, hi: int, depth: int, tid: int = tid):
            for _ in range(draw(st.integers(0, 3 if depth < 3 else 0))):
                if hi - lo < 4:
                    return
                a = draw(st.integers(lo, hi - 2))
                b = draw(st.integers(a, hi))
                if draw(st.integers(0, 9)) == 0:  # sticks out of its parent
                    b = hi + draw(st.integers(1, 50))
                events.append((tid, draw(st.sampled_from(NAMES)), a, b))
                spawn(a, min(b, hi), depth + 1, tid)
                lo = b
        spawn(0, 5000, 0)
    memory = [(draw(st.integers(0, 5100)) + 0.5, draw(st.sampled_from([-64, 128, 4096])), draw(st.sampled_from([0, 1])))
              for _ in range(draw(st.integers(0, 12)))]
    return events, memory


def torch_reference(events, memory) -> dict:
    """torch's `_parse_kineto_results` memory attribution (in ns, as torch does) and `EventList`
    tree on these events."""
    records = [[SimpleNamespace(start_ns=lambda t=t: t * 1000, nbytes=lambda b=b: b, device_type=lambda d=d: d), False]
               for t, b, d in memory]
    acc = MemRecordsAcc(records)
    fes = []
    for i, (tid, name, a, b) in enumerate(events):
        mem = dev = 0
        for rec in acc.in_interval(a * 1000, b * 1000):
            mem += rec[0].nbytes() if rec[0].device_type() == 0 else 0
            dev += rec[0].nbytes() if rec[0].device_type() == 1 else 0
            rec[1] = True
        fes.append(FunctionEvent(id=i, name=name, thread=tid, start_us=a, end_us=b, cpu_memory_usage=mem, stack=[],
                                 device_memory_usage=dev, device_type=DeviceType.CPU))
    for rec in records:
        if not rec[1]:
            t, b, d = rec[0].start_ns() / 1000, rec[0].nbytes(), rec[0].device_type()
            fes.append(FunctionEvent(id=-1, name="[memory]", thread=0, start_us=t, end_us=t, stack=[],
                                     cpu_memory_usage=b if d == 0 else 0, device_memory_usage=b if d == 1 else 0))
    fes.sort(key=lambda e: [e.time_range.start, -e.time_range.end])
    lst = EventList(fes, use_device="cuda", profile_memory=True)
    lst._build_tree()
    return {a.key: {"count": a.count, "cpu_time_total": a.cpu_time_total, "self_cpu_time_total": a.self_cpu_time_total,
                    "cpu_memory_usage": a.cpu_memory_usage, "self_cpu_memory_usage": a.self_cpu_memory_usage,
                    "device_memory_usage": a.device_memory_usage,
                    "self_device_memory_usage": a.self_device_memory_usage}
            for a in lst.key_averages()}


def write_trace(path: Path, events, memory) -> None:
    """A Kineto trace of these events (µs)."""
    out = [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": a, "dur": b - a}
           for tid, name, a, b in events]
    out += [{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": t,
             "args": {"Bytes": b, "Device Type": d, "Device Id": 0 if d else -1, "Total Allocated": 0,
                      "Total Reserved": 0, "Addr": 1}} for t, b, d in memory]
    path.write_text(json.dumps({"traceEvents": out}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host_events())
def test_tree_and_memory_equal_torch_eventlist(tmp_path, drawn):
    events, memory = drawn
    if not events:
        return
    path = tmp_path / "synthetic.json"
    write_trace(path, events, memory)
    ours, _ = torchneck_rows(path)
    want = torch_reference(events, memory)
    got = {k[0]: r for k, r in ours.items()}
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        g = got[name]
        for field in ("count", "cpu_memory_usage", "self_cpu_memory_usage", "device_memory_usage",
                      "self_device_memory_usage"):
            assert g[field] == w[field], (name, field, g[field], w[field])
        for field in ("cpu_time_total", "self_cpu_time_total"):
            assert abs(g[field] - w[field]) <= TIME_TOL_US * w["count"] + TIME_TOL_REL * w["cpu_time_total"], \
                (name, field, g[field], w[field])


# -- options, command line, API ----------------------------------------------------------------------


def test_sort_keys_accept_torch_spellings():
    assert sort_key("self_cuda_time_total") == "self_device_time_total"
    assert sort_key("cuda_memory_usage") == "device_memory_usage"
    assert sort_key("cpu_time") == "cpu_time"
    with pytest.raises(TorchneckError, match="not a key_averages column"):
        sort_key("self_gpu_time")
    assert not TableOptions.make().requested and TableOptions.make(row_limit=3).requested
    with pytest.raises(TorchneckError):
        TableOptions.make(row_limit=0)


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> Path:
    _, path = profiled(tmp_path_factory.mktemp("ka"), train=True, with_stack=True)
    return path


def test_cli_table_options(small_trace):
    p = run_cli("analyze", str(small_trace), "--sort-by", "cpu_time_total", "--row-limit", "4",
                  "--group-by-shape", "--json", "-")
    assert p.returncode == 0, p.stderr
    report = validate_report(json.loads(p.stdout))
    table = report["ranks"][0]["key_averages"]
    assert table["options"] == {"sort_by": "cpu_time_total", "row_limit": 4, "group_by_input_shape": True,
                                "group_by_stack_n": 0, "requested": True}
    assert len(table["rows"]) == 4 and all("input_shapes" in r for r in table["rows"])
    totals = [r["cpu_time_total"] for r in table["rows"]]
    assert totals == sorted(totals, reverse=True) and table["groups"] > 4
    assert {r["kind"] for r in table["rows"]} <= set(KIND_NAMES)
    shown = run_cli("analyze", str(small_trace), "--sort-by", "self_cpu_memory_usage", "--row-limit", "3",
                      "--group-by-stack", "2")
    assert shown.returncode == 0, shown.stderr
    assert "key_averages(group_by_stack_n=2).table(sort_by='self_cpu_memory_usage', row_limit=3)" in shown.stdout
    assert "Self CPU time total:" in shown.stdout and "Self CPU Mem" in shown.stdout
    plain = run_cli("analyze", str(small_trace))
    assert plain.returncode == 0 and "key_averages(" not in plain.stdout  # shown when asked for


@pytest.mark.parametrize("args,message", [(["--sort-by", "wall_time"], "not a key_averages column"),
                                          (["--row-limit", "0"], "--row-limit"),
                                          (["--group-by-stack", "-2"], "--group-by-stack")])
def test_cli_bad_table_options_are_one_line(small_trace, args, message):
    p = run_cli("analyze", str(small_trace), *args)
    assert p.returncode == 2
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_api_table_options(small_trace):
    report = torchneck.analyze(str(small_trace), sort_by="count", row_limit=2, group_by_stack=1)
    table = report["ranks"][0]["key_averages"]
    assert [r["count"] for r in table["rows"]] == sorted((r["count"] for r in table["rows"]), reverse=True)
    assert len(table["rows"]) == 2 and all(len(r["stack"]) <= 1 for r in table["rows"])
    assert "key_averages(group_by_stack_n=1)" in str(report)


def test_report_of_run_dir_takes_the_options(tmp_path):
    """`torchneck report RUN_DIR --sort-by ...` on a run directory recorded on an H100."""
    run_dir = tmp_path / "run"
    subprocess.run(["cp", "-r", str(DATA / "gpu_h100_run__item_sync"), str(run_dir)], check=True)
    p = run_cli("report", str(run_dir), "--sort-by", "self_cuda_time_total", "--row-limit", "5", "--json", "-")
    assert p.returncode == 0, p.stderr
    table = validate_report(json.loads(p.stdout))["ranks"][0]["key_averages"]
    assert table["options"]["sort_by"] == "self_device_time_total" and table["has_device_time"]
    device = [r["self_device_time_total"] for r in table["rows"]]
    assert device == sorted(device, reverse=True) and device[0] > 0
    assert not any(r["name"].startswith("torchneck@") for r in table["rows"])  # torchneck's own spans looked through


def test_html_holds_the_table(small_trace, tmp_path):
    out = tmp_path / "r.html"
    p = run_cli("analyze", str(small_trace), "--quiet", "--html", str(out))
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert 'id="key-averages"' in page and "Self CPU %" in page and "aten::addmm" in page


if __name__ == "__main__":  # pragma: no cover - a manual look at both tables side by side
    prof, path = profiled(Path(sys.argv[1]), train=True, with_stack=False)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    print(run_cli("analyze", str(path), "--row-limit", "10").stdout)
