"""Finding rules on small hand-made evidence (each threshold on both sides), and the ranking."""

import json

from conftest import DATA, torchneck, validate_report

from torchneck.analysis.distributed import collective_type, compare_ranks
from torchneck.diagnose.distributed_rules import Communication, Straggler
from torchneck.diagnose.findings import Finding, rank_findings
from torchneck.diagnose.gpu_rules import MemcpyTime, TensorCores
from torchneck.diagnose.rules import (
    Evidence,
    MemoryNearCapacity,
    OpHotspot,
    ThreadOversubscription,
    ZeroGradKernels,
)


def analysis(window_us=100_000.0, steps=5, gpu=None, by_name=(), annotations=(), by_shape=()):
    return {"steps": {"window_us": window_us, "count": steps},
            "gpu": gpu or {"present": False},
            "ops": {"by_name": list(by_name), "annotations": list(annotations), "by_shape": list(by_shape)}}


def test_memcpy_threshold_and_pageable_evidence():
    gpu = {"present": True, "memcpy": {"HtoD (pageable)": {"count": 10, "time_us": 12_000.0, "bytes": 24_000_000},
                                       "DtoD": {"count": 5, "time_us": 50_000.0, "bytes": 1}}}
    [f] = MemcpyTime().check(Evidence(analysis=analysis(gpu=gpu)))
    assert f.kind == "memcpy" and "pageable" in f.title and round(f.time_lost_pct) == 12
    assert f.evidence["HtoD (pageable)"]["gb_per_s"] == 2.0  # 24 MB in 12 ms
    gpu["memcpy"]["HtoD (pageable)"]["time_us"] = 9_000.0  # 9 %: below MIN_SHARE; DtoD never counts
    assert MemcpyTime().check(Evidence(analysis=analysis(gpu=gpu))) == []


def test_tensor_cores_fp32_gemms_only_and_fix_by_generation():
    kernels = [{"name": "ampere_sgemm_128x64_nn", "time_us": 20_000.0},
               {"name": "cutlass_80_tensorop_s1688gemm_64x64", "time_us": 50_000.0}]
    [f] = TensorCores().check(Evidence(analysis=analysis(gpu={"present": True, "top_kernels": kernels})))
    assert f.ops == ["ampere_sgemm_128x64_nn"] and f.time_lost_s == 0.01  # half of 20 ms
    assert "set_float32_matmul_precision" in f.fix
    kernels[0]["name"] = "volta_sgemm_128x64_nn"
    [f] = TensorCores().check(Evidence(analysis=analysis(gpu={"present": True, "top_kernels": kernels})))
    assert "float16" in f.fix and "predates TF32" in f.fix
    kernels[0]["time_us"] = 10_000.0  # 10 % < 15 %
    assert TensorCores().check(Evidence(analysis=analysis(gpu={"present": True, "top_kernels": kernels}))) == []


def test_zero_grad_needs_the_optimizer_span():
    fills = [{"name": "aten::zero_", "count": 50, "self_us": 6_000.0, "total_us": 6_000.0, "mean_us": 120.0}]
    spans = [{"name": "Optimizer.zero_grad#SGD.zero_grad", "count": 5, "total_us": 7_000.0}]
    ev = Evidence(analysis=analysis(by_name=fills, annotations=spans),
                  call_sites=[{"what": "optimizer", "file": "/x/train.py", "line": 12, "function": "main"}])
    [f] = ZeroGradKernels().check(ev)
    assert f.kind == "zero_grad" and f.time_lost_s == 0.006 and f.where[0].line == 12
    assert "set_to_none=True" in f.fix
    assert ZeroGradKernels().check(Evidence(analysis=analysis(by_name=fills))) == []  # fills elsewhere


def test_op_hotspot_is_at_most_medium_and_ranks_after_a_cause():
    ops = [{"name": "aten::mkldnn_convolution", "count": 10, "self_us": 80_000.0, "total_us": 80_000.0,
            "mean_us": 8_000.0}]
    [hot] = OpHotspot().check(Evidence(analysis=analysis(by_name=ops)))
    assert hot.severity == "medium"  # 80 % of the window: where time goes, not a diagnosis
    # the op's time is an upper bound: a cause saving over a fifth of it ranks first, a trifle does not
    cause = Finding(kind="autograd_in_inference", title="t", time_lost_s=0.017, time_lost_pct=17.0, fix="f")
    assert [f.kind for f in rank_findings([hot, cause])] == ["autograd_in_inference", "op_hotspot"]
    cause.time_lost_s = 0.015
    assert [f.kind for f in rank_findings([hot, cause])] == ["op_hotspot", "autograd_in_inference"]


