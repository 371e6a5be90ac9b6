"""Rules on how the loop is driven: data loading, the optimizer, zeroing gradients, inference."""

from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.rules.training import AutogradInInference, InputPipeline, SingleTensorOptimizer, ZeroGradKernels
from torchneck.model.analysis import Annotation, OpRow, TraceInfo


def _op(name, self_us, count=10):
    return OpRow(name=name, count=count, self_us=self_us, total_us=self_us, mean_us=self_us / count)


@fires("zero_grad")
def test_zero_grad_needs_the_optimizer_span():
    fills = [_op("aten::zero_", 6_000.0, count=50)]
    spans = [Annotation(name="Optimizer.zero_grad#SGD.zero_grad", count=5, total_us=7_000.0)]
    f_ = facts(analysis=analysis(by_name=fills, annotations=spans),
               call_sites=[{"what": "optimizer", "file": "/x/train.py", "line": 12, "function": "main"}])
    [f] = ZeroGradKernels().check(f_)
    assert f.kind == "zero_grad" and f.time_lost_s == 0.006 and f.where[0].line == 12
    assert "set_to_none=True" in f.fix


@fires("zero_grad")
def test_zero_grad_points_at_the_line_that_ran_the_fills():
    fills = [_op("aten::zero_", 6_000.0, count=50)]
    spans = [Annotation(name="Optimizer.zero_grad#SGD.zero_grad", count=5, total_us=7_000.0)]
    by_line = [{"op": "aten::zero_", "file": "/x/train.py", "line": 35, "function": "hook", "self_us": 6_000.0}]
    f_ = facts(analysis=analysis(by_name=fills, annotations=spans), ops_by_line=by_line,
               call_sites=[{"what": "optimizer", "file": "/x/train.py", "line": 12, "function": "main"}])
    [f] = ZeroGradKernels().check(f_)
    assert [w.line for w in f.where] == [35, 12]  # the zero_grad call, then the optimizer


@silent("zero_grad")
def test_zero_grad_silent_when_the_fills_are_elsewhere():
    assert ZeroGradKernels().check(facts(analysis=analysis(by_name=[_op("aten::zero_", 6_000.0)]))) == []


def _zero_grad_facts(by_line, lines):
    fills = [_op("aten::fill_", 800.0, count=19)]
    spans = [Annotation(name="Optimizer.zero_grad#SGD.zero_grad", count=2, total_us=3_000.0)]
    return facts(analysis=analysis(window_us=33_000.0, by_name=fills, annotations=spans), ops_by_line=by_line,
                 python={"window": {"sampled_s": 5.0, "lines": lines}})


@fires("zero_grad")
def test_zero_grad_measured_over_the_steady_state_when_the_window_came_early():
    """One head per task: in an early window few gradients exist and zeroing is 2 % of it; the
    sampler finds the zero_grad line at 26 % of the steady state, once every head has a gradient."""
    by_line = [{"op": "aten::fill_", "file": "/x/mt.py", "line": 35, "function": "zg", "self_us": 700.0},
               {"op": "aten::_foreach_zero_", "file": "/x/mt.py", "line": 35, "function": "zg", "self_us": 50.0}]
    lines = [{"file": "/x/mt.py", "line": 35, "function": "zg", "total_s": 1.3},
             {"file": "/x/mt.py", "line": 53, "function": "fit", "total_s": 2.0}]
    [f] = ZeroGradKernels().check(_zero_grad_facts(by_line, lines))
    assert f.where[0].line == 35 and abs(f.evidence["sampled_share"] - 0.26) < 1e-9
    assert abs(f.time_lost_s - 0.26 * 0.033) < 1e-12 and "26% of the steady state" in f.title


@silent("zero_grad")
def test_zero_grad_leaves_the_fills_of_a_backward_to_it():
    """Gradients of indexing are fills too: a backward line full of them is not zero_grad's."""
    by_line = [{"op": "aten::fill_", "file": "/x/g.py", "line": 72, "function": "main", "self_us": 6e6},
               {"op": "autograd::engine::evaluate_function: IndexBackward0", "file": "/x/g.py", "line": 72,
                "function": "main", "self_us": 3e4}]
    lines = [{"file": "/x/g.py", "line": 72, "function": "main", "total_s": 4.5}]
    assert ZeroGradKernels().check(_zero_grad_facts(by_line, lines)) == []  # the trace's 2 %: below 3 %


