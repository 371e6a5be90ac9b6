"""ignored_positions: targets the loss skips (-100), computed anyway by the output head
(diagnose/rules/ignored.py; the capture's tally in capture/call_inputs.py)."""

import pytest
from conftest import SCRIPTS, planted_line, read_report, torchneck
from rule_cases import analysis, facts, fires, silent

from torchneck.capture.call_inputs import SiteInputs, ignored_share
from torchneck.diagnose.rules.ignored import IgnoredPositions, loss_input_assigned_at
from torchneck.model.analysis import OpRow

MLM = """\
import torch.nn.functional as F
def forward(self, ids, labels):
    hidden = self.encoder(self.embed(ids))
    logits = self.head(hidden)
    loss = F.cross_entropy(
        logits.view(-1, self.vocab), labels.reshape(-1), ignore_index=-100)
    return loss
"""


def _row(name, shapes, self_us):
    return OpRow(name=name, count=10, self_us=self_us, total_us=self_us, mean_us=self_us / 10, shapes=shapes)


def _facts(src, ignored=0.85, looked=4, vocab=16000):
    rows = [_row("aten::mm", f"[[2048, 128], [128, {vocab}]]", 30_000.0),
            _row("aten::_log_softmax", f"[[2048, {vocab}], [], []]", 20_000.0),
            _row("aten::mm", "[[2048, 128], [128, 384]]", 10_000.0)]
    by_line = [{"op": "aten::_log_softmax", "file": str(src), "line": 6, "function": "forward", "self_us": 20_000.0}]
    site = {"file": "/x/engine.py", "line": 79, "function": "Trainer.step", "calls": 4, "ignored_looked": looked,
            "ignored_mean_share": ignored}
    return facts(analysis=analysis(window_us=100_000.0, by_shape=rows), ops_by_line=by_line,
                 clock={"top_module_sites": [site]})


@fires("ignored_positions")
def test_a_head_over_every_position_of_a_masked_lm_is_found_at_the_line_making_the_logits(tmp_path):
    """85 % of the targets are -100; the ops on 16,000-wide tensors (the head's product, the
    log-softmax) take half the window: 85 % of that goes when the head runs on the kept
    positions. The line making the loss's input leads, then the loss, then the model call."""
    src = tmp_path / "model.py"
    src.write_text(MLM)
    [f] = IgnoredPositions().check(_facts(src))
    assert f.kind == "ignored_positions" and [w.line for w in f.where] == [4, 6, 79]
    assert f.evidence["classes"] == 16000 and f.evidence["head_share"] == pytest.approx(0.5)
    assert f.time_lost_s == pytest.approx(0.5 * 0.85 * 0.1) and "labels != -100" in f.fix and "line 4" in f.fix
    assert loss_input_assigned_at(str(src), 6) == 4 and loss_input_assigned_at(str(src), 3) is None


@silent("ignored_positions")
def test_ignored_positions_silent_when_most_targets_count_or_the_head_is_narrow(tmp_path):
    src = tmp_path / "model.py"
    src.write_text(MLM)
    assert IgnoredPositions().check(_facts(src, ignored=0.3)) == []  # most positions carry a target
    assert IgnoredPositions().check(_facts(src, looked=2)) == []  # a check, not the training
    assert IgnoredPositions().check(_facts(src, vocab=10)) == []  # ten classes: a cheap head


def test_targets_set_to_the_ignore_index_are_counted_without_a_torch_op():
    import torch

    labels = torch.full((4, 32), -100)
    labels[:, :8] = 7
    assert ignored_share(labels) == pytest.approx(0.75)
    assert ignored_share(torch.zeros(4, 32, dtype=torch.bool)) == 0.0  # a mask, not targets
    assert ignored_share(torch.full((4, 32), -100.0)) == 0.0  # floats are not targets
    tally, ids = SiteInputs(), torch.randint(0, 9, (4, 32))
    with torch.profiler.profile() as prof:
        tally.note_padding([ids, labels])
    assert not prof.events()
    assert (tally.to_json()["ignored_looked"], tally.to_json()["ignored_mean_share"]) == (1, 0.75)


@fires("ignored_positions")
def test_a_masked_lm_trained_with_its_head_over_every_position(run_dir):
    """A real run: the capture tallies the labels the model is called with, the trace gives the
    vocabulary's width; the line making the logits leads."""
    script = SCRIPTS / "mlm_all_positions.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "ignored_positions" and top["where"][0]["line"] == planted_line(script), top
    assert top["evidence"]["classes"] == 8000 and 0.8 < top["evidence"]["ignored_share"] < 0.9
