"""Products that cost more than their result needs: a chain of matrix products evaluated in a
costly order (`X.T @ D @ v` runs left to right, so it first builds the d x d matrix X.T @ D,
n * d^2 multiply-adds, to multiply it by a vector, where `X.T @ (D @ v)` takes two matrix-vector
products), a gradient asked of data that every backward then fills whole, pairwise products
(a matrix product, a cosine similarity) through broadcast tensors and pairwise distances through
a broadcast difference, a one-hot (or multi-hot) matrix multiplied by a table: an embedding
lookup done as a dense product, and the full factors of a tall matrix where the thin ones do."""

from __future__ import annotations

import ast
import os

from .idioms import REDUCTIONS
from .source import _assigned_before, _resolved, _tree, _user_function, block_of, call_name, enclosing, walk_own

INDEXING_OPS = frozenset({"aten::index", "aten::index_select", "aten::gather", "aten::slice", "aten::select"})
"""Forward ops whose backward writes into a zero tensor as large as the one indexed."""
GRADIENT_FILL_OPS = frozenset({"aten::fill_", "aten::zero_", "aten::zeros", "aten::new_zeros", "aten::add_",
                               "aten::index_put_", "aten::_index_put_impl_", "aten::index_add_",
                               "torch::autograd::AccumulateGrad", "aten::copy_"})
"""Ops of a gradient filled with zeros, written at the indexed rows and accumulated."""
VECTOR_PRODUCTS = frozenset({"aten::mv", "aten::addmv", "aten::addmv_", "aten::dot", "aten::vdot"})
"""Ops of a product with a vector: the chain ends in one when its last operand is a vector."""


