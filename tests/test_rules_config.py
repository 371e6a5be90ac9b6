"""Settings left on, threads, start-up."""

from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.rules.config import AnomalyDetection, OneTimeCost, ThreadOversubscription
from torchneck.model.analysis import OpRow

OPS = [OpRow(name="aten::addmm", count=50, self_us=60_000.0, total_us=60_000.0, mean_us=1200.0)]
SITES = [{"what": "set_num_threads", "threads": 8, "file": "/x/train.py", "line": 6, "function": "<module>"}]


def _env(threads_at_end, slowdown):
    probe = {"threads": 8, "cores": 2, "seconds_at_threads": 0.0015, "seconds_at_cores": 0.001, "slowdown": slowdown}
    return {"cpu_affinity": 2, "torch_threads": 2,
            "settings_at_end": {"torch_threads": threads_at_end, "thread_probe": probe}}


@fires("thread_oversubscription")
def test_thread_oversubscription_costs_what_the_probe_measured():
    [f] = ThreadOversubscription().check(facts(analysis=analysis(by_name=OPS), env=_env(8, 1.5), call_sites=SITES))
    assert abs(f.time_lost_s - 0.02) < 1e-9  # 60 ms of ops x (1 - 1/1.5)
    assert f.severity == "medium" and f.where[0].line == 6 and "1.50x slower" in f.title  # 20 % of the window
    assert "OMP_NUM_THREADS=2" in f.fix
    [f] = ThreadOversubscription().check(facts(analysis=analysis(by_name=OPS), env=_env(8, 1.02), call_sites=SITES))
    assert f.severity == "low" and f.time_lost_s == 0.0  # within noise: the setting is reported, with no cost


@silent("thread_oversubscription")
def test_thread_oversubscription_silent_when_threads_fit():
    assert ThreadOversubscription().check(facts(analysis=analysis(by_name=OPS), env=_env(2, 1.5))) == []


def test_thread_probe_restores_the_setting_and_skips_when_threads_fit():
    import torch

    from torchneck.capture.thread_probe import probe_oversubscription

    assert probe_oversubscription(2, 2) is None
    before = torch.get_num_threads()
    p = probe_oversubscription(before + 2, before)
    assert torch.get_num_threads() == before + 2  # the script's own setting, as it left it
    torch.set_num_threads(before)
    assert p["threads"] == before + 2 and p["slowdown"] > 0 and p["seconds_at_cores"] > 0


def _anomaly_samples(tmp_path, explicit_s):
    """Sampled stacks of a forward pass under anomaly mode: torch's C++ calls torch.fx's
    `format_stack` while `Linear.forward` runs its op (0.6 s), and while the script's own line
    runs `x.relu()` (0.1 s); the script also calls `traceback.format_stack()` itself for
    `explicit_s`; 1.3 s elsewhere."""
    from torchneck.analysis.python_stacks import hotspots, load_samples

    script = tmp_path / "train.py"
    script.write_text("import traceback\ny = model(x)\nz = x.relu()\nwhere = traceback.format_stack()\n")
    frames = [["<module>", str(script), 2], ["Linear.forward", "/env/site-packages/torch/nn/modules/linear.py", 134],
              ["format_stack", "/env/site-packages/torch/fx/traceback.py", 503],
              ["extract_stack", "/usr/lib/python3.11/traceback.py", 228],
              ["<module>", str(script), 3], ["<module>", str(script), 4],
              ["format_stack", "/usr/lib/python3.11/traceback.py", 213]]
    stacks = [[0, 1, 2, 3], [4, 2, 3], [5, 6], [0, 1]]
    seconds = [(0, 0.6), (1, 0.1), (2, explicit_s), (3, 1.3)]
    data = {"frames": frames, "stacks": stacks,
            "samples": [[k, 0.001] for k, total in seconds for _ in range(round(total / 0.001))]}
    return {"window": hotspots(load_samples(data))}


NAN_CHECK_OPS = [OpRow(name="aten::ne", count=100, self_us=4_000.0, total_us=4_000.0, mean_us=40.0),
                 OpRow(name="aten::isnan", count=100, self_us=1_000.0, total_us=5_000.0, mean_us=50.0),
                 OpRow(name="aten::item", count=110, self_us=1_100.0, total_us=1_100.0, mean_us=10.0)]
