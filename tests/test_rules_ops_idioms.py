"""op_hotspot's idioms of round 11 (programs written by people who had not seen torchneck): a
distance matrix built from a broadcast difference, a value recomputed on every pass of a loop, a
matrix chain multiplied left to right into a vector, a gradient asked of data, an op the trace
could not place (a window cut short); and of round 20, a kept window stacked whole to be reduced
on every pass. Each on both sides."""

import pytest
from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.chains import broadcast_product, chain_ends_in_vector, gradient_asked_for, pairwise_difference
from torchneck.diagnose.loop_invariants import invariant_statement, reads_recomputed, restacks_window
from torchneck.diagnose.rule import Explanation
from torchneck.diagnose.rules.ops import OpHotspot
from torchneck.model.analysis import OpRow
from torchneck.model.findings import Finding, Where


def _op(name, self_us, count=10, total_us=None):
    return OpRow(name=name, count=count, self_us=self_us, total_us=total_us or self_us, mean_us=self_us / count)


def _check(src, line, op="aten::pow", others=()):
    by_line = [{"op": op, "file": str(src), "line": line, "function": "f", "self_us": 60_000.0, "count": 10},
               *({"op": o, "file": str(src), "line": line, "function": "f", "self_us": 1_000.0, "count": 10}
                 for o in others)]
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op(op, 60_000.0)]), ops_by_line=by_line))
    return f


@fires("op_hotspot")
def test_a_distance_matrix_from_a_broadcast_difference(tmp_path):
    src = tmp_path / "d.py"
    src.write_text("import torch\n"
                   "def a(x, c):\n    return ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1)\n"
                   "def b(x, c):\n    return (x.unsqueeze(1) - c.unsqueeze(0)).norm(dim=-1)\n"
                   "def c(x, c):\n    return torch.square(x[:, None] - c[None]).sum(dim=2)\n"
                   "def d(x, c):\n    return (x - c[0]).pow(2).sum(-1)\n"
                   "def e(x, c):\n    return (x[:, None] * c[None]).sum(-1)\n"
                   "def f(q, bank):\n    diff = q[:, None, :] - bank[None, :, :]\n"
                   "    return (diff * diff).sum(-1).sqrt()\n"
                   "def g(q, bank):\n    diff = q - bank[0]\n    return (diff * diff).sum(-1)\n"
                   "def h(q, d):\n    return F.cosine_similarity(q[:, None, :], d[None, :, :], dim=-1)\n"
                   "def i(q, d):\n    return F.cosine_similarity(q, d[0:1], dim=-1)\n")
    # the difference named on the line before, squared as d * d (a streaming kNN scorer's)
    assert [pairwise_difference(str(src), n) for n in (3, 5, 7, 9, 11, 14, 17)] == \
        [True, True, True, False, False, True, False]
    assert broadcast_product(str(src), 11) and not broadcast_product(str(src), 3)
    # a cosine similarity of broadcast tensors (an evaluator scoring queries against a corpus); not of rows
    assert broadcast_product(str(src), 19) and not broadcast_product(str(src), 21)
    f = _check(src, 3)
    assert f.evidence["pairwise_at"] == 3 and f.severity == "medium" and "torch.cdist" in f.fix
    assert _check(src, 9).severity == "info"  # a difference to one code: no pairwise tensor
    # that line's Python outside the ops (Tensor.__pow__'s wrapper, freeing the N x M x D
    # difference) is the same statement: under it, adding nothing to the ops' upper bound
    hot = Finding(kind="python_hotspot", title="t", time_lost_s=0.02, time_lost_pct=20.0, fix="f",
                  where=[Where(file=str(src), line=3, function="a")])
    assert OpHotspot().explained(f, hot, facts()) == Explanation(0.02)
    hot.where = [Where(file=str(src), line=5, function="b")]
    assert OpHotspot().explained(f, hot, facts()) is None


