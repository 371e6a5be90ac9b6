"""One stage of `torchneck bisect`: run the user's script with every torch.compile call forced
onto one backend, and record how it ended.

    python -m torchneck.capture.compile_stage RESULT_JSON STAGE OPTIONS_JSON (SCRIPT | -m MODULE) [ARGS...]

STAGE is one of `STAGES`: `no_compile` (dynamo disabled: the script's own eager behaviour),
`eager` (dynamo captures graphs and runs them eagerly), `aot_eager` (plus AOT autograd),
`aot_eager_decomp_partition` (plus decompositions and the partitioner) or `original` (the
backend, mode and options the script asked for). It is PyTorch's troubleshooting procedure; each
stage adds one component, so the first failing stage names the culprit.

Forcing works by replacing `torch.compile` before the script starts (`nn.Module.compile` calls it
too): `backend` becomes the stage's, `mode` and `options` (inductor's) are dropped. With
`--accuracy`, each backend's compiled graph is wrapped so that its first calls also run the
dynamo graph eagerly on cloned inputs, and the outputs are compared within a tolerance; the
random state is restored between the two calls and inductor is told to draw random numbers as
eager does (`fallback_random`), so dropout compares equal.

RESULT_JSON gets the outcome, the exception (torch's types unwrapped: `BackendCompilerFailed`
names the backend and carries the real error), the frame whose compilation failed (from torch's
structured compile log), the torch.compile calls made and the accuracy checks. The process exits
with the script's exit code. A crash (signal) writes nothing: the parent reads the return code.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import time
import traceback
from pathlib import Path

from ..errors import TorchneckError
from ..sites import is_user_file
from .runner import Target, check_target, run_target

STAGES = ("no_compile", "eager", "aot_eager", "aot_eager_decomp_partition", "original")

MESSAGE_LIMIT = 2000
"""Characters kept of an exception message: torch's include long hints and internal stacks."""

MISMATCHES_KEPT = 20
"""Accuracy mismatches recorded at most (the first ones are the ones to look at)."""

_USER_CODE_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _frame(file: str, line: int | str | None, function: str) -> dict:
    return {"file": file, "line": int(line or 0), "function": function}


def _user_frames_of_traceback(exc: BaseException) -> list[dict]:
    """The user's frames in the exception's traceback, outermost first."""
    return [_frame(f.filename, f.lineno, f.name)
            for f in traceback.extract_tb(exc.__traceback__) if is_user_file(f.filename)]


def _user_frames_in_text(text: str) -> list[dict]:
    """User frames quoted in a message ("from user code: File ..., line N, in f")."""
    return [_frame(m.group(1), m.group(2), m.group(3)) for m in _USER_CODE_FRAME.finditer(text or "")
            if is_user_file(m.group(1))]


def describe_exception(exc: BaseException) -> dict:
    """Type, message and the user's lines of an exception raised while running a compiled script.

    torch wraps a backend's error in `BackendCompilerFailed` (`inner_exception` is the real one);
    dynamo's own errors quote the traced user line in their message ("from user code:")."""
    inner = getattr(exc, "inner_exception", None)
    real = inner if isinstance(inner, BaseException) else exc
    message = str(exc)
    frames = _user_frames_of_traceback(exc)
    if real is not exc:
        frames += [f for f in _user_frames_of_traceback(real) if f not in frames]
    quoted = _user_frames_in_text(message)
    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "inner_type": type(real).__name__ if real is not exc else None,
        "message": message[:MESSAGE_LIMIT],
        "first_line": _first_line(str(real) if real is not exc else message),
        "detail": _compiler_error(message),
        "hints": [h.strip()[:300] for h in _HINT.findall(message)][:HINTS_KEPT],
        "traced_line": quoted[-1] if quoted else None,
        "raised_at": frames[-1] if frames else None,
        "call_site": frames[0] if frames else None,
    }


