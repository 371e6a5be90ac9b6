"""The user's own Python: lines that compute or wait outside torch ops."""

from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.rules.python import PythonHotspot


def _window(*lines, sampled_s=1.0):
    return {"window": {"sampled_s": sampled_s, "lines": list(lines)}, "loading": {"lines": []}}


def _line(line, total_s, self_s, waiting_s=0.0, library=""):
    return {"file": "/x/t.py", "line": line, "function": "step", "total_s": total_s, "self_s": self_s,
            "outside_ops_s": total_s, "waiting_s": waiting_s, "library": library}


@fires("python_hotspot")
def test_python_hotspot_computing_and_waiting_lines_get_different_fixes():
    python = _window(_line(12, 0.4, 0.4), _line(20, 0.3, 0.0, waiting_s=0.28, library="time.sleep (<built-in>)"))
    computes, waits = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=python))
    assert computes.where[0].line == 12 and "40% of each step in Python" in computes.title
    assert "vectorised" in computes.fix and abs(computes.time_lost_s - 0.4) < 1e-12
    assert waits.where[0].line == 20 and "waits in time.sleep 30%" in waits.title and "Overlap" in waits.fix
    assert waits.evidence["waits"] is True and waits.docs.endswith("#multi-process-data-loading")


@silent("python_hotspot")
def test_python_hotspot_silent_for_small_lines_and_the_loader_s_own():
    small = _window(_line(12, 0.05, 0.05))  # 5 % < 10 %
    assert PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=small)) == []
    loading = _window(_line(12, 0.4, 0.4))
    loading["loading"] = {"lines": [{"file": "/x/t.py", "line": 12, "total_s": 0.4}]}  # input_pipeline's
    assert PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=loading)) == []


@fires("python_hotspot")
def test_python_hotspot_counts_torch_python_the_line_asked_for_and_says_what_to_do():
    """Formatting a tensor calls torch's Python (Tensor.__repr__): that is the line's work, not the
    model's machinery; a module call's Python is per-op overhead the op rules measure."""
    fmt = _line(40, 0.5, 0.1, library="Tensor.__repr__ (_tensor.py)")
    fmt["library_is_torch"] = True
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(fmt)))
    assert f.where[0].line == 40 and "format tensors" in f.fix.lower().replace("formatting", "format")
    save = dict(fmt, library="save (serialization.py)")
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(save)))
    assert "every N steps" in f.fix


@silent("python_hotspot")
def test_python_hotspot_silent_for_torch_s_own_machinery():
    call = _line(17, 0.5, 0.1, library="Module._wrapped_call_impl (module.py)")
    call["library_is_torch"] = True
    back = dict(call, line=18, library="Tensor.backward (_tensor.py)")
    assert PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(call, back))) == []



LOOP_SCRIPT = """\
import numpy as np
def confusion(pred, target):
    conf = np.zeros((10, 10), dtype=np.int64)
    for p, t in zip(pred, target):
        conf[t.item(), p.item()] += 1
    total = conf.sum()
    return conf / total
"""


@fires("python_hotspot")
def test_python_hotspot_a_hot_loop_and_its_body_are_one_finding(tmp_path):
    """Iterating a tensor element by element (the `for` line: a 0-d tensor per element) and the
    per-element work in its body are one problem, replaced together: one finding at the loop,
    naming the body's line, costing both. A hot line after the loop stays a finding of its own."""
    script = tmp_path / "metrics.py"
    script.write_text(LOOP_SCRIPT)

    def line(n, total_s):
        return dict(_line(n, total_s, 0.0, library="Tensor.__iter__ (_tensor.py)"), file=str(script))

    python = _window(line(4, 0.5), line(5, 0.15), line(6, 0.2))
    loop, after = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=python))
    assert [w.line for w in loop.where] == [4, 5] and "the loop at line 4" in loop.title
    assert abs(loop.time_lost_s - 0.65) < 1e-12 and [w.line for w in after.where] == [6]
    cold_header = _window(line(4, 0.05), line(5, 0.3))  # the body's own work, the loop line not hot
    [body] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=cold_header))
    assert [w.line for w in body.where] == [5]
