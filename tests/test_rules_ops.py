"""Rules on host ops: one dominant op, tiny ops, float64 data, a conv bias BatchNorm cancels."""

import pytest
from conftest import SCRIPTS, planted_line, read_report, torchneck
from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.rules.conv import ConvBiasBeforeBatchNorm
from torchneck.diagnose.rules.dispatch import DispatchOverhead
from torchneck.diagnose.rules.dtype import DtypeFloat64
from torchneck.diagnose.rules.ops import OpHotspot
from torchneck.diagnose.rules.rebuilt import RebuiltTensor
from torchneck.model.analysis import CodeSite, ConvBiasBn, Dispatch, Float64Ops, OpRow
from torchneck.model.findings import Where


def _op(name, self_us, count=10, shapes=None):
    return OpRow(name=name, count=count, self_us=self_us, total_us=self_us, mean_us=self_us / count, shapes=shapes)


@fires("op_hotspot")
def test_op_hotspot_avoidable_data_movement_is_a_finding_the_model_s_compute_is_context():
    [copy] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::copy_", 80_000.0)])))
    assert copy.severity == "medium" and copy.evidence["avoidable"] is True  # at most medium: an upper bound
    assert copy.confidence == "upper_bound" and "copies and conversions" in copy.fix
    [conv] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::mkldnn_convolution", 80_000.0)])))
    assert conv.severity == "info" and "the model's compute" in conv.title  # where time goes, not a problem


@fires("op_hotspot")
def test_op_hotspot_names_a_top_k_done_by_sorting_everything(tmp_path):
    """`d.argsort(1)[:, :k]`: a full sort to keep k columns; topk is the cheaper op."""
    src = tmp_path / "knn.py"
    src.write_text("def knn(d, k):\n    return d.argsort(dim=1)[:, :k]\n")
    by_line = [{"op": "aten::sort", "file": str(src), "line": 2, "function": "knn", "self_us": 80_000.0}]
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::sort", 80_000.0)]), ops_by_line=by_line))
    assert f.evidence["top_k_by_sort"] == 2 and f.where[0].line == 2 and "torch.topk" in f.fix
    assert "sorts a whole tensor to keep its first elements" in f.title


SOLVER = """\
import torch
class Solver:
    def __init__(self, a):
        self.A = a
        self.B = a.clone()
    def step(self, u):
        return torch.linalg.solve(self.A, u)
    def relax(self, u):
        self.B = self.B * 0.9
        return torch.linalg.solve(self.B, u)
def run(a, u):
    m = a @ a.T
    for _ in range(100):
        u = torch.linalg.solve(m, u)
        m = m + 1
        u = torch.cholesky_solve(u, torch.linalg.cholesky(a))
    return u
"""


@fires("op_hotspot")
def test_op_hotspot_names_a_matrix_factorised_again_on_every_call(tmp_path):
    """`torch.linalg.solve(self.A, rhs)` per time step, `self.A` set once in `__init__`: the LU
    factorisation (the top op) is redone 141 times for the same matrix. Its whole time goes with
    a factorisation done once, so the saving is measured, with the copies of the matrix the LU
    works on; the solves with the factors stay. A float64 finding on the same op does not fold it
    (its fix saves the time in either dtype)."""
    src = tmp_path / "solver.py"
    src.write_text(SOLVER)
    by_line = [{"op": op, "file": str(src), "line": 7, "function": "Solver.step", "self_us": us}
               for op, us in (("aten::linalg_lu_factor_ex", 80_000.0), ("aten::copy_", 30_000.0),
                              ("aten::linalg_lu_solve", 5_000.0))]
    f_ = facts(analysis=analysis(by_name=[_op("aten::linalg_lu_factor_ex", 80_000.0, count=141)],
                                 float64=Float64Ops(recorded=True, self_us=95_000.0, ops=[
                                     _op("aten::linalg_lu_factor_ex", 80_000.0, count=141)])),
               ops_by_line=by_line)
    [f] = OpHotspot().check(f_)
    assert f.evidence["refactorised"] == "self.A" and f.evidence["refactorised_at"] == 7 and f.where[0].line == 7
    assert f.time_lost_s == pytest.approx(0.110)  # the LU and its copies, not the solve
    assert f.confidence == "measured" and f.severity != "info" and "torch.linalg.lu_factor" in f.fix
    [dtype] = DtypeFloat64().check(f_)
    assert DtypeFloat64().explained(dtype, f, f_) is None


def test_a_matrix_is_invariant_only_when_nothing_between_the_calls_changes_it(tmp_path):
    from torchneck.diagnose.idioms import factorises_invariant_matrix

    src = tmp_path / "solver.py"
    src.write_text(SOLVER)
    assert factorises_invariant_matrix(str(src), 7) == "self.A"
    assert factorises_invariant_matrix(str(src), 10) is None  # relax() changes self.B
    assert factorises_invariant_matrix(str(src), 14) is None  # m changes in the loop
    assert factorises_invariant_matrix(str(src), 16) == "a"  # a is the loop's constant
    flow = tmp_path / "flow.py"
    flow.write_text("import torch\nclass Flow(torch.nn.Module):\n    def __init__(self, c):\n"
                    "        self.weight = torch.nn.Parameter(torch.eye(c))\n"
                    "    def forward(self, x):\n        return x @ torch.inverse(self.weight)\n"
                    "def loop(A, b):\n    for it in range(10):\n        A[0, 0] += 1.0\n"
                    "        b = torch.linalg.solve(A, b)\n")
    assert factorises_invariant_matrix(str(flow), 6) is None  # a trained parameter changes every step
    assert factorises_invariant_matrix(str(flow), 10) is None  # changed in place in the loop


def test_a_top_k_by_a_full_sort_split_over_two_statements(tmp_path):
    """`order = scores.argsort(...)` whose only uses keep a prefix (`order[:, :k]`); a sort also
    used whole, or bound again, is not a top-k."""
    from torchneck.diagnose.idioms import sorted_then_sliced

    src = tmp_path / "recs.py"
    src.write_text("import torch\ndef top(scores, k):\n    order = torch.argsort(scores, dim=1, descending=True)\n"
                   "    idx = order[:, :k]\n    return idx, scores.gather(1, order[:, :k])\n"
                   "def ranks(scores):\n    order = scores.argsort(1)\n    return order[:, :5], order\n"
                   "def again(scores):\n    order = scores.argsort(1)\n    order = order.flip(1)\n"
                   "    return order[:, :5]\n")
    assert sorted_then_sliced(str(src), 3) and not sorted_then_sliced(str(src), 7)
    assert not sorted_then_sliced(str(src), 10)


@fires("op_hotspot")
def test_op_hotspot_names_the_dense_gradient_of_a_large_embedding_table(tmp_path):
    """A 1,000,000-row EmbeddingBag's dense gradient is zero-filled every step inside its backward:
    the module's constructor is where `sparse=True` goes, and the whole backward node is the saving."""
    src = tmp_path / "rec.py"
    src.write_text("import torch\nclass R(torch.nn.Module):\n    def __init__(self):\n"
                   "        self.items = torch.nn.EmbeddingBag(1000000, 32, mode='mean')\n"
                   "    def forward(self, h, o):\n        return self.items(h, o)\n")
    node = "autograd::engine::evaluate_function: EmbeddingBagBackward0"
    fill = _op("aten::fill_", 60_000.0, shapes="[[1000000, 32], []]")
    a = analysis(by_name=[fill, OpRow(name=node, count=5, self_us=1_000.0, total_us=75_000.0, mean_us=15_000.0)],
                 by_shape=[fill])
    by_line = [{"op": "aten::_embedding_bag", "file": str(src), "line": 6, "function": "forward", "self_us": 900.0},
               {"op": "aten::fill_", "file": str(src), "line": 20, "function": "main", "self_us": 60_000.0}]
    [f] = OpHotspot().check(facts(analysis=a, ops_by_line=by_line))
    assert f.evidence["dense_embedding_rows"] == 1_000_000 and f.evidence["embedding_at"] == 4
    assert [w.line for w in f.where][:2] == [4, 6] and "sparse=True" in f.fix and "line 4" in f.fix
    assert abs(f.time_lost_s - 0.075) < 1e-12  # the backward node's whole time
    small = _op("aten::fill_", 60_000.0, shapes="[[5000, 32], []]")  # a small table: not this
    a.ops.by_name[0], a.ops.by_shape = small, [small]
    [f] = OpHotspot().check(facts(analysis=a, ops_by_line=by_line))
    assert f.evidence["dense_embedding_rows"] is None


@fires("op_hotspot")
def test_op_hotspot_names_a_solve_done_by_an_inverse(tmp_path):
    """`inv(A) @ b`: torch inverts by an LU factorisation and a solve against the identity, then
    multiplies; torch.linalg.solve does one factorisation and a substitution."""
    src = tmp_path / "als.py"
    src.write_text("import torch\ndef step(A, b):\n    return (torch.linalg.inv(A) @ b[..., None])[..., 0]\n"
                   "def other(A, b):\n    return torch.linalg.inv(A)\n")
    by_line = [{"op": "aten::linalg_lu_solve", "file": str(src), "line": 3, "function": "step", "self_us": 60_000.0}]
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::linalg_lu_solve", 60_000.0)]),
                                  ops_by_line=by_line))
    assert f.evidence["inverse_at"] == 3 and f.evidence["avoidable"] and "torch.linalg.solve(A, b)" in f.fix
    by_line[0]["line"] = 5  # an inverse kept for itself: the model's compute
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::linalg_lu_solve", 60_000.0)]),
                                  ops_by_line=by_line))
    assert f.evidence["inverse_at"] is None and f.severity == "info"


