"""periodic_work: steps made slow by work done on some of them only (round 23's sequence trainer
validated the whole validation set every few steps from a logging callback)."""

import numpy as np
from conftest import SCRIPTS, planted_line, read_report, torchneck
from rule_cases import fires, silent

from torchneck.analysis.periodic import periodic_steps
from torchneck.analysis.python_stacks import Samples


def _samples_of(step_s: list[float], slow_stack: list[int], normal_stack: list[int], frames: list[list]) -> Samples:
    """One sample a millisecond over steps of `step_s` (from t = 0), the slow steps' samples
    (those of steps over 50 ms) at `slow_stack`, the others at `normal_stack`."""
    ends, stacks = [], []
    t = 0.0
    for d in step_s:
        n = int(round(d / 0.001))
        for k in range(n):
            ends.append(t + (k + 1) * 0.001)
            stacks.append(slow_stack if d > 0.05 and k < n - 5 else normal_stack)
        t += d
    n = len(ends)
    flags = np.zeros(n, bool)
    return Samples(frames=frames, end_s=np.array(ends), dur_s=np.full(n, 0.001), user_frame=np.zeros(n, np.int64),
                   leaf_is_user=flags, leaf_frame=np.zeros(n, np.int64), tool=flags, importing=flags,
                   compiling=flags, loading=flags, start_monotonic_ns=0, stacks=stacks)


@fires("periodic_work")
def test_the_slow_steps_and_the_line_only_they_run_are_found():
    """40 steps of 10 ms, every 5th 110 ms: the line sampled only in the slow ones, outermost of
    those holding their time, comes first (the loop's callback line, run every step, is sampled in
    the normal steps too); the steps of the profiled window are left out."""
    frames = [["main", "/w/train.py", 40], ["Logger.on_step_end", "/w/train.py", 26],
              ["evaluate", "/w/train.py", 17], ["step", "/w/train.py", 35]]
    step_s = [0.11 if i % 5 == 4 else 0.01 for i in range(40)]
    s = _samples_of(step_s, [0, 1, 2], [0, 3], frames)
    phases = {"step_s": step_s, "clock": "optimizer", "first_tick_offset_s": 0.0, "window_offsets_s": (0.0, 0.05),
              "steady_from_offset_s": 0.0, "started_monotonic_ns": 0}
    p = periodic_steps(s, phases)
    assert p is not None and p["slow_steps"] == 7 and p["every"] == 5, p  # the window held one
    assert [ln["line"] for ln in p["lines"]][:2] == [26, 17]
    assert abs(p["excess_s"] - 7 * 0.1) < 1e-6 and abs(p["median_step_s"] - 0.01) < 1e-9


@silent("periodic_work")
def test_even_steps_or_mostly_slow_steps_are_no_periodic_work():
    frames = [["main", "/w/train.py", 40], ["step", "/w/train.py", 35], ["evaluate", "/w/train.py", 17]]
    phases = {"clock": "optimizer", "first_tick_offset_s": 0.0, "window_offsets_s": (0.0, 0.0),
              "steady_from_offset_s": 0.0, "started_monotonic_ns": 0}
    even = [0.01] * 40
    assert periodic_steps(_samples_of(even, [0, 2], [0, 1], frames), {**phases, "step_s": even}) is None
    mostly = [0.01 if i % 5 == 4 else 0.11 for i in range(40)]  # the fast steps are the exception
    assert periodic_steps(_samples_of(mostly, [0, 2], [0, 1], frames), {**phases, "step_s": mostly}) is None
    calls = [0.11 if i % 5 == 4 else 0.01 for i in range(40)]  # a server's model calls: a prompt's first is long
    assert periodic_steps(_samples_of(calls, [0, 2], [0, 1], frames),
                          {**phases, "step_s": calls, "clock": "module"}) is None


def test_a_run_evaluating_every_few_steps_gets_the_evaluation_s_call_on_top(run_dir):
    """A real run: the callback's `evaluate()` call every 5 steps is the top finding, with its
    `if` and the line setting how often; evaluated once at the end, nothing of the kind."""
    script = SCRIPTS / "validate_every_steps.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "periodic_work" and top["where"][0]["line"] == planted_line(script), top
    lines = [w["line"] for w in top["where"]]
    assert lines[1] == planted_line(script) - 1 and 12 in lines  # the `if`, and EVAL_EVERY = 5
    assert top["evidence"]["share"] > 0.3 and top["evidence"]["slow_step_s"] > 3 * top["evidence"]["median_step_s"]
    fixed = run_dir.parent / "fixed"
    r = torchneck("run", "--quiet", "--out", str(fixed), str(script), "--fixed")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "periodic_work" not in [f["kind"] for f in read_report(fixed)["findings"]]
