"""torch.compile diagnostics: the compile log of a live run, its analysis and the findings."""


from conftest import SCRIPTS, planted_line, read_report, torchneck

from torchneck.analysis.compile import compile_summary, guard_in_words, parse_graph_break


def test_breaks_recompiles_and_limit_from_a_real_compiled_script(tmp_path):
    script = SCRIPTS / "compiled_breaks.py"
    run_dir = tmp_path / "run"
    r = torchneck("compile", "--out", str(run_dir), "--json", str(tmp_path / "c.json"), str(script))
    assert r.returncode == 0, r.stderr
    report = read_report(tmp_path / "c.json")
    assert report["kind"] == "compile"
    assert {f["kind"] for f in report["findings"]} <= {"graph_break", "recompile", "compile_time"}

    breaks = {f["where"][0]["line"]: f for f in report["findings"] if f["kind"] == "graph_break"}
    print_line = planted_line(script, "# BREAK print")
    branch_line = planted_line(script, "# BREAK branch")
    assert set(breaks) == {print_line, branch_line}
    assert "print" in breaks[print_line]["evidence"]["explanation"]
    assert breaks[print_line]["where"][0]["function"] == "step"
    assert breaks[branch_line]["evidence"]["reason"] == "Data-dependent branching"
    assert "torch.where" in breaks[branch_line]["fix"]

    (rec,) = [f for f in report["findings"] if f["kind"] == "recompile"]
    assert rec["where"][0]["function"] == "scale"
    assert rec["severity"] == "high" and rec["evidence"]["hit_recompile_limit"]
    assert rec["evidence"]["recompilations"] == 8  # the limit is 8: the 9th value of n runs eagerly
    (reason,) = rec["evidence"]["reasons"]
    assert reason["cause"] == "python_value" and reason["guard"].startswith("n == ")

    comp = report["compile"]
    frames = {f["function"]: f for f in comp["frames"]}
    assert frames["step"]["graphs"] == 3  # split in three by the two breaks
    assert frames["scale"]["compilations"] == 8 and frames["scale"]["recompilations"] == 7
    assert comp["time_s"]["total"] > 0
    # The plain run writes the same evidence; `run` keeps the other findings too.
    assert read_report(run_dir)["kind"] == "run"
    assert (run_dir / "compile.json").exists()


