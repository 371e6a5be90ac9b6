"""torchneck measures a compiled program without changing what torch.compile does to it."""

import json
import os
import subprocess
import sys

from conftest import SCRIPTS, read_report, torchneck


def _dynamo(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("DYNAMO "))
    return json.loads(line[len("DYNAMO "):])


def test_same_frames_graphs_breaks_and_recompiles_with_and_without_torchneck(run_dir):
    """A compiled model with a graph break, trained with an optimizer, and a compiled function
    recompiled for new shapes. Under torchneck, dynamo used to compile torchneck's own module
    hook (`_module_pre`, 3 frames more than bare: 8 instead of 5) and torch warned the hooks
    would "fire an extra time". Now the frames, the graphs (each one's op count, from a recording
    backend), breaks, recompiles and dynamo's counters equal a plain python run's."""
    script = SCRIPTS / "compiled_break_counts.py"
    bare = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert bare.returncode == 0, bare.stderr[-3000:]
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _dynamo(r.stdout) == _dynamo(bare.stdout)
    assert _dynamo(bare.stdout)["frames"]["total"] == 5 and len(_dynamo(bare.stdout)["graphs"]) == 5
    assert "fire an extra time" not in r.stderr
    compiled = json.loads((run_dir / "compile.json").read_text())
    started = [rec["stack"][-1]["function"] for rec in compiled["records"] if rec["type"] == "dynamo_start"]
    assert started[:2] == ["forward", "torch_dynamo_resume_in_forward_at_27"]
    assert not any("torchneck" in (rec["stack"][-1].get("file") or "")
                   for rec in compiled["records"] if rec["type"] == "dynamo_start")
    report = read_report(run_dir)
    assert report["run"]["phases"]["clock"] == "optimizer" and report["capture"]["plan"] == "steps"
    # AOT autograd traced the backward under detect_anomaly: torch's, not a setting of the script's
    assert "anomaly_detection" not in [f["kind"] for f in report["findings"]]
    assert report["compile"]["present"]
