"""Average precision at IoU 0.5 of a detector's saved predictions (a COCO-style evaluation, one class).

Predictions and ground truth are synthetic here (ground-truth boxes jittered, plus false positives),
as they would be loaded from the detector's output file.
"""
import argparse

import torch


def box_iou(a, b):
    """Pairwise IoU of boxes a (N, 4) and b (M, 4) in (x1, y1, x2, y2) form: (N, M)."""
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def single_box_iou(box, gts):
    """IoU of one box (4,) with every ground-truth box (M, 4)."""
    x1 = torch.maximum(box[0], gts[:, 0])
    y1 = torch.maximum(box[1], gts[:, 1])
    x2 = torch.minimum(box[2], gts[:, 2])
    y2 = torch.minimum(box[3], gts[:, 3])
    inter = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    area = (box[2] - box[0]) * (box[3] - box[1])
    return inter / (area + (gts[:, 2] - gts[:, 0]) * (gts[:, 3] - gts[:, 1]) - inter)


def synthetic_detections(n_images, seed=0):
    g = torch.Generator().manual_seed(seed)
    images = []
    for _ in range(n_images):
        m = int(torch.randint(3, 15, (1,), generator=g))
        xy = torch.rand(m, 2, generator=g) * 500
        gts = torch.cat([xy, xy + 20 + torch.rand(m, 2, generator=g) * 100], 1)
        hits = gts[torch.rand(m, generator=g) < 0.8]
        hits = hits + torch.randn(hits.shape, generator=g) * 6
        fxy = torch.rand(m * 2, 2, generator=g) * 500
        false = torch.cat([fxy, fxy + 20 + torch.rand(m * 2, 2, generator=g) * 100], 1)
        boxes = torch.cat([hits, false])
        scores = torch.cat([0.5 + 0.5 * torch.rand(len(hits), generator=g), 0.7 * torch.rand(len(false), generator=g)])
        images.append((boxes, scores, gts))
    return images


def average_precision(images, fixed, thresh=0.5):
    scored, n_gt = [], 0
    for boxes, scores, gts in images:
        n_gt += len(gts)
        order = scores.argsort(descending=True)
        if fixed:
            ious = box_iou(boxes[order], gts)
        else:
            ious = torch.stack([single_box_iou(b, gts) for b in boxes[order]])  # PLANTED
        taken = [False] * len(gts)
        for row, s in zip(ious.tolist(), scores[order].tolist()):
            best = max(range(len(row)), key=lambda j: -1 if taken[j] else row[j])
            hit = row[best] >= thresh and not taken[best]
            if hit:
                taken[best] = True
            scored.append((s, hit))
    scored.sort(key=lambda t: -t[0])
    tp = torch.tensor([h for _, h in scored], dtype=torch.float32).cumsum(0)
    precision = tp / torch.arange(1, len(scored) + 1)
    recall = tp / n_gt
    # area under the interpolated precision-recall curve
    precision = precision.flip(0).cummax(0).values.flip(0)
    return float((recall.diff(prepend=torch.zeros(1)) * precision).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--fixed", action="store_true", help="pairwise IoU in one broadcast")
    args = ap.parse_args()
    images = synthetic_detections(args.images)
    print(f"AP@0.5 over {args.images} images: {average_precision(images, args.fixed):.4f}")


if __name__ == "__main__":
    main()
