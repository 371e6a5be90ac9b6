"""Row gathers and scatters given an index copied across the columns: `x.gather(0,
idx.unsqueeze(-1).repeat(1, F))`, `out.scatter_add_(0, idx[:, None].expand(-1, F).contiguous(),
src)`. The [E, F] int64 index is written on every call, then read beside the values (twice
their bytes): `index_select(0, idx)` / `index_add_(0, idx, src)` take the one row index, and an
`.expand` view at least writes nothing."""

from __future__ import annotations

import ast

from .source import _assigned_before, _tree, _user_function, call_name, enclosing, walk_own

ROW_OPS = frozenset({"gather", "scatter_add", "scatter_add_", "scatter", "scatter_", "scatter_reduce",
                     "scatter_reduce_"})
"""Calls taking a full-shape index along a dimension."""


def _copies_across(expr: ast.AST) -> bool:
    """`expr` copies a tensor across a new dimension: `.repeat(...)`, or an `.expand(...)` made
    contiguous."""
    calls = [n for n in ast.walk(expr) if isinstance(n, ast.Call)]
    names = {call_name(c) for c in calls}
    return "repeat" in names or ("expand" in names and "contiguous" in names)


def repeated_index(file: str, line: int) -> int | None:
    """The line writing the copied index a row gather or scatter at `line` is given (this line,
    the line assigning its name, or the `return` of the user's helper making it); None when the
    index is not made so, or the source is unreadable."""
    path, tree = enclosing(file, line), _tree(file)
    if not path or tree is None:
        return None
    for call in walk_own(path[-1]):
        if not (isinstance(call, ast.Call) and call_name(call) in ROW_OPS and len(call.args) >= 2):
            continue
        functional = isinstance(call.func, ast.Name) or (isinstance(call.func, ast.Attribute) and isinstance(
            call.func.value, ast.Name) and call.func.value.id == "torch")  # torch.gather(x, 0, index)
        index = (call.args[2] if len(call.args) > 2 else None) if functional else call.args[1]
        if index is None:
            continue
        if _copies_across(index):
            return index.lineno
        if isinstance(index, ast.Call) and (found := _user_function(file, index, line)) is not None:
            helper_file, fdef, _ = found
            returns = [r for r in walk_own(fdef) if isinstance(r, ast.Return)]
            copied = next((r for r in returns if r.value is not None and _copies_across(r.value)), None)
            if copied is not None and helper_file == file:
                return copied.lineno
        if isinstance(index, ast.Name):
            assigned = _assigned_before(tree, file, line, index.id)
            if assigned is not None and assigned.value is not None and _copies_across(assigned.value):
                return assigned.lineno
    return None
