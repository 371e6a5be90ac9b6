"""`torchneck bisect`: real scripts whose compiled run fails, run stage by stage in subprocesses."""

import json
import subprocess
import sys
from pathlib import Path

import torch
from conftest import SCRIPTS, planted_line, read_report, torchneck

from torchneck.capture.compile_stage import compare_outputs, describe_exception


def _bisect(tmp_path, *args):
    out = tmp_path / "bisect"
    r = torchneck("bisect", "--out", str(out), *args, timeout=600, cwd=tmp_path)
    report = read_report(out / "bisect.json")
    assert report["kind"] == "bisect"
    return r, report["bisect"]


def test_a_failing_custom_backend_is_named_and_eager_stages_pass(tmp_path):
    script = SCRIPTS / "compile_toy_backend.py"
    r, b = _bisect(tmp_path, str(script))
    assert r.returncode == 1, r.stderr
    assert [s["name"] for s in b["stages"]] == ["original", "eager", "aot_eager", "aot_eager_decomp_partition"]
    assert [s["failed"] for s in b["stages"]] == [True, False, False, False]
    assert b["culprit"] == "original" and b["backend"] == "toy_backend"
    assert "toy_backend" in b["component"]
    f = b["failure"]
    assert f["exception_type"] == "NotImplementedError" and "relu is not supported" in f["message"]
    assert f["compiled_function"]["function"] == "shift"
    lines = [w["line"] for w in f["where"]]
    assert planted_line(script, "# TOY raise") in lines  # where the backend raised
    assert planted_line(script, "# TOY call") in lines  # the user's call that triggered the compile
    assert "toy_backend" in r.stdout and "eager" in r.stdout


def test_accuracy_finds_the_stage_and_line_that_computes_wrong_numbers(tmp_path):
    script = SCRIPTS / "compile_toy_backend.py"
    r, b = _bisect(tmp_path, "--accuracy", str(script), "--wrong")
    assert r.returncode == 1, r.stderr
    assert b["culprit"] == "original"
    original, *forced = b["stages"]
    assert original["status"] == "ok" and original["failed"]  # it ran: only the numbers are wrong
    assert all(s["accuracy"]["checked_calls"] == 2 and not s["accuracy"]["mismatches"] for s in forced)
    m = b["failure"]["mismatch"]
    assert m["where"]["line"] == planted_line(script, "# TOY relu")
    assert m["max_abs_diff"] > 0.1 and m["problem"] == "values differ"


def test_accuracy_passes_a_correct_training_compile_with_batchnorm_and_dropout(tmp_path):
    script = SCRIPTS / "compile_train.py"
    r, b = _bisect(tmp_path, "--accuracy", str(script))
    assert r.returncode == 0, r.stderr
    (original,) = b["stages"]
    assert original["accuracy"]["checked_calls"] == 2 and original["accuracy"]["mismatches"] == []
    assert b["culprit"] is None and "match eager" in b["verdict"]
    # The eager reference runs on clones: BatchNorm's running stats are updated once, as without torchneck.
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout
    assert plain.strip() in (tmp_path / "bisect" / "stage-original.log").read_text()


def test_a_capture_failure_under_fullgraph_blames_dynamo_at_the_branch(tmp_path):
    script = SCRIPTS / "compile_fullgraph.py"
    r, b = _bisect(tmp_path, str(script))
    assert r.returncode == 1
    assert [(s["name"], s["failed"]) for s in b["stages"]] == [("original", True), ("eager", True),
                                                               ("no_compile", False)]
    assert b["culprit"] == "eager" and "TorchDynamo" in b["component"]
    f = b["failure"]
    assert f["where"][0]["line"] == planted_line(script, "# FULLGRAPH branch")
    assert f["message"] == "Data-dependent branching" and f["hints"]
    assert "fullgraph=True" in b["advice"]
    assert "minify" not in b


