"""An inference server: a worker thread, started before any request, batches requests off a queue
and pads each batch to the server's `max_len` setting; the main thread only submits and waits."""
import queue
import threading

import torch

torch.manual_seed(0)


class Server:
    def __init__(self, model, max_len):
        self.model, self.max_len, self.inbox = model, max_len, queue.Queue()

    def encode(self, batch):
        width = self.max_len  # PLANTED
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        for i, seq in enumerate(batch):
            ids[i, :len(seq)] = torch.tensor(seq)
        return ids

    @torch.inference_mode()
    def serve(self, replies):
        while (batch := self.inbox.get()) is not None:
            replies.put(self.model(self.encode(batch)).argmax(-1))


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(1000, 64)
        self.layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
        self.out = torch.nn.Linear(64, 8)

    def forward(self, ids):
        return self.out(self.layer(self.emb(ids)).mean(1))


server = Server(Tagger().eval(), max_len=384)
replies: queue.Queue = queue.Queue()
worker = threading.Thread(target=server.serve, args=(replies,))
worker.start()
g = torch.Generator().manual_seed(1)
batches = [[torch.randint(1, 1000, (int(n),), generator=g).tolist() for n in torch.randint(8, 40, (16,), generator=g)]
           for _ in range(120)]
for batch in batches:
    server.inbox.put(batch)
server.inbox.put(None)
for _ in batches:
    replies.get()
worker.join()
