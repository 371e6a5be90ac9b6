"""End-to-end: `torchneck run` in a subprocess on small real scripts."""

import gzip
import json

import pytest
from conftest import SCRIPTS, planted_line, read_report, torchneck


def test_python_hotspot_named_with_line(run_dir):
    script = SCRIPTS / "python_hotspot.py"
    r = torchneck("run", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr
    report = read_report(run_dir)
    top = report["findings"][0]
    assert top["kind"] == "python_hotspot"
    assert top["where"][0]["function"] == "python_checksum"
    # The loop body is the planted line; the `for` line above it shares the samples.
    assert top["where"][0]["line"] in (planted_line(script), planted_line(script) - 1)
    assert report["run"]["phases"]["clock"] == "optimizer"
    assert "python_hotspot" in r.stdout


def test_dominant_op_top_row_at_its_line(run_dir):
    script = SCRIPTS / "dominant_op.py"
    r = torchneck("run", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr
    report = read_report(run_dir)
    assert report["ranks"][0]["ops"]["by_name"][0]["name"] == "aten::mm"
    top = report["ops_by_line"][0]
    assert top["op"] == "aten::mm"
    assert top["line"] == planted_line(script)
    assert top["file"].endswith("dominant_op.py")
    assert top["source"] == "trace"  # placed by the torchneck@ span around the call, not by a sample
    # The mm is the script's own compute: context (info), named at its line, not a problem.
    [hot] = [f for f in report["findings"] if f["kind"] == "op_hotspot"]
    assert hot["severity"] == "info" and hot["where"][0]["line"] == planted_line(script)
    assert all(f["severity"] in ("low", "info") for f in report["findings"])  # nothing else costs much
    assert report["compile"]["present"] is False and report["compile"]["available"] is True
    # The line's time is inside aten::mm: it must not also be reported as Python time.
    assert not [f for f in report["findings"] if f["kind"] == "python_hotspot"
                and f["where"][0]["line"] == planted_line(script)]
    window = report["python"]["window"]
    assert window["in_torch_ops_s"] > 0.5 * window["sampled_s"]


def test_trace_is_written_and_loads_with_json(run_dir):
    r = torchneck("run", "--out", str(run_dir), str(SCRIPTS / "dominant_op.py"))
    assert r.returncode == 0
    data = json.loads(gzip.open(run_dir / "trace.json.gz").read())
    assert data["traceEvents"]
    names = {e.get("name") for e in data["traceEvents"]}
    assert {f"ProfilerStep#{i}" for i in range(5)} <= names
    for f in ("env.json", "samples.json", "run.json", "report.json", "report.txt"):
        assert (run_dir / f).exists(), f


def test_script_that_raises_keeps_report_and_exit_code(run_dir):
    r = torchneck("run", "--out", str(run_dir), str(SCRIPTS / "raises.py"))
    assert r.returncode == 1
    assert "ValueError: planted failure" in r.stderr
    assert "torchneck/capture" not in r.stderr  # the user's traceback, not ours
    report = read_report(run_dir)
    assert report["run"]["status"] == "exception"
    assert (run_dir / "trace.json.gz").exists()


def test_sys_exit_code_is_kept(run_dir):
    r = torchneck("run", "--out", str(run_dir), str(SCRIPTS / "exit3.py"))
    assert r.returncode == 3
    assert "bye" in r.stdout
    assert read_report(run_dir)["run"]["exit_code"] == 3


def test_script_arguments_and_its_own_help(run_dir, tmp_path):
    r = torchneck("run", "--out", str(run_dir), str(SCRIPTS / "with_args.py"), "--n", "7", "--name", "abc")
    assert r.returncode == 0, r.stderr
    assert "ARGS n=7 name=abc main=__main__" in r.stdout
    h = torchneck("run", "--out", str(tmp_path / "h"), str(SCRIPTS / "with_args.py"), "--help")
    assert h.returncode == 0
    assert "a script with its own options" in h.stdout


def test_module_form(run_dir):
    r = torchneck("run", "--out", str(run_dir), "-m", "pkg.mod", "--flag", "v", cwd=SCRIPTS)
    assert r.returncode == 0, r.stderr
    assert "MODULE main=__main__ argv=['--flag', 'v']" in r.stdout
    assert read_report(run_dir)["run"]["target"]["module"] == "pkg.mod"


def test_spawn_dataloader_and_pickling(run_dir):
    r = torchneck("run", "--out", str(run_dir), str(SCRIPTS / "spawn_loader.py"))
    assert r.returncode == 0, r.stderr
    assert "SPAWN total=64" in r.stdout
    assert read_report(run_dir)["run"]["phases"]["clock"] == "dataloader"


def test_timeout_stops_and_reports(run_dir):
    r = torchneck("run", "--out", str(run_dir), "--timeout", "4", str(SCRIPTS / "forever.py"))
    assert r.returncode == 124
    report = read_report(run_dir)
    assert report["run"]["status"] == "timeout"
    assert report["ranks"][0]["steps"]["count"] >= 5


def test_bottleneck_form(tmp_path):
    r = torchneck(str(SCRIPTS / "with_args.py"), "--n", "3", module=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ARGS n=3" in r.stdout
    assert list((tmp_path / "torchneck-runs").iterdir())


def test_user_errors_are_one_line_exit_2(tmp_path):
    missing = torchneck("run", str(tmp_path / "nope.py"))
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "no such file" in missing.stderr
    bad = torchneck("run", "--out", str(tmp_path / "r"), str(SCRIPTS / "bad_syntax.py"))
    assert bad.returncode == 2 and "syntax error" in bad.stderr and "Traceback" not in bad.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    unwritable = torchneck("run", "--out", str(blocker / "sub"), str(SCRIPTS / "exit3.py"))
    assert unwritable.returncode == 2 and "cannot write the run directory" in unwritable.stderr


def test_op_line_is_the_helper_line_and_script_signals_work(run_dir):
    script = SCRIPTS / "op_in_helper.py"
    r = torchneck("run", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr  # 5 would mean the script's SIGALRM never fired
    report = read_report(run_dir)
    assert report["run"]["phases"]["clock"] == "module"
    top = report["ops_by_line"][0]
    assert (top["op"], top["line"], top["function"], top["source"]) == \
        ("aten::mm", planted_line(script), "project", "trace")
    assert json.loads((run_dir / "run.json").read_text())["clock"]["lines_marked"] is True
    samples = json.loads((run_dir / "samples.json").read_text())
    # format 5: a fifth value only on the watcher's samples of other threads (none in this script)
    assert samples["format"] == 5 and samples["samples"] and all(len(s) == 4 for s in samples["samples"])
    assert samples["native_id"] > 0  # the sampled thread's id in the trace


@pytest.mark.parametrize("mode", ["per-step", "whole-loop"])
def test_window_starts_inside_open_spans(run_dir, mode):
    """The optimizer clock ticks inside `Optimizer.step`'s span and the user's. The window is
    the run's first profiler session, so starting it there is safe (a span opened with no
    session records nothing); restarting a session there corrupted the heap (segfault in 3 of 6
    runs with MALLOC_PERTURB_ before the spans were counted)."""
    script = SCRIPTS / "spans_around_steps.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script), mode, env={"MALLOC_PERTURB_": "165"})
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads((run_dir / "run.json").read_text())
    clock, capture = run["clock"], run["capture"]
    assert clock["whole_run"] is False and clock["window_note"] is None
    assert clock["window_first_step"] == 3 and clock["lines_marked"] is True
    assert len(clock["step_marks"]) == 5
    assert (capture["plan"], capture["stopped_by"], capture["replaced"]) == ("steps", "steps", None)
    assert read_report(run_dir)["capture"]["plan"] == "steps"


@pytest.mark.parametrize("mode", ["per-step", "whole-loop"])
def test_a_slice_is_replaced_by_steps_only_when_no_span_is_open(run_dir, mode):
    """A phase without steps gets a time slice; when steps begin, the slice is replaced by a
    window of steps, once: after the user's span around the step has closed (per-step), never
    while a span opened under the slice's session is open (whole-loop: the slice is kept)."""
    script = SCRIPTS / "slice_then_steps.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script), mode, env={"MALLOC_PERTURB_": "165"})
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads((run_dir / "run.json").read_text())
    capture = run["capture"]
    if mode == "per-step":
        assert capture["plan"] == "steps" and capture["stopped_by"] == "steps"
        assert capture["replaced"].startswith("a loop window from")
        assert len(run["clock"]["step_marks"]) == 5
    else:
        assert capture["plan"] == "loop" and capture["replaced"] is None
        assert any("inside a record_function span" in n for n in capture["notes"])
    report = read_report(run_dir)
    assert report["capture"]["plan"] == capture["plan"]
    assert report["ranks"][0]["steps"]["count"] == (5 if mode == "per-step" else 1)


def test_profiling_slowdown_is_measured_and_said(run_dir):
    """Steps after the window run without the profiler: their median against the window's says
    how much the profiler inflated absolute times (several-fold for thousands of tiny ops)."""
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(SCRIPTS / "tiny_ops_steps.py"))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    phases = report["run"]["phases"]
    assert phases["unprofiled_step_s"] > 0 and phases["profiled_step_s"] > phases["unprofiled_step_s"]
    assert phases["profiling_slowdown"] > 1.5
    assert any(w.startswith("profiled steps ran") for w in report["warnings"])


def test_a_wait_is_charged_to_the_line_that_waits(run_dir):
    """A 20 ms sleep per step: the wall-clock sampler charges it to the sleeping line (a CPU-time
    sampler charged it to the next line that burnt CPU), and the finding says it waits."""
    script = SCRIPTS / "sleepy_step.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((run_dir / "samples.json").read_text())["method"] == "wall-timer"
    report = read_report(run_dir)
    top = report["python"]["window"]["lines"][0]
    assert top["line"] == planted_line(script) and top["pct"] > 60
    assert top["waiting_s"] > 0.8 * top["total_s"]  # off the CPU, not computing
    f = report["findings"][0]
    assert f["kind"] == "python_hotspot" and f["where"][0]["line"] == planted_line(script)
    assert "waits" in f["title"] and "DataLoader workers" in f["fix"]


def test_a_sigterm_after_the_script_waits_for_its_evidence(tmp_path):
    """torchrun stops the other ranks with SIGTERM when one fails. A SIGTERM that lands once
    the script is over (here: while its error is formatted, and while the evidence is being
    written) is held back until run.json and the trace are on disk, then ends the process as
    asked; the script's own error is what run.json reports."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "in_error"
    r = torchneck("run", "--out", str(out), "--quiet", str(SCRIPTS / "sigterm_in_error_report.py"))
    assert r.returncode == -signal.SIGTERM, r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "exception" and run["error"] == "Boom: boom"
    assert (out / "samples.json").exists() and (out / "compile.json").exists()

    out = tmp_path / "while_writing"  # the signal at the start of writing the evidence
    code = ("import os, signal, sys\n"
            "import torchneck.capture.session as s\n"
            "real = s.CaptureSession.end\n"
            "def end(self, *a):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return real(self, *a)\n"
            "s.CaptureSession.end = end\n"
            "from torchneck.cli import main\n"
            "sys.exit(main())\n")
    r = subprocess.run([sys.executable, "-c", code, "run", "--out", str(out), "--quiet",
                        str(SCRIPTS / "python_hotspot.py")], capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGTERM, r.stderr
    assert json.loads((out / "run.json").read_text())["status"] == "ok"


def test_hotspot_names_the_line_that_calls_the_hot_helper(run_dir):
    """The helper's loop is where the time goes; the loop's one call site is where the fix goes:
    the finding names both, the hot line first."""
    script = SCRIPTS / "caller_path.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    [hot] = [f for f in read_report(run_dir)["findings"] if f["kind"] == "python_hotspot"][:1]
    lines = [w["line"] for w in hot["where"]]
    assert lines[:2] == [planted_line(script, "# HOT"), planted_line(script, "# CALLER")]
    assert hot["where"][1]["function"] == "<module>"


def test_the_script_allocates_as_under_plain_python(run_dir):
    """torchneck's own allocator settings (large blocks mapped afresh, for its analysis of big
    traces) wait until the script is over: set before it, every tensor of 1 MB or more the script
    allocated got fresh pages (10 of 10 blocks here), and the program ran slower than bare.
    Both runs without MALLOC_*_ variables: any of them turns glibc's dynamic threshold off, and
    Dask's nanny sets MALLOC_TRIM_THRESHOLD_ in the environment of the process that starts it
    (this test suite's, after the cluster tests)."""
    import ctypes
    import os
    import subprocess
    import sys

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("needs glibc >= 2.33 (mallinfo2)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env["OMP_NUM_THREADS"] = "1"
    script = SCRIPTS / "allocator_probe.py"
    bare = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, env=env)
    assert bare.stdout.strip() == "mapped 0"
    r = subprocess.run([sys.executable, "-c", "import sys; from torchneck.cli import main; sys.exit(main())",
                        "run", "--quiet", "--out", str(run_dir), str(script)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == bare.stdout.strip()


def test_tiny_ops_of_a_recursive_helper_name_the_line_that_starts_it(run_dir):
    """The tiny ops are issued inside a recursive helper; the finding names the helper's lines,
    then, past the helper's calls of itself, the line that starts the recursion (where a larger
    leaf or one vectorised op goes)."""
    script = SCRIPTS / "recursive_tiny_ops.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    [tiny] = [f for f in read_report(run_dir)["findings"] if f["kind"] == "dispatch_overhead"]
    lines = [w["line"] for w in tiny["where"]]
    assert lines[0] == planted_line(script, "# HOT")
    assert planted_line(script, "# CALLER") in lines
    callers = lines[lines.index(planted_line(script, "# CALLER")):]
    assert all(w["function"] != "tree_sum" for w in tiny["where"][len(lines) - len(callers):])


def test_the_autograd_probe_times_a_model_call_that_built_a_graph(run_dir, tmp_path):
    """A DataLoader's clock replaces the module clock before the first model call: the module
    hooks still see a few calls, keep one, and the probe times it again after the script, with
    autograd on and under inference_mode (the model left in eval mode). Under no_grad, no call
    built a graph: no probe."""
    script = SCRIPTS / "eval_with_grad.py"
    r = torchneck("run", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr
    assert "scored 4096 rows, training=False" in r.stdout
    run = json.loads((run_dir / "run.json").read_text())
    assert run["clock"]["kind"] == "dataloader"
    probe = run["settings_at_end"]["autograd_probe"]
    assert probe["module"] == "Sequential" and probe["training"] is False and probe["rounds"] >= 2
    assert probe["seconds_with_grad"] > 0 and probe["seconds_inference_mode"] > 0
    assert probe["inference_over_grad"] == probe["seconds_inference_mode"] / probe["seconds_with_grad"]
    clean = tmp_path / "clean"
    r = torchneck("run", "--out", str(clean), str(script), "--no-grad")
    assert r.returncode == 0, r.stderr
    assert json.loads((clean / "run.json").read_text())["settings_at_end"]["autograd_probe"] is None


def test_sampling_with_autograd_on_after_training_is_found(run_dir, tmp_path):
    """Real runs: a program trains (the window holds its steps), then iterates its model on its
    own output with autograd on; the followed model's calls after the last optimizer step are
    counted (chained, no backward through them) and the finding names the sampling call. Under
    no_grad no call after training built a graph."""
    script = SCRIPTS / "sampling_after_training.py"
    r = torchneck("run", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    since = json.loads((run_dir / "run.json").read_text())["settings_at_end"]["autograd_probe"]["since_last_step"]
    assert since["calls"] == 150 and since["chained"] == 149 and since["backward_reached"] == 0
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "autograd_in_inference" and top["evidence"]["after_training"]
    assert planted_line(script) in [w["line"] for w in top["where"]]
    clean = tmp_path / "clean"
    r = torchneck("run", "--out", str(clean), str(script), "--no-grad")
    assert r.returncode == 0, r.stderr[-2000:]
    assert all(f["kind"] != "autograd_in_inference" for f in read_report(clean)["findings"])


def test_a_model_output_whose_attributes_raise_keyerror_runs_undisturbed(run_dir):
    """A Hugging-Face-style output (a dict with `__getattr__ = dict.__getitem__`) raises KeyError
    for a missing attribute: the module hooks' look for a graph once broke the program there. It
    runs as under plain python, and the dict's tensors tell that the calls built a graph."""
    script = SCRIPTS / "dict_output_model.py"
    r = torchneck("run", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "scored 12800 rows" in r.stdout
    run = json.loads((run_dir / "run.json").read_text())
    assert run["clock"]["top_module_outputs_with_grad"] > 0
    assert run["settings_at_end"]["autograd_probe"]["module"] == "Classifier"


def test_a_clock_ticking_at_every_model_call_keeps_a_bounded_record(run_dir):
    """30,000 model calls are 30,000 module-clock ticks: they are counted, and the times kept once
    the window is over stop at `TICKS_KEPT` (a server's 100,000 calls filled run.json and the
    report with every one)."""
    from torchneck.capture.plan import TICKS_KEPT

    r = torchneck("run", "--quiet", "--out", str(run_dir), str(SCRIPTS / "many_model_calls.py"))
    assert r.returncode == 0, r.stderr[-2000:]
    clock = json.loads((run_dir / "run.json").read_text())["clock"]
    assert clock["kind"] == "module" and len(clock["ticks"]) == TICKS_KEPT
    assert len(clock["ticks"]) + clock["ticks_dropped"] == 30_000
    phases = read_report(run_dir)["run"]["phases"]
    assert phases["steps_seen"] == 29_999 and len(phases["step_s"]) == TICKS_KEPT - 1
    assert 0 < phases["steady_step_s"] < 0.01
    # a window of model calls lasts 0.1 s at least (or up to a bound), not five calls of 50 µs
    report = read_report(run_dir)
    assert report["ranks"][0]["steps"]["count"] > 50 and "0.1 s at least" in report["capture"]["summary"]


def test_a_loop_s_closing_jump_is_charged_to_the_loop_not_the_def_line(run_dir):
    """CPython runs the sampler's signal handler at a loop's closing jump, which has no line of
    its own: its samples were charged to the method's `def` line (its first line). They go to the
    loop's `for`, and the loop of tiny ops is found there."""
    from torchneck.capture.sampler import line_of_offset

    def loop(xs):
        total = 0
        for x in xs:
            total += x
        return total

    jumps = [i for i in __import__("dis").get_instructions(loop) if "JUMP" in i.opname and (i.argval or 0) < i.offset]
    assert jumps and line_of_offset(loop.__code__, jumps[-1].offset) == loop.__code__.co_firstlineno + 2
    script = SCRIPTS / "method_loop_updates.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    spent = {ln["line"]: ln["total_s"] for ln in report["python"]["window"]["lines"]
             if ln["function"] == "Tracker.update"}
    assert max(spent, key=spent.get) == planted_line(script)
    assert spent.get(planted_line(script) - 1, 0.0) < 0.2 * spent[planted_line(script)]  # the call's entry only
    top = report["findings"][0]
    assert top["where"][0]["line"] == planted_line(script), top


def test_a_model_deep_copied_every_step_and_pickled_runs_as_under_python(run_dir):
    """An EMA callback's `copy.deepcopy(model)` each optimizer step and a `torch.save(model)`:
    once the optimizer clock takes over, the capture follows the model's calls; it did so through
    hooks in the model's own state, which deepcopy copied and failed on (`cannot pickle
    '_thread._local'`), killing the script. The script's output must be its own."""
    import subprocess
    import sys

    script = SCRIPTS / "ema_deepcopy_save.py"
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    assert plain.stdout.strip() and plain.stdout.strip() in r.stdout
    report = read_report(run_dir)
    assert report["run"]["exit_code"] == 0
    # the copy per step is the cause, its tensors' copy_ ops included: fixed where it is made
    top = report["findings"][0]
    assert top["kind"] == "python_hotspot" and top["where"][0]["line"] == planted_line(script)
    assert "deepcopy" in top["title"] and "in place" in top["fix"]


def test_a_model_loaded_per_request_three_calls_below_the_loop_is_named_at_its_call(run_dir):
    """serve -> handle -> _get_model -> _load_model, a checkpoint loaded for every request: the
    line to change is the call of the loader (load once, keep the model), found up a call path
    longer than the two callers once kept, through a comprehension as the repeating loop."""
    script = SCRIPTS / "server_reload_model.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script), "300")
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    # the loader's call, or (when the samples put the model's construction above the load) the
    # call of `_get_model()` made with the same arguments for every request: both are on the path
    calls = {planted_line(script), planted_line(script, "# GETS")}
    assert top["kind"] == "python_hotspot" and top["where"][0]["line"] in calls
    assert top["evidence"]["called_at"] in calls and "once" in top["fix"]
    assert top["saving_pct"] > 50  # the load, the model's construction and its initialisation


def test_a_model_converted_to_float64_is_named_before_its_datas_entry(run_dir):
    """A scorer class converts its model with `.double()` and each NumPy chunk to the model's
    dtype (from a generator, no step loop): the float64 finding leads with the conversion, the
    line to change (the data's `torch.from_numpy` entry follows), and its fix says so."""
    script = SCRIPTS / "float64_model_scorer.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "dtype_float64" and top["where"][0]["line"] == planted_line(script), top["where"]
    assert top["evidence"]["conversion_line"] == planted_line(script) and "drop the conversion" in top["fix"]


def test_a_forward_hook_attached_at_every_batch_is_named_at_the_per_batch_call(run_dir):
    """A logger attaches a forward hook to every layer at every batch and never removes it:
    batch k runs k copies. The pile is the top finding, at the per-batch call of the logger's
    attach() (its registering line after it), with the copies counted; two hooks set up at once
    on the head and a hook on each step's fresh loss are not piles."""
    script = SCRIPTS / "activation_logger.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    findings = read_report(run_dir)["findings"]
    top = findings[0]
    assert top["kind"] == "hook_pileup" and top["where"][0]["line"] == planted_line(script), top
    assert top["where"][1]["function"] == "ActivationLogger.attach"
    assert top["evidence"]["copies"] >= 250 and top["evidence"]["method"] == "register_forward_hook"
    assert top["time_lost_pct"] > 25 and [f["kind"] for f in findings].count("hook_pileup") == 1


def test_a_running_median_over_the_whole_loss_history_is_named_as_steps_growing(run_dir):
    """Each step concatenates every per-sample loss so far and takes its median: the profiled
    window of early steps sees it cheap; the steps after it grow. The growth is the top finding,
    at that line, with its concatenation named in the fix."""
    script = SCRIPTS / "loss_history.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    top = report["findings"][0]
    assert top["kind"] == "step_time_growth" and top["where"][0]["line"] == planted_line(script), top
    assert top["evidence"]["late_step_s"] > 1.5 * top["evidence"]["early_step_s"] and top["evidence"]["hint"] == "cat"
    assert report["python"]["growth"]["steps"] >= 400


def test_single_number_parameters_are_named_where_they_are_made(run_dir):
    """A ParameterList of per-neuron slopes (192 scalars, and the last bias): the optimizer's call site records them,
    and the optimizer finding leads at the line making them, the tiny ops folded under it."""
    script = SCRIPTS / "scalar_slopes.py"
    r = torchneck("run", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr
    report = read_report(run_dir)
    [site] = [c for c in report["run"]["call_sites"] if c["what"] == "optimizer"]
    assert site["params"] == 200 and site["scalars"] == 193
    top = report["findings"][0]
    assert top["kind"] == "optimizer" and top["where"][0]["line"] == planted_line(script)
    assert top["evidence"]["scalar_parameters"] == 193 and "one tensor" in top["fix"]