_HINT = re.compile(r"^\s*Hint: (.+)$", re.MULTILINE)
HINTS_KEPT = 3
"""torch's own `Hint:` lines kept from a dynamo error (the first ones are the most specific)."""

_COMPILER_ERROR = re.compile(r"(?:^|: )(error: .+)$", re.MULTILINE)


def _compiler_error(message: str) -> str | None:
    """The first `error: ...` line of a C++/Triton compiler's output quoted in the message
    (inductor's CppCompileError puts the command and the whole output there)."""
    m = _COMPILER_ERROR.search(message.split("\n", 1)[1] if "\n" in message else "")
    return m.group(1).strip()[:300] if m else None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("backend="):
            return line[:300]
    return text.strip()[:300]


# --------------------------------------------------------------------------- accuracy


def _node_site(node) -> dict | None:
    """The user's line that made an FX node (innermost user frame of its recorded stack)."""
    frames = _user_frames_in_text((getattr(node, "meta", None) or {}).get("stack_trace") or "")
    return frames[-1] if frames else None


def _graph_site(gm) -> dict | None:
    for node in gm.graph.nodes:
        site = _node_site(node)
        if site:
            return site
    return None


def compare_outputs(reference, result, tolerance: float) -> list[dict]:
    """The outputs (flattened) of `result` that differ from `reference`: shape, dtype, or values
    outside `atol = rtol = tolerance` (NaNs must match). Integer and bool tensors must be equal."""
    import torch
    from torch.utils._pytree import tree_leaves

    ref_leaves, res_leaves = tree_leaves(reference), tree_leaves(result)
    if len(ref_leaves) != len(res_leaves):
        return [{"output": None, "problem": f"{len(res_leaves)} outputs instead of {len(ref_leaves)}"}]
    bad = []
    for i, (ref, res) in enumerate(zip(ref_leaves, res_leaves)):
        if not isinstance(ref, torch.Tensor) or not isinstance(res, torch.Tensor):
            if type(ref) is not type(res) or (not isinstance(ref, torch.Tensor) and ref != res):
                bad.append({"output": i, "problem": f"{res!r:.60} instead of {ref!r:.60}"})
            continue
        if ref.shape != res.shape:
            bad.append({"output": i, "problem": f"shape {tuple(res.shape)} instead of {tuple(ref.shape)}"})
            continue
        if ref.dtype != res.dtype:
            bad.append({"output": i, "problem": f"dtype {res.dtype} instead of {ref.dtype}"})
            continue
        if ref.numel() == 0:
            continue
        a, b = ref.detach().cpu(), res.detach().cpu()
        if a.is_floating_point() or a.is_complex():
            a64, b64 = a.to(torch.complex128 if a.is_complex() else torch.float64), \
                b.to(torch.complex128 if b.is_complex() else torch.float64)
            if torch.allclose(b64, a64, rtol=tolerance, atol=tolerance, equal_nan=True):
                continue
            diff = (b64 - a64).abs()
            diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
            scale = float(a64.abs().max())
            max_abs = float(diff.max())
            bad.append({"output": i, "problem": "values differ", "max_abs_diff": max_abs,
                        "max_rel_diff": max_abs / scale if scale > 0 else None,
                        "shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")})
        elif not torch.equal(a, b):
            bad.append({"output": i, "problem": "values differ", "mismatched": int((a != b).sum()),
                        "shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")})
    return bad


def _rng_state():
    import torch

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state) -> None:
    import torch

    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


