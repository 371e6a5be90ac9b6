"""A thread that polls instead of blocking: `queue.put(item, timeout=0)` (or `put_nowait`,
`get(block=False)`, `lock.acquire(timeout=0)`) retried in a loop until it succeeds never sleeps.
The thread spins at 100 % of a core in Python, holding the GIL most of the time, and the main
thread, which releases the GIL in every torch op, waits to get it back after each one (and, on
a machine with few cores, for a core too). Seen from the main thread's samples: its lines that
compute (inside torch ops or its own Python) spend much of their time off the CPU, blocked (on
the GIL: a torch op does not wait otherwise); and the polling loop read from the source of the
sampled lines (the watcher's samples of other threads name it) or, failing that, of the
program's files."""

from __future__ import annotations

import ast
from typing import Any

from ...model.base import Record
from ...model.findings import Finding, Where
from ..facts import Facts
from ..rule import Rule, register
from ..source import _tree, enclosing, function_at

QUEUE_CALLS = frozenset({"put", "get", "acquire", "wait"})
"""Calls that block until they can proceed, unless told not to wait."""
NOWAIT_CALLS = frozenset({"put_nowait", "get_nowait"})


class PollingEvidence(Record):
    contended_s: float
    """The main thread's sampled seconds off the CPU or ready to run on lines that compute:
    waiting for the GIL, or a core, that the polling threads hold."""
    sampled_s: float
    """The sampled steady state."""
    polling_at: int
    """The line of the call that does not wait, retried in a loop."""
    zero_at: int | None = None
    """The line giving that call its zero timeout (a parameter's default), when not the call's."""


@register
class PollingThread(Rule[PollingEvidence]):
    """A thread of the program retries a queue or lock call that does not wait (a zero timeout,
    `block=False`, `put_nowait`) in a loop: it spins, holding the GIL and a core, and the main
    thread's work waits for both. Seen when the main thread's computing lines spend at least
    `MIN_SHARE` of the steady state off the CPU (waiting for the GIL; time ready to run, which
    other processes' load makes too, does not decide), and a polling loop is in the sampled
    lines (or the program's files).

    Time lost: the main thread's off-CPU and ready-to-run time on its computing lines (each
    line's at most its sampled time): with the threads blocked, the GIL and the cores they spun
    on are the main thread's (on a machine loaded by other processes, an upper bound)."""

    kind = "polling_thread"
    summary = "A thread retries a call that does not wait (timeout=0, put_nowait) in a loop: it spins, taking the GIL."
    docs = "https://docs.python.org/3/library/queue.html#queue.Queue.put"
    evidence_type = PollingEvidence
    confidence = "estimated"
    saving_basis = ("the main thread's sampled time off the CPU or ready to run on its lines that compute (inside "
                    "torch ops or their own Python), each line's at most its sampled time")
    MIN_SHARE = 0.10
    """The main thread must lose a tenth of the steady state waiting while it computes."""

    def check(self, facts: Facts) -> list[Finding]:
        window = (facts.python or {}).get("window") or {}
        total = window.get("sampled_s") or 0.0
        lines = window.get("lines") or []
        if total <= 0 or facts.window_s <= 0:
            return []
        computing = [ln for ln in lines if _computes(ln)]
        if sum(min(ln["total_s"], ln.get("waiting_s") or 0.0) for ln in computing) < self.MIN_SHARE * total:
            return []  # the GIL alone decides (time ready to run is other processes' load too)
        contended = sum(min(ln["total_s"], (ln.get("waiting_s") or 0.0) + (ln.get("ready_s") or 0.0))
                        for ln in computing)
        found = next(((ln["file"], int(ln["line"]), z) for ln in lines
                      if (z := polling_call(ln["file"], int(ln["line"]))) is not None), None)
        if found is None:
            files = list(dict.fromkeys(ln["file"] for ln in lines if ln.get("file")))
            found = next(((f, n, z) for f in files for n, z in polling_lines(f)), None)
        if found is None:
            return []
        file, at, zero = found
        ev = PollingEvidence(contended_s=contended, sampled_s=total, polling_at=at,
                             zero_at=zero if zero != at else None)
        where = [Where(file=file, line=at, function=function_at(file, at))]
        if ev.zero_at is not None:
            where.append(Where(file=file, line=ev.zero_at, function=function_at(file, ev.zero_at)))
        lost = contended / total * facts.window_s
        title = (f"a thread polls at line {at} (a call that does not wait, retried in a loop) and spins: the main "
                 f"thread waits for the GIL or a core {100 * contended / total:.0f}% of the time it computes")
        return [self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost), where=where)]

    def fix(self, evidence: PollingEvidence) -> str:
        default = f" (the zero comes from line {evidence.zero_at})" if evidence.zero_at else ""
        return (f"Let the call at line {evidence.polling_at} block{default}: `q.put(item)` / `q.get()`, or a timeout "
                "above zero (`timeout=0.1`) where the loop must still check a stop flag. A zero timeout raises at "
                "once, so the loop spins at 100 % of a core in Python, holding the GIL that the main thread needs "
                "after every torch op.")


