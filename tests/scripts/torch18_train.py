"""Records tests/data/torch18_cpu__train.json.gz: a trace written by PyTorch 1.8.1, the oldest
layout torchneck reads (category "Operator", tids as strings, "Input dims", each op's Python
stack as a "Call stack" arg, innermost frame first, with the line of each call).

Not run by the tests (they read the recorded file); to record it again, in a Python 3.9 venv:
    pip install torch==1.8.1 "numpy<1.24"
    cd tests/scripts && python torch18_train.py trace.json && gzip -9 trace.json
A small training step with a float64 round trip in one function, profiled by the profiler's
own schedule (ProfilerStep#N spans).
"""

import sys

import torch

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def features(x):
    return x.double().pow(2).float()  # CALL float64


def train_step(x, y):
    loss = torch.nn.functional.cross_entropy(model(features(x)), y)  # CALL model
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()  # CALL item


with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                            on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(5):
        train_step(torch.randn(32, 64), torch.randint(0, 10, (32,)))
        prof.step()
