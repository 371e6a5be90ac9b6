"""Batches padded to a fixed length, read from the user's source: the lines that choose the length
a collate function or tokenizer pads every batch to (a literal, a module constant, a setting of
that value: a keyword argument, a parameter's or an option's default, a config class's field),
and the calls asking a tokenizer to pad to `max_length`. Each answers from the source alone:
collating may run in DataLoader workers, where neither the trace nor the sampler sees it; [] when
none or unreadable."""

from __future__ import annotations

import ast
import re

from .source import FACTORY_CALLS, _own_nodes, _scope_body, _tree, call_name, enclosing, walk_own

PADDING_FACTORIES = FACTORY_CALLS | {"new_full", "new_zeros", "new_ones", "new_empty", "pad"}
"""Calls that make a padded batch: a buffer of (batch, length) filled with the pad value, or
`F.pad` / `np.pad` widening each sequence."""
NEEDED_LENGTH_CALLS = frozenset({"max", "len", "size", "amax"})
"""An assignment computing the length from the data (`max(len(s) for s in batch)`): already
the batch's longest, not the line to change."""


def padding_length_lines(file: str, line: int) -> list[int]:
    """For a line that makes a padded batch (`torch.full((n, pad_len), PAD)`, `torch.zeros(len(b),
    L)`, `F.pad(x, (0, MAX - n))`): the assignments in its function of the names its size uses
    that set a fixed length (`pad_len = MAX_LEN if pad_to_max else longest`, `L = MAX_LEN`), not
    those computing it from the data, and the line itself when its size names a constant
    (`MAX_LEN`); [] when the line makes no such call or is unreadable."""
    tree = _tree(file)
    path = enclosing(file, line)
    if tree is None or not path or path[-1].lineno != line:
        return []
    calls = [c for c in walk_own(path[-1]) if isinstance(c, ast.Call) and call_name(c) in PADDING_FACTORIES]
    names: set[str] = set()
    out = []
    for call in calls:
        name = call_name(call) or ""  # F.pad(x, widths); torch.full(size, value); x.new_zeros(size)
        sizes = call.args[1:2] if name == "pad" else call.args[:1] if name == "full" or name.startswith("new_") \
            else call.args
        for size in sizes[:4]:
            measured = {id(n) for c in ast.walk(size) if isinstance(c, ast.Call) and call_name(c) in NEEDED_LENGTH_CALLS
                        for n in ast.walk(c)}  # `len(seqs)`: the batch measured, not a length chosen
            names |= {n.id for n in ast.walk(size) if isinstance(n, ast.Name) and id(n) not in measured}
            if any(isinstance(n, ast.Name) and n.id.isupper() and len(n.id) > 1 for n in ast.walk(size)) \
                    and line not in out:
                out.append(line)  # the fixed length named at the call (`torch.zeros(len(b), MAX_LEN)`)
    for stmt in _own_nodes(ast.Module(body=_scope_body(tree, path), type_ignores=[]), ast.Assign, ast.AnnAssign):
        assert isinstance(stmt, (ast.Assign, ast.AnnAssign))
        if stmt.lineno >= line or stmt.value is None:
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if not any(isinstance(t, ast.Name) and t.id in names for t in targets):
            continue
        value = stmt.value
        if isinstance(value, ast.IfExp) or not any(call_name(c) in NEEDED_LENGTH_CALLS
                                                    for c in ast.walk(value) if isinstance(c, ast.Call)):
            out.append(stmt.lineno)
    return out