class AccuracyChecker:
    """Wraps a dynamo backend: each compiled graph's first `calls` calls also run the graph
    eagerly (no grad, cloned inputs, so in-place updates hit the clones) and compare outputs."""

    def __init__(self, inner, name: str, tolerance: float, calls: int) -> None:
        self.inner, self.__name__ = inner, name
        self.tolerance, self.calls = tolerance, calls
        self.graphs = 0
        self.checked_calls = 0
        self.mismatches: list[dict] = []

    def __call__(self, gm, example_inputs, **kwargs):
        import torch

        graph_no = self.graphs
        self.graphs += 1
        try:
            reference_gm = copy.deepcopy(gm)  # backends may rewrite the graph they are given
        except Exception:
            reference_gm = None
        compiled = self.inner(gm, example_inputs, **kwargs)
        if reference_gm is None:
            return compiled
        site = _graph_site(reference_gm)
        out_nodes = _output_nodes(reference_gm)
        remaining = [self.calls]

        def clone(x):
            if isinstance(x, torch.Tensor):
                return x.detach().clone().requires_grad_(x.requires_grad) if x.is_leaf else x.detach().clone()
            return x

        def checked(*args):
            if remaining[0] <= 0:
                return compiled(*args)
            remaining[0] -= 1
            rng = _rng_state()
            with torch.no_grad():
                reference = reference_gm(*[clone(a) for a in args])
            _set_rng_state(rng)  # the compiled call draws the same random numbers (dropout)
            result = compiled(*args)  # dynamo calls a backend's result unboxed
            self.checked_calls += 1
            for bad in compare_outputs(reference, result, self.tolerance):
                if len(self.mismatches) >= MISMATCHES_KEPT:
                    break
                node = out_nodes[bad["output"]] if bad.get("output") is not None \
                    and bad["output"] < len(out_nodes) else None
                self.mismatches.append({
                    "graph": graph_no, "call": self.calls - remaining[0], "graph_site": site,
                    "op": _op_name(node), "where": _node_site(node) if node is not None else None,
                    **bad,
                })
            return result

        return checked

    def to_json(self) -> dict:
        return {"graphs": self.graphs, "checked_calls": self.checked_calls, "tolerance": self.tolerance,
                "mismatches": self.mismatches}


def _op_name(node) -> str | None:
    """`aten.relu.default` / `torch.relu` / a method name: the op that produced an output."""
    if node is None or node.op in ("placeholder", "get_attr"):
        return None
    target = node.target
    return getattr(target, "__name__", None) if callable(target) and not hasattr(target, "_schema") \
        else str(target)


def _output_nodes(gm) -> list:
    """The graph's output nodes in flattened order (None for a constant output)."""
    from torch.utils._pytree import tree_leaves

    for node in gm.graph.nodes:
        if node.op == "output":
            return [n if hasattr(n, "op") else None for n in tree_leaves(node.args[0])]
    return []


# --------------------------------------------------------------------------- forcing the backend


def _backend_name(backend) -> str:
    if isinstance(backend, str):
        return backend
    return getattr(backend, "__name__", None) or type(backend).__name__


def _user_backend(kwargs: dict):
    """The callable dynamo would build for the user's own backend, mode and options."""
    import torch

    backend = kwargs.get("backend", "inductor")
    mode, options, dynamic = kwargs.get("mode"), kwargs.get("options"), kwargs.get("dynamic")
    if backend == "inductor" and hasattr(torch, "_TorchCompileInductorWrapper"):
        return torch._TorchCompileInductorWrapper(mode if mode or options else "default", options, dynamic)
    if hasattr(torch, "_TorchCompileWrapper"):
        return torch._TorchCompileWrapper(backend, mode, options, dynamic)
    from torch._dynamo.backends.registry import lookup_backend

    return lookup_backend(backend)