def test_straggler_from_collective_durations():
    def rank(r, comm_us, step_us=40_000.0):
        return {"rank": r, "median_step_us": step_us, "steps": 5,
                "comm": {"present": True, "side": "host", "per_step_us": comm_us,
                         "by_type": [{"type": "all_reduce", "per_step_us": comm_us, "time_us": 5 * comm_us,
                                      "count": 5}]}}

    dist = compare_ranks([rank(0, 35_000.0), rank(1, 5_000.0), rank(2, 33_000.0)])
    s = dist["straggler"]
    assert s["rank"] == 1 and s["wait_per_step_us"] == 29_000.0  # mean of 30 and 28 ms
    [f] = Straggler().check(dist, steps=5)
    assert f.rank == 1 and f.severity == "high" and round(f.time_lost_s, 3) == 0.145
    # balanced ranks: jitter below STRAGGLER_MIN_US is no straggler
    assert compare_ranks([rank(0, 5_300.0), rank(1, 5_000.0)])["straggler"] is None
    # communication even on the least-waiting rank: 5 of 40 ms is 12.5 % < 15 %, 8 of 40 is 20 %
    assert Communication().check(dist, steps=5) == []
    [c] = Communication().check(compare_ranks([rank(0, 9_000.0), rank(1, 8_000.0)]), steps=5)
    assert c.kind == "communication" and c.rank == 1 and round(c.time_lost_pct) == 20


