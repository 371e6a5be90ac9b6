"""Offline instance-segmentation job.

Reads a stream of scenes, runs a CenterNet-style instance segmenter, pastes the
per-instance masks back into image coordinates, resolves overlaps into a label
map and writes one label map plus one JSON line of instance metadata per scene.

    python s_batch_postprocess.py --num-images 500
"""
import argparse
import json
import math
import os
import shutil
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def synthetic_scenes(n, height, width, seed=0):
    """Yield (scene_id, image) pairs: noisy background with a few bright rectangles."""
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        img = 0.1 * torch.randn(3, height, width, generator=g)
        for _ in range(int(torch.randint(4, 12, (1,), generator=g))):
            y, x = (int(v) for v in torch.randint(0, min(height, width) - 64, (2,), generator=g))
            h, w = (int(v) for v in torch.randint(16, 64, (2,), generator=g))
            img[:, y:y + h, x:x + w] += torch.rand(3, 1, 1, generator=g)
        yield f"scene_{i:05d}", img


class SceneReader:
    """Groups the scene stream into fixed-size batches."""

    def __init__(self, source, batch_size):
        self.source = source
        self.batch_size = batch_size

    def __iter__(self):
        ids, imgs = [], []
        for scene_id, img in self.source:
            ids.append(scene_id)
            imgs.append(img)
            if len(ids) == self.batch_size:
                yield ids, torch.stack(imgs)
                ids, imgs = [], []
        if ids:
            yield ids, torch.stack(imgs)


class InstanceSegmenter(nn.Module):
    """Stride-4 backbone with centre, size and mask-feature heads plus a RoI mask head."""

    def __init__(self, width=16, mask_dim=16):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, width, 4, stride=4), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        )
        self.center = nn.Conv2d(width, 1, 1)
        self.size = nn.Conv2d(width, 2, 1)
        self.mask_feat = nn.Conv2d(width, mask_dim, 1)
        self.mask_head = nn.Sequential(
            nn.Conv2d(mask_dim, 16, 3, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(16, 16, 2, stride=2), nn.ReLU(),
            nn.Conv2d(16, 1, 1),
        )
        self._init_weights()

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x):
        f = self.backbone(x)
        return self.center(f).sigmoid(), self.size(f), self.mask_feat(f)


def roi_crop(features, boxes, out_size, stride):
    """Bilinear RoI crop of a (C, h, w) feature map for (N, 4) image-space boxes."""
    _, h, w = features.shape
    t = torch.linspace(0, 1, out_size)
    xs = boxes[:, 0:1] + t * (boxes[:, 2:3] - boxes[:, 0:1])
    ys = boxes[:, 1:2] + t * (boxes[:, 3:4] - boxes[:, 1:2])
    gx = xs / stride / w * 2 - 1
    gy = ys / stride / h * 2 - 1
    grid = torch.stack([gx[:, None, :].expand(-1, out_size, -1),
                        gy[:, :, None].expand(-1, -1, out_size)], dim=-1)
    feats = features[None].expand(len(boxes), -1, -1, -1)
    return F.grid_sample(feats, grid, align_corners=True)


class Predictor:
    """Decodes the top-k centre peaks into boxes, scores and 28x28 mask logits."""

    def __init__(self, model, top_k=100, stride=4):
        self.model = model.eval()
        self.top_k = top_k
        self.stride = stride

    @torch.inference_mode()
    def __call__(self, images):
        heat, size, mfeat = self.model(images)
        peaks = heat * (F.max_pool2d(heat, 3, stride=1, padding=1) == heat)
        _, _, fh, fw = heat.shape
        img_h, img_w = images.shape[-2:]
        outputs, rois = [], []
        for b in range(images.shape[0]):
            scores, idx = peaks[b, 0].flatten().topk(self.top_k)
            cy = (idx // fw).float() * self.stride + self.stride / 2
            cx = (idx % fw).float() * self.stride + self.stride / 2
            wh = 24 + 96 * size[b].flatten(1)[:, idx].sigmoid()
            boxes = torch.stack([cx - wh[0] / 2, cy - wh[1] / 2, cx + wh[0] / 2, cy + wh[1] / 2], 1)
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, img_w - 1)
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, img_h - 1)
            rois.append(roi_crop(mfeat[b], boxes, 14, self.stride))
            outputs.append({"boxes": boxes, "scores": scores})
        # one mask-head pass for all RoIs of the batch
        mask_logits = self.model.mask_head(torch.cat(rois))[:, 0]
        for out, logits in zip(outputs, mask_logits.split(self.top_k)):
            out["mask_logits"] = logits
        return outputs


