"""Self-contained HTML report: one file, no network, scripts and styles inlined.

The findings (verdict, evidence, the user's code with context, the fix) are rendered here, in
Python, with every string escaped: they must be readable even with scripts disabled. Charts and
tables (step breakdown, one step's timeline, sortable op/kernel tables, the flame graph of the
sampled Python stacks, memory over time) are drawn in the browser by `assets/report.js` from the
report's data, embedded as JSON; the script only ever inserts text with `textContent`, so a name
from someone else's trace (`<img onerror=...>`) shows as text.
"""

from __future__ import annotations

import html
import json
import linecache
import os
from importlib import resources

from ..model.base import to_builtins, to_json
from ..model.diff import DiffSection
from ..model.findings import Finding
from ..model.report import Report
from .console import saving_text
from .environment import environment_lines
from .tables import render_html as render_tables_html

SEVERITY_CLASSES = ("high", "medium", "low", "info")
CODE_CONTEXT_LINES = 3
"""Lines shown above and below each finding's line of user code."""


def _asset(name: str) -> str:
    return resources.files("torchneck.report").joinpath("assets").joinpath(name).read_text(encoding="utf-8")


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def embed_json(data) -> str:
    """JSON safe inside a <script> element: no `</script>`, no `<!--`, no U+2028 surprises."""
    text = to_json(data).decode()  # strict JSON: NaN and infinities are null
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def code_context(file: str, line: int, around: int = CODE_CONTEXT_LINES,
                 base: str | None = None) -> list[tuple[int, str]]:
    """(number, text) of the lines around `line` in `file` (a relative name read from `base`, the
    directory the script ran in, when it is there), or [] when the file is not readable."""
    if not file or not line or line < 1:
        return []
    if base and not os.path.isabs(file) and os.path.isfile(os.path.join(base, file)):
        file = os.path.join(base, file)
    lines = linecache.getlines(file)
    if not lines or line > len(lines):
        return []
    lo, hi = max(1, line - around), min(len(lines), line + around)
    return [(n, lines[n - 1].rstrip("\n")) for n in range(lo, hi + 1)]


