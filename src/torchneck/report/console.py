"""Terminal report (rich): verdict, findings, one-time costs, hotspots, op tables, memory.

Reads only the report dict. Stays readable at 80 columns and without a TTY (CI logs).
"""

from __future__ import annotations

import os
from typing import Literal

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..model.analysis import Origin, RankAnalysis
from ..model.findings import Finding
from ..model.report import OpLine, Report
from .environment import environment_lines
from .tables import render_console as render_tables

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
Justify = Literal["left", "right"]


def _short(path: str, width: int = 40) -> str:
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    except ValueError:
        pass
    return path if len(path) <= width else "…" + path[-(width - 1):]


RANK_ROWS = 16
"""Up to this many ranks the terminal lists each; beyond, their quantiles and the top ranks."""


def _origin_cell(o: Origin | None) -> str:
    """'inductor (graph 1/0)' / 'ATen fallback (graph 2/0)' / '' for an op or kernel of a compiled run."""
    if not o:
        return ""
    what = "inductor" if o.origin == "inductor" else "ATen fallback"
    ids = o.graphs
    return what + (f" (graph {', '.join(ids[:2])}{'…' if len(ids) > 2 else ''})" if ids else "")


def saving_text(f: Finding) -> str:
    """'saves ~1.2 s (24% of the run; measured)': what fixing it would save, and how that is known."""
    confidence = {"measured": "measured", "estimated": "estimated", "upper_bound": "at most",
                  "unmeasured": "not measured"}[f.confidence]
    return f"saves ~{f.saving_s:.3g} s ({f.saving_pct:.0f}% of the {f.saving_of}; {confidence})"


def _ms(us: float) -> str:
    return f"{us / 1e3:.2f}"


