"""The label table and the key_averages table: terminal (rich) and HTML.

Both read only the report's first rank (`RankAnalysis.labels`, `RankAnalysis.key_averages`). The
key_averages table is laid out as torch's `table()` prints it (same column names, times as
`5.212s` / `715.848ms` / `350.151us`, memory as `953.67 MB`), so a reader of the profiler recipe
recognises it; the terminal shows it when the user asked for it (`--sort-by` and friends), the
HTML always. The label table comes first wherever there are labels.

`table_data` gives both tables as plain columns and rows for other renderers.
"""

from __future__ import annotations

import html
import os

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..model.analysis import CodeSite, KeyAverages, KeyAveragesRow, Label, LabelOp, RankAnalysis
from ..model.report import Report

LABEL_COLUMNS = (
    ("name", "label"), ("count", "calls"), ("total_us", "total µs"), ("pct", "% of window"),
    ("ops_us", "in torch ops µs"), ("outside_ops_us", "outside ops µs"), ("outside_ops_pct", "outside ops %"),
    ("self_us", "self µs"), ("ops", "ops"), ("top_ops", "top ops"), ("where", "your lines"),
)


def format_time(us: float) -> str:
    """torch's `_format_time`."""
    if abs(us) >= 1e6:
        return f"{us / 1e6:.3f}s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def format_memory(nbytes: float) -> str:
    """torch's `_format_memory`."""
    kb, mb, gb = 1024, 1024**2, 1024**3
    if abs(nbytes) >= gb:
        return f"{nbytes / gb:.2f} GB"
    if abs(nbytes) >= mb:
        return f"{nbytes / mb:.2f} MB"
    if abs(nbytes) >= kb:
        return f"{nbytes / kb:.2f} KB"
    return f"{int(nbytes)} B"


def _share(us: float, total: float) -> str:
    return f"{100 * us / total:.2f}%" if total else "NaN"


def key_average_columns(ka: KeyAverages) -> list[tuple[str, str]]:
    """(heading, field) of the key_averages table's columns, as torch chooses them: device
    columns when some row has device time, memory columns when memory was recorded, shapes and
    stacks when grouped by them. `pct` fields are shares, computed by `key_average_cells`."""
    cols = [("Name", "name"), ("Self CPU %", "self_cpu_pct"), ("Self CPU", "self_cpu_time_total"),
            ("CPU total %", "cpu_total_pct"), ("CPU total", "cpu_time_total"), ("CPU time avg", "cpu_time")]
    if ka.has_device_time:
        cols += [("Self CUDA", "self_device_time_total"), ("Self CUDA %", "self_device_pct"),
                 ("CUDA total", "device_time_total"), ("CUDA time avg", "device_time")]
    if ka.has_memory:
        cols += [("CPU Mem", "cpu_memory_usage"), ("Self CPU Mem", "self_cpu_memory_usage")]
        if ka.has_device_memory:
            cols += [("CUDA Mem", "device_memory_usage"), ("Self CUDA Mem", "self_device_memory_usage")]
    cols.append(("# of Calls", "count"))
    if ka.options.group_by_input_shape:
        cols.append(("Input Shapes", "input_shapes"))
    if ka.options.group_by_stack_n:
        cols.append(("Source Location", "stack"))
    return cols


def key_average_cells(ka: KeyAverages, row: KeyAveragesRow) -> dict[str, str]:
    """A row's cells as torch prints them."""
    cpu_total, dev_total = ka.self_cpu_time_total, ka.self_device_time_total
    cells = {"name": row.name, "count": str(row.count),
             "self_cpu_pct": _share(row.self_cpu_time_total, cpu_total),
             "cpu_total_pct": _share(row.cpu_time_total, cpu_total),
             "self_device_pct": _share(row.self_device_time_total, dev_total),
             "input_shapes": row.input_shapes or "", "stack": "\n".join(row.stack or [])}
    for k in ("self_cpu_time_total", "cpu_time_total", "cpu_time", "self_device_time_total", "device_time_total",
              "device_time"):
        cells[k] = format_time(getattr(row, k))
    for k in ("cpu_memory_usage", "self_cpu_memory_usage", "device_memory_usage", "self_device_memory_usage"):
        cells[k] = format_memory(getattr(row, k))
    return cells


