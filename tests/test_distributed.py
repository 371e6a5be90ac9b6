"""Multi-process jobs on torchrun (gloo, CPU) and multi-rank traces."""

import json

from conftest import DATA, SCRIPTS, planted_line, read_report, torchneck, validate_report

DDP = SCRIPTS / "ddp_straggler.py"


def test_torchrun_job_names_the_straggler(tmp_path):
    """Rank 1 sleeps in its data loading: rank 0 waits in every all-reduce. One merged report
    says so, with rank 1's slow line; every rank keeps its own evidence and report."""
    run_dir = tmp_path / "job"
    r = torchneck("run", "--nproc-per-node", "2", "--quiet", "--out", str(run_dir), str(DDP), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    job = json.loads((run_dir / "job.json").read_text())
    assert job["launcher"] == "torch.distributed.run" and job["exit_code"] == 0
    for rank in (0, 1):
        assert (run_dir / f"rank-{rank}" / "trace.json.gz").exists()
        assert read_report(run_dir / f"rank-{rank}")["run"]["exit_code"] == 0
    report = read_report(run_dir)
    dist = report["distributed"]
    assert dist["world_size"] == 2 and dist["failed"] == []
    comm = {r["rank"]: r["comm"] for r in dist["ranks"]}
    assert comm[0]["present"] and comm[0]["by_type"][0]["type"] == "all_reduce"
    s = dist["straggler"]
    assert s["rank"] == 1
    # rank 1 spends 30 ms per step more; rank 0 waits about that long for it in its all-reduces
    assert 15_000 < s["wait_per_step_us"] < 60_000
    found = next(f for f in report["findings"] if f["kind"] == "straggler")
    assert found["rank"] == 1 and found["severity"] == "high"
    assert found["where"][0]["line"] == planted_line(DDP)  # what makes rank 1 late
    # one finding at the top: the straggler, with the cause on rank 1 that makes it late under it
    # (the same problem: its title and lines are the straggler's), not beside it
    assert report["findings"][0]["kind"] == "straggler"
    assert [(f["kind"], f["rank"]) for f in found["symptoms"]][:1] == [("python_hotspot", 1)]
    assert not [f for f in report["findings"] if f["kind"] == "python_hotspot" and f["rank"] == 1
                and f["where"][0]["line"] == planted_line(DDP)]
    assert "rank 1 is the straggler" in report["verdict"].lower()
    html = (run_dir / "report.html").read_text()
    assert '<span class="kind">rank 1</span>' in html and '"distributed":' in html  # ranks table data


def test_failed_rank_is_named_and_the_others_evidence_kept(tmp_path):
    run_dir = tmp_path / "job"
    r = torchneck("run", "--nproc-per-node", "2", "--out", str(run_dir), str(DDP), "--fail-rank", "1", timeout=600)
    assert r.returncode == 1
    report = read_report(run_dir)
    failed = report["distributed"]["failed"]
    assert failed[0]["rank"] == 1 and "failed on purpose" in failed[0]["error"]  # the root cause first
    assert {f["rank"] for f in failed} == {0, 1}  # rank 0 died of the lost peer, after it
    assert report["run"]["status"] == "rank_failed" and "rank 1" in report["run"]["error"]
    assert report["distributed"]["straggler"] is None  # the last wait was for the failure, not a slow rank
    assert (run_dir / "rank-0" / "run.json").exists() and (run_dir / "rank-0" / "trace.json.gz").exists()
    assert "rank 1 exception: RuntimeError: rank 1 failed on purpose" in " ".join(r.stdout.split())


def test_analyze_real_multi_rank_gpu_traces(tmp_path):
    for name in ("timeline_analysis__sampled_rank-0.json.gz", "trace_filter__sampled_rank-1.json.gz"):
        (tmp_path / name).write_bytes((DATA / name).read_bytes())
    r = torchneck("analyze", str(tmp_path), "--json", "-")
    assert r.returncode == 0, r.stderr
    report = validate_report(json.loads(r.stdout))
    dist = report["distributed"]
    assert [x["rank"] for x in dist["ranks"]] == [0, 1]
    for x in dist["ranks"]:
        assert x["median_step_us"] > 0 and x["comm"]["side"] == "device"
        assert x["comm"]["by_type"][0]["type"] == "send_recv"  # ncclKernel_SendRecv
    assert dist["step_spread_pct"] < 5 and dist["straggler"] is None  # balanced ranks
    assert any(f["kind"] == "communication" for f in report["findings"])
    r = torchneck("analyze", str(DATA / "nccl_parser_config__nccl_data.json.gz"), "--json", "-")
    comm = validate_report(json.loads(r.stdout))["ranks"][0]["comm"]
    assert [t["type"] for t in comm["by_type"]] == ["all_reduce", "broadcast"] and comm["by_type"][0]["count"] == 15


def test_rank_from_the_file_name_when_the_trace_has_no_distributed_info(tmp_path):
    def events(all_reduce_us):
        steps = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                  "ts": 5000.0 * i, "dur": 4900.0} for i in range(3)]
        return steps + [{"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1, "tid": 1,
                         "ts": 5000.0 * i + 100, "dur": all_reduce_us} for i in range(3)]

    for rank, us in ((0, 2100.0), (1, 100.0)):
        (tmp_path / f"worker_rank-{rank}.pt.trace.json").write_text(json.dumps({"traceEvents": events(us)}))
    r = torchneck("analyze", str(tmp_path), "--json", "-")
    assert r.returncode == 0, r.stderr
    dist = validate_report(json.loads(r.stdout))["distributed"]
    assert [x["rank"] for x in dist["ranks"]] == [0, 1]
    # rank 0 spends 2.1 ms per step in all_reduce, rank 1 0.1 ms: rank 1 arrives last, rank 0 waits 2 ms
    assert dist["straggler"]["rank"] == 1 and round(dist["straggler"]["wait_per_step_us"]) == 2000


def test_ranks_killed_after_their_trace_keep_their_machine_in_the_report(tmp_path):
    """A rank killed by the launcher after its profiled window leaves env.json and its trace but
    no run.json: its trace is analysed, and the merged report still says which machine ran it."""
    from torchneck.jobs import report_from_job_dir

    trace = (DATA / "trace_diff__control__control.json.gz").read_bytes()
    for rank in (0, 1):
        d = tmp_path / f"rank-{rank}"
        d.mkdir()
        (d / "env.json").write_text(json.dumps({"hostname": f"node{rank}", "torch": "2.13.0"}))
        (d / "trace.json.gz").write_bytes(trace)
    (tmp_path / "job.json").write_text(json.dumps({"launcher": "torch.distributed.run", "exit_code": 1, "wall_s": 9.0,
                                                   "target": {"script": "train.py", "module": None, "args": []}}))
    report = validate_report(report_from_job_dir(tmp_path, workers=1))
    assert report["env"]["hostname"] == "node0"
    assert {f["rank"] for f in report["distributed"]["failed"]} == {0, 1}
    assert all("killed before it finished" in f["error"] for f in report["distributed"]["failed"])
