"""A training script that runs its own torch.profiler, as the profiler recipe teaches.

`schedule OUT`: torch.profiler.profile with a schedule and tensorboard_trace_handler(OUT); it
starts while torchneck's own window is recording (5 plain steps before it).
`plain OUT`: torch.profiler.profile around 4 steps, then export_chrome_trace(OUT/trace.json).
`itt`: torch.autograd.profiler.emit_itt around 4 steps (ranges for VTune).
Prints every row of key_averages and the exported trace's events by name, in a stable form, for
the test to compare with a plain `python` run.
"""
import json
import re
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

mode = sys.argv[1]
out = Path(sys.argv[2]) if len(sys.argv) > 2 else None
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def train_step():
    with record_function("train_step"):
        loss = model(torch.randn(32, 64)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


for _ in range(5):
    train_step()
if mode == "schedule":
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(out), worker_name="worker")) as prof:
        for _ in range(7):
            train_step()
            prof.step()
    traces = sorted(out.glob("*.pt.trace.json"))
elif mode == "plain":
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(4):
            train_step()
    prof.export_chrome_trace(str(out / "trace.json"))
    traces = [out / "trace.json"]
else:
    with torch.autograd.profiler.emit_itt():
        for _ in range(4):
            train_step()
    prof, traces = None, []
for _ in range(5):
    train_step()

if prof is not None:
    rows = sorted((re.sub(r"0x[0-9a-f]+", "0x...", e.key), e.count) for e in prof.key_averages())
    print("ROWS " + json.dumps(rows))
names: dict[str, int] = {}
for path in traces:
    for event in json.loads(path.read_text())["traceEvents"]:
        if event.get("ph") == "X":
            name = re.sub(r"0x[0-9a-f]+", "0x...", event["name"])
            names[name] = names.get(name, 0) + 1
print("TRACE " + json.dumps(sorted(names.items())))
print("DONE")