"""A window's NaN checks (100; the script's own 10 `item` calls left out): 6 ms of a 100 ms window."""


@fires("anomaly_detection")
def test_anomaly_detection_costs_the_stack_captures_c_plus_plus_made_and_the_nan_checks(tmp_path):
    """0.7 s of 2.3 s sampled inside captures torch's C++ made (the script's own format_stack call
    is not anomaly mode's), plus NaN checks taking 6 % of the window: 36 %, measured."""
    env = {"settings_at_end": {"anomaly_detection": True}}
    sites = [{"what": "anomaly_detection", "file": "/x/train.py", "line": 4, "function": "<module>"}]
    python = _anomaly_samples(tmp_path, explicit_s=0.3)
    assert abs(python["window"]["stack_capture_s"] - 0.7) < 1e-6 and abs(python["window"]["sampled_s"] - 2.3) < 1e-6
    [f] = AnomalyDetection().check(facts(env=env, call_sites=sites, python=python,
                                         analysis=analysis(by_name=NAN_CHECK_OPS)))
    assert abs(f.time_lost_pct - 100 * (0.7 / 2.3 + 0.06)) < 1e-6 and f.confidence == "measured"
    assert f.evidence["nan_checks"] == 100 and f.severity == "high" and f.where[0].line == 4
    assert "set_detect_anomaly" in f.fix
    env_no_nan = {"settings_at_end": {"anomaly_detection": True, "anomaly_check_nan": False}}
    [f] = AnomalyDetection().check(facts(env=env_no_nan, python=python, analysis=analysis(by_name=NAN_CHECK_OPS)))
    assert abs(f.time_lost_pct - 100 * 0.7 / 2.3) < 1e-6  # check_nan=False: no checks


def test_anomaly_detection_without_samples_is_high_and_unmeasured():
    """A trace alone: the captures run inside the ops' spans, not told apart."""
    env = {"settings_at_end": {"anomaly_detection": True}}
    [f] = AnomalyDetection().check(facts(env=env, analysis=analysis(by_name=NAN_CHECK_OPS)))
    assert f.severity == "high" and f.confidence == "unmeasured" and f.time_lost_pct == 0.0


def test_anomaly_detection_a_script_s_own_stack_captures_are_not_its_cost(tmp_path):
    """Only the script's explicit `traceback.format_stack()` call: no capture C++ made."""
    from torchneck.analysis.python_stacks import hotspots, load_samples

    script = tmp_path / "log.py"
    script.write_text("import traceback\nwhere = traceback.format_stack()\n")
    data = {"frames": [["<module>", str(script), 2], ["format_stack", "/usr/lib/python3.11/traceback.py", 213]],
            "stacks": [[0, 1]], "samples": [[0, 0.001]] * 500}
    window = hotspots(load_samples(data))
    assert window["stack_capture_s"] == 0.0 and abs(window["sampled_s"] - 0.5) < 1e-9
    env = {"settings_at_end": {"anomaly_detection": True}}
    [f] = AnomalyDetection().check(facts(env=env, python={"window": window}))
    assert f.time_lost_pct == 0.0 and f.severity == "low" and f.confidence == "measured"


@fires("anomaly_detection")
def test_anomaly_detection_turned_on_for_training_and_off_after_is_found(tmp_path):
    """A Trainer's fit() turns it on and off again after the epochs: off at the start and at the
    end, but the script turned it on (its call site) and the window measured it."""
    sites = [{"what": "anomaly_detection", "file": "/x/trainer.py", "line": 113, "function": "Trainer.fit"}]
    [f] = AnomalyDetection().check(facts(env={"settings_at_end": {"anomaly_detection": False}}, call_sites=sites,
                                         python=_anomaly_samples(tmp_path, explicit_s=0.3),
                                         analysis=analysis(by_name=NAN_CHECK_OPS)))
    assert f.where[0].line == 113 and abs(f.time_lost_pct - 100 * (0.7 / 2.3 + 0.06)) < 1e-6


