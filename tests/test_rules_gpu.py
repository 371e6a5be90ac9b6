"""GPU rules on small hand-made analyses (each threshold on both sides) and on real traces."""

import json

import pytest
from conftest import DATA, torchneck, validate_report
from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.facts import Where
from torchneck.diagnose.rules.gpu import (
    ExtraCopy,
    GpuIdle,
    HostSync,
    LaunchBound,
    MemcpyTime,
    MemoryNearCapacity,
    TensorCores,
    UnalignedHalfMatmul,
)
from torchneck.model.analysis import (
    Allocator,
    CodeSite,
    Device,
    FilledThenCopied,
    Gpu,
    HalfMatmulUnaligned,
    IdleBreakdown,
    KernelRow,
    LaunchStats,
    MemcpyDirection,
    Memory,
    MemoryDevice,
    ScalarOp,
    ShapeExample,
    SyncCause,
    Syncs,
    Temporal,
    TraceInfo,
)


def _kernel(name, time_us):
    return KernelRow(name=name, family="gemm", count=1, time_us=time_us, mean_us=time_us)


@fires("memcpy")
def test_memcpy_threshold_and_pageable_evidence():
    gpu = Gpu(present=True, memcpy={"HtoD (pageable)": MemcpyDirection(count=10, time_us=12_000.0, bytes=24_000_000),
                                    "DtoD": MemcpyDirection(count=5, time_us=50_000.0, bytes=1)})
    [f] = MemcpyTime().check(facts(analysis=analysis(gpu=gpu)))
    assert f.kind == "memcpy" and "pageable" in f.title and round(f.time_lost_pct) == 12
    assert f.evidence["directions"]["HtoD (pageable)"]["gb_per_s"] == 2.0  # 24 MB in 12 ms
    assert f.evidence["pageable"] is True and "pin_memory=True" in f.fix


@silent("memcpy")
def test_memcpy_under_its_share_or_device_to_device_is_silent():
    gpu = Gpu(present=True, memcpy={"HtoD (pageable)": MemcpyDirection(count=10, time_us=9_000.0, bytes=24_000_000),
                                    "DtoD": MemcpyDirection(count=5, time_us=50_000.0, bytes=1)})
    assert MemcpyTime().check(facts(analysis=analysis(gpu=gpu))) == []  # 9 % < MIN_SHARE; DtoD never counts


@fires("tensor_cores")
def test_tensor_cores_fp32_gemms_only_and_fix_by_generation():
    kernels = [_kernel("ampere_sgemm_128x64_nn", 20_000.0), _kernel("cutlass_80_tensorop_s1688gemm_64x64", 50_000.0)]
    [f] = TensorCores().check(facts(analysis=analysis(gpu=Gpu(present=True, top_kernels=kernels))))
    assert f.ops == ["ampere_sgemm_128x64_nn"] and f.time_lost_s == pytest.approx(0.015)  # 3/4 of 20 ms
    assert "set_float32_matmul_precision" in f.fix
    kernels[0] = _kernel("volta_sgemm_128x64_nn", 20_000.0)
    [f] = TensorCores().check(facts(analysis=analysis(gpu=Gpu(present=True, top_kernels=kernels))))
    assert "float16" in f.fix and "predates TF32" in f.fix


@silent("tensor_cores")
def test_tensor_cores_silent_under_its_share():
    kernels = [_kernel("volta_sgemm_128x64_nn", 10_000.0)]  # 10 % < 15 %
    assert TensorCores().check(facts(analysis=analysis(gpu=Gpu(present=True, top_kernels=kernels)))) == []


def test_gpu_rules_on_real_traces():
    """HTA's trace_diff pair: the control run's HtoD copies, the test run's Volta sgemm kernels."""
    r = torchneck("analyze", str(DATA / "trace_diff__control__control.json.gz"), "--json", "-")
    [m] = [f for f in validate_report(json.loads(r.stdout))["findings"] if f["kind"] == "memcpy"]
    assert m["evidence"]["directions"]["HtoD"]["bytes"] > 400e6 and 10 <= m["time_lost_pct"] < 15
    r = torchneck("analyze", str(DATA / "trace_diff__test__test.json.gz"), "--json", "-")
    [t] = [f for f in validate_report(json.loads(r.stdout))["findings"] if f["kind"] == "tensor_cores"]
    assert all(o.startswith("volta_sgemm") for o in t["ops"]) and "float16" in t["fix"]


