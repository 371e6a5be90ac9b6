"""A compiled model with a graph break, trained for a few steps, and a compiled function whose
shapes change (a recompile). Prints what dynamo did, in a stable form, for the test to compare
with a plain `python` run: every frame it compiled, every graph (its frame and op count),
graph breaks, recompiles, and the counters."""
import json
import sys

import torch
from torch._dynamo.utils import counters

graphs = []


def recording_backend(gm, example_inputs):
    graphs.append((gm.forward.__code__.co_filename.rsplit("/", 1)[-1], len(list(gm.graph.nodes))))
    return gm.forward


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = self.a(x).relu()
        if h.sum() > 0:  # data-dependent branch: a graph break
            h = h * 2
        return self.b(h)


@torch.compile(backend=recording_backend, dynamic=False)
def scale(x, n):
    return x * n + 1


torch.manual_seed(0)
model = Net()
compiled = torch.compile(model, backend=recording_backend)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10):
    loss = compiled(torch.randn(8, 16)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    scale(torch.randn(4 + step % 3, 4), 2)
frames = sorted(k for k in counters["frames"])
report = {"graphs": graphs, "frames": {k: counters["frames"][k] for k in frames},
          "stats": dict(counters["stats"]), "graph_break": dict(counters["graph_break"]),
          "recompiles": dict(counters["recompiles"]), "unimplemented": dict(counters["unimplemented"])}
print("DYNAMO " + json.dumps(report, sort_keys=True))
sys.stdout.flush()