def _where(where: list[CodeSite]) -> str:
    return ", ".join(f"{os.path.basename(w.file)}:{w.line}" for w in where)


def _top_ops(ops: list[LabelOp], n: int = 3) -> str:
    return ", ".join(o.name for o in ops[:n])


def table_data(analysis: RankAnalysis) -> dict:
    """Both tables as {"labels": {columns, rows}, "key_averages": {columns, rows, ...}}: rows of
    cells (text), in the report's order."""
    out: dict = {}
    if analysis.labels:
        out["labels"] = {
            "columns": [title for _, title in LABEL_COLUMNS],
            "rows": [[_label_cell(lab, key) for key, _ in LABEL_COLUMNS] for lab in analysis.labels],
        }
    ka = analysis.key_averages
    if ka and ka.rows:
        cols = key_average_columns(ka)
        out["key_averages"] = {
            "columns": [title for title, _ in cols],
            "rows": [[key_average_cells(ka, row)[field] for _, field in cols] for row in ka.rows],
            "title": _key_averages_title(ka),
            "footer": _key_averages_footer(ka),
            "notes": ka.notes,
        }
    return out


def _label_cell(lab: Label, key: str) -> str:
    if key == "top_ops":
        return _top_ops(lab.top_ops)
    if key == "where":
        return _where(lab.where) or (_where([lab.opened_at]) if lab.opened_at else "")
    value = getattr(lab, key)
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def _key_averages_title(ka: KeyAverages) -> str:
    o = ka.options
    call = "key_averages(" + ", ".join(
        [f"group_by_input_shape={o.group_by_input_shape}"] * bool(o.group_by_input_shape)
        + [f"group_by_stack_n={o.group_by_stack_n}"] * bool(o.group_by_stack_n)) + ")"
    return (f"{call}.table(sort_by={o.sort_by!r}, row_limit={o.row_limit}): "
            f"{len(ka.rows)} of {ka.groups} rows, whole trace")


def _key_averages_footer(ka: KeyAverages) -> str:
    text = f"Self CPU time total: {format_time(ka.self_cpu_time_total)}"
    if ka.has_device_time:
        text += f"\nSelf CUDA time total: {format_time(ka.self_device_time_total)}"
    return text


# -- terminal ----------------------------------------------------------------------------------


WIDE_CONSOLE = 120
"""From this width on the terminal tables show every column; narrower, the secondary ones (shares
of the total, averages, a label's top ops) are left to report.json and the HTML."""
_SECONDARY = ("CPU total %", "CPU time avg", "Self CUDA %", "CUDA time avg", "CPU Mem", "CUDA Mem")


def render_console(console: Console, analysis: RankAnalysis) -> None:
    """The label table when there are labels; the key_averages table when it was asked for."""
    wide = console.width >= WIDE_CONSOLE
    labels = analysis.labels
    if labels:
        t = Table(title="record_function labels (profiled window): time under each, and how much no torch op covers",
                  box=box.SIMPLE, title_justify="left", pad_edge=False)
        columns = [("label", 28), ("calls", 0), ("total ms", 0), ("% window", 0), ("outside ops ms", 0),
                   ("outside ops %", 0), ("ops", 0)] + [("top ops", 30)] * wide + [("your lines", 26)]
        for title, width in columns:  # width 0: a number column
            t.add_column(title, justify="left" if width else "right", overflow="fold", max_width=width or None,
                         no_wrap=not width)
        for lab in labels[:10]:
            cells = [escape(lab.name), str(lab.count), f"{lab.total_us / 1e3:.2f}", f"{lab.pct:.0f}",
                     f"{lab.outside_ops_us / 1e3:.2f}", f"{lab.outside_ops_pct:.0f}", str(lab.ops)]
            cells += [escape(_top_ops(lab.top_ops))] * wide + [escape(_label_cell(lab, "where"))]
            t.add_row(*cells)
        console.print(t)
    ka = analysis.key_averages
    if ka is None or not ka.options.requested or not ka.rows:
        return
    cols = [(title, field) for title, field in key_average_columns(ka)
            if (wide or title not in _SECONDARY) and field not in ("input_shapes", "stack")]
    t = Table(title=_key_averages_title(ka), box=box.SIMPLE, title_justify="left", pad_edge=False)
    for title, field in cols:
        t.add_column(title, justify="left" if field == "name" else "right", overflow="fold",
                     min_width=24 if field == "name" else None, no_wrap=field != "name")
    for row in ka.rows:
        texts = key_average_cells(ka, row)
        name = escape(texts["name"])
        if row.input_shapes is not None:
            name += f"\n[dim]{escape(texts['input_shapes'])}[/]"
        if row.stack:
            name += "".join(f"\n[dim]  {escape(frame)}[/]" for frame in row.stack)
        t.add_row(*[name if field == "name" else escape(texts[field]) for _, field in cols])
    console.print(t)
    console.print(escape(_key_averages_footer(ka)))
    for note in ka.notes:
        console.print(f"[dim]note: {escape(note)}[/]")


