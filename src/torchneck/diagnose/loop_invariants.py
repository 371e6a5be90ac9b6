"""A statement inside a loop that computes the same value on every pass: its inputs are not
changed by the loop, so the work can move before it (hoisting).

`sliding_windows` converting the whole recording to physical units on every window it slices,
a normalisation of a constant table inside the batch loop: the op is the program's own math, but
all passes after the first redo it. And its cousin, a window the loop keeps (a deque it appends
to) stacked whole again on every pass to be reduced, where one element enters and one leaves.
"""

from __future__ import annotations

import ast

from .source import LOOPS, _tree, _user_function, call_name, enclosing, walk_own

PASS_VARYING_CALLS = frozenset({
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal", "normal_",
    "uniform", "uniform_", "bernoulli", "multinomial", "random", "choice", "shuffle", "permutation",
    "next", "read", "readline", "readlines", "recv", "get", "get_nowait", "pop", "popleft", "input", "load",
    "time", "perf_counter", "monotonic", "now", "item", "tolist", "numpy", "clone", "copy", "deepcopy",
})
"""Calls whose result may differ from one pass to the next with the same arguments (random draws,
reads from a stream or a queue, clocks), or that make a copy the loop may then change in place."""


def invariant_statement(file: str, line: int) -> bool:
    """Whether the assignment at `line` sits in a loop and computes, on every pass, a value from
    names the loop never rebinds, with no call that may answer differently per pass; and the loop
    then reads the assigned name in a statement that does vary per pass (the loop is not a
    benchmark repeating the statement on purpose) and never changes it in place. False when
    unclear or the source is unreadable."""
    path = enclosing(file, line)
    if len(path) < 2 or not isinstance(path[-1], ast.Assign):
        return False
    stmt = path[-1]
    loop = next((s for s in reversed(path[:-1]) if isinstance(s, LOOPS)), None)
    if loop is None or not any(isinstance(n, (ast.Call, ast.BinOp)) for n in ast.walk(stmt.value)):
        return False
    targets = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if len(targets) != len(stmt.targets):
        return False  # an attribute or a subscript written: state, not a local value
    bound = _rebound(loop)
    read = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)}
    if read & bound or read & set(targets):
        return False
    if any(isinstance(n, ast.Call) and call_name(n) in PASS_VARYING_CALLS for n in ast.walk(stmt.value)):
        return False
    if any(isinstance(n, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)) for n in ast.walk(stmt.value)):
        return False
    if any(isinstance(n, ast.Call) and changes_its_arguments(file, n, line) for n in ast.walk(stmt.value)):
        return False  # `loss = train_epoch(model, data, optimizer)`: the same names, a new model every pass
    users = [s for s in ast.walk(loop) if isinstance(s, ast.stmt) and s is not stmt and s is not loop
             and {n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} & set(targets)]
    if not any({n.id for n in ast.walk(s) if isinstance(n, ast.Name)} & (bound - set(targets)) for s in users):
        return False
    return not _changed_in_place(loop, set(targets) | read, stmt)


STATE_STEPPING_CALLS = frozenset({"backward", "step", "zero_grad"})
"""Calls that move a training state forward: a function making them is a training step."""


def changes_its_arguments(file: str, call: ast.Call, line: int) -> bool:
    """The user's function that `call` runs changes what it is given: it steps a training state
    (`backward`, an optimizer's `step`) or changes a parameter in place (an in-place op, a
    container's append, a write through it). Called again with the same names, it answers
    differently."""
    found = _user_function(file, call, line)
    if found is None:
        return False
    fdef = found[1]
    if any(isinstance(n, ast.Call) and call_name(n) in STATE_STEPPING_CALLS for n in walk_own(fdef)):
        return True
    return _changed_in_place(fdef, {a.arg for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs},
                             None)  # its object (`self`) too


