"""Rules on how the loop is driven: data loading, the optimizer, zeroing gradients, inference."""

from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.rules.training import (
    InputPipeline,
    InputPipelineEvidence,
    SingleTensorOptimizer,
    ZeroGradKernels,
)
from torchneck.model.analysis import Annotation, OpRow, OptimizerWork, SpanOps


def _op(name, self_us, count=10):
    return OpRow(name=name, count=count, self_us=self_us, total_us=self_us, mean_us=self_us / count)


ZERO_GRAD = "Optimizer.zero_grad#SGD.zero_grad"


def _zeroing(total_us, zeroes=50, calls=5, first_ops=20, last_ops=20, accumulated=0, added_us=0.0):
    """The optimizer's work in a window of `calls` zero_grad(set_to_none=False) calls, each
    zeroing `zeroes / calls` gradients (a `zero_` each, its `fill_` inside), and `accumulated`
    gradients written by backward."""
    ops = [_op("aten::fill_", 0.8 * total_us, count=zeroes), _op("aten::zero_", 0.05 * total_us, count=zeroes)]
    return OptimizerWork(spans=[SpanOps(name=ZERO_GRAD, count=calls, total_us=total_us, ops=ops,
                                        first_call_ops=first_ops, last_call_ops=last_ops)],
                         gradients_accumulated=accumulated, accumulate_added_us=added_us)


def _zero_grad_analysis(total_us=7_000.0, window_us=100_000.0, **zeroing):
    spans = [Annotation(name=ZERO_GRAD, count=zeroing.get("calls", 5), total_us=total_us)]
    return analysis(window_us=window_us, annotations=spans, optimizer=_zeroing(total_us, **zeroing))


@fires("zero_grad")
def test_zero_grad_costs_its_calls_wall_time():
    """The fills and the Python over every parameter: the spans' whole time, not the fills' 80 %."""
    f_ = facts(analysis=_zero_grad_analysis(accumulated=50, added_us=1_000.0),
               call_sites=[{"what": "optimizer", "file": "/x/train.py", "line": 12, "function": "main"}])
    [f] = ZeroGradKernels().check(f_)
    assert f.kind == "zero_grad" and f.where[0].line == 12 and "set_to_none=True" in f.fix
    assert abs(f.time_lost_s - (0.007 + 0.001)) < 1e-12  # the calls, and backward's adds into the zeros
    assert f.evidence["idle_update_s"] == 0.0  # backward wrote every gradient zeroed


@fires("zero_grad")
def test_zero_grad_points_at_the_line_that_ran_the_fills():
    by_line = [{"op": "aten::zero_", "file": "/x/train.py", "line": 35, "function": "hook", "self_us": 6_000.0}]
    f_ = facts(analysis=_zero_grad_analysis(), ops_by_line=by_line,
               call_sites=[{"what": "optimizer", "file": "/x/train.py", "line": 12, "function": "main"}])
    [f] = ZeroGradKernels().check(f_)
    assert [w.line for w in f.where] == [35, 12]  # the zero_grad call, then the optimizer


@fires("zero_grad")
def test_zero_grad_names_the_sampled_zero_grad_call_not_the_backward_that_ran_fills_too(tmp_path):
    """A zero_grad call inside a hook method: the trace placed its fills on `loss.backward()` (whose
    own fills outweigh them), the sampler saw the hook's `optimizer.zero_grad(...)` line."""
    src = tmp_path / "train.py"
    src.write_text("def hook(opt):\n    opt.zero_grad(set_to_none=False)\n\nloss.backward()\nhook(opt)\n")
    by_line = [{"op": "aten::fill_", "file": str(src), "line": 4, "function": "<module>", "self_us": 9_000.0},
               {"op": "aten::zero_", "file": str(src), "line": 4, "function": "<module>", "self_us": 1_000.0}]
    lines = [{"file": str(src), "line": 4, "function": "<module>", "total_s": 2.0, "library": ""},
             {"file": str(src), "line": 2, "function": "hook", "total_s": 1.0, "library": ""}]
    [f] = ZeroGradKernels().check(facts(analysis=_zero_grad_analysis(), ops_by_line=by_line,
                                        python={"window": {"sampled_s": 5.0, "lines": lines}}))
    assert f.where[0].line == 2


@fires("zero_grad")
def test_zero_grad_counts_only_the_first_add_of_an_accumulated_gradient():
    """Four micro-batches a step: None saves the first add of each gradient, not the other three."""
    [f] = ZeroGradKernels().check(facts(analysis=_zero_grad_analysis(accumulated=200, added_us=4_000.0)))
    assert abs(f.evidence["accumulate_add_s"] - 0.001) < 1e-12


