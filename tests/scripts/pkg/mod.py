import sys

import torch

m = torch.nn.Linear(8, 8)
for i in range(6):
    m(torch.randn(2, 8))
print(f"MODULE main={__name__} argv={sys.argv[1:]}")
