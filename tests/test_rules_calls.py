"""How the program calls its model: per sample instead of per batch, or on the whole prefix
again for every generated token (diagnose/rules/calls.py)."""

import json

import pytest
from conftest import SCRIPTS, planted_line, read_report, torchneck
from rule_cases import analysis, facts, fires, silent

from torchneck.capture.call_inputs import SiteInputs, content_fingerprint, padded_past_longest
from torchneck.diagnose.padding import fixed_length_lines, pads_to_max_length
from torchneck.diagnose.rules.calls import PaddingWaste, UnbatchedCalls, UncachedGeneration, sampled_under
from torchneck.diagnose.rules.repeats import RepeatedCall
from torchneck.model.analysis import OpRow

SERVER = '''import torch
def handle(model, feats):
    return torch.cat([model(f[None]) for f in feats])
def handle_batched(model, feats):
    return model(feats)
'''


def _site(path, line, function, calls, **tally):
    return {"file": str(path), "line": line, "function": function, "calls": calls, **tally}


def _python(path, line, share, sampled_s=10.0):
    """A steady state of `sampled_s` whose stacks held `path:line` for `share` of it."""
    inclusive = [{"file": str(path), "line": line, "function": "f", "total_s": share * sampled_s}]
    return {"window": {"sampled_s": sampled_s, "lines": [], "inclusive_lines": inclusive}}


def _ops(work_us, window_us=100_000.0):
    a = analysis(window_us=window_us, by_name=[OpRow(name="aten::addmm", count=100, self_us=work_us,
                                                     total_us=work_us, mean_us=work_us / 100)])
    a.ops.dispatch.floor_op_us = 0.0
    return a


@fires("unbatched_calls")
def test_unbatched_calls_of_an_evaluation_loader_of_one_after_training(run_dir):
    """Training ticks the step clock (the module hooks then go), then an evaluation sweep over
    DataLoaders of batch_size=1 runs the model per sample: the loader's record and the sampled
    loop name the batch size's line, the loader, the loop and the model call."""
    script = SCRIPTS / "eval_batch_of_one.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "unbatched_calls" and [w["line"] for w in top["where"]] == [planted_line(script), 32, 24, 25]
    assert top["evidence"]["loader_at"] == 32 and "batch size (line 30" in top["fix"]


def _loader_facts(src, batch_size, sample_elements=32):
    loader = {"what": "dataloader", "file": str(src), "line": 5, "function": "<module>", "batch_size": batch_size,
              "sample_elements": sample_elements}
    lines = [{"file": str(src), "line": 2, "function": "evaluate", "total_s": 2.0, "self_s": 0.0,
              "library": "_BaseDataLoaderIter.__next__ (dataloader.py)"},
             {"file": str(src), "line": 3, "function": "evaluate", "total_s": 6.0, "self_s": 0.1,
              "library": "Module._wrapped_call_impl (module.py)"}]
    return facts(analysis=_ops(10_000.0), call_sites=[loader], python={"window": {"sampled_s": 10.0, "lines": lines}})


@silent("unbatched_calls")
def test_unbatched_calls_silent_for_a_loader_of_batches_or_of_large_samples(tmp_path):
    src = tmp_path / "ev.py"
    src.write_text("def evaluate(loader):\n    for xb in loader:\n        model(xb)\nbs = 1\n"
                   "loader = DataLoader(ds, batch_size=bs)\nevaluate(loader)\n")
    [f] = UnbatchedCalls().check(_loader_facts(src, 1))  # the loop: 80 % of the time, 10 % of it arithmetic
    assert [w.line for w in f.where] == [4, 5, 2, 3] and abs(f.evidence["share_kept"] - 0.1) < 1e-9
    assert UnbatchedCalls().check(_loader_facts(src, 32)) == []
    assert UnbatchedCalls().check(_loader_facts(src, 1, sample_elements=3 * 512 * 512)) == []
    # the loop iterates a loader of batches; the loader of one (line 5) is another, never iterated here
    src = tmp_path / "train.py"  # (sources are read once per file)
    src.write_text("def train(loader):\n    for xb in loader:\n        model(xb)\ntrain_loader = DataLoader(ds, 64)\n"
                   "loader = DataLoader(ds, batch_size=1)\ntrain(train_loader)\n")
    assert UnbatchedCalls().check(_loader_facts(src, 1)) == []