@silent("zero_grad")
def test_zero_grad_silent_when_the_fills_are_elsewhere():
    """Fills outside zero_grad (a backward's), or zero_grad calls that zero nothing (set_to_none=True)."""
    assert ZeroGradKernels().check(facts(analysis=analysis(by_name=[_op("aten::zero_", 6_000.0)]))) == []
    to_none = OptimizerWork(spans=[SpanOps(name=ZERO_GRAD, count=5, total_us=20_000.0,
                                           ops=[_op("aten::detach_", 100.0)])])
    spans = [Annotation(name=ZERO_GRAD, count=5, total_us=20_000.0)]
    assert ZeroGradKernels().check(facts(analysis=analysis(annotations=spans, optimizer=to_none,
                                                           by_name=[_op("aten::fill_", 9_000.0)]))) == []


def _zero_grad_facts(by_line, lines, **zeroing):
    zeroing = {"calls": 2, "zeroes": 19, **zeroing}
    return facts(analysis=_zero_grad_analysis(total_us=800.0, window_us=33_000.0, **zeroing),
                 ops_by_line=by_line, python={"window": {"sampled_s": 5.0, "lines": lines}},
                 call_sites=[{"what": "optimizer", "optimizer": "SGD", "params": 100, "file": "/x/mt.py", "line": 32,
                              "function": "configure"}])


MT_BY_LINE = [{"op": "aten::fill_", "file": "/x/mt.py", "line": 35, "function": "zg", "self_us": 700.0},
              {"op": "aten::_foreach_zero_", "file": "/x/mt.py", "line": 35, "function": "zg", "self_us": 50.0}]
MT_LINES = [{"file": "/x/mt.py", "line": 35, "function": "zg", "total_s": 1.3,
             "library": "_disable_dynamo.<locals>.inner (_compile.py)"},
            {"file": "/x/mt.py", "line": 53, "function": "fit", "total_s": 2.2,
             "library": "Optimizer.profile_hook_step.<locals>.wrapper (optimizer.py)"}]


@fires("zero_grad")
def test_zero_grad_measured_over_the_steady_state_when_the_window_came_early():
    """One head per task: in an early window few gradients exist and zeroing is 3 % of it; the
    sampler finds the zero_grad line at 26 % of the steady state, once every head has a gradient."""
    [f] = ZeroGradKernels().check(_zero_grad_facts(MT_BY_LINE, MT_LINES))
    assert f.where[0].line == 35 and abs(f.evidence["sampled_share"] - 0.26) < 1e-9
    assert abs(f.time_lost_s - 0.26 * 0.033) < 1e-12 and "26% of the steady state" in f.title


@fires("zero_grad")
def test_zero_grad_adds_the_optimizer_s_updates_of_gradients_backward_did_not_write():
    """48 heads, one trained a step: each call zeroes more gradients than backward wrote (12 vs 6
    in the window, growing), so the heads a step skipped keep zeros the optimizer updates; in the
    steady state all 100 parameters have one, 94 of them zeros."""
    grown = _zero_grad_facts(MT_BY_LINE, MT_LINES, calls=3, zeroes=36, accumulated=18, first_ops=15, last_ops=21)
    [f] = ZeroGradKernels().check(grown)
    step_s = 2.2 / 5.0 * 0.033
    assert f.evidence["gradients_written"] == 6 and f.evidence["gradients_zeroed"] == 100
    assert abs(f.evidence["idle_update_s"] - step_s * 0.94) < 1e-12
    assert abs(f.time_lost_s - (0.26 * 0.033 + step_s * 0.94)) < 1e-12 and "94 of its 100 gradients" in f.title
    # Not growing in the window: the steady state is the window's 12 zeroed gradients, 6 of them written.
    steady = _zero_grad_facts(MT_BY_LINE, MT_LINES, calls=3, zeroes=36, accumulated=18, first_ops=21, last_ops=21)
    [g] = ZeroGradKernels().check(steady)
    assert g.evidence["gradients_zeroed"] == 12 and abs(g.evidence["idle_update_s"] - step_s * 0.5) < 1e-12


@silent("zero_grad")
def test_zero_grad_leaves_the_fills_of_a_backward_to_it():
    """Gradients of indexing are fills too: a backward line full of them is not zero_grad's."""
    by_line = [{"op": "aten::fill_", "file": "/x/g.py", "line": 72, "function": "main", "self_us": 6e6},
               {"op": "autograd::engine::evaluate_function: IndexBackward0", "file": "/x/g.py", "line": 72,
                "function": "main", "self_us": 3e4}]
    lines = [{"file": "/x/g.py", "line": 72, "function": "main", "total_s": 4.5}]
    assert ZeroGradKernels().check(_zero_grad_facts(by_line, lines)) == []  # the trace's 2 %: below 3 %


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
    assert "iterator once" in f.fix and "persistent_workers=True" in f.fix and "num_workers=N" not in f.fix


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


