"""The user's own Python: lines that compute or wait outside torch ops."""

from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.rules.python import PythonHotspot


def _window(*lines, sampled_s=1.0):
    return {"window": {"sampled_s": sampled_s, "lines": list(lines)}, "loading": {"lines": []}}


def _line(line, total_s, self_s, waiting_s=0.0, library=""):
    return {"file": "/x/t.py", "line": line, "function": "step", "total_s": total_s, "self_s": self_s,
            "outside_ops_s": total_s, "waiting_s": waiting_s, "library": library}


@fires("python_hotspot")
def test_python_hotspot_computing_and_waiting_lines_get_different_fixes():
    python = _window(_line(12, 0.4, 0.4), _line(20, 0.3, 0.0, waiting_s=0.28, library="time.sleep (<built-in>)"))
    computes, waits = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=python))
    assert computes.where[0].line == 12 and "40% of each step in Python" in computes.title
    assert "vectorised" in computes.fix and abs(computes.time_lost_s - 0.4) < 1e-12
    assert waits.where[0].line == 20 and "waits in time.sleep 30%" in waits.title and "Overlap" in waits.fix
    assert waits.evidence["waits"] is True and waits.docs.endswith("#multi-process-data-loading")


@silent("python_hotspot")
def test_a_dispatcher_waiting_on_workers_that_call_the_model_is_not_the_finding():
    """u_image_server: the main thread submits requests to a thread pool and blocks in
    Semaphore.acquire until a worker finishes one (53 % of the run): the workers' model calls
    (their lines, their findings) are the time; without worker model calls the wait is named."""
    wait = dict(_line(211, 0.5, 0.0, waiting_s=0.5, library="Semaphore.acquire (threading.py)"),
                waits_on_thread=True)
    python = _window(wait)
    workers = {"thread_module_calls": 1515, "thread_module_sites": [{"file": "/x/t.py", "line": 153}]}
    assert PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=python, clock=workers)) == []
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=python))
    assert f.evidence["waits"] is True and f.where[0].line == 211


@silent("python_hotspot")
def test_python_hotspot_silent_for_small_lines_and_the_loader_s_own():
    small = _window(_line(12, 0.05, 0.05))  # 5 % < 10 %
    assert PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=small)) == []
    loading = _window(_line(12, 0.4, 0.4))
    loading["loading"] = {"lines": [{"file": "/x/t.py", "line": 12, "total_s": 0.4}]}  # input_pipeline's
    assert PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=loading)) == []


@fires("python_hotspot")
def test_python_hotspot_counts_torch_python_the_line_asked_for_and_says_what_to_do():
    """Formatting a tensor calls torch's Python (Tensor.__repr__): that is the line's work, not the
    model's machinery; a module call's Python is per-op overhead the op rules measure."""
    fmt = _line(40, 0.5, 0.1, library="Tensor.__repr__ (_tensor.py)")
    fmt["library_is_torch"] = True
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(fmt)))
    assert f.where[0].line == 40 and "format tensors" in f.fix.lower().replace("formatting", "format")
    save = dict(fmt, library="save (serialization.py)")
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(save)))
    assert "every N steps" in f.fix


@silent("python_hotspot")
def test_python_hotspot_silent_for_torch_s_own_machinery():
    call = _line(17, 0.5, 0.1, library="Module._wrapped_call_impl (module.py)")
    call["library_is_torch"] = True
    back = dict(call, line=18, library="Tensor.backward (_tensor.py)")
    assert PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(call, back))) == []



LOOP_SCRIPT = """\
import numpy as np
def confusion(pred, target):
    conf = np.zeros((10, 10), dtype=np.int64)
    for p, t in zip(pred, target):
        conf[t.item(), p.item()] += 1
    total = conf.sum()
    return conf / total
"""


