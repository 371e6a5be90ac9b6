"""The user's source around a line, for rules that know where time went but must name the line to
change: the `with` that sets the grad mode around a model call, the loop that holds it.

Read at diagnosis time from the files the run names (relative names from the directory the
report is made in); a file that cannot be read or parsed answers nothing, and the rule keeps the
line it had.
"""

from __future__ import annotations

import ast
import functools
import linecache


@functools.lru_cache(maxsize=128)
def _tree(file: str) -> ast.Module | None:
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
    name = calls[0].args[0].id
    path = enclosing(file, line)
    blocks: list[list[ast.stmt]] = [_scope_body(tree, path)]
    for stmt in path[:-1]:
        blocks += [b for b in (getattr(stmt, k, []) for k in ("body", "orelse", "finalbody"))
                   if any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in b)]
    best = None
    for block in blocks:
        for s in block:
            if s.lineno < line and isinstance(s, (ast.Assign, ast.AnnAssign)) and any(
                    isinstance(t, ast.Name) and t.id == name
                    for t in (s.targets if isinstance(s, ast.Assign) else [s.target])):
                best = max(best or 0, s.lineno)
    return best


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
