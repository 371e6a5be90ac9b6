"""The reports of every bundled trace and run directory equal their golden copies.

A refactoring must not change what users are told: findings, numbers, JSON. When a change of the
reports is intended, regenerate on purpose (`python tests/golden/regenerate.py`) and review the diff.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))
import regenerate  # noqa: E402

REL = 1e-9
"""Floats may differ in their last bits when a sum is taken in another order; more is a change. An
integer and a float of the same value are equal (JSON does not tell them apart)."""


def differences(a, b, path: str = "$") -> list[str]:
    """Where two decoded JSON documents differ (floats within `REL`), at most a few dozen places."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in the golden" for k in a.keys() - b.keys()]
        out += [f"{path}.{k}: not in the golden" for k in b.keys() - a.keys()]
        for k in sorted(a.keys() & b.keys()):
            out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = [f"{path}: {len(a)} items in the golden, {len(b)} now"] if len(a) != len(b) else []
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, f"{path}[{i}]")
        return out
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
                and math.isclose(a, b, rel_tol=REL, abs_tol=1e-12):
            return []
    elif a == b and type(a) is type(b):
        return []
    return [f"{path}: golden {a!r:.120}, now {b!r:.120}"]


@pytest.mark.parametrize("name,args,run_dir", regenerate.sources(), ids=[s[0] for s in regenerate.sources()])
def test_report_equals_golden(name, args, run_dir):
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    diff = differences(golden, regenerate.make_report(args, run_dir))
    assert not diff, f"{len(diff)} difference(s) from tests/golden/{name}.json:\n" + "\n".join(diff[:40])


def test_differences_sees_a_change():
    """The comparison itself: a renamed field, a changed number or kind, a dropped item are seen."""
    golden = {"findings": [{"kind": "host_sync", "time_lost_s": 0.5}], "n": 3}
    assert differences(golden, json.loads(json.dumps(golden))) == []
    assert differences(golden, {"findings": [{"kind": "host_sync", "time_lost_s": 0.5 * (1 + 1e-12)}], "n": 3}) == []
    assert differences(golden, {"findings": [{"kind": "host_sync", "time_lost_s": 0.51}], "n": 3})
    assert differences(golden, {"findings": [{"kind": "gpu_idle", "time_lost_s": 0.5}], "n": 3})
    assert differences(golden, {"findings": [{"kind": "host_sync", "time_lost": 0.5}], "n": 3})
    assert differences(golden, {"findings": [], "n": 3})
    assert differences(golden, {"findings": [{"kind": "host_sync", "time_lost_s": 0.5}], "n": "3"})


def test_report_schema_is_generated_from_the_types():
    """docs/report.schema.json is what `python -m torchneck.model.schema` writes."""
    from torchneck.model.schema import main

    assert main(["--check"]) == 0


@pytest.mark.parametrize("name", [s[0] for s in regenerate.sources()])
def test_golden_reports_decode_into_the_typed_report(name):
    """Every report.json decodes, strictly typed, into `Report`: what diff and the API read back."""
    import msgspec

    from torchneck.model.report import Report

    report = msgspec.json.decode((GOLDEN / f"{name}.json").read_bytes(), type=Report)
    assert report.schema_version == 1 and report.findings == sorted(report.findings, key=lambda f: f.severity == "info")
