"""Profiles itself with with_stack=True and writes the trace to argv[1]: float64 work in one
function of this file, float32 work in another, both called from module level."""

import sys

import torch

weight = torch.randn(512, 512)


def make_mask(x):  # DEF make_mask
    scores = x.double() @ weight.double()
    return (scores > 0).double().mean(dim=1)


def forward(x):  # DEF forward
    return torch.relu(x @ weight).sum()


with torch.profiler.profile(with_stack=True, record_shapes=True) as prof:
    for _ in range(6):
        x = torch.randn(256, 512)
        forward(x)
        make_mask(x)
prof.export_chrome_trace(sys.argv[1])
