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


@fires("repeated_call")
def test_a_cache_smaller_than_the_inputs_that_come_back_is_named_with_the_workers_time(tmp_path):
    """u_image_server: a Handler memoises predictions with `functools.lru_cache()` (128 results)
    while 200 images come back in turn: each is evicted before it is asked again, and a worker
    thread's model call recomputes it (1,312 of 1,515 calls). The main thread waits on the pool
    for half the run: the workers' share is of the time it did not wait."""
    from torchneck.diagnose.rules.repeats import RepeatedCall, undersized_cache

    src = tmp_path / "server.py"
    src.write_text("import functools\n"
                   "class Handler:\n"
                   "    def __init__(self, model):\n"
                   "        self._classify = functools.lru_cache()(self._classify_body)\n"
                   "    def _classify_body(self, body):\n"
                   "        return self.model(decode(body))\n"
                   "    def handle(self, req):\n"
                   "        return self._classify(req.body)\n"
                   "@functools.lru_cache(maxsize=4096)\n"
                   "def tokenize(s):\n    return s\n")
    path = str(src)
    assert undersized_cache([path], 200) == (path, 4, 128) and undersized_cache([path], 100) is None
    site = {"file": path, "line": 6, "function": "Handler._classify_body", "calls": 1515, "repeated": 1312,
            "repeated_inputs": 200, "repeated_from": [{"file": path, "line": 8, "function": "Handler.handle",
                                                       "calls": 1312}]}
    lines = [{"file": "/x/load.py", "line": 211, "function": "run_load", "total_s": 4.0, "waits_on_thread": True}]
    inclusive = [{"file": path, "line": 8, "total_s": 3.0}, {"file": path, "line": 6, "total_s": 2.0}]
    python = {"window": {"sampled_s": 8.0, "lines": lines, "inclusive_lines": inclusive}}
    clock = {"kind": "module", "thread_module_calls": 1515, "thread_module_sites": [site]}
    from rule_cases import analysis
    [f] = RepeatedCall().check(facts(analysis=analysis(window_us=1e6), python=python, clock=clock))
    assert [w.line for w in f.where][:3] == [4, 8, 6] and "lru_cache at line 4 keeps 128" in f.fix
    # the handler's whole miss (3 s of the 4 s not waited), not the model call's 2 s alone
    assert f.time_lost_pct == pytest.approx(100 * 3.0 / 4.0 * 1312 / 1512)