@fires("op_hotspot")
def test_op_hotspot_names_a_rank_found_by_a_full_sort(tmp_path):
    """`(scores.argsort(1, descending=True) == d[:, None]).nonzero()`: a sort per query to find
    one rank; a sort kept for its order is the model's compute."""
    src = tmp_path / "rank.py"
    src.write_text("def rank(scores, d):\n    return (scores.argsort(dim=1, descending=True) == d[:, None]).nonzero()\n"
                   "def order(scores):\n    return scores.argsort(dim=1)\n"
                   "def named(scores, tgt):\n    order = scores.argsort(dim=1, descending=True, stable=True)\n"
                   "    return (order == tgt[:, None]).nonzero()[:, 1] + 1\n")
    found = {}
    for line in (2, 4, 6):
        by_line = [{"op": "aten::sort", "file": str(src), "line": line, "function": "f", "self_us": 60_000.0}]
        [found[line]] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::sort", 60_000.0)]),
                                                ops_by_line=by_line))
    assert found[2].evidence["rank_by_sort"] == 2 and "scores.gather(1, target[:, None])" in found[2].fix
    assert found[2].severity == "medium"
    assert found[4].evidence["rank_by_sort"] is None and "gather" not in found[4].fix
    assert found[6].evidence["rank_by_sort"] == 6  # the sorted order named, then searched on the next line


