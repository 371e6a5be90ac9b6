"""torch.compile diagnostics: the compile log of a live run, its analysis and the findings."""

import json

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
    assert "`n` (argument of scale())" in reason["what"]  # the user's parameter, not a dynamo source
    assert rec["fix"].startswith("Pass n as a tensor") and "torch._dynamo.config.recompile_limit only" in rec["fix"]

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
    sites = json.loads((run_dir / "run.json").read_text())["call_sites"]
    (site,) = [c for c in sites if c["what"] == "compile"]  # the line compile_time names first
    assert (site["line"], site["backend"]) == (planted_line(script, "torch.compile("), "eager")


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
    assert reason["what"] == "size of `x` (argument of normalise()) changed in dim 0 (4 -> 5 -> 6 -> 7)"
    assert "mark_dynamic(x, 0)" in reason["fix"]


def test_a_script_without_torch_compile_says_so(tmp_path):
    r = torchneck("compile", "--out", str(tmp_path / "run"), "--json", str(tmp_path / "c.json"),
                  str(SCRIPTS / "no_compile.py"))
    assert r.returncode == 0, r.stderr
    report = read_report(tmp_path / "c.json")
    assert report["compile"]["present"] is False and report["compile"]["available"] is True
    assert report["findings"] == []
    assert "No torch.compile activity in this run." in r.stdout


def test_two_breaks_each_charged_with_the_compile_time_and_recompiles_they_cause(tmp_path):
    """issue 27.3 / 24.2: every break at its line with the compile seconds and recompiles of the code
    resumed after it; each compiled graph with its guards, cost, cache and generated code."""
    script = SCRIPTS / "compile_two_breaks.py"
    run_dir = tmp_path / "run"
    r = torchneck("compile", "--out", str(run_dir), "--json", str(tmp_path / "c.json"), str(script), timeout=600)
    assert r.returncode == 0, r.stderr
    report = read_report(tmp_path / "c.json")
    item_line, branch_line = planted_line(script, "# BREAK item"), planted_line(script, "# BREAK branch")
    breaks = {f["where"][0]["line"]: f for f in report["findings"] if f["kind"] == "graph_break"}
    assert set(breaks) == {item_line, branch_line}
    item, branch = breaks[item_line]["evidence"], breaks[branch_line]["evidence"]
    assert item["compile_s_caused"] > 0 and branch["compile_s_caused"] > 0
    assert item["recompiles_caused"] >= 1 and branch["recompiles_caused"] == 0  # .item()'s value changes
    assert item["graphs_caused"] and set(item["graphs_caused"]).isdisjoint(branch["graphs_caused"])

    (ct,) = [f for f in report["findings"] if f["kind"] == "compile_time"]
    caused = {(c["kind"], c["line"]): c["compile_s"] for c in ct["evidence"]["caused_by"]}
    assert caused[("graph_break", item_line)] == item["compile_s_caused"]
    assert caused[("graph_break", branch_line)] == branch["compile_s_caused"]
    assert abs(ct["evidence"]["explained_s"] + ct["evidence"]["unexplained_s"] - ct["time_lost_s"]) < 1e-6

    comp = report["compile"]
    # The recompile is named in the user's words: the value of `scale` that crossed the break.
    (rec,) = comp["recompiles"]
    (reason,) = rec["reasons"]
    assert reason["cause"] == "python_value" and "`scale`" in reason["what"] and f"line {item_line}" in reason["what"]
    assert f"graph break at line {item_line}" in reason["fix"]
    texts = [f["title"] + f["fix"] for f in report["findings"]] + [reason["what"], reason["fix"]]
    assert not any("___stack" in t or "Torch._dynamo" in t for t in texts)

    graphs = [g for g in comp["graphs"] if g["op_count"]]
    assert len(graphs) >= 4  # start, after each break, and the recompiled one
    first = next(g for g in graphs if g["resumes_after_line"] is None)
    assert first["ended_by_break"]["line"] == item_line
    assert any(c.startswith("`x` (argument of forward()) is a float32 Tensor") for c in first["guards"]["checks"])
    assert first["guards"]["count"] >= len(first["guards"]["checks"])
    resumed = [g for g in graphs if g["resumes_after_line"] == item_line]
    assert {g["recompile"] for g in resumed} == {False, True}
    assert any("`scale`" in c for g in resumed for c in g["guards"]["checks"])
    for g in graphs:
        assert g["time_s"]["total"] > 0 and g["cache"] in ("hit", "miss", "partial")
        code = run_dir / g["files"]["output_code"]
        assert code.exists() and g["kernels"] and all(k in code.read_text() for k in g["kernels"])
        assert g["kernels"][0].startswith("cpp_fused")
        assert (run_dir / g["files"]["dynamo_graph"]).read_text().startswith("class GraphModule")
    # Ops run inside a compiled graph's call are ATen fallbacks, with the graph they came from.
    origins = report["ranks"][0]["compiled"]["origins"]["ops"]
    assert origins["aten::addmm"]["origin"] == "aten_fallback"
    assert set(origins["aten::addmm"]["graphs"]) <= {g["id"] for g in graphs} and origins["aten::addmm"]["graphs"]
    html = (run_dir / "report.html").read_text()
    assert 'id="compiled-graphs"' in html and f'href="{first["files"]["output_code"]}"' in html
    assert "Compiled graphs" in r.stdout and "ATen fallback" in (run_dir / "report.txt").read_text()