@fires("unbatched_calls")
def test_unbatched_calls_at_a_comprehension_calling_the_model_per_row(tmp_path):
    """Every call at the comprehension's line takes one row: the calls' sampled time, less the
    ops' arithmetic a batched call still does, is the saving."""
    src = tmp_path / "server.py"
    src.write_text(SERVER)
    clock = {"kind": "module", "top_module_sites": [_site(src, 3, "handle.<locals>.<listcomp>", 5000,
                                                         batch_of_one=5000, grew_by_one=0)]}
    [f] = UnbatchedCalls().check(facts(analysis=_ops(10_000.0), python=_python(src, 3, 0.8), clock=clock))
    assert f.where[0].line == 3 and "once per sample" in f.title and "5,000 calls" in f.title
    assert abs(f.time_lost_pct - 100 * 0.8 * 0.9) < 1e-9 and "torch.stack" in f.fix
    assert f.evidence["calls_share"] == 0.8 and abs(f.evidence["work_share"] - 0.1) < 1e-12
    # those products take one row by a matrix each ([1, 256] x [256, 2048]): batched, the matrix is
    # read once for all rows, so they are not the work a batched call keeps; a batch's product is
    a = _ops(10_000.0)
    a.ops.by_shape = [OpRow(name="aten::addmm", count=100, self_us=8_000.0, total_us=8_000.0, mean_us=80.0,
                            shapes="[[2048], [1, 256], [256, 2048], [], []]")]
    [f] = UnbatchedCalls().check(facts(analysis=a, python=_python(src, 3, 0.8), clock=clock))
    assert abs(f.evidence["work_share"] - 0.02) < 1e-12 and abs(f.time_lost_pct - 100 * 0.8 * 0.98) < 1e-9
    a.ops.by_shape[0].shapes = "[[2048], [64, 256], [256, 2048], [], []]"
    [f] = UnbatchedCalls().check(facts(analysis=a, python=_python(src, 3, 0.8), clock=clock))
    assert abs(f.evidence["work_share"] - 0.1) < 1e-12


@silent("unbatched_calls")
def test_unbatched_calls_silent_for_batches_a_single_call_or_few_calls(tmp_path):
    src = tmp_path / "server.py"
    src.write_text(SERVER)
    python = _python(src, 5, 0.8)
    batched = {"top_module_sites": [_site(src, 5, "handle_batched", 5000, batch_of_one=3)]}
    assert UnbatchedCalls().check(facts(analysis=_ops(1.0), python=python, clock=batched)) == []
    not_a_loop = {"top_module_sites": [_site(src, 5, "handle_batched", 5000, batch_of_one=5000)]}  # a request each
    assert UnbatchedCalls().check(facts(analysis=_ops(1.0), python=python, clock=not_a_loop)) == []
    few = {"top_module_sites": [_site(src, 3, "handle.<locals>.<listcomp>", 50, batch_of_one=50)]}
    assert UnbatchedCalls().check(facts(analysis=_ops(1.0), python=_python(src, 3, 0.8), clock=few)) == []
    frames = {"top_module_sites": [_site(src, 3, "handle.<locals>.<listcomp>", 5000, batch_of_one=5000,
                                         single_mean_elements=512 * 512)]}  # a video frame per call: work-bound
    assert UnbatchedCalls().check(facts(analysis=_ops(1.0), python=_python(src, 3, 0.8), clock=frames)) == []
    arithmetic = {"top_module_sites": [_site(src, 3, "handle.<locals>.<listcomp>", 5000, batch_of_one=5000)]}
    assert UnbatchedCalls().check(facts(analysis=_ops(95_000.0), python=_python(src, 3, 0.8),
                                        clock=arithmetic)) == []  # the calls are big: batching keeps their work


