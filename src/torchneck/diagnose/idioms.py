"""Slow idioms read from the user's source: a top-k done by a full sort, a solve done by an
inverse, a matrix product kept for its diagonal, a tensor built from nested Python lists, the
line making an embedding module, a call repeated with the same arguments (padded batches:
padding.py). Each answers for one statement, and False (or None) when the source is unreadable or unclear."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from .loop_invariants import changes_its_arguments
from .source import (
    COMPREHENSIONS,
    LOOPS,
    _assigned_before,
    _scope_body,
    _tree,
    block_of,
    call_name,
    enclosing,
    header_of,
    walk_own,
)

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
    return _sorted_into_a_name_then_sliced(file, path)


def _sorted_into_a_name_then_sliced(file: str, path: list[ast.stmt]) -> bool:
    """`order = scores.argsort(1, descending=True)` whose every later use in the same function
    (or module) keeps a prefix of it (`order[:, :k]`): the same top-k by a full sort, split over
    two statements."""
    stmt = path[-1]
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call) and call_name(stmt.value) in SORTS):
        return False
    name, after = stmt.targets[0].id, stmt.end_lineno or stmt.lineno
    scope = ast.Module(body=_scope_body(_tree(file) or ast.Module(body=[], type_ignores=[]), path), type_ignores=[])
    nodes = [n for n in ast.walk(scope) if getattr(n, "lineno", 0) > after]
    uses = [n for n in nodes if isinstance(n, ast.Name) and n.id == name]
    if not uses or any(not isinstance(n.ctx, ast.Load) for n in uses):
        return False  # never used, or bound again: unclear
    sliced = [n for n in nodes if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
              and n.value.id == name and _keeps_a_prefix(n.slice)]
    return len(sliced) == len(uses)


def sorted_then_searched(file: str, line: int) -> bool:
    """The statement at `line` sorts a tensor only to find where given elements land
    (`(scores.argsort(1, descending=True) == target[:, None]).nonzero()`), or names the sorted
    tensor there for the next statements of its block to search (`order = scores.argsort(...)`,
    then `(order == tgt[:, None]).nonzero()`): a rank found by a full sort, which a count of the
    larger elements gives in one pass. False when unclear or unreadable."""
    path, tree = enclosing(file, line), _tree(file)
    if not path or tree is None:
        return False

    def sorted_(node: ast.AST, names: frozenset[str] = frozenset()) -> bool:
        while isinstance(node, (ast.Subscript, ast.Attribute)) and not isinstance(node, ast.Call):
            node = node.value  # through `[1]`, `.indices`
        return (isinstance(node, ast.Call) and call_name(node) in SORTS
                or isinstance(node, ast.Name) and node.id in names)

    def searched(stmts: list[ast.stmt], names: frozenset[str] = frozenset()) -> bool:
        return any(isinstance(n, ast.Compare) and any(isinstance(op, ast.Eq) for op in n.ops)
                   and any(sorted_(side, names) for side in (n.left, *n.comparators))
                   for s in stmts for n in walk_own(s))

    stmt = path[-1]
    if searched([stmt]):
        return True
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and sorted_(stmt.value):
        block = block_of(tree, stmt)
        after = block[next(i for i, s in enumerate(block) if s is stmt) + 1:]
        return searched(after, frozenset({stmt.targets[0].id}))
    return False


def _keeps_a_prefix(index: ast.expr) -> bool:
    """`[:k]`, or `[:, :k]` / `[..., :k]` (whole leading dimensions, then a prefix of the last)."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    last = parts[-1]
    whole = all(isinstance(p, ast.Slice) and p.lower is None and p.upper is None or isinstance(p, ast.Constant)
                and p.value is Ellipsis for p in parts[:-1])
    return whole and isinstance(last, ast.Slice) and last.lower is None and last.upper is not None \
        and last.step is None


WHOLE_COPIES = frozenset({"tensor", "Tensor", "FloatTensor", "LongTensor", "clone", "copy", "array", "deepcopy"})
"""Calls that copy all of what they are given into a new tensor or array."""