def test_a_script_without_torch_compile_has_nothing_to_bisect(tmp_path):
    r, b = _bisect(tmp_path, str(SCRIPTS / "no_compile.py"))
    assert r.returncode == 0, r.stderr
    assert b["culprit"] is None and b["backend"] is None
    assert len(b["stages"]) == 1 and b["stages"][0]["compile_calls"] == []
    assert "no torch.compile" in b["verdict"]


def test_an_inductor_bug_is_localised_and_minified_to_a_repro(tmp_path):
    """The bug PyTorch's minifier tests plant: inductor's C++ for relu does not compile."""
    r, b = _bisect(tmp_path, "--minify", str(SCRIPTS / "compile_inductor_bug.py"))
    assert r.returncode == 1, r.stderr
    assert b["culprit"] == "original" and b["backend"] == "inductor"
    assert "TorchInductor" in b["component"]
    assert b["failure"]["exception_type"] == "CppCompileError"
    assert "error:" in b["failure"]["detail"]
    mn = b["minify"]
    assert mn["ok"], mn
    assert mn["repro_after"] == "aot"
    rerun = subprocess.run([sys.executable, mn["repro"]], capture_output=True, text=True, timeout=300)
    assert rerun.returncode != 0 and "CppCompileError" in rerun.stderr  # the repro reproduces it


