"""Sets of per-rank traces made from one real rank trace, with chosen ranks slowed.

For the many-rank benchmark and tests, and to try an engine without a job at hand: the real
trace's events, one file per rank (`distributedInfo.rank` set), named as PyTorch's
`tensorboard_trace_handler` names them (`<host>_<pid>.<ms>.pt.trace.json.gz`), so hosts are
known. Two ways a rank is slow:

- `synchronized=False`: each slow rank's whole timeline is stretched by its factor, nothing
  else changes. What copies of one trace with one rank slowed look like (the ranks' traces need
  not come from the same steps): its steps take longer; no one waits for it in the traces.
- `synchronized=True`: as a real data-parallel job behaves. The slow ranks are stretched; on
  every other rank each collective kernel is lengthened by the wait for them (it cannot end
  before its last participant arrives), shifting everything after it, so every rank's
  collectives end together and every rank's step takes about as long: only the time spent
  in collectives tells the slow ranks.

`window="step"` keeps one profiled step and drops what the loader never reads (flow events,
args other than the ones below): a real step of ~9,000 events, ~130 KB gzipped, the small rank
file of a test that needs hundreds of ranks quickly.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

KEPT_ARGS = frozenset({"Input Dims", "Input type", "Call stack", "correlation", "device", "stream", "bytes",
                       "Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size",
                       "Process Group Name", "Process Group Ranks"})
"""Args the trace loader or the collective-size scan read; with `window="step"` the others
(occupancy, grid, external ids...) are dropped."""


def _step_window(events: list[dict]) -> list[dict]:
    """The metadata events and the events that start within the middle `ProfilerStep#`, args
    narrowed to `KEPT_ARGS`, flows dropped."""
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and "dur" in e),
                   key=lambda e: e["ts"])
    if not steps:
        raise ValueError("the source trace has no ProfilerStep# spans")
    step = steps[len(steps) // 2]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    kept = []
    for e in events:
        if e.get("ph") in ("s", "f", "t"):
            continue
        if e.get("ph") != "M" and not (isinstance(e.get("ts"), (int, float)) and lo <= e["ts"] < hi):
            continue
        if isinstance(e.get("args"), dict):
            e = dict(e, args={k: v for k, v in e["args"].items() if k in KEPT_ARGS})
        kept.append(e)
    return kept


def _is_collective_kernel(e: dict) -> bool:
    return e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower() and "dur" in e


def _stretch(events: list[dict], t0: float, factor: float) -> list[dict]:
    """Every event's start and duration stretched by `factor` around `t0`."""
    if factor == 1.0:
        return events
    out = []
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            e = dict(e, ts=t0 + (e["ts"] - t0) * factor)
            if isinstance(e.get("dur"), (int, float)):
                e["dur"] = e["dur"] * factor
        out.append(e)
    return out


def _wait_for(events: list[dict], t0: float, factor: float) -> list[dict]:
    """A rank that waits in each collective for ranks `factor` times slower: time after the
    start of collective k is shifted by (factor - 1) * (end_k - t0), so collective k ends where
    a stretched rank's does; the collective itself absorbs the difference (the wait)."""
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if _is_collective_kernel(e))
    if factor == 1.0 or not kernels:
        return events
    starts = np.array([s for s, _ in kernels])
    shifts = (factor - 1.0) * (np.array([end for _, end in kernels]) - t0)
    shifts = np.maximum.accumulate(shifts)  # never moves time backwards

    def warp(t: float) -> float:
        k = int(np.searchsorted(starts, t, side="left")) - 1  # the last collective starting before t
        return t + (float(shifts[k]) if k >= 0 else 0.0)

    out = []
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            start = warp(e["ts"])
            if isinstance(e.get("dur"), (int, float)):
                e = dict(e, ts=start, dur=warp(e["ts"] + e["dur"]) - start)
            else:
                e = dict(e, ts=start)
        out.append(e)
    return out


def host_of(rank: int, ranks_per_host: int) -> str:
    return f"node-{rank // ranks_per_host:03d}"


def rank_file_name(rank: int, ranks_per_host: int) -> str:
    """`tensorboard_trace_handler`'s name: `<worker>.<ms>.pt.trace.json.gz`, the worker being
    `<host>_<pid>` (the rank is in the trace's `distributedInfo`)."""
    return f"{host_of(rank, ranks_per_host)}_{1000 + rank}.{1_700_000_000_000 + rank}.pt.trace.json.gz"


def make_rank_set(source: Path, out_dir: Path, ranks: int, slow: dict[int, float] | None = None, *,
                  synchronized: bool = False, window: str = "all", ranks_per_host: int = 8,
                  compresslevel: int = 1) -> list[Path]:
    """Write `ranks` rank traces made from `source` into `out_dir`; `slow` maps a rank to how
    many times slower it runs. Identical ranks share one encoding (written once, copied)."""
    slow = dict(slow or {})
    if synchronized and len(set(slow.values())) > 1:
        raise ValueError("synchronized sets slow every slow rank by one factor")
    with gzip.open(source, "rb") as stream:
        data = json.loads(stream.read())
    events = data["traceEvents"] if isinstance(data, dict) else data
    if window == "step":
        events = _step_window(events)
    elif window != "all":
        raise ValueError(f"window must be 'all' or 'step', not {window!r}")
    t0 = min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M")
    factor = max(slow.values(), default=1.0)
    fast_events = _wait_for(events, t0, factor) if synchronized else events
    out_dir.mkdir(parents=True, exist_ok=True)
    encoded: dict[float, bytes] = {}
    paths = []
    for rank in range(ranks):
        f = slow.get(rank, 1.0)
        if f not in encoded:
            evs = _stretch(events, t0, f) if f != 1.0 else fast_events
            top = data if isinstance(data, dict) else {}
            # distributedInfo first: its rank is the first `"rank":` of the encoding
            doc: dict = {"distributedInfo": dict(top.get("distributedInfo") or {}, rank=-1, world_size=ranks)}
            doc.update((k, v) for k, v in top.items() if k not in ("distributedInfo", "traceEvents"))
            doc["traceEvents"] = evs
            encoded[f] = json.dumps(doc, separators=(",", ":")).encode()
        # each file its own rank: the one field that differs, replaced in the encoded bytes
        raw = encoded[f].replace(b'"rank":-1', b'"rank":%d' % rank, 1)
        path = out_dir / rank_file_name(rank, ranks_per_host)
        path.write_bytes(gzip.compress(raw, compresslevel=compresslevel, mtime=0))
        paths.append(path)
    return paths