@fires("python_hotspot")
def test_python_hotspot_a_hot_loop_and_its_body_are_one_finding(tmp_path):
    """Iterating a tensor element by element (the `for` line: a 0-d tensor per element) and the
    per-element work in its body are one problem, replaced together: one finding at the loop,
    naming the body's line, costing both. A hot line after the loop stays a finding of its own."""
    script = tmp_path / "metrics.py"
    script.write_text(LOOP_SCRIPT)

    def line(n, total_s):
        return dict(_line(n, total_s, 0.0, library="Tensor.__iter__ (_tensor.py)"), file=str(script))

    python = _window(line(4, 0.5), line(5, 0.15), line(6, 0.2))
    loop, after = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=python))
    assert [w.line for w in loop.where] == [4, 5] and "the loop at line 4" in loop.title
    assert abs(loop.time_lost_s - 0.65) < 1e-12 and [w.line for w in after.where] == [6]
    cold_header = _window(line(4, 0.05), line(5, 0.3))  # the body's own work, the loop line not hot
    [body] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=cold_header))
    assert [w.line for w in body.where] == [5]
    # the `for` line's time inside torch ops: iterating the tensors (a select per element) holds a
    # tenth of the window itself, though little of it is Python: the loop is still one finding
    iterating = [{"op": "aten::select", "file": str(script), "line": 4, "function": "confusion",
                  "self_us": 150_000.0, "count": 8192}]
    [loop] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=cold_header,
                                         ops_by_line=iterating))
    assert [w.line for w in loop.where] == [4, 5] and abs(loop.time_lost_s - 0.35) < 1e-12


CHECKPOINT_SCRIPT = """\
import os, torch
def save_checkpoint(path, state):
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
def main(model):
    for step in range(300):
        x = torch.randn(4, 4)
        y = model(x)
        if (step + 1) % 1 == 0:
            save_checkpoint("ck.pt", model.state_dict())
main(None)
"""


def _at(path, line, function, total_s, library="", callers=(), waiting_s=0.0):
    return {"file": str(path), "line": line, "function": function, "total_s": total_s, "self_s": total_s,
            "outside_ops_s": total_s, "waiting_s": waiting_s, "library": library, "callers": list(callers)}


@fires("python_hotspot")
def test_python_hotspot_a_helper_s_lines_under_one_call_are_one_finding_at_its_frequency(tmp_path):
    """torch.save then os.replace in a save_checkpoint() called every step: one call's cost (77 %),
    not two findings that split it; done too often, so the `if` that says how often is named."""
    script = tmp_path / "ckpt.py"
    script.write_text(CHECKPOINT_SCRIPT)
    callers = [{"file": str(script), "line": 10, "function": "main"}, {"file": str(script), "line": 11,
                                                                        "function": "<module>"}]
    replace = _at(script, 4, "save_checkpoint", 0.42, "PurePath.__fspath__ (pathlib.py)", callers, waiting_s=0.33)
    save = _at(script, 3, "save_checkpoint", 0.35, "save (serialization.py)", callers)
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(replace, save)))
    assert [w.line for w in f.where] == [4, 3, 10, 9, 11]  # the helper, its call, the `if` above it
    assert abs(f.time_lost_s - 0.77) < 1e-12 and "less often" in f.fix and "in save" in f.title


@fires("python_hotspot")
def test_python_hotspot_names_the_setting_of_how_often_a_trainer_saves(tmp_path):
    """`if self.save_every and step % self.save_every == 0: self.save()` in a Trainer built with
    `Trainer(save_every=8)`: after the `if`, the line giving the setting its number (where "less
    often" is written); the assignment from the parameter names no number and is left out."""
    script = tmp_path / "trainer.py"
    script.write_text("import torch\nclass Trainer:\n    def __init__(self, save_every):\n"
                      "        self.save_every = save_every\n"
                      "    def save(self):\n        torch.save(self.state, 'last.pt')\n"  # 6
                      "    def fit(self):\n        for step in range(100):\n"
                      "            if self.save_every and step % self.save_every == 0:\n"  # 9
                      "                self.save()\n"  # 10
                      "Trainer(save_every=8).fit()\n")  # 11
    callers = [{"file": str(script), "line": 10, "function": "Trainer.fit"}]
    save = _at(script, 6, "Trainer.save", 0.6, "save (serialization.py)", callers)
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(save)))
    assert [w.line for w in f.where][:4] == [6, 10, 9, 11]  # the save, its call, the `if`, the setting


