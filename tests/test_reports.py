"""Reports people look at: the HTML page (in headless Chromium), `diff`, the JSON Schema, `--fail-on`."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import DATA, ROOT, SCRIPTS, planted_line, read_report, torchneck, validate_report

EXAMPLE = ROOT.parent / "examples" / "tutorial_mask.py"
XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def tutorial_runs(tmp_path_factory):
    """The bundled example before and after the tutorial's fix (float32 mask, nonzero())."""
    base = tmp_path_factory.mktemp("tutorial")
    for name, extra in (("before", []), ("after", ["--fixed"])):
        r = torchneck("run", "--quiet", "--out", str(base / name), str(EXAMPLE), "--iterations", "12", *extra)
        assert r.returncode == 0, r.stderr[-2000:]
    return base


def test_diff_before_and_after_a_planted_fix(tmp_path):
    script = SCRIPTS / "planted_fix.py"
    for name, extra in (("before", []), ("after", ["--fixed"])):
        r = torchneck("run", "--quiet", "--out", str(tmp_path / name), str(script), *extra)
        assert r.returncode == 0, r.stderr[-2000:]
    before, after = tmp_path / "before", tmp_path / "after"
    line = planted_line(script)
    assert any(w["line"] == line for f in read_report(before)["findings"] for w in f["where"])
    r = torchneck("diff", str(before), str(after), "--json", str(tmp_path / "d.json"),
                  "--html", str(tmp_path / "d.html"))
    assert r.returncode == 0, r.stderr
    d = read_report(tmp_path / "d.json")
    assert d["kind"] == "diff"
    step = d["diff"]["step"]
    assert step["b_us"] < step["a_us"] / 3  # ~20x here: far beyond noise
    at_line = [f for f in d["diff"]["findings"] if f["where"].endswith(f":{line}")]
    assert at_line and all(f["status"] == "gone" for f in at_line)
    moved = {x["line"]: x for x in d["diff"]["python"]}
    assert moved[next(k for k in moved if k.startswith(f"planted_fix.py:{line} "))]["change_ms"] < 0
    assert "faster" in r.stdout and "gone" in r.stdout
    assert (tmp_path / "d.html").stat().st_size > 0
    # report.json files work as inputs, and the regression gate trips when A and B are swapped
    r = torchneck("diff", str(after / "report.json"), str(before / "report.json"), "--quiet",
                  "--fail-on-regression", "5")
    assert r.returncode == 1 and "regressed" in r.stderr