def _inference(by_name=("aten::addmm",)):
    return analysis(by_name=[_op(n, 1000.0) for n in by_name])


CLOCK = {"kind": "module", "top_module_calls": 200, "top_module_outputs_with_grad": 200}


@fires("autograd_in_inference")
def test_autograd_in_inference_names_the_model_call_even_without_samples_in_the_window():
    """On a fast machine (the H100 box) the whole window can pass between two sampler ticks: the
    line comes from the exact line spans then."""
    by_line = [{"op": "aten::addmm", "file": "/x/infer.py", "line": 8, "function": "<module>", "self_us": 900.0},
               {"op": "aten::randn", "file": "/x/infer.py", "line": 8, "function": "<module>", "self_us": 50.0},
               {"op": "aten::gelu", "file": "/x/other.py", "line": 3, "function": "f", "self_us": 100.0}]
    sampled = facts(analysis=_inference(), clock=CLOCK, ops_by_line=by_line,
                    python={"window": {"lines": [{"file": "/x/infer.py", "line": 9, "function": "<module>"}]}})
    unsampled = facts(analysis=_inference(), clock=CLOCK, ops_by_line=by_line, python={"window": {"lines": []}})
    assert AutogradInInference().check(sampled)[0].where[0].line == 9  # the sampler's line when it has one
    (f,) = AutogradInInference().check(unsampled)
    assert (f.where[0].file, f.where[0].line) == ("/x/infer.py", 8) and "inference_mode" in f.fix


@fires("autograd_in_inference")
def test_autograd_in_inference_costs_the_model_calls_not_the_hottest_line():
    """The capture counts the line that called the model: the estimate is a share of the ops
    run there, not of a heavier line beside it (a big matmul at line 9 is not inference)."""
    by_line = [{"op": "aten::addmm", "file": "/x/infer.py", "line": 8, "function": "<module>", "self_us": 1_000.0},
               {"op": "aten::mm", "file": "/x/infer.py", "line": 9, "function": "<module>", "self_us": 90_000.0}]
    clock = dict(CLOCK, top_module_sites=[{"file": "/x/infer.py", "line": 8, "function": "<module>", "calls": 8}])
    hot = {"window": {"lines": [{"file": "/x/infer.py", "line": 9, "function": "<module>"}]}}
    (f,) = AutogradInInference().check(facts(analysis=_inference(), clock=clock, ops_by_line=by_line, python=hot))
    assert f.where[0].line == 8
    assert f.time_lost_s == 1_000.0 / 1e6 * AutogradInInference.AUTOGRAD_OVERHEAD


INFERENCE_SCRIPT = """\
import contextlib, sys, torch
model = torch.nn.Linear(4, 4).eval()
with torch.inference_mode(False):
    for _ in range(10):
        y = model(torch.randn(2, 4))

def predict(x):
    return model(x)

with torch.no_grad() if "--fixed" in sys.argv else contextlib.nullcontext():
    for _ in range(10):
        predict(torch.randn(2, 4))

with open(__file__) as fh:
    for _ in range(10):
        out = model(torch.randn(2, 4))
"""


@fires("autograd_in_inference")
def test_autograd_in_inference_names_the_with_that_sets_the_grad_mode(tmp_path):
    """The line to change is the `with` that decides the grad mode around the model call (in
    its function or up its call path); with none, the loop to wrap follows the call."""
    script = tmp_path / "infer.py"
    script.write_text(INFERENCE_SCRIPT)
    f = str(script)

    def where(line, function="<module>", callers=()):
        clock = dict(CLOCK, top_module_sites=[{"file": f, "line": line, "function": function, "calls": 10}])
        sampled = {"window": {"lines": [{"file": f, "line": line, "function": function, "callers": list(callers)}]}}
        (found,) = AutogradInInference().check(facts(analysis=_inference(), clock=clock, python=sampled))
        return [w.line for w in found.where]

    assert where(5) == [3, 5]  # inference_mode(False) around the loop
    assert where(8, "predict", [{"file": f, "line": 12, "function": "<module>"}]) == [10, 8]  # the caller's with
    assert where(16) == [16, 15]  # no grad context (a file's): the call, then the loop to wrap


