"""`torchneck bisect`: find which part of torch.compile breaks a script, as PyTorch's
troubleshooting guide does by hand.

The script runs once as written (`original`). If that run fails (an exception, a crash, a hang
past the timeout, or with `--accuracy` compiled outputs that differ from eager), it runs again
with every torch.compile call forced onto simpler backends, each adding one component:

    eager                       TorchDynamo captures graphs; they run eagerly
    aot_eager                   + AOT Autograd (functionalization, forward/backward graphs)
    aot_eager_decomp_partition  + decompositions and the forward/backward partitioner
    original                    + the script's own backend (TorchInductor by default)

The first stage that fails names the culprit. When even `eager` fails, a run with dynamo
disabled tells a capture bug from a bug in the script itself. Each stage is a subprocess
(capture/compile_stage.py) with a timeout, so a crash or a hang ends that stage only.

`--minify` then runs PyTorch's minifier on the culprit (`TORCHDYNAMO_REPRO_AFTER=dynamo` for AOT
autograd, decompositions and custom backends, `aot` for inductor; `TORCHDYNAMO_REPRO_LEVEL=4`
for accuracy failures) and points at the `repro.py` it writes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .capture.runner import Target

BISECT_FORMAT = 1

FORCED_STAGES = ("eager", "aot_eager", "aot_eager_decomp_partition")
"""The forced stages in the guide's order: each adds one component to the one before."""

FIRST_RUN_TIMEOUT_S = 600.0
"""Default time limit of the first (original) run: long enough for a cold inductor compile."""

STAGE_TIMEOUT_FACTOR = 4.0
MIN_STAGE_TIMEOUT_S = 120.0
"""Later stages default to max(MIN_STAGE_TIMEOUT_S, STAGE_TIMEOUT_FACTOR x the first run's wall
time): forced backends compile faster than inductor, so a stage that takes 4x longer hangs."""

TERMINATE_GRACE_S = 5.0

_COMPONENTS = {
    "no_compile": "the script itself: it fails with torch.compile disabled too",
    "eager": "TorchDynamo, while capturing the graph (backend 'eager' fails)",
    "aot_eager": "AOT Autograd: functionalization or tracing forward/backward "
                 "(backend 'aot_eager' fails, 'eager' works)",
    "aot_eager_decomp_partition": "decompositions or the forward/backward partitioner "
                                  "(backend 'aot_eager_decomp_partition' fails, 'aot_eager' works)",
}

_ADVICE = {
    "no_compile": "Fix the script's own error first: it is not a torch.compile problem.",
    "eager": "Dynamo cannot capture this code. Wrap the failing function in "
             "`@torch._dynamo.disable` to run it eagerly, or rewrite the construct; rerun with "
             "TORCHDYNAMO_VERBOSE=1 for the internal stack and report it to PyTorch.",
    "aot_eager": "Try `torch.compile(..., backend='eager')` as a workaround while the bug stands; "
                 "`--minify` writes a small repro.py to attach to a PyTorch issue.",
    "aot_eager_decomp_partition": "Try backend='aot_eager' as a workaround; `--minify` writes a "
                                  "small repro.py to attach to a PyTorch issue.",
    "inductor": "TorchInductor generates wrong or failing code here. Workarounds: "
                "`torch.compile(..., backend='aot_eager')`, or `@torch._dynamo.disable` on the "
                "function; `--minify` writes a small repro.py to attach to a PyTorch issue.",
    "custom": "The script's own backend fails on a graph that PyTorch's backends handle: fix or "
              "work around it in that backend (its error is below).",
}


@dataclass
class BisectOptions:
    accuracy: bool = False
    tolerance: float = 1e-3
    check_calls: int = 2
    timeout: float | None = None
    minify: bool = False
    minify_timeout: float = 1800.0


