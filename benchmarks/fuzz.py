"""Fuzz `torchneck analyze` with hostile and broken traces; print counts by outcome.

Every input must end in rc 0 (warnings say what was skipped) or rc 2 with one line that says what
is wrong; never a traceback, a hang or more than `RSS_LIMIT_MB` of memory. This script generates
cases of seven families, runs each (in a worker process that calls `torchneck.cli.main`, or
through the real CLI in a subprocess), under a per-case time limit, and classifies the outcome:

- `structured`: whole documents drawn by Hypothesis strategies: events whose every field may have
  a wrong type, an extreme number (ids of 2**64, times of +-1e30 or 1e308, NaN), deep nesting,
  a huge string or no value at all; odd top-level fields; bare lists.
- `inject`: a real trace (tests/data) with a few events replaced by such hostile events, or one
  field of a real event given a hostile value: the analyses, not only the loader, see them.
- `bytes`: byte-level mutations of real traces: flips, cuts, insertions, deletions, duplicated
  spans, trailing garbage, invalid UTF-8, runs of blanks, hostile numbers, renamed keys; then
  written plain or gzip-compressed.
- `gzip`: mutations of the compressed stream: cuts (early ones too), flipped bytes, trailing
  garbage or zero padding, several members, a member of garbage.
- `bomb`: gzip bombs: blanks after `"traceEvents":[`, between events, one huge string (closed or
  not); `--bomb-gb` sets their expanded size (8 GB by default, the issue's; the test suite's
  subset uses small ones).
- `special`: paths and folders: /dev/null, a FIFO with no writer, a missing file, an empty
  folder, a folder of rank traces with one corrupt file, output paths in a missing folder or
  under a regular file.

Outcomes: `ok` (rc 0 and, when written, a report.json that a strict JSON parser reads: no NaN or
Infinity), `refused` (rc 2 and exactly one line `torchneck: ...`), `crash` (anything else: a
traceback, another exit code, a second line, a non-strict report), `hang` (over the time limit),
and, apart, how many went over `RSS_LIMIT_MB`. Failing inputs are kept in `--out` to reproduce.

    OMP_NUM_THREADS=1 python benchmarks/fuzz.py --cases 10000 --jobs 2
    python benchmarks/fuzz.py --cases 300 --seed 7 --bomb-gb 0.1    # a quick run

tests/test_fuzz.py runs a fixed, seeded subset of a few hundred cases on every test run.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import multiprocessing as mp
import os
import pickle
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "data"
OUT = HERE / "_out" / "fuzz"

RSS_LIMIT_MB = 300
"""The issue's bound on torchneck's memory, whatever the input."""
TIME_LIMIT_S = 60.0
"""The issue's bound on the time of an input of 100 MB or less (every case here is smaller,
except the bombs' expanded size)."""

SEED_TRACES = (
    "triton_example__triton_example.json.gz",
    "critical_path__cuda_event_sync__event_sync_trace.json.gz",
    "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "gpu_h100__two_streams.json.gz",
    "gpu_h100__reduce_overhead_run.json.gz",
    "torch112_cpu__with_stack.json.gz",
    "gpu_h100__compiled_train.json.gz",
    "torch18_cpu__train.json.gz",
)
"""Small real traces (16-400 KB of JSON) of every layout the loader reads: CUDA, ROCm, Triton,
CPU-only, PyTorch 1.8 and 1.12 (indented, with stacks), torch.compile: the mutations' raw
material."""

FAMILIES = {"structured": 25, "inject": 25, "bytes": 26, "gzip": 16, "bomb": 2, "special": 6}
"""Share of each family among the cases (weights)."""


# ---------------------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    """One input: files to write in a fresh folder, what to analyse, extra flags, and how."""

    name: str
    family: str
    files: dict[str, bytes | Path] = field(default_factory=dict)  # relative path -> content (or a file to link)
    target: str = "trace.json"  # relative to the case's folder, or an absolute path
    flags: list[str] = field(default_factory=list)  # beyond `--json OUT` (e.g. --html, no --quiet)
    fifo: str | None = None  # a FIFO (no writer) to create at this relative path
    cli: bool = False  # through the real CLI in a subprocess, rather than in a worker process
    json_out: str | None = "out/report.json"  # where --json writes (relative), None: no --json


def seed_json(name: str) -> bytes:
    """The uncompressed bytes of a seed trace (cached)."""
    found = _SEED_CACHE.get(name)
    if found is None:
        found = _SEED_CACHE[name] = gzip.decompress((DATA / name).read_bytes())
    return found


def seed_events(name: str) -> tuple[dict, list]:
    """(the top-level object without its events, the events) of a seed trace (cached)."""
    found = _EVENTS_CACHE.get(name)
    if found is None:
        doc = json.loads(seed_json(name))
        events = doc.pop("traceEvents") if isinstance(doc, dict) else doc
        found = _EVENTS_CACHE[name] = (doc if isinstance(doc, dict) else {}, events)
    return found


_SEED_CACHE: dict[str, bytes] = {}
_EVENTS_CACHE: dict[str, tuple[dict, list]] = {}


