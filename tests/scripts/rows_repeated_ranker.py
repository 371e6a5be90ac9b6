"""A candidate scorer serving batches of requests with no step loop: each request's user
features are copied to every one of its candidates before the model, so the user tower
computes the same rows ~200 times per request; the fix encodes each user once and gathers."""
import sys

import torch
from torch import nn

FIXED = "--fixed" in sys.argv
USERS, CANDIDATES, WIDTH = 16, 200, 256


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.user_tower = nn.Sequential(nn.Linear(WIDTH, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                        nn.Linear(512, 64))
        self.items = nn.Embedding(5000, 64)

    def forward(self, users, items, row_of):
        return (self.user_tower(users)[row_of] * self.items(items)).sum(-1)


def collate(users, items):
    row_of = torch.repeat_interleave(torch.arange(len(users)), CANDIDATES)
    if not FIXED:
        users, row_of = users[row_of], torch.arange(len(row_of))  # PLANTED
    return users, items.reshape(-1), row_of


torch.manual_seed(0)
model = Scorer().eval()
best = []
with torch.inference_mode():
    for request in range(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 60):
        users, items = torch.randn(USERS, WIDTH), torch.randint(0, 5000, (USERS, CANDIDATES))
        scores = model(*collate(users, items))
        best.append(scores.view(USERS, CANDIDATES).argmax(1))
print(f"served {len(best)} batches, first picks {best[0][:4].tolist()}")