@fires("op_hotspot")
def test_a_value_recomputed_on_every_pass_of_its_loop(tmp_path):
    src = tmp_path / "w.py"
    src.write_text("import torch\n"
                   "def windows(raw, scale, starts):\n"
                   "    for s in starts:\n"
                   "        phys = (raw.float() - 3) * scale\n"           # 4: invariant
                   "        yield phys[:, s:s + 8]\n"
                   "def varies(raw, starts):\n"
                   "    for s in starts:\n"
                   "        x = raw[:, s:] * 2\n"                         # 8: reads the loop's name
                   "        yield x\n"
                   "def drawn(raw, starts):\n"
                   "    for s in starts:\n"
                   "        noise = torch.randn(4) * raw.std()\n"         # 12: a new draw per pass
                   "        yield noise[s]\n"
                   "def changed(raw, starts):\n"
                   "    for s in starts:\n"
                   "        acc = raw * 2\n"                              # 16: changed in place below
                   "        acc.add_(s)\n"
                   "        yield acc\n"
                   "def bench(raw, n):\n"
                   "    for _ in range(n):\n"
                   "        out = raw * 2\n"                             # 21: a loop timing the statement
                   "def window(frames, history):\n"
                   "    for t, frame in frames:\n"
                   "        history.append(frame)\n"
                   "        total = torch.stack(tuple(history)).sum(0)\n"  # 25: its input grows in place
                   "        yield t, total\n")
    assert [invariant_statement(str(src), n) for n in (4, 8, 12, 16, 21, 25)] == [True, False, False, False, False,
                                                                                False]
    f = _check(src, 4, op="aten::sub")
    assert f.evidence["recomputed_at"] == 4 and f.severity == "medium" and "once before the loop" in f.fix
    # the loop's line yielding its slice holds the value (and its release): the same cause's time
    assert reads_recomputed(str(src), 4, 5) and not reads_recomputed(str(src), 4, 9)
    hot = Finding(kind="python_hotspot", title="t", time_lost_s=0.02, time_lost_pct=20.0, fix="f",
                  where=[Where(file=str(src), line=5, function="windows")])
    assert OpHotspot().explained(f, hot, facts()) == Explanation(0.02, adds=True)
    hot.where = [Where(file=str(src), line=9, function="varies")]
    assert OpHotspot().explained(f, hot, facts()) is None


@fires("op_hotspot")
def test_a_matrix_chain_multiplied_left_to_right_into_a_vector(tmp_path):
    src = tmp_path / "h.py"
    src.write_text("def hvp(X, s, v):\n    return X.T @ (s[:, None] * X) @ v\n"
                   "def right(X, s, v):\n    return X.T @ (s * (X @ v))\n")
    path = str(src)
    assert chain_ends_in_vector(path, 2, {"aten::mm", "aten::mv"})
    assert not chain_ends_in_vector(path, 2, {"aten::mm"})  # three matrices: any order builds matrices
    assert not chain_ends_in_vector(path, 4, {"aten::mv"})
    f = _check(src, 2, op="aten::mm", others=("aten::mv", "aten::mul"))
    assert f.evidence["chain_at"] == 2 and f.severity == "medium" and "A @ (B @ v)" in f.fix
    # the fix rewrites the line: the scaled matrix's product (mul) goes with the matrix product
    assert f.time_lost_s == pytest.approx(0.062) and "all the ops of the line" in f.evidence["time_lost_is"]
    assert _check(src, 2, op="aten::mm").severity == "info"


def test_a_gradient_asked_of_data_that_a_step_indexes(tmp_path):
    src = tmp_path / "t.py"
    src.write_text("class T:\n"
                   "    def __init__(self, X, y):\n"
                   "        self.X = X\n"
                   "        self.X.requires_grad_(True)\n"
                   "        self.y = y\n"
                   "    def step(self, idx):\n"
                   "        return self.X[idx], self.y[idx]\n"
                   "    def other(self, idx):\n"
                   "        return self.y[idx]\n")
    assert gradient_asked_for(str(src), 7) == 4
    assert gradient_asked_for(str(src), 9) is None
    off = tmp_path / "t_off.py"  # a file of its own: sources are parsed once per name
    off.write_text(src.read_text().replace("requires_grad_(True)", "requires_grad_(False)"))
    assert gradient_asked_for(str(off), 7) is None
    used = tmp_path / "t_used.py"  # the gradient is read (a saliency map): asked on purpose
    used.write_text(src.read_text() + "    def saliency(self):\n        return self.X.grad.abs()\n")
    assert gradient_asked_for(str(used), 7) is None