class Huge:
    """A string of `size` characters, made only when the document is written (so thousands of
    drawn documents do not hold them), within `HUGE_BUDGET` a document."""

    def __init__(self, size: int):
        self.size = size

    def __repr__(self) -> str:
        return f"Huge({self.size})"


HUGE_BUDGET = 24 << 20
"""Characters of huge strings a document may hold; beyond, they are written 1 KB long."""


class Raw:
    """JSON text spliced verbatim into a document (deep nesting, NaN tokens, huge numbers)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text[:40]!r}{'...' if len(self.text) > 40 else ''})"


def to_json(value, indent: int | None = None) -> bytes:
    """`value` as JSON, with `Raw` pieces spliced in as they are and floats that JSON cannot
    hold written as Python's json writes them (NaN, Infinity): hostile, as intended."""
    raws: list[str] = []
    budget = [HUGE_BUDGET]

    def mark(obj):
        if isinstance(obj, Huge):
            size = obj.size if obj.size <= budget[0] else 1 << 10
            budget[0] -= size
            raws.append('"' + "x" * size + '"')
        elif isinstance(obj, Deep):
            raws.append(obj.text())
        elif isinstance(obj, Raw):
            raws.append(obj.text)
        else:
            raise TypeError(type(obj).__name__)
        return f"\x00RAW{len(raws) - 1}\x00"

    text = json.dumps(value, default=mark, indent=indent, ensure_ascii=False)
    if raws:
        text = re.sub(r'"\\u0000RAW(\d+)\\u0000"', lambda m: raws[int(m.group(1))], text)
    return text.encode("utf-8", "surrogatepass")


def _gz(data: bytes, level: int = 6) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


# --- Hypothesis strategies -------------------------------------------------------------------


def strategies():
    """The Hypothesis strategies (imported lazily: the runner alone needs no Hypothesis)."""
    from hypothesis import strategies as st

    huge_ints = st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 2**100, -(2**64)])
    extreme_floats = st.sampled_from([1e308, -1e308, 1e30, -1e30, 1.7e308, 5e-324, -0.0, 1e16, 2.0**53,
                                      float("nan"), float("inf"), float("-inf")])
    numbers = st.one_of(st.integers(-(2**31), 2**31), huge_ints, extreme_floats,
                        st.floats(allow_nan=True, allow_infinity=True))
    huge_text = st.sampled_from([1 << 10, 5000, 1 << 13, 1 << 16, 1 << 16, 1 << 18, 1 << 20, 4 << 20,
                                 16 << 20]).map(Huge)
    texts = st.one_of(st.text(max_size=30), huge_text, st.sampled_from(["", "\u2028", "a\x00b", "\ud800x",
                                                                        "\"}],{", "ProfilerStep#1"]))
    deep = st.tuples(st.integers(2, 200_000), st.sampled_from(["[", "{"])).map(_deep)
    scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
    values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                           st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                          max_leaves=8)
    hostile = st.one_of(values, values, values, deep)  # deep nesting a quarter of the time
    categories = st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "user_annotation", "gpu_memcpy",
                                  "gpu_memset", "python_function", "cuda_driver", "Operator", "Kernel",
                                  "gpu_user_annotation", "cpu_instant_event", "ac2g", "Trace", ""])
    phases = st.sampled_from(["X", "X", "X", "i", "I", "M", "s", "f", "t", "B", "E", "C", "b", "e", "q", ""])
    arg_keys = ["correlation", "device", "stream", "bytes", "Input Dims", "Input dims", "Input type",
                "Call stack", "Bytes", "Total Allocated", "Total Reserved", "Device Type", "Device Id",
                "Addr", "name", "labels", "External id"]
    plausible_args = st.fixed_dictionaries({}, optional={
        "correlation": st.one_of(st.integers(0, 10**6), huge_ints),
        "device": st.integers(-2, 64), "stream": st.integers(-2, 64),
        "Input Dims": st.lists(st.lists(st.integers(0, 4096), max_size=4), max_size=4),
        "Input type": st.lists(st.sampled_from(["float", "double", "c10::Half", ""]), max_size=4),
        "bytes": st.integers(0, 2**40), "Bytes": st.integers(-(2**40), 2**40),
        "Total Allocated": st.integers(0, 2**40), "Device Type": st.integers(0, 2),
        "name": texts, "labels": texts})
    args = st.one_of(plausible_args,
                     st.dictionaries(st.sampled_from(arg_keys), hostile, max_size=5),
                     hostile)

    def field_values(plausible):
        return st.one_of(plausible, plausible, plausible, hostile)

    event = st.fixed_dictionaries({}, optional={
        "ph": field_values(phases),
        "name": field_values(st.one_of(st.sampled_from(["aten::mm", "aten::add", "ProfilerStep#3",
                                                        "cudaLaunchKernel", "[memory]", "process_name",
                                                        "thread_name", "Optimizer.step#SGD.step"]), texts)),
        "cat": field_values(categories),
        "pid": field_values(st.one_of(st.integers(0, 2**31), st.text(max_size=8))),
        "tid": field_values(st.one_of(st.integers(0, 2**31), st.text(max_size=8))),
        "ts": field_values(st.one_of(st.floats(0, 1e7, allow_nan=False), st.integers(0, 2**53))),
        "dur": field_values(st.one_of(st.floats(-10, 1e5, allow_nan=False), st.integers(0, 10**6))),
        "id": field_values(st.integers(0, 100)),
        "args": args,
    })
    plausible = st.fixed_dictionaries({
        "ph": st.just("X"), "cat": categories, "name": st.sampled_from(["aten::mm", "aten::add", "aten::item",
                                                                        "cudaLaunchKernel", "cudaDeviceSynchronize",
                                                                        "void gemm_kernel<float>", "nccl:all_reduce"]),
        "pid": st.integers(0, 3), "tid": st.integers(0, 3), "ts": st.floats(0, 1e5), "dur": st.floats(0, 5e3)},
        optional={"args": plausible_args})
    steps = st.tuples(st.integers(1, 5), st.floats(0, 1e5), st.floats(1, 3e4)).map(
        lambda s: {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s[0]}", "pid": 0, "tid": 0,
                   "ts": s[1], "dur": s[2]})
    events = st.lists(st.one_of(event, plausible, plausible, steps, hostile.filter(lambda v: not isinstance(v, dict))),
                      max_size=60)
    top_level = st.fixed_dictionaries({}, optional={
        "schemaVersion": hostile, "distributedInfo": st.one_of(hostile, st.fixed_dictionaries(
            {"rank": hostile, "world_size": hostile, "backend": hostile})),
        "deviceProperties": hostile, "baseTimeNanoseconds": st.one_of(huge_ints, hostile),
        "traceName": hostile, "displayTimeUnit": hostile})
    document = st.tuples(top_level, events, st.sampled_from(["object", "object", "list", "no_events_key",
                                                             "events_not_a_list"]),
                         st.sampled_from([None, None, 1]), st.booleans())
    injection = st.tuples(st.sampled_from(SEED_TRACES),
                          st.lists(st.tuples(st.floats(0, 1), st.one_of(event, hostile),
                                             st.sampled_from(["replace", "insert", "field"]),
                                             st.sampled_from(["name", "cat", "pid", "tid", "ts", "dur", "ph",
                                                              "args"])),
                                   min_size=1, max_size=6),
                          st.booleans())
    return document, injection