def test_torchneck_clock_does_not_make_a_compiled_model_recompile(run_dir):
    """The module-call clock uses global module hooks; dynamo guards on them. They must be gone
    before dynamo traces, or removing them later recompiles the user's model."""
    script = SCRIPTS / "compiled_module.py"
    r = torchneck("run", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr
    report = read_report(run_dir)
    comp = report["compile"]
    assert comp["recompiles"] == [], comp["recompiles"]
    (frame,) = comp["frames"]
    assert frame["line"] == planted_line(script, "# COMPILED CALL")
    assert frame["label"].startswith("the compiled call at compiled_module.py:")
    assert report["run"]["phases"]["clock"] == "optimizer"


def test_cold_compile_runs_without_inductor_caches(tmp_path):
    r = torchneck("compile", "--cold", "--out", str(tmp_path / "run"), "--json", str(tmp_path / "c.json"),
                  str(SCRIPTS / "compiled_inductor.py"))
    assert r.returncode == 0, r.stderr
    comp = read_report(tmp_path / "c.json")["compile"]
    cold = comp["cold"]
    assert cold["ok"], cold
    assert cold["time_s"]["inductor"] + cold["time_s"]["codegen"] > 0  # inductor really compiled
    assert (tmp_path / "run" / "cold" / "compile.json").exists()


BREAK_PAYLOAD = """Graph break in user code at /src/model.py:42
Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

Unsupported Tensor.item() call with capture_scalar_outputs=False
  Explanation: Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.
  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True` or `export TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1` to include these operations in the captured graph.

User code traceback:
  File "/src/train.py", line 10, in <module>
    out = model(x)
  File "/src/model.py", line 42, in torch_dynamo_resume_in_forward_at_40
    n = int(x.sum().item())

Traceback (most recent call last):
  File "/site-packages/torch/_dynamo/symbolic_convert.py", line 1076, in wrapper
"""


def test_parse_graph_break_takes_line_function_and_reason():
    b = parse_graph_break(BREAK_PAYLOAD)
    assert (b["file"], b["line"], b["function"]) == ("/src/model.py", 42, "forward")
    assert b["reason"] == "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    assert b["code"] == "n = int(x.sum().item())"
    assert "capture_scalar_outputs" in b["hints"][0]
    assert parse_graph_break("something else") is None


def test_guards_in_plain_words():
    size = guard_in_words("tensor 'x' size mismatch at index 0. expected 4, actual 5")
    assert size["cause"] == "shape" and "dim 0 (4 -> 5)" in size["what"] and "mark_dynamic(x, 0)" in size["fix"]
    dtype = guard_in_words("tensor 'x' dtype mismatch. expected Float, actual Double")
    assert dtype["cause"] == "dtype" and "Float" in dtype["what"]
    assert guard_in_words("GLOBAL_STATE changed: grad_mode ")["cause"] == "global_state"
    value = guard_in_words("n == 7                          # return x * n  # f.py:3 in g")
    assert value["cause"] == "python_value" and "n == 7" in value["what"]


def _metrics(compile_id, name, file="/u/a.py", line=3, entire=1.0, backend=0.6, inductor=0.4, codegen=0.1):
    return {"type": "compilation_metrics", "compile_id": compile_id, "co_name": name, "co_filename": file,
            "co_firstlineno": line, "graph_op_count": 2, "entire_frame_compile_time_s": entire,
            "backend_compile_time_s": backend, "inductor_compile_time_s": inductor,
            "code_gen_time_s": codegen, "frame_id": compile_id.split("/")[0],
            "frame_compile_id": compile_id.split("/")[1]}


def test_compile_summary_stages_resume_frames_and_shape_recompiles():
    log = {"records": [
        _metrics("0/0", "fwd"),
        _metrics("1/0", "torch_dynamo_resume_in_fwd_at_7", line=7, entire=0.5, backend=0.0, inductor=0.0,
                 codegen=0.0),
        {"type": "recompile_reasons", "frame_id": 0, "frame_compile_id": 1,
         "payload": "0/0: tensor 'x' size mismatch at index 0. expected 4, actual 5"},
        _metrics("0/1", "fwd", entire=2.0, backend=1.0, inductor=0.5, codegen=0.2),
        {"type": "cache", "name": "fx_graph_cache_hit"},
    ], "warnings": []}
    s = compile_summary(log)
    (fwd,) = s["frames"]  # the resume function is part of fwd
    assert fwd["compilations"] == 3 and fwd["recompilations"] == 1
    assert abs(fwd["recompile_s"] - 2.0) < 1e-9
    t = s["time_s"]
    # entire ⊇ backend ⊇ inductor ⊇ codegen, split: 1.0+0.5+2.0 = 3.5 s in all
    assert abs(t["total"] - 3.5) < 1e-9
    assert abs(t["codegen"] - 0.3) < 1e-9 and abs(t["inductor"] - 0.6) < 1e-9
    assert abs(t["aot"] - 0.7) < 1e-9 and abs(t["dynamo"] - 1.9) < 1e-9
    (rec,) = s["recompiles"]
    assert rec["reasons"][0]["cause"] == "shape"
    assert s["cache"] == {"fx_graph_cache_hit": 1}
    assert compile_summary({"records": [], "warnings": []})["present"] is False


def test_wall_split_measures_eager_code_between_graphs_and_charges_it_to_the_break(tmp_path):
    """compiled_split.py sleeps 3 ms at a graph break on every call, between two aot_eager graphs."""
    script = SCRIPTS / "compiled_split.py"
    r = torchneck("compile", "--out", str(tmp_path / "run"), "--json", str(tmp_path / "c.json"), str(script))
    assert r.returncode == 0, r.stderr
    report = read_report(tmp_path / "c.json")
    comp = report["compile"]
    split = comp["wall_split"]
    assert 0 < split["compiling_pct"] < 100 and split["compiling_s"] == comp["time_s"]["total"]
    w = split["window"]
    steps = report["ranks"][0]["steps"]["count"]
    assert w["eager_between_graphs_s"] >= 0.8 * 0.003 * steps  # the sleeps
    assert 0 < w["graphs_s"] < w["eager_between_graphs_s"]
    assert abs(w["graphs_s"] + w["eager_between_graphs_s"] + w["compiling_s"] - w["in_compiled_functions_s"]) < 1e-3
    (frame,) = [f for f in comp["frames"] if f["function"] == "forward"]
    assert frame["window"]["eager_s"] == w["eager_between_graphs_s"]
    (brk,) = [f for f in report["findings"] if f["kind"] == "graph_break"]
    assert brk["where"][0]["line"] == planted_line(script, "# SPLIT eager")
    assert brk["evidence"]["measured_in"] == "the broken function"
    assert abs(brk["time_lost_s"] - frame["window"]["eager_s"]) < 1e-9
    assert "eager code between graphs" in r.stdout


SKIPPED_PAYLOAD = """Graph break in user code at /src/net.py:14
Graph Break Reason: Failed to handle graph break gracefully. Skipping the function and falling back to eager. Graph break encountered:

Data-dependent branching
  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`).
  Hint: Use `torch.cond` to express dynamic control flow.

User code traceback:
  File "/src/net.py", line 14, in forward
    if not torch.isfinite(x).all():
"""


def test_a_break_dynamo_cannot_resume_says_the_function_runs_eagerly():
    b = parse_graph_break(SKIPPED_PAYLOAD)
    assert b["skipped_function"] and b["reason"] == "Data-dependent branching"
    assert (b["function"], b["line"]) == ("forward", 14)
    assert not parse_graph_break(BREAK_PAYLOAD)["skipped_function"]


def test_shape_changes_recompile_with_the_size_guard_in_words(tmp_path):
    script = SCRIPTS / "compiled_shapes.py"
    r = torchneck("compile", "--out", str(tmp_path / "run"), "--json", str(tmp_path / "c.json"), str(script))
    assert r.returncode == 0, r.stderr
    report = read_report(tmp_path / "c.json")
    (rec,) = [f for f in report["findings"] if f["kind"] == "recompile"]
    assert rec["where"][0]["function"] == "normalise"
    assert rec["evidence"]["recompilations"] == 3  # 5, 6 and 7 are new; 4 and 5 again are cached
    assert not rec["evidence"]["hit_recompile_limit"]
    (reason,) = rec["evidence"]["reasons"]  # one cause: x's dim 0 keeps changing
    assert reason["cause"] == "shape" and reason["count"] == 3
    assert reason["what"] == "size of tensor 'x' changed in dim 0 (4 -> 5 -> 6 -> 7)"
    assert "mark_dynamic(x, 0)" in reason["fix"]


def test_a_script_without_torch_compile_says_so(tmp_path):
    r = torchneck("compile", "--out", str(tmp_path / "run"), "--json", str(tmp_path / "c.json"),
                  str(SCRIPTS / "no_compile.py"))
    assert r.returncode == 0, r.stderr
    report = read_report(tmp_path / "c.json")
    assert report["compile"]["present"] is False and report["compile"]["available"] is True
    assert report["findings"] == []
    assert "No torch.compile activity in this run." in r.stdout
