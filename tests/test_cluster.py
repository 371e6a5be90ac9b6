"""Many ranks on Dask, traces in object stores: with the real parts, all on 127.0.0.1 and
started here: `dask scheduler` and `dask worker` processes, moto's S3 server, an HTTP server.

The rank sets are copies of a real NCCL rank trace (tests/data), one profiled step each
(~130 KB), with chosen ranks slowed (`torchneck.cluster.replicas`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import test_reports
from conftest import DATA, torchneck, validate_report
from hypothesis import given
from hypothesis import strategies as st

from torchneck.cluster import remote, sizes, tasks
from torchneck.cluster.engine import BATCH_MAX, Dask, batches
from torchneck.cluster.reduce import others_median, rank_ranges
from torchneck.cluster.replicas import make_rank_set
from torchneck.cluster.summary import RankSummary, decode
from torchneck.cluster.tasks import RankItem, TaskOptions, summarise_batch
from torchneck.model.findings import Finding

browser = test_reports.browser  # the HTML report tests' headless Chromium fixture
SOURCE = DATA / "nccl_parser_config__nccl_data.json.gz"
SLOW = 37
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port}")


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """moto's S3 server: a real HTTP S3 endpoint; the environment every process of the tests
    reads it with (s3fs and boto3 take the endpoint from AWS_ENDPOINT_URL)."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc)
        yield dict(AWS, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    finally:
        stop(proc)
        log.close()


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory, s3_server):
    """`dask scheduler` and `dask worker` (2 processes, 1 thread each) on 127.0.0.1; the workers
    reach the S3 server themselves."""
    folder = tmp_path_factory.mktemp("dask")
    scheduler_file = folder / "scheduler.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", **s3_server)
    log = open(folder / "dask.log", "w")
    scheduler = subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", str(scheduler_file)],
                                 stdout=log, stderr=subprocess.STDOUT, env=env)
    workers = None
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            assert scheduler.poll() is None, (folder / "dask.log").read_text()
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        workers = subprocess.Popen([sys.executable, "-m", "dask", "worker", "--scheduler-file", str(scheduler_file),
                                    "--nworkers", "2", "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                                    "--local-directory", str(folder / "work")],
                                   stdout=log, stderr=subprocess.STDOUT, env=env)
        from dask.distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        stop(*[p for p in (workers, scheduler) if p is not None])
        log.close()


@pytest.fixture(scope="module")
def ranks512(tmp_path_factory) -> Path:
    """512 ranks, rank 37 1.5x slower (what issue 26 measured), and one file that is no trace."""
    folder = tmp_path_factory.mktemp("ranks512")
    make_rank_set(SOURCE, folder, 512, {SLOW: 1.5}, window="step")
    (folder / "node-063_9999.1700000099999.pt.trace.json.gz").write_bytes(b"<html>503 Slow Down</html>\n" * 50)
    return folder


def _findings(report: dict) -> list[tuple]:
    return [(f["kind"], f.get("rank"), f["title"], f["severity"]) for f in report["findings"]]


def test_512_ranks_on_a_running_dask_cluster_and_on_local_workers_name_the_slow_rank(ranks512, dask_cluster, tmp_path):
    """Issue 26: 512 copies of a rank trace, one 1.5x slower, gave no straggler finding. On a
    running cluster (`TORCHNECK_SCHEDULER`) and on 2 local worker processes the same findings
    name rank 37; the unreadable file is listed and the job goes on; the terminal shows the
    distribution and the top 10 ranks, report.json and the HTML every rank."""
    on_cluster = tmp_path / "cluster.json"
    r = torchneck("analyze", str(ranks512), "--json", str(on_cluster), "--html", str(tmp_path / "r.html"),
                  env={"TORCHNECK_SCHEDULER": dask_cluster}, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    report = validate_report(json.loads(on_cluster.read_text()))
    dist = report["distributed"]
    assert dist["world_size"] == 513 and len(dist["ranks"]) == 512
    assert [row["rank"] for row in dist["ranks"]] == list(range(512))
    [bad] = dist["failed"]
    assert bad["status"] == "unreadable" and bad["path"].endswith("node-063_9999.1700000099999.pt.trace.json.gz")
    s = dist["straggler"]
    assert s["rank"] == SLOW and s["basis"] == "step_time" and s["host"] == "node-004"
    assert round(s["own_step_us"] / s["others_step_us"], 2) == 1.5  # 329.6 ms against 219.7 ms
    assert [x["rank"] for x in dist["stragglers"]] == [SLOW] and dist["stragglers_flagged"] == 1
    assert dist["step_time_us"]["p50"] == s["others_step_us"] and dist["step_time_us"]["max"] == s["own_step_us"]
    straggler = next(f for f in report["findings"] if f["kind"] == "straggler")
    assert straggler["rank"] == SLOW and straggler["severity"] == "high"  # half a step lost per step
    assert "Rank 37 is the straggler: its steps take 329.6 ms, 1.50x" in straggler["title"]
    assert "Rank 37 is the straggler" in report["verdict"]
    assert len(report["ranks"]) == 1 and report["ranks"][0]["trace"]["rank"] == 0  # one full analysis
    # the collectives lined up across ranks, with their message sizes from the trace's args
    top = dist["collectives"][0]
    assert top["type"] == "all_reduce" and top["dtype"] == "Float" and top["ranks"] == 512
    assert top["bytes"] == 4 * top["nelems"] and top["algbw_gbps"] > 0
    # the terminal: quantiles and the top 10, not 512 rows
    assert "Across ranks" in r.stdout and "37 (straggler)" in r.stdout
    assert re.search(r"Ranks \(513; step time spread 50%\): the top 10", r.stdout)
    assert len(r.stdout.splitlines()) < 200
    html = (tmp_path / "r.html").read_text()
    assert html.count('"lateness_us"') >= 512  # every rank's row

    local = tmp_path / "local.json"
    r = torchneck("analyze", str(ranks512), "--workers", "2", "--quiet", "--json", str(local), timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    again = validate_report(json.loads(local.read_text()))
    assert _findings(again) == _findings(report)
    assert again["distributed"]["stragglers"] == dist["stragglers"]
    assert again["distributed"]["failed"] == dist["failed"]


def test_one_uncompressed_trace_is_split_by_byte_ranges_across_the_cluster_workers(tmp_path, dask_cluster,
                                                                                   monkeypatch):
    """Issue 26, item 5: one trace's byte ranges, cut at event boundaries, decoded by a running
    cluster's worker processes (each reads its range from the file), the columns merged on the
    client: the very report of loading it here. Sizes scaled down (35 MB in 2 MB ranges)."""
    from torchneck.cluster import engine as eng
    from torchneck.model.base import to_builtins
    from torchneck.pipeline import report_from_traces

    path = tmp_path / "one.pt.trace.json"
    path.write_bytes(__import__("gzip").open(DATA / "trace_diff__control__control.json.gz").read())
    monkeypatch.setattr(eng, "SPLIT_MIN_BYTES", 8 << 20)
    monkeypatch.setattr(eng.RangePool, "range_bytes", 2 << 20)
    sent: list[tuple] = []
    submit = eng.RangePool.apply_async
    monkeypatch.setattr(eng.RangePool, "apply_async",
                        lambda self, fn, args: sent.append(args) or submit(self, fn, args))
    told: list[str] = []
    split = to_builtins(report_from_traces([str(path)], scheduler=dask_cluster, engine_notice=told.append))
    here = to_builtins(report_from_traces([str(path)]))
    ranges = [a for a in sent if len(a) == 3]
    assert len(ranges) >= 10 and told == [f"Dask scheduler {dask_cluster}: byte ranges of one trace"]
    assert all(a[0] == str(path.resolve()) and a[2] - a[1] <= (2 << 20) + (64 << 10) for a in ranges)
    assert split == here and split["ranks"][0]["trace"]["path"] == str(path)
    assert here["ranks"][0]["trace"]["events"] == 74_937  # of 109,123 entries (flows, metadata...)
    damaged = tmp_path / "damaged.pt.trace.json"  # garbage mid-file: a range fails, the client salvages it
    data = bytearray(path.read_bytes())
    data[len(data) // 2:len(data) // 2 + 3000] = b'\x00garbage{{[["""' * 200
    damaged.write_bytes(bytes(data))
    split_bad = to_builtins(report_from_traces([str(damaged)], scheduler=dask_cluster))
    here_bad = to_builtins(report_from_traces([str(damaged)]))
    assert split_bad == here_bad and split_bad["warnings"] and "damaged" in split_bad["warnings"][0]
    assert 0 < here["ranks"][0]["trace"]["events"] - here_bad["ranks"][0]["trace"]["events"] < 100
    before = len(sent)  # a compressed trace is one stream: loaded here, nothing sent
    report_from_traces([str(DATA / "torch18_cpu__train.json.gz")], scheduler=dask_cluster, engine_notice=told.append)
    assert len(sent) == before and len(told) == 1


def test_a_range_whose_task_fails_is_decoded_by_the_client():
    from torchneck.cluster.engine import _RangeResult

    class Lost:  # a future whose worker died after Dask's retries
        released = False

        def result(self):
            raise OSError("worker lost")

        def release(self):
            self.released = True

    lost = Lost()
    assert _RangeResult(lost, lambda a, b: a + b, (2, 3)).get() == 5 and lost.released


def test_s3_traces_read_by_the_cluster_workers_the_client_only_lists(tmp_path, s3_server, dask_cluster, monkeypatch):
    """Rank files in S3 (moto's server), read by URL: `--scheduler`'s workers fetch their own
    ranks; this process (the client) lists and never opens a rank file."""
    import boto3

    files = make_rank_set(SOURCE, tmp_path / "ranks", 8, {5: 1.4}, window="step", ranks_per_host=4)
    for k, v in s3_server.items():
        monkeypatch.setenv(k, v)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="traces")
    for f in files:
        s3.upload_file(str(f), "traces", f"job-7/{f.name}")
    s3.put_object(Bucket="traces", Key="job-7/env.json", Body=b"{}")  # not a trace: not listed

    from torchneck.pipeline import report_from_traces

    def no_download(path):
        raise AssertionError(f"the client opened {path}")

    monkeypatch.setattr(remote, "local_copy", no_download)
    monkeypatch.setattr(tasks, "local_copy", no_download)
    report = validate_report(report_from_traces(["s3://traces/job-7/"], scheduler=dask_cluster))
    dist = report["distributed"]
    urls = [f"s3://traces/job-7/{f.name}" for f in files]
    assert [r["path"] for r in dist["ranks"]] == urls and [r["host"] for r in dist["ranks"]] == ["node-000"] * 4 + [
        "node-001"] * 4
    assert dist["straggler"]["rank"] == 5 and dist["failed"] == []
    assert [a["trace"]["path"] for a in report["ranks"]] == urls  # every rank's analysis (8 <= 16), named by URL
    monkeypatch.undo()
    # the same through the command line, on 2 local workers
    r = torchneck("analyze", "s3://traces/job-7/", "--workers", "2", "--json", "-", env=s3_server)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _findings(json.loads(r.stdout)) == _findings(report)
    r = torchneck("analyze", "s3://no-such-bucket/job/", "--json", "-", env=s3_server)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "s3://no-such-bucket/job/" in r.stderr


def test_waits_in_collectives_name_a_slow_host(tmp_path, browser):
    """A synchronised job (every collective ends together; the others wait in it): the four
    ranks of host node-002 compute 1.3x slower. Step times are alike, so only the time in
    collectives tells: the host is named, with its ranks, and the calls they arrive last at."""
    make_rank_set(SOURCE, tmp_path / "job", 32, {r: 1.3 for r in (8, 9, 10, 11)}, synchronized=True,
                  window="step", ranks_per_host=4)
    html = tmp_path / "report.html"
    r = torchneck("analyze", str(tmp_path / "job"), "--workers", "0", "--json", "-", "--html", str(html))
    assert r.returncode == 0, r.stderr[-3000:]
    report = validate_report(json.loads(r.stdout))
    dist = report["distributed"]
    assert dist["step_spread_pct"] < 5  # synchronised: the steps end within a few % (after the last collective)
    s = dist["straggler"]
    assert s["basis"] == "collective_wait" and s["rank"] in (8, 9, 10, 11)
    assert sorted(x["rank"] for x in dist["stragglers"]) == [8, 9, 10, 11]
    assert all(x["basis"] == ["collective_wait"] for x in dist["stragglers"])
    [host] = [h for h in dist["hosts"] if h["slow"]]
    assert host["host"] == "node-002" and host["stragglers"] == [8, 9, 10, 11] == host["ranks"]
    # the others wait 30% of the slow ranks' elapsed time at each collective: tens of ms a step
    assert 20_000 < s["wait_per_step_us"] < 80_000
    finding = next(f for f in report["findings"] if f["kind"] == "straggler")
    assert finding["title"].startswith("Host node-002 is slow: its ranks 8-11 (4 of 4) are the stragglers")
    assert finding["evidence"]["slow_hosts"][0]["host"] == "node-002"
    for group in dist["collectives"]:  # each call: one of the slow ranks arrives last
        assert group["skew_per_call_us"] > 0
        assert {x["rank"] for x in group["last_to_arrive"]} <= {8, 9, 10, 11}
    # the HTML report's rank table: every rank, the stragglers marked, sortable by lateness
    page, errors, _ = test_reports._open(browser, html)
    page.click("button[data-table=ranks]")
    table = page.locator("#table-ranks")
    assert table.locator("tbody tr").count() == 32
    header = [h.strip() for h in table.locator("thead th").all_inner_texts()]
    table.locator("th[data-key=late_ms_per_step]").click()
    first = table.locator("tbody tr").first.locator("td").all_inner_texts()
    assert int(first[0]) in (8, 9, 10, 11) and first[header.index("straggler")] == "yes"
    assert first[header.index("host")] == "node-002" and not errors


def test_http_server_directory_and_single_file(tmp_path):
    """A web server's folder listing and one file by URL (fsspec's HTTP filesystem)."""
    make_rank_set(SOURCE, tmp_path / "job", 4, {2: 1.5}, window="step")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, server)
        r = torchneck("analyze", f"http://127.0.0.1:{port}/job/", "--json", "-")
        assert r.returncode == 0, r.stderr[-3000:]
        dist = validate_report(json.loads(r.stdout))["distributed"]
        assert [x["rank"] for x in dist["ranks"]] == [0, 1, 2, 3] and dist["straggler"]["rank"] == 2
        name = sorted((tmp_path / "job").iterdir())[1].name
        r = torchneck("analyze", f"http://127.0.0.1:{port}/job/{name}", "--json", "-")
        assert r.returncode == 0, r.stderr[-3000:]
        [rank] = validate_report(json.loads(r.stdout))["ranks"]
        assert rank["trace"]["path"] == f"http://127.0.0.1:{port}/job/{name}" and rank["trace"]["rank"] == 1
        r = torchneck("analyze", f"http://127.0.0.1:{port}/nothing-here/", "--json", "-")
        assert r.returncode == 2 and r.stderr.count("\n") == 1
    finally:
        stop(server)


def test_analyze_sets_the_allocator_for_one_big_trace_not_before_forking_rank_workers(tmp_path, monkeypatch):
    """glibc settings inherited by forked Dask workers (every block >= 1 MB mapped afresh) cost
    small rank traces ~20 % more CPU: `analyze` sets them only when it loads one trace itself."""
    from torchneck import cli
    from torchneck.trace import allocator

    calls: list[int] = []
    monkeypatch.setattr(allocator, "return_large_frees_promptly", lambda: calls.append(1))
    folder = tmp_path / "ranks"
    make_rank_set(SOURCE, folder, 3, {}, window="step")
    assert cli.main(["analyze", str(folder), "--quiet", "--workers", "0"]) == 0 and calls == []
    assert cli.main(["analyze", str(SOURCE), "--quiet"]) == 0 and calls == [1]


def test_unusable_engines_and_paths_are_one_line(tmp_path):
    closed = free_port()
    r = torchneck("analyze", str(SOURCE), str(SOURCE), "--scheduler", f"tcp://127.0.0.1:{closed}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot reach the Dask scheduler" in r.stderr
    r = torchneck("analyze", str(SOURCE), str(SOURCE), "--workers", "-1")
    assert r.returncode == 2 and r.stderr == "torchneck: --workers must be 0 (in this process) or more\n"
    r = torchneck("analyze", "nosuchprotocol://bucket/x")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    (tmp_path / "a.json").write_text("not json")
    (tmp_path / "b.json").write_text("{}")
    r = torchneck("analyze", str(tmp_path), "--workers", "0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "none of the 2 trace files could be read" in r.stderr


def _flaky(batch: list) -> list:
    """A task for the engine: item "bad" always fails, item "flaky" fails the first time only."""
    for name, marker in batch:
        if name == "bad":
            raise ValueError("bad item")
        if name == "flaky" and not Path(marker).exists():
            Path(marker).touch()
            raise OSError("transient")
    return [name for name, _ in batch]


def test_dask_retries_a_failed_batch_then_isolates_the_item_that_fails(tmp_path):
    items = [(f"r{i}", "") for i in range(40)]
    items[7] = ("bad", "")
    items[23] = ("flaky", str(tmp_path / "seen"))
    progress = []
    with Dask(workers=2) as engine:
        results = list(engine.map(_flaky, items, lambda done, total: progress.append((done, total))))
    done = {b[0][0]: r for b, r in results if len(b) == 1}
    assert isinstance(done["bad"], ValueError)  # alone, after its batch failed and was split
    ok = [name for b, r in results if not isinstance(r, BaseException) for name in r]
    assert sorted(ok) == sorted(n for n, _ in items if n != "bad")  # "flaky" retried by Dask
    assert (tmp_path / "seen").exists()
    assert progress[-1] == (40, 40) and [d for d, _ in progress] == sorted(d for d, _ in progress)


def test_rank_summary_is_small_and_carries_the_collective_sizes_of_the_trace():
    [s] = decode(summarise_batch([RankItem(str(SOURCE))], TaskOptions(one_lane=True)))
    assert isinstance(s, RankSummary) and s.rank == 0 and s.full is None
    assert len(summarise_batch([RankItem(str(SOURCE))], TaskOptions())) < 8_000  # 40,573 events in
    raw = json.loads(__import__("gzip").open(SOURCE).read())["traceEvents"]
    kernels = [e for e in raw if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})]
    expected = sorted((e["args"]["Collective name"], e["args"]["In msg nelems"], e["args"]["dtype"]) for e in kernels)
    names = {"all_reduce": "allreduce", "broadcast": "broadcast"}
    got = sorted((names[g.type], g.nelems, g.dtype) for g in s.comm.groups for _ in range(g.calls))
    assert got == expected and len(got) == 21  # 15 all-reduces, 6 broadcasts, each with its size
    assert {g.group_size for g in s.comm.groups} == {2}


def test_collective_size_scan_across_block_boundaries(monkeypatch):
    whole = sizes.collective_sizes(SOURCE)
    assert len(whole) == 48  # kernels and record_param_comms ops
    monkeypatch.setattr(sizes, "BLOCK_BYTES", 4999)
    monkeypatch.setattr(sizes, "CARRY_BYTES", 3000)
    assert sizes.collective_sizes(SOURCE) == whole


def test_sizes_from_the_bytes_the_loader_kept_equal_a_second_read(monkeypatch):
    from torchneck.trace.loader import load_trace

    kept = sizes.Kept()
    trace = load_trace(SOURCE, workers=1, tap=kept)
    data = kept.data(trace.meta.uncompressed_bytes)
    assert data is not None and len(data) == trace.meta.uncompressed_bytes
    assert sizes.sizes_in(data) == sizes.collective_sizes(SOURCE) and len(sizes.sizes_in(data)) == 48
    small = sizes.Kept(limit=1 << 20)  # a document over the limit is not kept: the file is read again
    load_trace(SOURCE, workers=1, tap=small)
    assert small.data(trace.meta.uncompressed_bytes) is None and not small.blocks
    seen = []  # a task whose tap missed blocks reads the file again rather than trusting them
    monkeypatch.setattr(sizes.Kept, "data", lambda self, total: None)
    monkeypatch.setattr(sizes, "collective_sizes", lambda path: seen.append(path) or {})
    summarise_batch([RankItem(str(SOURCE))], TaskOptions(one_lane=True))
    assert seen == [SOURCE] or seen == [str(SOURCE)]


@pytest.mark.parametrize("n, workers", [(1, 4), (7, 1), (10, 2), (128, 2), (512, 2), (2048, 2), (5000, 64)])
def test_batches_cover_every_item_in_order_and_shrink_towards_the_end(n, workers):
    cut = batches(list(range(n)), workers)
    assert [i for b in cut for i in b] == list(range(n))
    sizes_ = [len(b) for b in cut]
    assert max(sizes_) <= BATCH_MAX and all(a >= b for a, b in zip(sizes_, sizes_[1:]))
    assert sizes_[-1] <= max(1, sizes_[0] // 4)  # the last batches are small: workers finish together
    assert len(cut) <= -(-n // sizes_[0]) + 3 * 4 * workers  # bookkeeping stays bounded


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=40))
def test_others_median_is_the_median_without_each_entry(values):
    x = np.array(values)
    expected = [np.median(np.delete(x, i)) for i in range(len(x))]
    assert np.allclose(others_median(x), expected)


def test_rank_ranges():
    assert rank_ranges([3, 0, 1, 2, 9, 11, 12]) == "0-3, 9, 11-12"


def test_hosts_from_names_and_layout():
    assert remote.host_of("gpu-node-17.cluster_4242.1700000000123.pt.trace.json.gz") == "gpu-node-17.cluster"
    assert remote.host_of("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz") is None
    layout = remote.hosts_by_layout(["s3://b/job/node-1/rank-0.json.gz", "s3://b/job/node-2/rank-1.json.gz"])
    assert layout == {"s3://b/job/node-1/rank-0.json.gz": "node-1", "s3://b/job/node-2/rank-1.json.gz": "node-2"}
    assert remote.hosts_by_layout(["run/rank-0/trace.json.gz", "run/rank-1/trace.json.gz"]) == {}


def test_summaries_carry_numpy_values_as_python_ones():
    """Analyses may leave numpy scalars in findings' evidence (JSON takes float64, msgpack takes
    none): a rank's summary still crosses from its worker."""
    from torchneck.cluster.summary import encode

    evidence = {"share": np.float64(0.25), "count": np.int64(3), "rows": np.arange(3), "any": np.bool_(True)}
    finding = Finding(kind="x", title="x", time_lost_s=np.float64(0.5), time_lost_pct=1.0, fix="", evidence=evidence)
    [s] = decode(encode([RankSummary(rank=3, path="r3.json", findings=[finding])]))
    assert s.findings[0].evidence == {"share": 0.25, "count": 3, "rows": [0, 1, 2], "any": True}
    assert s.findings[0].time_lost_s == 0.5
