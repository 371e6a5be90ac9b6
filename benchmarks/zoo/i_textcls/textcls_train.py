"""Train a TF-IDF weighted EmbeddingBag classifier on a synthetic topic corpus."""
import argparse
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from textcls.corpus import make_corpus
from textcls.data import FeatureDataset, TfidfCollate
from textcls.features import IdfTable, NgramHasher
from textcls.model import TfidfBagClassifier

VOCAB, BUCKETS, CLASSES = 4000, 1 << 13, 6


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for feat_ids, offsets, weights, labels in loader:
            correct += (model(feat_ids, offsets, weights).argmax(1) == labels).sum().item()
            total += len(labels)
    model.train()
    return correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--docs", type=int, default=7000)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()

    torch.manual_seed(0)
    t0 = time.perf_counter()
    docs, labels = make_corpus(args.docs, VOCAB, CLASSES, seed=0)
    hasher = NgramHasher(VOCAB, BUCKETS)
    features = [hasher(d) for d in docs]
    split = int(0.85 * len(features))
    idf_table = IdfTable(features[:split], hasher.n_features)
    collate = TfidfCollate(idf_table, reuse_idf=args.fixed)

    train_loader = DataLoader(FeatureDataset(features[:split], labels[:split]), batch_size=64,
                              shuffle=True, collate_fn=collate, generator=torch.Generator().manual_seed(1))
    val_loader = DataLoader(FeatureDataset(features[split:], labels[split:]), batch_size=256,
                            collate_fn=collate)

    model = TfidfBagClassifier(hasher.n_features, CLASSES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    for epoch in range(args.epochs):
        running = 0.0
        for feat_ids, offsets, weights, y in train_loader:
            loss = F.cross_entropy(model(feat_ids, offsets, weights), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item() * len(y)
        print(f"epoch {epoch}: train loss {running / split:.4f}  val acc {evaluate(model, val_loader):.4f}")
    print(f"done in {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()
