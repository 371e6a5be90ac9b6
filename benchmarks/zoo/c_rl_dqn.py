"""DQN on a hand-written cart-pole style environment (pure Python physics).

Usage: python rl_dqn.py [--fixed]
"""
import argparse
import copy
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CartPole:
    """Minimal cart-pole dynamics, written the way people copy it from gym."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.gravity, self.masscart, self.masspole = 9.8, 1.0, 0.1
        self.length, self.force_mag, self.tau = 0.5, 10.0, 0.02
        self.reset()

    def reset(self):
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        self.t = 0
        return np.array(self.state, dtype=np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        costh, sinth = math.cos(theta), math.sin(theta)
        total_mass = self.masscart + self.masspole
        pml = self.masspole * self.length
        temp = (force + pml * theta_dot ** 2 * sinth) / total_mass
        thetaacc = (self.gravity * sinth - costh * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costh ** 2 / total_mass))
        xacc = temp - pml * thetaacc * costh / total_mass
        x += self.tau * x_dot
        x_dot += self.tau * xacc
        theta += self.tau * theta_dot
        theta_dot += self.tau * thetaacc
        self.state = [x, x_dot, theta, theta_dot]
        self.t += 1
        done = abs(x) > 2.4 or abs(theta) > 0.21 or self.t >= 200
        return np.array(self.state, dtype=np.float32), 1.0, done


class QNet(nn.Module):
    def __init__(self, obs_dim=4, n_actions=2, hidden=128):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.head = nn.Linear(hidden, n_actions)

    def forward(self, x):
        return self.head(self.body(x))


class Replay:
    def __init__(self, cap, obs_dim=4):
        self.obs = np.zeros((cap, obs_dim), np.float32)
        self.nxt = np.zeros((cap, obs_dim), np.float32)
        self.act = np.zeros(cap, np.int64)
        self.rew = np.zeros(cap, np.float32)
        self.done = np.zeros(cap, np.float32)
        self.cap, self.n, self.i = cap, 0, 0

    def add(self, o, a, r, o2, d):
        self.obs[self.i], self.act[self.i], self.rew[self.i] = o, a, r
        self.nxt[self.i], self.done[self.i] = o2, d
        self.i = (self.i + 1) % self.cap
        self.n = min(self.n + 1, self.cap)

    def sample(self, rng, bs):
        idx = rng.integers(0, self.n, bs)
        return (torch.from_numpy(self.obs[idx]), torch.from_numpy(self.act[idx]),
                torch.from_numpy(self.rew[idx]), torch.from_numpy(self.nxt[idx]),
                torch.from_numpy(self.done[idx]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--steps", type=int, default=16000)
    args = ap.parse_args()

    torch.manual_seed(0)
    np_rng = np.random.default_rng(0)
    env = CartPole(seed=0)
    q = QNet()
    target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    buf = Replay(50_000)
    gamma, bs, target_every, train_every = 0.99, 64, 1000, 4

    obs = env.reset()
    ep_ret, returns = 0.0, []
    t0 = time.time()
    for step in range(args.steps):
        eps = max(0.05, 1.0 - step / 8000)
        if np_rng.random() < eps:
            action = int(np_rng.integers(0, 2))
        else:
            with torch.no_grad():
                action = int(q(torch.from_numpy(obs)[None]).argmax(1).item())
        nxt, r, done = env.step(action)
        buf.add(obs, action, r, nxt, float(done))
        ep_ret += r
        obs = nxt
        if done:
            returns.append(ep_ret)
            ep_ret, obs = 0.0, env.reset()

        if buf.n >= 500 and step % train_every == 0:
            o, a, rw, o2, d = buf.sample(np_rng, bs)
            with torch.no_grad():
                tgt = rw + gamma * (1 - d) * target(o2).max(1).values
            qsa = q(o).gather(1, a[:, None]).squeeze(1)
            loss = F.smooth_l1_loss(qsa, tgt)
            opt.zero_grad()
            loss.backward()
            opt.step()
        # keep the target network in sync with the online network
        if not args.fixed or step % target_every == 0: target = copy.deepcopy(q)  # PLANTED
    dt = time.time() - t0
    print(f"episodes={len(returns)} last10={np.mean(returns[-10:]):.1f} time={dt:.2f}s")


if __name__ == "__main__":
    main()
