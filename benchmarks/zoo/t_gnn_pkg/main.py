"""Node classification on a synthetic attributed SBM graph with GraphSAGE."""
import argparse
import time

import torch

from graph import build_graph
from model import GraphSAGE
from train import Trainer


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    g = p.add_argument_group("graph")
    g.add_argument("--num-nodes", type=int, default=20000)
    g.add_argument("--num-blocks", type=int, default=8)
    g.add_argument("--avg-degree", type=int, default=8)
    g.add_argument("--p-intra", type=float, default=0.3)
    g.add_argument("--raw-dim", type=int, default=384)
    g.add_argument("--feat-dim", type=int, default=384)
    g.add_argument("--signal", type=float, default=0.2)
    g.add_argument("--split", type=float, nargs=2, default=(0.1, 0.1), metavar=("TRAIN", "VAL"))
    m = p.add_argument_group("model / training")
    m.add_argument("--hidden", type=int, default=32)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--dropout", type=float, default=0.5)
    m.add_argument("--lr", type=float, default=0.05)
    m.add_argument("--weight-decay", type=float, default=5e-4)
    m.add_argument("--epochs", type=int, default=200)
    m.add_argument("--patience", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


def main():
    args = parse_args()
    t0 = time.perf_counter()
    data = build_graph(args.num_nodes, args.num_blocks, args.avg_degree, args.p_intra,
                       args.raw_dim, args.feat_dim, args.signal,
                       *args.split, args.seed, fixed=args.fixed)
    num_classes = int(data.y.max()) + 1
    print(f"graph: {data.y.numel()} nodes, {data.graph.col.numel()} directed edges, "
          f"{data.x.shape[1]} features, {num_classes} classes "
          f"(built in {time.perf_counter() - t0:.1f}s)")

    torch.manual_seed(args.seed)
    model = GraphSAGE(data.x.shape[1], args.hidden, num_classes,
                      num_layers=args.layers, dropout=args.dropout)
    print(f"model: {args.layers}-layer GraphSAGE, {sum(p.numel() for p in model.parameters())} parameters")

    trainer = Trainer(model, data, lr=args.lr, weight_decay=args.weight_decay,
                      patience=args.patience, max_epochs=args.epochs)
    t1, final = time.perf_counter(), trainer.fit()
    print(f"trained {len(trainer.history)} epochs in {time.perf_counter() - t1:.1f}s")
    print(f"best val loss {trainer.stopper.best:.4f} at epoch {trainer.stopper.best_epoch}")
    print(f"final: train acc {final['train_acc']:.4f}  val acc {final['val_acc']:.4f}  "
          f"test acc {final['test_acc']:.4f}")


if __name__ == "__main__":
    main()
