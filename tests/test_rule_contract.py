"""The contract every rule keeps: one shape, one kind, documented, and tested both ways."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
from rule_cases import CASES

from torchneck.diagnose.distributed_rules import JOB_RULES
from torchneck.diagnose.docs import main as docs_main
from torchneck.diagnose.docs import thresholds
from torchneck.diagnose.engine import all_rules
from torchneck.diagnose.rule import RULES, Rule
from torchneck.model.base import Record

HERE = Path(__file__).resolve().parent


def _load_cases() -> dict[str, dict[str, list[str]]]:
    for module in sorted(HERE.glob("test_rules_*.py")):
        importlib.import_module(module.stem)
    return CASES


@pytest.mark.parametrize("rule", [*all_rules(), *JOB_RULES], ids=lambda r: type(r).__name__)
def test_every_rule_fires_in_one_case_and_stays_silent_in_another(rule):
    cases = _load_cases().get(rule.kind, {})
    assert cases.get("fires"), f"{type(rule).__name__} ({rule.kind}): no @fires case in tests/test_rules_*.py"
    assert cases.get("silent"), f"{type(rule).__name__} ({rule.kind}): no @silent case in tests/test_rules_*.py"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
def test_every_registered_rule_has_the_one_shape(rule):
    cls = type(rule)
    assert isinstance(rule, Rule)
    assert cls.kind and cls.summary and cls.docs.startswith("https://"), cls
    assert inspect.getdoc(cls) and inspect.getdoc(cls) != inspect.getdoc(Rule), f"{cls.__name__}: no docstring"
    assert issubclass(cls.evidence_type, Record), cls
    assert cls.check is not Rule.check and cls.fix is not Rule.fix, cls
    for name, _, reason in thresholds(rule):  # a named threshold says why (the docstring under it)
        assert len(reason) > 20, f"{cls.__name__}.{name}: no reason given under the constant"


def test_kinds_are_unique():
    kinds = [r.kind for r in RULES]
    assert len(kinds) == len(set(kinds))


def test_rules_reference_is_generated_from_the_rules():
    """docs/rules.md is what `python -m torchneck.diagnose.docs` writes: regenerate it after a change."""
    assert docs_main(["--check"]) == 0
