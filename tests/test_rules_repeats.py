"""repeated_rows: a model input whose rows are mostly copies of a few (a request's features copied
to each candidate before the tower), computed once per copy (diagnose/rules/repeats.py; the
capture's tally in capture/call_inputs.py)."""

import pytest
from conftest import SCRIPTS, planted_line, read_report, torchneck
from rule_cases import facts, fires, silent

from torchneck.capture.call_inputs import ROWS_LOOKS_KEPT, SiteInputs, distinct_row_share
from torchneck.diagnose.rules.repeats import RepeatedRows, rows_repeated_at

COLLATE = """\
import torch
def collate(users, items, counts):
    row_of = torch.repeat_interleave(torch.arange(len(users)), counts)
    users = users[row_of]
    return users, items
def score(model, users, items, counts):
    return model(*collate(users, items, counts))
def tiled(model, q, docs):
    return model(torch.cat([q.expand(len(docs), -1), docs], 1))
"""


def _facts(src, distinct=0.004, looked=8, share=0.8, line=7):
    site = {"file": str(src), "line": line, "function": "score", "calls": 40, "rows_looked": looked,
            "rows_mean": 19_000, "distinct_rows_share": distinct, "repeated_rows_argument": 0}
    python = {"window": {"sampled_s": 10.0, "inclusive_lines": [
        {"file": str(src), "line": line, "total_s": 10.0 * share}]}}
    from rule_cases import analysis
    return facts(analysis=analysis(window_us=1_000_000.0), python=python, clock={"top_module_sites": [site]})


@fires("repeated_rows")
def test_a_model_input_of_copied_rows_is_found_at_the_line_copying_them(tmp_path):
    """19,000 rows of which 0.4 % distinct under a call taking 80 % of the steady state: nearly
    all of it computes copies. The line indexing by the `repeat_interleave` leads, then the call."""
    src = tmp_path / "serve.py"
    src.write_text(COLLATE)
    [f] = RepeatedRows().check(_facts(src))
    assert [w.line for w in f.where] == [4, 7] and f.evidence["repeated_at"] == 4
    assert f.time_lost_s == pytest.approx(0.8 * 0.996) and f.severity == "high" and f.confidence == "upper_bound"
    assert "distinct rows before repeating" in f.fix and "line 4" in f.fix
    # a query expanded to every document before the model: the expanding line
    assert rows_repeated_at(str(src), 9) == 9


@silent("repeated_rows")
def test_repeated_rows_silent_when_most_rows_differ_or_cost_little(tmp_path):
    src = tmp_path / "serve.py"
    src.write_text(COLLATE)
    assert RepeatedRows().check(_facts(src, distinct=0.8)) == []  # most rows are distinct
    assert RepeatedRows().check(_facts(src, looked=2)) == []  # two odd batches
    assert RepeatedRows().check(_facts(src, share=0.05)) == []  # the calls cost little
    plain = tmp_path / "plain.py"
    plain.write_text("def score(model, x):\n    return model(x)\n")
    assert rows_repeated_at(str(plain), 2) is None


def test_distinct_rows_are_counted_without_a_torch_op_and_a_few_calls_a_line():
    import torch

    rows = torch.randint(0, 1000, (64, 50))[torch.repeat_interleave(torch.arange(64), 300)]
    assert distinct_row_share(rows) == (19_200, pytest.approx(64 / 19_200))
    assert distinct_row_share(torch.randn(1000, 8).repeat(2, 1)) == (2000, 0.5)  # tiled copies too
    assert distinct_row_share(torch.randn(20_000, 16))[1] == 1.0
    assert distinct_row_share(torch.randn(100, 16)) is None  # too few rows to matter
    assert distinct_row_share(torch.randn(300)) is None  # ids: repeats are what ids are for
    with torch.inference_mode():
        assert distinct_row_share(torch.zeros(300, 4))[1] == pytest.approx(1 / 300)
    tally, other = SiteInputs(), torch.randn(300, 4)
    with torch.profiler.profile() as prof:
        for _ in range(ROWS_LOOKS_KEPT + 4):
            tally.calls += 1
            tally.note_rows([(0, other), ("users", rows)])
    assert not prof.events()
    got = tally.to_json()
    assert got["rows_looked"] == ROWS_LOOKS_KEPT and got["repeated_rows_argument"] == "users"
    assert got["distinct_rows_share"] == pytest.approx(64 / 19_200, abs=1e-4) and got["rows_mean"] == 19_200


@fires("repeated_rows")
def test_a_scorer_given_each_user_once_per_candidate(run_dir):
    """A real run without a step loop: the module hooks read the distinct rows of the scorer's
    input, the source names the line copying them."""
    script = SCRIPTS / "rows_repeated_ranker.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "repeated_rows" and [w["line"] for w in top["where"]][:1] == [planted_line(script)], top
    assert top["evidence"]["rows"] == 3200 and top["evidence"]["distinct_share"] == pytest.approx(1 / 200, abs=1e-3)


def test_of_two_frames_on_one_line_the_heavier_names_the_callers():
    """h_photo_matcher: `embed_all`'s list comprehension (0.34 s, called from the gallery's line
    94) and `embed_all` itself (a few samples, called from the queries' line 120) share line 76;
    the call path goes up from the one that took the time."""
    from torchneck.model.findings import Where

    lines = [{"file": "m.py", "line": 76, "function": "embed_all.<locals>.<listcomp>", "total_s": 0.34,
              "callers": [{"file": "m.py", "line": 94, "function": "GalleryIndex.embeddings"}]},
             {"file": "m.py", "line": 76, "function": "embed_all", "total_s": 0.01,
              "callers": [{"file": "m.py", "line": 120, "function": "main"}]}]
    f = facts(python={"window": {"sampled_s": 1.0, "lines": lines}})
    assert [w.line for w in f.with_callers([Where(file="m.py", line=76, function="embed_all")])] == [76, 94]