def broadcast_product(file: str, line: int) -> bool:
    """The statement at `line` multiplies two tensors broadcast against each other and reduces
    the product (`(q.unsqueeze(1) * g.unsqueeze(0)).sum(-1)`, `(a[:, None] * b[None]).sum(-1)`,
    `torch.sum(x[:, None] * y, dim=2)`), or takes the cosine similarity of such broadcast tensors
    (`F.cosine_similarity(q[:, None], d[None], dim=-1)`): a matrix product (of normalised rows)
    that first materialises every pairwise product. False when unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False
    for node in walk_own(path[-1]):
        if isinstance(node, ast.Call) and call_name(node) == "cosine_similarity" and len(node.args) >= 2 \
                and widened(node.args[0]) and widened(node.args[1]):
            return True
        if not isinstance(node, ast.Call) or call_name(node) not in REDUCTIONS:
            continue
        operand = call_operand(node)
        if isinstance(operand, ast.BinOp) and isinstance(operand.op, ast.Mult) and widened(operand.left) \
                and widened(operand.right):
            return True
    return False


def call_operand(call: ast.Call) -> ast.expr | None:
    """The tensor a call works on: the receiver of a method (`d.pow(2)`), the first argument of a
    `torch.` function (`torch.square(d)`) or of a plain function."""
    if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) != "torch":
        return call.func.value
    return call.args[0] if call.args else None


def widened(node: ast.AST) -> bool:
    """A new axis in `node`: unsqueeze / view / reshape, or None in an index."""
    return any(isinstance(n, ast.Call) and call_name(n) in ("unsqueeze", "view", "reshape")
               or isinstance(n, ast.Subscript) and any(isinstance(c, ast.Constant) and c.value is None
                                                       for c in ast.walk(n.slice))
               for n in ast.walk(node))


def chain_ends_in_vector(file: str, line: int, ops_at_line: set[str]) -> bool:
    """Whether the statement at `line` multiplies three or more operands left to right
    (`a @ b @ c`, parsed as `(a @ b) @ c`, with no parentheses around the right pair) and the
    trace shows that line running a matrix-vector product (`ops_at_line`): the chain's last
    operand is a vector, so the left product builds a whole matrix the vector could have
    avoided. False when unclear or the source is unreadable."""
    if not ops_at_line & VECTOR_PRODUCTS:
        return False
    path = enclosing(file, line)
    if not path:
        return False
    for node in walk_own(path[-1]):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) \
                and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.MatMult):
            return True
    return False


def gradient_asked_for(file: str, line: int) -> int | None:
    """For a line indexing tensors (`xb = self.X[idx]`): the line of the same file that makes one
    of them require a gradient (`self.X.requires_grad_(True)`, `self.X.requires_grad = True`,
    `X = torch.tensor(..., requires_grad=True)`), the first such; None when there is none, when the
    program reads that tensor's `.grad`, or when the source is unreadable. Data asked for a
    gradient makes every backward of its indexing fill and accumulate a gradient as large as the
    whole tensor, which nothing optimizes."""
    path = enclosing(file, line)
    tree = _tree(file)
    if not path or tree is None:
        return None
    bases = {ast.unparse(n.value) for n in walk_own(path[-1]) if isinstance(n, ast.Subscript)}
    if not bases:
        return None
    if any(isinstance(n, ast.Attribute) and n.attr == "grad" and ast.unparse(n.value) in bases for n in ast.walk(tree)):
        return None  # the program reads that gradient (saliency, an adversarial step): asked on purpose
    found: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "requires_grad_" and ast.unparse(node.func.value) in bases \
                and not (node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value is False):
            found.append(node.lineno)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "requires_grad" and ast.unparse(t.value) in bases
                for t in node.targets) and not (isinstance(node.value, ast.Constant) and node.value.value is False):
            found.append(node.lineno)
        elif isinstance(node, ast.Assign) and any(ast.unparse(t) in bases for t in node.targets) and any(
                isinstance(k, ast.keyword) and k.arg == "requires_grad" and not (
                    isinstance(k.value, ast.Constant) and k.value.value is False)
                for c in ast.walk(node.value) if isinstance(c, ast.Call) for k in c.keywords):
            found.append(node.lineno)
    return min(found) if found else None


COUNTING_CALLS = frozenset({"sum", "mean", "count_nonzero"})
"""Reductions that count the true elements of a comparison (`.sum()`, a share with `.mean()`)."""
CASTS = frozenset({"float", "double", "int", "long", "to", "type"})
"""Casts a counted comparison passes through (`(a > b).float().mean()`)."""


def pairwise_comparison_count(file: str, line: int) -> bool:
    """The statement at `line` compares every element of one tensor with every element of another,
    broadcast against each other, and counts the true pairs (`(pos[:, None] > neg).sum()`: an AUC,
    a Mann-Whitney U, ranks, a Kendall tau), the widened side possibly named on an earlier line of
    its function (`p = pos[i:i + chunk, None]`): N x M comparisons, where sorting one side once
    and counting with `torch.searchsorted` takes (N + M) log M. False when unclear or unreadable."""
    path = enclosing(file, line)
    tree = _tree(file)
    if not path or tree is None:
        return False

    def widened_here(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Name):
            found = _assigned_before(tree, file, line, node.id)
            node = found.value if found is not None else None
        return node is not None and widened(node)

    for node in walk_own(path[-1]):
        if not isinstance(node, ast.Call) or call_name(node) not in COUNTING_CALLS:
            continue
        operand = call_operand(node)
        while isinstance(operand, ast.Call) and isinstance(operand.func, ast.Attribute) and call_name(operand) in CASTS:
            operand = operand.func.value
        if isinstance(operand, ast.Compare) and len(operand.ops) == 1 \
                and isinstance(operand.ops[0], (ast.Gt, ast.Lt, ast.GtE, ast.LtE)) \
                and (widened_here(operand.left) or widened_here(operand.comparators[0])):
            return True
    return False


TRANSPOSING_CALLS = frozenset({"t", "transpose", "permute", "swapaxes", "swapdims", "movedim", "moveaxis"})
"""Methods returning a view with the dimensions reordered (no copy: its last one not contiguous)."""
VIEWS_SEARCHED_FILES = 128
"""Modules of a program's own folders searched for a function returning a transposed view (the
files the finding names first)."""


def views_returned_near(files: list[str]) -> list[tuple[str, int]]:
    """The `return x.T` statements (or `.t()`, `.transpose(...)`, `.permute(...)`, `.mT`: a view
    with its dimensions reordered, not made contiguous) in `files` and the other Python modules of
    their folders (the program's own code): a function handing such a view to its callers is
    where a tensor read against the grain usually comes from (a whitening or projection computed
    feature-major, returned transposed). Files named as `files` name their folder."""
    searched = list(dict.fromkeys(files))
    for folder in sorted({os.path.dirname(f) for f in files}):
        try:
            names = sorted(n for n in os.listdir(_resolved(folder) if folder else ".") if n.endswith(".py"))
        except OSError:
            continue
        searched += [p for p in (os.path.join(folder, n) for n in names) if p not in searched]
    found: list[tuple[str, int]] = []
    for path in searched[:VIEWS_SEARCHED_FILES]:
        tree = _tree(path)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Return) and _transposed(node.value):
                found.append((path, node.lineno))
    return found


def _transposed(value: ast.expr | None) -> bool:
    """`x.T` (`.mT`, `.H`, `.mH`) or `x.transpose(...)` and the like, outermost (not made contiguous)."""
    if isinstance(value, ast.Attribute):
        return value.attr in ("T", "mT", "H", "mH")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
        and value.func.attr in TRANSPOSING_CALLS


SQUARING_CALLS = frozenset({"pow", "square", "abs"})
"""Element-wise calls that turn a pairwise difference into a distance term before the reduction."""


def pairwise_difference(file: str, line: int) -> bool:
    """The statement at `line` subtracts two tensors broadcast against each other, squares (or
    takes the absolute value of) the difference and reduces it (`((a[:, None] - b[None]) ** 2).sum(-1)`,
    `(x.unsqueeze(1) - c.unsqueeze(0)).pow(2).sum(-1)`, `.norm(dim=-1)`), the difference possibly
    named on an earlier line of its function (`diff = ...`, then `(diff * diff).sum(-1)`):
    pairwise distances that
    first materialise an N x M x D difference tensor, where `torch.cdist` or the expansion
    |a|^2 + |b|^2 - 2 a.b^T (one matrix product) need none. False when unclear or unreadable."""
    path = enclosing(file, line)
    tree = _tree(file)
    if not path or tree is None:
        return False

    def difference(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Name):  # `diff = a[:, None] - b[None]` on a line before, in this function
            found = _assigned_before(tree, file, line, node.id)
            node = found.value if found is not None else None
        return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and widened(node.left) \
            and widened(node.right)

    def squared(node: ast.AST | None) -> bool:  # (d) ** 2, d * d, d.pow(2), d.square(), d.abs(), torch.square(d)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return difference(node.left)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) \
                and ast.dump(node.left) == ast.dump(node.right):
            return difference(node.left)
        if isinstance(node, ast.Call) and call_name(node) in SQUARING_CALLS and isinstance(node.func, ast.Attribute):
            return difference(call_operand(node))
        return False

    for node in walk_own(path[-1]):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = call_name(node)
        operand = call_operand(node)
        if name in REDUCTIONS and squared(operand) or name == "norm" and difference(operand):
            return True
    return False


JACOBIANS = frozenset({"jacobian", "hessian", "jacrev", "jacfwd"})
"""Calls computing a whole Jacobian (or Hessian) of a function at its input."""
KEPT_NEXT = 3
"""Statements after the Jacobian searched for the use that keeps only its diagonal blocks."""


def jacobian_kept_diagonal(file: str, line: int) -> bool:
    """The statement at `line` assigns a whole Jacobian of a batch (`jac = jacobian(model, x)`:
    a (B, D, B, D) tensor, one backward pass per output element) and one of the next statements
    keeps only its per-sample blocks (`einsum("bibj->bij", jac)`, `jac.diagonal(...)`): the
    samples are independent, so the cross-sample blocks are zeros computed for nothing. False
    when not so or unreadable."""
    path = enclosing(file, line)
    tree = _tree(file)
    if not path or tree is None or not isinstance(path[-1], ast.Assign):
        return False
    stmt = path[-1]
    if not any(isinstance(n, ast.Call) and call_name(n) in JACOBIANS for n in walk_own(stmt.value)):
        return False
    names = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    body = block_of(tree, stmt)
    after = body[body.index(stmt) + 1: body.index(stmt) + 1 + KEPT_NEXT]
    for node in (n for s in after for n in ast.walk(s)):
        if not isinstance(node, ast.Call):
            continue
        args = [*node.args, *(k.value for k in node.keywords)]
        reads = any(isinstance(a, ast.Name) and a.id in names for a in args) or (
            isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id in names)
        if not reads:
            continue
        if call_name(node) in ("diagonal", "diagonal_scatter"):
            return True
        spec = node.args[0].value if call_name(node) == "einsum" and node.args \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) else None
        if spec and "->" in spec:  # a letter twice in one operand, once in the output: a diagonal
            inputs, output = spec.replace(" ", "").split("->", 1)
            if any(term.count(c) > 1 and c in output for term in inputs.split(",") for c in set(term)):
                return True
    return False


DETERMINANTS = frozenset({"slogdet", "logdet", "det"})
"""Calls computing a matrix's (log-)determinant through an LU factorisation of the whole matrix."""


def determinant_of_product(file: str, line: int) -> bool:
    """The statement at `line` takes the (log-)determinant of a matrix product it builds
    (`slogdet(P @ L @ U)`, or `slogdet(self.weight())` where `weight()` returns such a product):
    the determinant of a product is the product of the factors' determinants, and a triangular
    factor's is its diagonal's product (Glow's LU-decomposed 1x1 convolution keeps `log_s` for
    that), so the N x N products and an O(N^3) factorisation per call are not needed. False when
    not so or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False
    for call in (n for n in walk_own(path[-1]) if isinstance(n, ast.Call) and call_name(n) in DETERMINANTS):
        arg = call.args[0] if call.args else None
        if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.MatMult):
            return True
        if isinstance(arg, ast.Call):
            found = _user_function(file, arg, line)
            returns = [n.value for n in walk_own(found[1]) if isinstance(n, ast.Return) and n.value is not None] \
                if found else []
            if returns and all(isinstance(r, ast.BinOp) and isinstance(r.op, ast.MatMult) for r in returns):
                return True
    return False


SCATTERS = frozenset({"scatter_", "scatter_add_", "index_fill_", "index_put_"})
"""In-place writes that set a zero matrix's entries at given indices (a multi-hot bag)."""


def one_hot_product(file: str, line: int) -> bool:
    """The statement at `line` multiplies a one-hot matrix it builds by a table
    (`F.one_hot(ids, n).float() @ table`, `torch.mm(one_hot(...), W)`), or a multi-hot one made on
    the lines before (`bag = torch.zeros(b, n)`, `bag.scatter_add_(1, ids, ones)`, `bag @ table`):
    an embedding lookup (or bag) done as a dense product of a batch x n matrix of zeros. False when
    unclear or unreadable."""
    path, tree = enclosing(file, line), _tree(file)
    if not path or tree is None:
        return False

    def one_hot(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return bool(_multi_hot_lines(tree, file, line, node.id))
        return any(isinstance(c, ast.Call) and call_name(c) == "one_hot" for c in ast.walk(node))

    for node in walk_own(path[-1]):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and one_hot(node.left):
            return True
        if isinstance(node, ast.Call) and call_name(node) in ("mm", "matmul") and node.args and one_hot(node.args[0]):
            return True
    return False


def multi_hot_made_at(file: str, line: int) -> list[int]:
    """The lines making the multi-hot matrix the statement at `line` multiplies (`bag = torch.zeros
    (b, n)`, then its `scatter_add_`): the fix removes their work too; [] when none."""
    path, tree = enclosing(file, line), _tree(file)
    if not path or tree is None:
        return []
    return next((made for node in walk_own(path[-1]) if isinstance(node, ast.BinOp)
                 and isinstance(node.op, ast.MatMult) and isinstance(node.left, ast.Name)
                 and (made := _multi_hot_lines(tree, file, line, node.left.id))), [])


def _multi_hot_lines(tree: ast.Module, file: str, line: int, name: str) -> list[int]:
    """The assignment of `name` to a zero matrix before `line` and the in-place scatters into it
    between them (a multi-hot bag); [] when `name` is not made so."""
    made = _assigned_before(tree, file, line, name)
    if made is None or not isinstance(made.value, ast.Call) or call_name(made.value) not in ("zeros", "new_zeros"):
        return []
    scatters = sorted({c.lineno for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                       and c.func.attr in SCATTERS and isinstance(c.func.value, ast.Name)
                       and c.func.value.id == name and made.lineno < c.lineno < line})
    return [made.lineno, *scatters] if scatters else []


DENSE_DIAGONALS = frozenset({"diag_embed", "diag", "diagflat", "eye"})
"""Calls making a dense matrix of a diagonal (or the identity)."""
DENSE_COVARIANCES = frozenset({"MultivariateNormal", "LowRankMultivariateNormal"})
"""Distributions that factorise the dense matrix they are given (a Cholesky per batch element)."""


def dense_diagonal_distribution(file: str, line: int) -> bool:
    """The statement at `line` builds a multivariate normal from a diagonal matrix made dense
    (`MultivariateNormal(mu, covariance_matrix=torch.diag_embed(var))`): each construction runs a
    Cholesky of it, and every log_prob, rsample and KL triangular solves, for what independent
    normals give element-wise. False when unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False
    for call in (n for n in walk_own(path[-1]) if isinstance(n, ast.Call) and call_name(n) in DENSE_COVARIANCES):
        given = [k.value for k in call.keywords if k.arg in ("covariance_matrix", "precision_matrix", "scale_tril")]
        if any(isinstance(c, ast.Call) and call_name(c) in DENSE_DIAGONALS for g in [*call.args[1:2], *given]
               for c in ast.walk(g)):
            return True
    return False


DECOMPOSITION_OPS = frozenset({"aten::_linalg_svd", "aten::linalg_svd", "aten::svd", "aten::linalg_qr"})
"""Ops of an SVD or a QR decomposition, full or thin (the trace does not say which)."""
THIN_RATIO = 2.0
"""A matrix at least twice as long as wide is tall: its full U (or Q) has twice the columns of the
thin one, or more, and building them costs more than the decomposition of the thin one."""


def full_factorisation(file: str, line: int) -> bool:
    """The statement at `line` asks for the full factors of a decomposition: `torch.linalg.svd(A)`
    (`full_matrices` defaults to True there, unlike `torch.svd`), `torch.svd(A, some=False)`,
    `torch.linalg.qr(A, mode="complete")`. For an m x n matrix they make an m x m U (or Q), where
    the thin m x min(m, n) one is what a projection, a PCA or a least-squares fit uses. False
    when unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False
    for node in walk_own(path[-1]):
        if not isinstance(node, ast.Call) or call_name(node) not in ("svd", "qr"):
            continue
        func = node.func
        linalg = isinstance(func, ast.Attribute) and (getattr(func.value, "id", None) == "linalg"
                                                      or getattr(func.value, "attr", None) == "linalg")
        asked = {k.arg: k.value for k in node.keywords}
        option = asked.get({"svd": "full_matrices" if linalg else "some", "qr": "mode"}[call_name(node) or ""],
                           node.args[1] if len(node.args) > 1 else None)
        value = option.value if isinstance(option, ast.Constant) else option
        if call_name(node) == "svd":  # linalg.svd: full unless told not; torch.svd: thin unless some=False
            if (value is None or value is True) if linalg else value is False:
                return True
        elif linalg and value == "complete":
            return True
    return False


def thin_share(dims: list[list[int]]) -> float:
    """The share of a decomposition's work the thin factors leave out for a matrix of `dims`
    (the first input's last two): 1 - min(m, n) / max(m, n) when it is tall (`THIN_RATIO`),
    else 0."""
    if not dims or len(dims[0]) < 2 or min(dims[0][-2:]) <= 0:
        return 0.0
    short, long = sorted(dims[0][-2:])
    return 1.0 - short / long if long >= THIN_RATIO * short else 0.0


CONVOLUTIONS = frozenset({"conv1d", "conv2d", "conv3d"})
CONVOLUTION_OPS = frozenset({"aten::convolution", "aten::_convolution", "aten::conv2d", "aten::conv3d",
                             "aten::mkldnn_convolution", "aten::thnn_conv2d", "aten::_slow_conv2d_forward",
                             "aten::slow_conv3d_forward", "aten::convolution_backward",
                             "aten::_slow_conv2d_backward", "aten::mkldnn_convolution_backward"})
"""Ops of a convolution and of its backward."""
OUTER_PRODUCTS = frozenset({"outer", "ger"})


def separable_kernel(file: str, line: int) -> bool:
    """The statement at `line` convolves with a kernel that is an outer product of 1-D filters
    made in its function (`psf = g[:, None] * g[None, :]`, `torch.outer(g, g)`, then
    `F.conv2d(x, psf.view(1, 1, k, k))`): a separable filter (a Gaussian, a box) convolved in
    k x k multiply-adds a pixel where two 1-D passes take 2k. False when unclear or unreadable."""
    path, tree = enclosing(file, line), _tree(file)
    if not path or tree is None:
        return False

    def outer(node: ast.AST | None) -> bool:
        return node is not None and any(
            isinstance(n, ast.Call) and call_name(n) in OUTER_PRODUCTS
            or isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and widened(n.left) and widened(n.right)
            for n in ast.walk(node))

    for node in walk_own(path[-1]):
        if not isinstance(node, ast.Call) or call_name(node) not in CONVOLUTIONS:
            continue
        weight = {k.arg: k.value for k in node.keywords}.get("weight", node.args[1] if len(node.args) > 1 else None)
        if weight is None:
            continue
        if outer(weight):
            return True
        for name in {n.id for n in ast.walk(weight) if isinstance(n, ast.Name)}:
            made = _assigned_before(tree, file, line, name)
            if made is not None and outer(made.value):
                return True
    return False


def separable_share(dims: list[list[int]], backward: bool) -> float:
    """Of a convolution op with input shapes `dims`, the share of its multiply-adds that 1-D passes
    leave out: 1 - (sum of the kernel's sides) / (their product), for its weight (the second input
    of a forward op, the third of its backward) of 2 or 3 spatial sides; 0 when not readable."""
    at = 2 if backward else 1
    if len(dims) <= at or len(dims[at]) < 4:
        return 0.0
    sides = dims[at][2:]
    area = 1
    for s in sides:
        area *= s
    return max(0.0, 1.0 - sum(sides) / area) if min(sides) > 1 else 0.0


DIAGONALS = frozenset({"diag", "diagonal", "trace"})
"""Calls that keep only the diagonal of a matrix (its sum: `trace`)."""
PRODUCTS = frozenset({"matmul", "mm", "bmm", "einsum"})
MODULE_NAMES = frozenset({"torch", "np", "numpy"})


def diagonal_of_product(file: str, line: int) -> bool:
    """`kept_diagonal` finds one at `line`."""
    return kept_diagonal(file, line) is not None


def kept_diagonal(file: str, line: int) -> list[int] | None:
    """The lines computing a whole matrix product only to keep its diagonal, when `line` is one of
    them: a diagonal of a product in one statement (`torch.diag(d @ P @ d.T)`, `(a @ b).diagonal()`,
    `torch.trace(a.mm(b))`): [line]; or a product assigned to a name whose only later uses in the
    function are diagonals of it (`cov = k_ss - v.T @ v`, then `var = torch.diagonal(cov)`: a GP's
    predictive variances), `line` being the assignment or a diagonal: [the assignment, the lines
    assigning names used there and nowhere else (`k_ss = kernel(xs, xs)`: a whole matrix made
    for it), the diagonals]. N x N products for N numbers. None when unclear or unreadable."""
    path = enclosing(file, line)
    tree = _tree(file)
    if not path or tree is None:
        return None

    def product(node: ast.AST) -> bool:
        return any((isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult))
                   or (isinstance(n, ast.Call) and call_name(n) in PRODUCTS) for n in ast.walk(node))

    def diagonal_of(node: ast.AST) -> ast.AST | None:
        """The matrix a diagonal call reads: `torch.diagonal(m)`, `m.diagonal()`, `np.trace(m)`."""
        if not isinstance(node, ast.Call) or call_name(node) not in DIAGONALS:
            return None
        receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
        if receiver is None or isinstance(receiver, ast.Name) and receiver.id in MODULE_NAMES:
            return node.args[0] if node.args else None
        return receiver

    if any((of := diagonal_of(n)) is not None and product(of) for n in walk_own(path[-1])):
        return [line]
    holder = next((f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and f.lineno <= line <= (f.end_lineno or f.lineno)), tree)
    assigned: dict[str, list[ast.Assign]] = {}  # name -> its assignments in the function
    for n in ast.walk(holder):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            assigned.setdefault(n.targets[0].id, []).append(n)
    loads = [n for n in ast.walk(holder) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]

    def diagonal_only(name: str, after: int) -> list[int] | None:
        uses = [n for n in loads if n.id == name and n.lineno > after]
        diagonals = [n.lineno for n in ast.walk(holder) if isinstance(n, ast.Call) and n.lineno > after
                     and isinstance(of := diagonal_of(n), ast.Name) and of.id == name]
        return sorted(set(diagonals)) if uses and len(diagonals) == len(uses) else None

    stmt = path[-1]
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and product(stmt.value)):
        # a diagonal taken at `line` of a name: the product assigned to it
        names = {of.id for n in walk_own(stmt) if isinstance(of := diagonal_of(n), ast.Name)}
        stmt = next((a for name in names for a in assigned.get(name, [])[-1:] if a.lineno < line), stmt)
    if not (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) and product(stmt.value)
            and len(assigned.get(stmt.targets[0].id, [])) == 1):
        return None
    diagonals = diagonal_only(stmt.targets[0].id, stmt.lineno)
    if diagonals is None:
        return None
    feeders = [a.lineno for name in {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)}
               for a in assigned.get(name, []) if len(assigned[name]) == 1 and a.lineno < stmt.lineno
               and len([u for u in loads if u.id == name and u.lineno > a.lineno]) == 1]
    return [stmt.lineno, *sorted(feeders), *diagonals]