class HtmlRenderer:
    """report dict -> one HTML page (str)."""

    _base: str | None = None  # the directory the script ran in: its relative file names are from there

    def render(self, report: Report, title: str | None = None) -> str:
        title = title or self._title(report)
        self._base = report.run.target.cwd if report.run else None
        data = {k: to_builtins(getattr(report, k)) for k in ("kind", "findings", "ranks", "ops_by_line", "views",
                                                                 "python", "diff", "distributed")}
        data["run_phases"] = report.run.phases if report.run else None
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(title)}</title>",
            f"<style>{_asset('report.css')}</style>",
            "</head><body>",
            f"<header><h1>{_e(title)}</h1>{self._run_line(report)}</header>",
            f'<section id="verdict"><p>{_e(report.verdict)}</p></section>',
            self._diff(report.diff),
            self._findings(report.findings),
            self._compile(report.compile),
            render_tables_html(report),
            '<section id="charts">',
            '<h2>Step time</h2><div id="step-chart" class="chart"></div>',
            '<h2>A typical step</h2><div id="timeline" class="chart"></div>',
            '<h2>Python, sampled (flame graph)</h2><div id="flame" class="chart"></div>',
            '<h2>Memory</h2><div id="memory" class="chart"></div>',
            "</section>",
            '<section id="tables"><h2>Tables</h2>'
            '<input id="table-filter" type="search" placeholder="filter rows…" aria-label="filter rows">'
            '<div id="table-area"></div></section>',
            self._warnings(report.warnings),
            f'<footer>torchneck {_e(report.tool.version)} · report schema {_e(report.schema_version)}</footer>',
            f'<script id="torchneck-data" type="application/json">{embed_json(data)}</script>',
            f"<script>{_asset('report.js')}</script>",
            "</body></html>",
        ]
        return "\n".join(parts)

    @staticmethod
    def _title(report: Report) -> str:
        if report.run:
            return f"torchneck: {report.run.target.module or report.run.target.script or 'run'}"
        if report.kind == "diff":
            return "torchneck diff"
        return f"torchneck: {report.ranks[0].trace.path}" if report.ranks else "torchneck report"

    @staticmethod
    def _run_line(report: Report) -> str:
        run = report.run
        if not run:
            return ""
        args = " ".join(run.target.args)
        text = f"args: {args} · " if args else ""
        text += f"exit code {run.exit_code} · wall {run.wall_s or 0:.2f} s · cpu {run.cpu_s or 0:.2f} s"
        out = f'<p class="run">{_e(text)}</p>'
        out += "".join(f'<p class="run env">{_e(line)}</p>' for line in environment_lines(report.env))
        summary = (report.capture or {}).get("summary")
        if summary:  # what was measured, over what span, and why
            out += f'<p class="run">{_e(summary)}</p>'
        if run.error:
            out += f'<p class="error">The script did not finish normally: {_e(run.error)}</p>'
        return out

    def _findings(self, findings: list[Finding]) -> str:
        if not findings:
            return '<section id="findings"><h2>Findings</h2><p>No findings.</p></section>'
        items = [self._finding(i, f) for i, f in enumerate(findings, 1)]
        return '<section id="findings"><h2>Findings</h2>' + "".join(items) + "</section>"

    def _finding(self, number: int, f: Finding) -> str:
        sev_class = f.severity if f.severity in SEVERITY_CLASSES else "info"
        head = (f'<div class="finding-head"><span class="sev sev-{sev_class}">{_e(f.severity)}</span>'
                f'<span class="kind">{_e(f.kind)}</span>'
                + (f'<span class="kind">rank {_e(f.rank)}</span>' if f.rank is not None else "") +
                f'<span class="title">{number}. {_e(f.title)}</span>'
                f'<span class="lost">{_e(saving_text(f)) if f.saving_s else ""}</span></div>')
        body = []
        for w in f.where[:3]:
            loc = f"{w.file}:{w.line}" + (f" in {w.function}" if w.function else "")
            ctx = code_context(w.file, w.line, base=self._base)
            code = "".join(
                f'<span class="ln{" hit" if n == w.line else ""}"><span class="no">{n}</span>{_e(text)}</span>'
                for n, text in ctx)
            body.append(f'<div class="where"><div class="loc">{_e(loc)}</div>'
                        + (f"<pre class=\"code\">{code}</pre>" if code else "") + "</div>")
        if f.ops:
            body.append('<div class="ops">ops: ' + ", ".join(f"<code>{_e(o)}</code>" for o in f.ops[:8]) + "</div>")
        body.append(f'<div class="fix"><b>Fix:</b> {_e(f.fix)}</div>')
        if f.evidence:
            rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_short_value(v))}</td></tr>" for k, v in f.evidence.items())
            body.append(f'<details class="evidence"><summary>evidence</summary><table>{rows}</table></details>')
        if f.saving_basis:
            body.append(f'<div class="basis">saving estimated from {_e(f.saving_basis)}</div>')
        if f.symptoms:
            body.append('<div class="symptoms"><b>Explains:</b><ul>' + self._symptoms(f.symptoms) + "</ul></div>")
        if f.docs:
            body.append(f'<div class="docs"><a href="{_e(f.docs)}" rel="noreferrer">docs</a></div>')
        return f'<article class="finding sev-{sev_class}">{head}{"".join(body)}</article>'

    def _symptoms(self, symptoms: list[Finding]) -> str:
        """A cause's symptoms, nested: the kind, the title and the seconds the cause explains."""
        items = []
        for s in symptoms:
            share = f" ({s.explained_s:.3g} of its {s.time_lost_s:.3g} s)" if s.explained_s is not None else ""
            inner = f"<ul>{self._symptoms(s.symptoms)}</ul>" if s.symptoms else ""
            items.append(f'<li><span class="kind">{_e(s.kind)}</span> {_e(s.title)}{_e(share)}{inner}</li>')
        return "".join(items)

    @staticmethod
    def _diff(diff: DiffSection | None) -> str:
        """For `torchneck diff`: the findings' changes from A to B, before B's own findings."""
        if not diff:
            return ""
        rows = "".join(
            f'<tr class="diff-{_e(f.status)}"><td>{_e(f.status)}</td><td>{_e(f.kind)}</td>'
            f'<td>{_e(f.title)}</td><td>{_e(f.where)}</td>'
            f'<td class="num">{_ms_or_dash(f.a_ms)}</td><td class="num">{_ms_or_dash(f.b_ms)}</td>'
            f'<td>{_e(f.unit)}</td></tr>'
            for f in diff.findings)
        return (f'<section id="diff"><h2>A → B</h2><p class="run">A: {_e(diff.a.label)}<br>'
                f'B: {_e(diff.b.label)}</p>'
                '<table class="data"><thead><tr><th>status</th><th>kind</th><th>finding</th><th>where</th>'
                f'<th>A</th><th>B</th><th>unit</th></tr></thead><tbody>{rows}</tbody></table>'
                "<p class=\"run\">Below: B's findings, charts and tables.</p></section>")

    @staticmethod
    def _compile(comp: dict | None) -> str:
        """torch.compile per compiled graph: where, ops, guards (readable list), compile seconds by
        stage, cache, the break that ended it or why it was recompiled, and links to the code torch
        generated for it (files under the run folder's graphs/, next to this page)."""
        if not comp or not comp.get("present"):
            return ""
        graphs = [g for g in comp.get("graphs") or [] if g.get("op_count")]
        rows = []
        for g in graphs:
            ts = g["time_s"]
            stages = " · ".join(f"{k} {ts[k]:.2f}" for k in ("dynamo", "aot", "inductor", "codegen") if ts.get(k))
            why = ""
            if g.get("recompile_reason"):
                why = "recompiled: " + g["recompile_reason"]["what"]
            elif g.get("ended_by_break"):
                b = g["ended_by_break"]
                why = f"graph break at line {b['line']}: {b['reason']}"
            links = " ".join(f'<a href="{_e(path)}">{_e(name)}</a>' for name, path in (g.get("files") or {}).items())
            guards = g.get("guards") or {}
            checks = "".join(f"<li>{_e(x)}</li>" for x in guards.get("checks") or [])
            more = f"<li>… {guards['not_shown']} more (guards file)</li>" if guards.get("not_shown") else ""
            guard_cell = (f"<details><summary>{_e(guards.get('count', 0))}</summary><ul>{checks}{more}</ul></details>"
                          if guards else "")
            where = f"{g['function']}() {g['file']}:{g['resumes_after_line'] or g['line']}"
            if g.get("resumes_after_line"):
                where += " (resumed after a graph break)"
            kernels = ", ".join(g.get("kernels") or [])
            fallbacks = ", ".join(f"{k} ×{v}" for k, v in (g.get("fallbacks") or {}).items())
            rows.append(
                f'<tr id="graph-{_e(g["id"].replace("/", "-"))}"><td>{_e(g["id"])}</td><td>{_e(where)}</td>'
                f'<td class="num">{_e(g["op_count"])}</td><td>{guard_cell}</td>'
                f'<td class="num">{ts["total"]:.2f}</td><td>{_e(stages)}</td><td>{_e(g.get("cache") or "")}</td>'
                f'<td>{_e(why)}</td><td>{_e(kernels)}'
                + (f"<br><small>ATen fallbacks: {_e(fallbacks)}</small>" if fallbacks else "")
                + f'</td><td>{links}</td></tr>')
        table = ('<table class="data" id="compiled-graphs"><thead><tr><th>graph</th><th>code</th><th>ops</th>'
                 '<th>guards</th><th>compile s</th><th>by stage (s)</th><th>cache</th><th>ends / recompiled because'
                 '</th><th>generated kernels</th><th>generated code</th></tr></thead><tbody>'
                 + "".join(rows) + "</tbody></table>") if rows else "<p>No compiled graph with ops.</p>"
        t = comp["time_s"]
        return (f'<section id="compile"><h2>torch.compile</h2><p class="run">{t["total"]:.2f} s compiling '
                f'(dynamo {t["dynamo"]:.2f}, AOT {t["aot"]:.2f}, inductor {t["inductor"]:.2f}, codegen '
                f'{t["codegen"]:.2f}); {len(graphs)} graph(s)</p>{table}</section>')

    @staticmethod
    def _warnings(warnings: list[str]) -> str:
        if not warnings:
            return ""
        items = "".join(f"<li>{_e(w)}</li>" for w in warnings)
        return f'<section id="warnings"><h2>Warnings</h2><ul>{items}</ul></section>'


def _ms_or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _short_value(value, limit: int = 400) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_html(report: Report) -> str:
    return HtmlRenderer().render(report)