def test_diff_last_and_bad_input(tutorial_runs, tmp_path):
    runs = tmp_path / "torchneck-runs"
    runs.mkdir()
    shutil.copytree(tutorial_runs / "before", runs / "20260101-000000-tutorial_mask")
    shutil.copytree(tutorial_runs / "after", runs / "20260101-000100-tutorial_mask")
    r = torchneck("diff", "last~1", "last", "--json", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = validate_report(json.loads(r.stdout))
    assert d["diff"]["a"]["label"].endswith("000000-tutorial_mask")
    r = torchneck("diff", "last~5", "last", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "only 2 run(s)" in r.stderr
    r = torchneck("diff", str(tmp_path / "nope"), "last", cwd=tmp_path)
    assert r.returncode == 2 and "no such run directory" in r.stderr


def test_fail_on_severity_exit_codes(tutorial_runs):
    before = tutorial_runs / "before"
    high = [f for f in read_report(before)["findings"] if f["severity"] == "high"]
    assert high, "the tutorial's NumPy round trip is a high finding"
    assert torchneck("report", str(before), "--quiet", "--fail-on", "high").returncode == 1
    assert torchneck("report", str(before), "--quiet").returncode == 0
    trace = ROOT / "data" / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    r = torchneck("analyze", str(trace), "--quiet", "--json", "-", "--fail-on", "low")
    findings = validate_report(json.loads(r.stdout))["findings"]
    assert r.returncode == (1 if any(f["severity"] != "info" for f in findings) else 0)


def _xss_trace(path):
    """A trace from 'someone else' whose op name is HTML."""
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
               "ts": 1000.0 * i, "dur": 1000.0} for i in range(3)]
    events += [{"ph": "X", "cat": "cpu_op", "name": XSS, "pid": 1, "tid": 1, "ts": 1000.0 * i + 10, "dur": 900.0,
                "args": {"Input Dims": [[2, 2]]}} for i in range(3)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _chromium():
    for name in (os.environ.get("TORCHNECK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    if os.environ.get("CI"):
        pytest.fail("headless Chromium is required in CI (Debian: apt-get install chromium; .ci/run does it)")
    pytest.skip("no Chromium on this machine (Debian: apt-get install chromium)")


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


def _open(browser, path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors, dialogs = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append("request failed: " + r.url))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(path.as_uri())
    return page, errors, dialogs


def test_html_report_renders_in_chromium(tutorial_runs, browser):
    run_dir = tutorial_runs / "before"
    html_path = run_dir / "report.html"
    assert html_path.exists() and html_path.stat().st_size < 3 << 20
    text = html_path.read_text()
    assert re.search(r"<(script|link|img|iframe)[^>]*(src|href)=", text) is None  # nothing from the network
    page, errors, dialogs = _open(browser, html_path)
    report = read_report(run_dir)
    top = report["findings"][0]
    assert top["title"] in page.inner_text("#findings")
    where = top["where"][0]
    hit = page.inner_text("#findings pre.code .ln.hit")  # the user's line, shown with its context
    assert hit.startswith(str(where["line"])) and "argwhere" in hit
    assert page.locator("#step-chart rect.step-bar").count() >= report["ranks"][0]["steps"]["count"]
    assert page.locator("#timeline rect.tl-ev").count() > 10
    assert page.locator("#flame .node.user").count() >= 2
    def root_seconds() -> float:
        return float(page.locator("#flame .node.root").get_attribute("title").split()[1])

    steps_s = root_seconds()
    page.click("#flame button[data-flame='whole run']")  # start-up included: more of the run
    assert root_seconds() > steps_s
    assert page.locator("#memory polyline").count() >= 1
    # the op table sorts: a numeric column largest first, then the other way
    table = page.locator("#table-ops")
    header = table.locator("th[data-key=count]")
    header.click()
    counts = [int(x) for x in table.locator("tbody tr td:nth-child(2)").all_inner_texts()]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    header.click()
    counts = [int(x) for x in table.locator("tbody tr td:nth-child(2)").all_inner_texts()]
    assert counts == sorted(counts)
    # the filter hides rows that do not match
    page.fill("#table-filter", "aten::addmm")
    visible = [t for t in table.locator("tbody tr").all_inner_texts() if t.strip()]
    assert page.locator("#table-ops tbody tr:visible").count() == 1 and "aten::addmm" in visible[0]
    assert errors == [] and dialogs == []


def test_html_escapes_names_from_a_foreign_trace(tmp_path, browser):
    trace = _xss_trace(tmp_path / "foreign.json")
    out = tmp_path / "foreign.html"
    r = torchneck("analyze", str(trace), "--quiet", "--html", str(out))
    assert r.returncode == 0, r.stderr
    assert XSS not in out.read_text()  # escaped in the findings and in the embedded data
    page, errors, dialogs = _open(browser, out)
    assert page.locator("img").count() == 0
    assert XSS in page.inner_text("#findings")  # shown as text
    assert XSS in page.inner_text("#table-ops")
    assert page.locator("#timeline rect.tl-ev").count() >= 1
    assert errors == [] and dialogs == []


def test_python_api_profiles_a_block_and_analyzes_a_trace(tmp_path):
    """`with torchneck.profile() as p:` around a loop: the same findings as `run`, a report that
    renders as HTML (Jupyter) and text; `torchneck.analyze` on the block's own trace."""
    script = SCRIPTS / "api_block.py"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "block")], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["kind"] == "run" and out["steps"] == 4
    top = out["findings"][0]
    # slow_penalty() is called the same way on every pass: its call (line 22) first, its slow line second,
    # whether or not a sample caught slow_penalty's own frame beside its generator's (that once decided it)
    assert top["kind"] == "python_hotspot" and [w["line"] for w in top["where"][:2]] == [22, planted_line(script)]
    assert top["evidence"]["invariant_call"] == "slow_penalty"
    assert out["html"] == "<!DOCTYPE html>" and "torchneck report" in out["text"]
    assert out["repr"].startswith("<torchneck report (run)")
    assert out["traced_kind"] == "analyze" and out["traced_steps"] == 4
    read_report(tmp_path / "block")  # report.json written into the run directory, valid
    assert (tmp_path / "block" / "report.html").exists()


def test_diff_of_two_real_gpu_traces():
    """HTA's trace_diff pair: a GPU model before and after a change; kernels that changed most."""
    a, b = DATA / "trace_diff__control__control.json.gz", DATA / "trace_diff__test__test.json.gz"
    r = torchneck("diff", str(a), str(b), "--json", "-")
    assert r.returncode == 0, r.stderr
    d = validate_report(json.loads(r.stdout))["diff"]
    assert d["step"]["a_us"] > 0 and d["step"]["b_us"] > d["step"]["a_us"]  # the test trace's steps are slower
    top = d["kernels"][0]
    assert top["a_us_per_step"] == 0 and top["b_us_per_step"] > 5000  # a kernel only the test run has
    assert "split_embedding_backward" in top["kernel"]
    assert d["ops"] and abs(d["ops"][0]["change_us"]) >= abs(d["ops"][-1]["change_us"])
