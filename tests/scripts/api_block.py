"""torchneck's Python API around a training loop with a slow Python line, then on a trace."""
import json
import sys

import torch

import torchneck

torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 64)


def slow_penalty():
    return sum(i * i for i in range(250000)) * 0.0  # PLANTED


with torchneck.profile(sys.argv[1], warmup=2, steps=4) as p:
    for _ in range(9):
        y = model(x)
        loss = y.square().mean() + slow_penalty()
        loss.backward()
        opt.step()
        opt.zero_grad()

report = p.report()
traced = torchneck.analyze(str(p.run_dir / "trace.json.gz"))
print(json.dumps({
    "kind": report["kind"], "findings": report.findings, "steps": report["ranks"][0]["steps"]["count"],
    "html": report._repr_html_()[:15], "text": str(report)[:200], "repr": repr(report),
    "traced_kind": traced["kind"], "traced_steps": traced["ranks"][0]["steps"]["count"],
}))
