import torch
from torch import nn


class NeuralMF(nn.Module):
    """GMF + MLP towers fused into a single click logit (NeuMF style)."""

    def __init__(self, num_users, num_items, num_categories, num_regions, embed_dim, hidden_dims):
        super().__init__()
        self.user_gmf = nn.Embedding(num_users, embed_dim)
        self.item_gmf = nn.Embedding(num_items, embed_dim)
        self.user_mlp = nn.Embedding(num_users, embed_dim)
        self.item_mlp = nn.Embedding(num_items, embed_dim)
        self.hour_emb = nn.Embedding(24, 8)
        self.category_emb = nn.Embedding(num_categories, 8)
        self.region_emb = nn.Embedding(num_regions, 8)
        layers, d_in = [], 2 * embed_dim + 24
        for d in hidden_dims:
            layers += [nn.Linear(d_in, d), nn.ReLU()]
            d_in = d
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Linear(embed_dim + d_in, 1)
        for emb in (self.user_gmf, self.item_gmf, self.user_mlp, self.item_mlp):
            nn.init.normal_(emb.weight, std=0.05)

    def forward(self, user, item, hour, category, region):
        gmf = self.user_gmf(user) * self.item_gmf(item)
        context = [self.hour_emb(hour), self.category_emb(category), self.region_emb(region)]
        mlp = self.mlp(torch.cat([self.user_mlp(user), self.item_mlp(item)] + context, dim=-1))
        return self.head(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)
