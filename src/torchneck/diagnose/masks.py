"""A group-by done with masks, read from the user's source: `mask = key == k` inside a loop over the
groups, then `x[mask]`. Each pass compares and scans every row of the table for one group, so
the loop costs groups x rows; grouping once (sort + split, index_add_, scatter_reduce, bincount)
costs one pass.

Answers None (silent) whenever the source is unreadable or the pattern is not plainly there.
"""

from __future__ import annotations

import ast

from ..model.findings import Where
from .source import call_name, enclosing, names_in, walk_own

COMPARISON_CALLS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isin", "equal"})
"""Calls that compare elementwise and give a boolean mask (`labels.eq(c)`, `torch.isin(x, ks)`)."""
SELECTING_CALLS = frozenset({"masked_select", "nonzero", "argwhere", "where"})
"""Calls that select with a boolean mask passed to them (`torch.where(m)` with one argument)."""


def mask_group_by(file: str, line: int, follow: bool = True) -> tuple[int, int] | None:
    """(the line building a per-group boolean mask, the line selecting with it) inside a `for`
    loop of one function, when `line` is either: `mask = customer == cid` (the loop variable, or
    a name derived from it in the loop body, compared with a table the loop does not change)
    assigned in the loop body, then `amount[mask]` (or `masked_select(mask)`, `nonzero`...) on a
    tensor the loop does not change; both `line` when the comparison is written in the selection
    (`x[labels == c]`). None otherwise. `follow`: look past the mask's own line for its
    selection (off for that look itself: one level)."""
    path = enclosing(file, line)
    if not path:
        return None
    stmt = path[-1]
    loop = next((s for s in reversed(path) if isinstance(s, (ast.For, ast.AsyncFor)) and s.lineno != line), None)
    if loop is None:
        return None
    per_pass, changing = _loop_names(loop, line), _assigned_in(loop)
    for selected, mask in _selections(stmt, line):
        if selected is not None and not _invariant(selected, changing):
            continue  # selecting from this pass's data (a batch), not from one table again and again
        if isinstance(mask, ast.Name):
            made = _last_assignment(loop, mask.id, line)
            if made is not None and _compares(made.value, per_pass, changing):
                return made.lineno, line
        elif _compares(mask, per_pass, changing):
            return line, line
    if follow and isinstance(stmt, ast.Assign) and stmt.lineno == line and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], ast.Name):  # the mask's own line: the selection comes after it
        later = sorted({n.lineno for n in walk_own(loop) if isinstance(n, ast.stmt) and n.lineno > line})
        for at in later:
            if mask_group_by(file, at, follow=False) == (line, at):
                return line, at
    return None


def _selections(stmt: ast.stmt, line: int) -> list[tuple[ast.expr | None, ast.expr]]:
    """(the tensor selected from, None when the call takes only the mask; the mask) of each
    selection the statement makes on `line`: subscripts (`x[m]`, `x[m, :]`) and selecting calls
    (`x.masked_select(m)`, `torch.masked_select(x, m)`, `m.nonzero()`, `torch.where(m)`)."""
    out: list[tuple[ast.expr | None, ast.expr]] = []
    for n in walk_own(stmt):
        if getattr(n, "lineno", line) != line:
            continue
        if isinstance(n, ast.Subscript):
            index = n.slice
            out += [(n.value, i) for i in (index.elts if isinstance(index, ast.Tuple) else [index])]
        elif isinstance(n, ast.Call) and call_name(n) in SELECTING_CALLS:
            receiver = n.func.value if isinstance(n.func, ast.Attribute) and not _is_module(n.func.value) else None
            args = ([receiver] if receiver is not None else []) + list(n.args)
            if call_name(n) == "where" and len(args) != 1:
                continue  # torch.where(c, a, b) chooses, it does not select
            if args:
                out.append((args[0] if len(args) > 1 else None, args[-1]))
    return out


def _loop_names(loop: ast.For | ast.AsyncFor, line: int) -> set[str]:
    """The loop's variables, and the names its body assigns from them before `line` (`cid =
    ids[i]`): what changes from one pass to the next."""
    names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    assigns = [n for n in walk_own(loop) if isinstance(n, ast.Assign) and n.lineno < line and n is not loop]
    grew = True
    while grew:
        grew = False
        for a in assigns:
            if names_in(a.value) & names:
                new = {t.id for tgt in a.targets for t in ast.walk(tgt) if isinstance(t, ast.Name)} - names
                if new:
                    names |= new
                    grew = True
    return names


def _assigned_in(loop: ast.For | ast.AsyncFor) -> set[str]:
    """Every name the loop (re)binds: its variables and whatever its body assigns."""
    out: set[str] = set()
    for n in walk_own(loop):
        targets: list[ast.expr] = []
        if isinstance(n, ast.Assign):
            targets = list(n.targets)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
            targets = [n.target]
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            targets = [n.optional_vars]
        out |= {t.id for tgt in targets for t in ast.walk(tgt) if isinstance(t, ast.Name)}
    return out


def _invariant(expr: ast.expr, changing: set[str]) -> bool:
    """Whether `expr` reads only names the loop does not rebind (the same table every pass)."""
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    return bool(names) and not names & changing


def _last_assignment(loop: ast.For | ast.AsyncFor, name: str, line: int) -> ast.Assign | None:
    """The last `name = ...` of the loop's body before `line` (nested blocks included, nested
    functions not)."""
    best: ast.Assign | None = None
    for stmt in loop.body:
        for n in walk_own(stmt):
            if isinstance(n, ast.Assign) and n.lineno < line and any(
                    isinstance(t, ast.Name) and t.id == name for t in n.targets):
                if best is None or n.lineno > best.lineno:
                    best = n
    return best


def _compares(expr: ast.expr, per_pass: set[str], changing: set[str]) -> bool:
    """Whether `expr` compares a table the loop does not change with a key that changes every
    pass (`key == k`, `key.eq(k)`, `torch.eq(key, k)`, `(key == k) & valid`)."""
    for n in ast.walk(expr):
        sides: list[ast.expr] = []
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            sides = [n.left, *n.comparators]
        elif isinstance(n, ast.Call) and call_name(n) in COMPARISON_CALLS:
            receiver = n.func.value if isinstance(n.func, ast.Attribute) and not _is_module(n.func.value) else None
            sides = ([receiver] if receiver is not None else []) + list(n.args)
        if len(sides) == 2 and any(_invariant(s, changing) for s in sides) and \
                any(_names(s) & per_pass for s in sides):
            return True
    return False


def _names(expr: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def _is_module(node: ast.expr) -> bool:
    """`torch` or `np` in `torch.nonzero(m)`: the mask is the argument, not the receiver."""
    return isinstance(node, ast.Name) and node.id in ("torch", "np", "numpy")


def mask_loop_us(ops_by_line: list[dict], mask: Where, hot: Where, mask_ops: frozenset[str]) -> float:
    """Self time of the ops building a per-group mask (on its line) and of the mask ops selecting
    with it (`mask_ops`, on the selecting line): what grouping once removes."""
    total = 0.0
    for e in ops_by_line:
        at = (e.get("file"), e.get("line"))
        if at == (mask.file, mask.line) or (at == (hot.file, hot.line) and e["op"] in mask_ops):
            total += e["self_us"]
    return total
