"""Offline evaluation of a dense single-stage detector.

Raw head outputs (box distances, objectness, class logits per anchor point) are
decoded, post-processed with class-aware NMS and scored with VOC-style AP@0.5.
The head outputs are synthesised so the script runs without a checkpoint.
"""
import argparse
import time
from collections import defaultdict

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
parser.add_argument("--images", type=int, default=24)
args = parser.parse_args()

IMG = 416
STRIDES = (8, 16, 32)
NUM_CLASSES = 20


def make_anchor_points(img=IMG, strides=STRIDES):
    pts, strd = [], []
    for s in strides:
        n = img // s
        ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        pts.append(torch.stack([xs, ys], -1).reshape(-1, 2).float().add(0.5).mul(s))
        strd.append(torch.full((n * n,), float(s)))
    return torch.cat(pts), torch.cat(strd)


def box_area(b):
    return (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)


def box_iou(a, b):
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    return inter / (box_area(a)[:, None] + box_area(b)[None, :] - inter + 1e-9)


def nms(boxes, scores, iou_thr):
    order = scores.sort(descending=True).indices
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        ious = box_iou(boxes[i].unsqueeze(0), boxes[order[1:]]).squeeze(0)
        order = order[1:][ious <= iou_thr]
    return torch.stack(keep) if keep else torch.empty(0, dtype=torch.long)


def batched_nms(boxes, scores, labels, iou_thr):
    offsets = labels.to(boxes.dtype) * (boxes.max() + 1)
    return nms(boxes + offsets[:, None], scores, iou_thr)


class FakeDetectorHead:
    """Produces raw per-anchor outputs that resemble a reasonably trained model."""

    def __init__(self, points, strides, seed=0):
        self.points, self.strides = points, strides
        self.g = torch.Generator().manual_seed(seed)
        cell = torch.div(points, 96, rounding_mode="floor")
        self.bg_class = ((cell[:, 0] * 7 + cell[:, 1] * 3) % NUM_CLASSES).long()

    def sample_image(self):
        g = self.g
        n_obj = int(torch.randint(3, 12, (1,), generator=g))
        wh = torch.exp(torch.empty(n_obj, 2).uniform_(3.0, 5.6, generator=g))
        ctr = torch.rand(n_obj, 2, generator=g) * IMG
        gt = torch.cat([ctr - wh / 2, ctr + wh / 2], 1).clamp(0, IMG)
        gt_cls = torch.randint(0, NUM_CLASSES, (n_obj,), generator=g)

        n = len(self.points)
        size = self.strides[:, None] * torch.empty(n, 2).uniform_(3.0, 8.0, generator=g)
        dist = torch.cat([size / 2, size / 2], 1) * torch.empty(n, 4).uniform_(0.6, 1.4, generator=g)
        obj = torch.randn(n, generator=g) * 1.5 - 5.0
        cls = torch.randn(n, NUM_CLASSES, generator=g) - 2.0
        cls[torch.arange(n), self.bg_class] += 1.5

        inside = ((self.points[:, None] > gt[None, :, :2]) & (self.points[:, None] < gt[None, :, 2:])).all(-1)
        scale_ok = (gt[:, 2:] - gt[:, :2]).max(1).values[None, :] / self.strides[:, None]
        pos = inside & (scale_ok > 3) & (scale_ok < 16)
        has, which = pos.any(1), pos.float().argmax(1)
        tgt = gt[which[has]]
        p = self.points[has]
        jitter = 1 + 0.12 * torch.randn(int(has.sum()), 4, generator=g)
        dist[has] = torch.cat([p - tgt[:, :2], tgt[:, 2:] - p], 1).clamp(min=1) * jitter
        obj[has] = torch.randn(int(has.sum()), generator=g) + 2.0
        cls[has, gt_cls[which[has]]] += 3.0
        return dist, obj, cls, gt, gt_cls


class PostProcessor:
    def __init__(self, points, score_thr=0.05, iou_thr=0.6, max_det=100):
        self.points = points
        self.score_thr, self.iou_thr, self.max_det = score_thr, iou_thr, max_det

    def decode(self, dist):
        return torch.cat([self.points - dist[:, :2], self.points + dist[:, 2:]], 1).clamp(0, IMG)

    def __call__(self, dist, obj, cls):
        boxes = self.decode(dist)
        probs = torch.sigmoid(obj)[:, None] * torch.sigmoid(cls)
        scores, labels = probs.max(1)
        cand = torch.nonzero(scores > self.score_thr).squeeze(1) if args.fixed else torch.arange(len(scores))  # PLANTED
        keep = cand[batched_nms(boxes[cand], scores[cand], labels[cand], self.iou_thr)]
        keep = keep[scores[keep] > self.score_thr][: self.max_det]
        return boxes[keep], scores[keep], labels[keep]


def match_detections(boxes, scores, labels, gt, gt_cls, iou_thr=0.5):
    """Greedy matching in score order; returns true-positive flags per detection."""
    tp = torch.zeros(len(boxes), dtype=torch.bool)
    if len(gt) == 0 or len(boxes) == 0:
        return tp
    ious = box_iou(boxes, gt)
    ious[labels[:, None] != gt_cls[None, :]] = 0
    used = torch.zeros(len(gt), dtype=torch.bool)
    for d in scores.argsort(descending=True).tolist():
        best_iou, j = ious[d].masked_fill(used, 0).max(0)
        if best_iou >= iou_thr:
            tp[d] = True
            used[j] = True
    return tp


def average_precision(scores, tp, n_gt):
    if n_gt == 0:
        return float("nan")
    order = scores.argsort(descending=True)
    tp = tp[order].float()
    ctp, cfp = tp.cumsum(0), (1 - tp).cumsum(0)
    recall = ctp / n_gt
    precision = ctp / (ctp + cfp).clamp(min=1)
    precision = torch.flip(torch.cummax(torch.flip(precision, [0]), 0).values, [0])
    r = torch.cat([torch.zeros(1), recall])
    return float(((r[1:] - r[:-1]) * precision).sum())


def main():
    points, strides = make_anchor_points()
    head = FakeDetectorHead(points, strides, seed=0)
    post = PostProcessor(points)
    per_cls = defaultdict(lambda: {"scores": [], "tp": [], "n_gt": 0})
    n_dets = 0
    t0 = time.perf_counter()
    for _ in range(args.images):
        dist, obj, cls, gt, gt_cls = head.sample_image()
        boxes, scores, labels = post(dist, obj, cls)
        n_dets += len(boxes)
        tp = match_detections(boxes, scores, labels, gt, gt_cls)
        for c in range(NUM_CLASSES):
            m = labels == c
            per_cls[c]["scores"].append(scores[m])
            per_cls[c]["tp"].append(tp[m])
            per_cls[c]["n_gt"] += int((gt_cls == c).sum())
    aps = []
    for c in range(NUM_CLASSES):
        d = per_cls[c]
        ap = average_precision(torch.cat(d["scores"]), torch.cat(d["tp"]), d["n_gt"])
        if ap == ap:
            aps.append(ap)
    print(f"images {args.images}  detections/img {n_dets / args.images:.1f}  mAP@0.5 {sum(aps) / len(aps):.4f}")
    print(f"elapsed {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()