@silent("op_hotspot")
def test_an_op_the_trace_does_not_place_takes_the_line_sampled_inside_ops(tmp_path):
    """A window cut after a few events has no line marks: the samples say which line spent the
    steady state inside torch ops, and its idiom applies; a line mostly outside ops does not."""
    src = tmp_path / "q.py"
    src.write_text("def d2(x, c):\n    return ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1)\n")
    sampled = {"window": {"sampled_s": 1.0, "lines": [
        {"file": str(src), "line": 2, "function": "d2", "total_s": 0.9, "outside_ops_s": 0.0, "self_s": 0.0}]}}
    a = analysis(by_name=[_op("aten::pow", 60_000.0)])
    [f] = OpHotspot().check(facts(analysis=a, python=sampled))
    assert f.where[0].line == 2 and f.evidence["pairwise_at"] == 2
    sampled["window"]["lines"][0]["outside_ops_s"] = 0.85  # Python, not ops: the line is not the op's
    [f] = OpHotspot().check(facts(analysis=a, python=sampled))
    assert f.where == [] and f.severity == "info"


@fires("op_hotspot")
def test_a_recomputed_line_that_is_not_the_top_op_is_named_too(tmp_path):
    """`unit = F.normalize(self.table)` per query chunk: its ops are not the top op (the matmul
    is), but they take a quarter of the window and redo the same work each pass."""
    src = tmp_path / "r.py"
    src.write_text("import torch.nn.functional as F\n"
                   "class R:\n"
                   "    def search(self, queries):\n"
                   "        for chunk in queries.split(8):\n"
                   "            unit = F.normalize(self.table, dim=1)\n"   # 5: invariant
                   "            scores = chunk @ unit.T\n")                 # 6: the product
    by_line = [{"op": "aten::mm", "file": str(src), "line": 6, "function": "R.search", "self_us": 60_000.0},
               {"op": "aten::div", "file": str(src), "line": 5, "function": "R.search", "self_us": 15_000.0},
               {"op": "aten::linalg_vector_norm", "file": str(src), "line": 5, "function": "R.search",
                "self_us": 10_000.0}]
    found = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::mm", 60_000.0)]), ops_by_line=by_line))
    assert [f.evidence["recomputed_at"] for f in found] == [None, 5]
    assert found[1].severity == "medium" and abs(found[1].time_lost_s - 0.025) < 1e-9
    by_line[1]["self_us"] = by_line[2]["self_us"] = 5_000.0  # 10 % of the window: under MIN_SHARE
    found = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::mm", 60_000.0)]), ops_by_line=by_line))
    assert [f.evidence["recomputed_at"] for f in found] == [None]


@fires("op_hotspot")
def test_a_whole_jacobian_of_a_batch_kept_for_its_per_sample_blocks(tmp_path):
    """Score matching's trace term (unseen round 12): `jacobian(model, x)` on a batch is a
    (B, D, B, D) tensor, one backward pass per output element, of which `einsum("bibj->bij")`
    keeps the per-sample blocks. Not when the batch is summed first, nor for a Jacobian kept whole."""
    from torchneck.diagnose.chains import jacobian_kept_diagonal

    src = tmp_path / "sm.py"
    src.write_text("import torch\nfrom torch.autograd.functional import jacobian\n"
                   "def blocks(f, x):\n    jac = jacobian(f, x, create_graph=True)\n"          # 4: fires
                   "    return torch.einsum('bibj->bij', jac)\n"
                   "def summed(f, x):\n    jac = jacobian(lambda t: f(t).sum(0), x)\n"         # 7: the sum first
                   "    return jac.permute(1, 0, 2)\n"
                   "def whole(f, x):\n    jac = jacobian(f, x)\n    return jac.sum()\n"       # 10: kept whole
                   "def diag(f, x):\n    h = torch.autograd.functional.hessian(f, x)\n"       # 13: fires
                   "    return h.diagonal()\n")
    assert [jacobian_kept_diagonal(str(src), n) for n in (4, 7, 10, 13)] == [True, False, False, True]
    f = _check(src, 4, op="aten::mm")
    assert f.evidence["jacobian_diagonal_at"] == 4 and f.severity == "medium" and "vmap" in f.fix
    assert _check(src, 10, op="aten::mm").severity == "info"


