"""How the program drives autograd: a backward per loss through a retained, shared graph
(diagnose/rules/autograd.py), from the window's backward nodes (analysis/ops.backward_nodes)."""

from conftest import SCRIPTS, planted_line, read_report, torchneck
from rule_cases import analysis, facts, fires, silent

from torchneck.analysis.ops import backward_nodes
from torchneck.diagnose.rules.autograd import AutogradInInference, RepeatedBackward, UnsteppedGradients
from torchneck.model.analysis import OpRow, TraceInfo

TRAIN = '''def step(trunk, heads, x):
    feats = trunk(x)
    losses = [h(feats).sum() for h in heads]
    for loss in losses:
        loss.backward(retain_graph=True)
    sum(losses).backward()
'''
NODE = "autograd::engine::evaluate_function: "


def _row(name, count, total_us):
    return OpRow(name=name, count=count, self_us=total_us / 10, total_us=total_us, mean_us=total_us / count)


def _facts(path, line, conv_runs=60, window_us=100_000.0):
    """Five steps of a trunk of 3 convolutions (15 forward calls) whose node ran `conv_runs`
    times (40 ms), and heads' Linear nodes run once per call, at the backward line `line`."""
    ops = [_row("aten::convolution", 15, 20_000.0), _row("aten::addmm", 15, 2_000.0),
           _row(NODE + "ConvolutionBackward0", conv_runs, 40_000.0), _row(NODE + "AddmmBackward0", 15, 3_000.0),
           _row(NODE + "torch::autograd::AccumulateGrad", 200, 1_000.0)]
    by_line = [{"op": NODE + "ConvolutionBackward0", "file": str(path), "line": line, "function": "step",
                "self_us": 4_000.0}]
    return facts(analysis=analysis(window_us=window_us, backward_nodes=backward_nodes(ops)), ops_by_line=by_line)


def test_backward_nodes_map_to_their_forward_ops():
    ops = [_row("aten::convolution", 15, 1.0), _row("aten::native_batch_norm", 15, 1.0),
           _row(NODE + "ConvolutionBackward0", 60, 9.0), _row(NODE + "NativeBatchNormBackward0", 60, 5.0),
           _row(NODE + "MulBackward0", 4, 1.0), _row(NODE + "torch::autograd::AccumulateGrad", 9, 1.0)]
    nodes = {n.node: (n.forward_op, n.count, n.forward_count) for n in backward_nodes(ops)}
    assert nodes == {"ConvolutionBackward0": ("aten::convolution", 60, 15),
                     "NativeBatchNormBackward0": ("aten::native_batch_norm", 60, 15),
                     "MulBackward0": ("aten::mul", 4, 0)}


@fires("repeated_backward")
def test_repeated_backward_names_the_backward_that_retains_its_graph(tmp_path):
    """The convolutions' node ran 4 times per forward call: 3/4 of its 40 ms is backward done
    again; the line passing retain_graph=True, then the loop over the losses."""
    src = tmp_path / "train.py"
    src.write_text(TRAIN)
    [f] = RepeatedBackward().check(_facts(src, 5))
    assert [w.line for w in f.where] == [5, 4] and f.evidence["in_loop"]
    assert abs(f.time_lost_s - 0.030) < 1e-9 and abs(f.time_lost_pct - 30.0) < 1e-6
    assert f.evidence["repeated_nodes"] == ["ConvolutionBackward0"] and "4.0 times" in f.title
    assert "call backward once" in f.fix


ROLLOUT = """\
def fit(model, opt, ref, state, windows, fixed=False):
    for w in range(windows):
        pred, state_end = model.rollout(state, 20)
        loss = (pred - ref[w]).pow(2).mean()
        loss.backward(retain_graph=True)
        total = loss.item()
        state = state_end
        if fixed:
            state = state.detach()
    opt.step()
def fit_detached(model, ref, state, windows):
    for w in range(windows):
        pred, state_end = model.rollout(state, 20)
        pred.sum().backward(retain_graph=True)
        state = state_end.detach()
"""


@fires("repeated_backward")
def test_repeated_backward_of_a_state_carried_between_windows_names_the_hand_over(tmp_path):
    """A rollout fitted window by window, each window's final state handed to the next without
    `.detach()` (`state = state_end`): each backward runs through every earlier window again, and
    `retain_graph=True` only stops it failing. The hand-over is the line to change; a conditional
    detach (the fixed branch) does not count, an unconditional one does."""
    src = tmp_path / "fit.py"
    src.write_text(ROLLOUT)
    [f] = RepeatedBackward().check(_facts(src, 5))
    assert [w.line for w in f.where] == [7, 5, 2] and f.evidence["carried"] == ["state"]
    assert "Line 7 hands this pass's state" in f.fix and ".detach()" in f.fix
    [f] = RepeatedBackward().check(_facts(src, 14))
    assert f.evidence["carried_at"] is None and "call backward once" in f.fix


