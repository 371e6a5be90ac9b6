"""The autograd probe (capture/autograd_probe.py): which model call it keeps, and how it times it."""

import torch

from torchneck.capture import autograd_probe
from torchneck.capture.autograd_probe import RememberedCall


def _model():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()


def test_probe_times_the_call_in_both_modes_and_lets_it_go():
    model, x = _model(), torch.randn(8, 16)
    calls = RememberedCall()
    calls.remember(model, (x,), {}, 0.01)
    probe = calls.probe()
    assert probe["module"] == "Sequential" and probe["training"] is False and probe["device"] == "cpu"
    assert 2 <= probe["rounds"] <= autograd_probe.MAX_ROUNDS
    assert probe["inference_over_grad"] == probe["seconds_inference_mode"] / probe["seconds_with_grad"]
    assert not model.training and torch.is_grad_enabled()  # the model and the grad mode as they were
    assert calls.module() is None and calls.probe() is None  # the references are dropped


def test_probe_passes_the_call_s_keyword_arguments():
    seen = []

    class Masked(torch.nn.Module):
        def forward(self, x, *, mask):
            seen.append(mask)
            return x.masked_fill(mask, 0) * torch.ones(1, requires_grad=True)

    x, mask = torch.randn(4, 4), torch.rand(4, 4) > 0.5
    calls = RememberedCall()
    calls.remember(Masked(), (x,), {"mask": mask}, 0.01)
    assert "inference_over_grad" in calls.probe()
    assert seen and all(m is mask for m in seen)


def test_what_the_model_prints_when_probed_is_not_the_program_s_output(capsys):
    class Chatty(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            print("forward called")
            import sys
            print("debug", file=sys.stderr)
            return self.lin(x)

    calls = RememberedCall()
    calls.remember(Chatty(), (torch.randn(2, 4),), {}, 0.01)
    assert "inference_over_grad" in calls.probe()
    out, err = capsys.readouterr()
    assert out == "" and err == ""


def test_a_short_call_of_another_module_rarely_replaces_the_kept_one():
    """Kept with probability seconds / all the calls' seconds (its own random draw, seeded): an
    embedding's 1 ms beside the model's 1 s is not kept; the next model call of 1 s is kept with
    probability 1/2."""
    model, embed = _model(), torch.nn.Embedding(10, 16)
    calls = RememberedCall()
    calls.remember(model, (torch.randn(2, 16),), {}, 1.0)
    calls.remember(embed, (torch.tensor([1]),), {}, 0.001)
    assert calls.module() is model
    calls.forget()  # an optimizer step: the next call is kept, whatever its time
    calls.remember(embed, (torch.tensor([1]),), {}, 0.001)
    assert calls.module() is embed


def test_the_draw_follows_the_calls_time():
    """Over many calls, each is the kept one in proportion to its time: a module taking 3/4 of
    the calls' time is kept about 3/4 of the time."""
    big, small = _model(), _model()
    kept_big = 0
    for trial in range(400):
        calls = RememberedCall()
        calls._draw.seed(trial)
        for _ in range(10):
            calls.remember(big, (), {}, 0.3)
            calls.remember(small, (), {}, 0.1)
        kept_big += calls.module() is big
    assert 0.65 < kept_big / 400 < 0.85


def test_follow_keeps_the_remembered_module_s_calls_and_leaves_the_module_copyable():
    """Followed through its class's `__call__`, not hooks in the instance: `copy.deepcopy(model)`
    (an EMA's snapshot every step) and `torch.save(model)` copy the instance's hooks, and
    torchneck's could be neither copied nor pickled (an EMA program died under `torchneck run`)."""
    import copy
    import io

    model = _model()
    calls = RememberedCall()
    calls.remember(model, (torch.randn(2, 16),), {}, 0.01)
    calls.forget()
    assert calls.module() is None
    calls.remember(model, (torch.randn(2, 16),), {}, 0.01)
    calls.follow()
    assert not model._forward_hooks and not model._forward_pre_hooks
    calls.forget()
    x = torch.randn(3, 16)
    with torch.no_grad():
        model(x)  # built no graph: not kept
    assert calls.module() is None
    twin = copy.deepcopy(model)
    torch.save(model, io.BytesIO())
    twin(x)  # another instance of the class: passes straight on
    assert calls.module() is None
    model(x)
    assert calls.module() is model and calls._call[1][0] is x  # a reference to the call's input, not a copy
    calls.unfollow()
    assert "__call__" not in type(model).__dict__  # the class as it was


def test_no_result_for_a_slow_call_or_a_failing_one(monkeypatch):
    calls = RememberedCall()
    calls.remember(_model(), (torch.randn(2, 16),), {}, 0.01)
    monkeypatch.setattr(autograd_probe, "MAX_CALL_S", 0.0)
    assert "skipped" in calls.probe()
    calls.remember(_model(), (torch.randn(2, 7),), {}, 0.01)  # the wrong width: the call raises
    assert "error" in calls.probe()


def test_calls_since_the_last_optimizer_step_are_counted_with_their_graphs_fate():
    """Since the last step: the calls, those fed a tensor carrying a graph (a sampling loop on its
    own output), those whose graph a backward went through, and the line that made them; the
    probe's result carries them; an optimizer step starts the count again."""
    model = _model()
    calls = RememberedCall()

    def call(x):
        out = model(x)
        calls.remember(model, (x,), {}, 0.002, out)
        return out

    call(torch.randn(4, 16)).sum().backward()  # a training step's call...
    calls.forget()  # ...and its optimizer step
    x = torch.randn(4, 16)
    for _ in range(5):
        x = torch.nn.functional.pad(call(x), (0, 12))  # fed back: chained from the second call on
    call(torch.randn(4, 16)).sum().backward()  # a backward through this one's graph
    since = calls.since_last_step()
    assert since["calls"] == 6 and since["chained"] == 4 and since["backward_reached"] == 1
    assert abs(since["seconds"] - 0.012) < 1e-9
    [site] = since["sites"]
    assert site["file"] == __file__ and site["calls"] == 6 and site["function"].endswith("call")
    assert calls.probe()["since_last_step"]["calls"] == 6
    calls.forget()
    assert calls.since_last_step() == {"calls": 0, "seconds": 0.0, "chained": 0, "backward_reached": 0, "sites": []}
