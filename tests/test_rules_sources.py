"""Source readings added for programs of unseen round 12: the statement turning TF32 off, and
the parameters a call passes unchanged on every pass of its loop. Each on both sides."""

from torchneck.diagnose.idioms import chunk_size_setting, float64_conversions, invariant_call, keyword_line
from torchneck.diagnose.loop_invariants import invariant_parameters
from torchneck.diagnose.rules.gpu import _tf32_turned_off


def test_the_statements_turning_tf32_off(tmp_path):
    src = tmp_path / "train.py"
    src.write_text("import torch\n"
                   "torch.backends.cuda.matmul.allow_tf32 = args.fast\n"          # 2: a flag may be False
                   "torch.backends.cuda.matmul.allow_tf32 = True\n"               # 3: on
                   "torch.set_float32_matmul_precision('highest')\n"              # 4: off
                   "torch.set_float32_matmul_precision('high')\n"                 # 5: on
                   "torch.backends.cudnn.allow_tf32 = False\n")                   # 6: convolutions, not matmuls
    assert [ln for ln, _ in _tf32_turned_off(str(src))] == [2, 4]


def test_a_config_field_set_to_highest_precision_is_named_before_the_call_passing_it(tmp_path):
    """`set_float32_matmul_precision(cfg.matmul_precision)` turns TF32 off through a config
    class's field: the field's line is the one to change (an unseen GPU trainer, round 15)."""
    src = tmp_path / "trainer.py"
    src.write_text("import torch\nfrom dataclasses import dataclass\n@dataclass\nclass RunConfig:\n"
                   "    lr: float = 1e-3\n"
                   "    matmul_precision: str = 'high' if FAST else 'highest'\n"    # 6
                   "def configure(cfg):\n"
                   "    torch.set_float32_matmul_precision(cfg.matmul_precision)\n"  # 8
                   "    torch.set_float32_matmul_precision(cfg.other)\n")           # 9: a name, no "highest" seen
    assert [ln for ln, _ in _tf32_turned_off(str(src))] == [6, 8, 9]


def test_float64_conversions_keep_models_and_tensors_not_reductions(tmp_path):
    """A model or tensor converted to float64 and kept is the line to change; a metric's sum read
    in float64 (`(a == b).sum().double()`) makes one number and is not."""
    src = tmp_path / "score.py"
    src.write_text("import torch\n"
                   "model = model.to(DEVICE, dtype=torch.float32 if FIXED else torch.float64)\n"  # 2
                   "x = x.double()\n"                                                           # 3
                   "net.double().cuda()\n"                                                      # 4
                   "total += (pred == y).sum().double()\n"                                     # 5: a reduction
                   "acc = torch.stack([(a == b).sum().double(), logits.double().sum()])\n"    # 6: inside others
                   "y = y.to(torch.float32)\n")                                                # 7: float32
    assert float64_conversions(str(src)) == [2, 3, 4]


def test_a_chunk_size_of_one_set_in_a_config_class(tmp_path):
    """`for start in range(0, n, self.cfg.max_batch)` around the model call, `max_batch` a config
    field that can be 1: the field's line; a chunk of 64, or a loop without a step, names none."""
    src = tmp_path / "service.py"
    src.write_text("class Config:\n    max_batch: int = 64 if FAST else 1\n    chunk: int = 64\n"   # 2, 3
                   "def score(self, feats):\n"
                   "    for start in range(0, len(feats), self.cfg.max_batch):\n"
                   "        out = self.model(feats[start:start + self.cfg.max_batch])\n"                  # 6
                   "    for start in range(0, len(feats), self.cfg.chunk):\n"
                   "        out = self.model(feats[start:start + self.cfg.chunk])\n"                      # 8
                   "    for x in feats:\n        out = self.model(x)\n")                                 # 10
    assert chunk_size_setting(str(src), 6) == 2
    assert chunk_size_setting(str(src), 8) is None and chunk_size_setting(str(src), 10) is None


def test_the_line_turning_a_generators_cache_off(tmp_path):
    """The uncached call runs under `if self.use_cache:`: the line giving the flag something other
    than True is the one to change; a call under no cache flag names none."""
    from torchneck.diagnose.rules.calls import cache_switched_off

    src = tmp_path / "gen.py"
    src.write_text("class Generator:\n    def generate(self, tokens):\n        if self.use_cache:\n"
                   "            out = self.model(tokens[:, -1:], cache=self.cache)\n"
                   "        else:\n            out = self.model(tokens)\n"                      # 6
                   "        return self.model(tokens)\n"                                          # 7
                   "gen = Generator(model, use_cache=FIXED)\n")                                    # 8
    assert cache_switched_off(str(src), 6) == 8
    assert cache_switched_off(str(src), 7) is None