@fires("op_hotspot")
def test_a_determinant_of_a_product_the_program_assembles(tmp_path):
    """A Glow-style LU layer (unseen round 12): `slogdet(self.weight())` where `weight()` returns
    `P @ L @ U`, or the product written inline; not a determinant of a matrix given whole."""
    from torchneck.diagnose.chains import determinant_of_product

    src = tmp_path / "flow.py"
    src.write_text("import torch\nclass LU:\n    def weight(self):\n        return self.P @ self.L @ self.U\n"
                   "    def logdet(self):\n        return torch.linalg.slogdet(self.weight())[1]\n"   # 6: fires
                   "def inline(P, L, U):\n    return torch.logdet(P @ L @ U)\n"                      # 8: fires
                   "def given(W):\n    return torch.linalg.slogdet(W)[1]\n")                          # 10: no
    assert [determinant_of_product(str(src), n) for n in (6, 8, 10)] == [True, True, False]
    f = _check(src, 8, op="aten::mm")
    assert f.evidence["determinant_at"] == 8 and f.severity == "medium" and "log_s.sum()" in f.fix
    assert _check(src, 10, op="aten::mm").severity == "info"


@fires("op_hotspot")
def test_a_distance_matrix_in_training_counts_its_backward(tmp_path):
    """A triplet loss's distance matrix: the pow / sub / sum at the line are half its cost, their
    backward nodes at the `.backward()` line the rest, in the share of their forward calls the line
    made (another line's pow keeps its own)."""
    from torchneck.model.analysis import BackwardNode
    src = tmp_path / "t.py"
    src.write_text("import torch\n"
                   "def d2(e):\n    return ((e[:, None, :] - e[None, :, :]) ** 2).sum(-1)\n"
                   "def other(x):\n    return x ** 2\n"
                   "def step(loss):\n    loss.backward()\n")
    at = {"file": str(src), "function": "f"}
    by_line = [{**at, "op": "aten::pow", "line": 3, "self_us": 30_000.0, "count": 5},
               {**at, "op": "aten::sub", "line": 3, "self_us": 20_000.0, "count": 5},
               {**at, "op": "aten::pow", "line": 5, "self_us": 1_000.0, "count": 5},
               {**at, "op": "aten::mul", "line": 7, "self_us": 40_000.0, "count": 10},
               {**at, "op": "autograd::engine::evaluate_function: PowBackward0", "line": 7, "self_us": 500.0,
                "count": 10}]
    nodes = [BackwardNode(node="PowBackward0", count=10, total_us=40_000.0, forward_op="aten::pow", forward_count=20),
             BackwardNode(node="SubBackward0", count=5, total_us=6_000.0, forward_op="aten::sub", forward_count=5)]
    f_ = facts(analysis=analysis(by_name=[_op("aten::pow", 31_000.0)], backward_nodes=nodes), ops_by_line=by_line)
    assert f_.backward_us_at(Where(file=str(src), line=3, function="d2")) == 40_000.0 / 2 + 6_000.0
    assert f_.backward_us_at(Where(file=str(src), line=7, function="step")) == 0.0  # the backward's own line
    [f] = OpHotspot().check(f_)
    assert f.evidence["pairwise_at"] == 3
    assert abs(f.time_lost_s - (50_000.0 + 26_000.0) / 1e6) < 1e-9  # the line's ops and their backward


@fires("op_hotspot")
def test_a_window_kept_in_a_deque_and_stacked_whole_on_every_pass(tmp_path):
    """A camera stream's background: the last 12 frames in a deque, stacked and summed again for
    every frame; a running sum adds the frame that enters and subtracts the one that leaves. The
    line's ops (the stack's copies, the sum) are the saving. A stack of fresh pieces, or of a
    window nothing appends to in the loop, is not it."""
    src = tmp_path / "stream.py"
    src.write_text("import torch\n"
                   "def background(stream, history):\n"
                   "    for t, frame in stream:\n"
                   "        history.append(frame)\n"
                   "        total = torch.stack(tuple(history)).to(torch.int32).sum(dim=0)\n"  # 5
                   "        yield total\n"
                   "def pieces(stream):\n"
                   "    for a, b in stream:\n"
                   "        yield torch.stack([a, b]).sum(0)\n"  # 9: new pieces each pass
                   "def fixed(stream, bank):\n"
                   "    for x in stream:\n"
                   "        yield torch.cat(list(bank)).mean(0) + x\n")  # 12: the loop never feeds bank
    assert [restacks_window(str(src), n) for n in (5, 9, 12)] == ["history", None, None]
    f = _check(src, 5, op="aten::copy_", others=("aten::sum",))
    assert f.evidence["window_restacked_at"] == 5 and f.where[0].line == 5 and f.severity != "info"
    assert f.time_lost_s == pytest.approx(0.061) and "running" in f.fix


