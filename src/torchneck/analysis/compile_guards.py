"""torch.compile's guards in the user's words.

Dynamo names what it checks by where it found it: `L['x']` (a local of the compiled frame),
`G['name']` (a global), `L['self']._modules['fc']._parameters['weight']` (a module's
parameter), `___stack0` (a value on Python's stack when the graph broke, passed to the resume
function that continues after the break). This module turns those names, the guard kinds
(`TENSOR_MATCH`, `EQUALS_MATCH`, `TYPE_MATCH`, `ID_MATCH`, size guards...) and the failures
dynamo reports on a recompile into what a user can act on: the expression in their code, the
function and line it belongs to, and the change that stops the recompilation, with config
names as the running torch version spells them.
"""

from __future__ import annotations

import ast
import linecache
import re
from dataclasses import dataclass, field

RECOMPILE_LIMIT_SINCE = (2, 7)
"""torch 2.7 renamed `torch._dynamo.config.cache_size_limit` to `recompile_limit` (the old name
stays an alias); 2.4-2.6 know only `cache_size_limit`."""

_LOCAL = re.compile(r"L\['([^']+)'\]")
_GLOBAL_IMPORT = re.compile(r"G\['__import_([A-Za-z0-9_]+?)'\]")
_GLOBAL = re.compile(r"G\['([^']+)'\]")
_MODULE_ITEM = re.compile(r"\.(?:_modules|_parameters|_buffers)\['([^']+)'\]")
_STACK = re.compile(r"\b___stack(\d+)\b")
_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
_TENSOR = re.compile(r"^check_tensor\((.+?), (\w+), DispatchKeySet\([^)]*\), ([\w.]+), device=(\w+), "
                     r"requires_grad=(\w+), size=\[([^\]]*)\], stride=\[([^\]]*)\]\)")
_TYPE_ID = re.compile(r"^___check_type_id\((.+), \d+\)(?:, type=<class '([^']+)'>)?")
_OBJ_ID = re.compile(r"^___check_obj_id\((.+), \d+\)(?:, type=<class '([^']+)'>)?")
_DICT_CONTAINS = re.compile(r"^(not )?___dict_contains\('([^']+)', (.+?)(?:\.__dict__)?\)$")
_SIZE = re.compile(r"^tensor '(.+)' (size|stride) mismatch at index (\d+)\. expected (\S+), actual (\S+)")
_TENSOR_PROP = re.compile(r"^tensor '(.+)' (dtype|device|requires_grad|dispatch key set|rank) mismatch\.?\s*(.*)$")
_EQUALS = re.compile(r"^(.+?) == (.+)$")
_HIDDEN_KINDS = {"DIMENSION_DYNAMIC_MARKING_GUARD"}
"""Guards that only confirm the user marked no dimension dynamic: five per tensor, no news."""
_AMBIENT_KINDS = {"GLOBAL_STATE", "TORCH_FUNCTION_MODE_STACK", "DEFAULT_DEVICE", "GRAD_MODE",
                  "DETERMINISTIC_ALGORITHMS", "TORCH_FUNCTION_STATE"}
"""Guards on process-wide state (grad mode, autocast, default device...), not on the user's values."""