def _computes(line: dict[str, Any]) -> bool:
    """A main-thread line that computes: inside torch (ops, module calls) or its own Python, not a
    call that waits (on another thread, I/O, a sleep)."""
    if line.get("waits_on_thread"):
        return False
    return bool(line.get("library_is_torch")) or not line.get("library")


def polling_call(file: str, line: int) -> int | None:
    """When the statement at `line` makes a queue or lock call that does not wait (`timeout=0`, a
    timeout whose value is a parameter defaulting to 0, `block=False`, `put_nowait`) inside a
    `try` whose handlers only pass or continue, inside a `while` loop (it is retried at once):
    the line where its zero comes from (the call's own, or the default's); None otherwise or
    when unreadable."""
    path = enclosing(file, line)
    tries = [i for i, s in enumerate(path[:-1]) if isinstance(s, ast.Try)]
    if not tries or not any(isinstance(s, ast.While) for s in path[:tries[-1]]):
        return None
    handlers = path[tries[-1]].handlers  # type: ignore[attr-defined]
    if not handlers or not all(isinstance(s, (ast.Pass, ast.Continue)) for h in handlers for s in h.body):
        return None  # the failure waits some other way (an awaited get with a deadline), or ends the loop
    for node in ast.walk(path[-1]):
        if isinstance(node, ast.Call) and (zero := _zero_wait(file, node)) is not None:
            return zero
    return None


def polling_lines(file: str) -> list[tuple[int, int]]:
    """(line, the zero's line) of every polling call of `file` (`polling_call`)."""
    tree = _tree(file)
    if tree is None:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in QUEUE_CALLS | NOWAIT_CALLS:
            zero = polling_call(file, node.lineno)
            if zero is not None:
                found.append((node.lineno, zero))
    return sorted(set(found))


def _zero_wait(file: str, call: ast.Call) -> int | None:
    if not isinstance(call.func, ast.Attribute):
        return None
    name = call.func.attr
    if name in NOWAIT_CALLS:
        return call.lineno
    if name not in QUEUE_CALLS:
        return None
    for k in call.keywords:
        if k.arg == "block" and isinstance(k.value, ast.Constant) and k.value.value is False:
            return call.lineno
        if k.arg == "timeout":
            return _zero_at(file, k.value, call.lineno)
    return None


def _zero_at(file: str, value: ast.expr, line: int) -> int | None:
    """The line where `value` is 0: the expression itself, or (`self.x` / a parameter `x`) the
    default of the parameter it was set from."""
    if isinstance(value, ast.Constant):
        return line if type(value.value) in (int, float) and value.value == 0 else None
    name = value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else None
    tree = _tree(file)
    if name is None or tree is None:
        return None
    for fdef in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        args = fdef.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
        for arg, default in pairs:
            if arg.arg == name and isinstance(default, ast.Constant) \
                    and type(default.value) in (int, float) and default.value == 0:
                return default.lineno
    return None
