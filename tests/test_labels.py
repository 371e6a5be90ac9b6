"""record_function labels: the tutorial's trace, a `torchneck run` of a labelled loop, and exact
figures on a hand-built trace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, SCRIPTS, planted_line, read_report, torchneck, validate_report

from torchneck.analysis.labels import innermost_labels, label_for_ops, label_phrase, label_table
from torchneck.analysis.nesting import host_nesting
from torchneck.analysis.ops import rows_starting_in
from torchneck.model.base import to_builtins
from torchneck.pipeline import report_from_traces
from torchneck.trace.loader import load_trace
from torchneck.trace.table import Cat

MASK_SHARE_PCT = 90
"""The tutorial's MASK INDICES covers ~99 % of the profiled time (its own table: 98.95 %); the
check leaves room for a slow start of the profiler on a loaded machine."""


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory) -> tuple[Path, str]:
    """The profiler tutorial's code run as written (a 160³ float64 mask on the CPU): its trace,
    and the key_averages table torch printed for it."""
    out = tmp_path_factory.mktemp("tutorial") / "trace.json"
    p = subprocess.run([sys.executable, str(SCRIPTS / "tutorial_profiler.py"), str(out), "--side", "160"],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr
    return out, p.stdout


def test_tutorial_trace_mask_indices(tutorial):
    """The tutorial's story from the trace alone: MASK INDICES takes nearly all the time, and
    nearly all of that outside torch ops (NumPy's argwhere on the float64 mask)."""
    path, _ = tutorial
    p = torchneck("analyze", str(path), "--json", "-")
    assert p.returncode == 0, p.stderr
    labels = validate_report(json.loads(p.stdout))["ranks"][0]["labels"]
    assert [lab["name"] for lab in labels] == ["MASK INDICES", "LINEAR PASS"]
    mask, linear = labels
    assert mask["pct"] >= MASK_SHARE_PCT
    assert mask["outside_ops_pct"] >= 90 and mask["outside_ops_us"] > 50 * mask["ops_us"]
    assert {"aten::item", "aten::mean"} <= {o["name"] for o in mask["top_ops"]}
    assert linear["top_ops"][0]["name"] == "aten::addmm" and linear["count"] == 1
    assert mask["opened_at"]["file"].endswith("tutorial_profiler.py")  # from the with_stack frames
    shown = torchneck("analyze", str(path))
    assert re.search(r"MASK INDICES\s+1\s+[\d.]+\s+(9\d|100)\s", shown.stdout), shown.stdout


def test_tutorial_mask_indices_finding_on_top(tutorial, tmp_path):
    """issue 24: the tutorial's trace alone gets the MASK INDICES finding first, naming the label,
    its share, NumPy's argwhere, the host reads before it and the function that opened it (a
    `with_stack` frame gives the `def` line of `forward`, no finer)."""
    path, _ = tutorial
    p = torchneck("analyze", str(path), "--json", "-", "--html", str(tmp_path / "r.html"))
    assert p.returncode == 0, p.stderr
    report = validate_report(json.loads(p.stdout))
    mask = report["ranks"][0]["labels"][0]
    assert mask["calls"][0]["name"] == "argwhere" and mask["calls"][0]["file"].startswith("numpy/")
    assert mask["calls"][0]["share"] > 50 and mask["other_threads_us"] == 0 and not mask["runs_backward"]
    top = report["findings"][0]
    assert top["kind"] == "label_outside_ops" and top["label"] == "MASK INDICES" and top["severity"] == "high"
    assert re.match(r"MASK INDICES: (9\d|100) % of the time, (9\d|100) % of it outside torch ops in numpy argwhere",
                    top["title"]), top["title"]
    assert "`.item()`" in top["title"] and "aten::item" in top["ops"]
    forward = planted_line(SCRIPTS / "tutorial_profiler.py", "def forward(self, input, mask):")
    assert (top["where"][0]["file"], top["where"][0]["line"]) == ("tutorial_profiler.py", forward)
    assert top["saving_pct"] >= MASK_SHARE_PCT * 0.9 and top["confidence"] == "upper_bound"
    shown = torchneck("analyze", str(path)).stdout
    assert re.search(r"1\. HIGH label_outside_ops MASK INDICES:", shown), shown
    assert "label_outside_ops" in (tmp_path / "r.html").read_text()


def test_fixed_tutorial_gets_no_label_finding(tmp_path):
    """The tutorial's final version (float32 mask, `nonzero()` in torch): MASK INDICES is torch's
    work now, and no finding says otherwise."""
    out = tmp_path / "fixed.json"
    p = subprocess.run([sys.executable, str(SCRIPTS / "tutorial_profiler.py"), str(out), "--side", "160", "--fixed"],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr
    report = json.loads(torchneck("analyze", str(out), "--json", "-").stdout)
    assert report["ranks"][0]["labels"][0]["name"] == "MASK INDICES"
    assert not [f for f in report["findings"] if f["kind"] == "label_outside_ops"]


def test_tutorial_table_equals_the_one_torch_printed(tutorial):
    """`key_averages(group_by_stack_n=5).table(sort_by='self_cpu_time_total', row_limit=5)`, the
    tutorial's own command: torch's printed rows and total are torchneck's (to the printed µs)."""
    path, printed = tutorial
    rows = [line.split() for line in printed.splitlines() if re.search(r"\d+\.\d+%", line)]
    total = re.search(r"Self CPU time total: ([\d.]+)(s|ms|us)", printed)
    p = torchneck("analyze", str(path), "--group-by-stack", "5", "--sort-by", "self_cpu_time_total",
                  "--row-limit", "5", "--json", "-")
    table = json.loads(p.stdout)["ranks"][0]["key_averages"]
    assert len(table["rows"]) == len(rows) == 5

    def us(text: str) -> float:
        value, unit = re.fullmatch(r"(-?[\d.]+)(s|ms|us)", text).groups()
        return float(value) * {"s": 1e6, "ms": 1e3, "us": 1.0}[unit]

    for ours, theirs in zip(table["rows"], rows):
        self_cpu = next(us(c) for c in theirs if re.fullmatch(r"[\d.]+(s|ms|us)", c))
        assert ours["self_cpu_time_total"] == pytest.approx(self_cpu, abs=0.002 * max(self_cpu, 1000) / 1000 + 1)
        assert ours["count"] == int(theirs[-1])
    assert table["self_cpu_time_total"] == pytest.approx(us("".join(total.groups())), rel=1e-4)


def test_tutorial_labels_in_html(tutorial, tmp_path):
    path, _ = tutorial
    page = tmp_path / "r.html"
    assert torchneck("analyze", str(path), "--quiet", "--html", str(page)).returncode == 0
    html = page.read_text()
    assert '<section id="labels">' in html and "MASK INDICES" in html and 'id="table-labels"' in html


def test_innermost_labels_and_rule_helpers(tutorial):
    path, _ = tutorial
    trace = load_trace(path)
    t = trace.events
    nesting = host_nesting(t)
    addmm = [r for r in range(len(t)) if t.name_of(r) == "aten::addmm"]
    item = [r for r in range(len(t)) if t.name_of(r) == "aten::item"]
    found = innermost_labels(t, nesting, addmm + item)
    assert [t.name_of(int(r)) for r in found] == ["LINEAR PASS", "MASK INDICES"]
    labels = to_builtins(report_from_traces([str(path)]).ranks[0].labels)
    assert label_for_ops(labels, ["aten::item", "aten::_local_scalar_dense"])["name"] == "MASK INDICES"
    assert label_for_ops(labels, ["aten::conv2d"]) is None
    assert re.fullmatch(r"MASK INDICES: (9\d|100) % of the time, (9\d|100) % of it outside torch ops",
                        label_phrase(labels[0]))


def test_run_labels_point_at_the_lines_under_them(tmp_path):
    """`torchneck run`: each torch call is placed at its line, so a label says which of the
    user's lines ran torch under it."""
    script = SCRIPTS / "labels_run.py"
    p = torchneck("run", "--out", str(tmp_path / "run"), "--quiet", str(script))
    assert p.returncode == 0, p.stderr
    labels = read_report(tmp_path / "run")["ranks"][0]["labels"]
    by_name = {lab["name"]: lab for lab in labels}
    assert set(by_name) == {"FORWARD", "MASK INDICES"}
    mask = by_name["MASK INDICES"]
    assert mask["count"] >= 3 and mask["outside_ops_pct"] > 80
    assert mask["where"][0]["line"] == planted_line(script, "# LABEL-OPS")
    assert mask["where"][0]["file"].endswith("labels_run.py")
    forward = by_name["FORWARD"]
    assert forward["ops_us"] > 0 and forward["ops"] >= 5 * forward["count"]  # the model's ops, each step
    assert forward["outside_ops_pct"] < mask["outside_ops_pct"]  # (module calls are Python time too)
    assert not any(lab["name"].startswith(("torchneck@", "ProfilerStep#", "Optimizer.")) for lab in labels)
    # A run samples the Python: python_hotspot names the NumPy line and the label it ran under;
    # label_outside_ops, which would count the same time again, stays silent.
    findings = read_report(tmp_path / "run")["findings"]
    hot = [f for f in findings if f["kind"] == "python_hotspot"]
    assert hot and hot[0]["label"] == "MASK INDICES" and hot[0]["title"].endswith('(in record_function "MASK INDICES")')
    assert hot[0]["where"][0]["line"] == planted_line(script, "np.argwhere")
    assert not [f for f in findings if f["kind"] == "label_outside_ops"]


def test_internal_annotations_are_not_labels():
    """Profiler steps, the optimizer's spans and compiled regions are torch's annotations."""
    for name in ("gpu_h100__eager_train", "gpu_h100__compiled_train"):
        report = to_builtins(report_from_traces([str(DATA / f"{name}.json.gz")]))
        assert report["ranks"][0]["labels"] == []
    p = torchneck("analyze", str(DATA / "gpu_h100__eager_train.json.gz"))
    assert p.returncode == 0 and "record_function labels" not in p.stdout


def write_labelled_trace(path: Path) -> None:
    """One thread, µs:
        OUTER   [0, 1000)  a label
          op A  [10, 110)    a top-level op (100 µs) with a child op [20, 60)
          INNER [200, 600)   a label nested in OUTER
            op B [250, 350)  (100 µs)
            OUTER [400, 500) OUTER nested in itself: counted once
              op C [410, 430) (20 µs)
          runtime [700, 750) a runtime call directly under OUTER (50 µs)
        op D [1200, 1300)  outside every label"""
    ev = [("user_annotation", "OUTER", 0, 1000), ("cpu_op", "aten::A", 10, 100),
          ("cpu_op", "aten::a_child", 20, 40), ("user_annotation", "INNER", 200, 400), ("cpu_op", "aten::B", 250, 100),
          ("user_annotation", "OUTER", 400, 100), ("cpu_op", "aten::C", 410, 20),
          ("cuda_runtime", "cudaDeviceSynchronize", 700, 50), ("cpu_op", "aten::D", 1200, 100)]
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": c, "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": d} for c, n, ts, d in ev]}))


def test_label_figures_exact(tmp_path):
    path = tmp_path / "labels.json"
    write_labelled_trace(path)
    trace = load_trace(path)
    t = trace.events
    nesting = host_nesting(t)
    labels = {lab["name"]: lab for lab in label_table(trace, nesting, rows_starting_in(t, 0, 2000), 1300.0)}
    outer, inner = labels["OUTER"], labels["INNER"]
    assert outer["count"] == 2 and outer["total_us"] == 1000  # the nested OUTER is inside the outer one
    assert outer["ops_us"] == pytest.approx(100 + 100 + 20 + 50)  # A, B (in INNER), C (in the inner OUTER), the sync
    assert outer["outside_ops_us"] == pytest.approx(730)
    assert outer["self_us"] == pytest.approx(1000 - 100 - 400 - 50)  # less A, INNER, the sync
    assert outer["pct"] == pytest.approx(100 * 1000 / 1300)
    assert inner["total_us"] == 400 and inner["ops_us"] == pytest.approx(120) and inner["self_us"] == pytest.approx(200)
    assert outer["ops"] == 4 and inner["ops"] == 2  # CPU ops under it, any depth
    assert {o["name"] for o in outer["top_ops"]} == {"aten::A", "aten::a_child", "aten::C"}  # innermost label's
    assert [o["name"] for o in inner["top_ops"]] == ["aten::B"]
    assert "aten::D" not in {o["name"] for lab in labels.values() for o in lab["top_ops"]}
    # rows in start order: OUTER 0, A 1, a_child 2, INNER 3, B 4, inner OUTER 5, C 6, sync 7, D 8
    assert innermost_labels(t, nesting, [1, 2, 4, 6, 7, 8]).tolist() == [0, 0, 3, 5, 0, -1]
    assert t.cat[0] == Cat.USER_ANNOTATION and t.name_of(5) == "OUTER"