def _rebound(loop: ast.stmt) -> set[str]:
    """Names the loop binds or assigns anywhere in its body (its target, assignments, `with ... as`)."""
    out: set[str] = set()
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        out |= {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    out |= {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    return out


CONTAINER_MUTATORS = frozenset({"append", "appendleft", "extend", "extendleft", "insert", "pop", "popleft",
                                "popitem", "remove", "clear", "update", "add", "discard", "setdefault", "sort",
                                "reverse", "rotate", "put", "put_nowait"})
"""Methods changing a list, deque, dict, set or queue in place: a sliding window's `history.append`."""


def _changed_in_place(loop: ast.AST, names: set[str], stmt: ast.stmt | None) -> bool:
    """A name augmented (`x += 1`), written through (`x[i] = v`) or changed by an in-place
    method (`x.add_(...)`, a container's `history.append(frame)`) inside the loop."""
    for node in ast.walk(loop):
        if node is stmt:
            continue
        if isinstance(node, ast.AugAssign) and _root(node.target) in names:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, (ast.Subscript, ast.Attribute)) and _root(t) in names for t in targets):
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _root(node.func.value) in names \
                and ((node.func.attr.endswith("_") and not node.func.attr.startswith("_"))
                     or node.func.attr in CONTAINER_MUTATORS):
            return True
    return False


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def reads_recomputed(file: str, line: int, other: int) -> bool:
    """Whether `other` is a statement of the loop around the recomputed assignment at `line` that
    reads the name it assigns, or a name the loop assigns from it (`x = phys[:, s:s + n]` after
    `phys = ...`, then `yield x`): it holds a view or a use of the value, and the previous pass's
    copy is released around it, time the recomputation costs outside its ops."""
    path = enclosing(file, line)
    if len(path) < 2 or not isinstance(path[-1], ast.Assign):
        return False
    loop = next((s for s in reversed(path[:-1]) if isinstance(s, LOOPS)), None)
    if loop is None or not loop.lineno <= other <= (loop.end_lineno or loop.lineno) or other == line:
        return False
    names = {t.id for t in path[-1].targets if isinstance(t, ast.Name)}
    for node in ast.walk(loop):  # and the names the loop assigns from it (views, slices: `x = phys[...]`)
        if isinstance(node, ast.Assign) and node is not path[-1] and _loads(node.value) & names:
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    stmt = enclosing(file, other)
    return bool(stmt) and bool(_loads(stmt[-1]) & names)


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def invariant_parameters(file: str, line: int, function: str) -> frozenset[str]:
    """Parameters of `function` to which the call at `line` passes the same value on every pass
    of the loops around it: an argument reading no name those loops bind or assign, and made by
    no call (`log_mel(wave, device)` in `for wave in batches`: `device`, not `wave`). Matched by
    position and keyword; empty when unclear or unreadable."""
    path = enclosing(file, line)
    tree = _tree(file)
    if not path or tree is None:
        return frozenset()
    bound: set[str] = set()
    for loop in (s for s in path[:-1] if isinstance(s, LOOPS)):
        bound |= _rebound(loop)
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    calls = [c for c in walk_own(path[-1]) if isinstance(c, ast.Call) and call_name(c) == function]
    if len(defs) != 1 or len(calls) != 1:
        return frozenset()
    params = [a.arg for a in [*defs[0].args.posonlyargs, *defs[0].args.args]]
    if params and params[0] in ("self", "cls") and isinstance(calls[0].func, ast.Attribute):
        params = params[1:]
    given = [*zip(params, calls[0].args), *((k.arg, k.value) for k in calls[0].keywords if k.arg)]
    return frozenset(name for name, value in given
                     if not any(isinstance(n, ast.Call) for n in ast.walk(value)) and not _loads(value) & bound)


WINDOW_STACKS = frozenset({"stack", "cat", "concat", "concatenate", "vstack", "hstack"})
WINDOW_FEEDS = frozenset({"append", "appendleft", "extend", "extendleft"})


def restacks_window(file: str, line: int) -> str | None:
    """The container the statement at `line` stacks whole and reduces (`torch.stack(tuple(history))
    .sum(0)`, `torch.cat(list(buf)).mean(0)`) when the loop around it appends to that container:
    every pass redoes the whole window's reduction, where a running one adds the element that
    enters (and subtracts the one that leaves). Its name, or None when not so or unreadable."""
    path = enclosing(file, line)
    loop = next((s for s in reversed(path[:-1]) if isinstance(s, LOOPS)), None) if path else None
    if loop is None:
        return None
    for node in walk_own(path[-1]):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("sum", "mean")):
            continue
        inner = node.func.value
        while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) \
                and inner.func.attr in ("to", "float", "double", "int", "long", "type"):
            inner = inner.func.value  # a dtype change between the stack and its sum
        if not (isinstance(inner, ast.Call) and call_name(inner) in WINDOW_STACKS and inner.args):
            continue
        held = inner.args[0]
        if isinstance(held, ast.Call) and call_name(held) in ("tuple", "list") and held.args:
            held = held.args[0]
        name = ast.unparse(held) if isinstance(held, (ast.Name, ast.Attribute)) else None
        if name and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in WINDOW_FEEDS
                        and ast.unparse(n.func.value) == name for n in ast.walk(loop)):
            return name
    return None
