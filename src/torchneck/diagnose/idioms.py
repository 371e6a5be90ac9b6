"""Slow idioms read from the user's source: a top-k done by a full sort, a solve done by an
inverse, a tensor built from nested Python lists, the line making an embedding module. Each
answers for one statement, and False (or None) when the source is unreadable or unclear."""

from __future__ import annotations

import ast

from .source import _tree, call_name, enclosing, walk_own

SORTS = frozenset({"sort", "argsort", "msort"})
"""Calls that order a whole tensor."""


def sorted_then_sliced(file: str, line: int) -> bool:
    """The statement at `line` sorts a tensor and keeps only its first elements (`d.argsort(1)[:,
    :k]`, `x.sort(descending=True).values[:k]`, `torch.sort(x)[0][..., :k]`): a top-k done by a
    full sort. False when unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False
    for node in walk_own(path[-1]):
        if not isinstance(node, ast.Subscript) or not _keeps_a_prefix(node.slice):
            continue
        inner = node.value
        while isinstance(inner, (ast.Subscript, ast.Attribute)) and not isinstance(inner, ast.Call):
            inner = inner.value  # through `[0]`, `.indices`, `.values`
        if isinstance(inner, ast.Call) and call_name(inner) in SORTS:
            return True
    return False


def _keeps_a_prefix(index: ast.expr) -> bool:
    """`[:k]`, or `[:, :k]` / `[..., :k]` (whole leading dimensions, then a prefix of the last)."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    last = parts[-1]
    whole = all(isinstance(p, ast.Slice) and p.lower is None and p.upper is None or isinstance(p, ast.Constant)
                and p.value is Ellipsis for p in parts[:-1])
    return whole and isinstance(last, ast.Slice) and last.lower is None and last.upper is not None \
        and last.step is None


TENSOR_FROM_DATA = frozenset({"tensor", "as_tensor", "Tensor", "FloatTensor", "LongTensor", "IntTensor"})
"""Calls that copy Python data into a new tensor, element by element when given lists."""


def tensor_from_lists(file: str, line: int) -> bool:
    """The statement at `line` builds a tensor from a Python list it makes there (`torch.tensor([[...]
    for w in buf])`): every element goes through Python. False when unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False
    return any(isinstance(n, ast.Call) and call_name(n) in TENSOR_FROM_DATA and n.args
               and isinstance(n.args[0], (ast.List, ast.ListComp, ast.GeneratorExp))
               and any(isinstance(c, (ast.List, ast.ListComp, ast.GeneratorExp, ast.Call))
                       for c in ast.walk(n.args[0]) if c is not n.args[0])
               for n in walk_own(path[-1]))


INVERSES = frozenset({"inv", "inverse", "inv_ex"})
"""Calls that invert a matrix."""


def inverse_then_multiply(file: str, line: int) -> bool:
    """The statement at `line` inverts a matrix only to multiply by the inverse (`inv(A) @ b`,
    `torch.matmul(torch.inverse(A), b)`, `inv(A).matmul(b)`): a linear solve done the slow and
    less accurate way. False when unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False

    def inverts(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and call_name(node) in INVERSES

    for node in walk_own(path[-1]):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and (inverts(node.left)
                                                                                  or inverts(node.right)):
            return True
        if isinstance(node, ast.Call) and call_name(node) in ("matmul", "mm", "bmm", "mv"):
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            if any(inverts(a) for a in node.args) or receiver is not None and inverts(receiver):
                return True
    return False


DIAGONALS = frozenset({"diag", "diagonal", "trace"})
"""Calls that keep only the diagonal of a matrix (its sum: `trace`)."""
PRODUCTS = frozenset({"matmul", "mm", "bmm", "einsum"})


def diagonal_of_product(file: str, line: int) -> bool:
    """The statement at `line` computes a whole matrix product only to keep its diagonal
    (`torch.diag(d @ P @ d.T)`, `(a @ b).diagonal()`, `torch.trace(a.mm(b))`): N x N products
    for N numbers. False when unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False

    def product(node: ast.AST) -> bool:
        return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult)) or \
            (isinstance(node, ast.Call) and call_name(node) in PRODUCTS)

    for node in walk_own(path[-1]):
        if not isinstance(node, ast.Call) or call_name(node) not in DIAGONALS:
            continue
        receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
        if (node.args and product(node.args[0])) or (receiver is not None and product(receiver)):
            return True
    return False


EMBEDDINGS = frozenset({"Embedding", "EmbeddingBag"})


def embedding_defined_at(file: str, line: int) -> int | None:
    """Where the embedding module called at `line` is made: for `self.items(ids)` (or `items(ids)`),
    the line assigning `nn.Embedding(...)` / `nn.EmbeddingBag(...)` to `self.items` (or `items`) in
    the same file; None when no such call or assignment is found."""
    path = enclosing(file, line)
    tree = _tree(file)
    if not path or tree is None:
        return None
    called = {ast.unparse(n.func) for n in walk_own(path[-1]) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and call_name(node.value) in EMBEDDINGS \
                and any(ast.unparse(t) in called for t in node.targets):
            return node.lineno
    return None


FLOAT64_NAMES = frozenset({"float64", "double"})
"""torch's names of the float64 dtype (`torch.float64`, `torch.double`)."""


def float64_dtype_constant(file: str) -> int | None:
    """The line of a module-level name bound to float64 (`DTYPE = torch.float64`, or a choice that
    can be it) that the file passes as a dtype (`dtype=DTYPE`): one line decides the precision of
    everything made with it.
    None when there is none, or the source is unreadable."""
    tree = _tree(file)
    if tree is None:
        return None
    bound = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(  # `torch.float64`, or a choice of it (`... if x else ...`)
                isinstance(n, ast.Attribute) and n.attr in FLOAT64_NAMES and ast.unparse(n.value) == "torch"
                for n in ast.walk(stmt.value)):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    bound[target.id] = stmt.lineno
    if not bound:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "dtype" and isinstance(node.value, ast.Name) \
                and node.value.id in bound:
            return bound[node.value.id]
    return None


REDUCTIONS = frozenset({"sum", "mean"})
"""Reductions that turn a broadcast product into a matrix product (`(a * b).sum(-1)`)."""


def broadcast_product(file: str, line: int) -> bool:
    """The statement at `line` multiplies two tensors broadcast against each other and reduces
    the product (`(q.unsqueeze(1) * g.unsqueeze(0)).sum(-1)`, `(a[:, None] * b[None]).sum(-1)`,
    `torch.sum(x[:, None] * y, dim=2)`): a matrix product that first materialises every pairwise
    product. False when unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False

    def widened(node: ast.AST) -> bool:  # a new axis: unsqueeze, or None / ... in an index
        return any(isinstance(n, ast.Call) and call_name(n) in ("unsqueeze", "view", "reshape")
                   or isinstance(n, ast.Subscript) and any(isinstance(c, ast.Constant) and c.value is None
                                                           for c in ast.walk(n.slice))
                   for n in ast.walk(node))

    for node in walk_own(path[-1]):
        if not isinstance(node, ast.Call) or call_name(node) not in REDUCTIONS:
            continue
        operand = node.func.value if isinstance(node.func, ast.Attribute) and call_name(node) and \
            ast.unparse(node.func.value) != "torch" else (node.args[0] if node.args else None)
        if isinstance(operand, ast.BinOp) and isinstance(operand.op, ast.Mult) and widened(operand.left) \
                and widened(operand.right):
            return True
    return False
