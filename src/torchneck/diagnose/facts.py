"""What the rules read: the analysis of the main trace and, for a live run, the run's own evidence."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import msgspec

from ..analysis.ops import BACKWARD_NODE
from ..model.analysis import RankAnalysis
from ..model.findings import Where

LAUNCH_UNBLOCKED_US = 20.0
"""A kernel launch's own CPU time under the profiler (~5-20 µs); beyond it on average, launches
waited for room in the device's full queue: a GPU-bound program running ahead of its kernels."""


class Facts(msgspec.Struct, kw_only=True):
    """Everything a rule may look at. `analysis` is None when no trace was recorded; the other
    parts are empty for `torchneck analyze` (a trace alone has no run, samples or compile log).

    The run's parts are still the dicts their capture modules write (env.json, run.json's
    phases and call sites, the sampled Python hotspots, the compile log's summary)."""

    analysis: RankAnalysis | None = None
    env: dict[str, Any] = {}
    phases: dict[str, Any] | None = None
    python: dict[str, Any] | None = None
    ops_by_line: list[dict[str, Any]] = []
    compile: dict[str, Any] | None = None  # analysis/compile.compile_summary of the run's compile log
    run_wall_s: float = 0.0
    call_sites: list[dict[str, Any]] = []  # capture/callsites.py: configuration calls and their lines
    clock: dict[str, Any] = {}  # run.json's clock: how steps were found, module outputs

    def sites_of(self, what: str) -> list[dict[str, Any]]:
        """The recorded call sites of one kind ("optimizer", "set_num_threads", ...)."""
        return [c for c in self.call_sites if c.get("what") == what]

    @property
    def window_s(self) -> float:
        """The profiled steady state, the denominator of every per-window share."""
        if self.analysis:
            return self.analysis.steps.window_us / 1e6
        if self.phases:
            return float(self.phases["phases"]["window_s"])
        return 0.0

    @property
    def steady_s(self) -> float:
        """The run after start-up (its steps), the horizon a share of the window applies to; 0
        without a run (a trace alone). Steps counted by optimizer steps end at their tick: the
        first step's own work ran before the first tick. Where the steady state was seen to begin
        a step or more before that tick (the stacks began to repeat), start-up has left it out
        already; where not (steps too long to repeat early: an inverse problem's 1 s sweeps), a
        steady step of start-up is the steps' too."""
        phases = self.phases or {}
        startup = float((phases.get("phases") or {}).get("startup_s") or 0.0)
        first_step = 0.0
        if phases.get("clock") == "optimizer" and phases.get("steady_step_s"):
            counted = float(phases.get("first_tick_offset_s") or 0.0) - float(
                phases.get("steady_from_offset_s") or 0.0)
            first_step = max(min(float(phases["steady_step_s"]), startup) - max(counted, 0.0), 0.0)
        return max(self.run_wall_s - startup + first_step, 0.0)

    @property
    def steps(self) -> int:
        return self.analysis.steps.count if self.analysis else 0

    def gpu_cut_saving(self, cut_s: float) -> float:
        """The window time that `cut_s` less GPU kernel time would save. A step takes the longer of
        its host time and its GPU time: the GPU-bound part of the window shrinks by the cut, but
        not below the host's own time (the steps' CPU spans less the waits for the device, in syncs
        or in launches held back by a full queue): kernels sped up past the host's pace save only
        down to it."""
        a = self.analysis
        window = self.window_s
        if not a or window <= 0 or cut_s <= 0:
            return 0.0
        gpu_s = max((d.busy_us for d in a.gpu.devices), default=0.0) / 1e6
        if gpu_s <= 0:  # no device summary to pace by: the cut as it is
            return min(cut_s, window)
        host_us = a.steps.window_us - a.steps.gpu_tail_us
        if a.steps.count >= 2 and a.steps.median_us > 0:  # a first step's warm-up is not the pace
            host_us = min(host_us, a.steps.median_us * a.steps.count)
        launch = a.gpu.launch
        blocked_us = launch.launch_calls * max((launch.cpu_launch_mean_us or 0.0) - LAUNCH_UNBLOCKED_US, 0.0)
        host_s = max(host_us - a.syncs.sync_wait_us - blocked_us, 0.0) / 1e6
        before = max(host_s, min(gpu_s, window))
        after = max(host_s, min(gpu_s, window) - cut_s)
        return min(max(before - after, 0.0), window)

    def pct(self, seconds: float) -> float:
        """`seconds` as a percentage of the profiled window."""
        return 100 * seconds / self.window_s if self.window_s > 0 else 0.0

    def sampled_files(self) -> list[str]:
        """The program's files its steady state's sampled lines are in, busiest first."""
        lines = ((self.python or {}).get("window") or {}).get("lines") or []
        return list(dict.fromkeys(ln["file"] for ln in lines if ln.get("file")))

    def lines_for_ops(self, names: Collection[str] | None, limit: int = 3) -> list[Where]:
        """User lines under which these ops (None: all ops together) spent most self time. With
        all ops, these are the lines where the CPU issues the work, and the kernel launches."""
        acc: dict[tuple[str, int, str], float] = {}
        for e in self.ops_by_line:
            if (names is None or e["op"] in names) and e.get("file"):
                k = (e["file"], e["line"], e.get("function", ""))
                acc[k] = acc.get(k, 0.0) + e["self_us"]
        best = sorted(acc.items(), key=lambda kv: -kv[1])[:limit]
        return [Where(file=f, line=ln, function=fn) for (f, ln, fn), _ in best]

    def ops_at(self, where: Where) -> list[dict[str, Any]]:
        """The trace's op entries (op, count, self time) placed on that line of the user's code."""
        return [e for e in self.ops_by_line if (e.get("file"), e.get("line")) == (where.file, where.line)]

    def backward_us_at(self, where: Where) -> float:
        """The backward pass's time spent differentiating the ops run at that line: each kind of
        autograd node (`analysis.ops.backward_nodes`) in the share of its forward op's calls the
        line made of those made outside backward passes (the lines running autograd's nodes). The
        backward runs at the `.backward()` line, so an idiom's line holds only its forward half;
        rewriting it removes both."""
        a = self.analysis
        backward_lines = {(e.get("file"), e.get("line")) for e in self.ops_by_line if e["op"].startswith(BACKWARD_NODE)}
        if not a or (where.file, where.line) in backward_lines:
            return 0.0
        at_line: dict[str, int] = {}
        forward: dict[str, int] = {}
        for e in self.ops_by_line:
            at = (e.get("file"), e.get("line"))
            if at not in backward_lines:
                forward[e["op"]] = forward.get(e["op"], 0) + int(e.get("count") or 0)
                if at == (where.file, where.line):
                    at_line[e["op"]] = at_line.get(e["op"], 0) + int(e.get("count") or 0)
        return sum(n.total_us * at_line[n.forward_op] / forward[n.forward_op]
                   for n in a.ops.backward_nodes if at_line.get(n.forward_op))

    def sampled_line_in_ops(self, min_share: float) -> list[Where]:
        """The steady state's sampled line spending the most time inside torch ops, if that is
        `min_share` of it: where an op runs when the trace places none (a window cut short
        before its line marks)."""
        steady = (self.python or {}).get("window") or {}
        total = steady.get("sampled_s") or 0.0
        lines = [ln for ln in steady.get("lines", []) if "outside_ops_s" in ln]
        best = max(lines, key=lambda ln: ln["total_s"] - ln["outside_ops_s"], default=None)
        if best is None or total <= 0 or (best["total_s"] - best["outside_ops_s"]) / total < min_share:
            return []
        return where_of([best])

    def with_callers(self, where: list[Where], part: str = "window") -> list[Where]:
        """`where`, then the user's lines up the one call path that carries the sampled time of its
        first line the sampler saw called (`python.<part>.lines[].callers`, the steady state's or
        the DataLoader's `loading`): work done inside a helper is changed where the helper is called
        (batch the calls, a larger recursion leaf, tokenize once), which the ops or the helper's own
        lines cannot name."""
        sampled = self._sampled_callers(part)
        seen = {(w.file, w.line) for w in where}
        for w in where:
            callers = sampled.get((w.file, w.line))
            if callers:
                return where + [c for c in where_of(callers) if (c.file, c.line) not in seen]
        return where

    def with_each_caller(self, where: list[Where]) -> list[Where]:
        """`where`, then the sampled line calling each of them (a helper's product assembled for
        its caller's determinant: `slogdet(self.weight())`)."""
        sampled = self._sampled_callers("window")
        seen = {(w.file, w.line) for w in where}
        callers = [c for w in where for c in where_of((sampled.get((w.file, w.line)) or [])[:1])]
        return where + [c for c in callers if (c.file, c.line) not in seen]

    def _sampled_callers(self, part: str) -> dict[tuple[Any, Any], list]:
        """The sampled lines' callers by (file, line), in `python.<part>`: of two frames on one line
        (a comprehension's and the function holding it, `embed_all.<locals>.<listcomp>` and
        `embed_all`), the one that took more time (lines come heaviest first)."""
        lines = ((self.python or {}).get(part) or {}).get("lines", [])
        callers: dict[tuple[Any, Any], list] = {}
        for ln in lines:
            callers.setdefault((ln.get("file"), ln.get("line")), ln.get("callers") or [])
        return callers


def where_of(items: list[Any]) -> list[Where]:
    """`Where`s from records or dicts that carry `file`, `line` and `function` (hotspot lines,
    call sites, compile frames, code sites...)."""
    out = []
    for d in items:
        get = d.get if isinstance(d, dict) else (lambda k, default=None, d=d: getattr(d, k, default))
        file, line = get("file"), get("line")
        if file and line is not None:
            out.append(Where(file=str(file), line=int(line), function=get("function") or ""))
    return out
