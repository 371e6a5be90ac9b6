"""A fixed, seeded subset of benchmarks/fuzz.py on every test run: a few hundred hostile and broken
traces (Hypothesis documents, hostile events in real traces, byte and gzip mutations, small gzip
bombs, odd paths and folders), each run through `torchneck analyze` in its own process (or the
CLI) under a time limit. The contract: rc 0, or rc 2 with one line; never a traceback, a hang, a
report.json that is not strict JSON, or more than 300 MB.

The full run (>= 10,000 cases, 8 GB bombs) is `python benchmarks/fuzz.py`.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import fuzz  # noqa: E402

SUBSET = 300
SEED = 20261124
SMALL_BOMB_BYTES = 96 << 20
"""The subset's gzip bombs expand to this (the full run's to 8 GB): enough to be many blocks."""
CLI_SHARE = 0.04
"""A few through the real CLI (a second each), the rest by its `main` in a forked process."""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cases = fuzz.generate(SUBSET, SEED, SMALL_BOMB_BYTES, tmp_path_factory.mktemp("bombs"), cli_share=CLI_SHARE)
    return cases, fuzz.run_cases(cases, jobs=2, time_limit=fuzz.TIME_LIMIT_S)


def test_the_seeded_subset_keeps_the_contract(results):
    cases, done = results
    assert len(done) == len(cases) == SUBSET
    broken = [r for r in done if r.outcome in ("crash", "hang")]
    assert not broken, "\n".join(f"{r.name} ({r.mode}): {r.outcome}: {r.detail}" for r in broken[:20])
    heavy = [r for r in done if r.rss_mb > fuzz.RSS_LIMIT_MB]
    assert not heavy, [(r.name, round(r.rss_mb)) for r in heavy]


def test_the_subset_reaches_the_analyses_and_every_family(results):
    """Not a subset that is merely refused: most inputs keep something readable and are analysed
    (rc 0), every family and both ways of running are exercised, and the refusals are one line
    that names the file."""
    cases, done = results
    outcomes = Counter(r.outcome for r in done)
    assert outcomes["ok"] > SUBSET // 3 and outcomes["refused"] > SUBSET // 10, outcomes
    assert {c.family for c in cases} == set(fuzz.FAMILIES)
    assert {r.mode for r in done} == {"process", "cli"}
    by_family = Counter(r.family for r in done if r.outcome == "ok")
    assert by_family["inject"] and by_family["bytes"] and by_family["gzip"] and by_family["structured"], by_family
    measured = [r.rss_mb for r in done if r.rss_mb]
    assert len(measured) > SUBSET * 0.9  # the memory bound is checked on nearly every case


def test_the_judge_sees_each_way_of_breaking_the_contract(tmp_path):
    """The harness itself: a traceback, a second line, another exit code, a non-strict report
    and a report that is fine are told apart."""
    case = fuzz.Case("judge", "special")
    (tmp_path / "out").mkdir()
    report = tmp_path / "out" / "report.json"
    report.write_text('{"findings": []}')
    assert fuzz.judge(case, tmp_path, 0, "")[0] == "ok"
    assert fuzz.judge(case, tmp_path, 2, "torchneck: x.json: the file is empty\n")[0] == "refused"
    assert fuzz.judge(case, tmp_path, 2, "torchneck: a\ntorchneck: b\n")[0] == "crash"
    assert fuzz.judge(case, tmp_path, None, "Traceback (most recent call last):\n  ...\nValueError: x\n")[0] == "crash"
    assert fuzz.judge(case, tmp_path, 0, "RuntimeWarning: invalid value\n")[0] == "crash"
    assert fuzz.judge(case, tmp_path, 139, "")[0] == "crash"
    report.write_text('{"x": NaN}')
    assert fuzz.judge(case, tmp_path, 0, "")[0] == "crash"
