"""Scripts that run their own profiler: under `torchneck run` they keep working and their own
output (key_averages rows, exported trace, ITT ranges) is what a plain `python` run gives.
Each case runs the real script twice, bare and under torchneck, in subprocesses."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from conftest import SCRIPTS, planted_line, read_report, torchneck


def _tagged(stdout: str, tag: str):
    lines = [ln for ln in stdout.splitlines() if ln.startswith(tag + " ")]
    assert lines, f"no {tag} line in:\n{stdout[-3000:]}"
    return json.loads(lines[-1][len(tag) + 1:])


def _plain(*args, env=None, cwd=None):
    r = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd,
                       env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def test_the_profiler_tutorial_runs_and_keeps_its_table(run_dir):
    """The tutorial's code verbatim: `torch.autograd.profiler.profile(with_stack=True,
    profile_memory=True)`, record_function labels, `key_averages(group_by_stack_n=5)`. It crashed
    with a segfault under torchneck (two profiler sessions at once) after its table had lost 45 of
    its 76 rows. Now: exit 0, the same 76 rows as plain python (torchneck's sampler paused and its
    hooks removed while that profiler records Python calls, the script's frames at the root of
    their stack), and the report built from the events that profiler recorded."""
    script = SCRIPTS / "profiler_tutorial.py"
    plain = _tagged(_plain(script).stdout, "ROWS")
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "MASK INDICES" in r.stdout and "Self CPU time total" in r.stdout
    rows = _tagged(r.stdout, "ROWS")
    assert len(plain) == 76 and rows == plain
    report = read_report(run_dir)
    capture = report["capture"]
    user = capture["user_profilers"][0]
    line = planted_line(script, "profiler.profile(with_stack=True")
    assert (user["kind"], user["line"], user["with_stack"]) == ("torch.autograd.profiler.profile", line, True)
    assert capture["trace_source"] == "script_events" and capture["window"]["events"] > 50
    assert capture["sampler"]["paused_s"] > 0
    said = f"runs its own profiler (torch.autograd.profiler.profile at profiler_tutorial.py:{line}"
    assert said in capture["summary"]
    names = {o["name"] for o in report["ranks"][0]["ops"]["by_name"]}
    assert "aten::addmm" in names


@pytest.mark.parametrize("mode", ["schedule", "plain"])
def test_torch_profiler_rows_and_exported_trace_are_unchanged(run_dir, tmp_path, mode):
    """torch.profiler.profile with a schedule and tensorboard_trace_handler (it starts while
    torchneck's window records: torchneck writes its window first), and without a schedule with
    export_chrome_trace: the same key_averages rows and the same events in the exported trace."""
    script = SCRIPTS / "profiler_own.py"
    (tmp_path / "bare").mkdir()
    (tmp_path / "under").mkdir()
    bare = _plain(script, mode, tmp_path / "bare").stdout
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script), mode, str(tmp_path / "under"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert _tagged(r.stdout, "ROWS") == _tagged(bare, "ROWS")
    trace = _tagged(r.stdout, "TRACE")
    assert trace == _tagged(bare, "TRACE") and dict(trace)["train_step"] >= 3
    capture = read_report(run_dir)["capture"]
    user = capture["user_profilers"][0]
    assert user["kind"] == "torch.profiler.profile" and user["schedule"] is (mode == "schedule")
    assert user["exports"] and all(p.startswith(str(tmp_path / "under")) for p in user["exports"])
    assert capture["plan"] == "steps" and capture["window"]["stopped_by"] == "user_profiler"
    assert capture["trace_source"] == "torchneck"


@pytest.fixture(scope="module")
def itt_collector(tmp_path_factory):
    """tests/scripts/itt_collector.c built into the library an ITT-aware tool (VTune) would load."""
    cc = shutil.which(os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0]) or shutil.which("cc")
    assert cc, "a C compiler is needed to build the test ITT collector"
    lib = tmp_path_factory.mktemp("itt") / "libcollector.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(SCRIPTS / "itt_collector.c")], check=True)
    return lib


def _itt_env(lib, out):
    return {"INTEL_LIBITTNOTIFY64": str(lib), "INTEL_ITTNOTIFY_GROUPS": "all", "ITT_TEST_OUT": str(out)}


def test_emit_itt_ranges_are_unchanged(run_dir, tmp_path, itt_collector):
    """The script's own `emit_itt` session (ranges for VTune around every op): torchneck steps
    aside, and the collector receives exactly the ranges a plain run sends."""
    script = SCRIPTS / "profiler_own.py"
    _plain(script, "itt", env=_itt_env(itt_collector, tmp_path / "bare.txt"))
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script), "itt",
                  env=_itt_env(itt_collector, tmp_path / "under.txt"))
    assert r.returncode == 0, r.stderr[-3000:]
    bare = (tmp_path / "bare.txt").read_text().splitlines()
    assert len(bare) > 200 and "begin train_step" in bare
    assert (tmp_path / "under.txt").read_text().splitlines() == bare
    user = read_report(run_dir)["capture"]["user_profilers"][0]
    assert user["kind"] == "torch.autograd.profiler.emit_itt"


def test_nvtx_flag_marks_steps_and_labels_for_vtune_on_cpu(run_dir, tmp_path, itt_collector):
    """`--nvtx` on a CPU machine: ITT ranges (what VTune shows) for every record_function label,
    and a marker at every step boundary of torchneck's step clock."""
    script = SCRIPTS / "tokenizer_loop.py"
    r = torchneck("run", "--quiet", "--nvtx", "--out", str(run_dir), str(script),
                  env=_itt_env(itt_collector, tmp_path / "itt.txt"))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = (tmp_path / "itt.txt").read_text().splitlines()
    steps = [ln for ln in lines if ln.startswith("begin torchneck step ")]
    assert {f"begin torchneck step {n}" for n in range(1, 21)} <= set(steps)
    assert lines.count("begin Optimizer.step#SGD.step") == 20
    assert lines.count("end ") == len([ln for ln in lines if ln.startswith("begin ")])  # balanced
    nvtx = read_report(run_dir)["capture"]["nvtx"]
    assert nvtx["backend"] == "itt" and nvtx["steps_marked"] >= 20 and nvtx["labels_marked"] >= 40