@fires("op_hotspot")
def test_a_whole_array_copied_to_keep_the_rows_an_index_picks(tmp_path):
    """A replay buffer's minibatch: `torch.tensor(buf[key][:n])[idx]` copies all stored rows for
    the 128 kept. A slice of the copy, or an index taken before the copy, is not it."""
    from torchneck.diagnose.idioms import copied_then_indexed

    src = tmp_path / "replay.py"
    src.write_text("import torch\n"
                   "def column(buf, key, n, idx):\n"
                   "    return torch.tensor(buf[key][:n])[idx]\n"  # 3
                   "def head(x, k):\n"
                   "    return x.clone()[:k]\n"  # 5: a slice, a view of the copy
                   "def picked(buf, key, idx):\n"
                   "    return torch.from_numpy(buf[key][idx])\n")  # 7: indexed first
    assert [copied_then_indexed(str(src), n) for n in (3, 5, 7)] == [True, False, False]
    f = _check(src, 3, op="aten::copy_", others=("aten::index",))
    assert f.evidence["copied_whole_at"] == 3 and f.severity != "info" and "index first" in f.fix
    assert f.time_lost_s == pytest.approx(0.061)


@fires("op_hotspot")
def test_a_multivariate_normal_of_a_diagonal_made_dense(tmp_path):
    """A VAE's diagonal posterior built as `MultivariateNormal(mu, covariance_matrix=torch.
    diag_embed(var))`: the trace's top op is the KL's triangular solve at another line; the
    sampled lines name the constructor's (its Cholesky), which leads. A full covariance is not it."""
    from torchneck.diagnose.chains import dense_diagonal_distribution

    src = tmp_path / "vae.py"
    src.write_text("import torch\nfrom torch.distributions import MultivariateNormal, kl_divergence\n"
                   "def posterior(mu, logvar):\n"
                   "    return MultivariateNormal(mu, covariance_matrix=torch.diag_embed(logvar.exp()))\n"  # 4
                   "def full(mu, cov):\n    return MultivariateNormal(mu, cov)\n"  # 6
                   "def loss(q, p):\n    return kl_divergence(q, p).mean()\n")  # 8
    assert [dense_diagonal_distribution(str(src), n) for n in (4, 6, 8)] == [True, False, False]
    by_line = [{"op": "aten::linalg_solve_triangular", "file": str(src), "line": 8, "function": "loss",
                "self_us": 30_000.0, "count": 30}]
    python = {"window": {"sampled_s": 1.0, "lines": [{"file": str(src), "line": 4, "function": "posterior",
                                                       "total_s": 0.3, "self_s": 0.0}],
                         "inclusive_lines": [{"file": str(src), "line": 4, "total_s": 0.3}]}}
    [f] = OpHotspot().check(facts(analysis=analysis(by_name=[_op("aten::linalg_solve_triangular", 30_000.0, 30)]),
                                  ops_by_line=by_line, python=python))
    assert f.evidence["dense_diagonal_at"] == 4 and f.where[0].line == 4 and "Independent(Normal" in f.fix
    assert f.time_lost_s == pytest.approx(0.03 + 0.3 * 0.1)  # the solves, and the constructor's Cholesky


