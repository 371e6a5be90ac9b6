"""torch.compile's rules on the compile log's summary (analysis/compile.py) and on a trace alone."""

from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.rules.compile import CompileTime, GraphBreaks, Recompiles
from torchneck.model.analysis import Compiled, CompiledFrame


def _break(line=14, count=30):
    return {"file": "/x/model.py", "line": line, "function": "forward", "code": "print(x)",
            "reason": "Unsupported builtin print", "explanation": "", "hints": [], "count": count, "user_code": True}


def _compile(breaks=(), recompiles=(), total_s=1.0, limit_hits=()):
    return {"present": True, "available": True, "graph_breaks": list(breaks), "recompiles": list(recompiles),
            "limit_hits": list(limit_hits), "frames": [], "cache": {}, "graphs": [],
            "time_s": {"dynamo": total_s / 2, "aot": total_s / 4, "inductor": total_s / 4, "codegen": 0.0,
                       "total": total_s}}


@fires("graph_break")
def test_graph_break_at_the_user_line_with_its_fix():
    compiled = Compiled(present=True, eager_top_level_us=20_000.0, nested_region_calls=30)
    [f] = GraphBreaks().check(facts(analysis=_with_compiled(compiled), compile=_compile(breaks=[_break()])))
    assert f.where[0].line == 14 and "print" in f.fix.lower() and f.time_lost_s == 0.02


def _with_compiled(compiled):
    a = analysis()
    a.compiled = compiled
    return a


@silent("graph_break")
def test_graph_break_silent_without_breaks_in_user_code():
    library = dict(_break(), user_code=False)
    assert GraphBreaks().check(facts(analysis=analysis(), compile=_compile(breaks=[library]))) == []
    assert GraphBreaks().check(facts(analysis=analysis())) == []  # no compiled region in the trace


def test_compiled_regions_from_a_trace_alone():
    frames = [CompiledFrame(frame=0, calls=5, time_us=5000.0, recompiles_seen=2)]
    a = _with_compiled(Compiled(present=True, nested_region_calls=4, eager_top_level_us=10_000.0, frames=frames))
    [breaks] = GraphBreaks().check(facts(analysis=a))
    [recompiles] = Recompiles().check(facts(analysis=a))
    assert breaks.evidence["source"] == "trace" and breaks.time_lost_s == 0.01 and "fullgraph=True" in breaks.fix
    assert recompiles.kind == "recompile" and recompiles.evidence["frames"][0]["recompiles_seen"] == 2
    assert recompiles.severity == "medium" and "mark_dynamic" in recompiles.fix
    # with the run's compile log, it alone speaks (lines and reasons)
    assert GraphBreaks().check(facts(analysis=a, compile=_compile())) == []
    assert Recompiles().check(facts(analysis=a, compile=_compile())) == []


def _recompile(count):
    return {"file": "/x/model.py", "line": 5, "function": "loss_fn", "label": "loss_fn", "count": count,
            "recompile_s": 0.8, "reasons": [{"what": "size of tensor 'pred' changed in dim 0 (8 -> 9)",
                                             "cause": "shape", "fix": "torch._dynamo.mark_dynamic(pred, 0) before the "
                                                                      "call", "guard": "", "count": count,
                                             "guards": []}]}


@fires("recompile")
def test_recompiles_with_the_guard_in_plain_words():
    [f] = Recompiles().check(facts(compile=_compile(recompiles=[_recompile(5)]), run_wall_s=4.0))
    assert "recompiled 5 times" in f.title and "mark_dynamic" in f.fix and f.time_lost_pct == 20.0


@silent("recompile")
def test_one_recompile_is_normal():
    assert Recompiles().check(facts(compile=_compile(recompiles=[_recompile(1)]), run_wall_s=4.0)) == []


@fires("compile_time")
def test_compile_time_is_a_share_of_the_run():
    [f] = CompileTime().check(facts(compile=_compile(total_s=3.0), run_wall_s=5.0))
    assert f.severity == "medium" and "60% of the run" in f.title


@fires("compile_time")
def test_compile_time_names_the_torch_compile_call_first(tmp_path):
    """Whether, what and how to compile is decided at the torch.compile call (a short job runs
    faster eagerly): the recorded call site, or in an older run the calls in the compiled
    function's file, come before the compiled function."""
    script = tmp_path / "job.py"
    script.write_text("import re, torch\npat = re.compile('x')\nclass M(torch.nn.Module):\n"
                      "    def forward(self, x):\n        return x\nm = torch.compile(M())\n")
    comp = dict(_compile(total_s=3.0), frames=[{"function": "forward", "file": str(script), "line": 4,
                                               "compilations": 1, "compile_s": 3.0}])
    site = {"what": "compile", "file": "/x/main.py", "line": 30, "function": "main", "backend": "inductor"}
    [f] = CompileTime().check(facts(compile=comp, run_wall_s=5.0, call_sites=[site]))
    assert [(w.file, w.line) for w in f.where] == [("/x/main.py", 30), (str(script), 4)]
    [f] = CompileTime().check(facts(compile=comp, run_wall_s=5.0))  # no call recorded: the source's
    assert [w.line for w in f.where] == [6, 4]  # torch.compile, not re.compile


@silent("compile_time")
def test_compile_time_silent_when_small():
    assert CompileTime().check(facts(compile=_compile(total_s=0.3), run_wall_s=5.0)) == []


@fires("graph_break")
def test_a_function_dynamo_gave_up_on_explains_its_eager_python():
    """forward() runs eagerly because of the break: its Python is the break's cost (compiled, it
    goes), ranked under the break, whose saving grows by it. Python elsewhere is not."""
    from torchneck.diagnose.causes import fold_symptoms
    from torchneck.model.findings import Finding, Where

    skipped = dict(_break(line=33), skipped_function=True)
    f_ = facts(analysis=_with_compiled(Compiled(present=True)), compile=_compile(breaks=[skipped]), run_wall_s=1.0)
    [brk] = GraphBreaks().check(f_)

    def python(line, function):
        return Finding(kind="python_hotspot", title="", severity="medium", time_lost_s=0.14, time_lost_pct=14.0,
                       saving_s=0.1, saving_pct=10.0, fix="",
                       where=[Where(file="/x/model.py", line=line, function=function)])

    inside, outside = python(30, "Denoiser.forward"), python(80, "main")
    assert fold_symptoms([brk, inside, outside], f_) == [brk, outside]
    assert brk.symptoms == [inside] and brk.saving_s >= 0.1