@fires("op_hotspot")
def test_op_hotspot_names_a_matrix_product_computed_for_its_diagonal(tmp_path):
    """`torch.diag(d @ P @ d.T)`: N x N products for the N numbers kept; `(a @ b).diagonal()` and
    `torch.trace(a.mm(b))` too. A diagonal of a matrix not made on the line is the model's compute."""
    src = tmp_path / "maha.py"
    src.write_text("import torch\ndef score(d, P):\n    return torch.diag(d @ P @ d.T)\n"
                   "def other(a, b):\n    return (a @ b).diagonal().sum() + torch.trace(a.mm(b))\n"
                   "def kept(a, b):\n    c = a @ b\n    return c, torch.diag(c)\n")
    for line, expected in ((3, 3), (5, 5), (8, None)):
        by_line = [{"op": "aten::mm", "file": str(src), "line": line, "function": "f", "self_us": 60_000.0}]
        [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::mm", 60_000.0)]), ops_by_line=by_line))
        assert f.evidence["diagonal_at"] == expected
    by_line = [{"op": "aten::mm", "file": str(src), "line": 3, "function": "score", "self_us": 60_000.0}]
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::mm", 60_000.0)]), ops_by_line=by_line))
    assert f.severity == "medium" and "((d @ P) * d).sum(-1)" in f.fix and "keep its diagonal" in f.title


@fires("op_hotspot")
def test_op_hotspot_names_a_matrix_product_done_as_a_broadcast_product(tmp_path):
    """`(q.unsqueeze(1) * g.unsqueeze(0)).sum(-1)`: every pairwise product in memory, then summed."""
    src = tmp_path / "sim.py"
    src.write_text("def sim(q, g):\n    return (q.unsqueeze(1) * g.unsqueeze(0)).sum(-1)\n")
    by_line = [{"op": "aten::mul", "file": str(src), "line": 2, "function": "sim", "self_us": 60_000.0}]
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::mul", 60_000.0)]), ops_by_line=by_line))
    assert f.evidence["broadcast_at"] == 2 and f.severity == "medium" and "a @ b.T" in f.fix


@silent("op_hotspot")
def test_op_hotspot_silent_when_no_op_dominates():
    assert OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::addmm", 15_000.0)]))) == []  # 15 % < 20 %


@fires("dispatch_overhead")
def test_dispatch_overhead_without_samples_counts_the_runs_of_tiny_ops_less_their_arithmetic():
    """No samples (a trace alone): the runs of tiny ops stand for the loop; of their time, what the
    ops spend beyond the per-op floor (here 4000 adds of 7.5 µs over a 2.5 µs floor) is work a
    batched add still does."""
    d = Dispatch(top_level_ops=5000, ops_per_step=1000.0, tiny_ops=4500, tiny_us=40_000.0, tiny_share=0.4,
                 median_op_us=8.0, floor_op_us=2.5, tiny_run_us=60_000.0, tiny_run_ops=4500, tiny_run_share=0.6)
    by_line = [{"op": "aten::add", "file": "/x/loop.py", "line": 9, "function": "f", "count": 4000,
                "self_us": 30_000.0}]
    [f] = DispatchOverhead().check(facts(analysis=analysis(dispatch=d, by_name=[_op("aten::add", 30_000.0)]),
                                         ops_by_line=by_line))
    # work 30 ms - 4000 x 2.5 µs = 20 ms of the 100 ms window: 20 % of the runs' 60 % of it is left
    assert abs(f.evidence["work_share"] - 0.2) < 1e-9 and abs(f.time_lost_s - 0.6 * 0.8 * 0.1) < 1e-12
    assert f.where[0].line == 9 and f.evidence["loop_s"] == 0.0
    assert "900 tiny ops per step" in f.title and "torch.compile" in f.fix


TINY_LOOP = """\
import torch

model = torch.nn.Linear(16, 16)
for _ in range(100):
    y = model(torch.randn(1000, 16))
    acc = torch.zeros(16)
    for row in y:
        acc = acc + row.relu() * 0.5
    acc.sum().backward()
"""


def _tiny_loop_facts(path, backward_ops=4000, steady_extra=()):
    d = Dispatch(top_level_ops=12_000, ops_per_step=6000.0, tiny_ops=11_000, tiny_us=50_000.0, tiny_share=0.5,
                 floor_op_us=2.0, tiny_run_us=80_000.0, tiny_run_ops=11_000, tiny_run_share=0.8)
    f = str(path)
    by_line = [{"op": "aten::mul", "file": f, "line": 8, "function": "<module>", "count": 6000, "self_us": 30_000.0},
               {"op": "aten::unbind", "file": f, "line": 7, "function": "<module>", "count": 2,
                "self_us": 2_000.0},
               {"op": "aten::addmm", "file": f, "line": 5, "function": "<module>", "count": 2, "self_us": 4_000.0},
               {"op": "aten::mul", "file": f, "line": 9, "function": "<module>", "count": backward_ops,
                "self_us": 20_000.0}]
    def line(n, total, outside):
        return {"file": f, "line": n, "function": "<module>", "total_s": total, "self_s": outside,
                "outside_ops_s": outside}
    python = {"window": {"sampled_s": 4.0, "lines": [line(8, 1.2, 0.6), line(9, 2.0, 0.8), line(7, 0.2, 0.1),
                                                     line(5, 0.3, 0.1), *steady_extra]},
              "startup": {"sampled_s": 0.1, "lines": [line(8, 0.1, 0.05)]}}
    return facts(analysis=analysis(window_us=200_000.0, steps=2, dispatch=d,
                                   by_name=[_op("aten::mul", 50_000.0, count=10_000), _op("aten::addmm", 4_000.0, 2),
                                            _op("aten::unbind", 2_000.0, 2)]),
                 ops_by_line=by_line, python=python)


@fires("dispatch_overhead")
def test_dispatch_overhead_measures_the_sampled_loop_and_its_share_of_the_backward(tmp_path):
    """The loop is the `for row in y` around the line issuing the tiny ops (lines 7-8), start-up
    included; the backward line (9) is the loop's in proportion to its forward time in torch ops
    (0.6 + 0.1 of the 0.9 s of forward op time); its ops' time beyond the floor is left over."""
    src = tmp_path / "loop.py"
    src.write_text(TINY_LOOP)
    [f] = DispatchOverhead().check(_tiny_loop_facts(src))
    ev = f.evidence
    part = 0.7 / 0.9
    assert abs(ev["backward_part"] - part) < 1e-9
    assert abs(ev["loop_s"] - (1.2 + 0.1 + 0.2 + 2.0 * part)) < 1e-9  # not line 5 (the model's own forward)
    assert abs(ev["loop_share"] - ev["loop_s"] / 4.0) < 1e-9
    # beyond the 2 µs floor: mul 30 - 12 = 18 ms, unbind 2 ms, the backward's 20 - 8 = 12 ms at `part`
    loop_us, work_us = 30_000 + 2_000 + 20_000 * part, 18_000 + 1_996 + 12_000 * part
    assert abs(ev["work_share"] - work_us / (200_000 * loop_us / 56_000)) < 1e-9
    assert abs(f.time_lost_s - ev["loop_share"] * (1 - ev["work_share"]) * 0.2) < 1e-12
    assert [w.line for w in f.where][:2] == [7, 8]  # the loop to replace, then the line issuing the ops


@fires("dispatch_overhead")
def test_dispatch_overhead_leads_with_the_comprehension_calling_a_per_row_helper(tmp_path):
    """A loss computed per query by a helper called in a comprehension, in another module than the
    training loop: the helper's lines issue the ops, `loss.backward()` runs their backward (more
    op time, the same op names), the comprehension is the line to change."""
    losses, train = tmp_path / "losses.py", tmp_path / "train.py"
    losses.write_text("import torch\ndef one(s):\n    return (s[:, None] - s[None, :]).relu().sum()\n"
                      "def loss(scores):\n    return torch.stack([one(s) for s in scores]).mean()\n")
    train.write_text("for x in data:\n    l = loss(model(x))\n    l.backward()\n")
    d = Dispatch(top_level_ops=12_000, ops_per_step=6000.0, tiny_ops=11_000, tiny_us=50_000.0, tiny_share=0.5,
                 floor_op_us=2.0, tiny_run_us=80_000.0, tiny_run_ops=11_000, tiny_run_share=0.8)
    by_line = [{"op": "aten::sub", "file": str(train), "line": 3, "function": "<module>", "count": 6000,
                "self_us": 40_000.0},
               {"op": "aten::sub", "file": str(losses), "line": 3, "function": "one", "count": 6000,
                "self_us": 30_000.0}]
    callers = [{"file": str(losses), "line": 5, "function": "loss.<locals>.<listcomp>", "share": 1.0},
               {"file": str(train), "line": 2, "function": "<module>", "share": 1.0}]
    lines = [{"file": str(train), "line": 3, "function": "<module>", "total_s": 2.0, "self_s": 0.1,
              "outside_ops_s": 0.1, "library": "Tensor.backward (_tensor.py)"},
             {"file": str(losses), "line": 3, "function": "one", "total_s": 1.5, "self_s": 0.5,
              "outside_ops_s": 0.5, "callers": callers}]
    f_ = facts(analysis=analysis(window_us=200_000.0, steps=2, dispatch=d, by_name=[_op("aten::sub", 70_000.0)]),
               ops_by_line=by_line, python={"window": {"sampled_s": 4.0, "lines": lines}})
    [f] = DispatchOverhead().check(f_)
    assert [(w.file, w.line) for w in f.where][:2] == [(str(losses), 5), (str(losses), 3)]
    assert (str(train), 3) in [(w.file, w.line) for w in f.where][2:]  # the backward line, after


@fires("dispatch_overhead")
def test_dispatch_overhead_leads_with_the_line_issuing_most_ops_not_the_training_loop(tmp_path):
    """An RL update loop: the model's forward (a few large calls, the most self time) runs under
    `update()`, which calls backward, from the outer `for` loop; a per-element comprehension in
    another helper issues thousands of the same ops. The comprehension leads, and the outer loop
    (a training loop through the helper) is never named as the loop to change."""
    src = tmp_path / "a2c.py"
    src.write_text("import torch\n"
                   "def forward(model, x):\n    return model(x) * 2\n"
                   "def gae(d, n):\n    return torch.stack([d[i] * 0.9 for i in range(n)])\n"
                   "def update(model, x, opt):\n    loss = forward(model, x).sum()\n    loss.backward()\n"
                   "for upd in range(10):\n    a = gae(d, n)\n    update(model, x, opt)\n")
    d = Dispatch(top_level_ops=12_000, ops_per_step=6000.0, tiny_ops=11_000, tiny_us=50_000.0, tiny_share=0.5,
                 floor_op_us=2.0, tiny_run_us=80_000.0, tiny_run_ops=11_000, tiny_run_share=0.8)
    by_line = [{"op": "aten::mul", "file": str(src), "line": 3, "function": "forward", "count": 40,
                "self_us": 60_000.0},
               {"op": "aten::mul", "file": str(src), "line": 5, "function": "gae.<locals>.<listcomp>", "count": 6000,
                "self_us": 30_000.0}]
    lines = [{"file": str(src), "line": 3, "function": "forward", "total_s": 1.5, "self_s": 0.1, "outside_ops_s": 0.1,
              "callers": [{"file": str(src), "line": 7, "function": "update", "share": 1.0},
                          {"file": str(src), "line": 11, "function": "<module>", "share": 1.0}]},
             {"file": str(src), "line": 5, "function": "gae.<locals>.<listcomp>", "total_s": 1.2, "self_s": 0.5,
              "outside_ops_s": 0.5, "callers": [{"file": str(src), "line": 10, "function": "<module>", "share": 1.0}]}]
    f_ = facts(analysis=analysis(window_us=200_000.0, steps=2, dispatch=d, by_name=[_op("aten::mul", 90_000.0)]),
               ops_by_line=by_line, python={"window": {"sampled_s": 4.0, "lines": lines}})
    [f] = DispatchOverhead().check(f_)
    assert f.where[0].line == 5 and 9 not in [w.line for w in f.where]


@fires("dispatch_overhead")
def test_dispatch_overhead_of_a_helper_called_with_the_same_arguments_every_pass(tmp_path):
    """A filterbank built element by element by a helper called with no argument for every clip
    in a comprehension: computing it once removes all of its time, not only the per-op overhead."""
    src = tmp_path / "feats.py"
    src.write_text("import torch\ndef filterbank():\n    fb = torch.zeros(40, 201)\n    for m in range(40):\n"
                   "        fb[m, m] = 1.0\n    return fb\n"
                   "def feats(clips):\n    return [c @ filterbank().T for c in clips]\n")
    d = Dispatch(top_level_ops=12_000, ops_per_step=6000.0, tiny_ops=11_000, tiny_us=50_000.0, tiny_share=0.5,
                 floor_op_us=2.0, tiny_run_us=80_000.0, tiny_run_ops=11_000, tiny_run_share=0.8)
    by_line = [{"op": "aten::copy_", "file": str(src), "line": 5, "function": "filterbank", "count": 6000,
                "self_us": 40_000.0}]
    caller = [{"file": str(src), "line": 8, "function": "feats.<locals>.<listcomp>", "share": 1.0}]
    lines = [{"file": str(src), "line": 5, "function": "filterbank", "total_s": 3.0, "self_s": 1.0,
              "outside_ops_s": 1.0, "callers": caller}]
    f_ = facts(analysis=analysis(window_us=200_000.0, steps=2, dispatch=d, by_name=[_op("aten::copy_", 40_000.0)]),
               ops_by_line=by_line, python={"window": {"sampled_s": 4.0, "lines": lines}})
    [f] = DispatchOverhead().check(f_)
    assert f.where[0].line == 8 and f.evidence["invariant_call"] == "filterbank" and f.evidence["invariant_at"] == 8
    assert abs(f.time_lost_s - f.evidence["loop_share"] * 0.2) < 1e-12  # all of it, not less its arithmetic
    assert "Call filterbank() once" in f.fix and "same arguments" in f.title


@fires("dispatch_overhead")
def test_dispatch_overhead_leaves_a_backward_pass_of_few_ops_to_the_model(tmp_path):
    """A window whose backward ran few ops a step (a model's few big nodes, not a loop's many tiny
    ones) is not the loop's: its time stays out of the estimate."""
    src = tmp_path / "loop.py"
    src.write_text(TINY_LOOP)
    [f] = DispatchOverhead().check(_tiny_loop_facts(src, backward_ops=40))  # 20 a step < 50
    assert f.evidence["backward_part"] == 0.0 and abs(f.evidence["loop_s"] - 1.5) < 1e-9


@fires("dispatch_overhead")
def test_dispatch_overhead_loop_is_the_line_when_its_only_loop_is_the_training_loop(tmp_path):
    """Tiny ops issued inside a library call on a line of the training loop itself (one pass a
    step, it runs the backward): the line is the loop, not the whole step."""
    src = tmp_path / "log.py"
    src.write_text("import torch\nfor step in range(9):\n    loss = model(x)\n    print(f'{loss}')\n"
                   "    loss.backward()\n")
    from torchneck.diagnose.rules.dispatch import _loop_around

    assert _loop_around([Where(file=str(src), line=4, function="<module>")]) == (str(src), 4, 4, "")
    assert _loop_around([Where(file=str(tmp_path / "gone.py"), line=3, function="f.<locals>.<listcomp>")]) \
        == (str(tmp_path / "gone.py"), 3, 3, "")  # unreadable source: the frame's name says comprehension
    rec = tmp_path / "rec.py"
    rec.write_text("def power(a, k):\n    if k == 1:\n        return a\n    return power(a, k - 1) @ a\n")
    assert _loop_around([Where(file=str(rec), line=3, function="power")]).function == "power"  # recursion


def test_dispatch_overhead_explains_a_loader_waiting_on_its_own_tiny_op_loop():
    """A collate_fn writing a batch element by element: the DataLoader's wait is that loop's,
    and vectorising it (not more workers) is the fix; a loader slow elsewhere is not explained."""
    from torchneck.model.findings import Finding

    def finding(kind, lines, lost):
        return Finding(kind=kind, title="", time_lost_s=lost, time_lost_pct=0.0, fix="",
                       where=[Where(file="/x/score.py", line=n) for n in lines])

    cause = finding("dispatch_overhead", [54, 67], 0.5)
    why = DispatchOverhead().explained(cause, finding("input_pipeline", [54, 41], 0.7), facts())
    assert why is not None and why.seconds == 0.5 and not why.adds
    assert DispatchOverhead().explained(cause, finding("input_pipeline", [12], 0.7), facts()) is None


@silent("dispatch_overhead")
def test_dispatch_overhead_silent_with_few_or_large_ops():
    few = Dispatch(top_level_ops=500, ops_per_step=100.0, tiny_run_share=0.9, tiny_run_us=90_000.0, tiny_run_ops=500)
    assert DispatchOverhead().check(facts(analysis=analysis(dispatch=few))) == []
    large = Dispatch(top_level_ops=5000, ops_per_step=1000.0, tiny_run_share=0.2, tiny_run_us=20_000.0,
                     tiny_run_ops=4000)
    assert DispatchOverhead().check(facts(analysis=analysis(dispatch=large))) == []


@fires("dtype_float64")
def test_float64_points_at_the_lines_that_ran_those_ops():
    f64 = Float64Ops(recorded=True, self_us=30_000.0, count=20, ops=[_op("aten::mul", 30_000.0, shapes="[[64, 64]]")],
                     where=[CodeSite(file="/x/mask.py", line=14, function="make", time_us=30_000.0, count=20)])
    [f] = DtypeFloat64().check(facts(analysis=analysis(float64=f64)))
    assert f.time_lost_s == 0.015 and f.where[0].line == 14 and "float32" in f.fix  # half of 30 ms


@fires("dtype_float64")
def test_float64_names_the_module_constant_passed_as_dtype(tmp_path):
    """`DTYPE = torch.float32 if fast else torch.float64` and `dtype=DTYPE` everywhere: that one
    line decides the precision, so it leads, before the lines running float64 ops."""
    src = tmp_path / "mc.py"
    src.write_text("import torch\nDTYPE = torch.float32 if fast else torch.float64\n"
                   "def sim(n):\n    z = torch.randn(n, 4, dtype=DTYPE)\n    return z @ z.T\n")
    f64 = Float64Ops(recorded=True, self_us=30_000.0, count=20, ops=[_op("aten::mm", 30_000.0)],
                     where=[CodeSite(file=str(src), line=5, function="sim", time_us=30_000.0, count=20)])
    [f] = DtypeFloat64().check(facts(analysis=analysis(float64=f64)))
    assert [w.line for w in f.where] == [2, 5]


@silent("dtype_float64")
def test_float64_silent_when_not_recorded_or_small():
    assert DtypeFloat64().check(facts(analysis=analysis(float64=Float64Ops(recorded=False)))) == []
    small = Float64Ops(recorded=True, self_us=4_000.0, count=2, ops=[_op("aten::mul", 4_000.0)])  # 4 % < 5 %
    assert DtypeFloat64().check(facts(analysis=analysis(float64=small))) == []


def test_float64_means_float64_tensors_not_python_scalars():
    from torchneck.analysis.ops import _double_tensor_input

    assert _double_tensor_input('["float", "double"]', "[[16], []]") is False  # x * 0.5: a wrapped scalar
    assert _double_tensor_input('["double", "", "", ""]', "[[], [], [], []]") is False  # aten::to of it
    assert _double_tensor_input('["double", "double"]', "[[256, 256, 32], []]") is True  # a float64 mask
    assert _double_tensor_input('["double"]', "") is True  # no shapes recorded: cannot tell, keep it


@fires("conv_bias_bn")
def test_conv_with_bias_straight_into_batch_norm_from_a_real_run(tmp_path):
    """conv_bn.py has one conv whose bias BatchNorm cancels, one without a bias, one into ReLU."""
    r = torchneck("run", "--out", str(tmp_path / "run"), str(SCRIPTS / "conv_bn.py"))
    assert r.returncode == 0, r.stderr
    report = read_report(tmp_path / "run")
    steps = report["ranks"][0]["steps"]["count"]
    assert report["ranks"][0]["ops"]["conv_bias_bn"]["pairs"] == steps  # only the first conv, once a step
    (f,) = [f for f in report["findings"] if f["kind"] == "conv_bias_bn"]
    assert f["severity"] == "low" and "bias=False" in f["fix"]


@silent("conv_bias_bn")
def test_conv_bias_silent_without_pairs():
    assert ConvBiasBeforeBatchNorm().check(facts(analysis=analysis(conv_bias_bn=ConvBiasBn(recorded=True)))) == []


@fires("dtype_float64")
def test_float64_points_first_at_where_float64_entered_torch():
    """The line to change is where float64 came in (the default dtype, a NumPy array converted),
    not only the lines whose ops ran on it."""
    f64 = Float64Ops(recorded=True, self_us=30_000.0, count=20, ops=[_op("aten::mm", 30_000.0)],
                     where=[CodeSite(file="/x/model.py", line=53, function="forward", time_us=30_000.0, count=20)])
    sites = [{"what": "float64_source", "how": "from_numpy", "file": "/x/run.py", "line": 40, "function": "load"},
             {"what": "float64_source", "how": "set_default_dtype", "file": "/x/run.py", "line": 28,
              "function": "main"}]
    [f] = DtypeFloat64().check(facts(analysis=analysis(float64=f64), call_sites=sites))
    assert [w.line for w in f.where] == [28, 40, 53] and "set_default_dtype" in f.fix
    [f] = DtypeFloat64().check(facts(analysis=analysis(float64=f64), call_sites=sites[:1]))
    assert [w.line for w in f.where] == [40, 53] and "float32" in f.fix


NUMPY_SOURCE = """\
import sys
import numpy as np
import torch
weights_np = np.random.rand(512, 16)
if "--fixed" in sys.argv:
    weights_np = weights_np.astype(np.float32)
for _ in range(3):
    mask = torch.sigmoid(torch.from_numpy(weights_np))
    other = torch.from_numpy(np.ones(3))
"""


@fires("dtype_float64")
def test_float64_names_where_the_numpy_array_was_made(tmp_path):
    """torch.from_numpy(a) keeps a's dtype: the line that made `a` (NumPy's float64 default) comes
    before the conversion; an assignment in a branch that does not hold the call may not have run."""
    script = tmp_path / "mask.py"
    script.write_text(NUMPY_SOURCE)
    f64 = Float64Ops(recorded=True, self_us=30_000.0, count=20, ops=[_op("aten::sigmoid", 30_000.0)])
    site = {"what": "float64_source", "how": "from_numpy", "file": str(script), "line": 8, "function": "<module>"}
    [f] = DtypeFloat64().check(facts(analysis=analysis(float64=f64), call_sites=[site]))
    assert [w.line for w in f.where] == [4, 8]
    [f] = DtypeFloat64().check(facts(analysis=analysis(float64=f64), call_sites=[dict(site, line=9)]))
    assert [w.line for w in f.where] == [9]  # not a plain variable: the conversion alone


def test_float64_default_dtype_line_from_a_real_run(tmp_path):
    """The capture records where float64 entered torch; the finding names that line first."""
    script = tmp_path / "f64.py"
    script.write_text("import numpy as np\nimport torch\n\n"
                      "torch.set_default_dtype(torch.float64)\n"
                      "w = torch.randn(256, 256)\n"
                      "x = torch.from_numpy(np.random.rand(256, 256))\n"
                      "for _ in range(400):\n"
                      "    y = torch.tanh(x @ w) @ w.T\n")
    r = torchneck("run", "--out", str(tmp_path / "run"), str(script))
    assert r.returncode == 0, r.stderr
    report = read_report(tmp_path / "run")
    sources = [c for c in report["run"]["call_sites"] if c["what"] == "float64_source"]
    assert [(c["how"], c["line"]) for c in sources] == [("set_default_dtype", 4), ("from_numpy", 6)]
    (f,) = [f for f in report["findings"] if f["kind"] == "dtype_float64"]
    assert [w["line"] for w in f["where"][:2]] == [4, 6] and "set_default_dtype" in f["fix"]


REBUILT_SCRIPT = """\
import torch
out = torch.empty(0, 4)
for step in range(100):
    piece = torch.randn(8, 4)
    out = torch.cat([out, piece])
    buf = torch.zeros(64, 1024)
    total = torch.cat([piece, piece])
    y = torch.tanh(torch.zeros(64, 1024))
once = torch.zeros(64, 1024)
"""


def _rebuilt_facts(path, line, seconds=3.0, callers=()):
    hot = {"file": str(path), "line": line, "function": "<module>", "total_s": seconds, "self_s": 0.0,
           "outside_ops_s": 0.0, "callers": list(callers)}
    return facts(analysis=analysis(), python={"window": {"sampled_s": 10.0, "lines": [hot]}})


@fires("rebuilt_tensor")
def test_rebuilt_tensor_names_the_growing_concatenation_and_the_buffer_allocated_per_pass(tmp_path):
    """Read from the sampled steady state: the trace's window of early steps sees the
    concatenation while it is small (its op time there is no guide)."""
    script = tmp_path / "grow.py"
    script.write_text(REBUILT_SCRIPT)
    [grows] = RebuiltTensor().check(_rebuilt_facts(script, 5))
    assert grows.kind == "rebuilt_tensor" and (grows.where[0].file, grows.where[0].line) == (str(script), 5)
    assert grows.evidence["pattern"] == "grows" and "torch.cat in a loop" in grows.fix
    assert abs(grows.time_lost_s - 0.3 * 0.1) < 1e-12  # 30 % of the steady state, over the 100 ms window
    [allocates] = RebuiltTensor().check(_rebuilt_facts(script, 6))
    assert allocates.evidence["pattern"] == "allocates" and "reuse" in allocates.fix


@fires("rebuilt_tensor")
def test_rebuilt_tensor_in_a_function_called_from_a_loop(tmp_path):
    script = tmp_path / "serve.py"
    script.write_text("import torch\ndef handle(n):\n    cache = torch.zeros(8, 4096)\n    return cache[:n]\n"
                      "for i in range(50):\n    handle(i)\n")
    caller = {"file": str(script), "line": 6, "function": "<module>"}
    [f] = RebuiltTensor().check(_rebuilt_facts(script, 3, callers=[caller]))
    assert [w.line for w in f.where] == [3, 6]


@fires("rebuilt_tensor")
def test_rebuilt_tensors_of_one_function_are_one_finding(tmp_path):
    """A replay buffer concatenating each field onto its store: three lines of 6 % each, under
    the bar alone, one change together (and in source order, the first field first)."""
    script = tmp_path / "buffer.py"
    script.write_text("import torch\nclass Buffer:\n    def push(self, o, a, r):\n"
                      "        self.o = torch.cat([self.o, o[None]])\n        self.a = torch.cat([self.a, a[None]])\n"
                      "        self.r = torch.cat([self.r, r[None]])\nfor i in range(9):\n    buf.push(x, y, z)\n")
    caller = {"file": str(script), "line": 8, "function": "<module>"}
    lines = [{"file": str(script), "line": n, "function": "Buffer.push", "total_s": 0.6, "self_s": 0.0,
              "outside_ops_s": 0.0, "callers": [caller]} for n in (5, 4, 6)]
    [f] = RebuiltTensor().check(facts(analysis=analysis(), python={"window": {"sampled_s": 10.0, "lines": lines}}))
    assert [w.line for w in f.where] == [4, 5, 6, 8] and "lines 4, 5, 6" in f.title
    assert abs(f.time_lost_s - 0.18 * 0.1) < 1e-12  # 18 % of the steady state, over the 100 ms window
    assert RebuiltTensor().check(facts(analysis=analysis(), python={"window": {"sampled_s": 10.0,
                                                                               "lines": lines[:1]}})) == []


def test_a_concatenation_the_steps_grow_with_saves_their_growth(tmp_path):
    """A replay buffer concatenated onto: its line is 30 % of the sampled steady state, but the
    steps after the window grew from 1 to 3 ms (2 ms mean), and the line holds that growth: all of
    it goes with the fix (the copies slow the rest of the step too), with the line's first-third
    time: (2 - 1 + 0.2) / 2 = 60 %. Steps that grew elsewhere leave the line's own share."""
    script = tmp_path / "grow.py"
    script.write_text(REBUILT_SCRIPT)

    def growth(line_late_ms):
        at = {"file": str(script), "line": 5, "function": "<module>", "callers": []}
        return {"steps": 300, "third": 100, "early_step_s": 1e-3, "late_step_s": 3e-3, "mean_step_s": 2e-3,
                "early_lines": [{**at, "step_s": 0.2e-3}], "late_lines": [{**at, "step_s": line_late_ms / 1e3}]}

    f_ = _rebuilt_facts(script, 5)
    f_.python["growth"] = growth(1.8)
    [f] = RebuiltTensor().check(f_)
    assert f.time_lost_s == pytest.approx(0.6 * 0.1) and f.evidence["growth_share"] == pytest.approx(0.6)
    assert "the steps grow with it" in f.title
    f_.python["growth"] = growth(0.4)  # the line grew 0.2 ms of the step's 2 ms: the growth is elsewhere
    [f] = RebuiltTensor().check(f_)
    assert f.time_lost_s == pytest.approx(0.3 * 0.1) and f.evidence["growth_share"] == 0.0


@silent("rebuilt_tensor")
def test_rebuilt_tensor_silent_for_one_time_work_new_data_and_cold_lines(tmp_path):
    script = tmp_path / "grow.py"
    script.write_text(REBUILT_SCRIPT)
    assert RebuiltTensor().check(_rebuilt_facts(script, 9)) == []  # allocated once, outside any loop
    assert RebuiltTensor().check(_rebuilt_facts(script, 8)) == []  # the line's time is tanh's too
    assert RebuiltTensor().check(_rebuilt_facts(script, 7)) == []  # a concatenation of new pieces only
    assert RebuiltTensor().check(_rebuilt_facts(script, 4)) == []  # random data, not a buffer
    assert RebuiltTensor().check(_rebuilt_facts(script, 5, seconds=0.5)) == []  # 5 % of the steady state


def _sampled(line, total_s, outside_s=0.0, function="evaluate"):
    return {"file": "/x/rank.py", "line": line, "function": function, "total_s": total_s, "self_s": 0.0,
            "outside_ops_s": outside_s, "callers": [{"file": "/x/rank.py", "line": 49, "function": "main"}]}


@fires("op_hotspot")
def test_op_hotspot_names_a_line_the_profiled_window_missed():
    """No step clock: the slice was taken during set-up (one big matmul at line 20); the sampler
    finds line 34 inside torch ops for 75 % of the steady state, and nowhere in the window."""
    python = {"window": {"sampled_s": 6.0, "lines": [_sampled(34, 4.5), _sampled(20, 1.3, function="setup")]},
              "profiled_window": {"sampled_s": 0.05, "lines": [_sampled(20, 0.05, function="setup")]}}
    by_line = [{"op": "aten::mm", "file": "/x/rank.py", "line": 20, "function": "setup", "self_us": 52_000.0}]
    found = OpHotspot().check(facts(analysis=analysis(window_us=137_000.0, by_name=[_op("aten::mm", 52_000.0, 1)]),
                                    python=python, ops_by_line=by_line))
    missed, mm = found
    assert [w.line for w in missed.where] == [34, 49] and missed.evidence["outside_window"] is True
    assert missed.severity == "info" and "75% of the steady state" in missed.title and "missed" in missed.fix
    assert abs(missed.time_lost_s - 0.75 * 0.137) < 1e-9 and mm.where[0].line == 20


@fires("op_hotspot")
def test_a_line_holding_most_of_the_run_is_missed_even_by_a_short_window():
    """The window caught 18 ms of a compiled encoder's calls; the ranking after it holds 94 % of
    the steady state: 17 of the window's samples were due there, none came. A line whose share
    leaves the window under five samples is not called missing."""
    def found(share, window_s):
        python = {"window": {"sampled_s": 4.0, "lines": [_sampled(110, 4.0 * share)]},
                  "profiled_window": {"sampled_s": window_s, "lines": [_sampled(66, window_s, function="encode")]}}
        return [f for f in OpHotspot().check(facts(analysis=analysis(window_us=20_000.0), python=python))
                if f.evidence.get("outside_window")]

    assert [f.where[0].line for f in found(0.94, 0.018)] == [110]
    assert found(0.2, 0.018) == []  # 3.6 samples expected: chance


@fires("op_hotspot")
def test_a_line_whose_work_ended_before_the_window_is_missed_however_short_the_window():
    """Three long SVDs held the run (round 23's PCA); the fallback slice began after the last one,
    at the script's end, and holds 2 ms: too few samples to say a line is missing from a window
    that overlaps its work, but this line's last sample came before the window began."""
    phases = {"window_offsets_s": (3.0, 3.01)}

    def found(last_s):
        python = {"window": {"sampled_s": 3.0, "lines": [dict(_sampled(14, 2.9), last_s=last_s)]},
                  "profiled_window": {"sampled_s": 0.002, "lines": []}}
        return [f for f in OpHotspot().check(facts(analysis=analysis(window_us=10_000.0), python=python,
                                                   phases=phases)) if f.evidence.get("outside_window")]

    assert [f.where[0].line for f in found(2.95)] == [14]
    assert found(3.005) == []  # it ran into the window: 2 ms of samples are chance


@fires("op_hotspot")
def test_op_hotspot_a_missed_line_whose_source_names_a_costlier_way_is_a_problem(tmp_path):
    """The window held training steps; the evaluation's line, outside it, sums a broadcast product:
    the source says what the trace cannot, and the finding is a problem with its fix."""
    src = tmp_path / "rank.py"
    src.write_text("\n" * 33 + "sim = (q.unsqueeze(1) * g.unsqueeze(0)).sum(-1)\n")
    line = dict(_sampled(34, 4.5), file=str(src), callers=[])
    python = {"window": {"sampled_s": 6.0, "lines": [line]},
              "profiled_window": {"sampled_s": 0.05, "lines": []}}
    [missed, _] = OpHotspot().check(facts(analysis=analysis(window_us=137_000.0, by_name=[_op("aten::mm", 52_000.0)]),
                                          python=python))
    assert missed.evidence["broadcast_at"] == 34 and missed.severity == "medium" and "a @ b.T" in missed.fix


@silent("op_hotspot")
def test_op_hotspot_trusts_a_window_that_holds_the_line_or_has_too_few_samples():
    """A window holding the line in its share says nothing is missed; one of 4 samples, where a
    line at 75 % of the steady state was due 3 of them, is too short to say it is missing (10
    samples, 7.5 due and none there, do: test_a_line_holding_most_of_the_run_is_missed...)."""
    steady = {"sampled_s": 6.0, "lines": [_sampled(34, 4.5)]}
    held = {"window": steady, "profiled_window": {"sampled_s": 0.1, "lines": [_sampled(34, 0.07)]}}
    sparse = {"window": steady, "profiled_window": {"sampled_s": 0.004, "lines": []}}  # 3 samples due: too few
    # a server's main thread waiting in Future.result() takes its worker's ops (run.sample_op_seconds):
    # the worker's own line is the one to name, not the wait (round 21's q_reco_scoring_service)
    waiting = {"window": {"sampled_s": 6.0, "lines": [dict(_sampled(157, 4.5), waits_on_thread=True)]},
               "profiled_window": {"sampled_s": 0.1, "lines": []}}
    for python in (held, sparse, waiting):
        assert OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::addmm", 5_000.0)]), python=python)) == []


GCN_SCRIPT = """\
import torch
def forward(x, a_hat, w):
    return a_hat @ (x @ w)
def main(a_sparse, x, w, fixed):
    a_hat = a_sparse if fixed else a_sparse.to_dense()
    for _ in range(10):
        y = forward(x, a_hat, w)
    b = torch.eye(3)
    for _ in range(10):
        y = forward(x, b, w)
"""


def _mm_facts(path, model_line):
    mm = [_op("aten::mm", 90_000.0, count=35)]
    by_line = [{"op": "aten::mm", "file": str(path), "line": 3, "function": "forward", "self_us": 90_000.0}]
    hot = {"file": str(path), "line": 3, "function": "forward", "total_s": 5.0, "self_s": 0.0,
           "callers": [{"file": str(path), "line": model_line, "function": "main"}]}
    return facts(analysis=analysis(by_name=mm), ops_by_line=by_line,
                 python={"window": {"sampled_s": 6.0, "lines": [hot]}})


@fires("op_hotspot")
def test_op_hotspot_a_product_with_an_operand_made_dense_is_avoidable(tmp_path):
    """The matmul runs in forward(); its operand came in through the call at line 7, assigned from
    `.to_dense()` at line 5: that line is the one to change."""
    script = tmp_path / "gcn.py"
    script.write_text(GCN_SCRIPT)
    [f] = OpHotspot().check(_mm_facts(script, 7))
    assert [w.line for w in f.where] == [5, 3] and f.evidence["densified_at"] == 5
    assert f.severity == "medium" and "torch.sparse.mm" in f.fix and "made dense" in f.title


@silent("op_hotspot")
def test_op_hotspot_a_dense_operand_from_dense_code_stays_context(tmp_path):
    script = tmp_path / "gcn.py"
    script.write_text(GCN_SCRIPT)
    [f] = OpHotspot().check(_mm_facts(script, 10))  # torch.eye: dense from the start
    assert f.severity == "info" and f.evidence["densified_at"] is None and [w.line for w in f.where] == [3]


@fires("op_hotspot")
def test_op_hotspot_a_product_with_a_mostly_zero_model_input_from_a_real_run(tmp_path):
    """A graph network whose normalised adjacency (1 % non-zeros) stays dense: the capture reads
    the matrix passed to the model (evenly spaced rows, no torch op), and the products taking it
    are named at the line that builds it, with a sparse layout as the fix."""
    script = SCRIPTS / "dense_adjacency.py"
    r = torchneck("run", "--quiet", "--out", str(tmp_path / "run"), str(script), "30")
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(tmp_path / "run")
    top = report["findings"][0]
    assert top["kind"] == "op_hotspot" and top["where"][0]["line"] == planted_line(script)
    assert top["evidence"]["mostly_zero_shape"] == [1200, 1200] and top["evidence"]["nonzero_share"] < 0.02
    assert top["severity"] in ("medium", "low") and ".to_sparse()" in top["fix"]
    assert 0 < top["saving_pct"] < 100 * top["evidence"]["share"]  # the products with it, less the sparse cost


@fires("op_hotspot")
def test_op_hotspot_a_mostly_zero_matrix_the_model_holds_as_a_buffer(tmp_path):
    """The adjacency is built dense by a helper and registered as a buffer of a submodule: never a
    model input. The capture looks at the tensors the called model holds, and the finding names
    the helper's dense factory line, the matrix by its name in the model."""
    script = SCRIPTS / "dense_adjacency_buffer.py"
    r = torchneck("run", "--quiet", "--out", str(tmp_path / "run"), str(script), "30")
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(tmp_path / "run")["findings"][0]
    assert top["kind"] == "op_hotspot" and top["where"][0]["line"] == planted_line(script), top["where"]
    assert top["evidence"]["mostly_zero_shape"] == [1200, 1200] and "agg.adj" in top["title"]
    assert top["evidence"]["mostly_zero_at"] == planted_line(script) and ".to_sparse()" in top["fix"]


@fires("op_hotspot")
def test_op_hotspot_a_mostly_zero_matrix_multiplied_by_plain_functions(tmp_path):
    """A conjugate-gradient solver of plain functions multiplies a dense Laplacian (no module, no
    model input): the line marker looks at the operands of the user's products during the window,
    and the finding names the line multiplying it."""
    script = SCRIPTS / "dense_laplacian_cg.py"
    r = torchneck("run", "--quiet", "--out", str(tmp_path / "run"), str(script), "2")
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(tmp_path / "run")["findings"][0]
    assert top["kind"] == "op_hotspot" and top["where"][0]["line"] == planted_line(script), top["where"]
    assert top["evidence"]["mostly_zero_shape"] == [4096, 4096]
    assert top["evidence"]["mostly_zero_multiplied_at"] == planted_line(script) and "sparse" in top["fix"]


def _zero_facts(path, entry_shape, product_shapes):
    """A 0.2 s window where aten::mm takes 150 ms; the model, called at line 4 with `adj` built at
    line 2, was given a mostly-zero matrix of `entry_shape`."""
    site = {"file": str(path), "line": 4, "function": "<module>", "calls": 20,
            "mostly_zero": [{"shape": list(entry_shape), "argument": 1, "nonzero_share": 0.01, "calls": 20}]}
    by_shape = [_op("aten::mm", 150_000.0 / len(product_shapes), shapes=s) for s in product_shapes]
    return facts(analysis=analysis(window_us=200_000.0, by_name=[_op("aten::mm", 150_000.0)], by_shape=by_shape),
                 clock={"top_module_sites": [site]})


@fires("op_hotspot")
def test_op_hotspot_costs_the_products_with_the_mostly_zero_matrix_less_their_sparse_cost(tmp_path):
    script = tmp_path / "g.py"
    script.write_text("import torch\nadj = build()\nx = feats()\ny = model(x, adj)\n")
    [f] = OpHotspot().check(_zero_facts(script, (900, 900), ["[[900, 900], [900, 16]]", "[[900, 16], [16, 16]]"]))
    assert [w.line for w in f.where][:2] == [2, 4] and f.evidence["mostly_zero_at"] == 2
    assert abs(f.time_lost_s - 0.075 * (1 - OpHotspot.SPARSE_COST * 0.01)) < 1e-9  # half the mm time is with it
    assert "99.0% zeros" in f.title and f.severity != "info"


@silent("op_hotspot")
def test_op_hotspot_a_mostly_zero_input_no_product_takes_or_new_every_call_stays_context(tmp_path):
    script = tmp_path / "g.py"
    script.write_text("import torch\nadj = build()\nx = feats()\ny = model(x, adj)\n")
    [f] = OpHotspot().check(_zero_facts(script, (900, 900), ["[[512, 512], [512, 16]]"]))
    assert f.severity == "info" and f.evidence["mostly_zero_shape"] is None
    once = _zero_facts(script, (900, 900), ["[[900, 900], [900, 16]]"])  # a batch of sparse features
    once.clock["top_module_sites"][0]["mostly_zero"][0]["calls"] = 1
    [f] = OpHotspot().check(once)
    assert f.severity == "info" and f.evidence["mostly_zero_shape"] is None


def test_the_capture_reads_a_matrix_s_zeros_once_and_only_large_floating_ones():
    import torch

    from torchneck.capture.call_inputs import SiteInputs, nonzero_share

    sparse = torch.zeros(400, 300)
    sparse[::7, ::10] = 1.0
    assert abs(nonzero_share(sparse) - 1 / 70) < 0.01 and nonzero_share(torch.randn(400, 300)) > 0.99
    assert nonzero_share(torch.zeros(100, 300)) is None  # too small to matter
    assert nonzero_share(torch.zeros(400, 300, dtype=torch.long)) is None and nonzero_share(sparse.to_sparse()) is None
    tally = SiteInputs()
    for _ in range(3):
        tally.note_zeros(sparse, 1)
    tally.note_zeros(torch.randn(400, 300), "mask")
    [entry] = tally.to_json()["mostly_zero"]
    assert entry["shape"] == [400, 300] and entry["argument"] == 1 and entry["calls"] == 3
    sparse[0, 0] = 5.0  # changed in place: looked at again, a new matrix of the same entry
    tally.note_zeros(sparse, 1)
    assert tally.to_json()["mostly_zero"][0]["calls"] == 3 and len(tally.zeros_looked) == 2
    fresh = SiteInputs()  # a batch of sparse features, new at every call: never the same matrix twice
    for _ in range(3):
        fresh.note_zeros(sparse.clone(), 0)
    assert fresh.to_json()["mostly_zero"][0]["calls"] == 1
    fresh.note_zeros(torch.zeros(400, 300), 2)  # all zeros: a tensor to drop, not one to store sparse
    assert len(fresh.to_json()["mostly_zero"]) == 1
    view = sparse[1:]
    sparse.untyped_storage().resize_(0)  # a view of freed memory is not read
    assert nonzero_share(view) is None


GROUP_BY_SCRIPT = """\
import torch
rows = []
for cid in ids.tolist():
    mask = customer == cid
    spent = amount[mask]
    rows.append(spent.sum())
for xb, yb in loader:
    keep = yb == 3
    picked = xb[keep]
def centroids(x, y, k):
    for c in range(k):
        members = y.eq(c)
        yield x[members].mean(0)
big = amount[customer > 5]
"""


def _mask_facts(path, select_line, mask_line=None, op="aten::nonzero"):
    """A window of 0.3 s where `op` selecting at `select_line` takes 120 ms, its mask's comparison
    at `mask_line` 60 ms."""
    by_line = [{"op": op, "file": str(path), "line": select_line, "function": "f", "self_us": 120_000.0},
               {"op": "aten::sum", "file": str(path), "line": select_line, "function": "f", "self_us": 5_000.0}]
    if mask_line is not None:
        by_line.append({"op": "aten::eq", "file": str(path), "line": mask_line, "function": "f",
                        "self_us": 60_000.0})
    return facts(analysis=analysis(window_us=300_000.0, by_name=[_op(op, 120_000.0, count=114)]),
                 ops_by_line=by_line)


@fires("op_hotspot")
def test_op_hotspot_names_a_boolean_mask_built_per_group_in_a_loop(tmp_path):
    """`mask = customer == cid` in a loop over the customers, then `amount[mask]`: a group-by done
    one mask at a time. The mask's line comes first; grouping once removes the comparison and the
    selection both (the summing stays)."""
    script = tmp_path / "groups.py"
    script.write_text(GROUP_BY_SCRIPT)
    [f] = OpHotspot().check(_mask_facts(script, 5, mask_line=4))
    assert [w.line for w in f.where] == [4, 5] and f.evidence["grouped_by_mask"] == 4
    assert f.severity == "medium" and "line 4" in f.title and "argsort" in f.fix and "scatter_reduce" in f.fix
    assert abs(f.time_lost_s - 0.18) < 1e-9  # the 60 ms comparison + the 120 ms selection, not the sum
    [f] = OpHotspot().check(_mask_facts(script, 13, mask_line=12, op="aten::index"))  # y.eq(c) in a function
    assert [w.line for w in f.where] == [12, 13]
    [f] = OpHotspot().check(_mask_facts(script, 4, op="aten::eq"))  # the comparison itself dominates
    assert [w.line for w in f.where] == [4, 5] and f.evidence["grouped_by_mask"] == 4


@silent("op_hotspot")
def test_op_hotspot_a_mask_of_this_pass_s_data_or_outside_a_loop_is_no_group_by(tmp_path):
    script = tmp_path / "groups.py"
    script.write_text(GROUP_BY_SCRIPT)
    for line in (9, 14):  # a batch's own mask; a mask built once
        [f] = OpHotspot().check(_mask_facts(script, line))
        assert f.evidence["grouped_by_mask"] is None and [w.line for w in f.where] == [line]
    [f] = OpHotspot().check(_mask_facts(script, 5, mask_line=4, op="aten::addmm"))  # not a mask op
    assert f.evidence["grouped_by_mask"] is None and f.severity == "info"


def test_mask_group_by_reads_the_shapes_of_a_per_group_mask(tmp_path):
    from torchneck.diagnose.masks import mask_group_by

    script = tmp_path / "m.py"
    script.write_text("import torch\n"
                      "for i in range(k):\n"
                      "    cid = ids[i]\n"
                      "    m = (y == cid) & valid\n"
                      "    s = torch.masked_select(x, m)\n"
                      "    z = x[y == i]\n"
                      "    n = m.nonzero()\n"
                      "    w = torch.where(m, x, 0)\n"
                      "    q = x[c > 0]\n"
                      "    r = x[i]\n")
    found = {line: mask_group_by(str(script), line) for line in range(1, 11)}
    assert found == {1: None, 2: None, 3: None, 4: (4, 5), 5: (4, 5), 6: (6, 6), 7: (4, 7), 8: None, 9: None,
                     10: None}  # the mask's own line leads to its first selection
    assert mask_group_by(str(tmp_path / "missing.py"), 5) is None


def _backward_facts(node_total_us, forward_line=36, node="IndexBackward0", top="aten::fill_", forward="aten::index"):
    node = "autograd::engine::evaluate_function: " + node
    by_name = [_op(top, 80_000.0, count=4000), OpRow(name=node, count=4000, self_us=2_000.0,
                                                    total_us=node_total_us, mean_us=node_total_us / 4000)]
    by_line = [{"op": top, "file": "/x/g.py", "line": 72, "function": "main", "self_us": 80_000.0},
               {"op": node, "file": "/x/g.py", "line": 72, "function": "main", "self_us": 2_000.0},
               {"op": forward, "file": "/x/g.py", "line": forward_line, "function": "forward",
                "self_us": 9_000.0}]
    return facts(analysis=analysis(by_name=by_name), ops_by_line=by_line)


@fires("op_hotspot")
def test_op_hotspot_inside_a_backward_names_the_forward_line_it_differentiates():
    """`h[nbrs]` per node: each IndexBackward0 fills a zero gradient as big as `h`, at the
    `loss.backward()` line; the line to change is the forward indexing."""
    [f] = OpHotspot().check(_backward_facts(85_000.0))
    assert [w.line for w in f.where] == [36, 72] and f.evidence["backward_of"] == "aten::index"
    assert "IndexBackward0" in f.title and "once on all the rows" in f.fix


def test_op_hotspot_inside_a_matmuls_backward_is_not_told_to_index_once():
    """A deep MLP's mm in AddmmBackward0: the forward line leads, and the fix is the model's work
    (or no_grad), not indexing's advice (a wrong fix text seen on a zoo program)."""
    [f] = OpHotspot().check(_backward_facts(85_000.0, node="AddmmBackward0", top="aten::mm", forward="aten::addmm"))
    assert [w.line for w in f.where] == [36, 72] and f.evidence["backward_of"] == "aten::addmm"
    assert "gradient of aten::addmm" in f.fix and "index" not in f.fix


@silent("op_hotspot")
def test_op_hotspot_stays_at_its_line_when_no_backward_holds_it():
    [f] = OpHotspot().check(_backward_facts(30_000.0))  # the node holds less than the op's time
    assert [w.line for w in f.where] == [72] and f.evidence["backward_of"] is None
    [f] = OpHotspot().check(_backward_facts(85_000.0, forward_line=72))  # no forward line apart from it
    assert f.evidence["backward_of"] is None


def test_rebuilt_tensor_explains_the_loop_around_it_but_the_header():
    """A Python hotspot of the loop holding the growing torch.cat (its body line) is the cat's
    time but for the loop header's own (a generator of documents)."""
    from torchneck.diagnose.rules.rebuilt import RebuiltTensor
    from torchneck.model.findings import Finding, Where

    def at(*lines):
        return [Where(file="/x/embed.py", line=n, function="main") for n in lines]

    cause = Finding(kind="rebuilt_tensor", title="", time_lost_s=0.7, time_lost_pct=70.0, fix="", severity="high",
                    where=at(43, 54))
    loop = Finding(kind="python_hotspot", title="", time_lost_s=0.4, time_lost_pct=40.0, fix="", severity="high",
                   where=at(38, 49, 43), evidence={"sampled_s": 5.0, "line_total_s": 0.5})
    f = facts(analysis=analysis(window_us=1e6))
    assert abs(RebuiltTensor().explained(cause, loop, f).seconds - 0.3) < 1e-9  # all but the header's 0.1 s
    elsewhere = Finding(kind="python_hotspot", title="", time_lost_s=0.4, time_lost_pct=40.0, fix="",
                        severity="high", where=at(60))
    assert RebuiltTensor().explained(cause, elsewhere, f) is None


def test_a_call_repeated_alone_or_with_fresh_arguments_is_not_loop_invariant(tmp_path):
    """A benchmark loop repeating one call, and a call given `torch.rand(...)` each pass, are not
    the same result computed again; a helper called with no argument beside per-item work is."""
    from torchneck.diagnose.idioms import invariant_call

    src = tmp_path / "loops.py"
    src.write_text("import torch\nx = torch.randn(8)\ntotal = 0.0\nfor _ in range(9):\n    total += float(f(x))\n"
                   "for step in range(9):\n    t.update(torch.rand(4), step)\n"
                   "feats = [g(c, fb()) for c in clips]\n")
    assert invariant_call(str(src), 5, {"f"}) is None
    assert invariant_call(str(src), 7, {"update"}) is None
    assert invariant_call(str(src), 8, {"fb"}) == "fb" and invariant_call(str(src), 8, {"g"}) is None


def test_a_loop_s_header_line_holds_its_header_s_calls_not_its_body_s(tmp_path):
    """v_stream_anomaly: an inner loop's `for` line named (its body's time) is not where the
    body's `learner.update()` is called; the inner loop's header computing the same table on
    every outer pass is."""
    from torchneck.diagnose.idioms import invariant_call

    src = tmp_path / "stream.py"
    src.write_text("for b, batch in enumerate(stream()):\n"
                   "    for j, s in enumerate(zip(scores(batch), labels)):\n"
                   "        thresh.update(s)\n"
                   "        if j % 32 == 0:\n"
                   "            learner.update()\n"
                   "    for w in windows(table(), batch):\n"
                   "        use(w)\n")
    assert invariant_call(str(src), 2, {"update"}) is None
    assert invariant_call(str(src), 6, {"table"}) == "table" and invariant_call(str(src), 6, {"windows"}) is None


def test_a_training_step_called_with_the_same_names_every_epoch_is_not_loop_invariant(tmp_path):
    """v_gnn_pkg: `loss = train_epoch(model, graph, optimizer)` passes the same names on every
    epoch, but the function steps the optimizer: a new model each pass, not a value to hoist. A
    helper that only reads its arguments still is one."""
    from torchneck.diagnose.idioms import invariant_call
    from torchneck.diagnose.loop_invariants import invariant_statement

    src = tmp_path / "train.py"
    src.write_text("def train_epoch(model, graph, optimizer):\n"
                   "    loss = model(graph).sum()\n"
                   "    loss.backward()\n"
                   "    optimizer.step()\n"
                   "    return loss.item()\n"
                   "def count(stats, x):\n"
                   "    stats.append(x)\n"
                   "def table(graph):\n"
                   "    return graph.adj @ graph.adj\n"
                   "def fit(model, graph, optimizer, x):\n"
                   "    for epoch in range(9):\n"
                   "        loss = train_epoch(model, graph, optimizer)\n"
                   "        t = table(graph)\n"
                   "        n = count(stats, x)\n"
                   "        log(epoch, loss, t, n)\n")
    assert not invariant_statement(str(src), 12) and invariant_statement(str(src), 13)
    assert not invariant_statement(str(src), 14)  # appends to what it is given
    assert invariant_call(str(src), 12, {"train_epoch"}, item_used_elsewhere=True) is None
    assert invariant_call(str(src), 13, {"table"}, item_used_elsewhere=True) == "table"


def test_a_helper_recomputed_in_a_loop_that_uses_its_item_elsewhere_is_loop_invariant(tmp_path):
    """`ref = reference(BANK, n)` on a line of its own in a loop whose other lines use the item: the
    same result every pass, when the samples show the call holds the time (`item_used_elsewhere`;
    not by default: other rules read a statement reading no loop name as repeated on purpose);
    an object's method alone on its line (`fitter.fit_epoch(data)` per epoch) may change the
    object, and is not."""
    from torchneck.diagnose.idioms import invariant_call

    src = tmp_path / "stream.py"
    src.write_text("def scores(stream, n):\n    for chunk in stream:\n        ref = reference(BANK, n)\n"
                   "        yield compare(chunk, ref)\n"
                   "def train(fitter, data, epochs):\n    for epoch in range(epochs):\n"
                   "        loss = fitter.fit_epoch(data)\n        print(epoch, loss)\n")
    assert invariant_call(str(src), 3, {"reference"}, item_used_elsewhere=True) == "reference"
    assert invariant_call(str(src), 3, {"reference"}) is None
    assert invariant_call(str(src), 7, {"fit_epoch"}, item_used_elsewhere=True) is None


@fires("op_hotspot")
def test_op_hotspot_in_a_helper_called_the_same_way_every_pass_names_the_call(tmp_path):
    """The op runs in a helper; the line calling it in a loop passes what never changes: that line
    leads, and the sampled time under it is what computing it once saves."""
    src = tmp_path / "spectra.py"
    src.write_text("import torch\ndef reference(bank, n):\n    return torch.fft.rfft(bank, n).abs().mean(0)\n"
                   "def scores(stream, n):\n    for chunk in stream:\n        ref = reference(BANK, n)\n"
                   "        yield (chunk * ref).sum()\n")
    by_line = [{"op": "aten::abs", "file": str(src), "line": 3, "function": "reference", "self_us": 60_000.0}]
    lines = [{"file": str(src), "line": 3, "function": "reference", "total_s": 8.0, "self_s": 0.0,
              "callers": [{"file": str(src), "line": 6, "function": "scores"}]}]
    inclusive = [{"file": str(src), "line": 6, "function": "scores", "total_s": 8.0}]
    python = {"window": {"sampled_s": 10.0, "lines": lines, "inclusive_lines": inclusive}}
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::abs", 60_000.0)]), ops_by_line=by_line,
                                  python=python))
    assert [w.line for w in f.where][:2] == [6, 3] and f.evidence["recomputed_at"] == 6
    assert abs(f.time_lost_s - 0.08) < 1e-9  # 80 % of the 0.1 s window