def test_bad_input_is_a_one_line_error(tmp_path):
    r = torchneck("bisect", "--out", str(tmp_path / "b"), str(tmp_path / "missing.py"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such file" in r.stderr


def test_compare_outputs_reports_values_shapes_and_dtypes():
    ref = (torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([1, 2]), 4)
    assert compare_outputs(ref, (torch.tensor([1.0, float("nan"), 3.0005]), torch.tensor([1, 2]), 4), 1e-3) == []
    bad = compare_outputs(ref, (torch.tensor([1.0, 0.0, 3.0]), torch.tensor([1, 3]), 5), 1e-3)
    assert [b["output"] for b in bad] == [0, 1, 2]
    assert bad[0]["max_abs_diff"] == float("inf")  # a NaN where eager has one no longer
    assert bad[1]["mismatched"] == 1
    (shape,) = compare_outputs((torch.zeros(2, 3),), (torch.zeros(3, 2),), 1e-3)
    assert shape["problem"] == "shape (3, 2) instead of (2, 3)"
    (dtype,) = compare_outputs((torch.zeros(2),), (torch.zeros(2, dtype=torch.float64),), 1e-3)
    assert dtype["problem"].startswith("dtype torch.float64")


def test_describe_exception_unwraps_backend_errors_and_reads_quoted_user_lines(tmp_path):
    class BackendCompilerFailed(Exception):
        pass

    user_file = tmp_path / "model.py"
    message = ("Data-dependent branching\n  Hint: use torch.where\n\nfrom user code:\n"
               f'   File "{user_file}", line 7, in clip\n    if x.sum() > 0:\n')
    inner = ValueError("relu is not supported")
    exc = BackendCompilerFailed(message)
    exc.inner_exception = inner
    d = describe_exception(exc)
    assert d["type"] == "BackendCompilerFailed" and d["inner_type"] == "ValueError"
    assert d["first_line"] == "relu is not supported"
    assert d["traced_line"] == {"file": str(user_file), "line": 7, "function": "clip"}
    assert d["hints"] == ["use torch.where"]
    assert json.dumps(d)


def test_a_crashing_stage_is_reported_and_the_bisection_goes_on(tmp_path):
    r, b = _bisect(tmp_path, str(SCRIPTS / "compile_toy_backend.py"), "--crash")
    assert r.returncode == 1
    original = b["stages"][0]
    assert original["status"] == "crashed" and original["outcome"] == "crashed (SIGSEGV)"
    assert [s["failed"] for s in b["stages"][1:]] == [False, False, False]
    assert b["culprit"] == "original"


def test_a_stage_past_its_time_limit_is_killed_with_its_children(tmp_path):
    from torchneck.bisect import _run

    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
            f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(120)")
    rc, wall = _run([sys.executable, "-c", code], tmp_path / "log", timeout=3)
    assert rc is None and wall < 30
    child = int(pid_file.read_text())
    import os
    import time

    time.sleep(0.5)
    try:
        os.kill(child, 0)
        alive = open(f"/proc/{child}/stat").read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        alive = False
    assert not alive  # the whole process group went


_TOY = SCRIPTS / "compile_toy_compiler.py"


def _run_repro_with_toy_backend(repro: str, *args: str) -> subprocess.CompletedProcess:
    """repro.py looks the backend up by name: register the script's toy_compiler first (what the
    bisect report tells the user to do), then run the repro."""
    code = ("import runpy, sys; sys.argv = [sys.argv[0], *sys.argv[2:]]; "
            f"ns = runpy.run_path({str(_TOY)!r}, run_name='toy'); "
            "import torch._dynamo; torch._dynamo.register_backend(ns['toy_compiler']); "
            f"sys.argv = [{repro!r}]; runpy.run_path({repro!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


def test_minify_shrinks_the_troubleshooting_pages_failing_toy_compiler_to_relu(tmp_path):
    """The guide's own example: a backend defined in the script, which dynamo's minifier launcher
    (a fresh process looking the backend up by name) cannot find."""
    r, b = _bisect(tmp_path, "--minify", str(_TOY))
    assert r.returncode == 1, r.stderr
    assert b["culprit"] == "original" and b["backend"] == "toy_compiler"
    assert b["failure"]["exception_type"] == "AssertionError"
    assert planted_line(_TOY, "# TOY assert") in [w["line"] for w in b["failure"]["where"]]
    mn = b["minify"]
    assert mn["ok"], mn
    assert mn["repro_after"] == "dynamo" and mn["in_process"] and "register_backend(toy_compiler)" in mn["note"]
    forward = Path(mn["repro"]).read_text().split("def forward", 1)[1].split("return", 1)[0]
    assert "torch.relu" in forward and "linear" not in forward  # the five Linear layers are gone
    rerun = _run_repro_with_toy_backend(mn["repro"])
    assert rerun.returncode != 0 and "AssertionError" in rerun.stderr  # the repro reproduces it
    assert "test_backend_error" not in rerun.stderr  # ...from the minified graph, not the script's own call
    assert "register_backend(toy_compiler)" in r.stdout


def test_accuracy_minify_shrinks_a_toy_compiler_with_wrong_results_to_relu(tmp_path):
    r, b = _bisect(tmp_path, "--accuracy", "--minify", str(_TOY), "--wrong")
    assert r.returncode == 1, r.stderr
    assert b["culprit"] == "original"
    # The graph's output (the last Linear's, line of `return model(a)`) differs from eager.
    assert b["failure"]["mismatch"]["where"]["line"] == planted_line(_TOY, "# TOY output")
    mn = b["minify"]
    assert mn["ok"], mn
    assert mn["repro_level"] == 4
    forward = Path(mn["repro"]).read_text().split("def forward", 1)[1].split("return", 1)[0]
    assert "torch.relu" in forward and "linear" not in forward


def test_minify_says_which_failures_it_cannot_shrink(tmp_path):
    from torchneck.bisect import BisectOptions, minify
    from torchneck.capture.runner import Target

    target = Target(script=_TOY)
    capture = minify(target, BisectOptions(), tmp_path, "eager", "toy_compiler")
    assert not capture["ok"] and capture["reason"].startswith("cannot minify")
    assert "no graph to shrink" in capture["reason"]
    crash = minify(target, BisectOptions(), tmp_path, "original", "toy_compiler", custom_backend=True, crashed=True)
    assert not crash["ok"] and "kills the process" in crash["reason"]
    assert not (tmp_path / "minify").exists()  # nothing was run for either