@fires("python_hotspot")
def test_python_hotspot_lines_of_a_loop_in_one_function_stay_apart(tmp_path):
    """main() runs the steps: its hot lines are problems of their own, though one call holds them."""
    script = tmp_path / "ckpt.py"
    script.write_text(CHECKPOINT_SCRIPT)
    callers = [{"file": str(script), "line": 11, "function": "<module>"}]
    data = _at(script, 7, "main", 0.3, callers=callers)
    fmt = _at(script, 8, "main", 0.2, callers=callers)
    found = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(data, fmt)))
    assert [f.where[0].line for f in found] == [7, 8]
    assert all(9 not in [w.line for w in f.where] for f in found)  # not done too often: no `if` named


@fires("python_hotspot")
def test_python_hotspot_a_call_made_too_often_saves_its_ops_too():
    """Formatting a tensor runs torch ops (select, item...) inside Tensor.__repr__: not formatting it
    removes them with the Python, so the saving is the line's whole time. A computing line keeps
    its ops after the fix (vectorised): only its time outside them is saved."""
    fmt = dict(_line(40, 0.6, 0.01, library="Tensor.__repr__ (_tensor.py)"), outside_ops_s=0.3,
               library_is_torch=True)
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(fmt)))
    assert abs(f.time_lost_s - 0.6) < 1e-9 and "whole" in PythonHotspot.saving_basis
    loop = dict(_line(12, 0.6, 0.3), outside_ops_s=0.3)
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(loop)))
    assert abs(f.time_lost_s - 0.3) < 1e-9


@fires("python_hotspot")
def test_python_hotspot_one_finding_for_a_comprehension_and_its_statement(tmp_path):
    """Before Python 3.12 a comprehension runs in a frame of its own: its samples and those of the
    statement holding it are one line of code, one finding under the enclosing function's name;
    building a tensor from nested lists there gets the fix that says so."""
    src = tmp_path / "pipe.py"
    src.write_text("import torch\ndef batched(buf):\n"
                   "    return torch.tensor([[list(r) for r in w] for w in buf])\n")
    comp = dict(_line(3, 0.3, 0.3), file=str(src), function="batched.<locals>.<listcomp>.<listcomp>")
    stmt = dict(_line(3, 0.1, 0.05), file=str(src), function="batched")
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(comp, stmt)))
    assert f.title.startswith("batched() spends 40% of each step") and f.where[0].line == 3
    assert f.evidence["from_lists"] is True and "torch.from_numpy(np.stack(arrays))" in f.fix


@fires("python_hotspot")
def test_python_hotspot_a_helper_loading_the_model_per_chunk_is_changed_where_it_is_called(tmp_path):
    """`model = load_model(path)` inside the loop over chunks: torch.load is the hot line, but the
    helper also builds the model and initialises its weights (ops, not Python): everything under
    the call goes when it is made once, and the call leads the finding."""
    src = tmp_path / "infer.py"
    src.write_text("import torch\ndef load_model(p):\n    m = Net()\n    m.load_state_dict(torch.load(p))\n"
                   "    return m\nfor chunk in chunks:\n    model = load_model(ckpt)\n    model(chunk)\n")
    hot = dict(_line(4, 0.3, 0.01, library="load (serialization.py)"), file=str(src), function="load_model",
               callers=[{"file": str(src), "line": 7, "function": "<module>", "share": 1.0}])
    python = _window(hot)
    python["window"]["inclusive_lines"] = [{"file": str(src), "line": 7, "function": "<module>", "total_s": 0.7}]
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=python))
    assert f.evidence["called_at"] == 7 and [w.line for w in f.where][:2] == [7, 4]
    assert abs(f.time_lost_s - 0.7) < 1e-9 and f.fix.startswith("Load the checkpoint")
    assert f.title.startswith("load_model(), called at line 7, takes 70% of each step")