@fires("input_pipeline")
def test_input_pipeline_names_a_dataloader_built_in_the_epoch_loop(tmp_path):
    """`loader = DataLoader(..., num_workers=2)` inside the epoch loop: every epoch starts new
    workers; the line building it leads, and the fix builds it once with persistent workers."""
    src = tmp_path / "fit.py"
    src.write_text("for epoch in range(75):\n    loader = DataLoader(ds, num_workers=2)\n    for x, y in loader:\n"
                   "        step(x, y)\n")
    a = analysis()
    a.steps.breakdown_total_us = {"dataloader": 40_000.0, "cpu_exec": 60_000.0}
    lines = [{"file": str(src), "line": 3, "function": "<module>", "total_s": 2.0,
              "library": "_MultiProcessingDataLoaderIter.__init__ (dataloader.py)",
              "callers": []},
             {"file": str(src), "line": 2, "function": "<module>", "total_s": 0.5, "library": ""}]
    python = {"window": {"sampled_s": 5.0, "lines": []}, "loading": {"sampled_s": 2.5, "lines": lines}}
    [f] = InputPipeline().check(facts(analysis=a, python=python))
    assert f.evidence["made_in_loop"] == 2 and f.where[0].line == 2
    assert f.fix.startswith("Create the DataLoader once") and "persistent_workers=True" in f.fix


@silent("input_pipeline")
def test_input_pipeline_silent_when_the_loader_keeps_up():
    a = analysis()
    a.steps.breakdown_total_us = {"dataloader": 5_000.0, "cpu_exec": 95_000.0}  # 5 % < 10 %
    assert InputPipeline().check(facts(analysis=a)) == []


def _optimizer_steps(total_us, ops=(), floor_us=0.0, name="Optimizer.step#Adam.step", **more):
    """A window of 100 ms whose optimizer steps (5 calls) take `total_us` and run `ops`."""
    a = analysis(annotations=[Annotation(name=name, count=5, total_us=total_us)],
                 optimizer=OptimizerWork(spans=[SpanOps(name=name, count=5, total_us=total_us, ops=list(ops))]),
                 **more)
    a.ops.dispatch.floor_op_us = floor_us
    return a


@fires("optimizer")
def test_single_tensor_optimizer_with_many_parameters():
    """300 small tensors: each in-place op is little more than the per-op floor, which a fused
    step pays once; the out-of-place sqrt goes too."""
    sites = [{"what": "optimizer", "optimizer": "Adam", "params": 300, "foreach": None, "fused": None,
              "file": "/x/train.py", "line": 30, "function": "main"}]
    ops = [_op("aten::lerp_", 9_000.0, count=1500), _op("aten::sqrt", 3_000.0, count=300)]
    [f] = SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(40_000.0, ops, floor_us=5.0),
                                              call_sites=sites))
    assert abs(f.time_lost_s - 0.040 * (1 - 1_500.0 / 40_000.0)) < 1e-12 and f.where[0].line == 30
    assert "Adam steps take 40%" in f.title and "fused=True" in f.fix and f.evidence["kept_us"] == 1_500.0


@fires("optimizer")
def test_optimizer_updating_a_parameter_the_program_writes_itself(tmp_path):
    """A MoCo queue kept as an `nn.Parameter` and overwritten by the enqueue: the optimizer's
    step is that tensor's update (and its moments); a buffer is the fix, the whole step the saving.
    A parameter made with requires_grad=False, or never written by the program, is a weight."""
    src = tmp_path / "moco.py"
    src.write_text("import torch\nfrom torch import nn\nclass MoCo(nn.Module):\n    def __init__(self):\n"
                   "        self.queue = nn.Parameter(torch.randn(128, 65536))\n"
                   "        self.frozen = nn.Parameter(torch.randn(8, 8), requires_grad=False)\n"
                   "        self.w = nn.Parameter(torch.randn(8, 8))\n"
                   "    def enqueue(self, k, idx):\n        self.queue[:, idx] = k.T\n"
                   "        self.frozen.copy_(k[:8, :8])\n"
                   "def train(m):\n    opt = torch.optim.AdamW(m.parameters())\n")
    sites = [{"what": "optimizer", "optimizer": "AdamW", "params": 3, "foreach": None, "fused": None,
              "file": str(src), "line": 13, "function": "train"}]
    ops = [_op("aten::sqrt", 35_000.0, count=15), _op("aten::addcdiv_", 8_000.0, count=15)]
    [f] = SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(50_000.0, ops, floor_us=3.0),
                                              call_sites=sites))
    assert [w.line for w in f.where] == [5, 9, 13] and f.evidence["state_parameter"] == "queue"
    assert abs(f.time_lost_s - 0.050) < 1e-12 and "register_buffer" in f.fix
    src.write_text(src.read_text().replace("self.queue[:, idx] = k.T", "pass"))
    other = tmp_path / "moco2.py"
    other.write_text(src.read_text())
    sites[0]["file"] = str(other)
    [f] = SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(50_000.0, ops, floor_us=3.0),
                                              call_sites=sites))
    assert f.evidence["state_parameter"] is None and "fused=True" in f.fix


