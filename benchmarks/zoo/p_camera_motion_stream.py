"""Streaming motion / intrusion detector for a fixed security camera.

The pipeline is a chain of generators so that frames are processed as they
arrive and nothing is buffered beyond what each stage needs:

    camera_source -> to_chw -> background_subtract -> prepare_inputs
                  -> batched -> classify -> event_sink

The background model is a sliding-window mean of the last ``--window`` frames,
which copes with slow lighting changes better than a single reference frame.
Frames are synthesised (static scene + drifting illumination + moving blobs +
sensor noise) so the script runs anywhere without a video file.
"""
import argparse
import collections
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ("none", "person", "vehicle", "animal")


# --------------------------------------------------------------------------
# source
# --------------------------------------------------------------------------
def _static_scene(h, w, gen):
    """A smooth, textured background: gradients plus low-frequency blobs."""
    yy = torch.linspace(0, 1, h).view(h, 1)
    xx = torch.linspace(0, 1, w).view(1, w)
    base = torch.stack([
        90 + 60 * yy + 20 * xx,
        100 + 40 * xx.expand(h, w),
        110 + 30 * (1 - yy) * xx,
    ], dim=-1)
    coarse = torch.rand(1, 3, h // 16, w // 16, generator=gen) * 40 - 20
    texture = F.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
    return (base + texture[0].permute(1, 2, 0)).clamp(0, 255)


def camera_source(n_frames, h, w, seed=0):
    """Yield (frame_index, HxWx3 uint8 tensor) like a decoded RTSP stream."""
    gen = torch.Generator().manual_seed(seed)
    scene = _static_scene(h, w, gen)
    n_obj = 4
    pos = torch.rand(n_obj, 2, generator=gen) * torch.tensor([h * 0.7, w * 0.7])
    vel = (torch.rand(n_obj, 2, generator=gen) - 0.5) * 12
    size = (torch.rand(n_obj, 2, generator=gen) * 0.15 + 0.05) * torch.tensor([h, w])
    colour = torch.rand(n_obj, 3, generator=gen) * 255
    for t in range(n_frames):
        gain = 1.0 + 0.08 * torch.sin(torch.tensor(t / 40.0))   # clouds passing
        frame = scene * gain
        pos = pos + vel
        for k in range(n_obj):
            for d, lim in ((0, h), (1, w)):
                if pos[k, d] < 0 or pos[k, d] + size[k, d] > lim:
                    vel[k, d] = -vel[k, d]
                    pos[k, d] = pos[k, d].clamp(0, lim - size[k, d])
            y0, x0 = int(pos[k, 0]), int(pos[k, 1])
            y1, x1 = y0 + int(size[k, 0]), x0 + int(size[k, 1])
            frame[y0:y1, x0:x1] = colour[k]
        noise = torch.randint(-6, 7, (h, w, 1), generator=gen, dtype=torch.int16)
        frame = (frame.to(torch.int16) + noise).clamp(0, 255).to(torch.uint8)
        yield t, frame


# --------------------------------------------------------------------------
# transforms
# --------------------------------------------------------------------------
def to_chw(stream):
    for t, frame in stream:
        yield t, frame.permute(2, 0, 1).contiguous()


def background_subtract(stream, window, threshold, fixed=False):
    """Sliding-window mean background; yields (t, frame, foreground mask).

    Frames stay uint8 in the window; the mean is taken over an int32 sum so
    it is exact and independent of accumulation order.
    """
    history = collections.deque()
    running = None
    for t, frame in stream:
        history.append(frame)
        if fixed:
            if running is None:
                running = torch.zeros(frame.shape, dtype=torch.int32)
            running += frame
            if len(history) > window:
                running -= history.popleft()
            total = running
        else:
            if len(history) > window:
                history.popleft()
            total = torch.stack(tuple(history)).to(torch.int32).sum(dim=0)  # PLANTED
        background = total.to(torch.float32) / len(history)
        diff = (frame.to(torch.float32) - background).abs().amax(dim=0)
        mask = diff > threshold
        yield t, frame, mask


def prepare_inputs(stream, size):
    """Downscale to network resolution and append the motion mask channel."""
    mean = torch.tensor([0.45, 0.45, 0.45]).view(3, 1, 1)
    std = torch.tensor([0.25, 0.25, 0.25]).view(3, 1, 1)
    for t, frame, mask in stream:
        x = frame.to(torch.float32).div_(255.0).unsqueeze(0)
        x = F.interpolate(x, size=size, mode="bilinear", antialias=True,
                          align_corners=False)[0]
        x = (x - mean) / std
        m = F.adaptive_avg_pool2d(mask[None, None].float(), size)[0]
        yield t, torch.cat([x, m], dim=0), mask.float().mean().item()


def batched(stream, batch_size):
    buf = []
    for item in stream:
        buf.append(item)
        if len(buf) == batch_size:
            yield buf
            buf = []
    if buf:
        yield buf


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class TinyDetector(nn.Module):
    """Frame-level classifier; stands in for a distilled production model."""

    def __init__(self, in_ch=4, n_cls=len(CLASSES)):
        super().__init__()
        def block(ci, co):
            return nn.Sequential(nn.Conv2d(ci, co, 3, stride=2, padding=1, bias=False),
                                 nn.BatchNorm2d(co), nn.ReLU(inplace=True))
        self.features = nn.Sequential(block(in_ch, 16), block(16, 32),
                                      block(32, 64), block(64, 96))
        self.head = nn.Linear(96, n_cls)

    def forward(self, x):
        f = self.features(x)
        return self.head(F.adaptive_avg_pool2d(f, 1).flatten(1))


def classify(batches, model):
    model.eval()
    with torch.inference_mode():
        for batch in batches:
            ts = [b[0] for b in batch]
            x = torch.stack([b[1] for b in batch])
            fg = [b[2] for b in batch]
            probs = model(x).softmax(dim=-1)
            for t, p, frac in zip(ts, probs, fg):
                yield t, p, frac


# --------------------------------------------------------------------------
# sink
# --------------------------------------------------------------------------
def event_sink(stream, min_fg, min_conf):
    """Collapse frame-level detections into events; return a summary."""
    events = []
    current = None
    checksum = 0.0
    n = 0
    for t, probs, frac in stream:
        n += 1
        checksum += float(probs[1:].sum()) * (1 + frac)
        motion = frac >= min_fg
        # "none" only wins when there is no motion to explain
        cls = 1 + int(probs[1:].argmax()) if motion else 0
        active = motion and float(probs[cls]) >= min_conf
        if active and current is None:
            current = {"start": t, "cls": CLASSES[cls], "peak_fg": round(frac, 4)}
        elif active:
            current["peak_fg"] = max(current["peak_fg"], round(frac, 4))
        elif current is not None:
            current["end"] = t
            events.append(current)
            current = None
    if current is not None:
        current["end"] = n
        events.append(current)
    return {"frames": n, "events": events, "checksum": checksum}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=170)
    ap.add_argument("--height", type=int, default=360)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--window", type=int, default=12)
    ap.add_argument("--threshold", type=float, default=30.0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = TinyDetector()
    t0 = time.perf_counter()

    frames = camera_source(args.frames, args.height, args.width, seed=1)
    frames = to_chw(frames)
    masked = background_subtract(frames, args.window, args.threshold, fixed=args.fixed)
    inputs = prepare_inputs(masked, size=(120, 160))
    results = classify(batched(inputs, args.batch_size), model)
    summary = event_sink(results, min_fg=0.07, min_conf=0.2)

    dt = time.perf_counter() - t0
    print(f"frames={summary['frames']} events={len(summary['events'])} "
          f"checksum={summary['checksum']:.6f} time={dt:.2f}s")
    for ev in summary["events"][:5]:
        print("  ", ev)


if __name__ == "__main__":
    main()
