"""Each class of hostile or broken input that once crashed, hung, blew up memory or lost readable
data (issue 25), reproduced as its own test. The contract: rc 0 with warnings that say what was
skipped, or rc 2 with one line; never a traceback, a hang, or more than 300 MB.

The generated counterpart (thousands of such inputs) is benchmarks/fuzz.py; tests/test_fuzz.py
runs a seeded subset of it.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, validate_report

from torchneck.errors import TraceError
from torchneck.trace.loader import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import fuzz  # noqa: E402  (the harness: its way of measuring a command's peak RSS)

RSS_LIMIT_MB = 300
"""The issue's bound on memory, whatever the input."""

SMALL = DATA / "torch18_cpu__train.json.gz"  # 400 KB of JSON, PyTorch 1.8's layout, steps and ops
GPU = DATA / "gpu_h100__two_streams.json.gz"


def events_of(path: Path = SMALL) -> list[dict]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def steps_trace(extra: list | None = None, at: int | None = None) -> list:
    """A small real trace's events with `extra` put in (in the middle by default)."""
    events = events_of()
    i = len(events) // 2 if at is None else at
    return events[:i] + list(extra or []) + events[i:]


def write(tmp_path: Path, events, name: str = "trace.json", top: dict | None = None) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(dict(top or {}, traceEvents=events)))
    return path


