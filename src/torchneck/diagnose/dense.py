"""Where a dense matrix the model multiplies was built, read from the source: the line a finding
about a mostly-zero matrix (a graph's adjacency, an interaction or mask matrix) points at, which
is where it should be made sparse, not where it is multiplied."""

from __future__ import annotations

import ast

from ..model.findings import Where
from .facts import Facts, where_of
from .source import _tree, _user_function, call_name, densified_at, enclosing, walk_own

DENSE_FACTORIES = frozenset({"zeros", "ones", "full", "empty", "eye", "to_dense"})
"""Calls that make a dense tensor a helper then fills (`adj = torch.zeros(n, n)`)."""


def dense_built_in(file: str, line: int) -> tuple[str, int] | None:
    """For `adj = helper(...)` at `line`, where `helper` (a function of `file` or of a module next
    to it) makes the dense tensor it returns: its file and the line of the first dense factory call
    of two or more dimensions (or `.to_dense()`) in its body. None when there is none."""
    path = enclosing(file, line)
    if not path or not isinstance(path[-1], (ast.Assign, ast.AnnAssign)) or path[-1].value is None:
        return None
    return _built_by_helper(file, path[-1].value, line)


def buffer_built_at(file: str, name: str) -> tuple[str, int] | None:
    """Where a module's tensor attribute `name` (a buffer, `self.adj = ...`) is set in `file`: the
    dense factory line inside the helper that builds it when a helper does (`register_buffer("adj",
    build_adjacency(...))`), else the setting statement's line. None when `file` sets no such
    attribute or is unreadable."""
    tree = _tree(file)
    if tree is None:
        return None
    for node in ast.walk(tree):
        value: ast.expr | None = None
        if isinstance(node, ast.Call) and call_name(node) == "register_buffer" and len(node.args) >= 2 \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == name:
            value = node.args[1]
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == name
                                                  for t in node.targets):
            value = node.value
        if value is not None:
            line = value.lineno
            return _built_by_helper(file, value, line) or (file, line)
    return None


def _built_by_helper(file: str, value: ast.expr, line: int) -> tuple[str, int] | None:
    """For a value `helper(...)`, where `helper` is the user's: the first dense factory call of two
    or more dimensions (or `.to_dense()`) in its body."""
    if not isinstance(value, ast.Call):
        return None
    found = _user_function(file, value, line)
    if found is None:
        return None
    where, fdef, _ = found
    for call in sorted((n for n in walk_own(fdef) if isinstance(n, ast.Call) and call_name(n) in DENSE_FACTORIES),
                       key=lambda c: c.lineno):
        size = call.args[0] if len(call.args) == 1 and isinstance(call.args[0], (ast.Tuple, ast.List)) else None
        if call_name(call) == "to_dense" or (size is not None and len(size.elts) >= 2) \
                or len([a for a in call.args if not isinstance(a, ast.Starred)]) >= 2:
            return where, call.lineno
    return None


def densified_operand(facts: Facts, where: list[Where]) -> Where | None:
    """The line that made an operand of a product dense from a sparse tensor (`.to_dense()`), read
    from the lines that run it (`where`) and the lines up their sampled call paths; None when none did."""
    callers = {(ln["file"], ln["line"]): ln.get("callers") or []
               for ln in ((facts.python or {}).get("window") or {}).get("lines", [])}
    for w in where:
        for frame in [w, *where_of(callers.get((w.file, w.line), []))]:
            line = densified_at(frame.file, frame.line)
            if line is not None:
                return Where(file=frame.file, line=line, function=frame.function)
    return None
