"""Offline evaluation of the activity classifier on a held-out set."""
import argparse
import time

import torch

from evalsuite.data import iter_batches, make_holdout_set
from evalsuite.metrics import ClassificationReport
from evalsuite.model import ActivityNet

NUM_CLASSES = 12
NUM_CHANNELS = 3
WINDOW = 16


def evaluate(model, batches, report):
    model.eval()
    with torch.inference_mode():
        for windows, labels in batches:
            logits = model(windows)
            report.update(logits, labels)
    return report.compute()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=600_000)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    windows, labels = make_holdout_set(args.samples, NUM_CHANNELS, WINDOW, NUM_CLASSES, seed=7)

    model = ActivityNet(NUM_CHANNELS, NUM_CLASSES)
    report = ClassificationReport(NUM_CLASSES, topk=3, vectorized=args.fixed)

    start = time.perf_counter()
    results = evaluate(model, iter_batches(windows, labels, args.batch_size), report)
    elapsed = time.perf_counter() - start

    print(f"evaluated {args.samples} windows in {elapsed:.2f}s")
    for name, value in results.items():
        print(f"  {name:>20s}: {value:.5f}")


if __name__ == "__main__":
    main()