class ForcedCompile:
    """Replaces `torch.compile`: records each call and forces the stage's backend."""

    def __init__(self, stage: str, accuracy: bool, tolerance: float, calls: int,
                 module_results: bool = False) -> None:
        import torch

        self.stage = stage
        self.module_results = module_results  # minifying: the script's backends must return modules
        self.real_compile = torch.compile
        self.calls: list[dict] = []
        self.custom_backends: dict[str, object] = {}  # name -> the script's own backend callable
        self.checkers: list[AccuracyChecker] = []
        self.accuracy, self.tolerance, self.check_calls = accuracy, tolerance, calls

    def install(self) -> None:
        import torch

        torch.compile = self
        if self.accuracy:
            try:  # inductor draws random numbers its own way unless told to use eager's
                import torch._inductor.config as inductor_config

                inductor_config.fallback_random = True
            except (ImportError, AttributeError):
                pass
        if self.stage == "no_compile":  # also for code calling torch._dynamo.optimize directly
            torch._dynamo.config.disable = True

    def __call__(self, model=None, **kwargs):
        if model is None:  # @torch.compile(...) used as a decorator factory
            return lambda m: self(m, **kwargs)
        caller = sys._getframe(1)
        while caller is not None and not is_user_file(caller.f_code.co_filename):
            caller = caller.f_back  # nn.Module.compile calls torch.compile from torch itself
        backend = kwargs.get("backend", "inductor")
        if not isinstance(backend, str) and callable(backend):
            if self.module_results:
                kwargs["backend"] = self.custom_backends.setdefault(_backend_name(backend),
                                                                    returning_module(backend))
            else:
                self.custom_backends.setdefault(_backend_name(backend), backend)
        self.calls.append({
            "backend": _backend_name(backend), "mode": kwargs.get("mode"),
            "custom": not isinstance(backend, str),
            "fullgraph": bool(kwargs.get("fullgraph", False)),
            "site": _frame(caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name) if caller else None,
        })
        if self.stage == "no_compile":
            return model  # as if the line said `model` (dynamo's own disable trips fullgraph=True)
        if self.stage in ("eager", "aot_eager", "aot_eager_decomp_partition"):
            kwargs.pop("mode", None)
            kwargs.pop("options", None)
            kwargs["backend"] = self.stage
            if self.accuracy:
                from torch._dynamo.backends.registry import lookup_backend

                kwargs["backend"] = self._checker(lookup_backend(self.stage), self.stage)
        elif self.stage == "original" and self.accuracy:
            inner = _user_backend(kwargs)
            kwargs.pop("mode", None)
            kwargs.pop("options", None)
            kwargs["backend"] = self._checker(inner, _backend_name(kwargs.get("backend", "inductor")))
        return self.real_compile(model, **kwargs)

    def _checker(self, inner, name: str) -> AccuracyChecker:
        checker = AccuracyChecker(inner, name, self.tolerance, self.check_calls)
        self.checkers.append(checker)
        return checker

    def accuracy_json(self) -> dict | None:
        if not self.accuracy:
            return None
        parts = [c.to_json() for c in self.checkers]
        return {"graphs": sum(p["graphs"] for p in parts),
                "checked_calls": sum(p["checked_calls"] for p in parts),
                "tolerance": self.tolerance,
                "mismatches": [m for p in parts for m in p["mismatches"]][:MISMATCHES_KEPT]}


def returning_module(backend):
    """The script's backend, its compiled result wrapped in an `nn.Module` when it is a plain
    function (`return gm.forward`): dynamo's minifiers call `named_parameters()` on what a
    backend returns while comparing results, and skip the graph when they cannot ("likely an
    unrelated issue"). Same name, same results."""
    import torch

    class CompiledCallable(torch.nn.Module):
        def __init__(self, fn) -> None:
            super().__init__()
            self.fn = fn

        def forward(self, *args):
            return self.fn(*args)

    def wrapped(gm, example_inputs, **kwargs):
        out = backend(gm, example_inputs, **kwargs)
        return out if isinstance(out, torch.nn.Module) or not callable(out) else CompiledCallable(out)

    wrapped.__name__ = _backend_name(backend)
    wrapped.__qualname__ = wrapped.__name__
    return wrapped


def _failed_frame(records: list[dict]) -> dict | None:
    """The compiled frame whose compilation failed, from torch's `compilation_metrics` records."""
    for r in reversed(records):
        if r.get("type") == "compilation_metrics" and r.get("fail_type"):
            line = r.get("fail_user_frame_lineno")
            return {"function": r.get("co_name"), "file": r.get("co_filename"), "line": r.get("co_firstlineno"),
                    "fail_type": r.get("fail_type"), "fail_reason": (r.get("fail_reason") or "")[:MESSAGE_LIMIT],
                    "user_line": _frame(r.get("fail_user_frame_filename"), line, r.get("co_name"))
                    if line else None}
    return None