THREADS = {"thread_module_calls": 40, "thread_module_outputs_with_grad": 40, "thread_module_s": 8.0,
           "thread_module_threads": 2, "thread_module_sites": [{"file": "/x/s.py", "line": 61, "function": "worker"}]}


@fires("autograd_in_inference")
def test_autograd_in_inference_in_worker_threads_folds_the_main_thread_s_wait():
    """The capture counted the workers' model calls: the saving is a share of their time side by
    side (8 s over 2 threads), over the run; the main thread's wait for them is the symptom."""
    from torchneck.diagnose.engine import diagnose

    (f,) = AutogradInInference().check(facts(clock=THREADS, run_wall_s=10.0))
    assert f.time_lost_s == 4.0 * AutogradInInference.AUTOGRAD_OVERHEAD and f.evidence["share_of"] == "run_wall"
    assert f.where[0].line == 61 and "2 worker threads" in f.title
    waiting = {"window": {"sampled_s": 4.0, "lines": [{"file": "/x/s.py", "line": 87, "function": "main",
                                                       "total_s": 4.0, "self_s": 0.0, "pct": 97.0,
                                                       "outside_ops_s": 4.0, "waiting_s": 3.9}]}}
    found = diagnose(facts(analysis=analysis(), clock=THREADS, run_wall_s=10.0, python=waiting))
    assert [f.kind for f in found] == ["autograd_in_inference"], found
    assert [s.kind for s in found[0].symptoms] == ["python_hotspot"] and found[0].symptoms[0].where[0].line == 87


PROBE = {"module": "TransformerEncoder", "training": False, "device": "cpu", "rounds": 3,
         "seconds_with_grad": 0.5, "seconds_inference_mode": 0.2, "inference_over_grad": 0.4}


@fires("autograd_in_inference")
def test_autograd_in_inference_saving_is_the_probe_s_measured_share():
    """The autograd probe timed one of the model calls again after the run: 500 ms with autograd,
    200 ms under inference_mode (a Transformer's fast path): 60 % of the model calls' time, not
    the 10 % of a plain MLP; `measured`. Without a probe result (skipped, failed), the 10 %."""
    by_line = [{"op": "aten::addmm", "file": "/x/infer.py", "line": 8, "function": "<module>", "self_us": 1_000.0}]
    clock = dict(CLOCK, top_module_sites=[{"file": "/x/infer.py", "line": 8, "function": "<module>", "calls": 8}])

    def check(probe):
        env = {"settings_at_end": {"autograd_probe": probe}}
        (f,) = AutogradInInference().check(facts(analysis=_inference(), clock=clock, ops_by_line=by_line, env=env))
        return f

    f = check(PROBE)
    assert abs(f.time_lost_s - 1_000.0 / 1e6 * 0.6) < 1e-12 and f.confidence == "measured"
    assert f.evidence["estimated_overhead"] == 0.6 and f.evidence["probe"]["rounds"] == 3
    assert "500 ms with autograd, 200 ms under inference_mode" in f.title
    for unmeasured in (None, {"skipped": "a call takes 3.00 s (over 2 s)"}, {"error": "RuntimeError: shape"}):
        f = check(unmeasured)
        assert f.time_lost_s == 1_000.0 / 1e6 * AutogradInInference.AUTOGRAD_OVERHEAD
        assert f.confidence == "estimated" and f.evidence["probe"] is None and "ms" not in f.title
    assert check(dict(PROBE, inference_over_grad=1.1)).time_lost_s == 0.0  # inference mode no faster: no saving


