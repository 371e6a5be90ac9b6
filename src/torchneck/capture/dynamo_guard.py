"""Keep torchneck out of what torch.compile traces, compiles, guards on or counts.

Measured before this module: on a compiled model, dynamo compiled torchneck's global module hook
(`_module_pre`, the first frame in compile.json), counted one frame more than the same script
run bare, and torch warned that the hooks "fire an extra time" for the compiled module. So:

1. When the script calls `torch.compile` (or `nn.Module.compile`, which calls it), `on_compile`
   runs before anything is compiled: the window takes its global module hooks and its line
   marker (a TorchFunctionMode, which dynamo guards on) away for the rest of the run, and counts
   steps on calls of compiled modules instead. The compile log's "dynamo is starting a frame"
   record is the backstop for other ways into dynamo (`torch._dynamo.optimize`).
2. Every code object of torchneck's own modules is marked "skip" in dynamo's frame evaluator
   (`skip_code`): a torchneck function that runs while a compiled frame is active (the sampler's
   signal handler, a hook called from torch's code) runs as plain Python, never converted into a
   frame of its own.
3. The hooks that must stay (the optimizer clock, the compiled-module clock, the DataLoader
   clock) return at once when dynamo traces through them (`torch.compiler.is_compiling()` is a
   constant True while tracing), so inlining them adds no op, no break and no graph.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable


def is_compiling() -> bool:
    """True while dynamo traces (a constant it folds); False when running eagerly."""
    compiler = sys.modules.get("torch.compiler")
    fn = getattr(compiler, "is_compiling", None)
    return bool(fn()) if fn is not None else False


class CompileGuard:
    """Wraps `torch.compile` so torchneck steps out of the way before anything is compiled."""

    def __init__(self, on_compile: Callable[[], None]) -> None:
        self.on_compile = on_compile
        self.requested = False  # torch.compile was called (or dynamo started a frame)
        self._restore: tuple | None = None
        self._skipped = False

    def install(self) -> None:
        import torch

        original = torch.compile
        guard = self

        def compile(*args, **kwargs):  # noqa: A001  (torch's own name)
            guard.compile_requested()
            return original(*args, **kwargs)

        compile.__doc__ = original.__doc__
        compile.__wrapped__ = original  # type: ignore[attr-defined]
        torch.compile = compile
        self._restore = (torch, original)

    def uninstall(self) -> None:
        if self._restore is not None:
            owner, original = self._restore
            owner.compile = original
            self._restore = None

    def compile_requested(self) -> None:
        """Before anything is compiled (idempotent)."""
        first = not self.requested
        self.requested = True
        if not self._skipped:
            self._skipped = mark_torchneck_code_skipped()
        if first:
            try:
                self.on_compile()
            except Exception:
                pass


def mark_torchneck_code_skipped() -> bool:
    """Mark every code object of torchneck's loaded modules as "skip" in dynamo's frame
    evaluator. Returns False where this torch has no such switch."""
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:
        return False
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if not (name == "torchneck" or name.startswith("torchneck.")) or module is None:
            continue
        for value in list(vars(module).values()):
            for code in _codes_of(value):
                _skip_recursively(code, skip_code, seen)
    return True


def _codes_of(value) -> list[types.CodeType]:
    if isinstance(value, types.FunctionType):
        return [value.__code__]
    if isinstance(value, type) and value.__module__.startswith("torchneck"):
        out = []
        for attr in vars(value).values():
            fn = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
            if isinstance(fn, property):
                out += [f.__code__ for f in (fn.fget, fn.fset, fn.fdel) if isinstance(f, types.FunctionType)]
            elif isinstance(fn, types.FunctionType):
                out.append(fn.__code__)
        return out
    return []


def _skip_recursively(code: types.CodeType, skip_code, seen: set[int]) -> None:
    """The code object and every function defined inside it (closures, lambdas)."""
    if id(code) in seen:
        return
    seen.add(id(code))
    try:
        skip_code(code)
    except Exception:
        return
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _skip_recursively(const, skip_code, seen)
