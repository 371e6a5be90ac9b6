"""The capture plan on programs without a visible training step, and runs that end hard: each a
real `torchneck run` of a small script in a subprocess (see tests/scripts/)."""

import gzip
import json
import signal
import subprocess
import sys
import time

from conftest import SCRIPTS, planted_line, read_report, torchneck


def _events(trace_path) -> list[dict]:
    return json.loads(gzip.open(trace_path).read())["traceEvents"]


def test_tiny_ops_without_steps_profile_a_bounded_slice(run_dir):
    """~300 k tiny ops and no step clock: a whole-run profile of such a loop took 9x the bare
    time and 3.4 GB. The loop is recognised from the repeating sampled stacks, one slice of it
    is profiled and stopped at the memory bound, and the loop's line is the Python hotspot
    measured over the whole run after start-up."""
    script = SCRIPTS / "nostep_tiny_ops.py"
    r = torchneck("run", "--quiet", "--max-window-mb", "3", "--out", str(run_dir), str(script), "80000")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "checksum" in r.stdout
    run = json.loads((run_dir / "run.json").read_text())
    cap = run["capture"]
    assert cap["plan"] == "loop" and cap["stopped_by"] in ("memory_bound", "slice")
    assert cap["loop"]["file"].endswith("nostep_tiny_ops.py") and cap["loop"]["function"] == "<module>"
    assert cap["loop"]["first_line"] <= planted_line(script) <= cap["loop"]["last_line"]
    assert cap["recorded_mb"] < 3 * 2  # stopped within a check of the bound
    ops = [e for e in _events(run_dir / "trace.json.gz") if e.get("cat") == "cpu_op"]
    assert 1000 < len(ops) < 60_000  # the loop runs ~320 k ops
    assert (cap["window_end_ns"] - cap["window_start_ns"]) / 1e9 <= run["options"]["slice_s"] + 0.5
    report = read_report(run_dir)
    assert report["capture"]["plan"] == "loop" and report["capture"]["window"]["events"] > 1000
    assert "No step markers" in report["capture"]["summary"]
    top = report["python"]["window"]["lines"][0]
    assert (top["line"], top["function"]) == (planted_line(script), "<module>")
    steady = report["python"]["window"]  # the whole run after start-up: the script's, torchneck's, the machine's
    after_startup = run["wall_s"] - report["capture"]["steady_from_s"]
    assert steady["sampled_s"] + steady["torchneck_hooks_s"] + steady["ready_s"] > 0.9 * after_startup


def test_a_loop_whose_own_tensors_swell_memory_is_profiled_for_its_whole_slice(run_dir):
    """Each chunk holds ~200 MB of intermediates for a moment and frees them: memory in use rises
    and falls with the loop, not with the profiler's events. Judged at a 5 ms lag, such a rise
    stopped the slice after 40 ms and 25 events (a service's report then named no op); the probe
    learns the loop's rhythm and judges the bound over 1.5x its period."""
    script = SCRIPTS / "nostep_big_intermediates.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script), "14")
    assert r.returncode == 0, r.stderr[-2000:]
    cap = json.loads((run_dir / "run.json").read_text())["capture"]
    assert cap["plan"] in ("loop", "slice") and cap["stopped_by"] == "slice", cap
    assert (cap["window_end_ns"] - cap["window_start_ns"]) / 1e9 > 0.9
    ops = [e for e in _events(run_dir / "trace.json.gz") if e.get("cat") == "cpu_op"]
    assert sum(e["name"] == "aten::linalg_svd" for e in ops) >= 3  # several chunks, not a moment of one
    assert any(e["name"] == "aten::sub" for e in ops)


def test_a_scoring_loop_after_the_model_calls_is_found(run_dir):
    """The model calls are the module clock's steps and the window profiles five of them; the
    per-element .item() loop after them is most of the run: it is found from the whole steady
    state, at its line."""
    script = SCRIPTS / "eval_item_loop.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    assert report["run"]["phases"]["clock"] == "module" and report["capture"]["plan"] == "steps"
    found = [f for f in report["findings"] if f["kind"] == "python_hotspot"]
    assert found and found[0]["where"][0]["line"] == planted_line(script)
    assert report["findings"][0] is not None and found[0]["time_lost_pct"] > 50