def test_a_method_called_per_item_building_a_constant_is_loop_invariant(tmp_path):
    """`tag(self, ids)` is called once per sentence and builds the same transition table from its
    config each time: the call reads no parameter of `tag` but `self`, and `tag` reads `ids`."""
    from torchneck.diagnose.idioms import invariant_call

    src = tmp_path / "tagger.py"
    src.write_text("class Tagger:\n    def tag(self, ids):\n        e = self.proj(ids)\n"
                   "        table = self.table(N_TAGS)\n        other = self.table(ids)\n"
                   "        return e, table, other\n")
    assert invariant_call(str(src), 4, {"table"}, called_repeatedly=True) == "table"
    assert invariant_call(str(src), 5, {"table"}, called_repeatedly=True) is None  # reads the item
    assert invariant_call(str(src), 4, {"table"}) is None  # not known to be called per item


def test_a_closure_without_parameters_calling_with_its_enclosing_values_is_loop_invariant(tmp_path):
    """An L-BFGS `closure()` recomputing a spectrum of the fixed recordings on every evaluation:
    the call's arguments read none of the names the closure assigns. One made from a name it
    assigns, or called with no argument at all (`next_batch()`), is not."""
    from torchneck.diagnose.idioms import invariant_call

    src = tmp_path / "fit.py"
    src.write_text("def fit(recordings, model, opt):\n    def closure():\n        opt.zero_grad()\n"
                   "        freqs = welch(recordings, seg_len=SEG)\n        batch = next_batch()\n"
                   "        other = welch(freqs)\n        loss = model(freqs, batch)\n        loss.backward()\n"
                   "        return loss\n    opt.step(closure)\n")
    assert invariant_call(str(src), 4, {"welch"}, called_repeatedly=True) == "welch"
    assert invariant_call(str(src), 5, {"next_batch"}, called_repeatedly=True) is None
    assert invariant_call(str(src), 6, {"welch"}, called_repeatedly=True) is None


