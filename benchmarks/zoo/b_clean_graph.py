"""Link prediction on a social-style graph: a two-layer GraphSAGE encoder and a dot-product decoder.

Aggregation is one index_add_ over the edge list per layer; negative edges are sampled uniformly.
A well-written graph workload: vectorised message passing, float32, one optimizer step per epoch.
"""
import argparse

import torch
from torch import nn


def community_graph(n, n_comm, avg_degree, seed=0):
    """90% of each node's edges go to members of its own community, the rest anywhere."""
    g = torch.Generator().manual_seed(seed)
    comm = torch.randint(0, n_comm, (n,), generator=g)
    members = comm.argsort()
    size = torch.bincount(comm, minlength=n_comm)
    start = size.cumsum(0) - size
    m = n * avg_degree
    src = torch.randint(0, n, (m,), generator=g)
    c = comm[src]
    within = members[start[c] + (torch.rand(m, generator=g) * size[c]).long()]
    dst = torch.where(torch.rand(m, generator=g) < 0.9, within, torch.randint(0, n, (m,), generator=g))
    feats = torch.randn(n, 64, generator=g) + nn.functional.one_hot(comm % 64, 64).float()
    return feats, src, dst


class SAGE(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin_self = nn.Linear(d_in, d_out)
        self.lin_nbr = nn.Linear(d_in, d_out)

    def forward(self, h, src, dst, inv_deg):
        agg = torch.zeros_like(h).index_add_(0, dst, h[src]) * inv_deg
        return self.lin_self(h) + self.lin_nbr(agg)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = SAGE(64, 128), SAGE(128, 64)

    def forward(self, x, src, dst, inv_deg):
        return self.l2(torch.relu(self.l1(x, src, dst, inv_deg)), src, dst, inv_deg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=8000)
    ap.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args()
    torch.manual_seed(0)
    x, src, dst = community_graph(args.nodes, 200, 6)
    perm = torch.randperm(len(src))
    n_test = len(src) // 10
    test_e, train_e = perm[:n_test], perm[n_test:]
    tr_src, tr_dst = torch.cat([src[train_e], dst[train_e]]), torch.cat([dst[train_e], src[train_e]])
    inv_deg = 1 / torch.bincount(tr_dst, minlength=args.nodes).clamp(min=1).float().unsqueeze(1)
    enc = Encoder()
    opt = torch.optim.Adam(enc.parameters(), lr=3e-3)
    for epoch in range(args.epochs):
        z = enc(x, tr_src, tr_dst, inv_deg)
        pos = (z[src[train_e]] * z[dst[train_e]]).sum(1)
        neg_src, neg_dst = torch.randint(0, args.nodes, (2, len(train_e)))
        neg = (z[neg_src] * z[neg_dst]).sum(1)
        loss = nn.functional.binary_cross_entropy_with_logits(torch.cat([pos, neg]),
                                                              torch.cat([torch.ones_like(pos), torch.zeros_like(neg)]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if epoch % 10 == 9:
            with torch.inference_mode():
                z = enc(x, tr_src, tr_dst, inv_deg)
                pos = (z[src[test_e]] * z[dst[test_e]]).sum(1)
                neg = (z[torch.randint(0, args.nodes, (n_test,))] * z[torch.randint(0, args.nodes, (n_test,))]).sum(1)
                auc = (pos[:, None] > neg[None, :2000]).float().mean()
            print(f"epoch {epoch + 1} loss {loss.item():.4f} test AUC {auc:.3f}")


if __name__ == "__main__":
    main()
