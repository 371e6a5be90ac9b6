"""PPO on a vectorised two-link reaching arm written in NumPy (an RL loop stepping a Python environment).

Each iteration collects a rollout from 128 arms, computes GAE advantages and runs
10 epochs of clipped-PPO updates on minibatches.
"""
import argparse

import numpy as np
import torch
from torch import nn


class ReacherEnv:
    """128 planar two-link arms; reward is minus the fingertip's distance to its target, minus effort."""

    def __init__(self, n, seed=0):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self):
        self.q = self.rng.uniform(-np.pi, np.pi, (self.n, 2))
        self.dq = np.zeros((self.n, 2))
        ang = self.rng.uniform(0, 2 * np.pi, self.n)
        rad = self.rng.uniform(0.3, 1.8, self.n)
        self.target = np.stack([rad * np.cos(ang), rad * np.sin(ang)], 1)
        return self.obs()

    def tip(self):
        a1, a12 = self.q[:, 0], self.q.sum(1)
        return np.stack([np.cos(a1) + np.cos(a12), np.sin(a1) + np.sin(a12)], 1)

    def obs(self):
        return np.concatenate([np.cos(self.q), np.sin(self.q), self.dq, self.target - self.tip()], 1)

    def step(self, torque):
        torque = np.clip(torque, -1, 1)
        self.dq = 0.95 * self.dq + 0.1 * torque
        self.q = self.q + 0.1 * self.dq
        dist = np.linalg.norm(self.target - self.tip(), axis=1)
        reward = -dist - 0.01 * (torque ** 2).sum(1)
        return self.obs(), reward


def as_tensor(x):
    return torch.as_tensor(x, dtype=torch.get_default_dtype())


class ActorCritic(nn.Module):
    def __init__(self, obs_dim=8, act_dim=2, hidden=256):
        super().__init__()
        self.pi = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                nn.Linear(hidden, act_dim))
        self.v = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                               nn.Linear(hidden, 1))
        self.log_std = nn.Parameter(torch.full((act_dim,), -0.5))

    def dist(self, obs):
        return torch.distributions.Normal(self.pi(obs), self.log_std.exp())


def collect(env, ac, obs, horizon):
    buf = {k: [] for k in ("obs", "act", "logp", "rew", "val")}
    with torch.no_grad():
        for _ in range(horizon):
            o = as_tensor(obs)
            d = ac.dist(o)
            a = d.sample()
            buf["obs"].append(o)
            buf["act"].append(a)
            buf["logp"].append(d.log_prob(a).sum(-1))
            buf["val"].append(ac.v(o).squeeze(-1))
            obs, r = env.step(a.numpy())
            buf["rew"].append(as_tensor(r))
        last_val = ac.v(as_tensor(obs)).squeeze(-1)
    return {k: torch.stack(v) for k, v in buf.items()}, last_val, obs


def gae(rew, val, last_val, gamma=0.99, lam=0.95):
    adv = torch.zeros_like(rew)
    running = torch.zeros_like(last_val)
    vals = torch.cat([val, last_val[None]])
    for t in reversed(range(len(rew))):
        delta = rew[t] + gamma * vals[t + 1] - vals[t]
        running = delta + gamma * lam * running
        adv[t] = running
    return adv, adv + val


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--fixed", action="store_true", help="keep torch's float32 default")
    args = ap.parse_args()
    if not args.fixed:
        torch.set_default_dtype(torch.float64)  # PLANTED
    torch.manual_seed(0)
    env = ReacherEnv(128)
    ac = ActorCritic()
    opt = torch.optim.Adam(ac.parameters(), lr=3e-4)
    obs = env.reset()
    for it in range(args.iterations):
        batch, last_val, obs = collect(env, ac, obs, horizon=64)
        adv, ret = gae(batch["rew"], batch["val"], last_val)
        flat = {k: v.flatten(0, 1) for k, v in batch.items()}
        adv, ret = adv.flatten(), ret.flatten()
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        for _ in range(10):
            for idx in torch.randperm(len(adv)).split(1024):
                d = ac.dist(flat["obs"][idx])
                ratio = (d.log_prob(flat["act"][idx]).sum(-1) - flat["logp"][idx]).exp()
                pg = -torch.min(ratio * adv[idx], ratio.clamp(0.8, 1.2) * adv[idx]).mean()
                vf = (ac.v(flat["obs"][idx]).squeeze(-1) - ret[idx]).pow(2).mean()
                opt.zero_grad()
                (pg + 0.5 * vf).backward()
                opt.step()
        print(f"iteration {it} mean reward {batch['rew'].mean():.3f} value loss {vf.item():.3f}")


if __name__ == "__main__":
    main()