@fires("op_hotspot")
def test_the_full_factors_of_a_tall_matrix(tmp_path):
    """A PCA's `torch.linalg.svd(z)` of a 7200 x 64 matrix (round 23): full_matrices defaults to
    True, so it builds a 7200 x 7200 U. The thin factors save all but 64/7200 of the op; a square
    matrix's full and thin factors are the same (the model's compute, context); `torch.svd` is thin
    unless told `some=False`; a QR is full when asked `mode="complete"`."""
    from torchneck.diagnose.chains import full_factorisation

    src = tmp_path / "pca.py"
    src.write_text("import torch\ndef fit(z):\n"
                   "    u, s, vh = torch.linalg.svd(z)\n"  # 3
                   "    _, s, vh = torch.linalg.svd(z, full_matrices=False)\n"  # 4
                   "    u, s, v = torch.svd(z)\n"  # 5
                   "    u, s, v = torch.svd(z, some=False)\n"  # 6
                   "    q, r = torch.linalg.qr(z, mode='complete')\n"  # 7
                   "    q, r = torch.linalg.qr(z)\n"  # 8
                   "    return s\n")
    assert [full_factorisation(str(src), n) for n in range(3, 9)] == [True, False, False, True, True, False]

    def check(line, shape):
        by_line = [{"op": "aten::_linalg_svd", "file": str(src), "line": line, "function": "fit",
                    "self_us": 60_000.0, "count": 1}]
        ops = analysis(by_name=[_op("aten::_linalg_svd", 60_000.0, 1)],
                       by_shape=[OpRow(name="aten::_linalg_svd", count=1, self_us=60_000.0, total_us=60_000.0,
                                       mean_us=60_000.0, shapes=shape)])
        [f] = OpHotspot().check(facts(analysis=ops, ops_by_line=by_line))
        return f

    f = check(3, "[[7200, 64], [], [], []]")
    assert f.evidence["full_factors_at"] == 3 and f.severity != "info" and "full_matrices=False" in f.fix
    assert f.time_lost_s == pytest.approx(0.06 * (1 - 64 / 7200))
    square = check(3, "[[512, 512], [], [], []]")
    assert square.evidence["full_factors_at"] is None and square.severity == "info"
    thin = check(4, "[[7200, 64], [], [], []]")
    assert thin.evidence["full_factors_at"] is None and thin.severity == "info"


@fires("op_hotspot")
def test_a_separable_kernel_convolved_in_two_dimensions(tmp_path):
    """A Gaussian PSF built as the outer product of a 1-D filter and convolved as 31 x 31 (round 23's
    deconvolution fit): the backward of the convolution tops the window, at the .backward() line;
    the kernel's line leads, and the 1-D passes save 1 - 62/961 of both ops. A learned 2-D kernel
    (not an outer product) and two 1-D passes are the model's compute."""
    from torchneck.diagnose.chains import separable_kernel

    src = tmp_path / "psf.py"
    src.write_text("import torch\nimport torch.nn.functional as F\n"
                   "def blur(img, g, k):\n    psf = g[:, None] * g[None, :]\n"
                   "    return F.conv2d(img, psf.view(1, 1, k, k), padding=15)\n"  # 5
                   "def blur2(img, g):\n    return F.conv2d(img, torch.outer(g, g)[None, None])\n"  # 7
                   "def learned(img, w):\n    return F.conv2d(img, w)\n"  # 9
                   "def two_passes(img, g, k):\n    out = F.conv2d(img, g.view(1, 1, 1, k))\n"  # 11
                   "    return F.conv2d(out, g.view(1, 1, k, 1))\n"  # 12
                   "def loss(x):\n    x.backward()\n")  # 14
    assert [separable_kernel(str(src), n) for n in (5, 7, 9, 11, 12)] == [True, True, False, False, False]

    def check(line):
        by_line = [{"op": "aten::convolution_backward", "file": str(src), "line": 14, "function": "loss",
                    "self_us": 60_000.0, "count": 5},
                   {"op": "aten::mkldnn_convolution", "file": str(src), "line": line, "function": "blur",
                    "self_us": 10_000.0, "count": 5}]
        shapes = [OpRow(name="aten::convolution_backward", count=5, self_us=60_000.0, total_us=60_000.0,
                        mean_us=12_000.0, shapes="[[4, 1, 64, 64], [4, 1, 64, 64], [1, 1, 31, 31], [], []]"),
                  OpRow(name="aten::mkldnn_convolution", count=5, self_us=10_000.0, total_us=10_000.0,
                        mean_us=2_000.0, shapes="[[4, 1, 64, 64], [1, 1, 31, 31], [], []]")]
        ops = analysis(by_name=[_op("aten::convolution_backward", 60_000.0, 5),
                                _op("aten::mkldnn_convolution", 10_000.0, 5)], by_shape=shapes)
        [f] = OpHotspot().check(facts(analysis=ops, ops_by_line=by_line))
        return f

    f = check(5)
    assert f.evidence["separable_at"] == 5 and f.where[0].line == 5 and "1-D filter" in f.fix
    assert f.severity != "info" and f.time_lost_s == pytest.approx(0.07 * (1 - 62 / 961))
    learned = check(9)
    assert learned.evidence["separable_at"] is None and learned.severity == "info"