class Deep:
    """A value nested `depth` levels (lists or objects), made only when the document is written."""

    def __init__(self, depth: int, kind: str):
        self.depth, self.kind = depth, kind

    def text(self) -> str:
        if self.kind == "[":
            return "[" * self.depth + "]" * self.depth
        return '{"a":' * self.depth + "1" + "}" * self.depth

    def __repr__(self) -> str:
        return f"Deep({self.depth}, {self.kind!r})"


def _deep(spec: tuple[int, str]) -> Deep:
    return Deep(*spec)


def structured_bytes(drawn) -> tuple[bytes, bool]:
    """A drawn document as (JSON bytes, gzip it?)."""
    top, events, form, indent, compress = drawn
    if form == "list":
        doc = events
    elif form == "no_events_key":
        doc = dict(top, notEvents=events)
    elif form == "events_not_a_list":
        doc = dict(top, traceEvents={"0": events[:1]})
    else:
        doc = dict(top, traceEvents=events)
    return to_json(doc, indent), compress


def injected_bytes(drawn) -> tuple[bytes, bool]:
    """A seed trace with hostile events put in, or hostile values given to its events' fields."""
    seed, changes, compress = drawn
    top, events = seed_events(seed)
    events = list(events)
    for where, hostile, how, key in changes:
        i = min(int(where * len(events)), len(events) - 1)
        if how == "replace":
            events[i] = hostile
        elif how == "insert":
            events.insert(i, hostile)
        elif isinstance(events[i], dict):
            events[i] = dict(events[i], **{key: hostile})
    return to_json(dict(top, traceEvents=events)), compress