def x_count(events: list) -> int:
    return sum(1 for e in events if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") != "python_function")


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> tuple[int, str, str, float]:
    """`python -m torchneck ARGS` in a subprocess: (rc, stdout, stderr, peak RSS in MB)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="100")
    proc = subprocess.Popen(fuzz.with_peak_rss([sys.executable, "-m", "torchneck", *args]), cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"torchneck {' '.join(args)} ran over {timeout} s (a hang)")
    err, rss = fuzz.split_peak_rss(err)
    return proc.returncode, out, err, rss


def assert_one_line(rc: int, err: str, *words: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchneck: "), err
    for word in words:
        assert word in lines[0], lines[0]


def strict_json(text: str) -> dict:
    """A report as a strict JSON parser reads it: NaN and Infinity are not JSON."""
    def refuse(token):
        raise ValueError(f"{token} in report.json")

    return json.loads(text, parse_constant=refuse)


# --- RecursionError on deeply nested events ---------------------------------------------------


@pytest.mark.parametrize("depth", [300, 5_000, 200_000])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_deeply_nested_event_is_skipped_and_counted_the_others_read(tmp_path, depth, workers):
    deep = json.loads("[" * 10 + "]" * 10)
    events = steps_trace([{"ph": "X", "cat": "cpu_op", "name": "deep", "pid": 1, "tid": 1, "ts": 5, "dur": 1,
                           "args": {"Input Dims": deep, "x": "PLACEHOLDER"}}])
    text = json.dumps({"traceEvents": events}).replace('"PLACEHOLDER"', "[" * depth + "]" * depth)
    path = tmp_path / "deep.json"
    path.write_text(text)
    trace = load_trace(path, workers=workers)
    names = {trace.events.strings[i] for i in set(trace.events.name.tolist())}
    if depth < 900:  # deeper than real JSON goes, still decoded (msgspec stops at ~1000 levels)
        assert "deep" in names and not trace.meta.warnings
    else:
        assert "deep" not in names
        assert any("1 event nested too deeply" in w for w in trace.meta.warnings), trace.meta.warnings
    assert len(trace.events) + len(trace.python) >= x_count(events) - 1
    rc, _, err, _ = cli("analyze", "--quiet", str(path))
    assert rc == 0, err


def test_deep_nesting_in_the_top_level_fields_is_ignored_with_a_warning(tmp_path):
    path = tmp_path / "deep_top.json"
    path.write_text('{"deviceProperties": ' + "[" * 100_000 + "]" * 100_000 + ', "traceEvents": '
                    + json.dumps(events_of()) + ', "traceName": ' + "{\"a\":" * 50_000 + "1" + "}" * 50_000 + "}")
    trace = load_trace(path)
    assert len(trace.events) and trace.meta.devices == []
    assert any("metadata" in w for w in trace.meta.warnings), trace.meta.warnings


# --- IsalError on a flipped byte; gzip cut short; trailing garbage; several members ------------


def _gzipped(tmp_path: Path, data: bytes, name: str = "t.json.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("where", [0.3, 0.6, 0.9])
def test_a_flipped_byte_in_a_gzip_stream_keeps_the_events_before_it(tmp_path, where):
    raw = gzip.decompress(SMALL.read_bytes())
    packed = bytearray(gzip.compress(raw, mtime=0))
    i = int(len(packed) * where)
    packed[i] ^= 0x55
    path = _gzipped(tmp_path, bytes(packed))
    full = len(load_trace(SMALL).events)
    rc, out, err, _ = cli("analyze", "--quiet", "--json", "-", str(path))
    if rc == 2:  # nothing readable before the damage: one line
        assert_one_line(rc, err)
        assert where < 0.5
        return
    assert rc == 0, err
    report = strict_json(out)
    assert any("compressed data" in w for w in report["warnings"]), report["warnings"]
    trace = load_trace(path)
    assert len(trace.events) >= 0.5 * where * full


@pytest.mark.parametrize("keep", [0.05, 0.2, 0.5])
def test_a_gzip_cut_early_reads_what_decompresses(tmp_path, keep):
    """Cut at 5% of the compressed bytes, most of a megabyte of events was 'file is empty'."""
    packed = (DATA / "nccl_parser_config__nccl_data.json.gz").read_bytes()
    path = _gzipped(tmp_path, packed[:int(len(packed) * keep)])
    trace = load_trace(path)
    full = load_trace(DATA / "nccl_parser_config__nccl_data.json.gz")
    assert len(trace.events) >= 0.6 * keep * len(full.events)
    assert any("ends early" in w for w in trace.meta.warnings), trace.meta.warnings
    assert trace.meta.uncompressed_bytes > 0.6 * keep * full.meta.uncompressed_bytes


@pytest.mark.parametrize("tail,warned", [(b"garbage after the stream", True), (b"\x00" * 4096, False),
                                         (b"\x1f\x8b", True), (b"\x1f\x8b\x08\x00\x00\x00", True)])
def test_trailing_bytes_after_the_gzip_stream_lose_no_event(tmp_path, tail, warned):
    path = _gzipped(tmp_path, SMALL.read_bytes() + tail)
    trace = load_trace(path)
    assert len(trace.events) == len(load_trace(SMALL).events)
    assert any("after the compressed data" in w for w in trace.meta.warnings) == warned, trace.meta.warnings


def test_several_gzip_members_read_as_one_stream(tmp_path):
    raw = gzip.decompress(SMALL.read_bytes())
    cuts = [0, len(raw) // 3, len(raw) // 2 + 7, len(raw)]
    path = _gzipped(tmp_path, b"".join(gzip.compress(raw[a:b]) for a, b in zip(cuts, cuts[1:])))
    trace = load_trace(path)
    assert len(trace.events) == len(load_trace(SMALL).events) and not trace.meta.warnings


@pytest.mark.parametrize("tail", [b"\ngarbage", b"]}", b'{"another": "document"}', b"\x00\x00"])
def test_trailing_garbage_after_the_json_loses_no_event(tmp_path, tail):
    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress(SMALL.read_bytes()) + tail)
    trace = load_trace(path)
    assert len(trace.events) == len(load_trace(SMALL).events)
    rc, out, err, _ = cli("analyze", "--quiet", "--json", "-", str(path))
    assert rc == 0, err


# --- /dev/null, FIFOs, pipes, folders ---------------------------------------------------------


def test_dev_null_is_refused_with_one_line():
    rc, _, err, _ = cli("analyze", "/dev/null")
    assert_one_line(rc, err, "/dev/null", "empty")


def test_a_fifo_without_a_writer_is_refused_not_waited_on_forever(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    rc, _, err, _ = cli("analyze", str(fifo), timeout=60)
    assert_one_line(rc, err, "trace.json")


def test_a_pipe_with_a_writer_is_read_like_the_file(tmp_path):
    """`torchneck analyze <(zcat trace.json.gz)`: a stream that can be read once, compressed or not."""
    expect = json.loads(cli("analyze", "--quiet", "--json", "-", str(GPU))[1])
    for command in (f"gzip -dc {GPU}", f"cat {GPU}"):
        script = f"{sys.executable} -m torchneck analyze --quiet --json - <({command})"
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["findings"] == expect["findings"]
        assert got["ranks"][0]["trace"]["events"] == expect["ranks"][0]["trace"]["events"]


def test_a_folder_where_one_rank_file_is_corrupt_analyses_the_others(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r, name in enumerate(("timeline_analysis__sampled_rank-0.json.gz", "trace_filter__sampled_rank-1.json.gz")):
        (ranks / f"rank-{r}.json.gz").write_bytes((DATA / name).read_bytes())
    (ranks / "rank-2.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    (ranks / "rank-3.json").write_text('{"traceEvents": [}')
    rc, out, err, _ = cli("analyze", "--quiet", "--json", "-", str(ranks))
    assert rc == 0, err
    report = validate_report(strict_json(out))
    assert sorted(a["trace"]["rank"] for a in report["ranks"]) == [0, 1]
    broken = [w for w in report["warnings"] if "rank-2.json.gz" in w or "rank-3.json" in w]
    assert len(broken) == 2, report["warnings"]
    assert any("2 of 4 trace files could not be read" in w for w in report["warnings"]), report["warnings"]


def test_a_folder_of_only_broken_files_is_one_line(tmp_path):
    (tmp_path / "rank-0.json").write_text("not json")
    (tmp_path / "rank-1.json").write_bytes(b"")
    rc, _, err, _ = cli("analyze", str(tmp_path))
    assert_one_line(rc, err, "none of the 2 trace files")


# --- numbers out of range; unhashable fields; a trace of one memory event -----------------------


def test_ids_of_2_64_and_times_of_1e30_are_range_checked(tmp_path):
    hostile = [
        {"ph": "X", "cat": "cpu_op", "name": "huge_ts", "pid": 1, "tid": 1, "ts": 1e30, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "negative_ts", "pid": 1, "tid": 1, "ts": -1e30, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "huge_dur", "pid": 1, "tid": 1, "ts": 10, "dur": 1e308},
        {"ph": "X", "cat": "cpu_op", "name": "negative_dur", "pid": 1, "tid": 1, "ts": 10, "dur": -1e308},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 11, "dur": 1,
         "args": {"correlation": 2**64, "device": 2**64, "stream": -(2**64), "bytes": 2**70}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 1,
         "args": {"correlation": 2**63}},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1e300,
         "args": {"Bytes": 2**64, "Total Allocated": -(2**70), "Addr": 2**64}},
    ]
    events = steps_trace(hostile)
    path = write(tmp_path, events, top={"baseTimeNanoseconds": 2**70, "distributedInfo": {"rank": 2**64}})
    trace = load_trace(path)
    names = {trace.events.strings[i] for i in set(trace.events.name.tolist())}
    assert not names & {"huge_ts", "negative_ts", "huge_dur"}
    assert {"k", "cudaLaunchKernel", "negative_dur"} <= names
    assert any("1 events had a negative duration" in w for w in trace.meta.warnings), trace.meta.warnings
    assert any("4 events with a time out of range" in w for w in trace.meta.warnings), trace.meta.warnings
    assert float(abs(trace.events.ts).max()) < 2**53 and float(trace.events.dur.max()) < 1e12
    assert trace.meta.rank is None and trace.meta.base_time_ns is None
    assert len(trace.memory) == sum(1 for e in events if e.get("name") == "[memory]") - 1
    html = tmp_path / "report.html"
    rc, out, err, _ = cli("analyze", "--json", "-", "--html", str(html), str(path))
    assert rc == 0 and not err.replace(f"torchneck: HTML report {html}", "").strip(), err  # no numpy warning either
    strict_json(out)
    assert html.stat().st_size > 1000


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2], ["x"], None, True, 1.5])
@pytest.mark.parametrize("key", ["name", "cat", "pid", "tid"])
def test_an_object_or_a_list_in_name_pid_tid_or_cat_reads(tmp_path, key, value):
    event = {"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": 20, "dur": 1, key: value}
    path = write(tmp_path, steps_trace([event]))
    trace = load_trace(path)
    assert len(trace.events) == x_count(steps_trace())  + 1
    if key == "name" and isinstance(value, (dict, list)):
        assert json.dumps(value, separators=(",", ":")) in trace.events.strings


def test_a_trace_of_only_a_memory_event_is_one_line(tmp_path):
    path = write(tmp_path, [{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10,
                             "args": {"Bytes": 100, "Total Allocated": 100}}])
    with pytest.raises(TraceError, match="no complete"):
        load_trace(path)
    rc, _, err, _ = cli("analyze", str(path))
    assert_one_line(rc, err, "no complete")


# --- invalid UTF-8; one bad event mid-file --------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_invalid_utf8_is_replaced_and_counted(tmp_path, workers):
    text = json.dumps({"traceEvents": steps_trace([{"ph": "X", "cat": "cpu_op", "name": "BAD", "pid": 1, "tid": 1,
                                                   "ts": 20, "dur": 1}])}).encode()
    path = tmp_path / "utf8.json"
    path.write_bytes(text.replace(b'"BAD"', b'"B\xffD\xc3"'))
    trace = load_trace(path, workers=workers)
    assert "B\ufffdD\ufffd" in trace.events.strings
    assert any("2 invalid UTF-8" in w for w in trace.meta.warnings), trace.meta.warnings
    assert len(trace.events) == x_count(steps_trace()) + 1


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("damage", [b'"dur": 5x', b'"dur": }', b'"dur": "', b'"\\q"'])
def test_one_bad_event_mid_file_is_skipped_and_counted_not_truncated(tmp_path, monkeypatch, workers, damage):
    import torchneck.trace.slices as slices

    monkeypatch.setattr(slices, "BLOCK_BYTES", 16 << 10)  # many slices, so the damage lies mid-file
    events = steps_trace([{"ph": "X", "cat": "cpu_op", "name": "victim", "pid": 1, "tid": 1, "ts": 20,
                           "dur": 12345}], at=len(events_of()) // 3)
    text = json.dumps({"traceEvents": events})
    assert text.count('"dur": 12345') == 1
    path = tmp_path / "bad_event.json"
    path.write_text(text.replace('"dur": 12345', damage.decode()))
    trace = load_trace(path, workers=workers)
    assert not any("truncated" in w or "ends early" in w for w in trace.meta.warnings), trace.meta.warnings
    assert any("1 damaged event was skipped" in w for w in trace.meta.warnings), trace.meta.warnings
    assert len(trace.events) + len(trace.python) == x_count(events) - 1


# --- strict output; long names; output paths --------------------------------------------------------


def test_report_json_is_strict_json_whatever_the_trace_holds(tmp_path):
    """No NaN or Infinity reaches report.json (JSON has neither): times are range-checked at
    load, so none reaches an analysis either."""
    hostile = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": d}
               for t, d in ((30, 1e308), (31, 1e38), (1e308, 1), (32, 3.5e38))]
    text = json.dumps({"traceEvents": steps_trace(hostile)}).replace("1e+308", "1e400")
    path = tmp_path / "t.json"
    path.write_text(text)
    out = tmp_path / "r.json"
    rc, _, err, _ = cli("analyze", "--quiet", "--json", str(out), "--html", str(tmp_path / "r.html"), str(path))
    assert rc == 0, err
    validate_report(strict_json(out.read_text()))


def test_a_16_mb_op_name_is_shortened_and_the_terminal_report_renders(tmp_path):
    long_a, long_b = "a" * (16 << 20), "a" * (16 << 20 - 1) + "b"
    events = steps_trace([{"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": 20 + i, "dur": 1e4}
                          for i, n in enumerate((long_a, long_b, long_a))])
    path = write(tmp_path, events)
    trace = load_trace(path)
    from torchneck.trace.normalise import MAX_NAME_CHARS

    short = [s for s in trace.events.strings if s.startswith("aaaa")]
    assert len(short) == 2 and all(len(s) <= MAX_NAME_CHARS for s in short)
    assert all("…" in s for s in short)
    assert any("2 names longer than" in w for w in trace.meta.warnings), trace.meta.warnings
    rc, out, err, rss = cli("analyze", str(path), timeout=60)  # the terminal report too
    assert rc == 0, err
    assert rss < RSS_LIMIT_MB


def test_json_and_html_into_a_missing_folder_are_created(tmp_path):
    rc, _, err, _ = cli("analyze", "--quiet", "--json", str(tmp_path / "a" / "b" / "r.json"),
                        "--html", str(tmp_path / "c" / "r.html"), str(GPU))
    assert rc == 0, err
    strict_json((tmp_path / "a" / "b" / "r.json").read_text())
    assert (tmp_path / "c" / "r.html").stat().st_size > 1000


def test_an_output_path_under_a_regular_file_is_refused_with_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    for flag in ("--json", "--html"):
        rc, _, err, _ = cli("analyze", "--quiet", flag, str(tmp_path / "file" / "r.out"), str(GPU))
        assert_one_line(rc, err, "r.out")


# --- memory: blanks, gzip bombs ---------------------------------------------------------------------


def _bomb(path: Path, head: bytes, filler: bytes, total: int, tail: bytes) -> Path:
    """A gzip of `head`, `total` bytes of `filler`, `tail`, written as members (16 MB of filler
    compressed once, repeated)."""
    member = gzip.compress(filler * (16 << 20), compresslevel=9)
    with open(path, "wb") as f:
        f.write(gzip.compress(head))
        for _ in range(total // (16 << 20)):
            f.write(member)
        f.write(gzip.compress(tail))
    return path


def test_blanks_after_the_array_start_read_in_bounded_memory(tmp_path):
    raw = gzip.decompress(SMALL.read_bytes())
    at = raw.index(b"[", raw.index(b'"traceEvents"')) + 1
    path = _bomb(tmp_path / "blanks.json.gz", raw[:at], b" ", 1 << 30, raw[at:])
    rc, out, err, rss = cli("analyze", "--quiet", "--json", "-", str(path))
    assert rc == 0, err
    assert strict_json(out)["ranks"][0]["trace"]["events"] == len(load_trace(SMALL).events)
    assert rss < RSS_LIMIT_MB


@pytest.mark.parametrize("kind", ["blanks_between", "string", "open_string"])
def test_a_gzip_bomb_stays_within_the_memory_bound(tmp_path, kind):
    raw = gzip.decompress(GPU.read_bytes())
    first = raw.index(b"{", raw.index(b"[", raw.index(b'"traceEvents"')))
    second = raw.index(b"},", first) + 2
    head, filler, tail = {
        "blanks_between": (raw[:second], b" ", raw[second:]),
        "string": (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 2, "name": "', b"a",
                   b'"}, ' + raw[first:]),
        "open_string": (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 2, "name": "', b"a", b""),
    }[kind]
    path = _bomb(tmp_path / "bomb.json.gz", head, filler, 1 << 30, tail)
    rc, out, err, rss = cli("analyze", "--quiet", "--json", "-", str(path))
    assert rss < RSS_LIMIT_MB
    if kind == "open_string":
        assert_one_line(rc, err, "bomb.json.gz")
        return
    assert rc == 0, err
    report = strict_json(out)
    read = report["ranks"][0]["trace"]["events"]
    if kind == "blanks_between":  # blanks are JSON: nothing lost, nothing to say
        assert read == len(load_trace(GPU).events) and not report["warnings"]
    else:  # the event holding the string is skipped, and said; the others are read
        assert read == len(load_trace(GPU).events)
        assert any("1 event over 32 MB" in w for w in report["warnings"]), report["warnings"]