@fires("autograd_in_inference")
def test_autograd_in_inference_in_worker_threads_uses_the_probe_too():
    env = {"settings_at_end": {"autograd_probe": PROBE}}
    (f,) = AutogradInInference().check(facts(clock=THREADS, run_wall_s=10.0, env=env))
    assert abs(f.time_lost_s - 4.0 * 0.6) < 1e-12 and f.confidence == "measured"
    assert abs(f.time_lost_pct - 24.0) < 1e-9


@silent("autograd_in_inference")
def test_autograd_in_inference_in_threads_silent_when_training_or_without_graphs():
    assert AutogradInInference().check(facts(clock=dict(THREADS, kind="optimizer"), run_wall_s=10.0)) == []
    no_grad = dict(THREADS, thread_module_outputs_with_grad=0)
    assert AutogradInInference().check(facts(clock=no_grad, run_wall_s=10.0)) == []
    few = dict(THREADS, thread_module_calls=3, thread_module_outputs_with_grad=3)
    assert AutogradInInference().check(facts(clock=few, run_wall_s=10.0)) == []


def test_relative_file_names_are_read_from_the_directory_the_script_ran_in(tmp_path, monkeypatch):
    """`torchneck run infer.py` names the file `infer.py`; `torchneck report RUN_DIR` made from
    another directory still reads it (the run's cwd), for the rule and the HTML's code lines."""
    from torchneck.diagnose.source import sources_relative_to
    from torchneck.report.html import code_context

    (tmp_path / "infer.py").write_text(INFERENCE_SCRIPT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    clock = dict(CLOCK, top_module_sites=[{"file": "infer.py", "line": 5, "function": "<module>", "calls": 10}])

    def where():
        (found,) = AutogradInInference().check(facts(analysis=_inference(), clock=clock))
        return [w.line for w in found.where]

    with sources_relative_to(str(tmp_path)):
        assert where() == [3, 5]  # the `with inference_mode(False)`, read from the run's directory
    assert where() == [5]  # not readable from here: the call's line stays
    assert code_context("infer.py", 3, around=0, base=str(tmp_path)) == [(3, "with torch.inference_mode(False):")]
    assert code_context("infer.py", 3, around=0) == []


@silent("autograd_in_inference")
def test_autograd_in_inference_silent_when_a_backward_ran_or_outputs_have_no_grad():
    training = _inference(by_name=("aten::addmm", "autograd::engine::evaluate_function: AddmmBackward0"))
    assert AutogradInInference().check(facts(analysis=training, clock=CLOCK)) == []
    no_grad = dict(CLOCK, top_module_outputs_with_grad=0)
    assert AutogradInInference().check(facts(analysis=_inference(), clock=no_grad)) == []


def _graph_nodes(nodes: int, by_name=("aten::addmm",)):
    a = _inference(by_name)
    a.trace = TraceInfo(path="t.json", grad_mode_ops=3 * nodes, autograd_nodes=nodes)
    return a


@fires("autograd_in_inference")
def test_autograd_in_inference_from_the_trace_s_sequence_numbers_under_another_clock():
    """An evaluation after training: the optimizer's clock timed the run (the module clock's
    counts are from before the window), but the window's ops built graph nodes, no backward."""
    clock = {"kind": "optimizer", "top_module_calls": 3, "top_module_outputs_with_grad": 3,
             "top_module_sites": [{"file": "/x/t.py", "line": 26, "function": "fit", "calls": 3}],
             "ticks": [100, 200, 300], "window_start_ns": 301}
    hot = {"window": {"lines": [{"file": "/x/m.py", "line": 17, "function": "forward"}]}}
    (f,) = AutogradInInference().check(facts(analysis=_graph_nodes(1_153), clock=clock, python=hot))
    assert f.where[0].line == 17  # the window's model call, not fit's from before the window
    assert "1,153 autograd graph nodes" in f.title and f.evidence["graph_nodes"] == 1_153
    (g,) = AutogradInInference().check(facts(analysis=_graph_nodes(80), clock={}, python=hot))  # `analyze`
    assert g.evidence["model_calls"] == 0


@silent("autograd_in_inference")
def test_autograd_in_inference_silent_on_grad_mode_ops_that_build_no_graph():
    """Tensors that need no gradient, in grad mode, repeat one sequence number: nothing built."""
    hot = {"window": {"lines": [{"file": "/x/m.py", "line": 17, "function": "forward"}]}}
    few = _graph_nodes(AutogradInInference.MIN_GRAPH_NODES - 1)
    assert AutogradInInference().check(facts(analysis=few, clock={}, python=hot)) == []
    trained = _graph_nodes(5_000, by_name=("aten::addmm", "autograd::engine::evaluate_function: AddmmBackward0"))
    assert AutogradInInference().check(facts(analysis=trained, clock={}, python=hot)) == []
    mid_step = {"kind": "optimizer", "ticks": [100, 200, 300, 400], "window_start_ns": 301}  # cut before backward
    assert AutogradInInference().check(facts(analysis=_graph_nodes(5_000), clock=mid_step, python=hot)) == []
    counted = facts(analysis=_graph_nodes(5_000), clock=dict(CLOCK, top_module_outputs_with_grad=0), python=hot)
    assert AutogradInInference().check(counted) == []  # the capture saw outputs without grad_fn: it decides


@fires("input_pipeline")
def test_input_pipeline_is_the_time_waiting_in_the_loader():
    a = analysis(annotations=[Annotation(name="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                                         count=5, total_us=30_000.0)])
    a.steps.breakdown_total_us = {"dataloader": 30_000.0, "cpu_exec": 70_000.0}
    loading = {"lines": [{"file": "/x/data.py", "line": 22, "function": "__getitem__", "total_s": 0.03}]}
    [f] = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading}))
    assert f.time_lost_s == 0.03 and round(f.time_lost_pct) == 30 and f.where[0].line == 22
    assert "num_workers" in f.fix and f.ops[0].startswith("enumerate(DataLoader)")


@silent("input_pipeline")
def test_input_pipeline_reads_every_step_not_a_window_holding_an_epoch_start():
    """Two profiled steps, one of them the epoch's first (a new iterator): 68 % of the window in
    the loader, but the sampler saw the loader take 2 % of the whole steady state."""
    a = analysis(steps=2)
    a.steps.breakdown_total_us = {"dataloader": 68_000.0, "cpu_exec": 32_000.0}
    python = {"window": {"sampled_s": 5.0, "lines": []}, "loading": {"sampled_s": 0.1, "lines": []}}
    assert InputPipeline().check(facts(analysis=a, python=python)) == []


@fires("input_pipeline")
def test_input_pipeline_share_of_the_whole_steady_state_and_iterator_churn():
    """The sampler's share over every step is the estimate; an iterator made every step is named."""
    a = analysis()
    a.steps.breakdown_total_us = {"dataloader": 30_000.0, "cpu_exec": 70_000.0}
    churn = {"file": "/x/t.py", "line": 58, "function": "main", "total_s": 4.0,
             "library": "_MultiProcessingDataLoaderIter.__del__ (dataloader.py)"}
    python = {"window": {"sampled_s": 5.0, "lines": []}, "loading": {"sampled_s": 4.0, "lines": [churn]}}
    [f] = InputPipeline().check(facts(analysis=a, python=python))
    assert round(f.time_lost_pct) == 80 and f.evidence["sampled_share"] == 0.8 and f.where[0].line == 58
    assert "iterator once" in f.fix and "num_workers" not in f.fix


@fires("input_pipeline")
def test_input_pipeline_names_the_dataset_line_that_calls_the_slow_helper():
    """A tokenizer's inner loop is where loading time goes; the __getitem__ line that tokenizes
    every epoch, up the one call path that carries it, is where the fix goes (as in
    a_trainer_tokenize: leaf lines in normalize(), the cause in data.py)."""
    a = analysis()
    a.steps.breakdown_total_us = {"dataloader": 40_000.0, "cpu_exec": 60_000.0}
    callers = [{"file": "/x/tok.py", "line": 59, "function": "encode", "share": 1.0},
               {"file": "/x/data.py", "line": 24, "function": "__getitem__", "share": 1.0}]
    lines = [{"file": "/x/tok.py", "line": ln, "function": "normalize", "total_s": 1.0, "callers": callers}
             for ln in (35, 33, 32, 38)]
    python = {"window": {"sampled_s": 5.0, "lines": []}, "loading": {"sampled_s": 2.0, "lines": lines}}
    [f] = InputPipeline().check(facts(analysis=a, python=python))
    assert [(w.file, w.line) for w in f.where] == [("/x/tok.py", 35), ("/x/tok.py", 33), ("/x/tok.py", 32),
                                                   ("/x/tok.py", 59), ("/x/data.py", 24)]
    no_path = {"window": {"sampled_s": 5.0, "lines": []},
               "loading": {"sampled_s": 2.0, "lines": [dict(ln, callers=[]) for ln in lines]}}
    [f] = InputPipeline().check(facts(analysis=a, python=no_path))  # many callers: the hot lines alone
    assert [w.line for w in f.where] == [35, 33, 32]


@silent("input_pipeline")
def test_input_pipeline_silent_when_the_loader_keeps_up():
    a = analysis()
    a.steps.breakdown_total_us = {"dataloader": 5_000.0, "cpu_exec": 95_000.0}  # 5 % < 10 %
    assert InputPipeline().check(facts(analysis=a)) == []


def _optimizer_steps(total_us):
    return [Annotation(name="Optimizer.step#Adam.step", count=5, total_us=total_us)]


@fires("optimizer")
def test_single_tensor_optimizer_with_many_parameters():
    sites = [{"what": "optimizer", "optimizer": "Adam", "params": 300, "foreach": None, "fused": None,
              "file": "/x/train.py", "line": 30, "function": "main"}]
    [f] = SingleTensorOptimizer().check(facts(analysis=analysis(annotations=_optimizer_steps(40_000.0)),
                                              call_sites=sites))
    assert abs(f.time_lost_s - 0.018) < 1e-12 and f.where[0].line == 30 and "foreach=True" in f.fix
    assert "Adam steps take 40%" in f.title


@fires("optimizer")
def test_single_tensor_optimizer_over_a_few_large_tensors():
    """Four embedding tables: a short loop, but each elementwise op is a pass over memory; fused
    makes one (measured 108 ms single-tensor vs 19 ms fused a step)."""
    few = [{"what": "optimizer", "optimizer": "Adam", "params": 4, "foreach": False, "fused": None,
            "file": "/x/t.py", "line": 3, "function": "m"}]
    [f] = SingleTensorOptimizer().check(facts(analysis=analysis(annotations=_optimizer_steps(70_000.0)),
                                              call_sites=few))
    assert f.where[0].line == 3 and "fused=True" in f.fix and "70%" in f.title


@silent("optimizer")
def test_optimizer_silent_when_multi_tensor_or_a_small_step():
    foreach = analysis(annotations=_optimizer_steps(40_000.0), by_name=[_op("aten::_foreach_add_", 1000.0)])
    assert SingleTensorOptimizer().check(facts(analysis=foreach)) == []
    fused = [{"what": "optimizer", "optimizer": "Adam", "params": 4, "fused": True, "file": "/x/t.py", "line": 3,
              "function": "m"}]
    assert SingleTensorOptimizer().check(facts(analysis=analysis(annotations=_optimizer_steps(40_000.0)),
                                               call_sites=fused)) == []
    # the span says 87 %, the sampler saw the opt.step() line take 1 % of every step: not the optimizer
    stray = [dict(fused[0], fused=None, params=2)]
    lines = [{"file": "/x/t.py", "line": 19, "function": "m", "total_s": 0.05,
              "library": "Optimizer.profile_hook_step.<locals>.wrapper (optimizer.py)"},
             {"file": "/x/t.py", "line": 16, "function": "m", "total_s": 4.0, "library": ""}]
    assert SingleTensorOptimizer().check(facts(analysis=analysis(annotations=_optimizer_steps(87_000.0)),
                                               call_sites=stray,
                                               python={"window": {"sampled_s": 5.0, "lines": lines}})) == []
    small = [dict(fused[0], fused=None, params=300)]
    assert SingleTensorOptimizer().check(facts(analysis=analysis(annotations=_optimizer_steps(10_000.0)),
                                               call_sites=small)) == []  # 10 % < 15 %
