"""A request handler run in a worker thread that the main thread starts and joins: the main
thread waits in Thread.join the whole run (no Python signal handler runs there), the worker
calls the model once per request, each a flat list of token ids with the offsets of one bag."""
import sys
import threading

import torch

torch.manual_seed(0)
bag = torch.nn.EmbeddingBag(5000, 64, mode="mean")
head = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bag, self.head = bag, head

    def forward(self, ids, offsets):
        return self.head(self.bag(ids, offsets))


model = Model().eval()
lengths = torch.randint(4, 40, (40000,)).tolist()  # the requests made in one call: no set-up loop to sample
requests = list(torch.randint(0, 5000, (sum(lengths),)).split(lengths))


def serve(out):
    with torch.inference_mode():
        if "--fixed" in sys.argv:
            lengths = torch.tensor([len(r) for r in requests])
            offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
            out.append(model(torch.cat(requests), offsets).argmax(1))
        else:
            out.append(torch.cat([model(r, torch.zeros(1, dtype=torch.long)) for r in requests]).argmax(1))  # PLANTED


answers: list = []
worker = threading.Thread(target=serve, args=(answers,))
worker.start()
worker.join()
print(int(answers[0].sum()))
