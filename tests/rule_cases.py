"""Every registered rule has a case where it fires and one where it must stay silent.

A rule's tests live in tests/test_rules_<family>.py; the ones that show it firing and staying
silent are marked with `@fires(kind)` / `@silent(kind)` (they stay ordinary pytest tests).
tests/test_rule_contract.py imports every such module and fails for a rule without both.
Helpers here build the facts rules read, from the typed model with its defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchneck.diagnose.facts import Facts
from torchneck.model.analysis import Gpu, Ops, RankAnalysis, Steps

CASES: dict[str, dict[str, list[str]]] = {}
"""kind -> {"fires": [test names], "silent": [test names]}."""


def _mark(kind: str, outcome: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(test: Callable[..., Any]) -> Callable[..., Any]:
        CASES.setdefault(kind, {"fires": [], "silent": []})[outcome].append(test.__name__)
        return test

    return decorate


def fires(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Marks a test that shows the rule of `kind` firing (and checks what it reports)."""
    return _mark(kind, "fires")


def silent(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Marks a test that shows the rule of `kind` staying silent where it must."""
    return _mark(kind, "silent")


def analysis(window_us: float = 100_000.0, steps: int = 5, gpu: Gpu | None = None, **ops: Any) -> RankAnalysis:
    """An analysis of `steps` steps over `window_us`, with the given GPU section and ops fields."""
    return RankAnalysis(steps=Steps(source="ProfilerStep", count=steps, window_us=window_us),
                        gpu=gpu or Gpu(present=False), ops=Ops(**ops))


def facts(**fields: Any) -> Facts:
    return Facts(**fields)