def test_fix_texts_name_the_config_of_the_running_torch_version():
    from torchneck.analysis.compile_guards import frame_context, recompile_limit_name
    from torchneck.diagnose.facts import Facts
    from torchneck.diagnose.rules.compile import Recompiles

    assert recompile_limit_name("2.6.0+cu124") == "cache_size_limit"
    assert recompile_limit_name("2.4.1") == "cache_size_limit"
    assert recompile_limit_name("2.7.0") == recompile_limit_name("2.13.0+cpu") == "recompile_limit"
    # Recorded as torch 2.4-2.6 write them: the guard with L[...] names, the limit as cache_size_limit.
    log = {"records": [_metrics(f"0/{i}", "scale") for i in range(8)] + [
        {"type": "recompile_reasons", "frame_id": 0, "frame_compile_id": i,
         "payload": f"0/{i - 1}: L['n'] == {i - 1}"} for i in range(1, 8)],
        "warnings": [{"message": "torch._dynamo hit config.cache_size_limit (8)\n   function: 'scale' (/u/a.py:3)\n"
                                 "   last reason: 0/7: L['n'] == 7"}]}
    for version, limit in (("2.6.0", "cache_size_limit"), ("2.13.0", "recompile_limit")):
        summary = compile_summary(log, version)
        (f,) = Recompiles().check(Facts(compile=summary, env={"torch": version}, run_wall_s=10.0))
        assert f.severity == "high" and f"torch._dynamo.config.{limit} only hides" in f.fix
        assert f.fix.startswith("Pass n as a tensor") and "L['" not in f.title + f.fix
    # A value that crossed a graph break (a resume function's ___stack0), as torch 2.13 writes it.
    ctx = frame_context("torch_dynamo_resume_in_forward_at_15", "/u/m.py", 13,
                        {"stack_vars": 1, "top_stored_in": "scale"}, "scale = h.mean().item()  # note")
    from torchneck.analysis.compile_guards import guard_failure_in_words

    words = guard_failure_in_words("___stack0 == 0.2293", ctx, "2.13.0")
    assert words["what"].startswith("`scale`, the value computed where the graph broke at line 15 "
                                    "(`scale = h.mean().item()`)")
    assert "Pass" not in words["fix"] and "line 15" in words["fix"] and "___stack" not in words["fix"]
    size = guard_failure_in_words("tensor 'L['x']' size mismatch at index 0. expected 4, actual 5", None, "2.4.0")
    assert size["cause"] == "shape" and "mark_dynamic(x, 0)" in size["fix"] and size["fix"][0].isupper()