def fixed_length_lines(file: str, length: int) -> list[int]:
    """The lines of `file` that pad a batch to `length` set by the program: a call making a padded
    buffer whose size, or the assignment of a name in it (`padding_length_lines`), uses `length`
    as a literal or a module-level constant of that value (`MAX_LEN = 256`), the assignment first;
    [] when none or unreadable. Read from the source alone: the collate function may run in
    DataLoader workers, or between two samples, where neither the trace nor the sampler sees it."""
    tree = _tree(file)
    if tree is None:
        return []
    constants = {t.id for stmt in tree.body if isinstance(stmt, ast.Assign)
                 and isinstance(stmt.value, ast.Constant) and stmt.value.value == length
                 and not isinstance(stmt.value.value, bool) for t in stmt.targets if isinstance(t, ast.Name)}
    statements = {n.lineno: n for n in ast.walk(tree) if isinstance(n, ast.stmt)}
    settings = _settings_of_value(tree, length)

    def sets_length(line: int) -> bool:
        stmt = statements.get(line)
        return stmt is not None and any(
            (isinstance(n, ast.Name) and n.id in constants | settings)
            or (isinstance(n, ast.Attribute) and n.attr in settings)
            or (isinstance(n, ast.Constant) and n.value == length and not isinstance(n.value, bool))
            for n in ast.walk(stmt))

    out: list[int] = []
    for call in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call) and call_name(n) in PADDING_FACTORIES),
                       key=lambda c: c.lineno):
        chosen = [ln for ln in padding_length_lines(file, call.lineno) if sets_length(ln)]
        if not chosen and sets_length(call.lineno):
            chosen = [call.lineno]
        for ln in [*chosen, call.lineno] if chosen else []:
            if ln not in out:
                out.append(ln)
    return out


def _settings_of_value(tree: ast.Module, value: int) -> set[str]:
    """Names the program gives `value` as a setting: a keyword argument (`Server(max_len=256)`), a
    parameter's default (`def __init__(self, max_len=256)`), a command-line option's default
    (`add_argument("--max-len", default=256)`, read as `args.max_len`), a config class's field
    (`max_length: int = 256` in a dataclass, read as `args.max_length`), given as a literal or a
    module-level constant of that value (`max_len=MAX_LEN`). A line using one of them as a name or
    an attribute (`width = self.max_len`) sets that value."""
    constants = {t.id for stmt in tree.body if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
                 and stmt.value.value == value and not isinstance(stmt.value.value, bool)
                 for t in stmt.targets if isinstance(t, ast.Name)}

    def is_value(node: ast.expr | None) -> bool:
        return (isinstance(node, ast.Constant) and node.value == value and not isinstance(node.value, bool)) \
            or (isinstance(node, ast.Name) and node.id in constants)

    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            if call_name(node) == "add_argument" and is_value(default):
                out |= {a.value.lstrip("-").replace("-", "_") for a in node.args
                        if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")}
            out |= {k.arg for k in node.keywords if k.arg and k.arg != "default" and is_value(k.value)}
        elif isinstance(node, ast.ClassDef):
            out |= {f.target.id for f in node.body if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)
                    and is_value(f.value)}
            out |= {t.id for f in node.body if isinstance(f, ast.Assign) and is_value(f.value)
                    for t in f.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            out |= {a.arg for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults)
                    if is_value(d)}
            out |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if is_value(d)}
    return {name for name in out if LENGTH_SETTING.search(name) and "batch" not in name}


LENGTH_SETTING = re.compile(r"len|length|pad|seq|block|width|tokens|context|positions", re.IGNORECASE)
"""Names of settings that are lengths (`max_len`, `seq_length`, `pad_to`, `block_size`): a setting
of another kind that happens to have the same value (`batch_size=64`) sets no padded length."""


def pads_to_max_length(file: str) -> list[int]:
    """Lines of `file` asking a tokenizer or collator to pad every batch to a fixed length:
    `padding="max_length"` (or a choice that may give it, there or in the name it passes:
    `padding = "longest" if fast else "max_length"`, then `padding=padding`),
    `pad_to_max_length=True`, `PaddingStrategy.MAX_LENGTH`; [] when none or unreadable."""
    tree = _tree(file)
    if tree is None:
        return []

    def asks_max_length(value: ast.AST) -> bool:  # a branch of a choice too
        return any(isinstance(n, ast.Constant) and n.value == "max_length" for n in ast.walk(value))

    chosen = {t.id: n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assign) and asks_max_length(n.value)
              for t in n.targets if isinstance(t, ast.Name)}
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword):
            value = node.value
            if node.arg == "padding" and asks_max_length(value):
                out.add(value.lineno)
            elif node.arg == "padding" and isinstance(value, ast.Name) and value.id in chosen:
                out.add(chosen[value.id])
            elif node.arg == "pad_to_max_length" and not (isinstance(value, ast.Constant) and not value.value):
                out.add(value.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "MAX_LENGTH" \
                and ast.unparse(node.value).endswith("PaddingStrategy"):
            out.add(node.lineno)
    return sorted(out)