def draw_examples(strategy, count: int, seed: int) -> list:
    """`count` examples of a Hypothesis strategy, the same for the same seed."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    found: list = []
    if count <= 0:
        return found

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example):
        found.append(example)

    collect()
    return found[:count]


# --- byte-level mutations --------------------------------------------------------------------

_NUMBER = re.compile(rb"(?<=:)\s*-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_KEY = re.compile(rb'"(ts|dur|ph|name|cat|pid|tid|args|traceEvents|correlation)"\s*:')
_HOSTILE_NUMBERS = [b"1e308", b"-1e308", b"1e30", b"-1e30", b"18446744073709551616", b"-9223372036854775809",
                    b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-0", b"5e-324", b'"12"', b"null", b"[]", b"{}"]
_JUNK = b'{}[],:"\\ \n\t0123456789abcdeXE+-.\x00\xff\xc3\x80'


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One byte-level mutation of a trace's JSON: (what was done, the result)."""
    n = len(data)
    op = rng.choice(["flip", "flip", "cut", "cut", "insert", "delete", "duplicate", "trailing", "utf8",
                     "blanks", "number", "number", "key", "brackets"])
    if op == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(n)
            out[i] ^= rng.randint(1, 255)
        return op, bytes(out)
    if op == "cut":
        return op, data[:rng.randrange(n)]
    if op == "insert":
        i = rng.randrange(n)
        junk = bytes(rng.choice(_JUNK) for _ in range(rng.randint(1, 64)))
        return op, data[:i] + junk + data[i:]
    if op == "delete":
        i = rng.randrange(n)
        return op, data[:i] + data[i + rng.randint(1, 4096):]
    if op == "duplicate":
        i = rng.randrange(n)
        j = min(n, i + rng.randint(1, 1 << 16))
        return op, data[:j] + data[i:j] + data[j:]
    if op == "trailing":
        tail = rng.choice([b"\x00" * rng.randint(1, 4096), b"garbage", b"\n]}", b",{}]", b"}}}}",
                           bytes(rng.randrange(256) for _ in range(rng.randint(1, 512))), _gz(b"more")])
        return op, data + tail
    if op == "utf8":
        out = bytearray(data)
        quotes = [m.start() + 1 for m in re.finditer(rb'"', data[:1 << 20])] or [0]
        for _ in range(rng.randint(1, 5)):
            i = min(rng.choice(quotes), n - 1)
            out[i:i + 1] = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80\x80"])
        return op, bytes(out)
    if op == "blanks":
        i = data.find(b"[", max(0, data.find(b'"traceEvents"'))) + 1 if rng.random() < 0.4 else rng.randrange(n)
        run = rng.choice([b" ", b"\n", b"\t", b" \r\n"]) * rng.choice([1 << 10, 1 << 16, 1 << 20, 8 << 20])
        return op, data[:i] + run + data[i:]
    if op == "number":
        spots = [m.span() for m in _NUMBER.finditer(data)]
        if not spots:
            return op, data
        out = data
        for a, b in sorted(rng.sample(spots, min(len(spots), rng.randint(1, 4))), reverse=True):
            out = out[:a] + rng.choice(_HOSTILE_NUMBERS) + out[b:]
        return op, out
    if op == "key":
        spots = [m.span(1) for m in _KEY.finditer(data)]
        if not spots:
            return op, data
        a, b = rng.choice(spots)
        return op, data[:a] + rng.choice([b"", b"TS", b"ph\\u0000", b"name" * 3]) + data[b:]
    # brackets: swap one structural character for another
    spots = [i for i in range(0, n, max(1, n // 4096)) if data[i:i + 1] in b"{}[],:\""]
    if not spots:
        return op, data
    i = rng.choice(spots)
    return op, data[:i] + bytes([rng.choice(b"{}[],:\"")]) + data[i + 1:]


def mutate_gzip(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One mutation at the level of the compressed stream of a trace's JSON `data`."""
    op = rng.choice(["cut", "cut", "flip", "flip", "trailing", "zeros", "members", "garbage_member",
                     "empty", "header_only", "double"])
    packed = _gz(data, rng.choice([1, 6, 9]))
    n = len(packed)
    if op == "cut":
        return op, packed[:rng.choice([rng.randrange(10, 64), rng.randrange(n // 8 + 1), rng.randrange(n)])]
    if op == "flip":
        out = bytearray(packed)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(10 if rng.random() < 0.9 else 0, n)
            out[i] ^= rng.randint(1, 255)
        return op, bytes(out)
    if op == "trailing":
        return op, packed + rng.choice([b"garbage", bytes(rng.randrange(256) for _ in range(100)), b"\x1f\x8b",
                                        b"\x1f\x8b\x08\x00"])
    if op == "zeros":
        return op, packed + b"\x00" * rng.choice([1, 512, 10240])
    if op == "members":
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 3))))
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
        return op, b"".join(_gz(p) for p in parts)
    if op == "garbage_member":
        return op, packed + _gz(bytes(rng.randrange(256) for _ in range(200)))
    if op == "empty":
        return op, _gz(b"")
    if op == "header_only":
        return op, packed[:10]
    return op, _gz(packed)  # double: gzip of gzip


# --- bombs -------------------------------------------------------------------------------------


def bomb_file(kind: str, expanded_bytes: int, folder: Path) -> Path:
    """A gzip file that expands to about `expanded_bytes` (cached in `folder`): `kind` is where
    the bulk lies: `blanks_after_bracket`, `blanks_between`, `string` (one huge name, closed),
    `open_string` (never closed), `blanks_plain` (uncompressed blanks; kept small)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"bomb-{kind}-{expanded_bytes}.json{'' if kind == 'blanks_plain' else '.gz'}"
    if path.exists():
        return path
    events = seed_json("gpu_h100__two_streams.json.gz")
    first = events.index(b"{", events.index(b"[", events.index(b'"traceEvents"')))
    second = events.index(b"},", first) + 2
    filler_char = b"a" if kind in ("string", "open_string") else b" "
    head = {"blanks_after_bracket": events[:first], "blanks_between": events[:second],
            "string": b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 2, "name": "',
            "open_string": b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 2, "name": "',
            "blanks_plain": events[:first]}[kind]
    tail = {"blanks_after_bracket": events[first:], "blanks_between": events[second:],
            "string": b'"}, ' + events[first:], "open_string": b"", "blanks_plain": events[first:]}[kind]
    tmp = path.with_suffix(".part")
    if kind == "blanks_plain":
        with open(tmp, "wb") as f:
            f.write(head)
            block = filler_char * (1 << 20)
            for _ in range(expanded_bytes >> 20):
                f.write(block)
            f.write(tail)
    else:  # members: the filler compressed once (16 MB -> ~16 KB), repeated
        block = 16 << 20
        member = _gz(filler_char * min(block, expanded_bytes), 9)
        with open(tmp, "wb") as f:
            f.write(_gz(head))
            for _ in range(max(1, expanded_bytes // block)):
                f.write(member)
            if tail:
                f.write(_gz(tail))
    tmp.rename(path)
    return path


# --- the case list -----------------------------------------------------------------------------


CLI_SHARE = 0.1
"""Share of cases run through the real CLI (a subprocess each, ~1 s); the others call its `main`
in a forked worker (~0.1 s). Half the `special` ones go through the CLI."""


def _flags(rng: random.Random, cli_share: float) -> tuple[list[str], bool]:
    """Output flags of a case: sometimes the terminal report (rendered) and the HTML too."""
    flags = [] if rng.random() < 0.3 else ["--quiet"]
    if rng.random() < 0.25:
        flags += ["--html", "out/report.html"]
    return flags, rng.random() < cli_share


def special_case(i: int, rng: random.Random, seeds: Callable[[], bytes], cli_share: float = CLI_SHARE) -> Case:
    """Paths and folders: device files, FIFOs, missing or empty places, broken ranks, output paths."""
    kind = rng.choice(["dev_null", "fifo", "missing", "empty_dir", "broken_dir", "corrupt_rank",
                       "corrupt_rank", "json_missing_dir", "html_missing_dir", "json_under_file",
                       "run_dir_files", "directory_of_garbage"])
    case = Case(f"special-{i}-{kind}", "special", cli=rng.random() < 5 * cli_share)
    if kind == "dev_null":
        case.target = "/dev/null"
    elif kind == "fifo":
        case.fifo, case.target = "pipe.json", "pipe.json"
    elif kind == "missing":
        case.target = "no/such/trace.json"
    elif kind == "empty_dir":
        case.files, case.target = {"ranks/.keep": b""}, "ranks"
    elif kind in ("broken_dir", "directory_of_garbage"):
        case.files = {f"ranks/rank-{r}.json": bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
                      for r in range(rng.randint(1, 3))}
        case.target = "ranks"
    elif kind == "corrupt_rank":
        good = [seeds() for _ in range(rng.randint(1, 3))]
        case.files = {f"ranks/rank-{r}.json.gz": _gz(g) for r, g in enumerate(good)}
        _, broken = (mutate_gzip if rng.random() < 0.5 else mutate_bytes)(seeds(), rng)
        case.files[f"ranks/rank-{len(good)}.json"] = broken[:rng.randrange(1, max(2, len(broken)))]
        case.target = "ranks"
    elif kind == "run_dir_files":
        case.files = {"run/trace.json.gz": _gz(seeds()), "run/run.json": b'{"exit_code": 0}',
                      "run/env.json": b"{}"}
        case.target = "run"
    else:
        case.files = {"trace.json.gz": _gz(seeds())}
        case.target = "trace.json.gz"
        if kind == "json_missing_dir":
            case.json_out = "out/missing/deeper/report.json"
        elif kind == "html_missing_dir":
            case.flags = ["--quiet", "--html", "out/missing/report.html"]
        else:  # the folder's place is taken by a file: refused with one line
            case.files["out/blocker"] = b"a file"
            case.json_out = "out/blocker/report.json"
    return case


def generate(count: int, seed: int = 0, bomb_bytes: int = 8 << 30, bomb_folder: Path = OUT / "bombs",
             families: dict[str, int] | None = None, cli_share: float = CLI_SHARE) -> list[Case]:
    """`count` cases, the same for the same arguments."""
    return list(iter_cases(count, seed, bomb_bytes, bomb_folder, families, cli_share))


def iter_cases(count: int, seed: int = 0, bomb_bytes: int = 8 << 30, bomb_folder: Path = OUT / "bombs",
               families: dict[str, int] | None = None, cli_share: float = CLI_SHARE) -> Iterator[Case]:
    """`generate`, a case at a time: each case's bytes are made when it is asked for, so ten
    thousand of them (some with 16 MB strings) are never held at once."""
    rng = random.Random(seed)
    weights = families or FAMILIES
    names = list(weights)
    plan = rng.choices(names, weights=[weights[k] for k in names], k=count)
    document, injection = strategies()
    documents = iter(draw_examples(document, plan.count("structured"), seed))
    injections = iter(draw_examples(injection, plan.count("inject"), seed + 1))

    def a_seed() -> bytes:
        return seed_json(rng.choice(SEED_TRACES))

    for i, family in enumerate(plan):
        flags, cli = _flags(rng, cli_share)
        if family == "structured":
            data, compress = structured_bytes(next(documents))
            case = Case(f"structured-{i}", family)
        elif family == "inject":
            data, compress = injected_bytes(next(injections))
            case = Case(f"inject-{i}", family)
        elif family == "bytes":
            op, data = mutate_bytes(a_seed(), rng)
            compress = rng.random() < 0.4
            case = Case(f"bytes-{i}-{op}", family)
        elif family == "gzip":
            op, data = mutate_gzip(a_seed(), rng)
            compress = False
            case = Case(f"gzip-{i}-{op}", family, target="trace.json.gz")
        elif family == "bomb":
            kind = rng.choice(["blanks_after_bracket", "blanks_between", "string", "open_string", "blanks_plain"])
            size = min(bomb_bytes, 256 << 20) if kind == "blanks_plain" else bomb_bytes
            path = bomb_file(kind, size, bomb_folder)
            yield Case(f"bomb-{i}-{kind}", family, files={path.name: path}, target=path.name, flags=flags, cli=cli)
            continue
        else:
            case = special_case(i, rng, a_seed, cli_share)
            if not case.flags:
                case.flags = flags
            yield case
            continue
        if compress:
            data = _gz(data)
            case.target = "trace.json.gz"
        case.files = {case.target: data}
        case.flags, case.cli = flags, cli
        yield case


# ---------------------------------------------------------------------------------------------
# Running


@dataclass
class Result:
    name: str
    family: str
    mode: str  # "process" or "cli"
    outcome: str  # ok, refused, crash, hang
    rc: int | None
    seconds: float
    rss_mb: float
    detail: str = ""


def prepare(case: Case, folder: Path) -> list[str]:
    """Write a case's files into `folder`; the `analyze` arguments (paths relative to it)."""
    for rel, content in case.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            path.symlink_to(content.resolve())
        else:
            path.write_bytes(content)
    if case.fifo:
        os.mkfifo(folder / case.fifo)
    (folder / "out").mkdir(exist_ok=True)
    argv = ["analyze", case.target, *case.flags]
    if case.json_out:
        argv += ["--json", case.json_out]
    return argv


def judge(case: Case, folder: Path, rc: int | None, stderr: str, stdout: str = "") -> tuple[str, str]:
    """(outcome, detail) of a finished case, by the contract."""
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("torchneck: HTML report ")]
    if "Traceback" in stderr:
        return "crash", _last_lines(stderr)
    if rc == 2:
        if len(lines) == 1 and lines[0].startswith("torchneck: "):
            return "refused", lines[0][:300]
        return "crash", f"rc 2 but {len(lines)} line(s): {_last_lines(stderr)}"
    if rc not in (0, 1):  # 1: a --fail-on gate (not used here)
        return "crash", f"rc {rc}: {_last_lines(stderr)}"
    if lines:
        return "crash", f"rc {rc} with output on stderr: {_last_lines(stderr)}"
    if case.json_out:
        report = folder / case.json_out
        try:
            json.loads(report.read_text(encoding="utf-8"), parse_constant=_not_json)
        except (OSError, ValueError) as exc:
            return "crash", f"report.json is not strict JSON: {exc}"[:300]
    return "ok", ""


def _not_json(token: str):
    raise ValueError(f"{token} is not JSON")


def _last_lines(text: str, n: int = 3) -> str:
    return " | ".join(ln.strip() for ln in text.strip().splitlines()[-n:])[:400]


def run_in_this_process(case: Case, folder: Path) -> tuple[int | None, str, str]:
    """Call `torchneck.cli.main` here, stdout and stderr captured: (rc, stdout, stderr); rc None
    when it raised (the traceback is in stderr)."""
    from torchneck.cli import main

    argv = prepare(case, folder)
    out, err = io.StringIO(), io.StringIO()
    os.chdir(folder)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # the contract is broken: keep what broke it
            err.write(traceback.format_exc())
            rc = None
    return rc, out.getvalue(), err.getvalue()


def run_forked(case: Case, folder: Path, time_limit: float) -> Result:
    """The case in a child forked from this (lean) worker: its peak RSS is then the case's own
    (plus the imports, as in a CLI process), read from wait4; a child over the time limit is
    killed (a hang), one that dies is a crash."""
    read_end, write_end = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child, in its own process group (with any processes it starts)
        os.setsid()
        os.close(read_end)
        code = 0
        try:
            rc, out, err = run_in_this_process(case, folder)
            outcome, detail = judge(case, folder, rc, err, out)
            with os.fdopen(write_end, "wb") as f:
                pickle.dump((outcome, rc, detail), f)
        except BaseException:
            code = 3
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        ready = select.select([f], [], [], time_limit)[0]
        if not ready:
            os.killpg(pid, signal.SIGKILL)
            os.wait4(pid, 0)
            return Result(case.name, case.family, "process", "hang", None, time.perf_counter() - start, 0.0,
                          f"over {time_limit:.0f} s")
        data = f.read()
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - start
    rss = usage.ru_maxrss / 1024
    if not data:
        return Result(case.name, case.family, "process", "crash", None, seconds, rss,
                      f"the process died ({_status(status)})")
    outcome, rc, detail = pickle.loads(data)
    return Result(case.name, case.family, "process", outcome, rc, seconds, rss, detail)


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"


PEAK_RSS_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "sys.stderr.write(f'\\n@peak-rss-kb {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
    "sys.exit(code)\n")
"""Runs a command and writes its peak RSS last on stderr. A child's rusage counts the memory of
the process it was forked from (Linux keeps the larger of the two across exec): measured from a
small Python process (~10 MB) rather than from the caller (a test run, hundreds of MB)."""


def with_peak_rss(argv: list[str]) -> list[str]:
    """`argv` run under `PEAK_RSS_WRAPPER` (read the figure back with `split_peak_rss`)."""
    return [sys.executable, "-c", PEAK_RSS_WRAPPER, *argv]


def split_peak_rss(stderr: str) -> tuple[str, float]:
    """(the command's own stderr, its peak RSS in MB) from a `with_peak_rss` run's stderr."""
    head, sep, tail = stderr.rpartition("\n@peak-rss-kb ")
    if not sep:
        return stderr, 0.0
    return head, int(tail.split()[0]) / 1024


def run_through_cli(case: Case, folder: Path, time_limit: float) -> Result:
    """`python -m torchneck analyze ...` in a subprocess, its peak RSS measured (`with_peak_rss`)."""
    argv = prepare(case, folder)
    env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="100")
    start = time.perf_counter()
    proc = subprocess.Popen(with_peak_rss([sys.executable, "-m", "torchneck", *argv]), cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=time_limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Result(case.name, case.family, "cli", "hang", None, time.perf_counter() - start, 0.0,
                      f"over {time_limit:.0f} s")
    seconds = time.perf_counter() - start
    err, rss = split_peak_rss(stderr.decode("utf-8", "replace"))
    outcome, detail = judge(case, folder, proc.returncode, err, stdout.decode("utf-8", "replace"))
    return Result(case.name, case.family, "cli", outcome, proc.returncode, seconds, rss, detail)


def _worker(conn, scratch: str) -> None:
    """A worker process: imports torchneck once, then runs the cases it is sent one at a time,
    each in a forked child (or through the CLI)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torchneck.cli  # noqa: F401  (imported once, shared by the forked children)
    import torchneck.pipeline  # noqa: F401
    import torchneck.report.console  # noqa: F401
    import torchneck.report.html  # noqa: F401
    from torchneck.trace import loader

    loader.return_large_frees_promptly()  # as the CLI's process does
    while True:
        msg = conn.recv()
        if msg is None:
            return
        case, mode, time_limit = msg
        folder = Path(tempfile.mkdtemp(prefix="case-", dir=scratch))
        try:
            if mode == "cli":
                result = run_through_cli(case, folder, time_limit)
            else:
                result = run_forked(case, folder, time_limit)
        except BaseException as exc:  # the harness's own failure, reported as such
            result = Result(case.name, case.family, mode, "crash", None, 0.0, 0.0,
                            f"harness: {type(exc).__name__}: {exc}")
        shutil.rmtree(folder, ignore_errors=True)
        conn.send(result)


class Runner:
    """Worker processes that run cases under a time limit (each worker enforces it on its
    children; a worker that overruns it by far is killed and replaced)."""

    def __init__(self, jobs: int, time_limit: float, scratch: Path):
        self.time_limit = time_limit
        self.scratch = scratch
        self.ctx = mp.get_context("spawn")  # a lean worker: forked children then measure the case alone
        self.slots: list = [None] * jobs

    def _start(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, str(self.scratch)))
        proc.start()
        child.close()
        return proc, parent

    def run(self, cases: Iterable[Case], on_result: Callable[[Result, Case], None] | None = None) -> list[Result]:
        todo = iter(cases)
        case: Case | None = next(todo, None)
        results: list[Result] = []
        busy: dict[int, tuple[Case, float]] = {}
        try:
            while case is not None or busy:
                for k in range(len(self.slots)):
                    if k not in busy and case is not None:
                        if self.slots[k] is None:
                            self.slots[k] = self._start()
                        mode = "cli" if case.cli else "process"
                        self.slots[k][1].send((case, mode, self.time_limit))
                        busy[k] = (case, time.perf_counter())
                        case = next(todo, None)
                for k, (running, started) in list(busy.items()):
                    proc, conn = self.slots[k]
                    result = None
                    if conn.poll(0.02):
                        try:
                            result = conn.recv()
                        except (EOFError, OSError):
                            result = self._lost(k, running, started, "the worker died")
                    elif not proc.is_alive():
                        result = self._lost(k, running, started, "the worker died")
                    elif time.perf_counter() - started > self.time_limit + 30:
                        result = self._lost(k, running, started, "the worker stopped answering")
                    if result is not None:
                        del busy[k]
                        results.append(result)
                        if on_result:
                            on_result(result, running)
        finally:
            self.close()
        return results

    def _lost(self, k: int, case: Case, started: float, why: str) -> Result:
        proc, conn = self.slots[k]
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        conn.close()
        self.slots[k] = None
        return Result(case.name, case.family, "cli" if case.cli else "process", "crash", None,
                      time.perf_counter() - started, 0.0, f"{why} ({proc.exitcode})")

    def close(self) -> None:
        for k, slot in enumerate(self.slots):
            if slot is not None:
                proc, conn = slot
                try:
                    conn.send(None)
                except OSError:
                    pass
                proc.join(5)
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.join()
                self.slots[k] = None


def run_cases(cases: Iterable[Case], jobs: int = 1, time_limit: float = TIME_LIMIT_S,
              on_result: Callable[[Result, Case], None] | None = None) -> list[Result]:
    """Run `cases` in `jobs` worker processes; their results in completion order."""
    scratch = Path(tempfile.mkdtemp(prefix="torchneck-fuzz-"))
    try:
        return Runner(jobs, time_limit, scratch).run(cases, on_result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def keep_failure(case: Case, result: Result, folder: Path) -> None:
    """Write a failing case's files and what happened, to reproduce it by hand."""
    where = folder / case.name
    where.mkdir(parents=True, exist_ok=True)
    for rel, content in case.files.items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            (where / "LINK").write_text(str(content))
        else:
            path.write_bytes(content)
    (where / "result.json").write_text(json.dumps(result.__dict__ | {"target": case.target, "flags": case.flags,
                                                                     "json_out": case.json_out}, indent=1))


def summarise(results: list[Result]) -> str:
    """Counts by outcome (overall, by family, by mode), the worst RSS and the slowest case."""
    lines = []
    total = Counter(r.outcome for r in results)
    lines.append(f"{len(results)} cases: " + ", ".join(f"{k} {total[k]}" for k in ("ok", "refused", "crash", "hang")))
    for key in ("family", "mode"):
        for value in sorted({getattr(r, key) for r in results}):
            part = Counter(r.outcome for r in results if getattr(r, key) == value)
            lines.append(f"  {key} {value:10s} " + ", ".join(f"{k} {part[k]}" for k in ("ok", "refused", "crash",
                                                                                        "hang")))
    measured = [r for r in results if r.rss_mb]
    if measured:
        worst = max(measured, key=lambda r: r.rss_mb)
        over = sum(r.rss_mb > RSS_LIMIT_MB for r in measured)
        lines.append(f"worst RSS {worst.rss_mb:.0f} MB ({worst.name}, {worst.mode}); over {RSS_LIMIT_MB} MB: {over}")
    slowest = max(results, key=lambda r: r.seconds, default=None)
    if slowest:
        lines.append(f"slowest {slowest.seconds:.1f} s ({slowest.name}, {slowest.mode}, {slowest.outcome})")
    refused = Counter(re.sub(r"^torchneck: \S+: ", "", r.detail)[:70] for r in results if r.outcome == "refused")
    if refused:
        lines.append("most frequent refusals: " + "; ".join(f"{n}x {d}" for d, n in refused.most_common(6)))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT_S, help="seconds a case (default 60)")
    parser.add_argument("--bomb-gb", type=float, default=8.0, help="expanded size of the gzip bombs (default 8)")
    parser.add_argument("--family", action="append", choices=list(FAMILIES), help="only these families")
    parser.add_argument("--cli-share", type=float, default=CLI_SHARE,
                        help="share of cases run through the CLI (default 0.1; half the special ones)")
    parser.add_argument("--out", type=Path, default=OUT, help="where failing cases are kept")
    args = parser.parse_args()
    families = {k: v for k, v in FAMILIES.items() if not args.family or k in args.family}
    t0 = time.perf_counter()
    cases = iter_cases(args.cases, args.seed, int(args.bomb_gb * (1 << 30)), args.out / "bombs", families,
                       args.cli_share)
    failures = args.out / "failures"
    shutil.rmtree(failures, ignore_errors=True)
    done = [0]

    def report(result: Result, case: Case) -> None:
        done[0] += 1
        if result.outcome in ("crash", "hang") or result.rss_mb > RSS_LIMIT_MB:
            print(f"  {result.outcome.upper()} {result.name} ({result.mode}, {result.seconds:.1f} s, "
                  f"{result.rss_mb:.0f} MB): {result.detail}", flush=True)
            keep_failure(case, result, failures)
        if done[0] % 500 == 0:
            print(f"  ... {done[0]} done ({time.perf_counter() - t0:.0f} s)", flush=True)

    results = run_cases(cases, args.jobs, args.time_limit, report)
    print(summarise(results))
    print(f"total {time.perf_counter() - t0:.0f} s ({sum(r.mode == 'cli' for r in results)} cases through the CLI)")


if __name__ == "__main__":
    main()
