"""step_time_growth: steps that get slower over the run, the user function whose sampled time a
step grew named (analysis/run.py `step_growth` measures; diagnose/rules/growth.py reads it)."""

from __future__ import annotations

import pytest
from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.rules.growth import StepTimeGrowth
from torchneck.model.analysis import Gpu


def _growth(tmp_path, early_ms=2.0, late_ms=6.0, line_early_ms=1.0, line_late_ms=4.6, other_late_ms=0.3):
    src = tmp_path / "train.py"
    src.write_text("import torch\n\ndef main(history):\n    for step in range(9):\n"
                   "        history.append(torch.ones(3))\n        running = torch.cat(history).median()\n")
    line = {"file": str(src), "function": "main", "callers": [{"file": str(src), "line": 9, "function": "<module>"}]}
    return {"steps": 300, "third": 100, "early_step_s": early_ms / 1e3, "late_step_s": late_ms / 1e3,
            "mean_step_s": (early_ms + late_ms) / 2e3,
            "early_lines": [{**line, "line": 6, "step_s": line_early_ms / 1e3},
                            {**line, "line": 5, "step_s": 0.2e-3}],
            "late_lines": [{**line, "line": 6, "step_s": line_late_ms / 1e3},
                           {**line, "line": 5, "step_s": 0.2e-3 + other_late_ms / 1e3}]}


@fires("step_time_growth")
def test_steps_growing_on_one_line_name_it_and_cost_its_linear_growth(tmp_path):
    g = _growth(tmp_path, other_late_ms=1.0)
    [f] = StepTimeGrowth().check(facts(analysis=analysis(window_us=1_000_000), python={"growth": g}))
    assert f.kind == "step_time_growth" and [w.line for w in f.where] == [6, 5, 9]
    # 3/4 of the function's growth between the thirds (3.6 ms on line 6, 1 ms on line 5) over the 4 ms mean step
    assert f.time_lost_s == pytest.approx(0.75 * 4.6 / 4.0)
    # a line growing under a fifth of the most grown one's is not named (drift)
    [f] = StepTimeGrowth().check(facts(analysis=analysis(window_us=1_000_000), python={"growth": _growth(tmp_path)}))
    assert [w.line for w in f.where] == [6, 9] and f.time_lost_s == pytest.approx(0.75 * 3.6 / 4.0)
    assert f.evidence["hint"] == "cat" and "bounded window" in f.fix and "line 6" not in f.fix


@silent("step_time_growth")
def test_steps_growing_silent_for_a_drift_for_load_no_line_explains_or_a_device_run(tmp_path):
    rule = StepTimeGrowth()
    drift = _growth(tmp_path, late_ms=2.8)  # 1.4x: a drift, not a trend
    assert rule.check(facts(analysis=analysis(), python={"growth": drift})) == []
    load = _growth(tmp_path, line_late_ms=1.5, other_late_ms=0.0)  # the clock grew, the samples did not
    assert rule.check(facts(analysis=analysis(), python={"growth": load})) == []
    device = analysis(gpu=Gpu(present=True))  # a device's queue filling makes the host's steps grow
    assert rule.check(facts(analysis=device, python={"growth": _growth(tmp_path)})) == []