def torch_version_tuple(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def recompile_limit_name(torch_version: str | None) -> str:
    """The config that bounds recompilations, as the run's torch spells it (newest if unknown)."""
    v = torch_version_tuple(torch_version)
    return "cache_size_limit" if v is not None and v < RECOMPILE_LIMIT_SINCE else "recompile_limit"


@dataclass
class FrameContext:
    """What is known about the compiled frame a guard belongs to."""

    function: str = ""
    file: str = ""
    line: int = 0
    resumes_after_line: int | None = None  # the frame is a resume function after a break there
    break_code: str = ""  # the source line of that break
    stack_vars: int | None = None  # how many ___stackN values the resume function receives
    top_stored_in: str | None = None  # the variable the top one is stored in, right after the break
    args: list[str] = field(default_factory=list)  # the user function's parameter names

    @property
    def where(self) -> str:
        base = self.file.rsplit("/", 1)[-1]
        return f"{base}:{self.line}" if base else ""


def function_args(file: str, line: int, name: str) -> list[str]:
    """Parameter names of the user's function `name` defined at `line` of `file` (its `def` or
    first decorator line); [] when the source is not readable."""
    source = "".join(linecache.getlines(file))
    if not source:
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            lines = [node.lineno] + [d.lineno for d in node.decorator_list]
            if line in lines or not line:
                a = node.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
                return names
    return []


def frame_context(function: str, file: str, line: int, resume: dict | None = None,
                  break_code: str = "") -> FrameContext:
    """A FrameContext for a compiled frame named `function` (a resume function's name says
    which function and line it continues)."""
    m = _RESUME.match(function or "")
    ctx = FrameContext(function=m.group(1) if m else function, file=file, line=line)
    if m:
        ctx.resumes_after_line = int(m.group(2))
        ctx.break_code = break_code.split("  #", 1)[0].strip()
        if resume:
            ctx.stack_vars = resume.get("stack_vars")
            ctx.top_stored_in = resume.get("top_stored_in")
    elif file:
        ctx.args = function_args(file, line, function)
    return ctx


def _stack_words(n: int, ctx: FrameContext) -> str:
    """`___stackN` as the user would name it."""
    at = f"line {ctx.resumes_after_line}" if ctx.resumes_after_line else "a graph break"
    code = f" (`{ctx.break_code}`)" if ctx.break_code else ""
    top = ctx.stack_vars is not None and n == ctx.stack_vars - 1
    if top and ctx.top_stored_in:
        return f"`{ctx.top_stored_in}`, the value computed where the graph broke at {at}{code}"
    if top:
        return f"the value returned where the graph broke at {at}{code}"
    return f"a value of the expression being evaluated when the graph broke at {at}{code}"


def source_in_words(source: str, ctx: FrameContext | None = None) -> str:
    """`L['self']._modules['fc']._parameters['weight']` -> `self.fc.weight`; `G['__import_torch_dot_nn']`
    -> `torch.nn`; `L['x']` -> `x`. `___stackN` stays (see `subject_in_words`)."""
    s = _GLOBAL_IMPORT.sub(lambda m: m.group(1).replace("_dot_", "."), source)
    s = _GLOBAL.sub(lambda m: m.group(1), s)
    s = _LOCAL.sub(lambda m: m.group(1), s)
    s = _MODULE_ITEM.sub(lambda m: "." + m.group(1), s)
    return s.replace(".__dict__", "")


def subject_in_words(source: str, ctx: FrameContext | None = None) -> str:
    """The guarded value as the user knows it: a parameter of their function, a module
    attribute, or the value that crossed a graph break."""
    s = source_in_words(source, ctx)
    if ctx is None:
        return f"`{s}`"
    m = _STACK.fullmatch(s.strip())
    if m:
        return _stack_words(int(m.group(1)), ctx)
    if ctx.args and s in ctx.args and s != "self" and ctx.function:
        return f"`{s}` (argument of {ctx.function}())"
    return f"`{s}`"


def guard_check_in_words(kind: str, expr: str, ctx: FrameContext | None = None) -> str | None:
    """One guard of a compiled graph as a sentence; None for guards that say nothing to a user
    (dimension-marking checks)."""
    if kind in _HIDDEN_KINDS:
        return None
    if kind == "GLOBAL_STATE":
        return "global state is as when compiled (grad mode, autocast, default dtype, deterministic algorithms)"
    m = _TENSOR.match(expr)
    if m:
        src, cls, dtype, device, grad, size, stride = m.groups()
        dev = "cpu" if device == "None" else f"cuda:{device}" if device.isdigit() else device
        return (f"{subject_in_words(src, ctx)} is a {dtype.replace('torch.', '')} {cls} on {dev}, "
                f"size [{size}], stride [{stride}], requires_grad={grad}")
    m = _TYPE_ID.match(expr)
    if m:
        cls = (m.group(2) or "").rsplit(".", 1)[-1]
        return f"type of {subject_in_words(m.group(1), ctx)} is {cls or 'unchanged'}"
    m = _OBJ_ID.match(expr)
    if m:
        return f"{subject_in_words(m.group(1), ctx)} is the same object as when compiled"
    m = _DICT_CONTAINS.match(expr)
    if m:
        neg, key, src = m.groups()
        return f"{subject_in_words(src, ctx)} {'has no' if neg else 'has'} attribute `{key}` of its own"
    m = _EQUALS.match(expr)
    if m and kind in ("EQUALS_MATCH", "CONSTANT_MATCH", ""):
        return f"{subject_in_words(m.group(1).strip(), ctx)} == {m.group(2).strip()}"
    text = source_in_words(expr, ctx)
    return _STACK.sub(lambda mm: _stack_words(int(mm.group(1)), ctx) if ctx else mm.group(0), text)


GUARD_LINES_SHOWN = 40
"""Readable guards listed per graph; the rest are counted."""


def readable_guards(guards: list[dict], ctx: FrameContext | None = None,
                    limit: int = GUARD_LINES_SHOWN) -> dict:
    """A compiled graph's guards: what each checks in words, the user's values first (tensor
    shapes, Python values, types, identities), then the process-wide ones; repeats folded."""
    def rank(g: dict) -> int:
        if g["kind"] in _AMBIENT_KINDS:
            return 3
        if "__import_" in g["expr"] or "_global_" in g["expr"]:
            return 2
        return {"TENSOR_MATCH": 0, "EQUALS_MATCH": 0, "CONSTANT_MATCH": 0}.get(g["kind"], 1)

    lines: list[str] = []
    seen: set[str] = set()
    hidden = 0
    for g in sorted(guards, key=rank):
        words = guard_check_in_words(g.get("kind", ""), g.get("expr", ""), ctx)
        if words is None:
            hidden += 1
            continue
        if words not in seen:
            seen.add(words)
            lines.append(words)
    return {"checks": lines[:limit], "not_shown": max(len(lines) - limit, 0) + hidden}


def guard_failure_in_words(guard: str, ctx: FrameContext | None = None,
                           torch_version: str | None = None) -> dict:
    """A failed guard (why dynamo recompiled) as a person would say it, with the usual fix.

    `what`: the change, in the user's names; `cause`: shape, stride, dtype, device,
    requires_grad, python_value, global_state, object_id, type or other; `fix`: a sentence
    (never a dynamo-internal name); `group`/`values` let a caller fold repeated size changes."""
    g = guard.split("#", 1)[0].strip()
    version = torch_version_tuple(torch_version)
    mark_dynamic = "torch._dynamo.mark_dynamic" if version is None or version >= (2, 1) else "mark_dynamic"
    m = _SIZE.match(g)
    if m:
        name, what, dim, old, new = m.groups()
        subject = subject_in_words(name, ctx)
        plain = source_in_words(name, ctx)
        if _STACK.fullmatch(plain):
            fix = (f"The tensor crosses the graph break at line {ctx.resumes_after_line if ctx else '?'}: remove "
                   "the break so it stays inside one graph, or compile with dynamic=True.")
        else:
            fix = (f"Call {mark_dynamic}({plain}, {dim}) on the tensor before the compiled call, compile with "
                   "torch.compile(dynamic=True), or pad inputs to a few fixed sizes.")
        return {"what": f"{what} of {subject} changed in dim {dim} ({old} -> {new})",
                "cause": "shape" if what == "size" else "stride",
                "fix": fix, "group": f"{what} of {subject} changed in dim {dim}", "values": [old, new]}
    m = _TENSOR_PROP.match(g)
    if m:
        name, prop, detail = m.groups()
        subject = subject_in_words(name, ctx)
        return {"what": f"{prop} of {subject} changed ({detail.strip()})".replace(" ()", ""),
                "cause": prop.replace(" ", "_"),
                "fix": f"Keep {subject} at one {prop} across calls (convert it once, before the compiled call)."}
    if g.startswith("GLOBAL_STATE changed"):
        state = g.split(":", 1)[1].strip() if ":" in g else "global state"
        return {"what": f"global state changed: {state}", "cause": "global_state",
                "fix": "Call the compiled function under one grad / autocast mode, or compile one copy per mode."}
    m = _OBJ_ID.match(g) or (re.match(r"^(.+) is not (.+)$", g) if "ID_MATCH" in guard else None)
    if m or "___check_obj_id" in g:
        subject = subject_in_words(m.group(1), ctx) if m else "an object"
        return {"what": f"{subject} is a different object than when compiled (identity guard)", "cause": "object_id",
                "fix": f"Pass the same object as {subject} on every call (create it once, outside the loop), "
                       "or pass its changing contents as tensors."}
    m = _TYPE_ID.match(g)
    if m:
        subject = subject_in_words(m.group(1), ctx)
        return {"what": f"the type of {subject} changed", "cause": "type",
                "fix": f"Pass {subject} with one type on every call (e.g. always a tensor, or always an int)."}
    m = _EQUALS.match(g)
    if m:
        name, value = m.group(1).strip(), m.group(2).strip()
        subject = subject_in_words(name, ctx)
        plain = source_in_words(name, ctx)
        what = f"Python value {subject} changed (the graph was specialised for {plain} == {value})"
        if _STACK.fullmatch(plain):
            line = ctx.resumes_after_line if ctx else None
            what = f"{subject} changed: the graph after the break was specialised for its value {value}"
            fix = (f"The value comes out of the graph break at line {line} and enters the next graph as a "
                   "constant: remove that break (keep the value a tensor, e.g. no .item()) so it stays in one "
                   "graph; for .item() results, torch._dynamo.config.capture_scalar_outputs = True keeps "
                   "them in the graph.")
        else:
            fix = (f"Pass {plain} as a tensor (torch.tensor({plain})), or leave torch.compile's dynamic at its "
                   "default or True so dynamo makes it a symbol instead of a constant (dynamic=False "
                   "specialises on every new value).")
        return {"what": what, "cause": "python_value", "fix": fix}
    return {"what": source_in_words(g, ctx), "cause": "other",
            "fix": "See the guard above; TORCH_LOGS=recompiles prints every failed guard."}
