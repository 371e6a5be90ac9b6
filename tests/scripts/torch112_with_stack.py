"""Records tests/data/torch112_cpu__with_stack.json.gz: a with_stack=True trace written by
PyTorch 1.12, whose ops carry the old "Call stack" arg beside the python_function events.

Not run by the tests (they read the recorded file); to record it again, in a Python 3.10 venv:
    pip install torch==1.12.1 "numpy<2"
    cd tests/scripts && python torch112_with_stack.py trace.json && gzip -9 trace.json
with_stack_trace.py's workload (a copy: this file must run alone under PyTorch 1.12).
"""

import sys

import torch

weight = torch.randn(256, 256)


def make_mask(x):  # DEF make_mask
    scores = x.double() @ weight.double()
    return (scores > 0).double().mean(dim=1)


def forward(x):  # DEF forward
    return torch.relu(x @ weight).sum()


with torch.profiler.profile(with_stack=True, record_shapes=True) as prof:
    for _ in range(5):
        x = torch.randn(128, 256)
        forward(x)
        make_mask(x).sum().item()
prof.export_chrome_trace(sys.argv[1])