class ConsoleRenderer:
    def __init__(self, console: Console | None = None, top: int = 10):
        self.console = console or Console(highlight=False, soft_wrap=False)
        self.top = top

    def render(self, report: Report) -> None:
        c = self.console
        if report.kind == "diff":
            return self._diff(report)
        if report.kind == "bisect" and report.bisect is not None:
            return self._bisect(report.bisect)
        c.rule("[bold]torchneck report")
        run = report.run
        if run:
            name = run.target.module or run.target.script
            cpu = f"cpu {run.cpu_s:.2f} s" if run.cpu_s is not None else "cpu unknown"
            c.print(f"[bold]{escape(str(name))}[/] {escape(' '.join(run.target.args))}  "
                    f"exit code {run.exit_code}  wall {run.wall_s:.2f} s  {cpu}")
            if run.error:
                c.print(f"[red]The script did not finish normally: {escape(run.error)}[/]")
            for line in environment_lines(report.env):
                c.print(f"[dim]{escape(line)}[/]")
        c.print()
        c.print(escape(report.verdict))
        summary = (report.capture or {}).get("summary")
        if summary:  # what was measured, over what span, and why
            c.print(f"[dim]{escape(summary)}[/]")
        self._findings(report.findings)
        comp = report.compile or {}
        if comp.get("present"):
            self._compile(comp)
        if report.kind == "compile":
            if not comp.get("present"):
                c.print("\nNo torch.compile activity in this run" + (
                    "." if comp.get("available", True) else " (this PyTorch has no compile log)."))
            if run and run.phases:
                self._phases(run.phases)
            return
        if run and run.phases:
            self._phases(run.phases)
            self._python(report.python or {})
        self._ops_by_line(report.ops_by_line)  # analyze: from a with_stack trace's frames
        for analysis in report.ranks[:1]:
            self._steps(analysis)
            self._ops(analysis)
            render_tables(self.console, analysis)
            self._gpu(analysis)
            self._memory(analysis)
        if report.distributed:
            self._distributed(report.distributed)
        elif len(report.ranks) > 1:
            self._ranks(report.ranks)
        for w in report.warnings:
            c.print(f"[yellow]warning:[/] {escape(w)}")

    def _diff(self, report: Report) -> None:
        c = self.console
        d = report.diff
        if d is None:
            return
        c.rule("[bold]torchneck diff")
        c.print(f"A: {escape(str(d.a.label))}\nB: {escape(str(d.b.label))}")
        c.print()
        c.print(escape(report.verdict))
        styles = {"new": "bold red", "worse": "red", "gone": "green", "better": "green", "same": "dim"}
        if d.findings:
            t = Table(title="Findings, A -> B (time lost, ms per step; start-up and compile per run)",
                      box=box.SIMPLE, title_justify="left")
            diff_cols: tuple[tuple[str, Justify], ...] = (("status", "left"), ("kind", "left"), ("finding", "left"),
                                                          ("A", "right"), ("B", "right"))
            for col, just in diff_cols:
                t.add_column(col, justify=just)
            for f in d.findings:
                st = styles[f.status]
                t.add_row(f"[{st}]{f.status}[/]", f.kind, escape(f.title),
                          "-" if f.a_ms is None else f"{f.a_ms:.2f}", "-" if f.b_ms is None else f"{f.b_ms:.2f}")
            c.print(t)
        self._changes("Ops that changed most (self µs per step)",
                      [(r.op, r.a_us_per_step, r.b_us_per_step, r.change_us) for r in d.ops], "op", "{:.1f}")
        self._changes("GPU kernels that changed most (µs per step)",
                      [(r.kernel.removeprefix("void ").split("(")[0], r.a_us_per_step, r.b_us_per_step, r.change_us)
                       for r in d.kernels], "kernel", "{:.1f}")
        self._changes("Python lines that moved (ms per step)",
                      [(r.line, r.a_ms_per_step, r.b_ms_per_step, r.change_ms) for r in d.python], "line", "{:.2f}")

    def _bisect(self, b: dict) -> None:
        c = self.console
        c.rule("[bold]torchneck bisect")
        c.print(f"[bold]{escape(' '.join(b['target']))}[/]  backend {escape(b['backend'] or '-')}"
                + (f"  (outputs checked against eager, tolerance {b['tolerance']:g})" if b["accuracy"] else ""))
        t = Table(box=box.SIMPLE, title="Stages, in the order run", title_justify="left")
        stage_cols: tuple[tuple[str, Justify], ...] = (("stage", "left"), ("outcome", "left"), ("graphs", "right"),
                                                       ("wall s", "right"))
        for col, just in stage_cols:
            t.add_column(col, justify=just)
        for st in b["stages"]:
            style = "red" if st["failed"] else "green"
            t.add_row(st["name"], f"[{style}]{escape(st['outcome'][:90])}[/]",
                      str(st.get("graphs", "")) if st.get("graphs") is not None else "", f"{st['wall_s']:.1f}")
        c.print(t)
        verdict = escape(b["verdict"][:1].upper() + b["verdict"][1:])
        c.print(("[bold red]" if b["culprit"] else "[bold green]") + verdict + "[/]")
        f = b.get("failure")
        if f:
            if f.get("exception_type"):
                c.print(f"  error: {escape(f['exception_type'])}: {escape(f.get('message') or '')}")
                if f.get("detail"):
                    c.print(f"         {escape(f['detail'])}")
            m = f.get("mismatch")
            if m:
                diff = f", max abs diff {m['max_abs_diff']:.3g}" if m.get("max_abs_diff") is not None else ""
                c.print(f"  output {m.get('output')} of graph {m['graph']} ({escape(str(m.get('op') or '?'))}): "
                        f"{escape(m['problem'])}{diff}")
            cf = f.get("compiled_function")
            if cf:
                c.print(f"  while compiling {escape(str(cf['function']))} "
                        f"({escape(_short(str(cf['file']), 50))}:{cf['line']})")
            for w in f["where"][:4]:
                c.print(f"      at {escape(_short(w['file'], 50))}:{w['line']} in {escape(str(w['function']))}")
            for hint in f.get("hints", [])[:2]:
                c.print(f"  [green]torch's hint:[/] {escape(hint)}")
            if f.get("log"):
                c.print(f"  [dim]full output: {escape(f['log'])}[/]")
        if b.get("advice"):
            c.print(f"  [green]next:[/] {escape(b['advice'])}")
        mn = b.get("minify")
        if mn:
            if mn["ok"]:
                c.print(f"  [green]minified repro:[/] {escape(mn['repro'])}  "
                        + (f"({escape(mn['note'])})" if mn.get("note") else
                           f"(python {escape(mn['repro'])} reproduces it)"))
            else:
                c.print(f"  [yellow]minifier:[/] {escape(mn['reason'])}")
        for st in b["stages"]:
            if st["failed"] and st.get("log_tail") and not st.get("exception"):
                c.print(f"\n[dim]last lines of stage {st['name']} ({escape(st['log'])}):[/]")
                for line in st["log_tail"][-6:]:
                    c.print(f"[dim]  {escape(line[:160])}[/]")
                break

    def _changes(self, title: str, rows: list[tuple[str, float, float, float]], key: str, fmt: str) -> None:
        """One of diff's A/B/change tables: (name, A, B, change) rows, largest change first."""
        if not rows:
            return
        t = Table(title=title, box=box.SIMPLE, title_justify="left")
        for col in (key, "A", "B", "change"):
            t.add_column(col, justify="left" if col == key else "right")
        for name, a, b, change in rows[: self.top]:
            t.add_row(escape(name if len(name) <= 60 else name[:59] + "…"), fmt.format(a), fmt.format(b),
                      ("{:+" + fmt[2:]).format(change))
        self.console.print(t)

    def _findings(self, findings: list[Finding]) -> None:
        c = self.console
        c.print()
        if not findings:
            c.print("[green]No findings.[/]")
            return
        c.print("[bold]Findings[/] (causes, the most time a fix would save first; symptoms under their cause)")
        for i, f in enumerate(findings, 1):
            style = SEVERITY_STYLE.get(f.severity, "")
            on_rank = f" [dim](rank {f.rank})[/]" if f.rank is not None else ""
            c.print(f" {i}. [{style}]{f.severity.upper()}[/] [{style}]{f.kind}[/]{on_rank} {escape(f.title)}"
                    + (f"  [dim]{saving_text(f)}[/]" if f.saving_s else ""))
            for w in f.where[:3]:
                c.print(f"      at {escape(_short(w.file, 50))}:{w.line} in {escape(w.function)}")
            if f.ops:
                c.print(f"      ops: {escape(', '.join(f.ops[:4]))}")
            if f.fix:
                c.print(f"      [green]fix:[/] {escape(f.fix)}")
            self._symptoms(f.symptoms, "      ")

    def _symptoms(self, symptoms: list[Finding], indent: str) -> None:
        """What a cause explains, one line each (their own symptoms indented under them)."""
        for s in symptoms:
            share = f" ({s.explained_s:.3g} of its {s.time_lost_s:.3g} s)" if s.explained_s is not None else ""
            self.console.print(f"{indent}[dim]explains:[/] {s.kind} {escape(s.title)}{share}")
            self._symptoms(s.symptoms, indent + "  ")

    def _compile(self, comp: dict) -> None:
        c = self.console
        c.print()
        t = comp["time_s"]
        stages = ", ".join(f"{k} {v:.2f} s" for k, v in t.items() if k != "total")
        split = comp.get("wall_split") or {}
        share = f", {split['compiling_pct']:.0f}% of the run" if split.get("compiling_pct") is not None else ""
        c.print(f"[bold]torch.compile[/]: {t['total']:.2f} s compiling{share} ({stages})")
        w = split.get("window")
        if w and w["window_s"] > 0:
            def pct(x):
                return f"{100 * x / w['window_s']:.0f}%"
            parts = [f"in compiled functions {pct(w['in_compiled_functions_s'])}"]
            if w.get("graphs_s") is not None:
                parts = [f"compiled graphs {pct(w['graphs_s'])}",
                         f"eager code between graphs {pct(w['eager_between_graphs_s'])}"]
            if w.get("compiling_s"):
                parts.insert(0, f"compiling {pct(w['compiling_s'])}")
            c.print(f"  profiled window: {', '.join(parts)}, outside compiled functions "
                    f"{pct(w['outside_compiled_s'])}")
        windowed = any((f.get("window") or {}).get("graphs_s") is not None for f in comp["frames"])
        table = Table(box=box.SIMPLE, pad_edge=False)
        table.add_column("function", overflow="fold", max_width=30)
        table.add_column("compiles", justify="right")
        table.add_column("graphs", justify="right")
        table.add_column("recompiles", justify="right")
        table.add_column("compile s", justify="right")
        if windowed:
            table.add_column("graphs ms", justify="right")
            table.add_column("eager ms", justify="right")
        for f in comp["frames"][: self.top]:
            label = f["label"] if f["label"].startswith("the ") else f["label"] + \
                f" ({os.path.basename(f['file'])}:{f['line']})"
            cells = [escape(label), str(f["compilations"]), str(f["graphs"]), str(f["recompilations"]),
                     f"{f['compile_s']:.2f}"]
            if windowed:
                fw = f.get("window") or {}
                cells += [f"{1e3 * fw['graphs_s']:.1f}" if fw.get("graphs_s") is not None else "",
                          f"{1e3 * fw['eager_s']:.1f}" if fw.get("eager_s") is not None else ""]
            table.add_row(*cells)
        c.print(table)
        self._compiled_graphs(comp)
        for b in comp["graph_breaks"][: self.top]:
            caused = b.get("compile_s_caused") or 0.0
            c.print(f"  graph break at {escape(_short(b['file'], 40))}:{b['line']}: {escape(b['reason'])}"
                    + (f" (x{b['count']})" if b["count"] > 1 else "")
                    + (f"; caused {caused:.2f} s compiling, {b.get('recompiles_caused', 0)} recompile(s)"
                       if caused > 0 else ""))
        for r in comp["recompiles"][: self.top]:
            why = "; ".join(f"{e['what']} (x{e['count']})" for e in r["reasons"][:2])
            c.print(f"  {escape(r['label'])}: {r['count']} recompile(s): {escape(why)}")
        for h in comp["limit_hits"]:
            c.print(f"  [red]{escape(h['function'])} hit the recompile limit: runs eagerly from then on[/]")
        cold = comp.get("cold")
        if cold:
            if cold.get("ok") and cold.get("time_s"):
                c.print(f"  cold start (inductor caches disabled): {cold['time_s']['total']:.2f} s compiling, "
                        f"run {cold['wall_s']:.2f} s; this run: {t['total']:.2f} s")
            else:
                c.print(f"  [yellow]cold run failed: {escape(str(cold.get('error')))}[/]")

    def _compiled_graphs(self, comp: dict) -> None:
        """One row per compiled graph (dynamo compile id): where, ops, guards, compile time by
        stage, cache, the break that ended it or why it was recompiled, its generated code."""
        graphs = [g for g in comp.get("graphs") or [] if g.get("op_count")]
        if not graphs:
            return
        t = Table(title="Compiled graphs (generated code under the run folder's graphs/)", box=box.SIMPLE,
                  title_justify="left", pad_edge=False)
        t.add_column("id")
        t.add_column("code", overflow="fold", max_width=22)
        t.add_column("ops", justify="right")
        t.add_column("guards", justify="right")
        t.add_column("compile s", justify="right")
        t.add_column("cache")
        t.add_column("why it ends / was recompiled", overflow="fold", max_width=34)
        for g in graphs[: self.top]:
            where = f"{g['function']}() {os.path.basename(g['file'])}:{g['resumes_after_line'] or g['line']}"
            if g.get("resumes_after_line"):
                where += " (after break)"
            ts = g["time_s"]
            why = ""
            if g.get("recompile_reason"):
                why = "recompiled: " + g["recompile_reason"]["what"]
            elif g.get("ended_by_break"):
                why = f"break at line {g['ended_by_break']['line']}: {g['ended_by_break']['reason']}"
            t.add_row(g["id"], escape(where), str(g["op_count"]), str((g.get("guards") or {}).get("count", "")),
                      f"{ts['total']:.2f}", g.get("cache") or "", escape(why[:200]))
        self.console.print(t)
        if len(graphs) > self.top or comp.get("graphs_not_listed"):
            self.console.print(f"  ({len(graphs) - min(len(graphs), self.top) + (comp.get('graphs_not_listed') or 0)}"
                               " more graphs in report.json)")

    def _phases(self, phases: dict) -> None:
        c = self.console
        p = phases["phases"]
        c.print()
        c.print("[bold]Run phases[/] (one-time costs vs steady state)")
        clock = phases.get("clock") or "none detected"
        c.print(f"  start-up {p['startup_s']:.2f} s | warm-up {p['warmup_s']:.2f} s | profiled window "
                f"{p['window_s']:.2f} s | rest {p['rest_s']:.2f} s   steps seen: {phases['steps_seen']} "
                f"(clock: {clock})")
        if phases.get("steady_step_s") is not None:
            first = phases.get("first_step_s")
            c.print(f"  steady-state step {phases['steady_step_s'] * 1e3:.2f} ms"
                    + (f", first step {first * 1e3:.2f} ms" if first is not None else ""))
        if phases.get("window_note"):
            c.print(f"  [yellow]profiled from the start: {escape(phases['window_note'])}[/]")

    def _python(self, python: dict) -> None:
        for key, title in (("window", "Python hotspots in the steady state (the run after start-up)"),
                           ("startup", "Python time before the first step (one-time)")):
            h = python.get(key)
            if not h or not h["lines"]:
                continue
            t = Table(title=title, box=box.SIMPLE, title_justify="left", pad_edge=False)
            t.add_column("file:line", overflow="fold", max_width=24)
            t.add_column("function", overflow="fold", max_width=16)
            t.add_column("total s", justify="right")
            t.add_column("self s", justify="right")
            t.add_column("%", justify="right")
            t.add_column("spends time in", overflow="fold", max_width=22)
            for ln in h["lines"][: self.top]:
                t.add_row(escape(f"{os.path.basename(ln['file'])}:{ln['line']}"), escape(ln["function"]),
                          f"{ln['total_s']:.3f}", f"{ln['self_s']:.3f}", f"{ln['pct']:.0f}",
                          escape(ln.get("library") or ""))
            self.console.print(t)

    def _ops_by_line(self, rows: list[OpLine]) -> None:
        if not rows:
            return
        t = Table(title="Top ops by self time, by the line of your code that ran them", box=box.SIMPLE,
                  title_justify="left", pad_edge=False)
        t.add_column("op", overflow="fold", max_width=28)
        t.add_column("your line", overflow="fold", max_width=30)
        t.add_column("calls", justify="right")
        t.add_column("self ms", justify="right")
        for r in rows[: self.top]:
            where = f"{os.path.basename(r.file)}:{r.line}" if r.file else "(no user frame)"
            if r.source == "stack":  # a trace's Python frame: the function, at its first line
                where = f"{r.function}() at {where}"
            t.add_row(escape(r.op), escape(where), str(r.count), _ms(r.self_us))
        self.console.print(t)

    def _steps(self, a: RankAnalysis) -> None:
        st = a.steps
        total = sum(st.breakdown_total_us.values()) or 1.0
        t = Table(title=f"Step time breakdown ({st.count} steps from {st.source}, "
                        f"median {_ms(st.median_us)} ms)", box=box.SIMPLE, title_justify="left",
                  pad_edge=False)
        t.add_column("category")
        t.add_column("ms", justify="right")
        t.add_column("%", justify="right")
        for k, v in st.breakdown_total_us.items():
            if v > 0:
                t.add_row(k.replace("_", " "), _ms(v), f"{100 * v / total:.1f}")
        self.console.print(t)

    def _ops(self, a: RankAnalysis) -> None:
        ops = a.ops.by_name
        if not ops:
            return
        t = Table(title="Top ops by self time (profiled window)", box=box.SIMPLE, title_justify="left",
                  pad_edge=False)
        t.add_column("op", overflow="fold", max_width=36)
        t.add_column("calls", justify="right")
        t.add_column("self ms", justify="right")
        t.add_column("total ms", justify="right")
        t.add_column("mean µs", justify="right")
        origins = a.compiled.origins.ops
        if origins:
            t.add_column("in compiled graph", overflow="fold", max_width=18)
        for o in ops[: self.top]:
            cells = [escape(o.name), str(o.count), _ms(o.self_us), _ms(o.total_us), f"{o.mean_us:.1f}"]
            if origins:
                cells.append(_origin_cell(origins.get(o.name)))
            t.add_row(*cells)
        self.console.print(t)
        d = a.ops.dispatch
        self.console.print(f"  {d.top_level_ops} top-level ops ({d.ops_per_step:.0f} per step), "
                           f"median {d.median_op_us:.1f} µs; ops under {d.tiny_limit_us:.0f} µs: "
                           f"{100 * d.tiny_share:.0f}% of the window")

    def _gpu(self, a: RankAnalysis) -> None:
        g = a.gpu
        if not g.present:
            return
        for d in g.devices:
            idle = d.idle_breakdown
            self.console.print(
                f"  GPU {d.device}: busy {d.busy_pct:.1f}%  idle {_ms(d.idle_us)} ms "
                f"(host wait {_ms(idle.host_wait_us)}, kernel wait {_ms(idle.kernel_wait_us)}, "
                f"other {_ms(idle.other_us)}, edges {_ms(idle.edges_us)} ms)")
        t = Table(title="Top GPU kernels", box=box.SIMPLE, title_justify="left", pad_edge=False)
        t.add_column("kernel", overflow="fold", max_width=40)
        t.add_column("family")
        t.add_column("calls", justify="right")
        t.add_column("ms", justify="right")
        origins = a.compiled.origins.kernels
        if origins:
            t.add_column("origin", overflow="fold", max_width=18)
        for k in g.top_kernels[: self.top]:
            cells = [escape(k.name[:120]), k.family, str(k.count), _ms(k.time_us)]
            if origins:
                cells.append(_origin_cell(origins.get(k.name)))
            t.add_row(*cells)
        self.console.print(t)

    def _memory(self, a: RankAnalysis) -> None:
        m = a.memory
        if not m.recorded:
            return
        for d in m.devices:
            peak = d.peak_allocated_bytes
            if peak is not None:
                self.console.print(f"  memory {d.device}: peak allocated {peak / 2**20:.1f} MiB, "
                                   f"{d.allocations} allocations")
        if m.top_allocators:
            t = Table(title="Top memory allocators", box=box.SIMPLE, title_justify="left", pad_edge=False)
            t.add_column("op", overflow="fold", max_width=30)
            t.add_column("at", overflow="fold", max_width=28)
            t.add_column("allocations", justify="right")
            t.add_column("MiB", justify="right")
            for r in m.top_allocators[:5]:
                at = f"{os.path.basename(r.file)}:{r.line}" if r.file else ""
                t.add_row(escape(r.op), escape(at), str(r.allocations), f"{r.bytes / 2**20:.1f}")
            self.console.print(t)

    def _distributed(self, d: dict) -> None:
        """Per-rank steps and communication, the straggler, failed ranks; beyond `RANK_ROWS`
        ranks, their distribution and the top ranks only (report.json and the HTML have all)."""
        c = self.console
        rows = d["ranks"]
        if len(rows) > RANK_ROWS:
            self._rank_quantiles(d)
            named = [r["rank"] for r in d.get("stragglers") or []]
            rest = sorted((r for r in rows if r["rank"] not in named),
                          key=lambda r: -max(r.get("step_excess_us") or 0.0, r.get("lateness_us") or 0.0))
            by_rank = {r["rank"]: r for r in rows}
            rows = ([by_rank[n] for n in named if n in by_rank] + rest)[:self.top]
        t = Table(title=f"Ranks ({d['world_size']}; step time spread {d['step_spread_pct']:.0f}%)"
                  + (f": the top {len(rows)}" if len(rows) < len(d["ranks"]) else ""),
                  box=box.SIMPLE, title_justify="left", pad_edge=False)
        rank_cols: tuple[tuple[str, Justify], ...] = (("rank", "left"), ("status", "left"), ("steps", "right"),
                                                      ("median step ms", "right"), ("collectives ms/step", "right"),
                                                      ("top collective", "left"))
        for col, just in rank_cols:
            t.add_column(col, justify=just)
        straggler = (d.get("straggler") or {}).get("rank")
        for r in rows:
            comm = r.get("comm") or {}
            top = comm.get("by_type") or []
            mark = " [bold red](straggler)[/]" if r["rank"] == straggler else ""
            t.add_row(f"{r['rank']}{mark}", escape(str(r.get("status") or "")), str(r.get("steps") or 0),
                      _ms(r["median_step_us"]) if r.get("median_step_us") else "-",
                      _ms(comm["per_step_us"]) if comm.get("present") else "-",
                      escape(top[0]["type"]) if top else "")
        c.print(t)
        for f in d.get("failed") or []:
            c.print(f"  [red]rank {f['rank']}: {escape(str(f['status']))}[/] {escape(str(f.get('error') or ''))}")

    def _rank_quantiles(self, d: dict) -> None:
        """Per-rank figures as a distribution over the ranks."""
        t = Table(title="Across ranks", box=box.SIMPLE, title_justify="left", pad_edge=False)
        t.add_column("per rank")
        names = ("min", "p10", "p50", "p90", "p99", "max")
        for name in names:
            t.add_column(name, justify="right")
        for key, label, fmt in (("step_time_us", "median step ms", _ms),
                                ("comm_per_step_us", "collectives ms/step", _ms),
                                ("overlap_pct", "comm overlapped %", lambda v: f"{v:.0f}")):
            q = d.get(key)
            if q:
                t.add_row(label, *(fmt(q[n]) for n in names))
        self.console.print(t)

    def _ranks(self, ranks: list[RankAnalysis]) -> None:
        t = Table(title="Ranks", box=box.SIMPLE, title_justify="left", pad_edge=False)
        t.add_column("rank")
        t.add_column("file", overflow="fold", max_width=30)
        t.add_column("steps", justify="right")
        t.add_column("median step ms", justify="right")
        for a in ranks:
            t.add_row(str(a.trace.rank), escape(os.path.basename(a.trace.path)), str(a.steps.count),
                      _ms(a.steps.median_us))
        self.console.print(t)


def render_text(report: Report, width: int = 100) -> str:
    """The report as plain text (for report.txt)."""
    console = Console(record=True, width=width, file=open(os.devnull, "w"), color_system=None)
    ConsoleRenderer(console).render(report)
    return console.export_text()