@silent("anomaly_detection")
def test_anomaly_detection_silent_when_off(tmp_path):
    python = _anomaly_samples(tmp_path, explicit_s=0.0)
    assert AnomalyDetection().check(facts(env={"settings_at_end": {"anomaly_detection": False}}, python=python)) == []


def _startup(startup_s, importing_s=1.0):
    phases = {"phases": {"startup_s": startup_s, "window_s": 1.0}, "steady_step_s": 0.01}
    python = {"startup": {"importing_s": importing_s, "torchneck_hooks_s": 0.2,
                          "lines": [{"file": "/x/t.py", "line": 9, "function": "<module>", "total_s": 1.5,
                                     "library": "load_dataset (data.py)"}]},
              "window": {"lines": [], "sampled_s": 0}}
    return facts(phases=phases, python=python, run_wall_s=10.0)


@fires("one_time_cost")
def test_one_time_cost_is_the_script_s_own_set_up_not_its_imports():
    [f] = OneTimeCost().check(_startup(3.7))
    assert f.severity == "info" and abs(f.time_lost_s - 2.5) < 1e-9 and f.where[0].line == 9  # 3.7 - 1 - 0.2
    assert "1.0 s more importing" in f.title and f.evidence["share_of"] == "run_wall"


@silent("one_time_cost")
def test_one_time_cost_silent_when_start_up_is_imports():
    assert OneTimeCost().check(_startup(0.6)) == []
    assert OneTimeCost().check(_startup(3.0, importing_s=2.5)) == []  # 0.3 s of its own


@fires("slow_setting")
def test_slow_settings_where_they_apply():
    from torchneck.diagnose.rules.config import SlowSettings
    from torchneck.model.analysis import Gpu

    env = {"torch": "2.13.0", "torch_debug_build": True, "gpus": [{"index": 0}],
           "settings_at_end": {"slow_env": {"CUDA_LAUNCH_BLOCKING": "1", "TORCH_COMPILE_DEBUG": "1"},
                               "torch_logs": "+dynamo", "deterministic_algorithms": True}}
    on_gpu = facts(env=env, analysis=analysis(gpu=Gpu(present=True)))
    found = {f.evidence["setting"]: f for f in SlowSettings().check(on_gpu)}
    assert set(found) == {"debug build", "CUDA_LAUNCH_BLOCKING", "TORCH_LOGS", "deterministic algorithms"}
    assert found["debug build"].severity == found["CUDA_LAUNCH_BLOCKING"].severity == "high"
    assert "every kernel launch" in found["CUDA_LAUNCH_BLOCKING"].fix and found["TORCH_LOGS"].severity == "low"
    assert all(f.confidence == "unmeasured" for f in found.values())  # TORCH_COMPILE_DEBUG: nothing compiled


@silent("slow_setting")
def test_slow_settings_silent_on_a_clean_environment_and_where_they_do_not_apply():
    from torchneck.diagnose.rules.config import SlowSettings

    clean = {"torch": "2.13.0", "torch_debug_build": False, "settings_at_end": {"slow_env": {}, "torch_logs": None}}
    assert SlowSettings().check(facts(env=clean)) == []
    cpu_only = {"settings_at_end": {"slow_env": {"CUDA_LAUNCH_BLOCKING": "1"}}}  # no GPU: launches cost nothing
    assert SlowSettings().check(facts(env=cpu_only, analysis=analysis())) == []


