"""The user's source around a line, for rules that know where time went but must name the line to
change: the `with` that sets the grad mode around a model call, the loop that holds it.

Read at diagnosis time from the files the run names (relative names from the directory the
script ran in, `sources_relative_to`, else from the directory the report is made in); a file
that cannot be read or parsed answers nothing, and the rule keeps the line it had.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

LOOPS = (ast.For, ast.AsyncFor, ast.While)
"""The statements that repeat their body."""
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
"""The expressions that repeat theirs."""


_BASE: ContextVar[str | None] = ContextVar("torchneck_source_base", default=None)


@contextmanager
def sources_relative_to(directory: str | None) -> Iterator[None]:
    """Read relative file names from `directory` (the run's working directory: a script run as
    `torchneck run train.py` is named `train.py` in its samples), while diagnosing it."""
    token = _BASE.set(directory)
    try:
        yield
    finally:
        _BASE.reset(token)


def _resolved(file: str) -> str:
    """`file`, or the run directory's file of that relative name when there is one."""
    base = _BASE.get()
    if base and not os.path.isabs(file) and os.path.isfile(os.path.join(base, file)):
        return os.path.join(base, file)
    return file


def _tree(file: str) -> ast.Module | None:
    return _parsed(_resolved(file))


@functools.lru_cache(maxsize=128)
def _parsed(file: str) -> ast.Module | None:
    source = "".join(linecache.getlines(file))
    if not source:
        return None
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def enclosing(file: str, line: int) -> list[ast.stmt]:
    """The statements of `file` whose extent holds `line`, outermost first, from the innermost
    function or class that holds it (the `def` itself left out: its body is the frame's code), the
    statement at `line` last; [] when the source is not readable."""
    tree = _tree(file)
    if tree is None:
        return []
    out: list[ast.stmt] = []
    body: list[ast.stmt] = tree.body
    while True:
        inner = next((s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if inner is None:
            return out
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out = []
        else:
            out.append(inner)
        children = [getattr(inner, name, []) for name in ("body", "orelse", "finalbody")]
        body = [s for block in children for s in block]
        body += [s for h in getattr(inner, "handlers", []) for s in h.body]
        body += [s for case in getattr(inner, "cases", []) for s in case.body]


def names_in(node: ast.AST) -> set[str]:
    """The names and attribute names an expression uses (`torch.inference_mode()` ->
    {"torch", "inference_mode"})."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def compile_call_lines(file: str) -> list[int]:
    """The lines of `file` that call `torch.compile` (`torch.compile(model)`, `@torch.compile`,
    `@torch.compile(mode=...)`, `compile(...)` imported from torch) or `nn.Module.compile`
    (`model.compile()`), not `re.compile`; [] when the source is not readable."""
    tree = _tree(file)
    if tree is None:
        return []
    from_torch = any(isinstance(n, ast.ImportFrom) and n.module == "torch" and any(a.name == "compile" for a in n.names)
                     for n in ast.walk(tree))
    lines: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute) and f.attr == "compile" and \
                    not (isinstance(f.value, ast.Name) and f.value.id in ("re", "regex")) or \
                    from_torch and isinstance(f, ast.Name) and f.id == "compile":
                lines.add(n.lineno)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            lines.update(d.lineno for d in n.decorator_list
                         if isinstance(d, ast.Attribute) and d.attr == "compile")  # a bare @torch.compile
    return sorted(lines)


def argument_origin(file: str, line: int, function: str) -> int | None:
    """Where the variable passed to `function(...)` at `line` was last assigned on the way to that
    line (in the call's own block or one enclosing it, before it; an assignment in a branch
    that does not hold the call may not have run): `a = np.random.rand(...)` for
    `torch.from_numpy(a)`. None when the argument is not a plain name or the source unreadable."""
    tree = _tree(file)
    if tree is None:
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == line and n.args
             and call_name(n) == function]
    if not calls or not isinstance(calls[0].args[0], ast.Name):
        return None
    found = _assigned_before(tree, file, line, calls[0].args[0].id)
    return found.lineno if found is not None else None


def argument_assigned_at(file: str, line: int, argument: int | str) -> int | None:
    """Where the variable passed as `argument` (a position, or a keyword's name) of a call at
    `line` was last assigned on the way to it (see `argument_origin`): `adj = ...` for
    `model(x, adj)`; None when that argument is not a plain name or the source unreadable."""
    tree = _tree(file)
    if tree is None:
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == line]
    for call in sorted(calls, key=lambda c: len(ast.unparse(c))):  # innermost first: `loss(model(x, adj), y)`
        if isinstance(argument, int):
            value = call.args[argument] if argument < len(call.args) else None
        else:
            value = next((k.value for k in call.keywords if k.arg == argument), None)
        if isinstance(value, ast.Name):
            found = _assigned_before(tree, file, line, value.id)
            if found is not None:
                return found.lineno
    return None


def _assigned_before(tree: ast.Module, file: str, line: int, name: str) -> ast.Assign | ast.AnnAssign | None:
    """The last assignment to `name` on the way to `line` (see `argument_origin`)."""
    path = enclosing(file, line)
    blocks: list[list[ast.stmt]] = [_scope_body(tree, path)]
    for stmt in path[:-1]:
        blocks += [b for b in (getattr(stmt, k, []) for k in ("body", "orelse", "finalbody"))
                   if any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in b)]
    best: ast.Assign | ast.AnnAssign | None = None
    for block in blocks:
        for s in block:
            if s.lineno < line and isinstance(s, (ast.Assign, ast.AnnAssign)) and any(
                    isinstance(t, ast.Name) and t.id == name
                    for t in (s.targets if isinstance(s, ast.Assign) else [s.target])):
                if best is None or s.lineno > best.lineno:
                    best = s
    return best


def densified_at(file: str, line: int) -> int | None:
    """The line where an operand used at `line` was made dense from a sparse tensor: `.to_dense()`
    on the line itself, or in the last assignment of a plain name passed or used there
    (`a = s.to_dense()` ... `model(x, a)`); None otherwise or when the source is unreadable."""
    tree = _tree(file)
    path = enclosing(file, line)
    if tree is None or not path:
        return None
    stmt = path[-1]

    def dense(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "to_dense" for n in ast.walk(node))

    if stmt.lineno == line and dense(stmt):
        return line
    names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for name in sorted(names):
        found = _assigned_before(tree, file, line, name)
        if found is not None and found.value is not None and dense(found.value):
            return found.lineno
    return None


def _scope_body(tree: ast.Module, path: list[ast.stmt]) -> list[ast.stmt]:
    """The body of the function (or module) that holds the statements of `path`."""
    return block_of(tree, path[0]) if path else tree.body


def block_of(tree: ast.Module, stmt: ast.stmt) -> list[ast.stmt]:
    """The statement list holding `stmt` (a function's body, a loop's, a branch's); [stmt] when none."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(s is stmt for s in block):
                return block
    return [stmt]


GROWING_CALLS = frozenset({"cat", "concat", "concatenate", "hstack", "vstack", "row_stack", "column_stack", "append"})
"""Calls that build a new tensor (or array) from the ones they are given: fed the result of their
previous call, each pass copies everything gathered so far."""
FACTORY_CALLS = frozenset({"zeros", "ones", "empty", "full"})
"""torch's factories of a tensor of a given size and fixed content: a buffer, not data."""


def rebuilt_tensor(file: str, line: int) -> str | None:
    """How the statement at `line` rebuilds a tensor it could keep: "grows" for `x = torch.cat([x,
    y])` (the target fed back into a concatenation), "allocates" for a `torch.zeros/ones/empty/full`
    call that is all the line calls (`buf if reuse else torch.zeros(n, d)`); None otherwise or when
    the source is unreadable."""
    path = enclosing(file, line)
    stmt = path[-1] if path else None
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None or stmt.lineno != line:
        return None
    targets = {ast.unparse(t) for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])}
    calls = [n for n in ast.walk(stmt.value) if isinstance(n, ast.Call)]
    for call in calls:
        name = call_name(call)
        if name in GROWING_CALLS and call.args:
            first = call.args[0]
            parts = first.elts if isinstance(first, (ast.List, ast.Tuple)) else [first]
            if any(ast.unparse(p) in targets for p in parts):
                return "grows"
    outer = _outer_calls(stmt.value)  # the line's time is the allocation's only when it calls nothing else
    if outer and all(isinstance(f := c.func, ast.Attribute) and f.attr in FACTORY_CALLS
                     and isinstance(f.value, ast.Name) and f.value.id == "torch" for c in outer):
        return "allocates"
    return None


def _outer_calls(node: ast.AST) -> list[ast.Call]:
    """The calls in `node` that are not inside another call (`model(torch.zeros(n))`: model's)."""
    if isinstance(node, ast.Call):
        return [node]
    return [c for child in ast.iter_child_nodes(node) for c in _outer_calls(child)]


def in_loop(file: str, line: int) -> bool:
    """True when `line` runs inside a `for` or `while` of its own function."""
    return any(isinstance(s, LOOPS) and s.lineno != line for s in enclosing(file, line))


SHAPE_KEEPING_METHODS = frozenset({"to", "cuda", "cpu", "long", "int", "float", "half", "bfloat16", "double", "bool",
                                   "contiguous", "clone", "detach", "pin_memory", "requires_grad_", "type_as"})
"""Tensor methods whose result has the receiver's shape: a size comes from the receiver."""
SIZED_FACTORIES = frozenset({"zeros", "ones", "empty", "full", "rand", "randn", "randint",
                             "new_zeros", "new_ones", "new_empty", "new_full"})
"""Calls that make a tensor of the size they are given (a tuple, or the leading int arguments)."""
ORIGIN_STEPS = 12
"""Steps (names, calls, loops, yields) the walk back from a compiled call's argument takes before it
gives up: a size decided further away is not named rather than guessed."""


class _Scope:
    """A function the walk is in: its file, and the arguments of the call that entered it (a
    parameter's size is decided by the caller's expression)."""

    def __init__(self, file: str, args: dict[str, ast.expr] | None = None,
                 caller: _Scope | None = None, call_line: int = 0) -> None:
        self.file, self.args, self.caller, self.call_line = file, args or {}, caller, call_line


def compiled_callee(file: str, line: int) -> str | None:
    """The expression the program calls to run what the `torch.compile` at `line` compiles:
    `compiled` for `compiled = torch.compile(model)`, `model` for `model.compile()`, `step` (or
    `self.step` in a class) for `@torch.compile` on `def step`; None otherwise or unreadable."""
    tree = _tree(file)
    if tree is None:
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef):
            for d in n.body:
                if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and _compile_decorated(d, line):
                    return f"self.{d.name}"
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _compile_decorated(n, line) \
                and n in tree.body:
            return n.name
    path = enclosing(file, line)
    stmt = path[-1] if path else None
    if stmt is None or stmt.lineno != line:
        return None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call) \
            and _is_compile(stmt.value.func) and stmt.value.args:
        return ast.unparse(stmt.targets[0])
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute) \
            and stmt.value.func.attr == "compile" and not stmt.value.args:
        return ast.unparse(stmt.value.func.value)  # model.compile()
    return None