def test_collective_types_from_real_names():
    assert collective_type("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "all_reduce"
    assert collective_type("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "reduce_scatter"
    assert collective_type("gloo:all_gather") == "all_gather"
    assert collective_type("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t") == "send_recv"
    assert collective_type("c10d::broadcast_") == "broadcast"


def test_gpu_rules_on_real_traces():
    """HTA's trace_diff pair: the control run's HtoD copies, the test run's Volta sgemm kernels."""
    r = torchneck("analyze", str(DATA / "trace_diff__control__control.json.gz"), "--json", "-")
    [m] = [f for f in validate_report(json.loads(r.stdout))["findings"] if f["kind"] == "memcpy"]
    assert m["evidence"]["HtoD"]["bytes"] > 400e6 and 10 <= m["time_lost_pct"] < 15
    r = torchneck("analyze", str(DATA / "trace_diff__test__test.json.gz"), "--json", "-")
    [t] = [f for f in validate_report(json.loads(r.stdout))["findings"] if f["kind"] == "tensor_cores"]
    assert all(o.startswith("volta_sgemm") for o in t["ops"]) and "float16" in t["fix"]


def test_python_hotspot_on_the_dispatch_line_is_folded():
    from torchneck.diagnose.findings import Where
    from torchneck.diagnose.rules import fold_same_line

    line = [Where("/x/t.py", 12, "<module>")]
    dispatch = Finding(kind="dispatch_overhead", title="d", time_lost_s=0.3, time_lost_pct=30.0, fix="f", where=line)
    hot = Finding(kind="python_hotspot", title="<module>() spends 27% ...", time_lost_s=0.27, time_lost_pct=27.0,
                  fix="f", where=line, evidence={"outside_torch_s": 0.27})
    other = Finding(kind="python_hotspot", title="t", time_lost_s=0.1, time_lost_pct=10.0, fix="f",
                    where=[Where("/x/t.py", 20, "f")])
    kept = fold_same_line([dispatch, hot, other])
    assert [f.kind for f in kept] == ["dispatch_overhead", "python_hotspot"] and kept[1].where[0].line == 20
    assert kept[0].evidence["python_outside_ops_on_this_line_s"] == 0.27


def test_float64_means_float64_tensors_not_python_scalars():
    from torchneck.analysis.ops import _double_tensor_input

    assert _double_tensor_input('["float", "double"]', "[[16], []]") is False  # x * 0.5: a wrapped scalar
    assert _double_tensor_input('["double", "", "", ""]', "[[], [], [], []]") is False  # aten::to of it
    assert _double_tensor_input('["double", "double"]', "[[256, 256, 32], []]") is True  # a float64 mask
    assert _double_tensor_input('["double"]', "") is True  # no shapes recorded: cannot tell, keep it


def test_thread_oversubscription_costs_what_the_probe_measured():
    ops = [{"name": "aten::addmm", "count": 50, "self_us": 60_000.0, "total_us": 60_000.0, "mean_us": 1200.0}]
    probe = {"threads": 8, "cores": 2, "seconds_at_threads": 0.0015, "seconds_at_cores": 0.001, "slowdown": 1.5}
    env = {"cpu_affinity": 2, "torch_threads": 2, "settings_at_end": {"torch_threads": 8, "thread_probe": probe}}
    sites = [{"what": "set_num_threads", "threads": 8, "file": "/x/train.py", "line": 6, "function": "<module>"}]
    [f] = ThreadOversubscription().check(Evidence(analysis=analysis(by_name=ops), env=env, call_sites=sites))
    assert abs(f.time_lost_s - 0.02) < 1e-9  # 60 ms of ops x (1 - 1/1.5)
    assert f.severity == "medium" and f.where[0].line == 6 and "1.50x slower" in f.title  # 20 % of the window
    probe["slowdown"] = 1.02  # within noise: the setting is reported, with no cost
    [f] = ThreadOversubscription().check(Evidence(analysis=analysis(by_name=ops), env=env, call_sites=sites))
    assert f.severity == "info" and f.time_lost_s == 0.0
    env["settings_at_end"]["torch_threads"] = 2
    assert ThreadOversubscription().check(Evidence(analysis=analysis(by_name=ops), env=env)) == []


def test_thread_probe_restores_the_setting_and_skips_when_threads_fit():
    import torch

    from torchneck.capture.thread_probe import probe_oversubscription

    assert probe_oversubscription(2, 2) is None
    before = torch.get_num_threads()
    p = probe_oversubscription(before + 2, before)
    assert torch.get_num_threads() == before + 2  # the script's own setting, as it left it
    torch.set_num_threads(before)
    assert p["threads"] == before + 2 and p["slowdown"] > 0 and p["seconds_at_cores"] > 0


def test_conv_with_bias_straight_into_batch_norm_from_a_real_run(tmp_path):
    """conv_bn.py has one conv whose bias BatchNorm cancels, one without a bias, one into ReLU."""
    from conftest import SCRIPTS, read_report

    r = torchneck("run", "--out", str(tmp_path / "run"), str(SCRIPTS / "conv_bn.py"))
    assert r.returncode == 0, r.stderr
    report = read_report(tmp_path / "run")
    steps = report["ranks"][0]["steps"]["count"]
    assert report["ranks"][0]["ops"]["conv_bias_bn"]["pairs"] == steps  # only the first conv, once a step
    (f,) = [f for f in report["findings"] if f["kind"] == "conv_bias_bn"]
    assert f["severity"] == "low" and "bias=False" in f["fix"]


def test_memory_near_capacity_names_the_allocators_and_fragmentation():
    mem = {"recorded": True, "devices": [{"device": "cuda:0", "peak_allocated_bytes": 66e9,
                                          "peak_reserved_bytes": 78e9}],
           "top_allocators": [{"op": "aten::empty_strided", "bytes": 30e9, "allocations": 9,
                               "file": "/x/train.py", "line": 40, "function": "forward"}]}
    a = analysis() | {"memory": mem, "trace": {"device_memory_bytes": {"0": int(80e9)}}}
    [f] = MemoryNearCapacity().check(Evidence(analysis=a))
    assert f.kind == "memory" and f.severity == "medium" and "78.0 of 80.0 GB (98%)" in f.title
    assert f.where[0].line == 40 and "expandable_segments" in f.fix  # 12 GB reserved, not allocated
    mem["devices"][0].update(peak_allocated_bytes=40e9, peak_reserved_bytes=41e9)
    assert MemoryNearCapacity().check(Evidence(analysis=a)) == []
    mem["devices"][0]["device"] = "cpu"  # no capacity for host memory: silent
    assert MemoryNearCapacity().check(Evidence(analysis=a)) == []


def _gpu_pattern_trace(path):
    """A one-step CUDA trace: torch.zeros(...).to("cuda"), one fp16 matmul on 30x60 @ 60x30
    (not multiples of 8: 3 ms of kernel) and one on 32x64 @ 64x32 (aligned)."""
    def op(name, ts, dur, **args):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}

    def gpu(cat, name, ts, dur, corr):
        return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                "args": {"device": 0, "stream": 7, "correlation": corr}}

    def runtime(name, ts, corr):
        return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 20,
                "args": {"correlation": corr}}

    half = ["c10::Half", "c10::Half"]
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10000},
        op("aten::zeros", 100, 50), op("aten::zero_", 110, 20),
        op("aten::to", 200, 300), op("aten::_to_copy", 210, 280), op("aten::copy_", 220, 260),
        runtime("cudaMemcpyAsync", 230, 5), gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 300, 100, 5),
        op("aten::mm", 1000, 100, **{"Input Dims": [[30, 60], [60, 30]], "Input type": half}),
        runtime("cudaLaunchKernel", 1010, 9), gpu("kernel", "ampere_fp16_s16816gemm_fp16_64x64", 1100, 3000, 9),
        op("aten::mm", 5000, 100, **{"Input Dims": [[32, 64], [64, 32]], "Input type": half}),
        runtime("cudaLaunchKernel", 5010, 11), gpu("kernel", "ampere_fp16_s16816gemm_fp16_64x64", 5100, 1000, 11),
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "A100",
                                                                          "totalGlobalMem": 80 * 2**30}],
                                "traceEvents": events}))
    return path