@fires("uncached_generation")
def test_uncached_generation_when_each_call_feeds_the_prefix_one_token_longer():
    clock = {"kind": "module", "top_module_sites": [_site("/x/gen.py", 40, "generate", 170, batch_of_one=0,
                                                         grew_by_one=169, grown_mean_len=100.0)]}
    [f] = UncachedGeneration().check(facts(analysis=_ops(80_000.0), python=_python("/x/gen.py", 40, 0.9),
                                           clock=clock))
    assert f.where[0].line == 40 and "recompute the whole prefix" in f.title and "100 on average" in f.title
    assert abs(f.time_lost_pct - 100 * 0.9 * 0.8 * 0.99) < 1e-9 and "past_key_values" in f.fix


@silent("uncached_generation")
def test_uncached_generation_silent_for_a_cache_or_a_loop_over_prompts():
    python = _python("/x/gen.py", 40, 0.9)
    cached = {"top_module_sites": [_site("/x/gen.py", 40, "generate", 170, grew_by_one=0)]}
    assert UncachedGeneration().check(facts(analysis=_ops(80_000.0), python=python, clock=cached)) == []
    prompts = {"top_module_sites": [_site("/x/gen.py", 40, "generate", 170, grew_by_one=40, grown_mean_len=50.0)]}
    assert UncachedGeneration().check(facts(analysis=_ops(80_000.0), python=python, clock=prompts)) == []
    short = {"top_module_sites": [_site("/x/gen.py", 40, "generate", 20, grew_by_one=19, grown_mean_len=4.0)]}
    assert UncachedGeneration().check(facts(analysis=_ops(80_000.0), python=python, clock=short)) == []


def test_sampled_under_a_line_from_older_runs_follows_the_callers():
    """Runs recorded before `inclusive_lines`: the lines whose sampled callers name the site."""
    lines = [{"file": "/x/s.py", "line": 9, "total_s": 6.0, "callers": [{"file": "/x/s.py", "line": 3, "share": 1.0}]},
             {"file": "/x/s.py", "line": 3, "total_s": 1.0},
             {"file": "/x/s.py", "line": 20, "total_s": 3.0}]
    assert sampled_under(facts(python={"window": {"sampled_s": 10.0, "lines": lines}}), "/x/s.py", 3) == 0.7