def test_a_pure_python_loop_before_quick_steps_is_the_top_hotspot(run_dir):
    """A tokenizer loop over strings, then steps of ~1 ms: the steps' window holds a handful of
    samples; the steady state (from where the sampled stacks began to repeat) holds the loop."""
    script = SCRIPTS / "tokenizer_loop.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    top = report["python"]["window"]["lines"][0]
    assert (top["function"], top["line"]) == ("featurize", planted_line(script))
    finding = report["findings"][0]
    planted, caller = planted_line(script), planted_line(script, "# CALLER")
    lines = [w["line"] for w in finding["where"]]
    # The loop and its body are one finding at the loop when the `for` line (its text.lower().split())
    # is hot itself; then the body's line; the caller once (the list comprehension's frame and the
    # line holding it are one place).
    assert finding["kind"] == "python_hotspot" and lines in ([planted - 1, planted, caller], [planted, caller])
    capture = report["capture"]
    assert capture["plan"] == "steps" and capture["replaced"].startswith("a loop window")
    assert capture["steady_from_s"] < 1.0  # the loop, not the first optimizer step, ends start-up


def test_os_exit_writes_the_report_and_keeps_the_status(run_dir):
    r = torchneck("run", "--out", str(run_dir), str(SCRIPTS / "os_exit_end.py"), "3")
    assert r.returncode == 3, r.stderr[-2000:]
    assert "trained" in r.stdout and "must not run" not in r.stdout  # no unwinding: os._exit as asked
    assert "torchneck report" in r.stdout  # the report is printed before the process ends
    run = json.loads((run_dir / "run.json").read_text())
    assert (run["status"], run["exit_code"]) == ("os_exit", 3)
    report = read_report(run_dir)
    assert report["run"]["status"] == "os_exit" and report["ranks"][0]["steps"]["count"] == 5


def test_os_exit_from_a_watchdog_thread_leaves_the_evidence(run_dir):
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(SCRIPTS / "os_exit_thread.py"))
    assert r.returncode == 7, r.stderr[-2000:]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "os_exit" and "from thread" in run["error"]
    assert (run_dir / "samples.json").exists() and not (run_dir / "crash.txt").exists()
    again = torchneck("report", "--quiet", "--json", "-", str(run_dir))
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["run"]["exit_code"] == 7


