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
from importlib import resources

SEVERITY_CLASSES = ("high", "medium", "low", "info")
CODE_CONTEXT_LINES = 3
"""Lines shown above and below each finding's line of user code."""


def _asset(name: str) -> str:
    return resources.files("torchneck.report").joinpath("assets", name).read_text(encoding="utf-8")


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def embed_json(data) -> str:
    """JSON safe inside a <script> element: no `</script>`, no `<!--`, no U+2028 surprises."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, default=str)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def code_context(file: str, line: int, around: int = CODE_CONTEXT_LINES) -> list[tuple[int, str]]:
    """(number, text) of the lines around `line` in `file`, or [] when the file is not readable."""
    if not file or not line or line < 1:
        return []
    lines = linecache.getlines(file)
    if not lines or line > len(lines):
        return []
    lo, hi = max(1, line - around), min(len(lines), line + around)
    return [(n, lines[n - 1].rstrip("\n")) for n in range(lo, hi + 1)]


class HtmlRenderer:
    """report dict -> one HTML page (str)."""

    def render(self, report: dict, title: str | None = None) -> str:
        title = title or self._title(report)
        data = {k: report.get(k) for k in ("kind", "findings", "ranks", "ops_by_line", "views", "python", "diff",
                                           "distributed")}
        data["run_phases"] = (report.get("run") or {}).get("phases")
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(title)}</title>",
            f"<style>{_asset('report.css')}</style>",
            "</head><body>",
            f"<header><h1>{_e(title)}</h1>{self._run_line(report)}</header>",
            f'<section id="verdict"><p>{_e(report.get("verdict", ""))}</p></section>',
            self._diff(report.get("diff")),
            self._findings(report.get("findings") or []),
            '<section id="charts">',
            '<h2>Step time</h2><div id="step-chart" class="chart"></div>',
            '<h2>A typical step</h2><div id="timeline" class="chart"></div>',
            '<h2>Python, sampled (flame graph)</h2><div id="flame" class="chart"></div>',
            '<h2>Memory</h2><div id="memory" class="chart"></div>',
            "</section>",
            '<section id="tables"><h2>Tables</h2>'
            '<input id="table-filter" type="search" placeholder="filter rows…" aria-label="filter rows">'
            '<div id="table-area"></div></section>',
            self._warnings(report.get("warnings") or []),
            f'<footer>torchneck {_e((report.get("tool") or {}).get("version", ""))} · report schema '
            f'{_e(report.get("schema_version", ""))}</footer>',
            f'<script id="torchneck-data" type="application/json">{embed_json(data)}</script>',
            f"<script>{_asset('report.js')}</script>",
            "</body></html>",
        ]
        return "\n".join(parts)

    @staticmethod
    def _title(report: dict) -> str:
        run = report.get("run")
        if run:
            target = run.get("target") or {}
            return f"torchneck: {target.get('module') or target.get('script') or 'run'}"
        if report.get("kind") == "diff":
            return "torchneck diff"
        ranks = report.get("ranks") or []
        return f"torchneck: {ranks[0]['trace']['path']}" if ranks else "torchneck report"

    @staticmethod
    def _run_line(report: dict) -> str:
        run = report.get("run")
        if not run:
            return ""
        args = " ".join((run.get("target") or {}).get("args") or [])
        text = f"args: {args} · " if args else ""
        text += (f"exit code {run.get('exit_code')} · wall {run.get('wall_s') or 0:.2f} s · "
                 f"cpu {run.get('cpu_s') or 0:.2f} s")
        out = f'<p class="run">{_e(text)}</p>'
        if (report.get("capture") or {}).get("summary"):  # what was measured, over what span, and why
            out += f'<p class="run">{_e(report["capture"]["summary"])}</p>'
        if run.get("error"):
            out += f'<p class="error">The script did not finish normally: {_e(run["error"])}</p>'
        return out

    def _findings(self, findings: list[dict]) -> str:
        if not findings:
            return '<section id="findings"><h2>Findings</h2><p>No findings.</p></section>'
        items = [self._finding(i, f) for i, f in enumerate(findings, 1)]
        return '<section id="findings"><h2>Findings</h2>' + "".join(items) + "</section>"

    def _finding(self, number: int, f: dict) -> str:
        sev = f.get("severity", "info")
        sev_class = sev if sev in SEVERITY_CLASSES else "info"
        lost = f.get("time_lost_s") or 0.0
        pct = f.get("time_lost_pct") or 0.0
        head = (f'<div class="finding-head"><span class="sev sev-{sev_class}">{_e(sev)}</span>'
                f'<span class="kind">{_e(f.get("kind", ""))}</span>'
                + (f'<span class="kind">rank {_e(f["rank"])}</span>' if f.get("rank") is not None else "") +
                f'<span class="title">{number}. {_e(f.get("title", ""))}</span>'
                f'<span class="lost">{lost * 1e3:.1f} ms lost · {pct:.1f}%</span></div>')
        body = []
        for w in (f.get("where") or [])[:3]:
            loc = f"{w.get('file')}:{w.get('line')}" + (f" in {w.get('function')}" if w.get("function") else "")
            ctx = code_context(w.get("file") or "", int(w.get("line") or 0))
            code = "".join(
                f'<span class="ln{" hit" if n == w.get("line") else ""}"><span class="no">{n}</span>{_e(text)}</span>'
                for n, text in ctx)
            body.append(f'<div class="where"><div class="loc">{_e(loc)}</div>'
                        + (f"<pre class=\"code\">{code}</pre>" if code else "") + "</div>")
        if f.get("ops"):
            body.append('<div class="ops">ops: ' + ", ".join(f"<code>{_e(o)}</code>" for o in f["ops"][:8]) + "</div>")
        body.append(f'<div class="fix"><b>Fix:</b> {_e(f.get("fix", ""))}</div>')
        ev = f.get("evidence") or {}
        if ev:
            rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_short_value(v))}</td></tr>" for k, v in ev.items())
            body.append(f'<details class="evidence"><summary>evidence</summary><table>{rows}</table></details>')
        if f.get("docs"):
            body.append(f'<div class="docs"><a href="{_e(f["docs"])}" rel="noreferrer">docs</a></div>')
        return f'<article class="finding sev-{sev_class}">{head}{"".join(body)}</article>'

    @staticmethod
    def _diff(diff: dict | None) -> str:
        """For `torchneck diff`: the findings' changes from A to B, before B's own findings."""
        if not diff:
            return ""
        rows = "".join(
            f'<tr class="diff-{_e(f["status"])}"><td>{_e(f["status"])}</td><td>{_e(f["kind"])}</td>'
            f'<td>{_e(f["title"])}</td><td>{_e(f["where"])}</td>'
            f'<td class="num">{_ms_or_dash(f["a_ms"])}</td><td class="num">{_ms_or_dash(f["b_ms"])}</td>'
            f'<td>{_e(f.get("unit", ""))}</td></tr>'
            for f in diff.get("findings") or [])
        return (f'<section id="diff"><h2>A → B</h2><p class="run">A: {_e(diff["a"]["label"])}<br>'
                f'B: {_e(diff["b"]["label"])}</p>'
                '<table class="data"><thead><tr><th>status</th><th>kind</th><th>finding</th><th>where</th>'
                f'<th>A</th><th>B</th><th>unit</th></tr></thead><tbody>{rows}</tbody></table>'
                "<p class=\"run\">Below: B's findings, charts and tables.</p></section>")

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


def render_html(report: dict) -> str:
    return HtmlRenderer().render(report)