def test_a_server_calling_its_model_per_request_and_a_generation_loop_are_found(run_dir, tmp_path):
    """Real runs: per-sample calls in a comprehension, and a prefix fed again for every token; the
    capture tallies the calls' inputs at the line that makes them."""
    script = SCRIPTS / "per_sample_calls.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "unbatched_calls" and top["where"][0]["line"] == planted_line(script)
    [site] = [s for s in json.loads((run_dir / "run.json").read_text())["clock"]["top_module_sites"]
              if s["line"] == planted_line(script)]
    assert site["batch_of_one"] == site["calls"] >= 4000
    script = SCRIPTS / "uncached_generation.py"
    r = torchneck("run", "--quiet", "--out", str(tmp_path / "gen"), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(tmp_path / "gen")["findings"][0]
    assert top["kind"] == "uncached_generation" and top["where"][0]["line"] == planted_line(script)


@fires("repeated_call")
def test_repeated_call_names_the_line_passing_the_same_input_again():
    """The corpus tensor, unchanged, is encoded at every request: the line passing it (the
    caller of the helper holding the model call) is where its embeddings can be kept."""
    origin = {"file": "/x/search.py", "line": 63, "function": "Service.search", "calls": 39}
    clock = {"kind": "module", "top_module_sites": [_site("/x/search.py", 55, "Service.embed", 80, repeated=39,
                                                         repeated_from=[origin])]}
    [f] = RepeatedCall().check(facts(analysis=_ops(1_000.0), python=_python("/x/search.py", 63, 0.85), clock=clock))
    assert [w.line for w in f.where] == [63, 55] and "39 model calls" in f.title
    assert abs(f.time_lost_pct - 85.0 * 39 / 40) < 1e-9 and "Compute it once" in f.fix  # its first encoding stays
    chunks = dict(clock["top_module_sites"][0], calls=72, repeated=64, repeated_inputs=8)  # 8 chunks, 9 times
    [f] = RepeatedCall().check(facts(analysis=_ops(1_000.0), python=_python("/x/search.py", 63, 0.9),
                                     clock=dict(clock, top_module_sites=[chunks])))
    assert abs(f.time_lost_pct - 90.0 * 64 / 72) < 1e-9
    # nearly every call repeats, but 25 distinct inputs come back (a gallery embedded again per
    # query): not a benchmark timing one input
    gallery = dict(clock["top_module_sites"][0], calls=100, repeated=99, repeated_inputs=25)
    [f] = RepeatedCall().check(facts(analysis=_ops(1_000.0), python=_python("/x/search.py", 63, 0.9),
                                     clock=dict(clock, top_module_sites=[gallery])))
    assert f.evidence["matching_calls"] == 99


@silent("repeated_call")
def test_repeated_call_silent_when_training_or_rare():
    origin = {"file": "/x/t.py", "line": 9, "function": "f", "calls": 50}
    site = _site("/x/t.py", 5, "f", 100, repeated=50, repeated_from=[origin])
    python = _python("/x/t.py", 9, 0.8)
    training = {"kind": "optimizer", "top_module_sites": [site]}  # the weights change between calls
    assert RepeatedCall().check(facts(analysis=_ops(1.0), python=python, clock=training)) == []
    rare = {"kind": "module", "top_module_sites": [dict(site, repeated=3)]}
    assert RepeatedCall().check(facts(analysis=_ops(1.0), python=python, clock=rare)) == []
    benchmark = {"kind": "module", "top_module_sites": [dict(site, repeated=99)]}  # one input timed again and again
    assert RepeatedCall().check(facts(analysis=_ops(1.0), python=python, clock=benchmark)) == []


def test_a_corpus_encoded_again_for_every_query_is_found(run_dir):
    """A real run: the module hook sees the same corpus tensor, unchanged, at every query."""
    script = SCRIPTS / "repeated_corpus.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "repeated_call" and top["where"][0]["line"] == planted_line(script), top
    [site] = json.loads((run_dir / "run.json").read_text())["clock"]["top_module_sites"]
    assert site["repeated"] >= 50 and site["repeated_from"][0]["line"] == planted_line(script)


COLLATE = '''import torch
MAX_LEN = 256
def collate(batch, pad_to_max=True):
    longest = max(len(s) for s in batch)
    pad_len = MAX_LEN if pad_to_max else longest
    ids = torch.full((len(batch), pad_len), 0)
    return ids
def train(model, loader):
    for ids in loader:
        loss = model(ids).sum()
        loss.backward()
'''


def _padded_site(path, padded=20, looked=20, length=256.0, needed=64.0):
    return _site(path, 10, "train", 20, padded=padded, padding_looked=looked, padded_mean_len=length,
                 needed_mean_len=needed)


@fires("padding_waste")
def test_padding_waste_names_where_the_fixed_length_is_chosen(tmp_path):
    """Batches of 256 positions whose longest row needs 64: the forward and backward lines'
    sampled time, times the ops' arithmetic share, times the 75 % no row needed; the length's
    assignment and the buffer's line (found in the source by the padded length's value) first."""
    src = tmp_path / "train.py"
    src.write_text(COLLATE)
    python = {"window": {"sampled_s": 10.0, "lines": [], "inclusive_lines": [
        {"file": str(src), "line": 10, "function": "train", "total_s": 3.0},
        {"file": str(src), "line": 11, "function": "train", "total_s": 6.0}]}}
    clock = {"kind": "optimizer", "top_module_sites": [_padded_site(src)]}
    [f] = PaddingWaste().check(facts(analysis=_ops(80_000.0), python=python, clock=clock))
    assert [w.line for w in f.where] == [5, 6, 10] and f.where[0].function == "collate"
    assert abs(f.time_lost_pct - 100 * 0.9 * 0.8 * 0.75) < 1e-6
    assert "padded to 256 positions" in f.title and "longest sequence needs 64" in f.title
    assert "padding=\"longest\"" in f.fix and f.evidence["backward_share"] == 0.6


def test_padding_costs_attention_s_ops_its_square(tmp_path):
    """Half the arithmetic in attention's ops (scores `[256, d] x [d, 256]`, their softmax over
    `[.., 256, 256]`), half in linear layers: the longest rows need a quarter of the 256 positions,
    so the linear half keeps a quarter of its time and attention's a sixteenth."""
    src = tmp_path / "train.py"
    src.write_text(COLLATE)
    python = {"window": {"sampled_s": 10.0, "lines": [], "inclusive_lines": [
        {"file": str(src), "line": 10, "function": "train", "total_s": 10.0}]}}
    rows = [("aten::bmm", "[[128, 256, 32], [128, 32, 256]]", 20_000.0),
            ("aten::_softmax", "[[32, 4, 256, 256], [], []]", 20_000.0),
            ("aten::addmm", "[[384], [8192, 128], [128, 384], [], []]", 40_000.0)]
    a = analysis(window_us=100_000.0, by_name=[OpRow(name=n, count=10, self_us=us, total_us=us, mean_us=us / 10)
                                               for n, _, us in rows],
                 by_shape=[OpRow(name=n, count=10, self_us=us, total_us=us, mean_us=us / 10, shapes=s)
                           for n, s, us in rows])
    a.ops.dispatch.floor_op_us = 0.0
    site = _padded_site(src, needed=64.0)
    [f] = PaddingWaste().check(facts(analysis=a, python=python, clock={"top_module_sites": [site]}))
    assert f.evidence["length_squared_share"] == pytest.approx(0.5)
    assert f.time_lost_pct == pytest.approx(100 * 0.8 * (0.5 * (1 - 1 / 16) + 0.5 * 0.75))


@silent("padding_waste")
def test_padding_waste_silent_for_batches_padded_to_their_longest_or_rarely(tmp_path):
    src = tmp_path / "train.py"
    src.write_text(COLLATE)
    python = _python(src, 10, 0.9)
    for site in (_padded_site(src, padded=0, length=0.0, needed=0.0),  # padded to the longest row
                 _padded_site(src, padded=2),  # a last short batch
                 _padded_site(src, padded=8, looked=40),  # most batches need their length
                 _padded_site(src, length=256.0, needed=230.0)):  # close to the length needed
        clock = {"kind": "optimizer", "top_module_sites": [site]}
        assert PaddingWaste().check(facts(analysis=_ops(80_000.0), python=python, clock=clock)) == []


def test_padding_is_read_from_ids_and_masks_without_running_torch_ops():
    """Right- and left-padded ids, masks of either polarity, strided views; a mask with no padding,
    rows ending differently and float inputs are not padding. Reading records no profiler event."""
    import torch
    from torch.profiler import profile

    ids = torch.zeros(4, 256, dtype=torch.long)
    ids[0, :40], ids[1, :90] = 3, 5
    inputs = (ids, ids == 0, ids != 0, ids.flip(1), ids[:, :120], ids[::2])
    with profile() as prof:
        found = [padded_past_longest(t) for t in inputs]
    assert found == [(256, 90), (256, 90), (256, 90), (256, 90), (120, 90), (256, 40)]
    assert list(prof.events()) == []
    assert padded_past_longest(torch.ones(4, 256, dtype=torch.long)) is None
    assert padded_past_longest(torch.randint(1, 9, (4, 256))) is None
    assert padded_past_longest(torch.randn(4, 256)) is None and padded_past_longest(ids[:, :4]) is None
    tally = SiteInputs()
    for _ in range(3):
        tally.note_padding([torch.randn(4, 8), ids, ids == 0])
    assert tally.to_json()["padded"] == 3 and tally.to_json()["needed_mean_len"] == 90.0


def test_a_call_with_a_batch_of_one_is_told_by_its_batch_dimension_or_by_one_bag():
    """`model(x[None])`, and `model(ids, offsets)` with the offsets of one bag (an EmbeddingBag's
    flat input, a request at a time), are per-sample calls; a flat input with many offsets, a
    batch with a (1,) timestep beside it, and a 1-D first input alone are not."""
    import torch

    def ones(*calls):
        tally = SiteInputs()
        for first, *others in calls:
            tally.note(first, None, others)
        return tally.to_json()["batch_of_one"]

    ids, one, many = torch.arange(12), torch.zeros(1, dtype=torch.long), torch.tensor([0, 4, 9])
    assert ones((torch.randn(1, 8),), (ids, one), (ids, one)) == 3
    assert ones((ids, many), (torch.randn(4, 3, 8, 8), torch.tensor([5])), (ids,)) == 0


def test_batches_padded_to_the_maximum_length_are_found(run_dir):
    """A real run: a collate function pads every batch to MAX_LEN; the finding names the line
    that sets the length, and the capture's tally of the encoder's inputs."""
    script = SCRIPTS / "padded_batches.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "padding_waste" and top["where"][0]["line"] == planted_line(script)
    assert top["evidence"]["padded_length"] == 128.0 and top["evidence"]["longest_length"] <= 30


def test_a_server_s_worker_thread_is_profiled_and_its_padding_found(run_dir):
    """The model runs only in a worker thread started before the profiled window (the profiler
    records every thread's ops), and pads to a length given as the server's keyword setting
    (`Server(..., max_len=384)`, then `width = self.max_len`): that line is named first."""
    script = SCRIPTS / "padding_server.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    report = read_report(run_dir)
    top = report["findings"][0]
    assert top["kind"] == "padding_waste" and [w["line"] for w in top["where"]][:2] == [planted_line(script), 17]
    assert top["evidence"]["padded_length"] == 384.0 and report["ranks"][0]["ops"]["main_thread"]["ops"] > 50


def test_the_padded_length_is_found_through_the_setting_that_gives_it(tmp_path):
    """The length's value reaches the padding line as a keyword argument, a parameter's default
    or a command-line option's default; `len(batch)` in the buffer's size is the batch, not a
    length, and a line taking the longest row sets nothing."""
    src = tmp_path / "serve.py"
    src.write_text("""import torch
class Enc:
    def __init__(self, max_len):
        self.max_len = max_len
    def encode(self, batch):
        seqs = [s[: self.max_len] for s in batch]
        width = self.max_len
        return torch.full((len(seqs), width), 0)
def collate(batch, pad_to=96):
    return torch.zeros(len(batch), pad_to)
def longest(batch):
    width = max(len(s) for s in batch)
    return torch.zeros(len(batch), width)
def main(ap):
    ap.add_argument("--seq-len", type=int, default=160)
    args = ap.parse_args()
    enc = Enc(max_len=128)
    return torch.zeros(4, args.seq_len), enc
""")
    assert fixed_length_lines(str(src), 128) == [7, 8]
    assert fixed_length_lines(str(src), 96) == [10]
    assert fixed_length_lines(str(src), 160) == [18]
    assert fixed_length_lines(str(src), 64) == []
    other = tmp_path / "loader.py"  # a setting of another kind with the same value sets no length
    other.write_text("import torch\nloader = DataLoader(ds, batch_size=64)\n"
                     "def collate(batch, batch_size):\n    longest = max(len(s) for s in batch)\n"
                     "    return torch.zeros(batch_size, longest)\n")
    assert fixed_length_lines(str(other), 64) == []
    named = tmp_path / "named.py"  # the default is a module constant of that value
    named.write_text("import torch\nMAX_LEN = 512\nclass Tok:\n    def __init__(self, max_len=MAX_LEN):\n"
                     "        self.max_len = max_len\n    def pad(self, seqs, to_max=True):\n"
                     "        width = self.max_len if to_max else max(len(s) for s in seqs)\n"
                     "        return torch.full((len(seqs), width), 0)\n")
    assert fixed_length_lines(str(named), 512) == [7, 8]
    config = tmp_path / "config.py"  # a config class's field: `args.max_length` read by the collator
    config.write_text("import torch\nfrom dataclasses import dataclass\n@dataclass\nclass Args:\n"
                      "    max_length: int = 160\n    batch_size: int = 160\nclass Collate:\n"
                      "    def __init__(self, max_length):\n        self.max_length = max_length\n"
                      "    def __call__(self, rows):\n        target = self.max_length\n"
                      "        return torch.full((len(rows), target), 0)\n")
    assert fixed_length_lines(str(config), 160) == [11, 12]


def test_a_tokenizer_asked_to_pad_to_the_maximum_length_even_as_one_branch_of_a_choice(tmp_path):
    src = tmp_path / "hf.py"
    src.write_text("c1 = Collator(tok, padding='max_length')\n"
                   "c2 = Collator(tok, padding='longest' if fast else 'max_length')\n"
                   "c3 = Collator(tok, padding='longest')\nc4 = tok(texts, pad_to_max_length=False)\n")
    assert pads_to_max_length(str(src)) == [1, 2]
    named = tmp_path / "named.py"  # the choice made in a name the call passes
    named.write_text("padding = 'longest' if fast else 'max_length'\nbatch = tok(texts, padding=padding)\n"
                     "other = 'longest'\nb2 = tok(texts, padding=other)\n")
    assert pads_to_max_length(str(named)) == [1]


def test_an_input_rebuilt_from_the_same_constant_counts_as_repeated():
    """A catalog's features concatenated with its ids at every request (under inference_mode:
    no version counter) are new tensors of the same content: their sampled elements tell; other
    content, small inputs and inputs of too few distinct values (zeros) are not fingerprinted."""
    import torch

    features = torch.randn(5000, 16)
    tally = SiteInputs()
    with torch.inference_mode():
        for _ in range(4):
            tally.note(torch.cat([features, torch.arange(5000.0)[:, None]], dim=1), None)
    assert tally.repeated == 3 and tally.repeated_inputs == 1
    assert content_fingerprint(features) == content_fingerprint(features.clone())
    assert content_fingerprint(features) != content_fingerprint(torch.randn(5000, 16))
    assert content_fingerprint(torch.randn(8, 8)) is None and content_fingerprint(torch.zeros(100, 100)) is None


@fires("repeated_call")
def test_repeated_call_of_every_request_beside_the_request_s_own_calls():
    """Every call at the catalog's line repeats its input, but another line calls the model on
    each request's own input: the repeats are a constant part of each request, not a benchmark."""
    origin = {"file": "/x/reco.py", "line": 54, "function": "Service.catalog", "calls": 299}
    sites = [_site("/x/reco.py", 35, "Model.encode_items", 300, repeated=299, repeated_from=[origin]),
             _site("/x/reco.py", 38, "Model.encode_user", 300, repeated=0)]
    clock = {"kind": "module", "top_module_sites": sites}
    [f] = RepeatedCall().check(facts(analysis=_ops(1_000.0), python=_python("/x/reco.py", 54, 0.9), clock=clock))
    assert [w.line for w in f.where] == [54, 35]
    alone = {"kind": "module", "top_module_sites": sites[:1]}  # one input timed again and again
    assert RepeatedCall().check(facts(analysis=_ops(1_000.0), python=_python("/x/reco.py", 54, 0.9),
                                      clock=alone)) == []


def test_a_compiled_model_called_again_on_the_same_corpus_is_found(run_dir):
    """A real run: torch.compile takes the module hooks away; the compiled module's call, which
    torchneck wraps to tick the module clock, notes its line and inputs the same way."""
    script = SCRIPTS / "compiled_repeated.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "repeated_call" and top["where"][0]["line"] == planted_line(script)
    [site] = [s for s in json.loads((run_dir / "run.json").read_text())["clock"]["top_module_sites"]
              if s["line"] == planted_line(script)]
    assert site["calls"] == 40 and site["repeated"] == 39 and site["repeated_inputs"] == 1


POLICY = '''import torch
class Policy(torch.nn.Module):
    def act(self, obs):
        return self(obs).argmax(-1)
def rollout(policy, obs):
    return torch.cat([policy.act(obs[i:i + 1]) for i in range(len(obs))])
'''


@fires("unbatched_calls")
def test_unbatched_calls_made_through_a_helper_called_per_row(tmp_path):
    """`self(obs)` inside `act`, called once per environment from a comprehension: the
    comprehension's line (the sampled caller) is the loop to change, then the call."""
    src = tmp_path / "rl.py"
    src.write_text(POLICY)
    site = _site(src, 4, "Policy.act", 7000, batch_of_one=7000)
    caller = {"file": str(src), "line": 6, "function": "rollout.<locals>.<listcomp>", "share": 1.0}
    python = {"window": {"sampled_s": 10.0, "lines": [{"file": str(src), "line": 4, "function": "Policy.act",
                                                        "total_s": 8.0, "callers": [caller]}],
                         "inclusive_lines": [{"file": str(src), "line": 6, "function": "rollout", "total_s": 9.0}]}}
    [f] = UnbatchedCalls().check(facts(analysis=_ops(10_000.0), python=python,
                                       clock={"kind": "optimizer", "top_module_sites": [site]}))
    assert [w.line for w in f.where] == [6, 4] and abs(f.time_lost_pct - 100 * 0.9 * 0.9) < 1e-9


def test_repeated_call_saving_is_at_most_the_model_call_line_s_time():
    """The origin (a sweep's evaluate() call) also makes other model calls (test-time flips at
    another line): only the repeating line's own time, times its repeated share, goes."""
    origin = {"file": "/x/sweep.py", "line": 101, "function": "main", "calls": 24}
    site = _site("/x/sweep.py", 68, "evaluate", 48, repeated=24, repeated_inputs=24, repeated_from=[origin])
    others = _site("/x/sweep.py", 70, "evaluate", 48, repeated=0)
    inclusive = [{"file": "/x/sweep.py", "line": 101, "function": "main", "total_s": 9.6},
                 {"file": "/x/sweep.py", "line": 68, "function": "evaluate", "total_s": 4.0}]
    python = {"window": {"sampled_s": 10.0, "lines": [], "inclusive_lines": inclusive}}
    [f] = RepeatedCall().check(facts(analysis=_ops(1_000.0), python=python,
                                     clock={"kind": "module", "top_module_sites": [site, others]}))
    assert abs(f.time_lost_pct - 100 * 0.4 * 24 / 48) < 1e-9


def test_padding_of_the_calls_that_recompute_their_prefix_folds_under_the_missing_cache():
    """An LM server padding each step's whole sequence (unseen round 12): with a KV cache each call
    takes the new token alone, so the padded prefix goes with the recomputation; padding at
    another line stays a finding of its own."""
    from torchneck.diagnose.rule import Explanation
    from torchneck.diagnose.rules.calls import UncachedGeneration
    from torchneck.model.findings import Finding, Where

    site = Where(file="/x/lm.py", line=128, function="generate")
    cause = Finding(kind="uncached_generation", title="t", time_lost_s=0.7, time_lost_pct=70.0, fix="f",
                    where=[site])
    padded = Finding(kind="padding_waste", title="t", time_lost_s=0.3, time_lost_pct=30.0, fix="f",
                     where=[Where(file="/x/lm.py", line=40, function="pad"), site])
    assert UncachedGeneration().explained(cause, padded, facts()) == Explanation(0.3)
    padded.where = [Where(file="/x/lm.py", line=40, function="pad"), Where(file="/x/lm.py", line=90, function="score")]
    assert UncachedGeneration().explained(cause, padded, facts()) is None
