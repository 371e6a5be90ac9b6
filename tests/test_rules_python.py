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