def _start(run_dir, *args):
    cmd = [sys.executable, "-c", "import sys; from torchneck.cli import main; sys.exit(main())",
           "run", "--quiet", "--out", str(run_dir), *args]
    import os

    # SIGINT as a terminal gives it: a runner started in the background (`cmd &` without job
    # control) ignores SIGINT, its children inherit that, and python then never raises
    # KeyboardInterrupt (as plain python would not either: the Ctrl-C case would hang).
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(path, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def test_sigterm_and_sigint_mid_run_report_with_the_script_status(tmp_path):
    for signum, code, status in ((signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")):
        run_dir = tmp_path / status
        proc = _start(run_dir, str(SCRIPTS / "forever.py"))
        _wait_for(run_dir / "trace.json.gz")
        proc.send_signal(signum)
        try:
            proc.communicate(timeout=300)
        finally:
            proc.kill()  # never left running (it loops forever) when the signal did not end it
        assert proc.returncode == code
        report = read_report(run_dir)
        assert report["run"]["status"] == status and report["run"]["exit_code"] == code
        assert report["capture"]["plan"] == "steps" and report["ranks"][0]["steps"]["count"] >= 5


def test_a_killed_run_is_reported_from_what_it_left(run_dir):
    """SIGKILL (a scheduler's hard limit, the OOM killer): nothing of torchneck runs, but run.json
    was written first, samples are flushed every second and the trace as soon as the window
    ended; `torchneck report` builds the report from them and says what is missing."""
    proc = _start(run_dir, str(SCRIPTS / "forever.py"))
    _wait_for(run_dir / "trace.json.gz")
    traced = time.time()
    time.sleep(2.5)  # a few flushes of samples
    proc.kill()
    proc.communicate(timeout=60)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    assert not (run_dir / "samples.json").exists() and (run_dir / "samples.partial.jsonl").exists()
    r = torchneck("report", "--quiet", str(run_dir))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    assert report["run"]["status"] == "unfinished" and report["run"]["exit_code"] == -1
    assert any("recovered from samples.partial.jsonl" in w for w in report["warnings"])
    assert any("never finished" in w for w in report["warnings"])
    started = json.loads((run_dir / "run.json").read_text())["started_unix_ns"] / 1e9
    assert report["run"]["wall_s"] > traced - started + 1.0  # samples flushed at least every second
    assert report["ranks"][0]["steps"]["count"] >= 5  # model calls: 0.1 s of them at least
    top = report["python"]["window"]["lines"][0]
    assert top["file"].endswith("forever.py") and top["line"] == 5


def test_a_native_crash_names_the_line_that_crashed(run_dir):
    script = SCRIPTS / "segfault.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == -signal.SIGSEGV
    assert "Segmentation fault" in (run_dir / "crash.txt").read_text()
    again = torchneck("report", "--quiet", str(run_dir))
    assert again.returncode == 0, again.stderr[-2000:]
    report = read_report(run_dir)
    assert report["run"]["status"] == "unfinished"
    assert report["run"]["error"].endswith(f"at {script}:{planted_line(script)} in <module>")


def test_env_json_holds_what_a_misconfiguration_check_needs(run_dir):
    """Build, versions, OS, the torch-related environment variables, and the switches before the
    script and after it (the script turned several on)."""
    env_vars = {"CUDA_LAUNCH_BLOCKING": "1", "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "MKL_NUM_THREADS": "1",
                "UNRELATED_SECRET": "kept-out"}
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(SCRIPTS / "configured.py"), env=env_vars)
    assert r.returncode == 0, r.stderr[-2000:]
    env = json.loads((run_dir / "env.json").read_text())
    import torch

    assert env["torch"] == torch.__version__ and env["build"]["debug"] is False
    assert env["build"]["git_version"] == torch.version.git_version
    assert {"mkl", "mkldnn", "openmp", "cudnn", "nccl", "cxx11_abi"} <= set(env["build"])
    assert env["os"]["system"] and env["python"] == sys.version.split()[0]
    assert {k: env["env_vars"].get(k) for k in env_vars} == {**env_vars, "UNRELATED_SECRET": None}
    assert env["env_vars"]["OMP_NUM_THREADS"] == "1" and env["thread_env"]["MKL_NUM_THREADS"] == "1"
    before = env["settings"]
    assert before["slow_env"] == {"CUDA_LAUNCH_BLOCKING": "1"}
    assert (before["cudnn_benchmark"], before["deterministic_algorithms"], before["anomaly_detection"]) == \
        (False, False, False)
    assert before["float32_matmul_precision"] == "highest" and before["default_dtype"] == "torch.float32"
    after = json.loads((run_dir / "run.json").read_text())["settings_at_end"]
    assert (after["cudnn_benchmark"], after["deterministic_algorithms"], after["deterministic_warn_only"],
            after["anomaly_detection"], after["float32_matmul_precision"]) == (True, True, True, True, "high")
    report = read_report(run_dir)
    assert report["env"]["build"]["git_version"] == torch.version.git_version
    assert report["env"]["settings_at_end"]["cudnn_benchmark"] is True


def test_one_sampled_stack_is_a_loop_only_on_the_cpu():
    """A loop of one line shows one stack, as does a sleep: the thread's CPU share tells them
    apart (a sleep before the steps was taken for the steady state, start-up read 0.01 s)."""
    from torchneck.capture.plan import STEADY_HOLD_S, SteadyState

    def held(on_cpu):
        steady, now, fresh = SteadyState(), 0, 1
        for _ in range(int(STEADY_HOLD_S / 0.01) + 5):
            now += 10_000_000
            if steady.update(now, 10, fresh, False, {7}, on_cpu):
                return True
        return False

    assert held(0.95)  # acc = acc * 0.99 + x.sin(): the same line, computing
    assert not held(0.01)  # time.sleep(1.0): the same line, waiting
    assert not held(None)  # no CPU clock: one stack is not enough evidence


def test_a_loop_sampled_sparsely_still_reaches_its_steady_state():
    """On a loaded machine a 10 ms check can hold a single sample: one stack not seen before among
    it must not reset the steady state (new stacks are judged over the newest 10 samples)."""
    from torchneck.capture.plan import STEADY_HOLD_S, SteadyState

    steady, now, fresh = SteadyState(), 0, 3
    for i in range(int(STEADY_HOLD_S / 0.01) + 30):  # the first 10 samples still hold the start-up stacks
        now += 10_000_000
        fresh += i % 6 == 5  # a new stack (a line of the loop not sampled before) every 6th sample
        if steady.update(now, 1, fresh, False, {1, 2}, 0.99):
            break
    else:
        raise AssertionError("a loop sampled once per check never became the steady state")
    busy_then_loop = SteadyState()
    assert not busy_then_loop.update(10_000_000, 1, 50, True, {9}, 0.99)  # imports: start-up


def test_a_window_of_module_calls_gives_way_to_the_optimizer_s_steps(run_dir):
    """Top-level modules called one by one (a ModuleList of tables) tick the module clock many
    times a step: the window it began, five lookups inside the first step, is replaced once the
    optimizer's steps begin, and the trace holds whole steps with their optimizer step."""
    script = SCRIPTS / "module_list_steps.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    cap = json.loads((run_dir / "run.json").read_text())["capture"]
    assert cap["plan"] == "steps" and cap["why"].startswith("optimizer steps") and cap["stopped_by"] == "steps"
    assert cap["replaced"] and "module calls" in cap["replaced"] and "better clock" in cap["replaced"]
    names = {e.get("name", "") for e in _events(run_dir / "trace.json.gz")}
    assert any(n.startswith("Optimizer.step#SGD.step") for n in names)


def test_a_module_window_set_aside_for_a_late_optimizer_is_kept_when_its_steps_never_come(run_dir):
    """Two optimizer steps at the very end of a scoring script: the better clock begins, but
    too late for a window of its steps; the module calls' window, written when it was set aside,
    stays the run's, and the report says so rather than 'nothing was profiled'."""
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(SCRIPTS / "late_optimizer.py"))
    assert r.returncode == 0, r.stderr[-2000:]
    cap = json.loads((run_dir / "run.json").read_text())["capture"]
    assert cap["plan"] == "steps" and cap["why"].startswith("module steps") and not cap["replaced"]
    assert any("was kept" in n for n in cap["notes"])
    events = _events(run_dir / "trace.json.gz")
    assert sum(e.get("name") == "aten::addmm" for e in events) >= 5  # the scoring calls' matmuls
    report = read_report(run_dir)
    assert report["capture"]["window"]["events"] > 0 and "Nothing was profiled" not in report["capture"]["summary"]


def test_a_step_of_many_torch_calls_is_cut_inside_the_step_and_its_line_named(run_dir):
    """Twelve thousand element reads between two module calls: the step window is cut inside the
    step by the marked calls standing in for memory (it recorded 98,000 events, 36 MB against a
    4 MB bound, before), and the loop reading elements one by one is the top finding at its line,
    with the fix that reads them at once."""
    script = SCRIPTS / "element_reads_steps.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    window = report["capture"]["window"]
    assert window["stopped_by"] == "memory_bound" and window["inside_step"] and window["events"] < 40_000, window
    assert "stopped inside a step" in report["capture"]["summary"]
    assert report["verdict"].startswith("Part of one step profiled") or "the last one cut short" in report["verdict"]
    top = report["findings"][0]
    assert top["kind"] == "python_hotspot" and top["where"][0]["line"] == planted_line(script)
    assert "tolist()" in top["fix"]
    # The dispatch time of the reads is the loop's symptom: folded under it when its rule fires
    # (whether it does depends on the machine's speed of the moment), never a finding of its own.
    assert {s["kind"] for s in top["symptoms"]} <= {"dispatch_overhead"}
    assert "dispatch_overhead" not in [f["kind"] for f in report["findings"]]


def test_model_calls_in_worker_threads_are_counted_and_their_grad_mode_named(run_dir):
    """A server whose worker threads run the model: the sampler sees only the main thread
    (waiting for answers), but the module hooks run in the workers: their calls are counted,
    timed and placed, and the `with` that leaves autograd on is found there. (Not necessarily on
    top: on a CPU, this model's calls take as long under inference_mode, which the probe measures,
    so any real cost outranks it; under load the workers' sampled lines can.)"""
    script = SCRIPTS / "threaded_server.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    clock = json.loads((run_dir / "run.json").read_text())["clock"]
    assert clock["thread_module_calls"] == clock["thread_module_outputs_with_grad"] == 300
    assert clock["thread_module_threads"] == 2 and clock["thread_module_s"] > 0
    assert clock["top_module_calls"] == 0  # none in the main thread, and no step ticks from the workers
    report = read_report(run_dir)
    [found] = [f for f in report["findings"] if f["kind"] == "autograd_in_inference"]
    assert found["where"][0]["line"] == planted_line(script), found
    # the workers' model ops are placed at their call by the watcher's samples of the workers
    assert any(e["op"] == "aten::addmm" and e.get("line") == planted_line(script) + 1
               for e in report["ops_by_line"]), report["ops_by_line"]
    fixed = run_dir.parent / "fixed"
    r = torchneck("run", "--quiet", "--out", str(fixed), str(script), "--fixed")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((fixed / "run.json").read_text())["clock"]["thread_module_outputs_with_grad"] == 0
    assert "autograd_in_inference" not in [f["kind"] for f in read_report(fixed)["findings"]]



def test_long_steps_are_warmed_up_by_two_of_them(run_dir):
    """Steps of seconds each: two are warm-up enough (the first holds the one-time costs), so a run
    of three records its third; `--warmup 3` asked for keeps three, and records none."""
    script = SCRIPTS / "long_steps.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    assert report["capture"]["why"].startswith("optimizer steps: 2 warm-up step(s) skipped"), report["capture"]
    assert report["ranks"][0]["steps"]["count"] == 1 and report["capture"]["window"]["events"] > 1000
    asked = run_dir.parent / "asked"
    r = torchneck("run", "--quiet", "--warmup", "3", "--out", str(asked), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    assert read_report(asked)["capture"]["window"]["events"] < 100


def test_a_main_thread_joining_its_worker_is_sampled_through_the_worker(run_dir):
    """The main thread starts a worker and joins it: blocked in Thread.join, it runs no signal
    handler, which left one sample of the whole run and an empty window. The watcher samples the
    worker in its place and profiles a slice of its work (every thread recorded): the per-request
    model calls (a flat input with the offsets of one bag) are found at the worker's line."""
    script = SCRIPTS / "joined_worker.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    assert "the main thread waits on another thread at work" in report["capture"]["why"], report["capture"]
    assert report["capture"]["window"]["events"] > 1000
    lines = report["python"]["window"]["lines"]
    assert any(ln["function"].startswith("serve") and ln["line"] == planted_line(script) for ln in lines[:3]), lines
    top = report["findings"][0]
    assert top["kind"] == "unbatched_calls" and top["where"][0]["line"] == planted_line(script), top
    samples = json.loads((run_dir / "samples.json").read_text())["samples"]
    on_cpu = sum(s[2] for s in samples if s[2] >= 0)
    assert on_cpu <= 1.05 * sum(s[1] for s in samples)  # the worker's CPU time stands in for the wait, not beside it


def test_a_thread_pool_the_main_thread_waits_on_is_sampled_and_its_window_bounded(run_dir):
    """The main thread iterates `pool.map`: its handler runs once per finished chunk, in the
    wait (`Future.result()`), so its samples said "waits in result_iterator", its checks ran
    rarely, and the worker's tiny ops, recorded on every thread, ran the window to 160,000 events
    for a 4 MB bound (2 s to stop; the script ran twice as long). The watcher samples the worker
    in the waiting main thread's place and checks the window's bounds itself: the per-document
    model calls are found at the worker's line."""
    script = SCRIPTS / "pool_scorer.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    assert report["capture"]["window"]["stopped_by"] == "memory_bound"
    assert report["capture"]["window"]["events"] < 80_000, report["capture"]["window"]
    top = report["findings"][0]
    assert top["kind"] == "unbatched_calls" and top["where"][0]["line"] == planted_line(script), top


def test_a_window_whose_first_step_is_already_far_over_the_memory_bound_keeps_that_step(run_dir):
    """One C++ call running hundreds of thousands of internal ops (torch.unique over an edge list's
    columns) records far more than the bound in one step: the window stops at that step's end
    instead of recording a second (the profiler then took a minute to process them)."""
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(SCRIPTS / "many_internal_ops.py"))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    assert report["capture"]["window"]["stopped_by"] == "memory_bound"
    assert report["ranks"][0]["steps"]["count"] == 1


def test_a_program_of_a_few_long_calls_is_profiled_in_its_work_not_after_it(run_dir):
    """No step loop and nothing repeating: three SVDs of a second each hold the run. The sampler's
    signal waits for each call to return, so a call shows as one long sample; that is the
    program's work beginning (`long_call_from_ns`), not start-up, and the top finding is the full
    factors at their line, over the run from the first call, read from the samples (it had been
    'set-up before the first step', and a HIGH Python hotspot in a 30 ms slice after the calls)."""
    script = SCRIPTS / "pca_full_svd.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads((run_dir / "run.json").read_text())
    cap = run["capture"]
    assert cap["long_call_from_ns"], cap
    report = read_report(run_dir)
    top = report["findings"][0]
    assert top["kind"] == "op_hotspot" and top["where"][0]["line"] == planted_line(script), top
    assert top["evidence"]["full_factors_at"] == planted_line(script) and "full_matrices=False" in top["fix"]
    assert not any(f["kind"] == "one_time_cost" and f["severity"] != "info" for f in report["findings"])


def test_an_aggregation_over_a_transposed_view_is_named_by_its_strides(run_dir):
    """A real run of a graph layer's aggregation over features handed out as `feats.T` (round 24's
    GraphSAGE in small): the trace's "Input Strides" show embedding_bag's input column-major, and
    the top finding is op_hotspot at the aggregation's line with the contiguous fix, not the
    model's compute."""
    script = SCRIPTS / "transposed_features.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    top = report["findings"][0]
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "F.embedding_bag(" in text)
    assert top["kind"] == "op_hotspot" and top["severity"] != "info" and top["where"][0]["line"] == line, top
    assert top["evidence"]["strided_at"] == line and "strides [1, 20000]" in top["evidence"]["strided_input"]
    assert ".contiguous()" in top["fix"]
    assert top["where"][1]["line"] == planted_line(script)  # the one function returning a transposed view
    strided = {s["op"] for s in report["ranks"][0]["ops"]["strided_inputs"]}
    assert "aten::_embedding_bag_forward_only" in strided