def _memory(device="cuda:0", allocated=66e9, reserved=78e9):
    return Memory(recorded=True, devices=[MemoryDevice(device=device, peak_allocated_bytes=int(allocated),
                                                       peak_reserved_bytes=int(reserved))],
                  top_allocators=[Allocator(op="aten::empty_strided", bytes=int(30e9), allocations=9,
                                            file="/x/train.py", line=40, function="forward")])


@fires("memory")
def test_memory_near_capacity_names_the_allocators_and_fragmentation():
    a = analysis()
    a.memory = _memory()
    a.trace = TraceInfo(path="t", device_memory_bytes={"0": int(80e9)})
    [f] = MemoryNearCapacity().check(facts(analysis=a))
    assert f.kind == "memory" and f.severity == "medium" and "78.0 of 80.0 GB (98%)" in f.title
    assert f.where[0].line == 40 and "expandable_segments" in f.fix  # 12 GB reserved, not allocated


@silent("memory")
def test_memory_with_headroom_or_on_the_host_is_silent():
    a = analysis()
    a.trace = TraceInfo(path="t", device_memory_bytes={"0": int(80e9)})
    a.memory = _memory(allocated=40e9, reserved=41e9)
    assert MemoryNearCapacity().check(facts(analysis=a)) == []
    a.memory = _memory(device="cpu")  # no capacity for host memory
    assert MemoryNearCapacity().check(facts(analysis=a)) == []


def _gpu_pattern_trace(path, unaligned_us=3000, sync_us=0):
    """A one-step CUDA trace: torch.zeros(...).to("cuda"), one fp16 matmul on 30x60 @ 60x30
    (not multiples of 8: `unaligned_us` of kernel) and one on 32x64 @ 64x32 (aligned); with
    `sync_us`, the step ends waiting that long for the device (the GPU sets the pace)."""
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
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
         "dur": max(10000, 7300 + sync_us)},
        op("aten::zeros", 100, 50), op("aten::zero_", 110, 20),
        op("aten::to", 200, 300), op("aten::_to_copy", 210, 280), op("aten::copy_", 220, 260),
        runtime("cudaMemcpyAsync", 230, 5), gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 300, 100, 5),
        op("aten::mm", 1000, 100, **{"Input Dims": [[30, 60], [60, 30]], "Input type": half}),
        runtime("cudaLaunchKernel", 1010, 9), gpu("kernel", "ampere_fp16_s16816gemm_fp16_64x64", 1100, unaligned_us, 9),
        op("aten::mm", 5000, 100, **{"Input Dims": [[32, 64], [64, 32]], "Input type": half}),
        runtime("cudaLaunchKernel", 5010, 11),
        gpu("kernel", "ampere_fp16_s16816gemm_fp16_64x64", 2100 + unaligned_us, 1000, 11),
        # an odd M only: the rows stay aligned (no slowdown measured on an H100), not a hit
        op("aten::mm", 7000, 100, **{"Input Dims": [[31, 64], [64, 32]], "Input type": half}),
        runtime("cudaLaunchKernel", 7010, 13),
        gpu("kernel", "ampere_fp16_s16816gemm_fp16_64x64", 3100 + unaligned_us, 1000, 13),
    ]
    if sync_us:
        events.append({**runtime("cudaDeviceSynchronize", 7200, 15), "dur": sync_us})
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "A100",
                                                                          "totalGlobalMem": 80 * 2**30}],
                                "traceEvents": events}))
    return path


@fires("unaligned_matmul")
@fires("extra_copy")
def test_torch_pattern_matcher_gpu_patterns_unaligned_half_matmul_and_filled_copy(tmp_path):
    from torchneck.model.base import to_builtins
    from torchneck.pipeline import report_from_traces

    report = validate_report(to_builtins(report_from_traces([str(_gpu_pattern_trace(tmp_path / "t.json"))])))
    ops = report["ranks"][0]["ops"]
    assert ops["half_matmul_unaligned"]["count"] == 1 and ops["half_matmul_unaligned"]["kernel_us"] == 3000
    assert ops["half_matmul_unaligned"]["shapes"][0]["shapes"] == [[30, 60], [60, 30]]
    assert ops["half_matmul_unaligned"]["odd_kernel_us"] == 0  # 60 and 30 are even: the milder fallback
    assert ops["filled_then_copied"] == {"count": 1, "copy_us": 300.0}
    by_kind = {f["kind"]: f for f in report["findings"]}
    unaligned = by_kind["unaligned_matmul"]
    assert "multiples of 8" in unaligned["title"] and "aten::mm on [[30, 60], [60, 30]]" in unaligned["fix"]
    # the CPU issues ops until 7.1 ms of a 10 ms step and the kernels take 5 ms: faster kernels
    # would only wait longer for the host
    assert unaligned["severity"] == "info" and unaligned["time_lost_s"] == 0
    assert "the host, not the GPU, sets the pace" in unaligned["title"]
    copy = by_kind["extra_copy"]
    assert "device='cuda'" in copy["fix"] and abs(copy["time_lost_s"] - 300e-6) < 1e-12