@fires("optimizer")
def test_hundreds_of_single_number_parameters_are_named_where_they_are_made(tmp_path):
    """v_pinn_heat: per-neuron slopes as a ParameterList of scalars, 512 of the optimizer's 522
    tensors. The line making them leads, the fix keeps them in one tensor, the saving is the
    whole step, and the tiny ops they cost elsewhere (dispatch_overhead) fold under it. A few
    scalars (a learned temperature) stay the ordinary finding."""
    from torchneck.model.findings import Finding, Where

    src = tmp_path / "pinn.py"
    src.write_text("import torch\nfrom torch import nn\nclass Act(nn.Module):\n    def __init__(self, width):\n"
                   "        self.scale = nn.Parameter(torch.tensor(1.0))\n"
                   "        self.slopes = nn.ParameterList(\n"
                   "            nn.Parameter(torch.tensor(0.1)) for _ in range(width))\n"
                   "def train(m):\n    opt = torch.optim.Adam(m.parameters())\n"
                   "    lbfgs = torch.optim.LBFGS(m.parameters())\n")
    sites = [{"what": "optimizer", "optimizer": "Adam", "params": 522, "scalars": 512, "foreach": None,
              "fused": None, "file": str(src), "line": 9, "function": "train"},
             {"what": "optimizer", "optimizer": "LBFGS", "params": 522, "scalars": 512, "foreach": None,
              "fused": None, "file": str(src), "line": 10, "function": "train"}]
    ops = [_op("aten::lerp_", 9_000.0, count=2600), _op("aten::sqrt", 3_000.0, count=520)]
    [f] = SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(40_000.0, ops, floor_us=5.0),
                                              call_sites=sites))
    assert [w.line for w in f.where] == [7, 9, 10] and f.evidence["scalar_parameters"] == 512
    assert "512 of their parameter tensors hold one number each (line 7)" in f.title
    assert "one tensor" in f.fix and abs(f.time_lost_s - 0.040) < 1e-12
    tiny = Finding(kind="dispatch_overhead", title="", time_lost_s=0.07, time_lost_pct=70.0, fix="", severity="high",
                   where=[Where(file=str(src), line=9, function="train")])
    explained = SingleTensorOptimizer().explained(f, tiny, facts())
    assert explained is not None and abs(explained.beyond_s - 0.03) < 1e-12
    sites = [dict(c, scalars=3) for c in sites]
    [f] = SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(40_000.0, ops, floor_us=5.0),
                                              call_sites=sites))
    assert f.evidence["scalar_parameters"] == 0 and "fused=True" in f.fix
    assert SingleTensorOptimizer().explained(f, tiny, facts()) is None


@fires("optimizer")
def test_dense_embedding_gradients_are_named_at_the_table_with_sparse_ones_as_the_fix(tmp_path):
    """v_two_tower_lit: Adagrad over 200,000-row id tables whose gradients are dense: backward
    zeroes a gradient as large as each table for 512 looked-up rows (embedding_dense_backward 23x
    its own time) and the step updates every row. The table's line leads, the saving is the step
    and that backward, and the zeros' op_hotspot folds under it. Sparse tables stay ordinary."""
    from torchneck.model.findings import Finding, Where

    src = tmp_path / "towers.py"
    src.write_text("from torch import nn\nclass Tower(nn.Module):\n    def __init__(self, n, d, sparse):\n"
                   "        self.feats = nn.Embedding(16, d, sparse=True)\n"
                   "        self.ids = nn.Embedding(n, d, sparse=sparse)\n"
                   "def opt(m):\n    return torch.optim.Adagrad(m.parameters())\n")
    sites = [{"what": "optimizer", "optimizer": "Adagrad", "params": 12, "scalars": 0, "foreach": None,
              "fused": None, "file": str(src), "line": 7, "function": "opt"}]
    ops = [_op("aten::addcmul_", 20_000.0, count=60), _op("aten::sqrt", 20_000.0, count=60)]
    dense = OpRow(name="aten::embedding_dense_backward", count=10, self_us=1_500.0, total_us=34_000.0, mean_us=3_400.0)
    a = _optimizer_steps(50_000.0, ops, floor_us=3.0, by_name=[dense])
    [f] = SingleTensorOptimizer().check(facts(analysis=a, call_sites=sites))
    assert [w.line for w in f.where] == [5, 7] and abs(f.time_lost_s - 0.084) < 1e-12
    assert "over whole embedding tables: their gradients are dense (line 5)" in f.title
    assert "sparse=True" in f.fix and "SparseAdam" in f.fix
    zeros = Finding(kind="op_hotspot", title="", time_lost_s=0.03, time_lost_pct=30.0, fix="", severity="medium",
                    where=[Where(file=str(src), line=9, function="fit")], ops=["aten::fill_"])
    assert SingleTensorOptimizer().explained(f, zeros, facts()) is not None
    lean = OpRow(name="aten::embedding_dense_backward", count=10, self_us=1_500.0, total_us=3_000.0, mean_us=300.0)
    [f] = SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(50_000.0, ops, floor_us=3.0, by_name=[lean]),
                                              call_sites=sites))
    assert f.evidence["dense_embedding_backward_s"] == 0.0 and "fused=True" in f.fix
    assert SingleTensorOptimizer().explained(f, zeros, facts()) is None