def test_a_long_call_is_one_long_sample_on_the_cpu_at_the_user_s_own_line():
    """Readings are (stack, wall ns, CPU ns, run-queue ns). A 0.8 s interval computing at stack 1
    (the user's line) is a long call, starting at the reading before it; a sleep (off the CPU), an
    import (busy), a wait on another thread, or a library's frame innermost are not; nor are short
    intervals; run-queue time (other processes on the CPU) does not count as off-CPU."""
    from torchneck.capture.plan import long_call

    busy, waits = [False, False, True, False, False], [False, False, False, True, False]
    user = {0, 1, 2, 3}.__contains__  # stack 4's innermost frame is a library's
    ms = 1_000_000
    before = (0, 100 * ms, 90 * ms, 0)
    assert long_call(before, [(0, 101 * ms, 91 * ms, 0), (1, 901 * ms, 880 * ms, 0)], busy, waits, user) \
        == (101 * ms, 1)
    assert long_call(before, [(1, 900 * ms, 300 * ms, 400 * ms)], busy, waits, user) == (100 * ms, 1)  # loaded
    assert long_call(before, [(1, 900 * ms, 100 * ms, 0)], busy, waits, user) is None  # a sleep
    for stack in (2, 3, 4):  # importing, waiting on a thread, inside a library
        assert long_call(before, [(stack, 900 * ms, 880 * ms, 0)], busy, waits, user) is None
    assert long_call(before, [(1, 300 * ms, 290 * ms, 0)], busy, waits, user) is None  # 0.2 s: not long
    assert long_call(None, [(1, 900 * ms, 880 * ms, 0)], busy, waits, user) is None  # nothing before it
