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


def _tree(file: str) -> ast.Module | None:
    base = _BASE.get()
    if base and not os.path.isabs(file) and os.path.isfile(os.path.join(base, file)):
        file = os.path.join(base, file)
    return _parsed(file)


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
             and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) == function]
    if not calls or not isinstance(calls[0].args[0], ast.Name):
        return None
    found = _assigned_before(tree, file, line, calls[0].args[0].id)
    return found.lineno if found is not None else None


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
    if not path:
        return tree.body
    first = path[0]
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(body, list) and first in body:
            return body
    return tree.body


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
        name = getattr(call.func, "attr", None) or getattr(call.func, "id", None)
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
