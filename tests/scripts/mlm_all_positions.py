"""A masked language model trained on random tokens: 15 % of the positions carry a label, the
others are -100 (the loss skips them), yet the vocabulary head runs on every position."""
import sys

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, LENGTH, BATCH = 8000, 64, 64, 16
FIXED = "--fixed" in sys.argv


class MaskedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(WIDTH, 4, 128, batch_first=True), 1)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids, labels):
        hidden = self.encoder(self.embed(ids))
        if FIXED:
            keep = labels != -100
            hidden, labels = hidden[keep], labels[keep]
        logits = self.head(hidden)  # PLANTED
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)


torch.manual_seed(0)
model = MaskedLM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 30):
    ids = torch.randint(0, VOCAB, (BATCH, LENGTH))
    labels = torch.where(torch.rand(BATCH, LENGTH) < 0.15, ids, torch.full_like(ids, -100))
    loss = model(ids, labels)
    loss.backward()
    opt.step()
    opt.zero_grad()
print(f"loss {loss.item():.3f}")
