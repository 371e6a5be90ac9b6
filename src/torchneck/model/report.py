"""The report: what every renderer (terminal, HTML, JSON) reads, and what report.json holds.

Every key is always present (null when a section does not apply to the report's kind), so a
reader never has to guess whether a missing key means "none" or "not computed". Sections
still marked `dict[str, Any]` are written by the capture and compile modules as plain JSON
(documented in docs/report-schema.md); the rest is typed here and in model/analysis.py.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .. import __version__
from .analysis import RankAnalysis
from .base import Record
from .diff import DiffSection
from .findings import Finding

SCHEMA_VERSION: Literal[1] = 1
"""report.json's format version: bumped only when a field changes meaning or disappears (new
fields are added within a version)."""

ReportKind = Literal["run", "compile", "analyze", "diff", "bisect"]


class Tool(Record):
    name: Literal["torchneck"] = "torchneck"
    version: str = __version__


class Target(Record):
    """What was run: a script or a module, with its arguments."""

    script: str | None = None
    module: str | None = None
    args: list[str] = []
    cwd: str | None = None


class RunSection(Record):
    """A live run (`torchneck run`): how the script ended and the phases of its wall time."""

    target: Target
    exit_code: int
    status: str
    wall_s: float
    error: str | None = None
    traceback: str | None = None
    cpu_s: float | None = None
    call_sites: list[dict[str, Any]] | None = None
    phases: dict[str, Any] | None = None
    run_dir: str | None = None


class OpLine(Record):
    """CPU ops' self time in the profiled steps by (op, the user's line that ran them): from
    `torchneck@` spans ("trace"), a with_stack trace's frames ("stack") or samples ("samples")."""

    op: str
    file: str
    line: int
    count: int
    self_us: float
    function: str = ""
    source: Literal["trace", "samples", "stack"] = "trace"


class Report(Record, kw_only=True):
    """One report of any kind: `run` and `compile` (a live run), `analyze` (traces), `diff`
    (two reports compared), `bisect` (torch.compile stages)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    tool: Tool = msgspec.field(default_factory=Tool)
    kind: ReportKind
    verdict: str
    findings: list[Finding] = []
    run: RunSection | None = None
    env: dict[str, Any] | None = None
    python: dict[str, Any] | None = None
    ops_by_line: list[OpLine] = []
    compile: dict[str, Any] | None = None
    ranks: list[RankAnalysis] = []
    warnings: list[str] = []
    views: dict[str, Any] | None = None
    diff: DiffSection | None = None
    distributed: dict[str, Any] | None = None
    bisect: dict[str, Any] | None = None
    capture: dict[str, Any] | None = None
    """A live run: what the profiler window covered, over what span, why, and what bounded it
    (`analysis/run.py: capture_summary`)."""
