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
def test_a_recompile_limit_under_dynamic_false_names_that_compile_call(tmp_path):
    """Batches of many lengths from a generator (no one line sets the size) given to a function
    compiled with `dynamic=False`: the compile call is the line to change, and its fix says so; a
    compile call without it is not named."""
    src = tmp_path / "ev.py"
    src.write_text("import torch\ndef loss_fn(pred):\n    return pred.sum()\n"
                   "fast = torch.compile(loss_fn, dynamic=False)\nplain = torch.compile(loss_fn)\n")
    rec = {**_recompile(7), "file": str(src), "line": 2}
    sites = [{"what": "compile", "file": str(src), "line": 4, "function": "<module>"}]
    run = facts(compile=_compile(recompiles=[rec], limit_hits=[rec]), run_wall_s=4.0, call_sites=sites)
    [f] = Recompiles().check(run)
    assert [w.line for w in f.where] == [4, 2] and f.fix.startswith("The torch.compile call passes dynamic=False")
    assert f.severity == "high" and f.time_lost_s == 0.8  # the recompiles alone: no samples of its eager runs
    eager = {"window": {"sampled_s": 3.0, "lines": [
        {"file": str(src), "line": 3, "function": "loss_fn", "total_s": 1.5, "self_s": 0.2},
        {"file": str(src), "line": 3, "function": "other", "total_s": 9.0, "self_s": 9.0}]}}
    [f] = Recompiles().check(facts(compile=run.compile, run_wall_s=4.0, call_sites=sites, python=eager))
    assert abs(f.time_lost_s - 2.3) < 1e-9 and f.confidence == "upper_bound"  # past the limit it ran eagerly
    sites[0]["line"] = 5
    [f] = Recompiles().check(run)
    assert [w.line for w in f.where] == [2] and "dynamic=False" not in f.fix


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


@fires("graph_break")
def test_a_function_left_uncompiled_costs_half_its_sampled_share_of_the_window():
    """No compiled graph of forward() to compare with: its sampled share of the steady state (6
    of 8 s) is all eager time in the window; compiling it is assumed to save half. Without
    samples of it the break keeps no number (and its medium severity)."""
    skipped = dict(_break(line=25), skipped_function=True)
    phases = {"phases": {"window_s": 0.1, "startup_s": 1.0}}
    python = {"window": {"sampled_s": 8.0, "lines": [],
                         "functions": [{"file": "model.py", "function": "Denoiser.forward", "total_s": 6.0},
                                       {"file": "model.py", "function": "<module>", "total_s": 2.0}]}}
    f_ = facts(analysis=_with_compiled(Compiled(present=True)), compile=_compile(breaks=[skipped]), phases=phases,
               python=python, run_wall_s=10.0)
    [brk] = GraphBreaks().check(f_)
    assert abs(brk.time_lost_s - f_.window_s * 6 / 8 * GraphBreaks.UNCOMPILED_SAVING) < 1e-9
    assert brk.confidence == "estimated" and f_.window_s > 0
    unsampled = dict(python, window={"sampled_s": 8.0, "lines": [], "functions": []})
    [bare] = GraphBreaks().check(facts(analysis=_with_compiled(Compiled(present=True)),
                                       compile=_compile(breaks=[skipped]), phases=phases, python=unsampled))
    assert bare.time_lost_s == 0.0 and bare.severity == "medium"


BUCKETED = '''import torch


class RNN(torch.nn.Module):
    def forward(self, tokens):
        return tokens


def batches(corpus, size, pad_to):
    for start in range(0, len(corpus), size):
        chunk = corpus[start:start + size]
{width}
        ids = torch.full((len(chunk), width), 0)
        yield ids


def main(corpus):
    compiled = torch.compile(RNN())
    for ids in batches(corpus, 64, None):
        compiled(ids[:, :-1].to("cpu"))
'''


def _size_recompile(script, dim=1, sizes=("4", "5", "6")):
    guard = f"tensor 'tokens' size mismatch at index {dim}. expected 4, actual 5"
    reason = {"what": f"size of `tokens` (argument of forward()) changed in dim {dim} (4 -> 5 -> 6)",
              "cause": "shape", "fix": f"Call torch._dynamo.mark_dynamic(tokens, {dim}) on the tensor before the "
                                       "compiled call", "guard": guard, "count": 2, "guards": [guard],
              "sizes": list(sizes)}
    return {"file": str(script), "line": 5, "function": "forward", "label": "forward()", "count": 2,
            "recompile_s": 0.8, "reasons": [reason]}


