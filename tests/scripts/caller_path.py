"""A hot helper called from one line of a training loop: the finding names the helper's hot
line and, up its one call path, the line that calls it (where a fix such as "tokenize once"
goes). One id per (long) word, not per character: turning a list of 80,000 ints into a tensor
costs as much as the loop, and is a hot line of its own."""
import torch


def word_ids(text):
    ids = []
    for word in text.split():
        h = 0
        for ch in word:
            h = (h * 31 + ord(ch)) % 997  # HOT
        ids.append(h)
    return ids


torch.manual_seed(0)
model = torch.nn.EmbeddingBag(997, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
text = "internationalization characteristically " * 2000
for step in range(12):
    ids = torch.tensor(word_ids(text))  # CALLER
    loss = model(ids.unsqueeze(0)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