def copied_then_indexed(file: str, line: int) -> bool:
    """The statement at `line` copies a whole tensor or array and then keeps some of it by an index
    (`torch.tensor(buffer[:n])[idx]`, `x.clone()[mask]`): every element is copied for the few kept,
    where indexing first copies only those. A plain slice of the copy (`[:k]`, a view) is left out
    too: slicing first is as cheap. False when unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return False
    return any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call) and call_name(n.value) in WHOLE_COPIES
               and not isinstance(n.slice, (ast.Slice, ast.Constant)) for n in walk_own(path[-1]))


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
FACTORISING = frozenset({"solve", "solve_ex", "inv", "inverse", "inv_ex", "cholesky", "cholesky_ex", "lstsq",
                         "lu_factor", "lu_factor_ex", "eigh", "eig", "svd", "qr"})
"""Calls that factorise their first argument (a linear solve factorises the matrix first)."""


def factorises_invariant_matrix(file: str, line: int) -> str | None:
    """The matrix the statement at `line` factorises (`torch.linalg.solve(self.A, rhs)`), as
    written, when it cannot change between the calls: an attribute its function never assigns
    (set once in `__init__`), or a name assigned before the loop holding the line and not in it.
    The same factorisation is then redone every call. A trained parameter (`nn.Parameter`), or
    a matrix changed in place (`A[i, j] = ...`, `A += ...`, `A.add_(...)`), changes. None when
    unclear or unreadable."""
    path = enclosing(file, line)
    if not path:
        return None
    tree = _tree(file)
    if tree is None:
        return None
    loops = [s for s in path[:-1] if isinstance(s, LOOPS)]
    for call in (n for n in walk_own(path[-1]) if isinstance(n, ast.Call) and call_name(n) in FACTORISING):
        matrix = call.args[0] if call.args else None
        if isinstance(matrix, ast.Attribute) and isinstance(matrix.value, ast.Name) and matrix.value.id == "self":
            attr = matrix.attr
            outside_init = [n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                            and f.name != "__init__" for n in ast.walk(f)]
            trained = any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == attr
                                                            for t in n.targets)
                          and "Parameter" in {call_name(c) for c in ast.walk(n.value) if isinstance(c, ast.Call)}
                          for n in ast.walk(tree))
            if not trained and not any(_changes(n, lambda e, a=attr: isinstance(e, ast.Attribute) and e.attr == a)
                                       for n in outside_init):  # set in __init__ only
                return ast.unparse(matrix)
        elif isinstance(matrix, ast.Name) and loops:
            name = matrix.id
            if not any(_changes(n, lambda e, v=name: isinstance(e, ast.Name) and e.id == v)
                       for n in ast.walk(loops[-1])):
                return name
    return None


def _changes(node: ast.AST, is_it) -> bool:
    """`node` binds or changes in place the expression `is_it` recognises: an assignment to it or
    to an element of it, an augmented assignment, an in-place method call (`x.add_(...)`)."""
    if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
        return bool(is_it(node))
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
        return bool(is_it(node.value))
    if isinstance(node, ast.AugAssign):
        target = node.target.value if isinstance(node.target, ast.Subscript) else node.target
        return bool(is_it(target))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_") \
            and not node.func.attr.startswith("_"):
        return bool(is_it(node.func.value))
    return False


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


_PLACING_METHODS = frozenset({"to", "double", "type", "cuda", "cpu", "eval", "train", "requires_grad_", "contiguous"})
"""Methods that move or convert an object and keep it whole: a chain of them is one conversion."""


def float64_conversions(file: str) -> list[int]:
    """Lines converting a model or tensor to float64 and keeping it: the whole value of an
    assignment or a statement is a chain of conversions with one to float64 among them
    (`model = model.to(device, dtype=torch.float64)`, `x = x.double()`, `net.double()`,
    `.type(torch.double)`; a choice that can be float64 counts). A reduction read in float64
    (`loss.sum().double()`, a metric's accumulator) is not: it makes one number. [] when
    unreadable."""
    tree = _tree(file)
    if tree is None:
        return []
    found = set()
    for stmt in ast.walk(tree):
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)) or stmt.value is None:
            continue
        node, converts = stmt.value, False
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _PLACING_METHODS:
            arguments = [*node.args, *(k.value for k in node.keywords)]
            converts = converts or (node.func.attr == "double" and not arguments) or (
                node.func.attr in ("to", "type") and any(
                    isinstance(n, ast.Attribute) and n.attr in FLOAT64_NAMES and ast.unparse(n.value) == "torch"
                    for a in arguments for n in ast.walk(a)))
            node = node.func.value
        if converts and not isinstance(node, ast.Call):  # of a name, not of a reduction's result
            found.add(stmt.lineno)
    return sorted(found)


def keyword_line(file: str, line: int, keyword: str) -> int | None:
    """The line of the `keyword=` argument of the call starting at `line` (a DataLoader built
    over several lines: `num_workers=0` is the line to change), or None."""
    path = enclosing(file, line)
    if not path:
        return None
    for node in walk_own(path[-1]):
        if isinstance(node, ast.Call) and node.lineno == line:
            for k in node.keywords:
                if k.arg == keyword:
                    return k.value.lineno
    return None


def chunk_size_setting(file: str, line: int) -> int | None:
    """The line setting to 1 the step of a `range(start, stop, step)` loop around `line` (a chunk
    size taken from a config: `for i in range(0, n, self.cfg.max_batch)` with `max_batch: int = 1`
    in a config class, an assignment or a keyword argument, `setting_lines`; a choice that can be
    1 counts): the program asks for batches of one there. None when none or unreadable."""
    path, tree = enclosing(file, line), _tree(file)
    if not path or tree is None:
        return None
    steps = [loop.iter.args[2] for loop in path if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
             and call_name(loop.iter) == "range" and len(loop.iter.args) == 3]
    names = {s.attr if isinstance(s, ast.Attribute) else s.id for s in steps
             if isinstance(s, (ast.Attribute, ast.Name))}
    if not names:
        return None
    found = setting_lines(tree, names, lambda value: any(
        isinstance(c, ast.Constant) and c.value == 1 and not isinstance(c.value, bool) for c in ast.walk(value)),
        besides=line)
    return found[0] if found else None


def setting_lines(tree: ast.Module, names: set[str], gives: Callable[[ast.expr], bool], besides: int = 0) -> list[int]:
    """Lines of `tree` giving a setting named in `names` a value `gives(value)` accepts: an
    assignment to that name or attribute (a config class's field `max_batch: int = 1`,
    `self.x = ...`) or a keyword argument (`Service(max_batch=1)`), in the file's order, the
    line `besides` (the one using the setting) left out."""
    out = set()
    for node in ast.walk(tree):
        targets: list[ast.expr]
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.keyword) and node.arg in names and gives(node.value):
            out.add(node.value.lineno)
            continue
        else:
            continue
        named = {t.id if isinstance(t, ast.Name) else t.attr for t in targets
                 if isinstance(t, (ast.Name, ast.Attribute))}
        if named & names and node.lineno != besides and gives(value):
            out.add(node.lineno)
    return sorted(out)


def modulo_setting_lines(file: str, test: ast.expr, besides: int) -> list[int]:
    """The lines giving a number to the settings an `if`'s test takes a modulo by (`step %
    self.save_every_steps == 0` -> `Trainer(save_every_steps=8)`), the `if` (`besides`) left out."""
    tree = _tree(file)
    every = {n.right.attr if isinstance(n.right, ast.Attribute) else n.right.id for n in ast.walk(test)
             if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
             and isinstance(n.right, (ast.Attribute, ast.Name))}
    if not every or tree is None:
        return []
    return setting_lines(tree, every, lambda value: any(isinstance(c, ast.Constant) and type(c.value) is int
                                                        for c in ast.walk(value)), besides=besides)


REDUCTIONS = frozenset({"sum", "mean"})
"""Reductions that turn a broadcast product into a matrix product (`(a * b).sum(-1)`)."""


READS = frozenset({"open", "load", "imread", "read", "read_csv", "read_parquet", "loadtxt", "fromfile", "decode",
                   "urlopen", "read_image", "decode_image", "read_file", "load_file", "frombuffer"})
"""Calls that read a sample from storage: a `__getitem__` making them loads per sample."""


def indexes_own_tensors(file: str, line: int) -> bool:
    """The function holding `line` is a Dataset's `__getitem__(self, idx)` that indexes its own
    tensors with the index (`self.dense[idx]`: transformed with torch, or made by torch where the
    class keeps them), and reads nothing from storage (`READS`): rows of data already in memory,
    which a batch of indices would fetch in one op each. False when unclear or unreadable."""
    tree = _tree(file)
    if tree is None:
        return False
    holding = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__getitem__"
               and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not holding or len(holding[0].args.args) < 2:
        return False
    index = holding[0].args.args[1].arg
    if any(isinstance(n, ast.Call) and call_name(n) in READS for n in walk_own(holding[0])):
        return False  # a file or a record read per sample: workers do help there
    rows = [n for n in walk_own(holding[0]) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute)
            and isinstance(n.value.value, ast.Name) and n.value.value.id == "self"
            and isinstance(n.slice, ast.Name) and n.slice.id == index]
    # tensors, not lists of strings or records: the rows go through torch (`torch.log1p(self.x[i])`),
    # or what is indexed was made by torch where the class keeps it (`self.x = torch.as_tensor(x)`)
    torch_ops = any(isinstance(n, ast.Name) and n.id == "torch" for n in walk_own(holding[0]))
    indexed = {n.value.attr for n in rows if isinstance(n.value, ast.Attribute)}
    made = {t.attr for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and holding[0] in c.body
            for n in ast.walk(c) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
            and ast.unparse(n.value.func).startswith("torch.") for t in n.targets if isinstance(t, ast.Attribute)}
    return bool(rows) and (torch_ops or bool(indexed & made))


def invariant_call(file: str, line: int, functions: set[str], called_repeatedly: bool = False,
                   invariant_params: frozenset[str] = frozenset(), item_used_elsewhere: bool = False) -> str | None:
    """The name of a call at `line` to one of `functions` made on every pass of a loop or
    comprehension around it with arguments that do not change from pass to pass (no name the
    loop binds or assigns, none made by a call): `[log_mel(w, mel_filterbank()) for w in clips]`
    computes the same filterbank for every clip. The statement must do other work per pass (a
    name the loop binds is read): a loop that only repeats the call is a benchmark timing it.
    None when there is none, or the source is unreadable. With `called_repeatedly` (the function
    holding the line is called once per item, a method per request), a call outside any loop
    whose arguments read none of the function's parameters but `self` counts too, when the
    function reads a parameter elsewhere (`invariant_params`: parameters every caller passes the
    same value, `loop_invariants.invariant_parameters`, do not count), or, in a closure without
    parameters (an optimizer's `closure()`), none of the names it assigns. With
    `item_used_elsewhere` (the call is known to hold the time, from the samples under it), the
    statement may read nothing that changes when the loop reads its item in another statement,
    unless the call is an object's method alone (`trainer.fit_epoch(data)` changes the trainer)."""
    path = enclosing(file, line)
    if not path or not functions:
        return None
    stmt = path[-1]
    own = [n for part in header_of(stmt) for n in walk_own(part)]  # a loop's line: its header, not its body
    loops = [s for s in path[:-1] if isinstance(s, LOOPS)]
    comps = [n for n in own if isinstance(n, COMPREHENSIONS)]
    if called_repeatedly and not loops and not comps:
        return _invariant_in_function(file, line, stmt, functions, invariant_params)
    bound: set[str] = set()
    for loop in loops:
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            bound |= {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        bound |= {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for comp in comps:
        bound |= {n.id for g in comp.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    varying = {n.id for n in own if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} & bound
    targets = _loop_targets(loops) if item_used_elsewhere else set()
    per_item = any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in targets
                   for loop in loops for n in ast.walk(loop)
                   if not isinstance(loop, (ast.For, ast.AsyncFor)) or n is not loop.target)
    if not varying and not per_item:
        return None  # nothing is done per item: a loop repeating the statement on purpose (a benchmark)
    for call in own:
        if not isinstance(call, ast.Call) or call_name(call) not in functions:
            continue
        if not loops and not any(call in set(ast.walk(c)) for c in comps):
            continue  # called once here
        arguments = [*call.args, *(k.value for k in call.keywords)]
        if any(isinstance(n, ast.Call) for a in arguments for n in ast.walk(a)):
            continue  # an argument made by a call may differ every pass (torch.rand, next(it))
        if changes_its_arguments(file, call, line):
            continue  # a training step: the same names, a new model every pass
        if not varying and not isinstance(call.func, ast.Name):
            continue  # alone in a statement, an object's method may change the object (a training epoch)
        used = {n.id for a in arguments for n in ast.walk(a) if isinstance(n, ast.Name)}
        if not used & bound:
            return call_name(call)
    return None


def _loop_targets(loops: Sequence[ast.AST]) -> set[str]:
    """The names `for` loops among `loops` bind to their items."""
    return {n.id for loop in loops if isinstance(loop, (ast.For, ast.AsyncFor))
            for n in ast.walk(loop.target) if isinstance(n, ast.Name)}


def _invariant_in_function(file: str, line: int, stmt: ast.stmt, functions: set[str],
                           invariant_params: frozenset[str] = frozenset()) -> str | None:
    """`invariant_call` for a function called once per item: a call at `stmt` to one of
    `functions` whose arguments read no parameter of the function holding it (`self` aside: a
    constant table built from the object's config), nor a local name made from one (`length =
    history.shape[1] + 28`), in a function that reads one elsewhere. A Dataset's `__getitem__`
    index is no such parameter: what is made from it is the same for that sample every epoch; and
    in a Dataset's method of `self` alone, `self.helper()` without arguments is the same too."""
    tree = _tree(file)
    holding = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.lineno <= line <= (n.end_lineno or n.lineno)] if tree is not None else []
    if not holding:
        return None
    fdef = max(holding, key=lambda n: n.lineno)
    params = {a.arg for a in [*fdef.args.posonlyargs, *fdef.args.args, *fdef.args.kwonlyargs]} - {"self", "cls"}
    reads = {n.id for n in walk_own(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    stored = {n.id for n in walk_own(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    owner = next((c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and fdef in c.body), None)  # type: ignore[arg-type]
    if not (params or fdef.args.vararg or fdef.args.kwarg) and owner is not None and any(
            isinstance(f, ast.FunctionDef) and f.name == "__getitem__" for f in owner.body):
        # a Dataset's method of `self` alone (a `stats` property recomputing the whole table's
        # statistics): per sample, `self.helper()` without arguments gives the same every time
        for call in walk_own(stmt):
            if isinstance(call, ast.Call) and call_name(call) in functions and not (call.args or call.keywords) \
                    and isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "self":
                return call_name(call)
    if not params & reads and (params or fdef.args.vararg or fdef.args.kwarg or not stored):
        return None  # the function does nothing per item itself (a closure without parameters: its stores vary)
    index = {fdef.args.args[1].arg} if fdef.name == "__getitem__" and len(fdef.args.args) > 1 else set()
    varying = _varying(fdef, params - invariant_params - index) if params else stored  # an index: same each epoch
    varying |= _drawn(fdef)
    for call in walk_own(stmt):
        if not isinstance(call, ast.Call) or call_name(call) not in functions:
            continue
        arguments = [*call.args, *(k.value for k in call.keywords)]
        if not (params or arguments) or any(isinstance(n, ast.Call) for a in arguments for n in ast.walk(a)):
            continue
        if not {n.id for a in arguments for n in ast.walk(a) if isinstance(n, ast.Name)} & varying:
            return call_name(call)
    return None


DRAWING_CALLS = frozenset({"rand", "randn", "randint", "randperm", "normal", "uniform", "choice", "shuffle",
                           "sample", "multinomial", "bernoulli", "next"})
"""Calls whose result differs from one call to the next (random draws, an iterator's next item)."""


def _drawn(fdef: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The local names the function assigns from a draw (`DRAWING_CALLS`) or from a method of
    `self` (`xt = self.sample_collocation()`: the object's state, random or not, may differ at
    every call), and those assigned from them: what a call given them may compute anew."""
    drawn = set()
    for node in walk_own(fdef):
        if isinstance(node, ast.Assign) and any(
                isinstance(c, ast.Call) and (call_name(c) in DRAWING_CALLS or ast.unparse(c.func).startswith("self."))
                for c in ast.walk(node.value)):
            drawn |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return _varying(fdef, drawn) if drawn else drawn


def _varying(fdef: ast.FunctionDef | ast.AsyncFunctionDef, names: set[str]) -> set[str]:
    """`names` and the local names the function assigns from them, transitively."""
    out, grown = set(names), True
    while grown:
        grown = False
        for node in walk_own(fdef):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None \
                    and {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} & out:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                new = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)} - out
                out |= new
                grown = grown or bool(new)
    return out


LOADER_WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "zip", "islice"})
"""Calls wrapping the iterable a loop takes its batches from (`enumerate(loader)`)."""


def loader_lines_of_loop(file: str, line: int) -> set[int]:
    """The lines of `file` that may construct the DataLoader the `for` loop at `line` iterates:
    the `DataLoader(...)` assigned to the iterated name in the loop's function, or, when that name
    is a parameter, passed to the function at its calls in the file. Empty when unclear."""
    tree = _tree(file)
    path = enclosing(file, line)
    if tree is None or not path or not isinstance(path[-1], ast.For) or path[-1].lineno != line:
        return set()
    iterable = path[-1].iter
    while isinstance(iterable, ast.Call) and call_name(iterable) in LOADER_WRAPPERS and iterable.args:
        iterable = iterable.args[0]
    if isinstance(iterable, ast.Call):
        return {iterable.lineno} if call_name(iterable) == "DataLoader" else set()
    if not isinstance(iterable, ast.Name):
        return set()
    made = _made_as_loader(tree, file, line, iterable.id)
    if made is not None:
        return {made}
    function = next((f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and f.lineno < line <= (f.end_lineno or f.lineno) and f.body is not None
                     and any(s is path[0] for s in f.body)), None)
    if function is None:
        return set()
    params = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    if iterable.id not in params:
        return set()
    position = params.index(iterable.id) - (1 if params and params[0] == "self" else 0)
    out = set()
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and call_name(n) == function.name):
        passed = call.args[position] if 0 <= position < len(call.args) else \
            next((k.value for k in call.keywords if k.arg == iterable.id), None)
        if isinstance(passed, ast.Call) and call_name(passed) == "DataLoader":
            out.add(passed.lineno)
        elif isinstance(passed, ast.Name):
            made = _made_as_loader(tree, file, call.lineno, passed.id)
            if made is not None:
                out.add(made)
    return out


def _made_as_loader(tree: ast.Module, file: str, line: int, name: str) -> int | None:
    """The line of the last assignment of `name` before `line` when it makes a DataLoader."""
    found = _assigned_before(tree, file, line, name)
    if found is not None and found.value is not None and any(
            isinstance(n, ast.Call) and call_name(n) == "DataLoader" for n in ast.walk(found.value)):
        return found.lineno
    return None


def computed_then_sliced(file: str, line: int) -> bool:
    """The statement at `line` computes over a whole input and keeps a window of the result
    (`self.logmel(wav)[:, start:start + n]`, features of a 30 s recording for a 1 s crop): slicing
    the input first computes only the window. False when unclear or unreadable."""
    path = enclosing(file, line)
    return bool(path) and any(
        isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call) and call_name(n.value) not in WHOLE_COPIES
        and any(isinstance(s, ast.Slice) and s.lower is not None and s.upper is not None for s in ast.walk(n.slice))
        and any(isinstance(a, ast.Name) for a in n.value.args) for n in walk_own(path[-1]))


ARCHIVE_LOADS = frozenset({"load"})
"""`np.load` of an `.npz` archive: a lazy NpzFile that reads and decompresses a whole array at
every `archive["key"]`."""


def lazy_archive_at(file: str, line: int) -> int | None:
    """The line keeping `self.X = np.load(...)` when the statement at `line` reads an array of it
    by key (`self.X["images"][idx]`): each read loads the whole array from the file again, for one
    sample. None otherwise, when the archive is read into memory first, or unreadable."""
    path = enclosing(file, line)
    tree = _tree(file)
    if not path or tree is None:
        return None
    keyed = {n.value.attr for n in walk_own(path[-1]) if isinstance(n, ast.Subscript)
             and isinstance(n.value, ast.Attribute) and isinstance(n.value.value, ast.Name)
             and n.value.value.id == "self" and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        loads = call_name(node.value) in ARCHIVE_LOADS and ast.unparse(node.value.func).startswith(("np.", "numpy."))
        if loads and any(isinstance(t, ast.Attribute) and t.attr in keyed for t in node.targets):
            return node.lineno
    return None


def written_parameter(file: str) -> tuple[str, int, int] | None:
    """(attribute, line making it, line writing it) of an `nn.Parameter` kept on `self` that the
    program also writes itself outside `__init__` (`self.queue[:, idx] = keys`, `.copy_(...)`,
    `.data[...] = ...`): state (a queue, a memory bank), not a weight to learn, which the optimizer
    nonetheless updates and backward differentiates. One made with `requires_grad=False` is not
    one. None when there is none or unreadable."""
    tree = _tree(file)
    if tree is None:
        return None
    made: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and call_name(node.value) == "Parameter":
            frozen = any(k.arg == "requires_grad" and isinstance(k.value, ast.Constant) and k.value.value is False
                         for k in node.value.keywords)
            for t in node.targets:
                if not frozen and isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                        and t.value.id == "self":
                    made.setdefault(t.attr, node.lineno)
    if not made:
        return None

    def own(expr: ast.AST) -> str | None:
        """The parameter an expression names: `self.X`, `self.X.data`."""
        if isinstance(expr, ast.Attribute) and expr.attr == "data":
            expr = expr.value
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self" \
                and expr.attr in made:
            return expr.attr
        return None

    for f in ast.walk(tree):
        if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) or f.name == "__init__":
            continue
        for node in ast.walk(f):
            name = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                name = own(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("copy_", "fill_", "zero_", "index_copy_", "scatter_"):
                name = own(node.func.value)
            if name is not None:
                return name, made[name], getattr(node, "lineno", f.lineno)
    return None
