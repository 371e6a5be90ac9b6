"""Hooks that pile up: registered on the same tensor or module at every pass and never removed,
read from the registrations counted during the run (capture/hook_sites.py) and the sampled time
of the hook function."""

from __future__ import annotations

import ast
import os

from ...model.base import Record
from ...model.findings import Finding
from ..facts import Facts, where_of
from ..rule import Explanation, Rule, register
from ..source import LOOPS, enclosing


class HookPileUpEvidence(Record):
    method: str
    """The registration called: register_hook, register_forward_hook, ..."""
    registrations: int
    """Calls of that line over the run."""
    targets: int
    """Distinct tensors or modules it registered on."""
    copies: int
    """The most copies of the line's hook live on one target at once (registered, not removed)."""
    passes: int
    """The most separate passes (steps, closure calls) that registered on one target."""
    removed: int
    """Handles of the line's hooks removed."""
    registering_function: str
    """The function whose line calls the registration."""
    called_from: str
    """Its caller, when the caller's line runs at every pass and is the one to change (else "")."""
    hook_function: str
    """The hook's function (`file:function`), empty when it is not Python."""
    hook_s: float
    """Sampled seconds in the hook function (every copy) over the steady state."""
    sampled_s: float
    """All sampled seconds of the steady state."""


@register
class HookPileUp(Rule[HookPileUpEvidence]):
    """A hook registered again at every step (or every closure call, every batch) on the same
    parameters or modules, and never removed: `register_hook` on a parameter returns a handle and
    adds one more copy of the hook each time, so pass k runs k copies and the hooks' time grows
    quadratically over the run while every copy computes the same thing. A profiled window of
    early steps sees a few copies; the step time keeps growing after it.

    Time lost: the hook function's sampled share of the steady state (every copy's time), less
    what one copy a pass would take. Copies grew by one a pass to `copies`, so a pass ran
    (copies + 1) / 2 of them on average: the saving is the share x (1 - 2 / (copies + 1)),
    applied to the window."""

    kind = "hook_pileup"
    summary = "A hook registered again at every step on the same tensors or modules, never removed: a copy more a pass."
    docs = "https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html"
    evidence_type = HookPileUpEvidence
    saving_basis = ("the hook function's sampled time over the steady state, less one copy a pass (copies grew by "
                    "one a pass)")
    explains = ("op_hotspot", "python_hotspot", "dispatch_overhead", "step_time_growth")
    MIN_COPIES = 3
    """Copies live on one target, registered in as many separate passes: one extra copy can be a
    re-attach by design (a hook replaced once); three from three passes is a pile."""

    def check(self, facts: Facts) -> list[Finding]:
        win = (facts.python or {}).get("window") or {}
        total = win.get("sampled_s") or 0.0
        out = []
        for site in facts.sites_of("hook_registrations"):
            copies, passes = site.get("most_live") or 0, site.get("most_passes") or 0
            if min(copies, passes) < self.MIN_COPIES:
                continue
            hook = site.get("hook") or {}
            hook_s = _sampled_function_s(win, hook)
            share = hook_s / total * (1 - 2 / (copies + 1)) if total > 0 else 0.0
            lost = share * facts.window_s
            name = f"{os.path.basename(hook['file'])}:{hook['function']}" if hook.get("function") else ""
            caller = site.get("caller") or {}
            per_pass = bool(caller) and _called_once_a_pass(site, site.get("targets") or 0)
            ev = HookPileUpEvidence(method=site.get("method") or "register_hook",
                                    registrations=site.get("registrations") or 0, targets=site.get("targets") or 0,
                                    copies=copies, passes=passes, removed=site.get("removed") or 0,
                                    registering_function=site.get("function") or "",
                                    called_from=(caller.get("function") or "") if per_pass else "",
                                    hook_function=name, hook_s=hook_s, sampled_s=total)
            what = "tensor" if ev.method.startswith("register_hook") or "accumulate" in ev.method else "module"
            piled = (f"up to {copies} copies of the hook on one {what}, never removed ({ev.registrations} "
                     f"registrations on {ev.targets} {what}{'s' if ev.targets != 1 else ''})")
            if per_pass:
                title = (f"{ev.called_from}() calls {ev.registering_function}() at every pass (line "
                         f"{caller.get('line')}), which registers its hook again ({ev.method}): {piled}")
            else:
                title = f"{ev.registering_function}() registers a hook again at every pass ({ev.method}): {piled}"
            if hook_s > 0 and total > 0:
                title += f"; the copies take {100 * hook_s / total:.0f}% of the steady state"
            measured = hook_s > 0 and total > 0
            out.append(self.finding(ev, title=title, lost_s=lost, pct=facts.pct(lost),
                                    where=where_of([caller, site] if per_pass else [site, caller]),
                                    severity=None if measured else "low",
                                    confidence=None if measured else "unmeasured"))
        return out

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """The hook's ops and lines are the copies' time (a dominant op of the backward, the hook
        function's lines as a Python hotspot), and the steps' growth is the copies added."""
        hook = cause.evidence.get("hook_function") or ""
        if not hook or not symptom.where:
            return None
        file, _, function = hook.partition(":")
        if any(os.path.basename(w.file) == file and w.function == function for w in symptom.where[:1]) \
                or symptom.kind == "op_hotspot":
            return Explanation(min(symptom.time_lost_s, cause.time_lost_s))
        return None

    def fix(self, evidence: HookPileUpEvidence) -> str:
        once = f"{evidence.registering_function}()" if evidence.called_from else evidence.method
        return (f"Call {once} once, when the model is set up, and keep the handle(s) it returns; to attach per "
                "step, remove the previous hook first (handle.remove()). Every call adds another copy that runs at "
                "every pass until the tensor or module is freed.")


def _called_once_a_pass(site: dict, targets: int) -> bool:
    """Whether the registering line's function holds no loop over the passes, so the line to
    change is its caller's (a callback's `self.attach(model)` at every step): its loops, the
    comprehension on the line included, are at most the one over its targets."""
    path = enclosing(site["file"], site["line"])
    if not path:
        return False
    loops = sum(isinstance(s, LOOPS) and s.lineno != site["line"] for s in path)
    loops += any(isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) for n in ast.walk(path[-1]))
    return loops <= (1 if targets > 1 else 0)


def _sampled_function_s(win: dict, hook: dict) -> float:
    """The sampled seconds (calls below it included) of the hook's function."""
    if not hook.get("function"):
        return 0.0
    name, file = hook["function"], os.path.basename(hook.get("file") or "")
    return sum(f.get("total_s") or 0.0 for f in win.get("functions") or []
               if f.get("function") == name and os.path.basename(f.get("file") or "") == file)
