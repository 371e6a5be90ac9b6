"""hook_pileup: hooks registered again at every pass and never removed (capture/hook_sites.py
counts them on real torch objects; diagnose/rules/hooks.py reads the counts and the samples)."""

from __future__ import annotations

import time

import pytest
import torch
from rule_cases import analysis, facts, fires, silent

from torchneck.capture.hook_sites import WAVE_GAP_NS, HookSites
from torchneck.diagnose.rules.hooks import HookPileUp

STEP_GAP_S = 2 * WAVE_GAP_NS / 1e9  # a pause between the "steps" that tells their passes apart


@pytest.fixture
def sites():
    s = HookSites()
    s.install()
    try:
        yield s
    finally:
        s.uninstall()


def _record(sites: HookSites, method: str) -> dict:
    [rec] = [r for r in sites.records() if r["method"] == method]
    return rec


def test_hooks_registered_on_the_same_parameters_at_every_step_pile_up(sites):
    model = torch.nn.Linear(4, 4)
    for _ in range(5):
        for p in model.parameters():
            p.register_hook(lambda g: g)
        time.sleep(STEP_GAP_S)
    rec = _record(sites, "register_hook")
    assert (rec["registrations"], rec["targets"], rec["most_live"], rec["most_passes"]) == (10, 2, 5, 5)
    assert rec["file"] == __file__ and rec["function"].endswith("pile_up")
    assert rec["hook"]["function"].endswith("<lambda>")


def test_removed_hooks_dead_targets_and_a_setup_loop_do_not_pile_up(sites):
    model = torch.nn.Linear(4, 4)
    for probe in (lambda m, i, o: None, lambda m, i, o: None, lambda m, i, o: None):  # three at once: one pass
        model.register_forward_hook(probe)
    for _ in range(4):
        handle = model.weight.register_hook(lambda g: g)
        handle.remove()  # attached and removed at every step
        loss = model(torch.randn(2, 4)).sum()
        loss.register_hook(lambda g: g)  # a fresh tensor each step: its hooks die with it
        del loss
        time.sleep(STEP_GAP_S)
    forward = _record(sites, "register_forward_hook")
    assert forward["most_live"] == 3 and forward["most_passes"] == 1
    by_line = {r["line"]: r for r in sites.records() if r["method"] == "register_hook"}
    removed, fresh = sorted(by_line.values(), key=lambda r: r["line"])
    assert removed["removed"] == 4 and removed["most_live"] == 1
    assert fresh["most_live"] == 1
    assert HookPileUp().check(facts(call_sites=sites.records())) == []


def test_uninstall_restores_torchs_own_methods():
    originals = (torch.Tensor.register_hook, torch.nn.Module.register_forward_hook)
    s = HookSites()
    s.install()
    assert torch.Tensor.register_hook is not originals[0]
    s.uninstall()
    assert (torch.Tensor.register_hook, torch.nn.Module.register_forward_hook) == originals


def _site(copies: int, passes: int, **extra) -> dict:
    return {"what": "hook_registrations", "file": "train.py", "line": 21, "function": "Monitor.attach",
            "caller": {"file": "train.py", "line": 38, "function": "main"}, "method": "register_hook",
            "hook": {"file": "/src/train.py", "function": "Monitor.hook_for.<locals>.hook", "line": 15},
            "registrations": copies * 10, "removed": 0, "targets": 10, "most_live": copies,
            "most_passes": passes, **extra}


def _samples(hook_s: float, total: float) -> dict:
    return {"window": {"sampled_s": total, "lines": [], "functions": [
        {"file": "train.py", "function": "Monitor.hook_for.<locals>.hook", "line": 16, "total_s": hook_s},
        {"file": "train.py", "function": "main", "line": 40, "total_s": total}]}}


@fires("hook_pileup")
def test_hook_pileup_saving_is_the_hooks_time_less_one_copy_a_pass():
    f = facts(analysis=analysis(window_us=1_000_000), call_sites=[_site(copies=99, passes=99)],
              python=_samples(hook_s=8.0, total=10.0))
    [finding] = HookPileUp().check(f)
    assert finding.kind == "hook_pileup" and finding.severity == "high"
    # 80 % of the steady state in the copies, averaging 50 a pass: all but 1/50 of it goes
    assert finding.time_lost_s == pytest.approx(0.8 * (1 - 2 / 100))
    assert finding.evidence["copies"] == 99 and finding.evidence["hook_s"] == 8.0
    assert "register_hook" in finding.fix and "handle" in finding.fix


@fires("hook_pileup")
def test_hook_pileup_without_sampled_hook_time_is_low_and_unmeasured():
    [finding] = HookPileUp().check(facts(call_sites=[_site(copies=5, passes=5)]))
    assert finding.severity == "low" and finding.confidence == "unmeasured" and finding.time_lost_s == 0.0


@silent("hook_pileup")
def test_hook_pileup_silent_for_several_hooks_attached_in_one_pass_or_re_attached_once():
    f = facts(analysis=analysis(), call_sites=[_site(copies=12, passes=1), _site(copies=2, passes=2)],
              python=_samples(hook_s=8.0, total=10.0))
    assert HookPileUp().check(f) == []
