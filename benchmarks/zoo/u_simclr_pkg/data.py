"""Synthetic 32x32 images and a threaded loader that streams SimCLR view pairs."""
import itertools
import math
import queue
import threading

import torch


def make_synthetic_images(n, num_classes=10, size=32, seed=0, class_seed=1234):
    """Class = grating orientation/frequency + colour palette + blob position, plus noise."""
    gc = torch.Generator().manual_seed(class_seed)  # prototypes shared by every split
    angle0, freq0 = torch.rand(num_classes, generator=gc) * math.pi, 2 + 4 * torch.rand(num_classes, generator=gc)
    palette = 0.2 + 0.6 * torch.rand(num_classes, 2, 3, generator=gc)
    blob0 = 0.25 + 0.5 * torch.rand(num_classes, 2, generator=gc)

    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, num_classes, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    angle = (angle0[y] + 0.3 * (torch.rand(n, generator=g) - 0.5)).view(-1, 1, 1)
    freq = (freq0[y] * (0.85 + 0.3 * torch.rand(n, generator=g))).view(-1, 1, 1)
    phase = 2 * math.pi * torch.rand(n, 1, 1, generator=g)
    wave = 0.5 + 0.5 * torch.sin(2 * math.pi * freq * (xx * angle.cos() + yy * angle.sin()) + phase)
    img = palette[y, 0, :, None, None] * wave[:, None] + palette[y, 1, :, None, None] * (1 - wave[:, None])

    centre = blob0[y] + 0.15 * torch.randn(n, 2, generator=g)
    radius = 0.12 + 0.08 * torch.rand(n, 1, 1, generator=g)
    d2 = (xx - centre[:, 0, None, None]) ** 2 + (yy - centre[:, 1, None, None]) ** 2
    blob = torch.exp(-d2 / (2 * radius ** 2))[:, None]
    img = img * (1 - blob) + torch.rand(n, 3, 1, 1, generator=g) * blob
    img = img + 0.05 * torch.randn(img.shape, generator=g)
    return img.clamp_(0, 1).contiguous(), y


class ContrastiveViewLoader:
    """Endless stream of (view_a, view_b) batches augmented on worker threads (tensor
    ops release the GIL). Worker k owns batches k, k + W, ... with its own queue and
    generator, and queues are read round-robin, so batches do not depend on timing."""

    def __init__(self, images, batch_size, augment, seed=0, num_workers=3,
                 prefetch=2, put_timeout=0.0):  # PLANTED
        self.images, self.batch_size, self.augment = images, batch_size, augment
        self.seed, self.num_workers, self.put_timeout = seed, num_workers, put_timeout
        self.batches_per_epoch = images.shape[0] // batch_size
        self._queues = [queue.Queue(maxsize=prefetch) for _ in range(num_workers)]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._worker, args=(k,), daemon=True)
                         for k in range(num_workers)]

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5.0)

    def _put(self, q, item):
        # re-check the stop flag between attempts so shutdown cannot hang on a full queue
        while not self._stop.is_set():
            try:
                q.put(item, timeout=self.put_timeout)
                return True
            except queue.Full:
                continue
        return False

    def _worker(self, k):
        g = torch.Generator().manual_seed(self.seed + 1 + k)
        epoch, order = -1, None
        try:
            for b in itertools.count(k, self.num_workers):
                e, j = divmod(b, self.batches_per_epoch)
                if e != epoch:
                    ge = torch.Generator().manual_seed(self.seed * 100_003 + e)
                    epoch, order = e, torch.randperm(self.images.shape[0], generator=ge)
                x = self.images[order[j * self.batch_size:(j + 1) * self.batch_size]]
                if not self._put(self._queues[k], (self.augment(x, g), self.augment(x, g))):
                    return
        except Exception as err:  # surface worker errors on the main thread
            self._put(self._queues[k], err)

    def __iter__(self):
        for i in itertools.count():
            item = self._queues[i % self.num_workers].get()
            if isinstance(item, Exception):
                raise item
            yield item