@fires("unaligned_matmul")
def test_unaligned_matmul_saves_its_kernels_excess_where_the_gpu_sets_the_pace(tmp_path):
    """30 ms in the unaligned product, the host done after 7.3 ms and then waiting for the device:
    padding saves the product's time beyond an aligned one's (2.8x faster: even dimensions)."""
    from torchneck.model.base import to_builtins
    from torchneck.pipeline import report_from_traces

    trace = _gpu_pattern_trace(tmp_path / "t.json", unaligned_us=30_000, sync_us=26_900)
    report = validate_report(to_builtins(report_from_traces([str(trace)])))
    unaligned = next(f for f in report["findings"] if f["kind"] == "unaligned_matmul")
    assert unaligned["time_lost_s"] == pytest.approx(30_000e-6 * (1 - 1 / UnalignedHalfMatmul.EVEN_SLOWDOWN))
    assert unaligned["severity"] == "high" and "sets the pace" not in unaligned["title"]


@silent("unaligned_matmul")
def test_unaligned_matmul_silent_without_hits_or_without_a_gpu():
    hits = HalfMatmulUnaligned(recorded=True, count=2, kernel_us=500.0,
                               shapes=[ShapeExample(op="aten::mm", shapes=[[30, 60], [60, 30]], count=2)])
    assert UnalignedHalfMatmul().check(facts(analysis=analysis(half_matmul_unaligned=hits))) == []  # no GPU
    none = HalfMatmulUnaligned(recorded=True)
    assert UnalignedHalfMatmul().check(facts(analysis=analysis(gpu=Gpu(present=True),
                                                               half_matmul_unaligned=none))) == []


@silent("extra_copy")
def test_extra_copy_silent_under_its_share():
    small = FilledThenCopied(count=3, copy_us=1_000.0)  # 1 % of a 100 ms window < 2 %
    assert ExtraCopy().check(facts(analysis=analysis(filled_then_copied=small))) == []


def _idle_gpu(short_share, kernels_per_launch=1.0, busy_pct=20.0):
    window = 100_000.0
    busy = window * busy_pct / 100
    idle = window - busy
    device = Device(device=0, busy_us=busy, busy_pct=busy_pct, idle_us=idle, temporal=Temporal(),
                    comm_overlap_pct=0.0,
                    idle_breakdown=IdleBreakdown(host_wait_us=0.7 * idle, kernel_wait_us=0.1 * idle,
                                                 other_us=0.2 * idle))
    launch = LaunchStats(kernels=1000, short_kernels=int(1000 * short_share), short_share=short_share,
                         kernels_per_launch=kernels_per_launch)
    return Gpu(present=True, window_us=window, devices=[device], launch=launch)


@fires("launch_bound")
def test_launch_bound_when_short_kernels_and_host_waits():
    [f] = LaunchBound().check(facts(analysis=analysis(gpu=_idle_gpu(short_share=0.8))))
    assert f.kind == "launch_bound" and f.severity == "high" and round(f.time_lost_s, 3) == 0.08
    assert "CUDA graphs" in f.fix and "reduce-overhead" in f.fix
    [g] = LaunchBound().check(facts(analysis=analysis(gpu=_idle_gpu(short_share=0.8, kernels_per_launch=40))))
    assert "already replays CUDA graphs (40 kernels a launch)" in g.fix
    assert GpuIdle().check(facts(analysis=analysis(gpu=_idle_gpu(short_share=0.8)))) == []  # one or the other


@silent("launch_bound")
def test_launch_bound_silent_on_long_kernels_or_a_busy_gpu():
    assert LaunchBound().check(facts(analysis=analysis(gpu=_idle_gpu(short_share=0.1)))) == []
    assert LaunchBound().check(facts(analysis=analysis(gpu=_idle_gpu(short_share=0.9, busy_pct=70.0)))) == []