def test_torch_pattern_matcher_gpu_patterns_unaligned_half_matmul_and_filled_copy(tmp_path):
    from torchneck.pipeline import report_from_traces

    report = validate_report(report_from_traces([str(_gpu_pattern_trace(tmp_path / "t.json"))]))
    ops = report["ranks"][0]["ops"]
    assert ops["half_matmul_unaligned"]["count"] == 1 and ops["half_matmul_unaligned"]["kernel_us"] == 3000
    assert ops["half_matmul_unaligned"]["shapes"][0]["shapes"] == [[30, 60], [60, 30]]
    assert ops["filled_then_copied"] == {"count": 1, "copy_us": 300.0}
    by_kind = {f["kind"]: f for f in report["findings"]}
    assert by_kind["tensor_cores"]["severity"] == "medium" and "multiples of 8" in by_kind["tensor_cores"]["title"]
    copy = by_kind["memcpy"]
    assert "device='cuda'" in copy["fix"] and abs(copy["time_lost_s"] - 300e-6) < 1e-12


def test_autograd_in_inference_names_the_model_call_even_without_samples_in_the_window():
    """On a fast machine (the H100 box) the whole window can pass between two sampler ticks: the
    line comes from the exact line spans then."""
    from torchneck.diagnose.rules import AutogradInInference

    clock = {"kind": "module", "top_module_calls": 200, "top_module_outputs_with_grad": 200}
    by_line = [{"op": "aten::addmm", "file": "/x/infer.py", "line": 8, "function": "<module>", "self_us": 900.0},
               {"op": "aten::randn", "file": "/x/infer.py", "line": 8, "function": "<module>", "self_us": 50.0},
               {"op": "aten::gelu", "file": "/x/other.py", "line": 3, "function": "f", "self_us": 100.0}]
    a = analysis(by_name=[{"name": "aten::addmm"}])
    sampled = Evidence(analysis=a, clock=clock, ops_by_line=by_line,
                       python={"window": {"lines": [{"file": "/x/infer.py", "line": 9, "function": "<module>"}]}})
    unsampled = Evidence(analysis=a, clock=clock, ops_by_line=by_line, python={"window": {"lines": []}})
    assert AutogradInInference().check(sampled)[0].where[0].line == 9  # the sampler's line when it has one
    (f,) = AutogradInInference().check(unsampled)
    assert (f.where[0].file, f.where[0].line) == ("/x/infer.py", 8)


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