@fires("optimizer")
def test_single_tensor_optimizer_over_a_few_large_tensors():
    """Four embedding tables: a short loop, but each out-of-place op allocates and fills a
    temporary as big as a table; fused keeps at most the in-place passes over the state."""
    few = [{"what": "optimizer", "optimizer": "Adam", "params": 4, "foreach": False, "fused": None,
            "file": "/x/t.py", "line": 3, "function": "m"}]
    ops = [_op("aten::sqrt", 35_000.0, count=20), _op("aten::div", 20_000.0, count=20),
           _op("aten::addcdiv_", 8_000.0, count=20), _op("aten::lerp_", 6_000.0, count=20)]
    [f] = SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(70_000.0, ops, floor_us=3.0),
                                              call_sites=few))
    kept = 8_000.0 - 60.0 + 6_000.0 - 60.0
    saving = 1 - kept / 70_000.0
    assert f.where[0].line == 3 and "70%" in f.title and abs(f.evidence["expected_saving"] - saving) < 1e-12
    assert abs(f.time_lost_s - 0.070 * saving) < 1e-12


@fires("optimizer")
def test_optimizer_without_a_fused_implementation_keeps_every_op_s_work():
    """RMSprop has foreach only: the multi-tensor ops do the same math, temporaries included;
    only the Python and the per-parameter dispatch go."""
    ops = [_op("aten::sqrt", 20_000.0, count=200), _op("aten::addcmul_", 10_000.0, count=200)]
    a = _optimizer_steps(50_000.0, ops, floor_us=10.0, name="Optimizer.step#RMSprop.step")
    [f] = SingleTensorOptimizer().check(facts(analysis=a))
    assert f.evidence["fix_kind"] == "foreach" and f.evidence["kept_us"] == 26_000.0
    assert abs(f.time_lost_s - 0.024) < 1e-12 and f.fix.startswith("Pass foreach=True")


@silent("optimizer")
def test_optimizer_silent_when_multi_tensor_or_a_small_step():
    foreach = _optimizer_steps(40_000.0, by_name=[_op("aten::_foreach_add_", 1000.0)])
    assert SingleTensorOptimizer().check(facts(analysis=foreach)) == []
    fused = [{"what": "optimizer", "optimizer": "Adam", "params": 4, "fused": True, "file": "/x/t.py", "line": 3,
              "function": "m"}]
    assert SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(40_000.0), call_sites=fused)) == []
    # the span says 87 %, the sampler saw the opt.step() line take 1 % of every step: not the optimizer
    stray = [dict(fused[0], fused=None, params=2)]
    lines = [{"file": "/x/t.py", "line": 19, "function": "m", "total_s": 0.05,
              "library": "Optimizer.profile_hook_step.<locals>.wrapper (optimizer.py)"},
             {"file": "/x/t.py", "line": 16, "function": "m", "total_s": 4.0, "library": ""}]
    assert SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(87_000.0), call_sites=stray,
                                               python={"window": {"sampled_s": 5.0, "lines": lines}})) == []
    small = [dict(fused[0], fused=None, params=300)]
    assert SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(10_000.0),
                                               call_sites=small)) == []  # 10 % < 15 %


@fires("optimizer")
def test_optimizer_step_bounded_by_the_opt_step_line_when_the_sampler_named_no_callee(tmp_path):
    """The profiler inflates a single-tensor step's many small ops (an AdamW step over 4 tensors
    took 50 % of a profiled window, 21 % unprofiled); the sampled `opt.step()` line bounds it even
    when the sampler left its callee blank (its samples fell inside traced ops)."""
    src = tmp_path / "train.py"
    src.write_text("import torch\nfor _ in range(9):\n    loss.backward()\n    opt.step()\n")
    lines = [{"file": str(src), "line": 3, "function": "<module>", "total_s": 3.0, "library": ""},
             {"file": str(src), "line": 4, "function": "<module>", "total_s": 1.0, "library": ""}]
    ops = [_op("aten::lerp_", 1_000.0, count=20), _op("aten::sqrt", 9_000.0, count=20)]
    [f] = SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(50_000.0, ops),
                                              python={"window": {"sampled_s": 5.0, "lines": lines}}))
    assert abs(f.evidence["optimizer_step_s"] - 0.2 * 0.1) < 1e-12 and "20% of the time" in f.title


