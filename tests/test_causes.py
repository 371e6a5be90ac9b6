"""Causes over symptoms: savings on the run's horizon, symptoms folded under their causes, and a
ranking that is stable under small changes of the figures."""

import pytest
from rule_cases import analysis, facts

from torchneck.diagnose.causes import estimate_savings, fold_symptoms, rank_findings
from torchneck.diagnose.engine import diagnose
from torchneck.model.analysis import Annotation, Device, Dispatch, Gpu, IdleBreakdown, LaunchStats, OpRow, Temporal
from torchneck.model.findings import Finding, Where


def _finding(kind, lost_s, pct, confidence="measured", where=(), **evidence):
    return Finding(kind=kind, title=kind, time_lost_s=lost_s, time_lost_pct=pct, fix="f", confidence=confidence,
                   where=list(where), evidence=evidence)


def _resnet_like(dataloader_share=0.34, busy_pct=57.0):
    """A ResNet-style step on a GPU with num_workers=0: the loader takes a third of each step and
    the GPU is idle 43 % of the time, mostly waiting for the host."""
    window = 1_000_000.0
    idle = window * (1 - busy_pct / 100)
    device = Device(device=0, busy_us=window - idle, busy_pct=busy_pct, idle_us=idle, temporal=Temporal(),
                    comm_overlap_pct=0.0,
                    idle_breakdown=IdleBreakdown(host_wait_us=0.9 * idle, kernel_wait_us=0.05 * idle,
                                                 other_us=0.05 * idle))
    gpu = Gpu(present=True, window_us=window, devices=[device],
              launch=LaunchStats(kernels=10_000, short_kernels=2000, short_share=0.2))
    a = analysis(window_us=window, steps=10, gpu=gpu,
                 annotations=[Annotation(name="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                                         count=10, total_us=dataloader_share * window)])
    a.steps.breakdown_total_us = {"dataloader": dataloader_share * window, "kernel": (1 - dataloader_share) * window}
    return a


def test_gpu_idle_is_folded_under_the_data_loading_that_explains_it():
    found = diagnose(facts(analysis=_resnet_like()))
    top = found[0]
    assert top.kind == "input_pipeline" and top.severity == "high"
    [idle] = top.symptoms
    assert idle.kind == "gpu_idle" and abs(idle.explained_s - 0.34) < 1e-9  # 34 of its 43 points
    assert [f.kind for f in found] == ["input_pipeline"]  # the symptom is not listed again beside it


def test_a_symptom_mostly_unexplained_keeps_its_place_with_what_is_left():
    found = diagnose(facts(analysis=_resnet_like(dataloader_share=0.12, busy_pct=40.0)))
    kinds = [f.kind for f in found]
    assert kinds[0] == "gpu_idle" and "input_pipeline" in kinds  # 12 of 60 points: a fifth explained
    idle = found[0]
    assert idle.evidence["partly_explained_by"][0]["kind"] == "input_pipeline"
    assert abs(idle.saving_s - 0.48) < 1e-9 and idle.severity == "high"  # the unexplained 48 points rank it


def test_savings_are_on_the_run_horizon():
    """A window share applies to the run's steady state (after start-up); one-time costs count
    as they are; without a run, the window is the horizon."""
    window_based = _finding("python_hotspot", 0.3, 30.0)
    one_time = _finding("compile_time", 4.0, 40.0, share_of="run_wall")
    run = facts(analysis=analysis(window_us=1_000_000.0), run_wall_s=10.0, phases={"phases": {"startup_s": 2.0}})
    estimate_savings([window_based, one_time], run)
    assert abs(window_based.saving_s - 2.4) < 1e-9 and abs(window_based.saving_pct - 24.0) < 1e-9  # 30 % of 8 s
    assert one_time.saving_s == 4.0 and one_time.saving_pct == 40.0
    trace_only = _finding("python_hotspot", 0.3, 30.0)
    estimate_savings([trace_only], facts(analysis=analysis(window_us=1_000_000.0)))
    assert trace_only.saving_s == 0.3 and trace_only.saving_of == "window"


def test_the_first_optimizer_step_s_work_before_its_tick_is_on_the_horizon():
    """Optimizer steps tick at their end: the first step's forward and backward ran inside
    start-up. Where the steady state was not seen to begin before that tick (steps too long to
    repeat early), a steady step of start-up joins the horizon; where it began a step earlier,
    start-up left it out already."""
    def horizon(steady_from_s):
        f = _finding("op_hotspot", 0.3, 30.0)
        phases = {"phases": {"startup_s": steady_from_s}, "clock": "optimizer", "steady_step_s": 0.9,
                  "first_tick_offset_s": 3.0, "steady_from_offset_s": steady_from_s}
        estimate_savings([f], facts(analysis=analysis(window_us=1_000_000.0), run_wall_s=12.0, phases=phases))
        return f.saving_s

    assert horizon(3.0) == pytest.approx(0.3 * (9.0 + 0.9))  # the first sweep's 0.9 s counted too
    assert horizon(2.0) == pytest.approx(0.3 * 10.0)  # steady from a step (and more) before the tick


def test_a_graph_break_carries_the_compile_time_and_recompiles_it_causes():
    brk = _finding("graph_break", 0.05, 5.0, where=[Where(file="/m.py", line=17)], compile_s_caused=6.0)
    recompile = _finding("recompile", 2.0, 20.0, where=[Where(file="/m.py", line=12)], share_of="run_wall",
                         caused_by_break_at_line=17)
    compile_time = _finding("compile_time", 8.0, 80.0, share_of="run_wall")
    hot = _finding("python_hotspot", 0.3, 30.0)
    run = facts(analysis=analysis(window_us=1_000_000.0), run_wall_s=10.0, phases={"phases": {"startup_s": 1.0}})
    findings = [brk, recompile, compile_time, hot]
    estimate_savings(findings, run)
    top = rank_findings(fold_symptoms(findings, run))
    assert [f.kind for f in top] == ["graph_break", "python_hotspot"]
    assert {s.kind for s in top[0].symptoms} == {"recompile", "compile_time"}
    assert abs(top[0].saving_s - (0.05 * 9 + 6.0)) < 1e-9  # its eager share of the steps + the compile it causes


def test_tiny_ops_inside_a_compile_stage_are_the_recompiles_not_a_problem_of_their_own():
    """A window holding a recompilation: AOT traces the joint graph by running ops one by one;
    those ops (labelled with the stage's `dynamo_timed` span) are the recompile's time. Tiny ops
    outside any compile stage stay a finding of their own."""
    recompile = _finding("recompile", 10.0, 70.0, where=[Where(file="/m.py", line=13)], share_of="run_wall")
    compiling = _finding("dispatch_overhead", 0.5, 56.0, confidence="estimated")
    compiling.label = "aot_trace_joint_graph (dynamo_timed)"
    eager = _finding("dispatch_overhead", 0.4, 40.0, confidence="estimated")
    run = facts(analysis=analysis(window_us=1_000_000.0), run_wall_s=14.0, phases={"phases": {"startup_s": 1.0}})
    findings = [recompile, compiling, eager]
    estimate_savings(findings, run)
    top = rank_findings(fold_symptoms(findings, run))
    assert top == [recompile, eager] and recompile.symptoms == [compiling]


def test_the_python_of_a_rebuilding_line_is_part_of_its_cost():
    """`all_emb = torch.cat([all_emb, emb])` in a loop: the line's own Python (a python_hotspot on
    it) is folded under rebuilt_tensor, which counts the whole line; another line's stays."""
    at = Where(file="/m.py", line=43)
    rebuilt = _finding("rebuilt_tensor", 0.75, 75.0, confidence="upper_bound", where=[at])
    same = _finding("python_hotspot", 0.26, 26.0, where=[at])
    other = _finding("python_hotspot", 0.12, 12.0, where=[Where(file="/m.py", line=49)])
    run = facts(analysis=analysis(window_us=1_000_000.0), run_wall_s=10.0, phases={"phases": {"startup_s": 1.0}})
    findings = [rebuilt, same, other]
    estimate_savings(findings, run)
    assert rank_findings(fold_symptoms(findings, run)) == [rebuilt, other] and rebuilt.symptoms == [same]


def test_near_ties_go_to_the_better_known_saving_whatever_the_jitter():
    """The same two problems measured twice, a few percent apart each time: the same order."""
    for jitter in (0.85, 1.0, 1.15):
        upper = _finding("op_hotspot", 0.3 * jitter, 30.0 * jitter, confidence="upper_bound")
        measured = _finding("python_hotspot", 0.28, 28.0)
        for f in (upper, measured):
            f.saving_s, f.severity = f.time_lost_s, "high"
        assert [f.kind for f in rank_findings([upper, measured])] == ["python_hotspot", "op_hotspot"]
    far = _finding("op_hotspot", 0.5, 50.0, confidence="upper_bound")
    measured = _finding("python_hotspot", 0.28, 28.0)
    for f in (far, measured):
        f.saving_s, f.severity = f.time_lost_s, "high"
    assert [f.kind for f in rank_findings([far, measured])] == ["op_hotspot", "python_hotspot"]  # no tie: 0.5 vs 0.28


def test_the_python_of_a_tiny_op_loop_is_the_per_op_overhead_not_a_second_problem():
    line = [Where(file="/x/t.py", line=12, function="step")]
    d = Dispatch(top_level_ops=8000, ops_per_step=1600.0, tiny_ops=7500, tiny_us=300_000.0, tiny_share=0.3,
                 tiny_run_us=600_000.0, tiny_run_ops=7500, tiny_run_share=0.6)
    a = analysis(window_us=1_000_000.0, dispatch=d, by_name=[OpRow(name="aten::add", count=40_000, self_us=300_000.0,
                                                                   total_us=300_000.0, mean_us=7.5)])
    python = {"window": {"sampled_s": 1.0, "lines": [{"file": "/x/t.py", "line": 13, "function": "step",
                                                      "total_s": 0.45, "self_s": 0.45, "outside_ops_s": 0.45,
                                                      "waiting_s": 0.0, "library": ""}]},
              "loading": {"lines": []}}
    by_line = [{"op": "aten::add", "file": "/x/t.py", "line": 12, "function": "step", "self_us": 300_000.0}]
    found = diagnose(facts(analysis=a, python=python, ops_by_line=by_line))
    assert [f.kind for f in found] == ["dispatch_overhead"] and found[0].where == line
    assert {s.kind for s in found[0].symptoms} == {"python_hotspot", "op_hotspot"}  # the add's 40000 calls too


BOX_EVAL = """\
import torch


def single_box_iou(box, gts):
    x1 = torch.maximum(box[0], gts[:, 0])
    return x1 - gts[:, 2]


def average_precision(images):
    for boxes, gts in images:
        ious = torch.stack([single_box_iou(b, gts) for b in boxes])
"""


def test_the_line_driving_a_tiny_op_helper_is_named_and_its_python_folded(tmp_path):
    """The samples charged the listcomp calling the helper (line 11), not the helper's lines:
    the line, read from the source as calling `single_box_iou`, is the loop to vectorise, named
    first by dispatch_overhead (then the helper's line issuing the ops) and its Python folded
    under it."""
    src = tmp_path / "box_eval.py"
    src.write_text(BOX_EVAL)
    f = str(src)
    python_lines = [{"file": f, "line": 11, "function": "average_precision.<locals>.<listcomp>", "total_s": 0.45,
                     "self_s": 0.45, "outside_ops_s": 0.45, "waiting_s": 0.0, "library": ""}]
    by_line = [{"op": "aten::select", "file": f, "line": 5, "function": "single_box_iou", "self_us": 100_000.0}]
    found = _tiny_op_run(python_lines, by_line)
    assert [x.kind for x in found] == ["dispatch_overhead"], found
    assert [(w.line, w.function) for w in found[0].where] == [(11, "average_precision.<locals>.<listcomp>"),
                                                               (5, "single_box_iou")]
    assert [x.kind for x in found[0].symptoms] == ["python_hotspot"]


def _tiny_op_run(python_lines, by_line):
    d = Dispatch(top_level_ops=8000, ops_per_step=1600.0, tiny_ops=7500, tiny_us=300_000.0, tiny_share=0.3,
                 tiny_run_us=600_000.0, tiny_run_ops=7500, tiny_run_share=0.6)
    a = analysis(window_us=1_000_000.0, dispatch=d, by_name=[OpRow(name="aten::select", count=40_000,
                                                                   self_us=100_000.0, total_us=100_000.0, mean_us=2.5)])
    python = {"window": {"sampled_s": 1.0, "lines": python_lines}, "loading": {"lines": []}}
    return diagnose(facts(analysis=a, python=python, ops_by_line=by_line))


def test_tiny_ops_of_work_a_line_asks_for_every_step_are_that_line_s_problem():
    """A tensor formatted every step (an f-string in a log call) runs thousands of tiny ops inside
    Tensor.__repr__: the fix is to stop formatting, not to vectorise; the tiny ops go under the
    line. Python that calls into NumPy below a line that issues tiny ops (a per-image NumPy
    augmentation called from a list comprehension) is not their per-op overhead either."""
    fmt = {"file": "/x/t.py", "line": 40, "function": "main", "total_s": 0.8, "self_s": 0.01, "outside_ops_s": 0.45,
           "waiting_s": 0.0, "library": "Tensor.__repr__ (_tensor.py)", "library_is_torch": True}
    by_line = [{"op": "aten::select", "file": "/x/t.py", "line": 40, "function": "main", "self_us": 100_000.0}]
    found = _tiny_op_run([fmt], by_line)
    assert [f.kind for f in found] == ["python_hotspot"] and found[0].where[0].line == 40
    assert [s.kind for s in found[0].symptoms] == ["dispatch_overhead"] and "format" in found[0].fix
    numpy = {"file": "/x/t.py", "line": 24, "function": "augment_one", "total_s": 0.45, "self_s": 0.01,
             "outside_ops_s": 0.45, "waiting_s": 0.0, "library": "pad (_arraypad_impl.py)",
             "callers": [{"file": "/x/t.py", "line": 79, "function": "<listcomp>", "share": 1.0}]}
    by_line = [{"op": "aten::select", "file": "/x/t.py", "line": 79, "function": "<listcomp>", "self_us": 100_000.0}]
    found = _tiny_op_run([numpy], by_line)
    assert {f.kind for f in found} == {"python_hotspot", "dispatch_overhead"}
    assert all(not f.symptoms for f in found)  # neither explains the other


def test_a_loop_reading_elements_one_by_one_is_the_line_s_problem_not_per_op_overhead():
    """`[t[i].item() for i in range(n)]`: the tiny ops are each element's select and read into
    Python; the fix is one read of all the values (t.tolist()), so the line's python_hotspot is the
    cause, with the per-op overhead under it. The same line issuing other tiny ops (an add per
    element) stays a tiny-op loop: vectorise it."""
    line = {"file": "/x/t.py", "line": 16, "function": "<listcomp>", "total_s": 0.6, "self_s": 0.5,
            "outside_ops_s": 0.5, "waiting_s": 0.0, "library": ""}
    def ops(*counts):
        return [{"op": op, "file": "/x/t.py", "line": 16, "function": "<listcomp>", "count": n,
                 "self_us": 50_000.0} for op, n in counts]

    found = _tiny_op_run([line], ops(("aten::select", 40_000), ("aten::item", 40_000),
                                     ("aten::_local_scalar_dense", 40_000)))
    assert [f.kind for f in found] == ["python_hotspot"] and found[0].where[0].line == 16
    assert [s.kind for s in found[0].symptoms] == ["dispatch_overhead"] and "tolist()" in found[0].fix
    for other in (ops(("aten::select", 40_000), ("aten::add", 40_000)),  # an add per element
                  ops(("aten::select", 40_000), ("aten::add", 40_000), ("aten::item", 80))):  # a loss.item() a step
        found = _tiny_op_run([line], other)
        assert found[0].kind == "dispatch_overhead" and [s.kind for s in found[0].symptoms] == ["python_hotspot"]


def test_autograd_in_inference_outranks_the_model_s_own_matmul():
    clock = {"kind": "module", "top_module_calls": 100, "top_module_outputs_with_grad": 100}
    a = analysis(window_us=100_000.0, by_name=[OpRow(name="aten::addmm", count=300, self_us=60_000.0,
                                                     total_us=60_000.0, mean_us=200.0)])
    found = diagnose(facts(analysis=a, clock=clock))
    assert [f.kind for f in found] == ["autograd_in_inference", "op_hotspot"]
    assert found[1].severity == "info"


def test_an_unmeasured_problem_ranks_by_what_its_severity_stands_for():
    """Anomaly detection cannot be timed from a trace; judged high, it ranks as a quarter of the
    horizon: above a 10 % problem, below a 40 % one."""
    anomaly = Finding(kind="anomaly_detection", title="a", time_lost_s=0.0, time_lost_pct=0.0, fix="f",
                      severity="high", confidence="unmeasured")
    small, big = _finding("python_hotspot", 0.1, 10.0), _finding("input_pipeline", 0.4, 40.0)
    for f in (small, big):
        f.saving_s, f.saving_pct = f.time_lost_s, f.time_lost_pct
    assert [f.kind for f in rank_findings([small, anomaly, big])] == ["input_pipeline", "anomaly_detection",
                                                                      "python_hotspot"]


def test_no_saving_exceeds_the_run():
    """A finding measured over spans that outlast the window (two steps profiled) says more than
    the whole run: its saving stops at the run's time, 100 %."""
    f = Finding(kind="optimizer", title="", time_lost_s=1.2, time_lost_pct=124.0, fix="")
    estimate_savings([f], facts(analysis=analysis(window_us=1_000_000.0), run_wall_s=10.0,
                                phases={"phases": {"startup_s": 1.0}}))
    assert f.saving_pct == 100.0 and f.saving_s == 10.0
