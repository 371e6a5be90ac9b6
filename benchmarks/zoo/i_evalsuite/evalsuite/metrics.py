import torch
import torch.nn.functional as F


class ClassificationReport:
    """Streaming accumulator for accuracy, top-k, macro-F1, NLL and calibration error."""

    def __init__(self, num_classes, topk=3, num_bins=15, vectorized=False):
        self.num_classes = num_classes
        self.topk = topk
        self.num_bins = num_bins
        self.vectorized = vectorized
        self.confusion = torch.zeros(num_classes, num_classes, dtype=torch.long)
        self.topk_hits = 0
        self.nll_sum = 0.0
        self.count = 0
        self.bin_conf = torch.zeros(num_bins, dtype=torch.float64)
        self.bin_correct = torch.zeros(num_bins, dtype=torch.float64)
        self.bin_count = torch.zeros(num_bins, dtype=torch.float64)

    def update(self, logits, targets):
        probs = logits.softmax(dim=-1)
        confidence, preds = probs.max(dim=-1)

        if self.vectorized:
            flat = targets * self.num_classes + preds
            self.confusion += torch.bincount(flat, minlength=self.num_classes ** 2).view(
                self.num_classes, self.num_classes)
        else:
            for target, pred in zip(targets, preds):
                self.confusion[target, pred] += 1  # PLANTED

        top = logits.topk(self.topk, dim=-1).indices
        self.topk_hits += (top == targets[:, None]).any(dim=-1).sum().item()
        self.nll_sum += F.cross_entropy(logits, targets, reduction="sum").item()
        self.count += targets.numel()

        bins = (confidence * self.num_bins).long().clamp_(max=self.num_bins - 1)
        correct = (preds == targets).double()
        self.bin_conf.index_add_(0, bins, confidence.double())
        self.bin_correct.index_add_(0, bins, correct)
        self.bin_count.index_add_(0, bins, torch.ones_like(correct))

    def compute(self):
        cm = self.confusion.double()
        tp = cm.diag()
        precision = tp / cm.sum(0).clamp(min=1)
        recall = tp / cm.sum(1).clamp(min=1)
        f1 = 2 * precision * recall / (precision + recall).clamp(min=1e-12)
        nonempty = self.bin_count > 0
        gap = (self.bin_conf[nonempty] - self.bin_correct[nonempty]).abs()
        ece = gap.sum() / self.count
        return {
            "accuracy": (tp.sum() / self.count).item(),
            f"top{self.topk}": self.topk_hits / self.count,
            "macro_f1": f1.mean().item(),
            "worst_class_recall": recall.min().item(),
            "nll": self.nll_sum / self.count,
            "ece": ece.item(),
        }