def test_the_num_workers_keyword_of_a_loader_built_over_several_lines(tmp_path):
    src = tmp_path / "loader.py"
    src.write_text("loader = DataLoader(\n    dataset,\n    batch_size=64,\n    num_workers=0,\n)\n"
                   "other = DataLoader(dataset)\n")
    assert keyword_line(str(src), 1, "num_workers") == 4
    assert keyword_line(str(src), 6, "num_workers") is None


def test_a_helper_called_with_what_its_callers_loop_passes_unchanged(tmp_path):
    src = tmp_path / "audio.py"
    src.write_text("def consts(device):\n    return 1\n"
                   "def log_mel(wave, device, table=None):\n"
                   "    basis = table if table is not None else consts(device)\n"   # 4
                   "    return wave * basis\n"
                   "def run(batches, device):\n"
                   "    for wave in batches:\n"
                   "        log_mel(wave, device)\n"                                  # 8: device unchanged
                   "    for i, wave in enumerate(batches):\n"
                   "        log_mel(wave, i)\n")                                      # 10: the loop's index
    assert invariant_parameters(str(src), 8, "log_mel") == {"device"}  # not `wave`, the loop's
    assert invariant_parameters(str(src), 10, "log_mel") == frozenset()
    same = invariant_parameters(str(src), 8, "log_mel")
    assert invariant_call(str(src), 4, {"consts"}, called_repeatedly=True, invariant_params=same) == "consts"
    assert invariant_call(str(src), 4, {"consts"}, called_repeatedly=True) is None  # a parameter may vary


def test_hot_lines_of_one_helper_named_at_the_same_call_are_one_finding():
    """Two lines of a noise schedule rebuilt on every denoising step, both "called at line 78":
    one finding, with the second's lines added; a finding at another call stays."""
    from torchneck.diagnose.rules.python import _one_per_call
    from torchneck.model.findings import Finding, Where

    def hot(line, at):
        return Finding(kind="python_hotspot", title="t", time_lost_s=1.0, time_lost_pct=50.0, fix="f",
                       evidence={"called_at": at, "invariant_call": "cosine"},
                       where=[Where(file="s.py", line=at, function="step"),
                              Where(file="s.py", line=line, function="b")])

    merged = _one_per_call([hot(22, 78), hot(35, 78), hot(40, 90)])
    assert [[w.line for w in f.where] for f in merged] == [[78, 22, 35], [90, 40]]


def test_a_dense_matrix_built_by_a_helper_of_another_module(tmp_path):
    """`adj = gcn_norm_adjacency(edges, n)` in main.py, the helper in graph.py filling a
    `torch.zeros(n, n)`: the line to change is the helper's (unseen round 12's GCN package)."""
    from torchneck.diagnose.dense import dense_built_in

    (tmp_path / "graph.py").write_text("import torch\ndef gcn_norm_adjacency(edges, n):\n"
                                       "    deg = torch.zeros(n)\n    adj = torch.zeros(n, n)\n"
                                       "    adj[edges[0], edges[1]] = 1.0\n    return adj\n"
                                       "def features(n):\n    return torch.randn(n, 8)\n")
    main = tmp_path / "main.py"
    main.write_text("from graph import features, gcn_norm_adjacency\n"
                    "adj = gcn_norm_adjacency(edges, 100)\nx = features(100)\n")
    assert dense_built_in(str(main), 2) == (str(tmp_path / "graph.py"), 4)  # not the 1-D degree vector
    assert dense_built_in(str(main), 3) is None


def test_an_argument_made_from_a_varying_parameter_varies_too(tmp_path):
    """`length = history.shape[1] + 28` then `basis(length, period)` in a method called per batch:
    `length` comes from the batch, so the call is not the same on every pass (a new program's
    forecaster); `basis(period)`, `period` passed unchanged by the caller, is."""
    src = tmp_path / "fc.py"
    src.write_text("class F:\n    def forecast(self, history, period):\n"
                   "        length = history.shape[1] + 28\n        scale = length * 2\n"
                   "        X = self.basis(scale, period)\n        Y = self.basis(period)\n"
                   "        return X, Y, history\n")
    same = frozenset({"period"})  # what the caller passes unchanged
    assert invariant_call(str(src), 5, {"basis"}, called_repeatedly=True, invariant_params=same) is None
    assert invariant_call(str(src), 6, {"basis"}, called_repeatedly=True, invariant_params=same) == "basis"
    data = tmp_path / "ds.py"  # a Dataset's index names its sample: what comes of it is the same every epoch
    data.write_text("class D:\n    def __getitem__(self, i):\n        text = self.rows[i]\n"
                    "        return self.tok.encode(text)\n")
    assert invariant_call(str(data), 4, {"encode"}, called_repeatedly=True) == "encode"
