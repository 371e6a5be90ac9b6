"""Text featurized in pure Python before training, then training steps of about a millisecond
each: the tokenizer's loop is most of the run, and lies outside every step. It lasts ~0.5 s, well
past the 0.3 s the sampled stacks must repeat to make a steady state (with 900 documents it
lasted 0.29 s on a loaded machine, and was start-up)."""
import torch

torch.manual_seed(0)
VOCAB = {w: i for i, w in enumerate("the a of to and in is it you that he was for on are with as his they be".split())}
DOCUMENTS = [("The quick brown fox jumps over the lazy dog and it was the best of times, it was the worst of "
              f"times; you are what you eat, they say, and he is in the kitchen with his dog number {i}. ") * 60
             for i in range(1500)]


def featurize(text: str) -> list[float]:
    counts = [0.0] * 64
    for word in text.lower().split():
        counts[VOCAB.get(word.strip(",.;"), len(word)) % 64] += 1.0  # PLANTED
    return counts


features = torch.tensor([featurize(doc) for doc in DOCUMENTS]) / 100.0  # CALLER
labels = torch.arange(len(DOCUMENTS)) % 2
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(20):
    batch = slice(step * 15, step * 15 + 15)
    loss = torch.nn.functional.cross_entropy(model(features[batch]), labels[batch])
    loss.backward()
    opt.step()
    opt.zero_grad()
