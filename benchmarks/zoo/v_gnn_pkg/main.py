"""Node classification on a synthetic citation network with a hand-written GCN."""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from graph import make_citation_graph   # noqa: E402
from model import GCN                    # noqa: E402
from train import evaluate, fit          # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--papers", type=int, default=10000)
    p.add_argument("--refs", type=float, default=6.0, help="mean references per paper")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(args.seed)

    t0 = time.perf_counter()
    graph = make_citation_graph(num_papers=args.papers, refs_per_paper=args.refs,
                                seed=args.seed)
    deg = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes) - 1
    same = (graph.y[graph.edge_index[0]] == graph.y[graph.edge_index[1]]).float().mean()
    print(f"graph: {graph.num_nodes} papers, {graph.edge_index.size(1)} edges (incl. self-loops), "
          f"{graph.x.size(1)} features, {graph.num_classes} topics | "
          f"mean degree {deg.float().mean():.1f}, max {deg.max().item()}, "
          f"edge homophily {same:.2f} | built in {time.perf_counter() - t0:.1f}s")
    print(f"split: train {len(graph.train_idx)} / val {len(graph.val_idx)} / test {len(graph.test_idx)}")

    model = GCN(graph.x.size(1), args.hidden, graph.num_classes, num_layers=args.layers,
                dropout=args.dropout, contiguous_index=not args.fixed)
    print(f"model: {args.layers}-layer GCN, hidden {args.hidden}, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters")

    best, _ = fit(model, graph, epochs=args.epochs, lr=args.lr,
                        weight_decay=args.weight_decay)
    final = evaluate(model, graph)
    print(f"best epoch {best['epoch']}: val {best['val']:.3f} test {best['test']:.3f}")
    print(f"restored model: train {final['train']:.3f} val {final['val']:.3f} "
          f"test {final['test']:.3f} val_loss {final['val_loss']:.4f}")
    print(f"total {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
