"""Python API: profile a block of code, or analyse traces, from a script or a notebook.

    import torchneck
    with torchneck.profile() as p:
        train(model, loader)
    p.report()            # renders as HTML in Jupyter, as the terminal report elsewhere

    torchneck.analyze("trace.json.gz")

Same capture, analyses and findings as `torchneck run`; the evidence goes into a run directory
(`p.run_dir`) that `torchneck report` / `diff` read like any other.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .capture.runner import Outcome, Target
from .capture.window import WindowOptions

if TYPE_CHECKING:
    from .capture.session import CaptureSession
    from .model.report import Report as TypedReport


class Report(dict):
    """A report (the dict of report.json) that shows itself: HTML in Jupyter, text in a terminal.
    `typed` is the same report as torchneck's own `model.report.Report`."""

    def __init__(self, typed: TypedReport) -> None:
        from .model.base import to_builtins

        super().__init__(to_builtins(typed))
        self.typed = typed

    @property
    def findings(self) -> list[dict]:
        return self["findings"]

    def _repr_html_(self) -> str:
        from .report.html import render_html

        return render_html(self.typed)

    def __str__(self) -> str:
        from .report.console import render_text

        return render_text(self.typed)

    def __repr__(self) -> str:
        n = len(self.get("findings") or [])
        return f"<torchneck report ({self.get('kind')}): {n} finding(s); {self.get('verdict', '')[:120]}>"


class profile:  # noqa: N801  (a context manager used like a function, as torch.profiler.profile)
    """Profile the `with` block: Python sampler, step clocks and a windowed torch.profiler, as
    `torchneck run` does for a whole script. `report()` analyses it once the block has ended."""

    def __init__(self, out: str | None = None, *, warmup: int = 3, steps: int = 5,
                 duration: float | None = None, all: bool = False, record_shapes: bool = True,
                 profile_memory: bool = True) -> None:
        self.options = WindowOptions(warmup=warmup, steps=steps, duration=duration, all=all,
                                     record_shapes=record_shapes, profile_memory=profile_memory)
        self.out = out
        self.run_dir: Path | None = None
        self._session: CaptureSession | None = None
        self._report: Report | None = None

    def __enter__(self) -> profile:
        from .capture.session import CaptureSession, make_run_dir

        if self._session is not None:
            raise RuntimeError("torchneck.profile() is not reentrant: use a new one per block")
        caller = sys._getframe(1).f_code.co_filename
        self._target = Target(script=Path(caller).resolve() if Path(caller).exists() else None,
                              module=None if Path(caller).exists() else "<block>")
        self.run_dir = make_run_dir(self.out, "block")
        self._session = CaptureSession(self.run_dir, self.options)
        self._session.begin()
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if exc_type is None:
            outcome = Outcome(0, "ok")
        else:
            outcome = Outcome(1, "exception", f"{exc_type.__name__}: {exc}",
                              "".join(traceback.format_exception(exc_type, exc, tb)))
        assert self._session is not None
        self._session.end(outcome, self._target)
        return False  # the block's exception, if any, goes on

    def report(self) -> Report:
        """Analyse the block (once) and write report.json/.txt/.html into the run directory."""
        if self.run_dir is None or not (self.run_dir / "run.json").exists():
            raise RuntimeError("call report() after the `with torchneck.profile()` block has ended")
        if self._report is None:
            from .pipeline import write_run_report

            self._report = Report(write_run_report(self.run_dir))
        return self._report


def analyze(*paths: str, rank: int | None = None, sort_by: str | None = None, row_limit: int | None = None,
            group_by_shape: bool = False, group_by_stack: int | None = None, workers: int | None = None,
            scheduler: str | None = None) -> Report:
    """Diagnose existing profiler traces (files, directories or fsspec URLs), as `torchneck
    analyze` does. `sort_by`, `row_limit`, `group_by_shape`, `group_by_stack`: the key_averages
    table's options (`torchneck analyze --sort-by ...`); the table is
    `report["ranks"][0]["key_averages"]`, and printing the report shows it when one of them is
    given. `workers`/`scheduler` as its `--workers`/`--scheduler` (Dask)."""
    from .analysis.key_averages import TableOptions
    from .pipeline import report_from_traces

    tables = TableOptions.make(sort_by, row_limit, group_by_shape, group_by_stack)
    return Report(report_from_traces([str(p) for p in paths], rank, tables=tables, workers=workers,
                                     scheduler=scheduler))