def _is_compile(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "compile" and ast.unparse(func.value) == "torch" \
        or isinstance(func, ast.Name) and func.id == "compile"


def _compile_decorated(d: ast.FunctionDef | ast.AsyncFunctionDef, line: int) -> bool:
    return any(dec.lineno == line and _is_compile(dec.func if isinstance(dec, ast.Call) else dec)
               for dec in d.decorator_list)


def compile_dynamic(file: str, line: int) -> str | None:
    """The `dynamic=` argument of the torch.compile call at `line` as written ("" when not given;
    None when no call is readable there)."""
    tree = _tree(file)
    if tree is None:
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == line and _is_compile(n.func)]
    if not calls:
        return None
    return next((ast.unparse(k.value) for k in calls[0].keywords if k.arg == "dynamic"), "")


def calls_of(file: str, callee: str) -> list[int]:
    """The lines of `file` that call `callee` (an expression as written: `compiled`, `self.model`)."""
    tree = _tree(file)
    if tree is None:
        return []
    return sorted({n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == callee})


def parameter_position(file: str, line: int, function: str, name: str) -> int | None:
    """Where parameter `name` of the function `function` defined at `line` (its `def` or first
    decorator) sits among a call's positional arguments, `self` left out for a method; None when
    it is not a plain parameter or the source is unreadable."""
    tree = _tree(file)
    if tree is None:
        return None
    for owner in ast.walk(tree):
        for d in getattr(owner, "body", []):
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name == function and line in (
                    d.lineno, min([x.lineno for x in d.decorator_list] or [d.lineno])):
                params = [a.arg for a in d.args.posonlyargs + d.args.args]
                if isinstance(owner, ast.ClassDef) and not any(names_in(x) & {"staticmethod"}
                                                               for x in d.decorator_list):
                    params = params[1:]
                return params.index(name) if name in params else None
    return None


