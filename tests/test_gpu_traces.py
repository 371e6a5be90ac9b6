"""GPU analyses on traces recorded on an H100 from known workloads (tests/data/record_gpu_traces.py):
numbers against an independent reading of the JSON, and the diagnosis against what ran."""

import gzip
import json
import shutil

import numpy as np
import pytest
from conftest import DATA, torchneck

from torchneck.analysis.summary import analyze_trace as analyze_typed
from torchneck.model.base import to_builtins
from torchneck.trace.loader import load_trace

GPU = {p.name.split("__")[1].split(".")[0]: p for p in sorted(DATA.glob("gpu_h100__*.json.gz"))}


def analyze_trace(trace):
    """The analysis as report.json holds it."""
    return to_builtins(analyze_typed(trace))


def raw_events(name):
    return [e for e in json.loads(gzip.decompress(GPU[name].read_bytes()))["traceEvents"] if e.get("ph") == "X"]


def cpu_step_window(events):
    """The span of the host-side ProfilerStep#N annotations (the GPU-side copies excluded)."""
    steps = [e for e in events if e["name"].startswith("ProfilerStep#") and e["cat"] == "user_annotation"]
    return min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps), len(steps)


def window_with_gpu_tail(events, lo, cpu_hi):
    """The steps' window extended to the end of the GPU work launched in them (from the JSON)."""
    launched = {e["args"]["correlation"] for e in events if e["cat"] in ("cuda_runtime", "cuda_driver")
                and lo <= e["ts"] < cpu_hi and "correlation" in e.get("args", {})}
    ends = [e["ts"] + e["dur"] for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
            and e["args"].get("correlation") in launched]
    return max([cpu_hi, *ends])


def union_in(intervals, lo, hi):
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0.0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0.0)


@pytest.fixture(scope="module")
def analyses():
    return {name: analyze_trace(load_trace(path)) for name, path in GPU.items()}


def test_all_workloads_are_here():
    assert set(GPU) == {"eager_train", "launch_bound", "host_sync", "cuda_graph", "compiled_train",
                        "reduce_overhead_run", "float64_mask_run", "two_streams"}