def test_a_datasets_stats_of_self_alone_are_invariant_but_not_a_fresh_draw(tmp_path):
    """A Dataset's `stats` property recomputing the whole table's statistics per sample:
    `self._compute_stats()` without arguments is the same every time; an argument drawn anew
    (`xt = self.sample_points()`, `torch.rand`) is not, whatever else is fixed."""
    from torchneck.diagnose.idioms import invariant_call

    src = tmp_path / "ds.py"
    src.write_text("import torch\nclass Sales:\n    @property\n    def stats(self):\n"
                   "        return self._compute_stats()\n    def __getitem__(self, i):\n"
                   "        return self.rows[i]\nclass Pinn:\n    def loss(self, fixed=False):\n"
                   "        xt = self.sample_points()\n        r = self.residual(xt, fixed=fixed)\n"
                   "        noise = torch.rand(4)\n        q = self.other(noise, fixed)\n        return r, q\n")
    assert invariant_call(str(src), 5, {"_compute_stats"}, called_repeatedly=True) == "_compute_stats"
    fixed = frozenset({"fixed"})
    assert invariant_call(str(src), 11, {"residual"}, called_repeatedly=True, invariant_params=fixed) is None
    assert invariant_call(str(src), 13, {"other"}, called_repeatedly=True, invariant_params=fixed) is None


