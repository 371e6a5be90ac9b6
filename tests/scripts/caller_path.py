"""A hot helper called from one line of a training loop: the finding names the helper's hot
line and, up its one call path, the line that calls it (where a fix such as "tokenize once"
goes)."""
import torch


def char_ids(text):
    ids = []
    for ch in text:
        ids.append((ord(ch) * 31 + 7) % 997)  # HOT
    return ids


torch.manual_seed(0)
model = torch.nn.EmbeddingBag(997, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
text = "the quick brown fox jumps over the lazy dog " * 2000
for step in range(12):
    ids = torch.tensor(char_ids(text))  # CALLER
    loss = model(ids.unsqueeze(0)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
