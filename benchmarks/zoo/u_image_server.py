"""In-process image classification service with a synthetic load generator.

Simulates the request path of our thumbnail-classifier endpoint without a
network stack: raw HTTP-style payloads (headers + uint8 pixel body) are parsed
by a Handler, decoded with numpy, resized to 96x96 and normalised, then scored
by a small ResNet in eval mode.  A ThreadPoolExecutor plays the role of the
server's worker pool and a closed-loop load generator replays a traffic trace
drawn from a pool of popular (re-shared) uploads.  Per-request latency
percentiles are reported at the end.
"""
import argparse
import functools
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

INPUT_SIZE = 96
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# --------------------------------------------------------------------------- model
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + identity)


class ThumbNet(nn.Module):
    """ResNet-ish classifier for 96x96 thumbnails."""

    def __init__(self, num_classes=200, widths=(12, 24, 48, 96)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 5, 2, 2, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers += [BasicBlock(cin, w, stride), BasicBlock(w, w)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_model(num_classes, seed, calib_images, preprocess):
    """Stand-in for loading the trained checkpoint: seeded weights, then BatchNorm
    running statistics re-estimated on a calibration set so eval mode is well-scaled."""
    torch.manual_seed(seed)
    model = ThumbNet(num_classes)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for i in range(0, len(calib_images), 16):
            model(torch.cat([preprocess(img) for img in calib_images[i:i + 16]]))
    return model.eval()


# ------------------------------------------------------------------ request path
@dataclass
class Request:
    request_id: int
    payload: bytes
    t_sent: float


@dataclass
class Response:
    request_id: int
    status: int
    label: int
    score: float
    latency_ms: float


def encode_request(request_id, image):
    h, w, c = image.shape
    body = image.tobytes()
    head = (f"POST /v1/classify HTTP/1.1\r\n"
            f"Host: thumbs.internal\r\n"
            f"X-Request-Id: {request_id}\r\n"
            f"Content-Type: application/x-raw-rgb8\r\n"
            f"X-Image-Shape: {h},{w},{c}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("ascii")
    return head + body


def parse_http(payload):
    head, _, body = payload.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if int(headers.get("content-length", -1)) != len(body):
        raise ValueError("truncated body")
    return method, path, headers, body


class Preprocessor:
    def __init__(self, size=INPUT_SIZE):
        self.size = size
        self.mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)

    def __call__(self, img_hwc):
        x = torch.from_numpy(np.ascontiguousarray(img_hwc.transpose(2, 0, 1)))[None]
        x = F.interpolate(x.float(), size=(self.size, self.size), mode="bilinear",
                          align_corners=False, antialias=True)
        return (x / 255.0 - self.mean) / self.std


class Handler:
    def __init__(self, model, preprocess, fixed=False):
        self.model = model
        self.preprocess = preprocess
        # Popular images get re-posted constantly; memoise predictions on content.
        memoise = functools.lru_cache(maxsize=4096) if fixed else functools.lru_cache()  # PLANTED
        self._classify = memoise(self._classify_body)

    def _classify_body(self, shape, body):
        img = np.frombuffer(body, dtype=np.uint8).reshape(shape)
        x = self.preprocess(img)
        with torch.inference_mode():
            probs = torch.softmax(self.model(x), dim=1)[0]
        score, label = probs.max(0)
        return int(label), float(score)

    def handle(self, req):
        try:
            method, path, headers, body = parse_http(req.payload)
            if method != "POST" or path != "/v1/classify":
                return Response(req.request_id, 404, -1, 0.0, 0.0)
            shape = tuple(int(s) for s in headers["x-image-shape"].split(","))
            label, score = self._classify(shape, body)
            status = 200
        except (ValueError, KeyError):
            label, score, status = -1, 0.0, 400
        latency = (time.perf_counter() - req.t_sent) * 1e3
        return Response(req.request_id, status, label, score, latency)


# --------------------------------------------------------------- load generation
def make_image_pool(n_images, min_side, max_side, seed):
    """Synthetic uploads: smooth colour gradients + blobs + sensor noise, varying sizes."""
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(n_images):
        h, w = rng.integers(min_side, max_side + 1, size=2)
        yy = np.arange(h, dtype=np.float32)[:, None]
        xx = np.arange(w, dtype=np.float32)[None, :]
        base = rng.uniform(0, 255, size=3).astype(np.float32)
        gy, gx = rng.uniform(-0.4, 0.4, size=(2, 3)).astype(np.float32)
        img = base + yy[..., None] * gy + xx[..., None] * gx
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(10, min(h, w) / 2)
        blob = ((yy - cy) ** 2 + (xx - cx) ** 2) < r * r
        img[blob] = rng.uniform(0, 255, size=3)
        img += rng.standard_normal(size=(h, w, 1), dtype=np.float32) * 6.0
        pool.append(np.clip(img, 0, 255).astype(np.uint8))
    return pool


def make_trace(n_requests, n_images, seed):
    """Feed-scrolling traffic: every trending upload is fetched once per round,
    each round in a fresh random order (many clients paging through the same feed)."""
    rng = np.random.default_rng(seed + 7)
    n_rounds = -(-n_requests // n_images)
    return np.concatenate([rng.permutation(n_images) for _ in range(n_rounds)])[:n_requests]


def run_load(handler, pool, trace, workers, concurrency):
    """Closed-loop load: at most `concurrency` requests in flight."""
    slots = threading.Semaphore(concurrency)
    responses = [None] * len(trace)

    def on_done(i, fut):
        responses[i] = fut.result()
        slots.release()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="worker") as pool_exec:
        for i, img_idx in enumerate(trace):
            slots.acquire()
            req = Request(i, encode_request(i, pool[img_idx]), time.perf_counter())
            fut = pool_exec.submit(handler.handle, req)
            fut.add_done_callback(functools.partial(on_done, i))
    return responses, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--unique-images", type=int, default=200)
    ap.add_argument("--min-side", type=int, default=96)
    ap.add_argument("--max-side", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--num-classes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(1)  # one intra-op thread per serving worker
    pool = make_image_pool(args.unique_images, args.min_side, args.max_side, args.seed)
    preprocess = Preprocessor()
    model = build_model(args.num_classes, args.seed, pool[:32], preprocess)
    handler = Handler(model, preprocess, fixed=args.fixed)

    trace = make_trace(args.requests, args.unique_images, args.seed)
    print(f"image pool: {len(pool)} uploads, {sum(p.nbytes for p in pool) / 2**20:.1f} MiB; "
          f"replaying {len(trace)} requests with {args.workers} workers, "
          f"concurrency {args.concurrency}")

    responses, wall = run_load(handler, pool, trace, args.workers, args.concurrency)

    ok = [r for r in responses if r.status == 200]
    lat = np.array([r.latency_ms for r in responses])
    labels = Counter(r.label for r in ok)
    mean_score = np.mean([r.score for r in ok])
    digest = sum((r.request_id + 1) * (r.label + 1) for r in ok) % 1_000_003
    print(f"served {len(ok)}/{len(responses)} ok in {wall:.2f}s "
          f"({len(responses) / wall:.1f} req/s)")
    print(f"top labels: {labels.most_common(5)}  mean top-1 prob {mean_score:.5f}  "
          f"label digest {digest}")
    p50, p90, p99 = np.percentile(lat, [50, 90, 99])
    print(f"latency ms: p50 {p50:.2f}  p90 {p90:.2f}  p99 {p99:.2f}  max {lat.max():.2f}")


if __name__ == "__main__":
    main()