def test_optimizer_work_reads_the_ops_inside_the_optimizer_s_spans(tmp_path):
    """From a trace: the ops inside each optimizer span (its thread's, not another thread's at
    the same moment), their growth from the first call to the last, and backward's
    `AccumulateGrad` calls with the add inside the one whose gradient existed."""
    import json

    from torchneck.analysis.summary import analyze_trace
    from torchneck.trace.loader import load_trace

    def ev(name, ts, dur, cat="cpu_op", tid=1):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    def step(t0, zeroes):
        out = [ev(f"ProfilerStep#{t0 // 1000}", t0, 1000, "user_annotation"),
               ev("Optimizer.zero_grad#SGD.zero_grad", t0 + 10, 100, "user_annotation")]
        out += [e for i in range(zeroes) for e in (ev("aten::zero_", t0 + 20 + 20 * i, 15),
                                                   ev("aten::fill_", t0 + 22 + 20 * i, 10))]
        out += [ev("torch::autograd::AccumulateGrad", t0 + 300, 30), ev("aten::add_", t0 + 305, 20),
                ev("torch::autograd::AccumulateGrad", t0 + 340, 5),
                ev("Optimizer.step#SGD.step", t0 + 400, 300, "user_annotation"),
                ev("aten::add_", t0 + 410, 100), ev("aten::sqrt", t0 + 520, 150),
                ev("aten::mul", t0 + 420, 50, tid=2)]  # another thread's op, inside the span's time
        return out

    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": step(0, 2) + step(1000, 3)}))
    work = analyze_trace(load_trace(p)).ops.optimizer
    zero, opt = ({s.name: s for s in work.spans}[n] for n in ("Optimizer.zero_grad#SGD.zero_grad",
                                                              "Optimizer.step#SGD.step"))
    assert (zero.count, zero.total_us, zero.first_call_ops, zero.last_call_ops) == (2, 200.0, 4, 6)
    assert {o.name: (o.count, o.self_us) for o in zero.ops} == {"aten::zero_": (5, 25.0), "aten::fill_": (5, 50.0)}
    assert {o.name: (o.count, o.self_us) for o in opt.ops} == {"aten::add_": (2, 200.0), "aten::sqrt": (2, 300.0)}
    assert work.gradients_accumulated == 4 and work.accumulate_added_us == 40.0


def test_optimizer_work_counts_an_op_dispatched_again_inside_itself_once(tmp_path):
    """PyTorch 1.8 records `aten::zero_` inside `aten::zero_` (its autograd and CPU kernels): one
    gradient zeroed, not two."""
    import json

    from torchneck.analysis.summary import analyze_trace
    from torchneck.trace.loader import load_trace

    def ev(name, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    events = [ev("ProfilerStep#1", 0, 1000, "user_annotation"),
              ev("Optimizer.zero_grad#SGD.zero_grad", 10, 200, "user_annotation"),
              ev("aten::zero_", 20, 50), ev("aten::zero_", 25, 40),  # one call, its kernel inside
              ev("aten::zero_", 100, 50), ev("aten::zero_", 105, 40)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    [zero] = analyze_trace(load_trace(p)).ops.optimizer.spans
    assert zero.first_call_ops == 2 and [(o.count, o.self_us, o.total_us) for o in zero.ops] == [(2, 100.0, 100.0)]


@fires("optimizer")
def test_optimizer_step_from_its_spans_when_the_sampler_named_no_callee():
    """Under load the sampler may leave the opt.step() line's callee blank (its samples all
    inside big ops): that is no bound, not a step of 0 %."""
    lines = [{"file": "/x/t.py", "line": 85, "function": "fit", "total_s": 4.0, "library": ""}]
    ops = [_op("aten::sqrt", 40_000.0, count=20), _op("aten::lerp_", 10_000.0, count=20)]
    [f] = SingleTensorOptimizer().check(facts(analysis=_optimizer_steps(70_000.0, ops),
                                              python={"window": {"sampled_s": 5.0, "lines": lines}}))
    assert abs(f.time_lost_s - 0.060) < 1e-12


@fires("input_pipeline")
def test_input_pipeline_of_a_tensor_dataset_fetched_row_by_row_names_the_loader(tmp_path):
    """A DataLoader indexing a TensorDataset one row at a time (the capture's DataLoader record):
    its construction line first, the batch fetch in the fix; the tiny index ops it issues at the
    `for ... in loader` line are its symptom."""
    from torchneck.diagnose.rules.dispatch import DispatchOverhead
    from torchneck.model.findings import Finding, Where

    src = tmp_path / "nb.py"
    src.write_text("loader = make()\nfor x, y in loader:\n    step(x, y)\n")
    a = analysis(annotations=[])
    a.steps.breakdown_total_us = {"dataloader": 80_000.0, "cpu_exec": 20_000.0}
    loading = {"lines": [{"file": str(src), "line": 2, "function": "<module>", "total_s": 0.08}]}
    sites = [{"what": "dataloader", "file": str(src), "line": 1, "function": "<module>", "dataset": "TensorDataset",
              "batch_size": 2048, "num_workers": 0, "per_sample": True}]
    f = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading},
                                    call_sites=sites))[0]
    assert [w.line for w in f.where] == [1, 2] and f.evidence["per_sample_from"] == "TensorDataset"
    assert "BatchSampler(RandomSampler(ds), 2048" in f.fix
    tiny = Finding(kind="dispatch_overhead", title="", time_lost_s=0.07, time_lost_pct=70.0, fix="", severity="high",
                   where=[Where(file=str(src), line=3, function="<module>"), Where(file=str(src), line=2,
                                                                                   function="<module>")])
    assert InputPipeline().explained(f, tiny, facts()).seconds == 0.07
    assert DispatchOverhead().explained(tiny, f, facts()) is None  # the loop's header is the loader's line too