def size_origin(file: str, line: int, callee: str, position: int, keyword: str, dim: int) -> tuple[str, int] | None:
    """The line that decides dimension `dim` of the argument (at `position`, or passed as
    `keyword`) of the call of `callee` at `line`: followed back through indexing that keeps the
    dimension (`ids[:, :-1]`), shape-keeping methods (`.to(device)`), assignments, a `for` over a
    generator of the user's and its `yield`, a function's `return`, a parameter to its caller's
    argument, down to the tensor factory that sets the size (`torch.full((n, width), ...)`: the
    line that assigns `width`; `pad_sequence`, `torch.stack`: that line). None when a step is
    unclear (several calls, a name bound in a branch, a library function) or takes more than
    `ORIGIN_STEPS`: the caller keeps the lines it had."""
    tree = _tree(file)
    if tree is None:
        return None
    calls = [n for n in ast.walk(tree)
             if isinstance(n, ast.Call) and n.lineno == line and ast.unparse(n.func) == callee]
    if len(calls) != 1:
        return None
    call = calls[0]
    arg = next((k.value for k in call.keywords if k.arg == keyword), None)
    given = call.args[:position + 1]
    if arg is None and len(given) == position + 1 and not any(isinstance(a, ast.Starred) for a in given):
        arg = given[position]
    if arg is None:
        return None
    return _Walk().tensor(_Scope(file), arg, dim, line)