def _graph_count(records: list[dict]) -> int:
    return sum(1 for r in records if r.get("type") == "compilation_metrics" and not r.get("fail_type"))


def minify_in_process(work: Path, backends: dict) -> dict:
    """Run the minifier launcher dynamo wrote under `work` in this process, where the script's
    own backend exists: the launcher looks the backend up by name in dynamo's registry, which a
    fresh process (running the launcher as PyTorch's guide says) does not have for a function
    defined in the script. The backends are registered under their names first; the minifier
    writes repro.py into `work` (its current directory)."""
    import os
    import runpy

    import torch._dynamo
    from torch._dynamo.backends import registry

    launchers = sorted(work.rglob("minifier_launcher.py"), key=lambda p: p.stat().st_mtime)
    if not launchers:
        return {"ran": False, "launcher": None, "error": "the failing run wrote no minifier_launcher.py"}
    for name, fn in backends.items():
        if name not in registry._COMPILER_FNS:
            registry.register_backend(fn, name=name)
    torch._dynamo.reset()
    torch._dynamo.config.repro_after = None  # the launcher clears the variables; the config read them already
    cwd, argv = os.getcwd(), sys.argv
    os.chdir(work)
    sys.argv = [str(launchers[-1])]  # run_repro parses the command line: no arguments, its defaults
    error = None
    try:
        runpy.run_path(str(launchers[-1]), run_name="__main__")
    except BaseException as exc:  # the minifier ends with the last failing graph's error, or SystemExit
        if not (isinstance(exc, SystemExit) and not exc.code):
            error = f"{type(exc).__name__}: {_first_line(str(exc))}"
    finally:
        os.chdir(cwd)
        sys.argv = argv
    return {"ran": True, "launcher": str(launchers[-1]), "error": error}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 4 or argv[1] not in STAGES:
        print("usage: python -m torchneck.capture.compile_stage RESULT_JSON STAGE OPTIONS_JSON "
              "(SCRIPT | -m MODULE) [ARGS...]", file=sys.stderr)
        return 2
    result_path, stage, options, rest = Path(argv[0]), argv[1], json.loads(argv[2]), argv[3:]
    if rest[0] == "-m":
        target = Target(module=rest[1], args=tuple(rest[2:]))
    else:
        target = Target(script=Path(rest[0]), args=tuple(rest[1:]))
    try:
        code = check_target(target)
    except TorchneckError as exc:
        print(f"torchneck: {exc}", file=sys.stderr)
        return 2
    from .compile_log import CompileCapture

    log = CompileCapture()
    log.start()
    forced = ForcedCompile(stage, bool(options.get("accuracy")), float(options.get("tolerance", 1e-3)),
                           int(options.get("check_calls", 2)), module_results=bool(options.get("minify_dir")))
    forced.install()
    caught: list[BaseException] = []
    t0 = time.perf_counter()
    outcome = run_target(target, code, None, on_exception=caught.append)
    wall = time.perf_counter() - t0
    log.stop()
    minify = None
    if options.get("minify_dir") and outcome.status != "ok":
        minify = minify_in_process(Path(options["minify_dir"]), forced.custom_backends)
    result = {
        "stage": stage, "status": outcome.status, "exit_code": outcome.exit_code, "error": outcome.error,
        "minify": minify,
        "wall_s": wall, "exception": describe_exception(caught[0]) if caught else None,
        "failed_frame": _failed_frame(log.log.records), "graphs": _graph_count(log.log.records),
        "compile_calls": forced.calls, "accuracy": forced.accuracy_json(),
    }
    result_path.write_text(json.dumps(result, indent=1, default=str))
    if outcome.traceback and outcome.status != "ok":
        sys.stderr.write(outcome.traceback)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