@fires("gpu_idle")
def test_gpu_idle_when_kernels_are_long_and_the_gpu_still_waits():
    [f] = GpuIdle().check(facts(analysis=analysis(gpu=_idle_gpu(short_share=0.1))))
    assert f.kind == "gpu_idle" and "idle 80%" in f.title and f.evidence["idle_breakdown_us"]["other_us"] > 0


@silent("gpu_idle")
def test_gpu_idle_silent_when_busy():
    assert GpuIdle().check(facts(analysis=analysis(gpu=_idle_gpu(short_share=0.1, busy_pct=65.0)))) == []
    assert GpuIdle().check(facts(analysis=analysis())) == []  # no GPU at all


def _syncs(wait_us):
    return Syncs(sync_calls=50, sync_wait_us=wait_us, by_cause=[SyncCause(op="aten::item", count=50, wait_us=wait_us)])


@fires("host_sync")
def test_host_sync_names_the_ops_that_waited():
    a = analysis(gpu=Gpu(present=True))
    a.syncs = _syncs(20_000.0)
    [f] = HostSync().check(facts(analysis=a))
    assert f.ops == ["aten::item"] and f.time_lost_s == 0.02 and "50 host syncs" in f.title


def _element_reads(per_step: int, steps: int = 5):
    """Syncs from one line that reads elements: item() and the select before each read."""
    a = analysis(gpu=Gpu(present=True), steps=steps)
    n = per_step * steps
    a.syncs = Syncs(sync_calls=n, sync_wait_us=10_000.0, by_cause=[SyncCause(op="aten::item", count=n, wait_us=1e4)],
                    scalar_ops=[ScalarOp(op="aten::item", count=n, time_us=30_000.0)],
                    where=[CodeSite(file="m.py", line=38, function="update", time_us=1e4, count=n)])
    by_line = [{"op": "aten::item", "file": "m.py", "line": 38, "count": n, "self_us": 1.0},
               {"op": "aten::select", "file": "m.py", "line": 38, "count": n, "self_us": 1.0}]
    return facts(analysis=a, ops_by_line=by_line)


def test_host_sync_element_reads_cost_the_loop_and_fold_its_tiny_ops():
    """1024 reads per step at one line: the loop is the cause (its ops' wall time, not only the
    waits), and the dispatch finding of the same loop goes under it, adding what it sees beyond."""
    from torchneck.diagnose.causes import fold_symptoms
    from torchneck.model.findings import Finding

    f_ = _element_reads(1024)
    [f] = HostSync().check(f_)
    assert f.evidence["element_reads_per_step"] == 1024 and f.time_lost_s == pytest.approx(0.03)
    assert "one by one" in f.title and ".tolist()" in f.fix
    tiny = Finding(kind="dispatch_overhead", title="t", time_lost_s=0.09, time_lost_pct=90.0, fix="f", severity="high",
                   where=[Where(file="m.py", line=37, function="update"), Where(file="m.py", line=38,
                                                                           function="update")])
    tiny.saving_s, tiny.saving_pct = 0.09, 90.0
    f.saving_s, f.saving_pct = 0.03, 30.0
    assert fold_symptoms([f, tiny], f_) == [f] and f.symptoms == [tiny]
    assert f.saving_s == pytest.approx(0.09)  # the loop's whole time: 0.03 + the 0.06 beyond it
    # a finding of another loop is not this cause's
    other = Finding(kind="dispatch_overhead", title="t", time_lost_s=0.09, time_lost_pct=90.0, fix="f", severity="high",
                    where=[Where(file="m.py", line=90, function="step")])
    assert HostSync().explained(f, other, f_) is None


def test_host_sync_a_few_reads_per_step_are_syncs_not_a_loop():
    [f] = HostSync().check(_element_reads(HostSync.ELEMENT_READS_PER_STEP - 1))
    assert f.evidence["element_reads_per_step"] == 0 and "host syncs block" in f.title
    assert f.time_lost_s == pytest.approx(0.01)  # the waits alone


@silent("host_sync")
def test_host_sync_silent_on_cpu_runs_and_under_its_share():
    a = analysis()
    a.syncs = _syncs(20_000.0)
    assert HostSync().check(facts(analysis=a)) == []  # a scalar read on the CPU is no device sync
    a.gpu = Gpu(present=True)
    a.syncs = _syncs(4_000.0)  # 4 % < 5 %
    assert HostSync().check(facts(analysis=a)) == []