def test_with_callers_follows_the_first_line_the_sampler_saw_called():
    """A recursion's slicing line issues most ops but was never sampled with a caller; the call
    path of the next line (the leaf product) reaches the line choosing the leaf size."""
    lines = [{"file": "s.py", "line": 16, "function": "strassen", "total_s": 1.0},
             {"file": "s.py", "line": 14, "function": "strassen", "total_s": 2.0,
              "callers": [{"file": "s.py", "line": 35, "function": "power"},
                          {"file": "s.py", "line": 50, "function": "main"}]}]
    f_ = facts(python={"window": {"sampled_s": 4.0, "lines": lines}})
    where = [Where(file="s.py", line=16, function="strassen"), Where(file="s.py", line=14, function="strassen")]
    assert [w.line for w in f_.with_callers(where)] == [16, 14, 35, 50]


@fires("op_hotspot")
def test_op_hotspot_names_an_embedding_lookup_done_as_a_one_hot_product(tmp_path):
    src = tmp_path / "score.py"
    src.write_text("import torch.nn.functional as F\ndef embed(ids, table):\n"
                   "    return F.one_hot(ids, table.shape[0]).float() @ table\n"
                   "def dense(x, w):\n    return x @ w\n")
    by_line = [{"op": "aten::mm", "file": str(src), "line": 3, "function": "embed", "self_us": 80_000.0}]
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::mm", 80_000.0)]), ops_by_line=by_line))
    assert f.evidence["one_hot_at"] == 3 and f.where[0].line == 3 and f.severity != "info"
    assert "table[ids]" in f.fix and "one-hot matrix by a table" in f.title
    by_line[0]["line"] = 5  # a plain product: the model's compute
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::mm", 80_000.0)]), ops_by_line=by_line))
    assert f.evidence["one_hot_at"] is None and f.severity == "info"


