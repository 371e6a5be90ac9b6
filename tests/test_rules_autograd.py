"""How the program drives autograd: a backward per loss through a retained, shared graph
(diagnose/rules/autograd.py), from the window's backward nodes (analysis/ops.backward_nodes)."""

from conftest import SCRIPTS, planted_line, read_report, torchneck
from rule_cases import analysis, facts, fires, silent

from torchneck.analysis.ops import backward_nodes
from torchneck.diagnose.rules.autograd import RepeatedBackward
from torchneck.model.analysis import OpRow

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


@silent("repeated_backward")
def test_repeated_backward_silent_without_retain_graph_or_repeats(tmp_path):
    """A backward that keeps no graph (a gradient penalty differentiates twice on purpose), nodes
    run once per forward call, or too little repeated work."""
    src = tmp_path / "train.py"
    src.write_text(TRAIN)
    assert RepeatedBackward().check(_facts(src, 6)) == []  # sum(losses).backward(): no retain_graph
    assert RepeatedBackward().check(_facts(src, 5, conv_runs=15)) == []
    assert RepeatedBackward().check(_facts(src, 5, window_us=10_000_000.0)) == []


def test_a_backward_per_loss_is_found_in_a_real_run(run_dir):
    script = SCRIPTS / "backward_per_loss.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "repeated_backward" and top["where"][0]["line"] == planted_line(script)
    assert "ConvolutionBackward0" in top["evidence"]["repeated_nodes"]
    assert 2.5 <= top["evidence"]["node_runs"] / top["evidence"]["forward_calls"] <= 3.5
