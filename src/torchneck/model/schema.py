"""docs/report.schema.json, generated from the report's types (never written by hand).

    python -m torchneck.model.schema            # rewrite docs/report.schema.json
    python -m torchneck.model.schema --check    # exit 1 when it is out of date

The schema is msgspec's JSON Schema of `Report`, plus what the types alone cannot say: a
finding's `kind` is one of the registered rules' kinds, and its `evidence` follows that rule's
evidence type (docs/rules.md describes each field).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from .report import SCHEMA_VERSION, Report

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "docs" / "report.schema.json"
SCHEMA_ID = "https://github.com/torchneck/torchneck/blob/main/docs/report.schema.json"


def report_schema() -> dict[str, Any]:
    from ..diagnose.distributed_rules import JOB_RULES
    from ..diagnose.engine import all_rules
    from ..diagnose.rule import RULES

    rules = list(RULES)  # registered rules: one kind each, so a kind names its evidence type
    evidence_types = list(dict.fromkeys(r.evidence_type for r in rules))
    (report, *evidence), defs = msgspec.json.schema_components([Report, *evidence_types],
                                                                ref_template="#/$defs/{name}")
    ref_of = dict(zip(evidence_types, evidence))
    finding = defs["Finding"]
    kinds = sorted({r.kind for r in [*all_rules(), *JOB_RULES]} | {"internal"})
    finding["properties"]["kind"] = {"enum": kinds}
    finding["allOf"] = [{"if": {"properties": {"kind": {"const": r.kind}}, "required": ["kind"]},
                         "then": {"properties": {"evidence": ref_of[r.evidence_type]}}} for r in rules]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"torchneck report (schema_version {SCHEMA_VERSION})",
        "description": "report.json written by torchneck run/compile/analyze/report/diff/bisect. Generated from "
                       "src/torchneck/model/ by `python -m torchneck.model.schema`; see docs/report-schema.md.",
        **report,
        "$defs": dict(sorted(defs.items())),
    }


def render() -> str:
    return json.dumps(report_schema(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/report.schema.json is out of date")
    ns = ap.parse_args(argv)
    text = render()
    if ns.check:
        if not SCHEMA_PATH.exists() or SCHEMA_PATH.read_text() != text:
            print(f"{SCHEMA_PATH} is out of date: run python -m torchneck.model.schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text)
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
