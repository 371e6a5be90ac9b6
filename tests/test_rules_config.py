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
    assert f.severity == "info" and f.time_lost_s == 0.0  # within noise: the setting is reported, with no cost


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


@fires("anomaly_detection")
def test_anomaly_detection_left_on_at_the_line_that_turned_it_on():
    env = {"settings_at_end": {"anomaly_detection": True}}
    sites = [{"what": "anomaly_detection", "file": "/x/train.py", "line": 4, "function": "<module>"}]
    [f] = AnomalyDetection().check(facts(env=env, call_sites=sites))
    assert f.severity == "high" and f.where[0].line == 4 and "set_detect_anomaly" in f.fix


@silent("anomaly_detection")
def test_anomaly_detection_silent_when_off():
    assert AnomalyDetection().check(facts(env={"settings_at_end": {"anomaly_detection": False}})) == []


def _startup(startup_s):
    phases = {"phases": {"startup_s": startup_s, "window_s": 1.0}, "steady_step_s": 0.01}
    python = {"startup": {"lines": [{"file": "/x/t.py", "line": 1, "function": "<module>", "total_s": 1.5,
                                     "library": "import torch"}]}, "window": {"lines": [], "sampled_s": 0}}
    return facts(phases=phases, python=python)


@fires("one_time_cost")
def test_one_time_cost_is_info_with_the_lines_that_took_it():
    [f] = OneTimeCost().check(_startup(2.5))
    assert f.severity == "info" and f.time_lost_s == 2.5 and f.where[0].line == 1


@silent("one_time_cost")
def test_one_time_cost_silent_under_a_second():
    assert OneTimeCost().check(_startup(0.6)) == []
