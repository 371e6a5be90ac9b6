"""Read a run directory whatever state the run left it in (see session.py for the order of
writing), and say what is missing.

A run that ended normally, with os._exit or on SIGTERM/SIGINT has everything. One killed with
SIGKILL (by hand, by a scheduler's hard limit, by the OOM killer) or crashed in native code has
run.json with status "running", samples up to its last second in samples.partial.jsonl, the
trace if the profiled window had ended, and for a crash the Python stacks in crash.txt.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import TorchneckError
from ..sites import is_user_file
from .sampler import PARTIAL_NAME, read_partial
from .session import CRASH_FILE

_FRAME = re.compile(r'File "(.+)", line (\d+) in (.+)$')

UNFINISHED = "unfinished"
"""run.json's status for a run that never reached its end: killed, or crashed."""


def is_job_dir(path: Path) -> bool:
    """A multi-rank job's directory (`run --nproc-per-node`): its ranks' folders or job.json.
    Here, not in jobs.py, so that reporting one process's run imports none of the reducer."""
    return Path(path).is_dir() and (any(Path(path).glob("rank-*/env.json")) or (Path(path) / "job.json").exists())


def load_run_evidence(run_dir: Path) -> tuple[dict, dict | None, list[str]]:
    """(run.json, samples.json's content or None, sentences on what is missing or recovered)."""
    run_dir = Path(run_dir)
    run = read_json(run_dir / "run.json")
    if not isinstance(run, dict) or "started_monotonic_ns" not in run:
        raise TorchneckError(f"{run_dir / 'run.json'}: not a torchneck run.json")
    notes: list[str] = []
    samples = read_json(run_dir / "samples.json", required=False)
    partial = run_dir / PARTIAL_NAME
    if samples is None and partial.exists():
        samples = read_partial(partial)
        if samples is not None:
            notes.append(f"samples.json was never written: {len(samples['samples'])} samples recovered from "
                         f"{PARTIAL_NAME} (written every second while the script ran)")
    if samples is None:
        notes.append("no Python samples (samples.json missing)")
    if run.get("status") == "running":
        run = dict(run)
        rows = samples.get("samples") if samples else None
        last_s = sum(s[1] for s in rows) if rows else 0.0
        unix0 = run.get("started_unix_ns")
        if unix0:  # the last file the run touched tells when it was still alive
            touched = [p.stat().st_mtime_ns for p in (run_dir / PARTIAL_NAME, run_dir / CRASH_FILE,
                                                       run_dir / "trace.json.gz", run_dir / "run.json") if p.exists()]
            if touched:
                last_s = max(last_s, (max(touched) - unix0) / 1e9)
        run["status"] = UNFINISHED
        run["exit_code"] = -1
        run["ended_monotonic_ns"] = run["started_monotonic_ns"] + int(last_s * 1e9)
        run["wall_s"] = last_s
        run["cpu_s"] = sum(s[2] for s in rows if len(s) > 2 and s[2] > 0) if rows else None  # the main thread's
        crash = _crash_summary(run_dir / CRASH_FILE)
        if crash:
            run["error"] = crash
            notes.append(f"the run crashed: {crash} (Python stacks in {CRASH_FILE})")
        else:
            run["error"] = ("the run never finished: it was killed (SIGKILL, a scheduler's hard limit, "
                            "the OOM killer) or crashed")
            notes.append(run["error"] + f"; its evidence covers the first {last_s:.1f} s")
    if run.get("wall_s") is None and run.get("ended_monotonic_ns"):
        run["wall_s"] = (run["ended_monotonic_ns"] - run["started_monotonic_ns"]) / 1e9
    if not (run_dir / "trace.json.gz").exists():
        cap = run.get("capture") or {}
        if cap.get("window_start_ns") and not cap.get("window_end_ns"):
            notes.append("no trace: the profiled window was still recording when the run ended")
    if not (run_dir / "env.json").exists():
        notes.append("env.json missing: no environment summary")
    if not (run_dir / "compile.json").exists() and run.get("status") == UNFINISHED:
        notes.append("compile.json missing: torch.compile's records were not written")
    return run, samples, notes


def _crash_summary(path: Path) -> str | None:
    """"Fatal Python error: Segmentation fault at script.py:12" from faulthandler's output."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    what = next((ln for ln in lines if ln.startswith("Fatal Python error")), lines[0])
    frames = [m.groups() for m in (_FRAME.match(ln) for ln in lines) if m]
    user: tuple | None = next(((f, n, fn) for f, n, fn in frames if is_user_file(f)), None)  # innermost first
    if user is None and frames:
        user = frames[0]
    if user is None:
        return what
    return f"{what} at {user[0]}:{user[1]} in {user[2]}"


def read_json(path: Path, required: bool = True):
    """A run directory's JSON file; an optional one (`required=False`) that is missing or damaged
    reads as None (a run killed hard leaves what it had), a required one is one clear error."""
    if not path.exists():
        if required:
            raise TorchneckError(f"{path.parent}: not a torchneck run directory (no {path.name})")
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        if not required:
            return None
        raise TorchneckError(f"{path}: unreadable ({exc})") from None
