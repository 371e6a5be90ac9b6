"""Two-tower style matrix factorisation with a small MLP on the user side."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class TwoTowerMF(nn.Module):
    def __init__(self, n_users, n_items, dim=64):
        super().__init__()
        self.user_emb = nn.Embedding(n_users, dim, sparse=True)
        self.item_emb = nn.Embedding(n_items, dim, sparse=True)
        self.item_bias = nn.Embedding(n_items, 1, sparse=True)
        self.user_mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        nn.init.normal_(self.user_emb.weight, std=0.05)
        nn.init.normal_(self.item_emb.weight, std=0.05)
        nn.init.zeros_(self.item_bias.weight)

    def score(self, u, items):
        # u: [B], items: [B, K] -> [B, K]
        uvec = self.user_mlp(self.user_emb(u))
        ivec = self.item_emb(items)
        return torch.einsum("bd,bkd->bk", uvec, ivec) + self.item_bias(items).squeeze(-1)

    def bpr_loss(self, u, pos, neg, l2=1e-5):
        s_pos = self.score(u, pos[:, None])
        s_neg = self.score(u, neg)
        loss = -F.logsigmoid(s_pos - s_neg).mean()
        reg = l2 * (self.user_emb(u).pow(2).sum() + self.item_emb(pos).pow(2).sum()) / u.numel()
        return loss + reg

    def optimizers(self, lr):
        sparse = [self.user_emb.weight, self.item_emb.weight, self.item_bias.weight]
        return [torch.optim.SGD(sparse, lr=lr * 20),
                torch.optim.Adam(self.user_mlp.parameters(), lr=lr)]


@torch.no_grad()
def recall_at_k(model, u, pos, k=20):
    hits = 0.0
    for s in range(0, u.numel(), 256):
        uvec = model.user_mlp(model.user_emb(u[s:s + 256]))
        scores = uvec @ model.item_emb.weight.T + model.item_bias.weight.T
        top = scores.topk(k, dim=1).indices
        hits += (top == pos[s:s + 256, None]).any(1).float().sum().item()
    return hits / u.numel()