# -- HTML --------------------------------------------------------------------------------------


def _e(value) -> str:
    return html.escape(str(value), quote=True)


TABLE_STYLE = ("<style>#table-labels td:first-child, #table-labels td.num, #table-key-averages td.num "
               "{ white-space: nowrap; }</style>")
"""Label names and figures stay on one line; op names and stacks may wrap."""

SORT_SCRIPT = """<script>(function(){
  /* click a heading of a torchneck table to sort it; cells keep their text (textContent only) */
  function key(t){var m=/^(-?[0-9.]+)\\s*(s|ms|us|B|KB|MB|GB|%)?$/.exec(t.trim());if(!m)return null;
    var f={s:1e6,ms:1e3,us:1,B:1,KB:1024,MB:1048576,GB:1073741824,'%':1}[m[2]]||1;return parseFloat(m[1])*f;}
  document.querySelectorAll('table.tn-sortable').forEach(function(tb){
    tb.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
      var rows=Array.from(tb.tBodies[0].rows),desc=th.getAttribute('data-desc')!=='1';
      rows.sort(function(a,b){var x=a.cells[i].textContent,y=b.cells[i].textContent,kx=key(x),ky=key(y);
        var c=(kx!==null&&ky!==null)?kx-ky:x.localeCompare(y);return desc?-c:c;});
      th.setAttribute('data-desc',desc?'1':'0');rows.forEach(function(r){tb.tBodies[0].appendChild(r);});});});});
})();</script>"""


def render_html(report: Report) -> str:
    """The two tables of the first rank as HTML sections (every string escaped); "" when the
    report has neither."""
    if not report.ranks:
        return ""
    data = table_data(report.ranks[0])
    parts = []
    if "labels" in data:
        d = data["labels"]
        parts.append('<section id="labels"><h2>record_function labels</h2>'
                     '<p class="run">Time under each label, and how much of it no torch op covers '
                     "(Python, NumPy, waits).</p>" + _html_table("labels", d["columns"], d["rows"]) + "</section>")
    if "key_averages" in data:
        d = data["key_averages"]
        notes = "".join(f'<p class="run">note: {_e(n)}</p>' for n in d["notes"])
        parts.append(f'<section id="key-averages"><h2>key_averages</h2><p class="run">{_e(d["title"])}</p>'
                     + _html_table("key-averages", d["columns"], d["rows"])
                     + "".join(f'<p class="run">{_e(line)}</p>' for line in d["footer"].split("\n"))
                     + notes + "</section>")
    if not parts:
        return ""
    return "\n".join(parts) + TABLE_STYLE + SORT_SCRIPT


def _html_table(table_id: str, columns: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f'<td{_num_class(i, cell)}>{_e(cell).replace(chr(10), "<br>")}</td>'
                         for i, cell in enumerate(row)) + "</tr>"
        for row in rows)
    return (f'<table class="data tn-sortable" id="table-{_e(table_id)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def _num_class(column: int, cell: str) -> str:
    """Right-align number cells (not the name column)."""
    head = cell.split(" ")[0].rstrip("%")
    try:
        float(head.removesuffix("ms").removesuffix("us").removesuffix("s"))
    except ValueError:
        return ""
    return ' class="num"' if column else ""
