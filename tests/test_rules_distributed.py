"""Rules across ranks: the straggler and communication that costs time on every rank."""

from rule_cases import fires, silent

from torchneck.analysis.distributed import collective_type, compare_ranks
from torchneck.diagnose.distributed_rules import Communication, Straggler


def rank(r, comm_us, step_us=40_000.0):
    return {"rank": r, "median_step_us": step_us, "steps": 5,
            "comm": {"present": True, "side": "host", "per_step_us": comm_us,
                     "by_type": [{"type": "all_reduce", "per_step_us": comm_us, "time_us": 5 * comm_us, "count": 5}]}}


@fires("straggler")
def test_straggler_from_collective_durations():
    dist = compare_ranks([rank(0, 35_000.0), rank(1, 5_000.0), rank(2, 33_000.0)])
    s = dist["straggler"]
    assert s["rank"] == 1 and s["wait_per_step_us"] == 29_000.0  # mean of 30 and 28 ms
    [f] = Straggler().check(dist, steps=5)
    assert f.rank == 1 and f.severity == "high" and round(f.time_lost_s, 3) == 0.145


@silent("straggler")
def test_balanced_ranks_have_no_straggler():
    dist = compare_ranks([rank(0, 5_300.0), rank(1, 5_000.0)])  # jitter below STRAGGLER_MIN_US
    assert dist["straggler"] is None and Straggler().check(dist, steps=5) == []


@silent("communication")
def test_communication_silent_under_its_share_on_the_least_waiting_rank():
    dist = compare_ranks([rank(0, 35_000.0), rank(1, 5_000.0), rank(2, 33_000.0)])
    assert Communication().check(dist, steps=5) == []  # 5 of 40 ms is 12.5 % < 15 %


@fires("communication")
def test_communication_on_the_rank_that_waits_least():
    [c] = Communication().check(compare_ranks([rank(0, 9_000.0), rank(1, 8_000.0)]), steps=5)
    assert c.kind == "communication" and c.rank == 1 and round(c.time_lost_pct) == 20  # 8 of 40 ms


def test_collective_types_from_real_names():
    assert collective_type("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "all_reduce"
    assert collective_type("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "reduce_scatter"
    assert collective_type("gloo:all_gather") == "all_gather"
    assert collective_type("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t") == "send_recv"
    assert collective_type("c10d::broadcast_") == "broadcast"


def test_other_ranks_idle_gpu_folds_under_the_straggler_as_far_as_its_wait_explains_it():
    """Rank 0 and 2 wait 29 ms of a 40 ms step for rank 1: an idle GPU of theirs within that share
    is the straggler's (listed under it); one idle far longer keeps the unexplained part."""
    from torchneck.diagnose.distributed_rules import fold_waits
    from torchneck.model.findings import Finding

    dist = compare_ranks([rank(0, 35_000.0), rank(1, 5_000.0), rank(2, 33_000.0)])
    [s] = Straggler().check(dist, steps=5)

    def idle(r, pct):
        f = Finding(kind="launch_bound", title="idle", time_lost_s=pct / 100 * 0.2, time_lost_pct=pct, fix="f",
                    severity="high", rank=r)
        f.saving_s, f.saving_pct = f.time_lost_s, pct
        return f

    explained, own, too_long = idle(0, 80.0), idle(1, 80.0), idle(2, 95.0)
    too_long.time_lost_pct = 2.5 * s.time_lost_pct  # the wait explains 40 % of it: below FOLD_SHARE
    out = fold_waits([s, explained, own, too_long])
    assert s.symptoms == [explained] and own in out and too_long in out
    assert too_long.saving_pct == 95.0 * 0.6  # what the straggler does not explain
