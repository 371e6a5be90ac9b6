"""Online multi-task engagement model with a routed mixture-of-experts trunk.

Events arrive from a simulated stream; an OnlineLearner updates on each micro-batch and
periodically reports holdout metrics and expert utilisation.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_USER_FEATS, N_ITEM_FEATS, N_CATEGORIES = 24, 16, 40


class EventStream:
    """Simulates impression logs: user/item features, item category and engagement outcomes."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        g = np.random.default_rng(1234)
        self.w_click = g.normal(0, 0.4, N_USER_FEATS + N_ITEM_FEATS)
        self.w_buy = g.normal(0, 0.4, N_USER_FEATS + N_ITEM_FEATS)
        self.w_ret = g.normal(0, 0.3, N_USER_FEATS)
        self.cat_bias = g.normal(0, 0.7, N_CATEGORIES)

    def batch(self, n):
        u = self.rng.normal(size=(n, N_USER_FEATS)).astype(np.float32)
        it = self.rng.normal(size=(n, N_ITEM_FEATS)).astype(np.float32)
        cat = self.rng.integers(0, N_CATEGORIES, n)
        z = np.concatenate([u, it], 1)
        inter = (u[:, :N_ITEM_FEATS] * it).sum(1) * 0.3
        p_click = 1 / (1 + np.exp(-(z @ self.w_click + inter + self.cat_bias[cat] - 0.5)))
        click = (self.rng.random(n) < p_click).astype(np.float32)
        p_buy = 1 / (1 + np.exp(-(z @ self.w_buy + 2 * inter - 2.5)))
        buy = click * (self.rng.random(n) < p_buy)
        like = click * (self.rng.random(n) < 1 / (1 + np.exp(-(1.5 * inter + self.cat_bias[cat]))))
        share = like * (self.rng.random(n) < 0.15 + 0.1 * np.tanh(inter))
        comment = click * (self.rng.random(n) < 0.08 + 0.05 * np.tanh(u[:, 0]))
        dwell = click * np.log1p(self.rng.gamma(2.0, 1 + np.abs(inter)))
        p_ret = 1 / (1 + np.exp(-(u @ self.w_ret + 0.8 * click + 0.5 * dwell - 1.0)))
        ret = (self.rng.random(n) < p_ret).astype(np.float32)
        to_t = torch.from_numpy
        labels = {"click": click, "like": like, "comment": comment, "share": share, "buy": buy,
                  "dwell": dwell, "return": ret}
        return to_t(u), to_t(it), to_t(cat), {k: to_t(v.astype(np.float32)) for k, v in labels.items()}


class Top2MoE(nn.Module):
    def __init__(self, dim, hidden, n_experts):
        super().__init__()
        self.n_experts = n_experts
        self.gate = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)) for _ in range(n_experts))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        probs = self.gate(x).softmax(-1)
        top_p, top_i = probs.topk(2, dim=-1)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            hit = top_i == e
            rows = hit.any(-1).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            w = (top_p * hit).sum(-1)[rows].unsqueeze(1)
            out = out.index_add(0, rows, w * expert(x[rows]))
        load = F.one_hot(top_i[:, 0], self.n_experts).float().mean(0)
        balance = self.n_experts * (load * probs.mean(0)).sum()
        return self.norm(x + out), balance, load


class EngagementModel(nn.Module):
    def __init__(self, dim=128, hidden=256, n_experts=8, n_layers=2):
        super().__init__()
        self.cat_emb = nn.Embedding(N_CATEGORIES, 16)
        self.inp = nn.Linear(N_USER_FEATS + N_ITEM_FEATS + 16, dim)
        self.moe = nn.ModuleList(Top2MoE(dim, hidden, n_experts) for _ in range(n_layers))
        self.heads = nn.ModuleDict({
            task: nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 1))
            for task in ("click", "like", "comment", "share", "buy", "dwell", "return")})

    def forward(self, u, it, cat):
        h = F.gelu(self.inp(torch.cat([u, it, self.cat_emb(cat)], 1)))
        balance, loads = 0.0, []
        for layer in self.moe:
            h, b, load = layer(h)
            balance = balance + b
            loads.append(load)
        return {k: head(h).squeeze(1) for k, head in self.heads.items()}, balance, loads


class OnlineLearner:
    task_weights = {"click": 1.0, "like": 0.5, "comment": 1.0, "share": 1.0, "buy": 2.0, "dwell": 0.5, "return": 0.5,
                    "balance": 0.01}

    def __init__(self, fixed=False, lr=1e-3):
        self.fixed = fixed
        self.model = EngagementModel()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=1e-4)
        self.load_ema = None

    def task_losses(self, batch):
        u, it, cat, y = batch
        out, balance, loads = self.model(u, it, cat)
        clicked = y["click"] > 0
        losses = {}
        for task in ("click", "return"):
            losses[task] = F.binary_cross_entropy_with_logits(out[task], y[task])
        for task in ("like", "comment", "share", "buy"):
            losses[task] = F.binary_cross_entropy_with_logits(out[task][clicked], y[task][clicked])
        losses["dwell"] = F.huber_loss(out["dwell"][clicked], y["dwell"][clicked])
        losses["balance"] = balance
        return losses, loads

    def update(self, batch):
        self.model.train()
        losses, loads = self.task_losses(batch)
        self.opt.zero_grad(set_to_none=True)
        if self.fixed:
            sum(self.task_weights[k] * v for k, v in losses.items()).backward()
        else:
            for name, loss in losses.items():
                (self.task_weights[name] * loss).backward(retain_graph=True)  # PLANTED
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        load = torch.stack(loads).detach()
        self.load_ema = load if self.load_ema is None else 0.9 * self.load_ema + 0.1 * load
        return {k: v.item() for k, v in losses.items()}

    @torch.no_grad()
    def evaluate(self, batch):
        self.model.eval()
        losses, _ = self.task_losses(batch)
        return {k: round(v.item(), 4) for k, v in losses.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.manual_seed(0)
    stream, holdout = EventStream(seed=1), EventStream(seed=99).batch(4096)
    learner = OnlineLearner(fixed=args.fixed)
    t0 = time.time()
    running = {}
    for step in range(1, args.steps + 1):
        stats = learner.update(stream.batch(1024))
        for k, v in stats.items():
            running[k] = 0.95 * running.get(k, v) + 0.05 * v
        if step % 20 == 0:
            util = learner.load_ema.max(1).values.tolist()
            print(f"step {step} train {{{', '.join(f'{k}: {v:.3f}' for k, v in running.items())}}} "
                  f"holdout {learner.evaluate(holdout)} max_expert_load {[round(x, 2) for x in util]} "
                  f"[{time.time() - t0:.1f}s]")


if __name__ == "__main__":
    main()