def test_a_real_run_with_debug_switches_left_on(tmp_path):
    """CUDA_LAUNCH_BLOCKING means nothing on a CPU run; TORCH_LOGS is flagged; the environment
    summary heads the report."""
    from conftest import SCRIPTS, read_report, torchneck

    r = torchneck("run", "--out", str(tmp_path / "run"), str(SCRIPTS / "tiny_ops_steps.py"),
                  env={"TORCH_LOGS": "recompiles", "CUDA_LAUNCH_BLOCKING": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(tmp_path / "run")
    settings = [f for f in report["findings"] if f["kind"] == "slow_setting"]
    assert [f["evidence"]["setting"] for f in settings] == ["TORCH_LOGS"]
    assert "Environment:" in r.stdout and "torch " in r.stdout.split("Environment:")[1].splitlines()[0]


def _kinds(**ladders):
    return {kind: [{"size": size, "op": kind, "seconds_at_threads": t, "seconds_at_cores": t / s, "slowdown": s}
                   for size, (t, s) in zip(("small", "large"), ladder)] for kind, ladder in ladders.items()}


@fires("thread_oversubscription")
def test_thread_oversubscription_costs_each_op_its_kind_s_slowdown_at_its_size():
    """A convolution's backward, a mid-sized matmul and an element-wise op each lose what the
    probe measured for their kind at their time per call (log-interpolated between its sizes,
    held at the ends); the one big matmul's slowdown would have understated all three."""
    ops = [OpRow(name="aten::convolution_backward", count=10, self_us=80_000.0, total_us=80_000.0, mean_us=8000.0),
           OpRow(name="aten::mm", count=100, self_us=10_000.0, total_us=10_000.0, mean_us=100.0),
           OpRow(name="aten::gelu", count=100, self_us=5_000.0, total_us=5_000.0, mean_us=50.0)]
    env = _env(8, 1.1)
    env["settings_at_end"]["thread_probe"]["kinds"] = _kinds(
        conv=[(0.001, 10.0), (0.004, 4.0)],  # 8 ms a call: beyond the large one, its 4x
        matmul=[(0.00001, 5.0), (0.001, 1.0)],  # 0.1 ms: half-way in log time, 3x
        elementwise=[(0.0001, 2.0), (0.001, 1.5)])  # 0.05 ms: under the small one, its 2x
    [f] = ThreadOversubscription().check(facts(analysis=analysis(by_name=ops), env=env, call_sites=SITES))
    lost = 0.08 * (1 - 1 / 4) + 0.01 * (1 - 1 / 3) + 0.005 * (1 - 1 / 2)
    assert abs(f.time_lost_s - lost) < 1e-9 and f"{0.095 / (0.095 - lost):.2f}x slower" in f.title
    assert f.severity == "high" and f.confidence == "measured"


def test_thread_oversubscription_no_cost_when_every_kind_ran_as_fast():
    """More threads than cores, but no kind slower with them (a machine whose OpenMP threads
    sleep): the setting is reported, `low`, with no time lost."""
    env = _env(8, 1.0)
    env["settings_at_end"]["thread_probe"]["kinds"] = _kinds(matmul=[(0.0001, 0.9), (0.001, 1.0)])
    [f] = ThreadOversubscription().check(facts(analysis=analysis(by_name=OPS), env=env, call_sites=SITES))
    assert f.severity == "low" and f.time_lost_s == 0.0 and "no slowdown measured" in f.title


def test_thread_probe_times_each_kind_of_op_at_two_sizes_and_leaves_grad_mode_alone():
    import torch

    from torchneck.capture.thread_probe import SIZES, probe_oversubscription

    before = torch.get_num_threads()
    p = probe_oversubscription(before + 1, before)
    torch.set_num_threads(before)
    assert torch.is_grad_enabled() and set(p["kinds"]) == {"matmul", "conv", "elementwise"}
    for ladder in p["kinds"].values():
        assert [e["size"] for e in ladder] == list(SIZES) and all(e["seconds_at_cores"] > 0 for e in ladder)
    assert p["slowdown"] == p["kinds"]["matmul"][-1]["slowdown"]


def test_anomaly_detection_explains_the_per_op_overhead_measured_while_it_is_on():
    """A Trainer that leaves anomaly mode on: the tiny-op loop's overhead holds the stack captures
    made inside its forward ops and the NaN checks after each backward node."""
    from torchneck.model.findings import Finding

    cause = Finding(kind="anomaly_detection", title="", time_lost_s=0.05, time_lost_pct=50.0, fix="",
                    evidence={"stack_capture_share": 0.45, "nan_check_share": 0.05})
    tiny = Finding(kind="dispatch_overhead", title="", time_lost_s=0.035, time_lost_pct=35.0, fix="")
    why = AnomalyDetection().explained(cause, tiny, facts(analysis=analysis(window_us=100_000.0)))
    assert why is not None and abs(why.seconds - 0.035) < 1e-12
    off = Finding(kind="anomaly_detection", title="", time_lost_s=0.0, time_lost_pct=0.0, fix="", evidence={})
    assert AnomalyDetection().explained(off, tiny, facts(analysis=analysis())) is None
