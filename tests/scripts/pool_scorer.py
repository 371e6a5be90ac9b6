"""Scores documents in a thread pool: the main thread only iterates `pool.map`, waiting on each
chunk's future (a wait the sampler's signal interrupts: its samples say "waits in
result_iterator"), while the worker calls the model once per document."""
import sys
from concurrent.futures import ThreadPoolExecutor

import torch

torch.manual_seed(0)
VOCAB, DIM = 20_000, 64
embed = torch.nn.EmbeddingBag(VOCAB, DIM, mode="mean")
head = torch.nn.Sequential(torch.nn.Linear(DIM, 512), torch.nn.ReLU(), torch.nn.Linear(512, 3))
docs = [torch.randint(0, VOCAB, (int(n),)) for n in torch.randint(20, 200, (30_000,))]


class Scorer:
    def __init__(self, embed, head):
        self.embed, self.head = embed, head

    @torch.inference_mode()
    def score_chunk(self, chunk):
        if "--fixed" in sys.argv:
            lengths = torch.tensor([len(d) for d in chunk])
            offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
            return self.head(self.embed(torch.cat(chunk), offsets)).argmax(1)
        return torch.stack([self.head(self.embed(d[None])).argmax(1)[0] for d in chunk])  # PLANTED


scorer = Scorer(embed, head)
chunks = [docs[i:i + 500] for i in range(0, len(docs), 500)]
with ThreadPoolExecutor(max_workers=1) as pool:
    labels = torch.cat(list(pool.map(scorer.score_chunk, chunks)))
print(torch.bincount(labels, minlength=3).tolist())
