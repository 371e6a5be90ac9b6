"""The custom-backend example of PyTorch's troubleshooting page ("Minifying backend compiler
errors"): a toy compiler that fails on graphs containing relu. With --wrong it compiles relu
as a negation instead (wrong results on any input, for the accuracy minifier)."""
import sys

import torch

WRONG = "--wrong" in sys.argv
model = torch.nn.Sequential(*[torch.nn.Linear(200, 200) for _ in range(5)])


def toy_compiler(gm: torch.fx.GraphModule, _):
    for node in gm.graph.nodes:
        if node.target == torch.relu:
            if WRONG:
                node.target = torch.neg  # TOY wrong
            else:
                assert False  # TOY assert
    gm.recompile()
    return gm


def test_backend_error():
    y = torch.ones(200, 200)
    x = torch.ones(200, 200)
    z = x + y
    a = torch.relu(z)  # TOY relu
    return model(a)  # TOY output


if __name__ == "__main__":  # importable: a repro registers toy_compiler from here
    compiled_test_backend_error = torch.compile(test_backend_error, backend=toy_compiler)
    print(float(compiled_test_backend_error().sum()))