@fires("python_hotspot")
def test_python_hotspot_a_broadcast_product_is_a_matmul_whatever_the_samples_say(tmp_path):
    """Samples outside the profiled window cannot tell ops from Python: a line summing a broadcast
    product is a matrix product done element-wise, its whole time the fix's."""
    src = tmp_path / "ev.py"
    src.write_text("def ev(q, g):\n    return (q[:, None] * g[None]).sum(-1)\n")
    line = dict(_line(2, 0.6, 0.1), file=str(src), function="ev", outside_ops_s=0.4)
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(line)))
    assert f.evidence["broadcast_product"] and "a @ b.T" in f.fix and abs(f.time_lost_s - 0.6) < 1e-9
    assert "sums a broadcast product at line 2" in f.title


INDEX_SCRIPT = """\
import torch
def main(batches):
    index = torch.empty(0, 8)
    for batch in batches:
        index = torch.cat([index, batch])
    torch.save(index, "index.pt")
main([])
"""


def test_python_hotspot_a_save_after_the_loop_is_not_work_asked_too_often(tmp_path):
    """The loop's lines and a `torch.save` after it are one call of main(): the save runs once,
    so the finding costs the Python outside ops, not the loop body's ops as work asked too often."""
    script = tmp_path / "index.py"
    script.write_text(INDEX_SCRIPT)
    caller = [{"file": str(script), "line": 7, "function": "<module>", "share": 1.0}]
    lines = [dict(_at(script, 5, "main", 4.0, callers=caller), outside_ops_s=0.1),
             _at(script, 4, "main", 0.8, callers=caller),
             _at(script, 6, "main", 0.1, library="save (serialization.py)", callers=caller)]
    python = {"window": {"sampled_s": 5.0, "lines": lines}}
    found = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=python))
    loop = next(f for f in found if f.where[0].line == 4)
    assert loop.time_lost_s < 0.25 and "save" not in loop.title


@fires("python_hotspot")
def test_python_hotspot_lines_of_a_loop_over_elements_are_one_finding(tmp_path):
    """A metric callback reading `target[i].item()` and `logp[i, t].item()` on two lines of a
    `for i in range(target.shape[0])`, whose `for` line spends nothing of its own: one loop to
    replace, its busiest line first (unseen round 12's Trainer); a step loop's lines stay apart
    (`test_python_hotspot_lines_of_a_loop_in_one_function_stay_apart`)."""
    script = tmp_path / "metrics.py"
    script.write_text("def on_batch_end(cm, nll, target, pred, logp):\n"
                      "    for i in range(target.shape[0]):\n"
                      "        t, p = target[i].item(), pred[i].item()\n"
                      "        cm[t, p] += 1\n"
                      "        nll[t] -= logp[i, t].item()\n")
    reads = _at(script, 3, "on_batch_end", 0.2)
    update = _at(script, 5, "on_batch_end", 0.5)
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(reads, update)))
    assert [w.line for w in f.where] == [5, 2, 3] and "the loop at line 2" in f.title
    assert abs(f.time_lost_s - 0.7) < 1e-9  # both lines' time


@fires("python_hotspot")
def test_python_hotspot_a_helper_called_per_batch_is_one_finding_with_its_loops(tmp_path):
    """A helper building a table row by row for every batch, then converting it: its loop lines
    and its conversion are one call's cost (a step loop's lines stay apart:
    `test_python_hotspot_lines_of_a_loop_in_one_function_stay_apart`)."""
    script = tmp_path / "basis.py"
    script.write_text("import torch\ndef basis(n):\n    rows = []\n    for t in range(n):\n"
                      "        rows.append([t, t * t])\n    return torch.tensor(rows)\n"
                      "for batch in range(100):\n    X = basis(500)\n")
    callers = [{"file": str(script), "line": 8, "function": "<module>"}]
    convert = _at(script, 6, "basis", 0.4, callers=callers)
    append = _at(script, 5, "basis", 0.3, callers=callers)
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(convert, append)))
    assert [w.line for w in f.where][:3] == [6, 5, 8] and abs(f.time_lost_s - 0.7) < 1e-9


