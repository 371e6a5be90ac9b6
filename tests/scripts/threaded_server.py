"""A scoring service whose worker threads run the model; the main thread only queues requests and
waits for the answers. The workers forget inference_mode: each call builds an autograd graph."""
import queue
import sys
import threading
from contextlib import nullcontext

import torch

model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
                            torch.nn.GELU(), torch.nn.Linear(1024, 4)).eval()
requests: queue.Queue = queue.Queue()
answers: queue.Queue = queue.Queue()


def worker() -> None:
    while (batch := requests.get()) is not None:
        with torch.inference_mode() if "--fixed" in sys.argv else nullcontext():  # PLANTED
            scores = model(batch)
        answers.put(scores.argmax(1))


workers = [threading.Thread(target=worker) for _ in range(2)]
for t in workers:
    t.start()
for _ in range(300):  # batches of 256: the workers' loop outlasts the capture's steady-state hold on a fast machine
    requests.put(torch.randn(256, 256))
labels = [answers.get() for _ in range(300)]
for _ in workers:
    requests.put(None)
for t in workers:
    t.join()
print(sum(int(x.sum()) for x in labels))
