"""The user's record_function labels: a label whose time is mostly outside torch ops, and every
finding inside a label naming it."""

from __future__ import annotations

from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.engine import diagnose
from torchneck.diagnose.rules.labels import LabelOutsideOps
from torchneck.model.analysis import CodeSite, Label, LabelCall, LabelOp, OpRow, RankAnalysis

WINDOW_US = 100_000.0


def _analysis(labels: list[Label], **ops) -> RankAnalysis:
    a = analysis(window_us=WINDOW_US, **ops)
    a.labels = labels
    return a


def _label(name: str, total_us: float, outside_us: float, **fields) -> Label:
    return Label(name=name, count=1, total_us=total_us, pct=100 * total_us / WINDOW_US, self_us=outside_us,
                 ops_us=total_us - outside_us, outside_ops_us=outside_us,
                 outside_ops_pct=100 * outside_us / total_us, ops=3, **fields)


MASK = dict(
    top_ops=[LabelOp(name="aten::mean", self_us=20, count=1), LabelOp(name="aten::item", self_us=3, count=1),
             LabelOp(name="aten::to", self_us=1, count=2)],
    calls=[LabelCall(name="argwhere", file="numpy/_core/numeric.py", line=624, outside_ops_us=70_000, count=1,
                     share=87.5)],
    where=[CodeSite(file="/x/model.py", line=42, function="forward", time_us=24, count=4, source="trace")],
    opened_at=CodeSite(file="/x/model.py", line=40, function="forward", source="trace"))


@fires("label_outside_ops")
def test_label_mostly_outside_ops_names_label_calls_host_reads_and_line():
    labels = [_label("MASK INDICES", 90_000, 80_000, **MASK), _label("LINEAR PASS", 5_000, 1_000)]
    (f,) = LabelOutsideOps().check(facts(analysis=_analysis(labels)))
    assert f.kind == "label_outside_ops" and f.label == "MASK INDICES" and f.severity == "high"
    assert f.title.startswith("MASK INDICES: 90 % of the time, 88 % of it outside torch ops in numpy argwhere (87 %)")
    assert "after `.item()` and `.to()/.cpu()` brought data to the host (forward() at model.py:40)" in f.title
    assert [(w.line, w.function) for w in f.where] == [(40, "forward"), (42, "forward")]
    assert f.ops == ["aten::item", "aten::to"] and f.confidence == "upper_bound"
    assert abs(f.time_lost_s - 0.08) < 1e-12 and abs(f.time_lost_pct - 80) < 1e-9
    assert f.evidence["numpy"] is True and f.evidence["calls"] == ["argwhere (numpy) 88 %"]
    assert "nonzero()" in f.fix and ".item()" in f.fix and f.fix.startswith('Under "MASK INDICES": do')


@fires("label_outside_ops")
def test_nested_labels_name_the_inner_one_and_other_threads_work_is_not_host_work():
    inner = _label("DECODE", 40_000, 38_000, inside="STEP")
    outer = _label("STEP", 60_000, 50_000)
    (f,) = LabelOutsideOps().check(facts(analysis=_analysis([outer, inner])))
    assert f.label == "DECODE"  # STEP's own 12 ms outside ops (its 50 less DECODE's 38) is under the 10 %
    waiting = _label("EVAL", 40_000, 38_000, other_threads_us=10_000)  # 28 ms left: still host work
    (g,) = LabelOutsideOps().check(facts(analysis=_analysis([waiting])))
    assert abs(g.time_lost_s - 0.028) < 1e-12 and g.title.startswith("EVAL: 40 % of the time, 70 % of it outside")


@silent("label_outside_ops")
def test_label_rule_silent_on_torch_work_backward_waits_small_labels_and_sampled_runs():
    def check(*labels, **more):
        return LabelOutsideOps().check(facts(analysis=_analysis(list(labels)), **more))

    assert check(_label("FORWARD", 90_000, 30_000)) == []  # mostly torch's ops
    assert check(_label("## backward ##", 45_000, 44_800, runs_backward=True)) == []  # waits on autograd's threads
    assert check(_label("BWD", 45_000, 44_800, other_threads_us=40_000)) == []  # other threads' ops meanwhile
    assert check(_label("SMALL", 9_000, 9_000)) == []  # 9 % of the window
    sampled = {"window": {"sampled_s": 1.0, "lines": []}, "loading": {"lines": []}}
    assert check(_label("MASK INDICES", 90_000, 80_000, **MASK), python=sampled) == []  # python_hotspot's


def test_findings_inside_a_label_name_it():
    """The engine's last step: an op_hotspot on ops that ran under a label names it; one on ops
    run mostly outside any label does not."""
    a = _analysis([_label("AUGMENT", 60_000, 10_000, top_ops=[LabelOp(name="aten::copy_", self_us=45_000, count=100)])],
                  by_name=[OpRow(name="aten::copy_", count=100, self_us=45_000, total_us=45_000, mean_us=450)])
    (hot,) = [f for f in diagnose(facts(analysis=a)) if f.kind == "op_hotspot"]
    assert hot.label == "AUGMENT" and hot.title.endswith('(in record_function "AUGMENT")')
    a.ops.by_name[0].self_us = 100_000  # most of aten::copy_ ran outside the label
    (hot,) = [f for f in diagnose(facts(analysis=a)) if f.kind == "op_hotspot"]
    assert hot.label is None and "record_function" not in hot.title
