"""A detector's post-processing: greedy NMS in a Python loop over every anchor, and the score
threshold applied only to what NMS kept (the loop runs thousands of passes where a few hundred
candidates pass the threshold)."""
import torch

torch.manual_seed(0)


def iou(a, b):
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def nms(boxes, scores, thr):
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        order = order[1:][iou(boxes[i][None], boxes[order[1:]])[0] <= thr]
    return torch.stack(keep)


def postprocess(boxes, scores, score_thr=0.5):
    cand = torch.arange(len(scores))  # PLANTED
    keep = cand[nms(boxes[cand], scores[cand], 0.5)]
    keep = keep[scores[keep] > score_thr]
    return boxes[keep]


if __name__ == "__main__":
    kept = 0
    for _ in range(4):
        xy = torch.rand(1500, 2) * 400
        boxes = torch.cat([xy, xy + 8 + torch.rand(1500, 2) * 8], 1)
        kept += len(postprocess(boxes, torch.rand(1500) ** 4))
    print("kept", kept)
