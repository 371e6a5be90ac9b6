import argparse

import torch

parser = argparse.ArgumentParser(description="a script with its own options")
parser.add_argument("--n", type=int, default=2)
parser.add_argument("--name", default="x")
args = parser.parse_args()
m = torch.nn.Linear(8, 8)
for i in range(args.n):
    m(torch.randn(2, 8))
print(f"ARGS n={args.n} name={args.name} main={__name__}")