@fires("op_hotspot")
def test_pairs_compared_all_against_all_to_count_them(tmp_path):
    """An AUC from its definition (round 24's tabular cross-validation): every positive's score
    against every negative's, in chunks, counted with .sum(): the bool-to-int copy of the N x M
    comparison tops the window at that line, whose ops all go (a sort and a binary search count the
    same pairs). A comparison of aligned tensors (no new axis) and a broadcast one that is not
    counted (a mask kept) are not pairs counted."""
    from torchneck.diagnose.chains import pairwise_comparison_count

    src = tmp_path / "auc.py"
    src.write_text("import torch\n"
                   "def auc(pos, neg, chunk=4096):\n    wins = 0.0\n"
                   "    for i in range(0, len(pos), chunk):\n        p = pos[i:i + chunk, None]\n"
                   "        wins += (p > neg).sum().item() + 0.5 * (p == neg).sum().item()\n"  # 6
                   "    return wins\n"
                   "def ranks(x):\n    return (x[:, None] < x[None, :]).float().mean(1)\n"  # 9
                   "def hits(a, b):\n    return (a > b).sum()\n"  # 11
                   "def mask(a, b):\n    return a[:, None] > b\n")  # 13
    assert [pairwise_comparison_count(str(src), n) for n in (6, 9, 11, 13)] == [True, True, False, False]

    def check(line):
        by_line = [{"op": "aten::copy_", "file": str(src), "line": line, "function": "auc", "self_us": 44_000.0,
                    "count": 100},
                   {"op": "aten::gt", "file": str(src), "line": line, "function": "auc", "self_us": 30_000.0,
                    "count": 100}]
        ops = analysis(by_name=[_op("aten::copy_", 44_000.0, 100), _op("aten::gt", 30_000.0, 100)])
        [f] = OpHotspot().check(facts(analysis=ops, ops_by_line=by_line))
        return f

    f = check(6)
    assert f.evidence["pair_count_at"] == 6 and f.where[0].line == 6 and "searchsorted" in f.fix
    assert f.severity != "info" and f.time_lost_s == pytest.approx(0.074)
    aligned = check(11)
    assert aligned.evidence["pair_count_at"] is None and "searchsorted" not in aligned.fix


@fires("op_hotspot")
def test_an_op_fed_a_view_against_the_grain(tmp_path):
    """Round 24's GraphSAGE: PCA-whitened features returned as `whitened.T`, a column-major
    [20000, 384] view; embedding_bag over it takes a strided loop (93 % of the window). The trace's
    strides name it at the op's line; a matmul (BLAS reads a transposed operand as it is), a view
    in a few of the op's calls, and an op fed contiguous tensors are not it."""
    from torchneck.model.analysis import StridedInput

    def check(op, share=0.99):
        by_line = [{"op": op, "file": "/x/model.py", "line": 17, "function": "forward", "self_us": 93_000.0,
                    "count": 20}]
        strided = [StridedInput(op=op, dims=[20000, 384], strides=[1, 20000], calls=10, share=share)]
        ops = analysis(by_name=[_op(op, 93_000.0, 20)], strided_inputs=strided)
        [f] = OpHotspot().check(facts(analysis=ops, ops_by_line=by_line))
        return f

    f = check("aten::_embedding_bag_forward_only")
    assert f.evidence["strided_at"] == 17 and f.where[0].line == 17 and "contiguous" in f.fix
    assert f.evidence["strided_input"] == "[20000, 384] with strides [1, 20000]" and f.severity != "info"
    assert f.time_lost_s == pytest.approx(0.093 * 0.99)
    for quiet in (check("aten::addmm"), check("aten::_embedding_bag_forward_only", share=0.2)):
        assert quiet.evidence["strided_at"] is None and quiet.severity == "info"
    assert check("aten::copy_").evidence["strided_at"] is None  # a copy takes views: it may be the fix


def test_the_functions_returning_a_transposed_view_are_found_in_the_program_s_folders(tmp_path):
    """`return x.T` (or `.transpose()`, `.permute()`) hands callers a view against the grain; a
    view made contiguous, one kept in a local variable, and another folder's modules are not it;
    the finding's own file is searched first, then its folder's other modules."""
    from torchneck.diagnose.chains import views_returned_near

    pkg, other = tmp_path / "pkg", tmp_path / "other"
    pkg.mkdir()
    other.mkdir()
    (pkg / "graph.py").write_text("def whiten(w, c):\n    out = w @ c.T\n    return out.T\n"
                                  "def fixed(w):\n    return w.T.contiguous()\n")
    (pkg / "model.py").write_text("def heads(x):\n    h = x.T\n    return x.permute(0, 2, 1)\n")
    (pkg / "notes.txt").write_text("return x.T\n")
    (other / "far.py").write_text("def far(x):\n    return x.T\n")
    assert views_returned_near([str(pkg / "model.py")]) == [(str(pkg / "model.py"), 3), (str(pkg / "graph.py"), 3)]
    assert views_returned_near([str(tmp_path / "missing" / "x.py")]) == []


