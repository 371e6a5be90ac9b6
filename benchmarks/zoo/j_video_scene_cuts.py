"""Detect scene cuts in a (synthetic) decoded video stream using frame
embeddings from a tiny patch transformer."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)

FRAME_SIZE = 112
PATCH = 8
EMBED_DIM = 96
N_FRAMES = 360
BATCH_FRAMES = 32
MEAN = torch.tensor([0.45, 0.45, 0.45]).view(3, 1, 1)
STD = torch.tensor([0.225, 0.225, 0.225]).view(3, 1, 1)


def decode_stream(n_frames, size, seed):
    """Yield uint8 frames [3,H,W]: a moving blob over textured backgrounds, with hard cuts."""
    gen = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    frame_idx = 0
    while frame_idx < n_frames:
        scene_len = int(torch.randint(60, 130, (1,), generator=gen))
        tint = torch.rand(3, 1, 1, generator=gen)
        background = 0.7 * tint + 0.3 * torch.rand(3, size // 8, size // 8, generator=gen)
        background = F.interpolate(background[None], size=(size, size), mode="bilinear",
                                   align_corners=False)[0]
        color = torch.rand(3, 1, 1, generator=gen)
        pos = torch.rand(2, generator=gen) * size
        velocity = (torch.rand(2, generator=gen) - 0.5) * 4
        for t in range(min(scene_len, n_frames - frame_idx)):
            cy, cx = (pos + velocity * t) % size
            blob = torch.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * 10.0 ** 2))
            noise = 0.03 * torch.randn(3, size, size, generator=gen)
            frame = 0.8 * background + 0.5 * blob * color + noise
            yield (frame.clamp(0, 1) * 255).to(torch.uint8)
            frame_idx += 1


def preprocess(frames_u8):
    for frame in frames_u8:
        yield (frame.float().div(255.0) - MEAN) / STD


def load_video(frames):
    if args.fixed:
        video = torch.stack(list(frames))
    else:
        video = torch.empty(0, 3, FRAME_SIZE, FRAME_SIZE)
        for frame in frames:
            video = torch.cat([video, frame.unsqueeze(0)])  # PLANTED
    return video


def patchify(frames):
    t, c, h, w = frames.shape
    patches = frames.reshape(t, c, h // PATCH, PATCH, w // PATCH, PATCH)
    return patches.permute(0, 2, 4, 1, 3, 5).reshape(t, (h // PATCH) * (w // PATCH), c * PATCH * PATCH)


class FrameEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        n_patches = (FRAME_SIZE // PATCH) ** 2
        self.proj = nn.Linear(3 * PATCH * PATCH, EMBED_DIM)
        self.pos = nn.Parameter(torch.randn(1, n_patches, EMBED_DIM) * 0.02)
        layer = nn.TransformerEncoderLayer(EMBED_DIM, nhead=4, dim_feedforward=2 * EMBED_DIM,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(EMBED_DIM)

    def forward(self, frames):
        x = self.proj(patchify(frames)) + self.pos
        x = self.blocks(x)
        return self.norm(x.mean(dim=1))


def embed_video(encoder, video):
    chunks = []
    with torch.no_grad():
        for start in range(0, len(video), BATCH_FRAMES):
            chunks.append(encoder(video[start:start + BATCH_FRAMES]))
    return F.normalize(torch.cat(chunks), dim=1)


def find_cuts(embeddings, ratio_thresh=50.0):
    dist = 1.0 - (embeddings[1:] * embeddings[:-1]).sum(dim=1)
    score = dist / (dist.median() + 1e-8)
    return (torch.nonzero(score > ratio_thresh).flatten() + 1).tolist(), dist


def main():
    encoder = FrameEncoder().eval()
    video = load_video(preprocess(decode_stream(N_FRAMES, FRAME_SIZE, seed=3)))
    print(f"decoded video: {tuple(video.shape)}  mean {video.mean():.4f}  std {video.std():.4f}")
    emb = embed_video(encoder, video)
    cuts, dist = find_cuts(emb)
    print(f"frame-to-frame distance: median {dist.median():.5f}  max {dist.max():.5f}")
    print(f"detected {len(cuts)} scene cuts at frames {cuts}")


if __name__ == "__main__":
    main()