class _Walk:
    """One walk back from an expression to the line that decides a size, `ORIGIN_STEPS` at most."""

    def __init__(self) -> None:
        self.steps = ORIGIN_STEPS

    def _step(self) -> bool:
        self.steps -= 1
        return self.steps >= 0

    def tensor(self, scope: _Scope, expr: ast.expr, dim: int, line: int) -> tuple[str, int] | None:
        """The line that decides dimension `dim` of the tensor `expr` evaluated at `line`."""
        if not self._step():
            return None
        if isinstance(expr, ast.Subscript):
            kept = _dim_through_index(expr.slice, dim)
            return None if kept is None else self.tensor(scope, expr.value, kept, line)
        if isinstance(expr, ast.Name):
            return self._name(scope, expr.id, line, lambda s, e, ln: self.tensor(s, e, dim, ln))
        if not isinstance(expr, ast.Call):
            return None
        func = expr.func
        name = call_name(expr)
        if isinstance(func, ast.Attribute) and name in SHAPE_KEEPING_METHODS:
            return self.tensor(scope, func.value, dim, line)
        if name in SIZED_FACTORIES:
            element = _size_element(expr, name, dim)
            return None if element is None else self.value(scope, element, expr.lineno)
        if name == "pad_sequence":  # padded to the longest sequence given: dim 1 batch first, else dim 0
            first = any(k.arg == "batch_first" and isinstance(k.value, ast.Constant) and k.value.value is True
                        for k in expr.keywords)
            return (scope.file, expr.lineno) if dim == (1 if first else 0) else None
        if name == "stack":  # the stacked dimension's size is the number of tensors given
            at = next((k.value for k in expr.keywords if k.arg == "dim"), expr.args[1] if len(expr.args) > 1 else None)
            stacked = 0 if at is None else at.value if isinstance(at, ast.Constant) else None
            return (scope.file, expr.lineno) if stacked == dim else None
        target = _user_function(scope.file, expr, line)
        if target is None:
            return None
        file, fdef, method = target
        callee = _Scope(file, _bind(expr, fdef, method), scope, line)
        if _own_nodes(fdef, ast.Yield, ast.YieldFrom):
            return None  # a generator object, not a tensor
        returns = [r.value for r in _own_nodes(fdef, ast.Return) if isinstance(r, ast.Return) and r.value is not None]
        return self._agreed(callee, returns, lambda s, e, ln: self.tensor(s, e, dim, ln))

    def value(self, scope: _Scope, expr: ast.expr, line: int) -> tuple[str, int] | None:
        """The line that decides the plain value (a size) `expr` used at `line`: a name's
        assignment or loop, the caller's argument for a parameter, `x.shape[k]`/`x.size(k)`'s
        tensor, the line itself for any other expression; None for a constant."""
        if not self._step() or isinstance(expr, ast.Constant):
            return None
        if isinstance(expr, ast.Name):
            return self._name(scope, expr.id, line, self.value, plain=True)
        of = _shape_of(expr)
        if of is not None:
            return self.tensor(scope, of[0], of[1], line)
        return scope.file, expr.lineno

    def _name(self, scope: _Scope, name: str, line: int, follow, plain: bool = False) -> tuple[str, int] | None:
        """Follow `name` at `line` to what bound it: its last assignment (`follow` its value), the
        item of the `for` that binds it, or, for a parameter, the caller's argument."""
        bound = _binding(scope.file, name, line)
        if bound is None:
            if name in scope.args and scope.caller is not None:
                return follow(scope.caller, scope.args[name], scope.call_line)
            return None
        if not isinstance(bound, ast.For):
            if plain:  # a size assigned by the user: that line decides it
                return scope.file, bound.lineno
            targets = bound.targets if isinstance(bound, ast.Assign) else [bound.target]
            if len(targets) != 1 or bound.value is None:
                return None
            return follow(scope, bound.value, bound.lineno)
        path = _target_path(bound.target, name)
        if plain or path is None:
            return (scope.file, bound.lineno) if plain else None  # `for n in sizes`: the loop decides n
        items = bound.iter
        if isinstance(items, ast.Call) and getattr(items.func, "id", None) == "enumerate" and items.args:
            if path[:1] != [1]:
                return None
            items, path = items.args[0], path[1:]
        if not isinstance(items, ast.Call):
            return None
        target = _user_function(scope.file, items, bound.lineno)
        if target is None:
            return None
        file, fdef, method = target
        gen = _Scope(file, _bind(items, fdef, method), scope, bound.lineno)
        yielded = []
        for y in _own_nodes(fdef, ast.Yield):
            item = y.value if isinstance(y, ast.Yield) else None
            for i in path:
                item = item.elts[i] if isinstance(item, ast.Tuple) and i < len(item.elts) else None
            if item is None:
                return None
            yielded.append(item)
        return self._agreed(gen, yielded, follow)

    @staticmethod
    def _agreed(scope: _Scope, exprs: list[ast.expr], follow) -> tuple[str, int] | None:
        """The one line all the returned or yielded expressions lead to; None when they disagree."""
        found = {follow(scope, e, e.lineno) for e in exprs}
        return found.pop() if len(found) == 1 else None


