"""A text classifier whose collate function pads every batch to the maximum length (128) while
its sentences are 8-30 tokens: most of each encoder call computes padding."""
import random

import torch
from torch.utils.data import DataLoader

MAX_LEN = 128
random.seed(0)
torch.manual_seed(0)
sentences = [[random.randrange(1, 500) for _ in range(random.randint(8, 30))] for _ in range(384)]


def collate(batch):
    length = MAX_LEN  # PLANTED
    ids = torch.zeros(len(batch), length, dtype=torch.long)
    for row, tokens in enumerate(batch):
        ids[row, : len(tokens)] = torch.tensor(tokens)
    return ids, ids == 0


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(500, 64, padding_idx=0)
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(64, 2)

    def forward(self, ids, pad_mask):
        return self.head(self.encoder(self.embed(ids), src_key_padding_mask=pad_mask)[:, 0])


model = Classifier()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    for ids, pad_mask in DataLoader(sentences, batch_size=32, collate_fn=collate):
        loss = model(ids, pad_mask).logsumexp(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", round(loss.item(), 3))