@silent("repeated_backward")
def test_repeated_backward_silent_without_retain_graph_or_repeats(tmp_path):
    """A backward that keeps no graph (a gradient penalty differentiates twice on purpose), nodes
    run once per forward call, or too little repeated work."""
    src = tmp_path / "train.py"
    src.write_text(TRAIN)
    assert RepeatedBackward().check(_facts(src, 6)) == []  # sum(losses).backward(): no retain_graph
    assert RepeatedBackward().check(_facts(src, 5, conv_runs=15)) == []
    assert RepeatedBackward().check(_facts(src, 5, window_us=10_000_000.0)) == []


def _top_of_real_run(run_dir, name: str) -> dict:
    """The top finding of `torchneck run` on tests/scripts/`name`, which must be at its planted line."""
    script = SCRIPTS / name
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["where"][0]["line"] == planted_line(script), top
    return top


def test_a_backward_per_loss_is_found_in_a_real_run(run_dir):
    top = _top_of_real_run(run_dir, "backward_per_loss.py")
    assert top["kind"] == "repeated_backward"
    assert "ConvolutionBackward0" in top["evidence"]["repeated_nodes"]
    assert 2.5 <= top["evidence"]["node_runs"] / top["evidence"]["forward_calls"] <= 3.5


def _op(name, self_us, count=10):
    return OpRow(name=name, count=count, self_us=self_us, total_us=self_us, mean_us=self_us / count)


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



def _after_training(calls=400, seconds=6.0, chained=399, reached=0, kind="optimizer"):
    since = {"calls": calls, "seconds": seconds, "chained": chained, "backward_reached": reached,
             "sites": [{"file": "/x/ddpm.py", "line": 66, "function": "sample", "calls": calls}]}
    return {"clock": {"kind": kind}, "run_wall_s": 10.0,
            "env": {"settings_at_end": {"autograd_probe": dict(PROBE, seconds_with_grad=0.005,
                                                               seconds_inference_mode=0.004,
                                                               inference_over_grad=0.8, since_last_step=since)}}}


@fires("autograd_in_inference")
def test_autograd_in_inference_after_training_costs_the_chained_graphs_kept():
    """A program that trained, then sampled 400 times from the model's own output with autograd
    on: the calls took 6 s where 400 calls under inference mode take 1.6 s (the probe's call), so
    4.4 s of the 10 s run; not chained, the probe's 20 % of the calls' 6 s."""
    (f,) = AutogradInInference().check(facts(analysis=_inference(), **_after_training()))
    assert abs(f.time_lost_s - (6.0 - 400 * 0.004)) < 1e-9 and abs(f.time_lost_pct - 44.0) < 1e-9
    assert f.where[0].line == 66 and f.evidence["after_training"] and f.evidence["chained"] == 399
    assert "after the last optimizer step" in f.title and "previous call's graph" in f.title
    assert "after training" in f.fix and ".detach()" in f.fix
    (f,) = AutogradInInference().check(facts(analysis=_inference(), **_after_training(chained=0)))
    assert abs(f.time_lost_s - 6.0 * 0.2) < 1e-9 and ".detach()" not in f.fix


@silent("autograd_in_inference")
def test_autograd_in_inference_after_training_silent_when_a_backward_used_the_graphs():
    """An attack or a gradient penalty after training goes backward through its calls' graphs;
    a handful of calls is a last logged loss; a program that never trained is the other path's."""
    for case in (_after_training(reached=400), _after_training(calls=5, chained=4)):
        assert AutogradInInference().check(facts(analysis=_inference(), **case)) == []
    untrained = _after_training(kind="dataloader")
    assert all(not f.evidence.get("after_training")
               for f in AutogradInInference().check(facts(analysis=_inference(), **untrained)))


def _unstepped(numel=90_000, total=100_000, backward_us=60_000.0):
    ops = [_row("aten::convolution", 10, 20_000.0), _row(NODE + "ConvolutionBackward0", 10, backward_us)]
    found = {"module": "Probe", "params": 4, "numel": numel, "with_grad_numel": total,
             "names": ["encoder.0.weight", "encoder.0.bias"]}
    sites = [{"what": "optimizer", "file": "/x/probe.py", "line": 12, "function": "train", "optimizer": "AdamW"}]
    return facts(analysis=analysis(backward_nodes=backward_nodes(ops)), call_sites=sites,
                 env={"settings_at_end": {"unstepped_gradients": found}})


