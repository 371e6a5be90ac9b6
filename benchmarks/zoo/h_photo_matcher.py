"""Match incoming user photos against a product-image gallery.

Batch job: embeds a stream of query photos with a compiled CNN encoder and
looks up the nearest gallery products by cosine similarity.  Reports
top-1 / top-5 retrieval accuracy against the known source product.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

IMG = 32
BATCH = 128


# --------------------------------------------------------------------------- data
def render_products(n, seed=0):
    """Procedural 'product photos': coloured blobs and bars on a tinted background."""
    g = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, IMG), torch.linspace(-1, 1, IMG), indexing="ij")
    bg = torch.rand(n, 3, 1, 1, generator=g) * 0.3
    imgs = bg.expand(n, 3, IMG, IMG).clone()
    for _ in range(3):
        cx, cy = (torch.rand(2, n, 1, 1, generator=g) - 0.5) * 1.2
        r = torch.rand(n, 1, 1, generator=g) * 0.35 + 0.1
        color = torch.rand(n, 3, 1, 1, generator=g)
        blob = (((xs - cx) ** 2 + (ys - cy) ** 2) < r ** 2).float().unsqueeze(1)
        imgs = imgs * (1 - blob) + color * blob
        w = torch.rand(n, 1, 1, generator=g) * 0.2 + 0.05
        bar = ((xs - cy).abs() < w).float().unsqueeze(1) * (ys > cx).float().unsqueeze(1)
        imgs = imgs * (1 - 0.5 * bar) + 0.5 * color.flip(1) * bar
    return imgs


def query_stream(gallery, n_queries, chunk, seed=1):
    """Yields chunks of (photos, true_product_id): noisy, shifted, re-lit copies."""
    g = torch.Generator().manual_seed(seed)
    for start in range(0, n_queries, chunk):
        ids = torch.randint(0, gallery.shape[0], (chunk,), generator=g)
        x = gallery[ids].clone()
        x = x * (0.85 + 0.3 * torch.rand(chunk, 1, 1, 1, generator=g))
        x = torch.roll(x, shifts=(int(torch.randint(-2, 3, (1,), generator=g)),
                                  int(torch.randint(-2, 3, (1,), generator=g))), dims=(2, 3))
        x = x + 0.05 * torch.randn(x.shape, generator=g)
        yield x.clamp(0, 1), ids


# --------------------------------------------------------------------------- model
class ConvBlock(nn.Sequential):
    def __init__(self, cin, cout, stride):
        super().__init__(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                         nn.BatchNorm2d(cout), nn.GELU())


class Encoder(nn.Module):
    def __init__(self, dim=128):
        super().__init__()
        self.features = nn.Sequential(ConvBlock(3, 16, 1), ConvBlock(16, 32, 2),
                                      ConvBlock(32, 48, 2), ConvBlock(48, 64, 2))
        self.head = nn.Linear(64 * 16, dim)
        self.register_buffer("mean", torch.tensor([0.45, 0.45, 0.45]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.25, 0.25, 0.25]).view(1, 3, 1, 1))

    def forward(self, x):
        x = (x - self.mean) / self.std
        h = self.features(x)
        # keep coarse spatial layout (4x4), then L2-normalised projection
        h = F.adaptive_avg_pool2d(h, 4).flatten(1)
        return F.normalize(self.head(h), dim=-1)


@torch.inference_mode()
def embed_all(encoder, images):
    return torch.cat([encoder(images[i:i + BATCH]) for i in range(0, len(images), BATCH)])


# --------------------------------------------------------------------------- index
class GalleryIndex:
    def __init__(self, encoder, images, cache=False):
        self.encoder = encoder
        self.images = images
        self.cache = cache
        self._emb = None

    @property
    def embeddings(self):
        """L2-normalised gallery embeddings, [N, D]."""
        if self.cache:
            if self._emb is None:
                self._emb = embed_all(self.encoder, self.images)
            return self._emb
        return embed_all(self.encoder, self.images)  # PLANTED

    @torch.inference_mode()
    def search(self, query_emb, k=5):
        sims = query_emb @ self.embeddings.T
        scores, idx = sims.topk(k, dim=1)
        return scores, idx


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gallery", type=int, default=3200)
    p.add_argument("--queries", type=int, default=5120)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    t0 = time.time()
    gallery = render_products(args.gallery)
    encoder = Encoder().eval()
    encoder = torch.compile(encoder)
    index = GalleryIndex(encoder, gallery, cache=args.fixed)

    top1 = top5 = seen = 0
    margins = []
    for photos, true_ids in query_stream(gallery, args.queries, BATCH):
        q = embed_all(encoder, photos)
        scores, idx = index.search(q, k=5)
        top1 += (idx[:, 0] == true_ids).sum().item()
        top5 += (idx == true_ids[:, None]).any(dim=1).sum().item()
        margins.append(scores[:, 0] - scores[:, 1])
        seen += len(true_ids)

    print(f"queries {seen}  top1 {top1 / seen:.3f}  top5 {top5 / seen:.3f}  "
          f"mean margin {torch.cat(margins).mean():.4f}  ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