def target_argv(target: Target) -> list[str]:
    if target.module:
        return ["-m", target.module, *target.args]
    return [str(target.script), *target.args]


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(TERMINATE_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _run(cmd: list[str], log_path: Path, timeout: float | None, env: dict | None = None,
         cwd: Path | None = None) -> tuple[int | None, float]:
    """Run `cmd` in its own process group, output to `log_path`: (return code or None on timeout, wall s)."""
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
        except BaseException:
            _kill_group(proc)
            raise
    return code, time.perf_counter() - t0


def _tail(path: Path, lines: int = 12) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def run_stage(stage: str, target: Target, options: BisectOptions, out_dir: Path, timeout: float | None,
              env_extra: dict | None = None, name: str | None = None, accuracy: bool | None = None,
              extra_options: dict | None = None) -> dict:
    """One stage in a subprocess: its result dict, with `failed` and a one-line `outcome`."""
    name = name or stage
    result_path, log_path = out_dir / f"stage-{name}.json", out_dir / f"stage-{name}.log"
    result_path.unlink(missing_ok=True)
    check = options.accuracy if accuracy is None else accuracy
    stage_options = {"accuracy": check, "tolerance": options.tolerance, "check_calls": options.check_calls,
                     **(extra_options or {})}
    cmd = [sys.executable, "-m", "torchneck.capture.compile_stage", str(result_path), stage,
           json.dumps(stage_options), *target_argv(target)]
    env = {**os.environ, **(env_extra or {})}
    code, wall = _run(cmd, log_path, timeout, env)
    try:
        result = json.loads(result_path.read_text())
    except (OSError, json.JSONDecodeError):
        result = {"stage": stage, "exception": None, "compile_calls": None, "accuracy": None}
    result.update(name=name, wall_s=wall, log=str(log_path), returncode=code)
    if code is None:
        result["status"], result["outcome"] = "timeout", f"no result after {timeout:g} s (killed)"
    elif code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        result["status"], result["outcome"] = "crashed", f"crashed ({sig})"
    elif "status" not in result:
        result["status"] = "error"
        tail = _tail(log_path, 1)
        result["outcome"] = f"exit code {code}" + (f": {tail[0]}" if tail else "")
    elif code != 0:
        exc = result.get("exception")
        result["outcome"] = (f"{exc.get('inner_type') or exc['type']}: {exc['first_line']}" if exc
                             else result.get("error") or f"exit code {code}")
    else:
        result["outcome"] = "ran to the end"
    mismatches = (result.get("accuracy") or {}).get("mismatches") or []
    if code == 0 and mismatches:
        result["outcome"] = f"outputs differ from eager in {len(mismatches)} check(s)"
    result["failed"] = code != 0 or bool(mismatches)
    if result["failed"] and code is not None and code > 0:
        result["log_tail"] = _tail(log_path)
    return result


def _original_backend(original: dict) -> str | None:
    """The backend(s) the script asked for; None when it made no torch.compile call."""
    backends = sorted({c["backend"] for c in original.get("compile_calls") or []})
    return ", ".join(backends) or None


def bisect(target: Target, options: BisectOptions, out_dir: Path, progress=None) -> dict:
    """Run the stages (see module docstring) and return the `bisect.json` document."""
    say = progress or (lambda msg: None)
    stages: list[dict] = []

    def stage(name: str, timeout: float | None, **kw) -> dict:
        say(f"running stage {name}")
        r = run_stage(name, target, options, out_dir, timeout, **kw)
        stages.append(r)
        say(f"stage {name}: {r['outcome']}")
        return r

    original = stage("original", options.timeout or FIRST_RUN_TIMEOUT_S)
    later_timeout = options.timeout or max(MIN_STAGE_TIMEOUT_S, STAGE_TIMEOUT_FACTOR * original["wall_s"])
    calls = original.get("compile_calls")
    backend = _original_backend(original)
    culprit = None
    if not original["failed"]:
        verdict = ("the script calls no torch.compile: nothing to bisect" if calls == [] else
                   "the compiled run works" + (" and its outputs match eager" if options.accuracy else "")
                   + ": nothing to bisect" + ("" if options.accuracy else
                                              " (add --accuracy to compare compiled outputs with eager)"))
    elif calls == []:
        culprit = "no_compile"
        verdict = "the script fails before calling torch.compile: not a compiler problem"
    else:
        for name in FORCED_STAGES:
            if stage(name, later_timeout)["failed"]:
                culprit = name
                break
        else:
            culprit = "original"
        if culprit == "eager" and stage("no_compile", later_timeout, accuracy=False)["failed"]:
            culprit = "no_compile"
        verdict = f"the failure is in {component(culprit, backend)}"
    fullgraph = any(c.get("fullgraph") for c in calls or [])
    doc = {
        "format": BISECT_FORMAT, "target": target_argv(target), "accuracy": options.accuracy,
        "tolerance": options.tolerance if options.accuracy else None,
        "backend": backend, "culprit": culprit, "component": component(culprit, backend) if culprit else None,
        "verdict": verdict, "advice": advice(culprit, backend, fullgraph) if culprit else None,
        "stages": stages, "failure": _failure_summary(stages, culprit),
    }
    if options.minify and culprit:
        say("running PyTorch's minifier (this recompiles many times)")
        custom = any(c.get("custom") for c in calls or [])
        culprit_stage = next((st for st in stages if st["name"] == culprit), {})
        doc["minify"] = minify(target, options, out_dir, culprit, backend, custom_backend=custom,
                               crashed=culprit_stage.get("status") == "crashed")
    return doc


def component(culprit: str, backend: str | None) -> str:
    if culprit == "original":
        return ("TorchInductor: its code generation or compiled code (every earlier stage works)"
                if backend == "inductor" else f"the backend '{backend}' (every PyTorch stage before it works)")
    return _COMPONENTS[culprit]


def advice(culprit: str, backend: str | None, fullgraph: bool = False) -> str:
    if culprit == "original":
        return _ADVICE["inductor" if backend == "inductor" else "custom"]
    if culprit == "eager" and fullgraph:
        return ("torch.compile(fullgraph=True) turns every graph break into this error: remove "
                "fullgraph=True to let dynamo split the graph there (a graph break, slower but "
                "working), or rewrite the line as torch's hint says.")
    return _ADVICE[culprit]


def _failure_summary(stages: list[dict], culprit: str | None) -> dict | None:
    """The culprit stage's error and the user's lines it involves."""
    if culprit is None:
        return None
    st = next(s for s in stages if s["name"] == culprit)
    exc = st.get("exception") or {}
    frame = st.get("failed_frame") or {}
    mismatches = (st.get("accuracy") or {}).get("mismatches") or []
    where = []
    for w in ([m.get("where") for m in mismatches[:1]] + [exc.get("traced_line"), frame.get("user_line")]
              + ([{"file": frame["file"], "line": frame["line"], "function": frame["function"]}]
                 if frame.get("file") else [])
              + [exc.get("raised_at"), exc.get("call_site")]):
        if w and w.get("line") and w not in where:
            where.append(w)
    return {"stage": culprit, "outcome": st["outcome"], "status": st["status"],
            "exception_type": exc.get("inner_type") or exc.get("type"), "message": exc.get("first_line"),
            "detail": exc.get("detail"), "hints": exc.get("hints") or [], "log": st.get("log"),
            "compiled_function": ({"function": frame.get("function"), "file": frame.get("file"),
                                   "line": frame.get("line")} if frame.get("file") else None),
            "mismatch": mismatches[0] if mismatches else None, "where": where}


MINIFY_CANNOT = {
    "no_compile": "the script fails with torch.compile disabled too: there is no compiled graph to shrink",
    "eager": "the failure happens before or while dynamo captures a graph (backend 'eager' fails too), so "
             "there is no graph to shrink; TORCHDYNAMO_VERBOSE=1 and the user line above point at the construct",
}
"""Failure classes PyTorch's minifiers cannot shrink, and why."""


def minify(target: Target, options: BisectOptions, out_dir: Path, culprit: str, backend: str | None,
           custom_backend: bool = False, crashed: bool = False) -> dict:
    """PyTorch's minifier for the culprit: a run with TORCHDYNAMO_REPRO_* writes a launcher
    (`minifier_launcher.py`), the launcher shrinks the graph and writes repro.py in
    `out_dir/minify`. A backend defined in the script itself is looked up by name by the
    launcher, so for it the launcher runs inside the failing run's process (see
    compile_stage.minify_in_process); other launchers run in their own process."""
    if culprit in MINIFY_CANNOT:
        return {"ok": False, "reason": "cannot minify: " + MINIFY_CANNOT[culprit]}
    after = "aot" if culprit == "original" and backend == "inductor" else "dynamo"
    if crashed and after == "dynamo":
        return {"ok": False, "reason": "cannot minify: the backend kills the process (a crash, not an exception); "
                                       "the minifier after dynamo runs the backend in its own process and dies "
                                       "with it before it can shrink anything. Reproduce with backend='eager' and "
                                       "debug the backend on the graph in the stage log"}
    work = out_dir / "minify"
    work.mkdir(exist_ok=True)
    env = {"TORCHDYNAMO_REPRO_AFTER": after, "TORCHDYNAMO_REPRO_LEVEL": "4" if options.accuracy else "2",
           "TORCH_COMPILE_DEBUG_DIR": str(work.resolve())}
    stage = culprit if culprit in FORCED_STAGES else "original"
    in_process = custom_backend and culprit == "original"
    dump = run_stage(stage, target, options, out_dir, options.minify_timeout, env_extra=env,
                     name="minify-dump", accuracy=False,
                     extra_options={"minify_dir": str(work.resolve())} if in_process else None)
    launchers = sorted(work.rglob("minifier_launcher.py"), key=lambda p: p.stat().st_mtime)
    info = {"repro_after": after, "repro_level": int(env["TORCHDYNAMO_REPRO_LEVEL"]), "dump_stage": dump["outcome"],
            "in_process": in_process}
    if not launchers:
        why = ("the failing run wrote no minifier_launcher.py: " + (
            "the compiled graph computes the same numbers as eager on the inputs dynamo captured (the "
            "mismatch needs later inputs or state)" if options.accuracy else
            "compiling and running the captured graph once did not fail (the failure needs later calls or "
            "state the graph does not capture)") + f" (see {dump['log']})")
        return {**info, "ok": False, "reason": "cannot minify: " + why}
    launcher = launchers[-1]
    repro = work / "repro.py"
    code: int | None
    if in_process:
        ran = dump.get("minify") or {}
        info.update(launcher=str(launcher), log=dump["log"], wall_s=dump["wall_s"])
        code = 0 if ran.get("ran") else 1
        tail = [ran.get("error")] if ran.get("error") else _tail(Path(dump["log"]), 1)
    else:
        log = out_dir / "minify.log"
        code, wall = _run([sys.executable, str(launcher)], log, options.minify_timeout, cwd=work)
        info.update(launcher=str(launcher), log=str(log), wall_s=wall)
        tail = _tail(log, 1)
    if repro.exists():
        nodes = sorted(work.glob("**/checkpoints/minified_*_nodes.py"), key=lambda p: p.stat().st_mtime)
        out = {**info, "ok": True, "repro": str(repro), "minified": str(nodes[-1]) if nodes else None}
        if in_process:
            out["note"] = (f"repro.py names the backend '{backend}', defined in your script: before running it, "
                           f"import that function and register it (torch._dynamo.register_backend({backend}))")
        return out
    why = "timed out" if code is None else f"exit code {code}" + (f": {tail[0]}" if tail else "")
    return {**info, "ok": False, "reason": f"the minifier wrote no repro.py ({why}); "
                                           f"run it yourself: python {launcher}"}