def _dim_through_index(index: ast.expr, dim: int) -> int | None:
    """The dimension of the indexed tensor that becomes `dim` of `x[index]`: slices keep a
    dimension, an int removes one; None for anything else (None, ..., tensors, lists)."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    removed = 0
    for i, p in enumerate(parts):
        if i - removed == dim:
            return dim + removed if isinstance(p, ast.Slice) else None
        if isinstance(p, ast.Slice):
            continue
        if isinstance(_literal(p), int):
            removed += 1
            continue
        return None
    return dim + removed  # past the indexed dimensions: kept whole


def _literal(node: ast.expr) -> object:
    """The constant `node` writes (`-1`), or None."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _size_element(call: ast.Call, name: str, dim: int) -> ast.expr | None:
    """The expression a factory call gives as the size of dimension `dim`."""
    size: ast.expr | None = next((k.value for k in call.keywords if k.arg == "size"), None)
    if size is None and call.args:
        if name == "randint":
            size = next((a for a in call.args if isinstance(a, ast.Tuple | ast.List)), None)
        elif isinstance(call.args[0], ast.Tuple | ast.List) or name in ("full", "new_full"):
            size = call.args[0]
    if size is None:
        parts = [] if name in ("full", "new_full", "randint") else list(call.args)
    elif isinstance(size, ast.Tuple | ast.List):
        parts = list(size.elts)
    else:
        return None
    if dim >= len(parts) or any(isinstance(p, ast.Starred) for p in parts[:dim + 1]):
        return None
    return parts[dim]