def _recompile_in(script, source, **kwargs):
    script.write_text(source)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "torch.compile(" in text)
    site = {"what": "compile", "file": str(script), "line": line, "function": "main", "backend": "inductor"}
    comp = _compile(recompiles=[_size_recompile(script, **kwargs)])
    [f] = Recompiles().check(facts(compile=comp, run_wall_s=4.0, call_sites=[site]))
    return f


@fires("recompile")
def test_a_changing_size_is_followed_back_to_the_line_that_sets_it(tmp_path):
    """The compiled call's argument (`ids[:, :-1]` keeps dim 1) comes from a `for` over the user's
    generator, whose `yield` is a torch.full whose width is assigned a line above: that line,
    where every batch gets its own width, is named first. The same dim recompiling for a third
    size means the code specialises on it: mark_dynamic cannot help, fixed sizes can."""
    width = "        width = pad_to or max(len(s) for s in chunk)"
    f = _recompile_in(tmp_path / "rnn.py", BUCKETED.format(width=width))
    assert [(w.line, w.function) for w in f.where] == [(12, "batches"), (5, "forward")]
    assert f.title.endswith("; the size is set at rnn.py:12")
    assert f.evidence["specialised"] and f.fix.startswith("Give `tokens` one fixed size in dim 1")
    assert "(rnn.py:12: pad to one fixed size" in f.fix and "nor dynamic=True keeps one graph" in f.fix
    # dim 0 is the factory's own expression (len(chunk)); two sizes only: dynamo may still make it dynamic
    f = _recompile_in(tmp_path / "rnn0.py", BUCKETED.format(width=width), dim=0, sizes=("4", "5"))
    assert [w.line for w in f.where] == [13, 5] and not f.evidence["specialised"]
    assert "mark_dynamic(tokens, 0)" in f.fix and f.fix.endswith("The size is set at line 13 (rnn0.py).")


@fires("recompile")
def test_an_unclear_size_keeps_the_compiled_function(tmp_path):
    """A width set in either branch of an `if` may come from either: no line is named, and the fix
    stays torch's own."""
    width = "        if pad_to:\n            width = pad_to\n        else:\n            width = max(map(len, chunk))"
    f = _recompile_in(tmp_path / "rnn.py", BUCKETED.format(width=width))
    assert [w.line for w in f.where] == [5] and f.evidence["size_set_at"] is None
    assert f.fix.startswith("Call torch._dynamo.mark_dynamic(tokens, 1)") and "set at" not in f.title


def test_size_origin_through_a_method_a_parameter_and_another_module(tmp_path):
    """`self.fetch(step)` returns a helper's tensor from a module next to the script; the helper's
    size is its parameter, set by the caller's assignment."""
    from torchneck.diagnose.source import size_origin

    (tmp_path / "feed.py").write_text("import torch\n\n\ndef make(rows, dim):\n    return torch.randn(rows, dim)\n")
    script = tmp_path / "train.py"
    script.write_text("from feed import make\n\n\nclass T:\n    def fetch(self, step):\n"
                      "        n = 8 + step % 4\n        return make(n, 32).cuda()\n\n"
                      "    def step(self, step):\n        x = self.fetch(step)\n        return self.model(x)\n")
    assert size_origin(str(script), 11, "self.model", 0, "x", 0) == (str(script), 6)
    assert size_origin(str(script), 11, "self.model", 0, "x", 1) is None  # a constant: not what changes


def test_size_guards_name_the_argument_and_dim():
    """dynamo's size-mismatch message, and an equality on an expression of one size (the graph
    specialised on its value); a guard on two sizes or on no size names none."""
    from torchneck.diagnose.rules.compile import _guarded_size

    assert _guarded_size("tensor 'tokens' size mismatch at index 1. expected 4, actual 5") == ("tokens", 1, False)
    assert _guarded_size("(inputs.size()[0] // 8) == 3") == ("inputs", 0, True)
    assert _guarded_size("L['x'].size()[1] == 7") == ("x", 1, True)
    assert _guarded_size("self.w.size()[0] == 3") is None and _guarded_size("x.size()[0] == y.size()[1]") is None
    assert _guarded_size("n == 3") is None