def test_the_dataloader_s_construction_is_recorded_with_how_it_fetches():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from torchneck.capture.callsites import CallSites

    sites = CallSites()
    sites.install()
    try:
        data = TensorDataset(torch.randn(64, 4))
        loaders = [DataLoader(data, batch_size=8) for _ in range(3)]  # one line, recorded once
        DataLoader(data, batch_size=None)
    finally:
        sites.uninstall()
    records = [r for r in sites.records if r["what"] == "dataloader"]
    assert [(r["dataset"], r["batch_size"], r["per_sample"]) for r in records] == [
        ("TensorDataset", 8, True), ("TensorDataset", None, False)]
    assert records[0]["file"] == __file__ and len(loaders) == 3
    assert DataLoader.__init__.__name__ == "__init__"  # uninstalled


def test_anomaly_mode_turned_on_by_torch_itself_is_not_the_user_s_setting():
    """AOT autograd traces a compiled model's backward under `detect_anomaly(check_nan=False)`: a
    construction from torch's own files is no call site of the user's (an evaluation of compiled
    towers had been told anomaly detection was on); the script's own call is."""
    import os
    import warnings

    import torch

    from torchneck.capture.callsites import CallSites

    inside_torch = os.path.join(os.path.dirname(torch.__file__), "_functorch", "tracing.py")
    sites = CallSites()
    sites.install()
    warnings.filterwarnings("ignore", "Anomaly Detection has been enabled")  # pytest restores the filters
    try:
        exec(compile("import torch\nwith torch.autograd.detect_anomaly(check_nan=False):\n    pass\n",
                     inside_torch, "exec"), {})
        with torch.autograd.set_detect_anomaly(False):
            pass
        with torch.autograd.set_detect_anomaly(True):
            pass
    finally:
        sites.uninstall()
    assert [(r["what"], r["file"]) for r in sites.records] == [("anomaly_detection", __file__)]


@fires("input_pipeline")
def test_input_pipeline_of_features_computed_over_a_whole_recording_for_a_crop(tmp_path):
    """A Dataset featurises a whole 30 s recording (the STFT's lines take the loading time) to keep
    a 1 s window of frames: the line slicing the result, which the samples name as the caller,
    leads; slicing the input first is the fix. A slice of the input itself is not it."""
    from torchneck.diagnose.idioms import computed_then_sliced

    src = tmp_path / "audio.py"
    src.write_text("import torch\n"
                   "def logmel(wav):\n    spec = torch.stft(wav, 400, 160, return_complex=True)\n"
                   "    return spec.abs().log()\n"
                   "class Clips(torch.utils.data.Dataset):\n    def window(self, wav, start):\n"
                   "        return logmel(wav)[:, start:start + self.frames]\n"  # 7
                   "    def cut(self, wav, start):\n        return logmel(wav[start:start + 16000])\n")  # 9
    assert computed_then_sliced(str(src), 7) and not computed_then_sliced(str(src), 9)
    a = analysis(annotations=[])
    a.steps.breakdown_total_us = {"dataloader": 80_000.0, "cpu_exec": 20_000.0}
    caller = {"file": str(src), "line": 7, "function": "Clips.window"}
    loading = {"lines": [{"file": str(src), "line": n, "function": "logmel", "total_s": 0.04, "callers": [caller]}
                         for n in (3, 4)]}
    [f] = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading}))
    assert f.where[0].line == 7 and f.evidence["sliced_at"] == 7 and "slice the input" in f.fix


