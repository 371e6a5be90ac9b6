"""A compiled function that hits a planted TorchInductor bug, the one PyTorch's own minifier
tests plant: inductor's C++ for relu does not compile (`--bug accuracy`: relu adds 1)."""
import sys

import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = (
    sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else "compile_error")


@torch.compile
def block(x):
    return torch.relu(x) + 1  # BUG relu


x = torch.randn(16, 16)
for _ in range(3):
    y = block(x)  # BUG call
print(float(y.sum()))