def test_a_loop_issuing_ops_element_by_element_explains_the_tiny_ops_and_their_backward():
    """A PINN's residual takes `autograd.grad` per collocation point in a loop: the tiny ops are
    the loop's (and their backward's, at the `.backward()` line the per-op finding leads with);
    a loop issuing few ops, none of the symptom's lines, or a per-op finding leading with the
    loop's own line (that loop's per-op cost, the zoo's dispatch_overhead), explains nothing."""
    from torchneck.model.findings import Finding, Where

    def at(*lines):
        return [Where(file="/x/pinn.py", line=n, function="f") for n in lines]

    loop = Finding(kind="python_hotspot", title="", time_lost_s=4.0, time_lost_pct=60.0, fix="", severity="high",
                   where=at(55, 53, 54), evidence={"element_ops_per_step": 2304.0})
    tiny = Finding(kind="dispatch_overhead", title="", time_lost_s=3.0, time_lost_pct=50.0, fix="",
                   severity="high", where=at(88, 55, 54))
    assert PythonHotspot().explained(loop, tiny, facts()) is not None
    few = Finding(**{**{f: getattr(loop, f) for f in ("kind", "title", "time_lost_s", "time_lost_pct", "fix",
                                                      "severity", "where")}, "evidence": {"element_ops_per_step": 8.0}})
    assert PythonHotspot().explained(few, tiny, facts()) is None
    elsewhere = Finding(kind="dispatch_overhead", title="", time_lost_s=3.0, time_lost_pct=50.0, fix="",
                        severity="high", where=at(88, 12))
    assert PythonHotspot().explained(loop, elsewhere, facts()) is None
    own = Finding(kind="dispatch_overhead", title="", time_lost_s=3.0, time_lost_pct=50.0, fix="",
                  severity="high", where=at(55, 54))  # the loop's own per-op cost: a cause of its own
    assert PythonHotspot().explained(loop, own, facts()) is None


@fires("python_hotspot")
def test_a_parametrized_weight_recomputed_at_every_access_is_named_with_its_registration(tmp_path):
    """u_beam_translate: a LoRA adapter registered as a parametrization of the embedding's weight
    is recomputed (W + B @ A) each time a decoding step reads the weight; at inference it can be
    merged once. The line reading it, then the line registering it."""
    src = tmp_path / "model.py"
    src.write_text("from torch.nn.utils import parametrize\n"
                   "def add_lora(module, lora):\n"
                   "    parametrize.register_parametrization(module, 'weight', lora)\n"
                   "def step(self, feed):\n"
                   "    return F.linear(feed, self.embed.weight, self.out_bias)\n")
    hot = dict(_line(5, 0.4, 0.05, library="_inject_property.<locals>.get_parametrized (parametrize.py)"),
               file=str(src), outside_ops_s=0.3)
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(hot)))
    assert [w.line for w in f.where] == [5, 3] and "remove_parametrizations" in f.fix and "cached()" in f.fix
    assert abs(f.time_lost_s - 0.4) < 1e-9 and "recomputed on every read: the rebuilds take 40%" in f.title
    # the same weight also rebuilt under other lines' module calls (a tied embedding's lookup): all of it goes
    python = _window(hot)
    python["window"]["parametrized_s"] = 0.8
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=python))
    assert abs(f.time_lost_s - 0.8) < 1e-9 and "the rebuilds take 80%" in f.title


@fires("python_hotspot")
def test_garbage_collected_in_a_loop_is_named_with_its_fix(tmp_path):
    """v_ddpm_sampler: `gc.collect()` on every snapshot of a sampling loop. The sampler sees no
    frame of a C function: the source names it, and the fix is to collect less, not to vectorise."""
    src = tmp_path / "ddpm.py"
    src.write_text("import gc\ndef release():\n    gc.collect()\nfor i in range(9):\n    release()\n")
    hot = dict(_line(3, 0.4, 0.4), file=str(src), function="release")
    [f] = PythonHotspot().check(facts(analysis=analysis(window_us=1e6), python=_window(hot)))
    assert f.evidence["calls_into"] == "gc.collect (gc)" and "gc.collect()" in f.fix and "vectorised" not in f.fix
    assert "in gc.collect" in f.title
