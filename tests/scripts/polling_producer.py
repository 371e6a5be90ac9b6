"""A training loop fed by two producer threads that prepare batches into bounded queues faster
than the loop takes them; each producer retries `put` with a zero timeout until a slot frees,
so it spins in Python (the fix blocks: a timeout above zero)."""
import itertools
import queue
import sys
import threading

import torch
from torch import nn

FIXED = "--fixed" in sys.argv
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 60


class Producer:
    def __init__(self, workers=2, depth=2, put_timeout=0.0):
        self.put_timeout = 0.05 if FIXED else put_timeout
        self.queues = [queue.Queue(maxsize=depth) for _ in range(workers)]
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.work, args=(q, k), daemon=True)
                        for k, q in enumerate(self.queues)]

    def work(self, q, k):
        g = torch.Generator().manual_seed(k)
        while not self.stop.is_set():
            batch = torch.randn(64, 256, generator=g)
            while not self.stop.is_set():
                try:
                    q.put(batch, timeout=self.put_timeout)
                    break
                except queue.Full:
                    continue

    def batches(self):
        for t in self.threads:
            t.start()
        for q in itertools.cycle(self.queues):
            yield q.get()


torch.set_num_threads(1)
model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(256, 256), nn.ReLU())])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
producer = Producer()
for step, x in zip(range(STEPS), producer.batches()):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
producer.stop.set()
print(f"loss {loss.item():.4f}")
