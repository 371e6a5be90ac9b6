"""Semi-supervised node classification with a GCN on a synthetic community graph.

usage: python main.py [--fixed] [--epochs N]
"""
import argparse
import time

import torch
import torch.nn.functional as F

from graph import stochastic_block_graph, gcn_norm_adjacency
from model import GCN, accuracy


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=6000)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--degree", type=int, default=12)
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


def train(args):
    torch.manual_seed(0)
    data = stochastic_block_graph(args.nodes, args.classes, args.features, args.degree)
    print(f"graph: {data.num_nodes} nodes, {data.edge_index.shape[1]} directed edges")

    adj = gcn_norm_adjacency(data.edge_index, data.num_nodes, sparse=args.fixed)

    model = GCN(args.features, args.hidden, args.classes)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)

    best_val, best_state = 0.0, None
    t0 = time.time()
    for epoch in range(1, args.epochs + 1):
        model.train()
        opt.zero_grad()
        out = model(data.x, adj)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()

        if epoch % 5 == 0:
            model.eval()
            with torch.no_grad():
                out = model(data.x, adj)
            val_acc = accuracy(out, data.y, data.val_mask)
            if val_acc > best_val:
                best_val = val_acc
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
            print(f"epoch {epoch:4d} loss {loss.item():.4f} val_acc {val_acc:.3f}")

    model.load_state_dict(best_state)
    model.eval()
    with torch.no_grad():
        out = model(data.x, adj)
    test_acc = accuracy(out, data.y, data.test_mask)
    print(f"best val {best_val:.3f}  test acc {test_acc:.3f}  ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    train(parse_args())