@fires("op_hotspot")
def test_a_multi_hot_bag_made_on_the_lines_before_its_product_is_an_embedding_bag(tmp_path):
    """A recommender pools a history as a dense bag (`torch.zeros(b, n)`, `scatter_add_` of ones)
    multiplied by the item table: an embedding bag done densely. The bag's zero fill and scatter
    go with the product; a zero matrix nothing scatters into is not one."""
    from torchneck.diagnose.chains import multi_hot_made_at, one_hot_product

    src = tmp_path / "pool.py"
    src.write_text("import torch\ndef pool(ids, table):\n    bag = torch.zeros(ids.size(0), table.size(0))\n"
                   "    bag.scatter_add_(1, ids, torch.ones_like(ids, dtype=bag.dtype))\n    return bag @ table\n"
                   "def plain(x, table):\n    acc = torch.zeros(x.size(0), table.size(0))\n    return acc @ table\n")
    assert one_hot_product(str(src), 5) and multi_hot_made_at(str(src), 5) == [3, 4]
    assert not one_hot_product(str(src), 8) and multi_hot_made_at(str(src), 8) == []
    by_line = [{"op": op, "file": str(src), "line": line, "function": "pool", "self_us": us}
               for op, line, us in (("aten::mm", 5, 60_000.0), ("aten::fill_", 3, 20_000.0),
                                    ("aten::scatter_add_", 4, 5_000.0))]
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::mm", 60_000.0)]), ops_by_line=by_line))
    assert f.evidence["one_hot_at"] == 5 and f.time_lost_s == pytest.approx(0.085)