@pytest.mark.parametrize("name", sorted(GPU))
def test_busy_time_and_kernel_count_equal_a_json_reference(name, analyses):
    events = raw_events(name)
    lo, cpu_hi, n_steps = cpu_step_window(events)
    hi = window_with_gpu_tail(events, lo, cpu_hi)
    a = analyses[name]
    assert a["steps"]["count"] == n_steps == (5 if name.endswith("_run") else 3)
    assert a["steps"]["window_us"] == pytest.approx(hi - lo, abs=0.01)
    assert a["steps"]["gpu_tail_us"] == pytest.approx(hi - cpu_hi, abs=0.01)
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    dev = a["gpu"]["devices"][0]
    assert dev["busy_us"] == pytest.approx(union_in(gpu, lo, hi), rel=1e-5, abs=0.05)
    assert dev["busy_us"] + dev["idle_us"] == pytest.approx(hi - lo, rel=1e-6)
    kernels_in_window = sum(1 for e in events if e["cat"] == "kernel" and lo <= e["ts"] < hi)
    assert a["gpu"]["launch"]["kernels"] == kernels_in_window
    # Each kernel whose launching call was recorded is linked to it by its correlation id (a
    # GPU-bound step runs ms behind the CPU: kernels early in the window were launched before it).
    launched = {e["args"]["correlation"] for e in events
                if e["cat"] in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    linked = sum(1 for e in events if e["cat"] == "kernel" and lo <= e["ts"] < hi
                 and e["args"].get("correlation") in launched)
    assert a["gpu"]["launch"]["linked_launches"] == linked > 0


def test_gpu_bound_eager_training(analyses):
    """Large fp32 matmuls back to back: the GPU is busy, and the time is in non-tensor-core GEMMs."""
    a = analyses["eager_train"]
    assert a["gpu"]["devices"][0]["busy_pct"] > 90
    families = {f["family"]: f for f in a["gpu"]["kernel_families"]}
    assert families["gemm"]["time_us"] > 0.9 * sum(f["time_us"] for f in families.values())
    r = torchneck("analyze", str(GPU["eager_train"]), "--json", "-")
    findings = json.loads(r.stdout)["findings"]
    assert findings[0]["kind"] == "tensor_cores" and findings[0]["severity"] == "high"
    assert not any(f["kind"] in ("launch_bound", "gpu_idle") for f in findings)


def test_launch_bound_small_batch(analyses):
    """Batch 4 through 24 tiny layers: ~2 µs kernels, the GPU idles waiting for launches."""
    a = analyses["launch_bound"]
    launch = a["gpu"]["launch"]
    assert a["gpu"]["devices"][0]["busy_pct"] < 10
    assert launch["short_share"] == 1.0 and launch["kernels_per_launch"] == 1.0
    r = torchneck("analyze", str(GPU["launch_bound"]), "--json", "-")
    top = json.loads(r.stdout)["findings"][0]
    assert top["kind"] == "launch_bound" and top["severity"] == "high"
    assert top["time_lost_pct"] > 90


def test_cuda_graph_replay_launches_the_step_at_once(analyses):
    """The same tiny model replayed as a CUDA graph: one cudaGraphLaunch starts every kernel of
    the step, the step is many times shorter, and it is not called launch-bound."""
    events = raw_events("cuda_graph")
    lo, hi, _ = cpu_step_window(events)
    graph_ids = {e["args"]["correlation"] for e in events if e["name"] == "cudaGraphLaunch"}
    from_graph = sum(1 for e in events if e["cat"] == "kernel" and lo <= e["ts"] < hi
                     and e["args"].get("correlation") in graph_ids)
    a = analyses["cuda_graph"]
    launch = a["gpu"]["launch"]
    assert len(graph_ids) == 3 and from_graph / 3 > 100  # one replay a step, >100 kernels each
    # The optimizer's few plain launches aside, one call launches the whole step.
    assert launch["launch_calls"] <= 6 and launch["kernels_per_launch"] > 50
    assert a["steps"]["median_us"] < analyses["launch_bound"]["steps"]["median_us"] / 5
    r = torchneck("analyze", str(GPU["cuda_graph"]), "--json", "-")
    assert not any(f["kind"] == "launch_bound" for f in json.loads(r.stdout)["findings"])


def test_host_sync_every_step(analyses):
    """`loss.item()` and a `.cpu()` copy each step: the syncs, their causes and the copies. The
    GPU stays busy 88 % of the steps (FP32 matmuls without Tensor Cores): the CPU's waits are
    that work, so removing the syncs saves at most the GPU's idle time, and the matmuls lead."""
    events = raw_events("host_sync")
    lo, hi, _ = cpu_step_window(events)
    syncs = [e for e in events if e["name"] == "cudaStreamSynchronize" and lo <= e["ts"] < hi]
    dtoh = [e for e in events if e["cat"] == "gpu_memcpy" and "DtoH" in e["name"] and lo <= e["ts"] < hi]
    s = analyses["host_sync"]["syncs"]
    assert s["sync_calls"] == len(syncs) == 6
    assert s["sync_wait_us"] == pytest.approx(sum(e["dur"] for e in syncs), rel=1e-5)
    assert s["dtoh_copies"] == len(dtoh)
    assert {c["op"]: c["count"] for c in s["by_cause"]} == {"aten::item": 3, "aten::to": 3}
    r = torchneck("analyze", str(GPU["host_sync"]), "--json", "-")
    findings = json.loads(r.stdout)["findings"]
    sync = next(f for f in findings if f["kind"] == "host_sync")
    assert "aten::item" in sync["ops"]
    idle_s = analyses["host_sync"]["gpu"]["devices"][0]["idle_us"] / 1e6
    assert sync["evidence"]["gpu_idle_s"] == pytest.approx(idle_s) and sync["time_lost_s"] == pytest.approx(idle_s)
    assert sync["time_lost_s"] < s["sync_wait_us"] / 1e6 / 3
    assert findings[0]["kind"] == "tensor_cores"


def test_compiled_training_shows_triton_kernels_and_compiled_regions(analyses):
    events = raw_events("compiled_train")
    lo, hi, _ = cpu_step_window(events)
    triton = sum(1 for e in events if e["cat"] == "kernel" and e["name"].startswith("triton_") and lo <= e["ts"] < hi)
    a = analyses["compiled_train"]
    families = {f["family"]: f["count"] for f in a["gpu"]["kernel_families"]}
    assert triton > 0 and families["triton"] == triton
    compiled = a["compiled"]
    assert compiled["present"] and compiled["region_calls"] == 3  # one compiled region per step
    assert compiled["nested_region_calls"] == 0  # no graph breaks in this model


def test_a_gpu_run_names_the_lines_that_launch_the_work(tmp_path):
    """A `torchneck run` recorded on the H100 (tests/scripts/gpu_item_sync.py: a small model
    whose step is launch-bound), re-analysed here: the launch-bound finding points at the
    script's step lines."""
    run_dir = tmp_path / "run"
    shutil.copytree(DATA / "gpu_h100_run__item_sync", run_dir)
    r = torchneck("report", str(run_dir), "--json", "-")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    top = report["findings"][0]
    assert top["kind"] == "launch_bound" and top["severity"] == "high"
    assert "without the profiler" in top["title"]  # it slowed these tiny steps 2.6x
    assert top["evidence"]["unprofiled_busy_pct"] > top["evidence"]["busy_pct"]
    lines = {(w["file"], w["line"]) for w in top["where"]}
    assert lines and lines <= {("tests/scripts/gpu_item_sync.py", n) for n in (11, 12, 13, 14, 15)}
    syncs = report["ranks"][0]["syncs"]
    assert {c["op"]: c["count"] for c in syncs["by_cause"]} == {"aten::item": 5}  # one per profiled step
    assert np.isfinite(report["ranks"][0]["gpu"]["devices"][0]["busy_pct"])


def test_launch_bound_despite_cuda_graphs_gets_advice_beyond_graphs(analyses):
    """torch.compile(mode='reduce-overhead') on a tiny model (a `torchneck run` window of
    tests/scripts/gpu_reduce_overhead.py): inductor's CUDA graphs launch the step, yet the GPU
    idles. Still launch-bound, but "use CUDA graphs" would be wrong advice."""
    a = analyses["reduce_overhead_run"]
    assert a["gpu"]["launch"]["kernels_per_launch"] >= 2
    assert a["gpu"]["devices"][0]["busy_pct"] < 10
    r = torchneck("analyze", str(GPU["reduce_overhead_run"]), "--json", "-")
    top = json.loads(r.stdout)["findings"][0]
    assert top["kind"] == "launch_bound" and top["severity"] == "high"
    assert "already replays CUDA graphs" in top["fix"]
    plain = json.loads(torchneck("analyze", str(GPU["launch_bound"]), "--json", "-").stdout)["findings"][0]
    assert plain["kind"] == "launch_bound" and "capture the step with CUDA graphs" in plain["fix"]


def test_cuda_memory_and_a_float64_mask(analyses):
    """A GPU step that draws a float64 tensor (tests/scripts/gpu_float64_mask.py, line 11) under
    profile_memory: the CUDA peak equals the memory events' own, and the float64 ops are named."""
    events = [e for e in json.loads(gzip.decompress(GPU["float64_mask_run"].read_bytes()))["traceEvents"]
              if e.get("ph") in ("X", "i")]
    lo, hi, _ = cpu_step_window([e for e in events if e["ph"] == "X"])
    cuda = [e["args"] for e in events if e["ph"] == "i" and e["name"] == "[memory]"
            and e["args"].get("Device Type") == 1 and lo <= e["ts"] < hi]
    mem = {d["device"]: d for d in analyses["float64_mask_run"]["memory"]["devices"]}
    assert mem["cuda:0"]["peak_allocated_bytes"] == max(a["Total Allocated"] for a in cuda)
    assert mem["cuda:0"]["allocations"] == sum(1 for a in cuda if a["Bytes"] > 0)
    # The 4096 x 2048 float64 draw: 64 MiB a step, the largest single allocation.
    assert max(a["Bytes"] for a in cuda) == 4096 * 2048 * 8
    r = torchneck("analyze", str(GPU["float64_mask_run"]), "--json", "-")
    f64 = [f for f in json.loads(r.stdout)["findings"] if f["kind"] == "dtype_float64"]
    assert f64 and {"aten::uniform_", "aten::gt"} <= set(f64[0]["ops"])


def test_a_gpu_idle_made_by_the_profiler_is_not_reported(tmp_path):
    """A GPU-bound step (tests/scripts/gpu_float64_mask.py, recorded with `torchneck run` on the
    H100; samples.json left out) ran 2.1x slower under the profiler: its GPU looks 63% idle in
    the window, but the kernels fill ~75% of an unprofiled step. No GPU-idle finding then; the
    planted float64 line still is one."""
    run_dir = tmp_path / "run"
    shutil.copytree(DATA / "gpu_h100_run__float64_mask", run_dir)
    r = torchneck("report", str(run_dir), "--json", "-")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["ranks"][0]["gpu"]["devices"][0]["busy_pct"] < 40  # as the window shows it
    kinds = [f["kind"] for f in report["findings"]]
    assert "gpu_idle" not in kinds and "launch_bound" not in kinds
    assert any("slower than unprofiled" in w for w in report["warnings"])
    f64 = next(f for f in report["findings"] if f["kind"] == "dtype_float64")
    assert f64["where"][0] == {"file": "tests/scripts/gpu_float64_mask.py", "line": 11, "function": "<module>"}


def test_torchneck_frames_of_a_run_recorded_elsewhere_are_not_user_code():
    """Run directories name the recording machine's files: torchneck's own there (another
    checkout, or site-packages) must not be taken for the user's code here."""
    from torchneck.sites import is_hook_file, is_marker_file, is_user_file, torchneck_relpath

    for root in ("/some/other/checkout/src/torchneck", "/opt/venv/lib/python3.12/site-packages/torchneck"):
        assert torchneck_relpath(f"{root}/capture/lines.py") == "capture/lines.py"
        assert not is_user_file(f"{root}/capture/lines.py") and is_marker_file(f"{root}/capture/lines.py")
        assert is_hook_file(f"{root}/capture/session.py") and not is_user_file(f"{root}/capture/session.py")
    assert torchneck_relpath("/home/me/torchneck/train.py") is None  # a user's folder that is so named
    assert is_user_file("/home/me/project/train.py") and not is_marker_file("/home/me/project/train.py")


def test_a_virtualenv_under_a_torch_folder_does_not_hide_python_hotspots(tmp_path):
    """benchmarks/zoo/numpy_roundtrip.py run on the H100 machine, whose Python lives in
    /opt/torch/.venv: NumPy's files there have '/torch/' in their path. The line's NumPy time
    must still count as Python outside torch ops (it was taken for torch's own, and the planted
    hotspot went unreported there)."""
    from torchneck.analysis.python_stacks import _is_torch_file

    assert not _is_torch_file("/opt/torch/.venv/lib/python3.12/site-packages/numpy/_core/numeric.py")
    assert _is_torch_file("/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py")
    import torch.nn.modules.module as module

    assert _is_torch_file(module.__file__)
    run_dir = tmp_path / "run"
    shutil.copytree(DATA / "h100_run__numpy_roundtrip", run_dir)
    report = json.loads(torchneck("report", str(run_dir), "--json", "-").stdout)
    top = report["findings"][0]
    assert top["kind"] == "python_hotspot" and top["severity"] == "high"
    assert (top["where"][0]["line"], top["where"][0]["file"].endswith("zoo/numpy_roundtrip.py")) == (11, True)


def _hta_agreement():
    import importlib.util

    spec = importlib.util.spec_from_file_location("hta_agreement",
                                                  DATA.parent.parent / "benchmarks" / "hta_agreement.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(GPU))
def test_idle_breakdown_agrees_with_holistic_trace_analysis(name):
    """Over HTA's events and window, with each event cut to whole µs as HTA's parser does,
    torchneck's idle time by cause equals HTA 0.5's own output on these traces (stored by
    `benchmarks/hta_agreement.py --write`): to the µs on four of them, within 10 µs between
    categories on the rest (gaps next to overlapping events: HTA measures from the previous
    event's end, torchneck from the latest end so far). On the two-stream trace the temporal
    breakdown agrees and the causes differ by definition (per stream vs per device)."""
    reference = json.loads((DATA / "gpu_h100__hta_reference.json").read_text())["traces"][GPU[name].name]
    ours = _hta_agreement().torchneck_over_hta_window(GPU[name], rounded=True)
    if "span_us" in reference:  # HTA's temporal breakdown asserts on some traces
        assert ours["span_us"] == pytest.approx(reference["span_us"], abs=1.0)
        assert ours["idle_us"] == pytest.approx(reference["idle_us"], abs=2.0)
    streams = {e["args"].get("stream") for e in raw_events(name) if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")}
    if len(streams) > 1:
        # HTA adds up each stream's own gaps; torchneck's causes split the device's idle time
        # (when no stream runs). Those differ by design: HTA's total is the larger.
        assert sum(reference["categories_us"].values()) >= sum(ours["categories_us"].values())
        return
    for category, hta_us in reference["categories_us"].items():
        assert ours["categories_us"][category] == pytest.approx(hta_us, rel=0.01, abs=10.0), category


def test_a_cpu_running_ahead_of_a_busy_gpu(analyses):
    """Matmuls on two streams that the CPU enqueues in 0.6 ms a step while the GPU needs ~14 ms:
    the CPU steps end long before their kernels run. Measured over the CPU's span the GPU would
    look 65% idle; over the steps' span up to the end of the work they launched it is busy, the
    report says the CPU runs ahead, and the FP32-GEMM share stays within 100% though kernels on
    two streams overlap."""
    events = raw_events("two_streams")
    lo, cpu_hi, _ = cpu_step_window(events)
    a = analyses["two_streams"]
    streams = {e["args"].get("stream") for e in events if e["cat"] in ("kernel", "gpu_memcpy")}
    assert len(streams) == 2
    assert a["steps"]["median_us"] < 1000 and a["steps"]["gpu_tail_us"] > 10 * (cpu_hi - lo)
    assert a["gpu"]["devices"][0]["busy_pct"] > 90
    r = torchneck("analyze", str(GPU["two_streams"]), "--json", "-")
    report = json.loads(r.stdout)
    assert "the CPU runs ahead" in report["verdict"]
    per_step_ms = a["steps"]["window_us"] / 3 / 1e3  # ~14 ms: the GPU's time per step
    assert per_step_ms > 10 and f"({per_step_ms:.1f} ms a step counting it)" in report["verdict"]
    kinds = {f["kind"]: f for f in report["findings"]}
    assert "gpu_idle" not in kinds and "launch_bound" not in kinds
    assert kinds["tensor_cores"]["evidence"]["share"] <= 1.0


def _launchers_by_dict(table):
    """Reference: walk the table in row order, the last runtime/driver call of each id wins."""
    from torchneck.trace.table import GPU_CATEGORIES, Cat

    last = {}
    for row, (cat, corr) in enumerate(zip(table.cat.tolist(), table.correlation.tolist())):
        if cat in (Cat.RUNTIME, Cat.DRIVER) and corr >= 0:
            last[corr] = row
    gpu = [r for r, c in enumerate(table.cat.tolist()) if c in GPU_CATEGORIES]
    return np.array(gpu), np.array([last.get(int(table.correlation[r]), -1) if table.correlation[r] >= 0 else -1
                                    for r in gpu])


@pytest.mark.parametrize("name", sorted(GPU))
def test_each_gpu_event_is_linked_to_the_call_with_its_correlation_id(name, monkeypatch):
    import torchneck.analysis.gpu as gpu_mod
    import torchneck.trace.launches as launches

    monkeypatch.setattr(launches, "BLOCK", 1000)  # many blocks: an id's calls may sit in different ones
    table = load_trace(GPU[name], keep_correlation=True).events
    rows, expected = _launchers_by_dict(table)
    np.testing.assert_array_equal(gpu_mod.launching_rows(table, rows), expected)
    assert (expected >= 0).mean() > 0.5
    # rows that are no GPU event get -1
    assert (gpu_mod.launching_rows(table, np.flatnonzero(table.cat == 1)[:50]) == -1).all()
    # and the ids themselves are let go once resolved, unless asked for
    dropped = load_trace(GPU[name]).events
    assert dropped.correlation is None
    np.testing.assert_array_equal(np.asarray(dropped.launcher), np.asarray(table.launcher))


def test_a_repeated_correlation_id_links_to_its_last_call(tmp_path, monkeypatch):
    """Two calls with one id (e.g. a wrapped trace): the later one launched; an id no call has,
    and a GPU event without one, get no launcher."""
    import torchneck.analysis.gpu as gpu_mod
    import torchneck.trace.launches as launches

    def x(cat, name, ts, corr=None, **args):
        a = dict(args, **({} if corr is None else {"correlation": corr}))
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1.0, "args": a}

    events = [x("cuda_runtime", "cudaLaunchKernel", 1.0, 5), x("cuda_runtime", "cudaLaunchKernel", 3.0, 5),
              x("cuda_runtime", "cudaMalloc", 4.0, 9), x("kernel", "k1", 6.0, 5, device=0, stream=7),
              x("kernel", "k2", 7.0, 8, device=0, stream=7), x("kernel", "k3", 8.0, None, device=0, stream=7),
              x("cuda_runtime", "cudaLaunchKernel", 2.0, 8 + 1000)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    for block in (1, 2, 1000):
        monkeypatch.setattr(launches, "BLOCK", block)
        table = load_trace(p).events
        kernels = np.flatnonzero(table.cat == 4)
        launchers = gpu_mod.launching_rows(table, kernels)
        assert [table.ts[r] if r >= 0 else None for r in launchers.tolist()] == [3.0, None, None]
