"""A tiny product-tagging inference server: JSON requests from a socket-like queue, JSON answers.

A listener thread puts raw request strings on a queue (as a socket handler would); the main thread
parses each request, runs the tagger on its feature vectors and answers with the top-5 tag names.
"""
import argparse
import json
import queue
import random
import tempfile
import threading
from pathlib import Path

import torch
from torch import nn

N_TAGS = 20000
DIM = 256


def write_tag_file(path):
    """The tag catalogue the model was trained with: id -> name, synonyms and a parent category."""
    rng = random.Random(1)
    syll = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su"]
    tags = [{"id": i, "name": "".join(rng.choices(syll, k=4)), "parent": rng.randrange(500),
             "synonyms": ["".join(rng.choices(syll, k=3)) for _ in range(3)]} for i in range(N_TAGS)]
    path.write_text(json.dumps({"version": 3, "tags": tags}))


def listener(q, n_requests):
    rng = random.Random(0)
    for rid in range(n_requests):
        items = [[round(rng.gauss(0, 1), 4) for _ in range(DIM)] for _ in range(rng.randint(1, 4))]
        q.put(json.dumps({"request_id": rid, "items": items}))
    q.put(None)


class Tagger:
    def __init__(self, model, tag_file, fixed):
        self.model = model
        self.tag_file = tag_file
        self.tags = json.loads(Path(tag_file).read_text())["tags"] if fixed else None

    def handle(self, raw):
        req = json.loads(raw)
        x = torch.tensor(req["items"])
        with torch.inference_mode():
            top = self.model(x).softmax(-1).topk(5)
        tags = self.tags or json.loads(Path(self.tag_file).read_text())["tags"]  # PLANTED
        answer = [[{"tag": tags[i]["name"], "score": round(s, 4)} for s, i in zip(ss, ii)]
                  for ss, ii in zip(top.values.tolist(), top.indices.tolist())]
        return json.dumps({"request_id": req["request_id"], "tags": answer})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--fixed", action="store_true", help="load the tag catalogue once at start-up")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, 512), nn.ReLU(), nn.Linear(512, N_TAGS)).eval()
    with tempfile.TemporaryDirectory() as tmp:
        tag_file = Path(tmp) / "tags.json"
        write_tag_file(tag_file)
        server = Tagger(model, tag_file, args.fixed)
        q = queue.Queue(maxsize=16)
        threading.Thread(target=listener, args=(q, args.requests), daemon=True).start()
        answered = 0
        while (raw := q.get()) is not None:
            reply = server.handle(raw)
            answered += 1
        print(f"answered {answered} requests; last: {reply[:80]}")


if __name__ == "__main__":
    main()