GP_PREDICT = """\
import torch
def predict(xs, v, alpha):
    k_ss = kernel(xs, xs)
    mu = v.T @ alpha
    cov = k_ss - v.T @ v
    var = torch.diagonal(cov)
    return mu, var
def keep(k_ss, v):
    cov = k_ss - v.T @ v
    return torch.diagonal(cov), cov
"""


@fires("op_hotspot")
def test_a_covariance_built_whole_for_its_diagonal_outside_the_window(tmp_path):
    """u_gp_kriging: each chunk's full N x N posterior covariance (k_ss - v.T @ v) is built, then
    only its diagonal kept, on the next line. The window fell on the fit; the sampler puts the
    product's time on the diagonal's line (a long C call's sample lands after it) and the
    kernel matrix made for it on its own line: the product's line leads, all three lines go."""
    from torchneck.diagnose.chains import kept_diagonal

    src = tmp_path / "gp.py"
    src.write_text(GP_PREDICT)
    path = str(src)
    assert kept_diagonal(path, 6) == [5, 3, 6] and kept_diagonal(path, 5) == [5, 3, 6]
    assert kept_diagonal(path, 10) is None and kept_diagonal(path, 9) is None  # the covariance is returned too
    assert kept_diagonal(path, 4) is None
    lines = [{"file": path, "line": 6, "function": "predict", "total_s": 4.0, "self_s": 0.0, "outside_ops_s": 0.0},
             {"file": path, "line": 3, "function": "predict", "total_s": 2.0, "self_s": 0.0, "outside_ops_s": 0.0}]
    inclusive = [{"file": path, "line": n, "total_s": s} for n, s in ((6, 4.0), (3, 2.0), (5, 0.5))]
    python = {"window": {"sampled_s": 8.0, "lines": lines, "inclusive_lines": inclusive},
              "profiled_window": {"sampled_s": 0.5, "lines": []}}
    found = [f for f in OpHotspot().check(facts(analysis=analysis(window_us=1e6), python=python))
             if f.evidence.get("diagonal_at")]
    assert [w.line for w in found[0].where][:2] == [5, 6] and found[0].severity != "info"
    assert found[0].time_lost_s == pytest.approx((4.0 + 2.0 + 0.5) / 8.0)
    assert "keeps only its diagonal" in found[0].fix


def test_a_row_index_copied_across_the_columns_for_a_gather_or_scatter_is_found(tmp_path):
    """v_gnn_pkg: message passing gathers and scatter-adds node rows with an index `.repeat`-ed
    across the features, made by a helper; the helper's copying line is named, from either call.
    An `.expand` view (no copy), index_select, and a gather whose index is the data are not."""
    from torchneck.diagnose.indexing import repeated_index

    src = tmp_path / "layers.py"
    src.write_text("import torch\n"
                   "def broadcast_index(index, f, contiguous=True):\n"
                   "    if contiguous:\n"
                   "        return index.unsqueeze(-1).repeat(1, f)\n"
                   "    return index.unsqueeze(-1).expand(-1, f)\n"
                   "def gather_rows(h, index):\n"
                   "    return h.gather(0, broadcast_index(index, h.size(-1)))\n"
                   "def scatter_sum(m, index, n):\n"
                   "    idx = index[:, None].expand(-1, m.size(1)).contiguous()\n"
                   "    return m.new_zeros(n, m.size(1)).scatter_add_(0, idx, m)\n"
                   "def picked(h, index):\n"
                   "    return torch.gather(h, 0, index[:, None].expand(-1, h.size(1)))\n"
                   "def rows(h, index):\n"
                   "    return h.index_select(0, index)\n"
                   "def top(scores, k):\n"
                   "    return scores.gather(1, scores.topk(k).indices)\n")
    assert repeated_index(str(src), 7) == 4 and repeated_index(str(src), 10) == 9
    assert repeated_index(str(src), 12) is None and repeated_index(str(src), 14) is None
    assert repeated_index(str(src), 16) is None