def _shape_of(expr: ast.expr) -> tuple[ast.expr, int] | None:
    """(tensor, dim) for `t.shape[k]`, `t.size(k)` or `t.size()[k]`."""
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, int):
        base = expr.value
        if isinstance(base, ast.Attribute) and base.attr == "shape":
            return base.value, expr.slice.value
        if isinstance(base, ast.Call) and getattr(base.func, "attr", None) == "size" and not base.args:
            return base.func.value, expr.slice.value  # type: ignore[attr-defined]
    if isinstance(expr, ast.Call) and getattr(expr.func, "attr", None) == "size" and len(expr.args) == 1 \
            and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, int):
        return expr.func.value, expr.args[0].value  # type: ignore[attr-defined]
    return None


def _own_nodes(fdef: ast.AST, *kinds: type) -> list[ast.AST]:
    """The nodes of these kinds in a function's own body, not in functions or lambdas nested in it."""
    return sorted((n for n in walk_own(fdef) if n is not fdef and isinstance(n, kinds)),
                  key=lambda n: getattr(n, "lineno", 0))


def walk_own(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` without descending into nested functions, classes or lambdas (other frames)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        todo += [c for c in ast.iter_child_nodes(n)
                 if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))]


def header_of(stmt: ast.stmt) -> list[ast.AST]:
    """What a statement's own line does: a compound statement's header (a loop's iterable or
    test, an `if`'s test, a `with`'s items), any other statement whole. A call in a loop's body
    belongs to its own line, not to the loop's."""
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, (ast.While, ast.If)):
        return [stmt.test]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return list(stmt.items)
    if isinstance(stmt, (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    return [stmt]


def call_name(call: ast.Call) -> str | None:
    """The called name: `f` of `f(x)`, `m` of `obj.m(x)`."""
    return getattr(call.func, "attr", None) or getattr(call.func, "id", None)


def _binding(file: str, name: str, line: int) -> ast.Assign | ast.AnnAssign | ast.For | None:
    """What last bound `name` on the way to `line` in its function: an assignment, or a `for` that
    holds the line. None when nothing does, or when the last binding before the line is of another
    kind or in a branch that may not have run (unclear)."""
    tree = _tree(file)
    path = enclosing(file, line)
    if tree is None or not path:
        return None
    candidates: list[ast.Assign | ast.AnnAssign | ast.For] = []
    assigned = _assigned_before(tree, file, line, name)
    if assigned is not None and assigned.value is not None:
        candidates.append(assigned)
    candidates += [s for s in path[:-1] if isinstance(s, ast.For) and _target_path(s.target, name) is not None]
    if not candidates:
        return None
    best = max(candidates, key=lambda s: s.lineno)
    scope = ast.Module(body=_scope_body(tree, path), type_ignores=[])
    stores = [n.lineno for n in _own_nodes(scope, ast.Name)
              if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) and n.lineno < line]
    return best if stores and max(stores) == best.lineno else None


def _target_path(target: ast.expr, name: str) -> list[int] | None:
    """Positions leading to `name` in a loop target (`x` -> [], `(i, (x, y))` -> [1, 0] for x)."""
    if isinstance(target, ast.Name):
        return [] if target.id == name else None
    if isinstance(target, ast.Tuple | ast.List):
        for i, t in enumerate(target.elts):
            sub = _target_path(t, name)
            if sub is not None:
                return [i] + sub
    return None


def _user_function(file: str, call: ast.Call, line: int) -> tuple[str, ast.FunctionDef, bool] | None:
    """The function of the user's a call runs: a top-level `def` of `file` or of a module next to
    it imported by name (`from batches import make`), or `self.method` of the class that holds
    `line`; with whether it is a method (its `self` takes no argument)."""
    tree = _tree(file)
    if tree is None:
        return None
    func = call.func
    if isinstance(func, ast.Name):
        found = next((d for d in tree.body if isinstance(d, ast.FunctionDef) and d.name == func.id), None)
        if found is not None:
            return file, found, False
        for imp in tree.body:
            if isinstance(imp, ast.ImportFrom) and imp.module and imp.level <= 1 \
                    and any(a.name == func.id and a.asname is None for a in imp.names):
                other = os.path.join(os.path.dirname(file), *imp.module.split(".")) + ".py"
                t = _tree(other) if os.path.exists(_resolved(other)) else None
                found = next((d for d in t.body if isinstance(d, ast.FunctionDef) and d.name == func.id), None) \
                    if t else None
                return (other, found, False) if found is not None else None
        return None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        for cls in ast.walk(tree):
            if isinstance(cls, ast.ClassDef) and cls.lineno <= line <= (cls.end_lineno or cls.lineno):
                found = next((d for d in cls.body if isinstance(d, ast.FunctionDef) and d.name == func.attr), None)
                if found is not None and not found.decorator_list:
                    return file, found, True
    return None


def _bind(call: ast.Call, fdef: ast.FunctionDef, method: bool) -> dict[str, ast.expr]:
    """The call's argument expressions by the parameter names of `fdef`."""
    params = [a.arg for a in fdef.args.posonlyargs + fdef.args.args][1 if method else 0:]
    out: dict[str, ast.expr] = {}
    for p, a in zip(params, call.args):
        if isinstance(a, ast.Starred):
            break
        out[p] = a
    out.update({k.arg: k.value for k in call.keywords if k.arg in params})
    return out


def mentions(file: str, names: set[str]) -> bool:
    """True when `file` uses any of these names or attribute names (a config set, a call made)."""
    tree = _tree(file)
    return tree is not None and bool(names_in(tree) & names)


def function_at(file: str, line: int) -> str:
    """The name of the innermost function of `file` that holds `line` ("" at module level or unreadable)."""
    tree = _tree(file)
    holding = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.lineno <= line <= (n.end_lineno or n.lineno)] if tree is not None else []
    return max(holding, key=lambda n: n.lineno).name if holding else ""


def calls_backward(file: str, line: int) -> bool:
    """True when the statement at `line` calls `.backward(...)` (or `torch.autograd.backward`)."""
    path = enclosing(file, line)
    return bool(path) and any(isinstance(c, ast.Call) and call_name(c) == "backward" for c in walk_own(path[-1]))


COMPREHENSION_FRAMES = ("<listcomp>", "<genexpr>", "<setcomp>", "<dictcomp>")
"""The frame names of comprehensions (Python <= 3.11 runs each in a frame of its own)."""


def repeats(file: str, line: int, function: str) -> bool:
    """The call at `line` runs once per element: inside a `for`/`while` of its function, or in
    a comprehension (its own frame before Python 3.12, a node of the statement after)."""
    if function.rsplit(".", 1)[-1] in COMPREHENSION_FRAMES or in_loop(file, line):
        return True
    found = enclosing(file, line)
    return bool(found) and any(isinstance(n, COMPREHENSIONS) for n in ast.walk(found[-1]))