@fires("input_pipeline")
def test_input_pipeline_of_a_dataset_indexing_its_own_tensors_row_by_row(tmp_path):
    """A Dataset of the program's own whose __getitem__ indexes its tensors with the index and
    transforms one row: fetched one sample at a time, it is a TensorDataset in all but name."""
    src = tmp_path / "ctr.py"
    src.write_text("import torch\nclass Rows(torch.utils.data.Dataset):\n    def __getitem__(self, idx):\n"
                   "        return torch.log1p(self.dense[idx])\n")
    a = analysis(annotations=[])
    a.steps.breakdown_total_us = {"dataloader": 80_000.0, "cpu_exec": 20_000.0}
    loading = {"lines": [{"file": str(src), "line": 4, "function": "Rows.__getitem__", "total_s": 0.08}]}
    sites = [{"what": "dataloader", "file": "/x/run.py", "line": 131, "function": "build", "dataset": "Rows",
              "batch_size": 1024, "num_workers": 0, "per_sample": True}]
    f = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading},
                                    call_sites=sites))[0]
    assert f.where[0].line == 131 and f.evidence["per_sample_from"] == "Rows" and "list of indices" in f.fix
    files = tmp_path / "files.py"
    files.write_text("import torch\nclass Files(torch.utils.data.Dataset):\n    def __getitem__(self, idx):\n"
                     "        return torch.load(self.paths[idx] + '.pt')\n")  # a file per sample: workers help
    loading = {"lines": [{"file": str(files), "line": 4, "function": "Files.__getitem__", "total_s": 0.08}]}
    f = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading},
                                    call_sites=sites))[0]
    assert f.evidence["per_sample_from"] is None and "num_workers" in f.fix
    csv = tmp_path / "csv_rows.py"
    csv.write_text("class Lines:\n    def __getitem__(self, i):\n        parts = self.lines[i].split(',')\n"
                   "        return [float(v) for v in parts]\n")  # strings parsed per row: no tensor rows
    loading = {"lines": [{"file": str(csv), "line": 3, "function": "Lines.__getitem__", "total_s": 0.08}]}
    f = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading},
                                    call_sites=sites))[0]
    assert f.evidence["per_sample_from"] is None
    kept = tmp_path / "kept.py"  # a dict of rows, each indexed from tensors the class made with torch
    kept.write_text("import torch\nclass Clicks:\n    def __init__(self, users, hour):\n"
                    "        self.users = torch.as_tensor(users)\n        self.hour = list(hour)\n"
                    "    def __getitem__(self, idx):\n"
                    "        return {'user': self.users[idx], 'hour': self.hour[idx]}\n")
    loading = {"lines": [{"file": str(kept), "line": 7, "function": "Clicks.__getitem__", "total_s": 0.08}]}
    f = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading},
                                    call_sites=sites))[0]
    assert f.evidence["per_sample_from"] == "Rows"
    featurizer = {"file": str(csv), "line": 3, "function": "frames", "total_s": 0.07}  # a transform's loop
    loading = {"lines": [featurizer, {**loading["lines"][0], "total_s": 0.01}]}  # takes the time, not the fetch
    f = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading},
                                    call_sites=sites))[0]
    assert f.evidence["per_sample_from"] is None


@fires("input_pipeline")
def test_input_pipeline_names_statistics_recomputed_for_every_sample(tmp_path):
    """The Dataset scales each window by statistics of the whole training span, recomputed per
    sample (`robust_stats(self.values[: self.fit_end])` in a method `__getitem__` calls): the
    loader's time is that helper's, and computing it once is the fix, not fetching batches."""
    src = tmp_path / "windows.py"
    src.write_text("import numpy as np\ndef robust_stats(x):\n    return np.percentile(x, [25, 50, 75], axis=0)\n"
                   "class Windows:\n    def scale(self, window):\n"
                   "        q = robust_stats(self.values[: self.fit_end])\n"
                   "        return (window - q[1]) / (q[2] - q[0])\n"
                   "    def __getitem__(self, i):\n        return self.scale(self.values[i : i + 48])\n")
    a = analysis(annotations=[])
    a.steps.breakdown_total_us = {"dataloader": 80_000.0, "cpu_exec": 20_000.0}
    loading = {"lines": [{"file": str(src), "line": 3, "function": "robust_stats", "total_s": 0.07,
                          "callers": [{"file": str(src), "line": 6, "function": "Windows.scale"},
                                      {"file": str(src), "line": 9, "function": "Windows.__getitem__"}]}]}
    sites = [{"what": "dataloader", "file": "/x/run.py", "line": 30, "function": "main", "dataset": "Windows",
              "batch_size": 32, "num_workers": 0, "per_sample": True}]
    [f] = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading},
                                      call_sites=sites))
    assert f.where[0].line == 6 and f.evidence["invariant_call"] == "robust_stats"
    assert "compute it once" in f.fix and f.evidence["per_sample_from"] is None


@fires("input_pipeline")
def test_input_pipeline_names_a_lazy_npz_archive_read_per_sample(tmp_path):
    """`self.archive = np.load("data.npz")` kept lazy: each `self.archive["images"][idx]` in
    `__getitem__` reads and decompresses the whole array for one sample; an archive read into a
    dict first is not lazy."""
    src = tmp_path / "shapes.py"
    src.write_text("import numpy as np\nclass Shapes:\n    def __init__(self, path):\n"
                   "        self.archive = np.load(path)\n    def __getitem__(self, idx):\n"
                   "        return self.archive['images'][idx]\n"
                   "class Eager:\n    def __init__(self, path):\n        self.arrays = dict(np.load(path))\n"
                   "    def __getitem__(self, idx):\n        return self.arrays['images'][idx]\n")
    a = analysis(annotations=[])
    a.steps.breakdown_total_us = {"dataloader": 80_000.0, "cpu_exec": 20_000.0}
    for line, expected in ((6, 4), (11, None)):
        loading = {"lines": [{"file": str(src), "line": line, "function": "__getitem__", "total_s": 0.08}]}
        [f] = InputPipeline().check(facts(analysis=a, python={"window": {"lines": []}, "loading": loading}))
        assert f.evidence["archive_at"] == expected
    assert "dict(np.load(path))" in InputPipeline().fix(InputPipelineEvidence(dataloader_s=1.0, window_s=1.0,
                                                                              archive_at=4))
