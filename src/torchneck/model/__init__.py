"""The typed contracts between torchneck's stages.

    capture/ -> trace/ -> analysis/ -> diagnose/ -> report/

Everything that crosses a stage boundary is a `msgspec.Struct` defined here: what an analysis of
one trace produces (`analysis.RankAnalysis`), a finding (`findings.Finding`), the report every
renderer reads (`report.Report`). One definition serves the code (a renamed field is an error the
type checker and the tests see), report.json (encoded from these types) and its JSON Schema
(generated from them: `python -m torchneck.model.schema`). See docs/architecture.md.
"""