@fires("unstepped_gradients")
def test_unstepped_gradients_cost_their_share_of_the_backward():
    """90 % of the elements that got a gradient are in no optimizer: 90 % of the backward's 60 ms."""
    [f] = UnsteppedGradients().check(_unstepped())
    assert abs(f.time_lost_s - 0.054) < 1e-9 and f.where[0].line == 12
    assert "4 parameters (90% of the elements" in f.title and "encoder.0.weight" in f.fix
    assert "requires_grad_(False)" in f.fix


def test_unstepped_gradients_of_a_whole_top_level_module_lead_with_the_line_calling_it():
    """A distillation's teacher left out of the optimizer (its parameters named by its class): the
    line calling the teacher, where torch.no_grad() goes, comes before the optimizer's line; a
    student called elsewhere is not named."""
    f = _unstepped()
    f.env["settings_at_end"]["unstepped_gradients"]["names"] = ["Teacher.pos", "Teacher.blocks.0.w"]
    f.env["settings_at_end"]["unstepped_gradients"]["module"] = "Student + Teacher"
    f.clock = {"top_module_sites": [
        {"file": "/x/probe.py", "line": 30, "function": "step", "calls": 5, "module": "Student"},
        {"file": "/x/probe.py", "line": 32, "function": "step", "calls": 5, "module": "Teacher"}]}
    [finding] = UnsteppedGradients().check(f)
    assert [w.line for w in finding.where] == [32, 12]
    # part of the one model the step runs (a backbone left out): the optimizer's line alone
    f.env["settings_at_end"]["unstepped_gradients"]["module"] = "Teacher"
    [finding] = UnsteppedGradients().check(f)
    assert [w.line for w in finding.where] == [12]


@silent("unstepped_gradients")
def test_unstepped_gradients_silent_for_a_few_stray_parameters_or_none():
    assert UnsteppedGradients().check(_unstepped(numel=5_000)) == []
    assert UnsteppedGradients().check(_unstepped(backward_us=1_000.0)) == []
    assert UnsteppedGradients().check(facts(analysis=analysis())) == []


def test_the_capture_notes_gradients_no_optimizer_steps():
    """At each optimizer's first step, the trained model's parameters holding a gradient outside
    every optimizer so far; a second optimizer (a GAN's other half) takes its own back."""
    import torch

    from torchneck.capture.autograd_probe import RememberedCall
    from torchneck.capture.unstepped import UnsteppedGradients as Capture

    calls = RememberedCall()
    capture = Capture(calls)
    capture.install()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2), torch.nn.Linear(2, 2))
        head, other = torch.optim.SGD(model[2].parameters(), lr=0.1), torch.optim.SGD(model[1].parameters(), lr=0.1)
        for opt in (head, head, other):
            out = model(torch.randn(4, 8))
            calls.remember(model, (), {}, 0.01, out)
            out.sum().backward()
            opt.step()
    finally:
        capture.uninstall()
    found = capture.summary()
    assert found["names"] == ["Sequential.0.weight", "Sequential.0.bias"] and found["numel"] == 8 * 16 + 16
    assert found["with_grad_numel"] == sum(p.numel() for p in model.parameters())


def test_a_backbone_left_out_of_the_optimizer_is_found(run_dir):
    top = _top_of_real_run(run_dir, "frozen_by_optimizer.py")
    assert top["kind"] == "unstepped_gradients"
    assert top["evidence"]["names"][:2] == ["Sequential.0.0.weight", "Sequential.0.0.bias"]


def test_a_frozen_encoder_called_before_the_head_is_noted():
    """`head(encoder(x))`: two top-level calls; the encoder, not the last one called, is the part
    the optimizer leaves out."""
    import torch

    from torchneck.capture.autograd_probe import RememberedCall
    from torchneck.capture.unstepped import UnsteppedGradients as Capture

    calls = RememberedCall()
    capture = Capture(calls)
    capture.install()
    try:
        encoder, head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 2)
        opt = torch.optim.SGD(head.parameters(), lr=0.1)
        features = encoder(torch.randn(4, 8))
        calls.remember(encoder, (), {}, 0.01, features)
        out = head(features)
        calls.remember(head, (), {}, 0.01, out)
        out.sum().backward()
        opt.step()
    finally:
        capture.uninstall()
    assert capture.summary()["names"] == ["Linear.weight", "Linear.bias"]
    assert capture.summary()["numel"] == 8 * 16 + 16 and capture.summary()["module"] == "Linear + Linear"