class PostProcessor:
    """Pastes masks into the image, thresholds them and resolves overlaps by score."""

    def __init__(self, img_h, img_w, mask_thresh=0.5, min_area=32,
                 mem_limit=256 * 1024 ** 2, fixed=False):
        self.img_h, self.img_w = img_h, img_w
        self.mask_thresh = mask_thresh
        self.min_area = min_area
        self.mem_limit = mem_limit  # bytes of pasted float masks held at once
        self.fixed = fixed

    def _extents(self, boxes, m):
        """Per-box image region (x0, y0, x1, y1) that its pasted mask can touch."""
        wh = (boxes[:, 2:] - boxes[:, :2]).clamp(min=1)
        # bilinear support of the mask reaches half a mask cell past the box edge
        lo = (boxes[:, :2] - wh / (2 * m)).floor() - 1
        hi = (boxes[:, 2:] + wh / (2 * m)).ceil() + 1
        return torch.cat([lo, hi], 1)

    def _window(self, extents):
        """Integer image window covering a group of per-box extents."""
        x0, y0 = (max(int(v), 0) for v in extents[:, :2].amin(0))
        x1, y1 = (int(v) for v in extents[:, 2:].amax(0))
        return x0, y0, min(x1, self.img_w), min(y1, self.img_h)

    def _paste(self, probs, boxes, window):
        """Resample (C, M, M) masks into the given image window (detectron2-style paste)."""
        x0, y0, x1, y1 = window
        bx0, by0, bx1, by1 = boxes[:, :, None].unbind(1)
        xs = torch.arange(x0, x1, dtype=torch.float32) + 0.5
        ys = torch.arange(y0, y1, dtype=torch.float32) + 0.5
        gx = (xs - bx0) / (bx1 - bx0).clamp(min=1) * 2 - 1
        gy = (ys - by0) / (by1 - by0).clamp(min=1) * 2 - 1
        grid = torch.stack([gx[:, None, :].expand(-1, len(ys), -1),
                            gy[:, :, None].expand(-1, -1, len(xs))], dim=-1)
        return F.grid_sample(probs[:, None], grid, align_corners=False)[:, 0]

    def __call__(self, pred):
        order = pred["scores"].argsort(descending=True)
        boxes, scores = pred["boxes"][order], pred["scores"][order]
        probs = pred["mask_logits"][order].sigmoid()
        n, m = probs.shape[0], probs.shape[-1]
        label_map = torch.zeros(self.img_h, self.img_w, dtype=torch.int64)
        area = torch.zeros(n, dtype=torch.int64)
        extents = self._extents(boxes, m)

        num_chunks = math.ceil(n * self.img_h * self.img_w * 4 / self.mem_limit)  # PLANTED
        if self.fixed:
            num_chunks = n
        # chunks follow score order, so earlier chunks always win overlapping pixels
        for idx in torch.arange(n).chunk(num_chunks):
            x0, y0, x1, y1 = window = self._window(extents[idx])
            fg = self._paste(probs[idx], boxes[idx], window) > self.mask_thresh
            area[idx] = fg.sum((1, 2))
            first = fg.to(torch.uint8).argmax(0)  # best-scoring mask of the chunk at each pixel
            region = label_map[y0:y1, x0:x1]
            claim = fg.any(0) & (region == 0)
            region[claim] = idx[first[claim]] + 1

        visible = torch.bincount(label_map.flatten(), minlength=n + 1)[1:]
        instances = [
            {"id": i + 1, "score": round(float(scores[i]), 5),
             "box": [round(v, 2) for v in boxes[i].tolist()],
             "area": int(area[i]), "visible_area": int(visible[i])}
            for i in torch.nonzero(visible >= self.min_area).flatten().tolist()
        ]
        return label_map.to(torch.int16), instances


class ResultWriter:
    """Writes label maps as .npy files and instance metadata as JSON lines."""

    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.meta = open(os.path.join(out_dir, "instances.jsonl"), "w")
        self.count = 0
        self.checksum = 0

    def write(self, scene_id, label_map, instances):
        np.save(os.path.join(self.out_dir, f"{scene_id}.npy"), label_map.numpy())
        self.meta.write(json.dumps({"scene": scene_id, "instances": instances}) + "\n")
        self.count += 1
        self.checksum += int((label_map > 0).sum()) + len(instances)

    def close(self):
        self.meta.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-images", type=int, default=5)
    parser.add_argument("--height", type=int, default=540)
    parser.add_argument("--width", type=int, default=720)
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--fixed", action="store_true", help="use the faster variant")
    args = parser.parse_args()

    torch.manual_seed(0)
    reader = SceneReader(synthetic_scenes(args.num_images, args.height, args.width), args.batch_size)
    predictor = Predictor(InstanceSegmenter(), top_k=args.top_k)
    post = PostProcessor(args.height, args.width, fixed=args.fixed)

    out_dir = tempfile.mkdtemp(prefix="instseg_")
    try:
        writer = ResultWriter(out_dir)
        for ids, images in reader:
            for scene_id, pred in zip(ids, predictor(images)):
                label_map, instances = post(pred)
                writer.write(scene_id, label_map, instances)
        writer.close()
        print(f"wrote {writer.count} scenes to {out_dir} (checksum {writer.checksum})")
    finally:
        shutil.rmtree(out_dir)


if __name__ == "__main__":
    main()
