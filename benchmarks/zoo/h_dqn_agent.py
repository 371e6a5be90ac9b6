"""DQN on a small continuous 'reach the goal' navigation task.

The environment is a point robot on a 2-D plane that must reach a randomly
placed goal while avoiding a slowly moving obstacle.  The observation is the
robot state plus the current and previous 64-ray range scans (walls +
obstacle), so the agent can infer the obstacle's motion.  Discrete actions
push the robot in one of 5 directions (incl. no-op).
"""
import argparse
import copy
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ReachEnv:
    n_rays = 64
    obs_dim = 8 + 2 * n_rays
    obstacle_radius = 0.15
    n_actions = 5
    _moves = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.float32)

    def __init__(self, seed=0, max_steps=100):
        self.rng = np.random.default_rng(seed)
        self.max_steps = max_steps
        ang = np.linspace(0, 2 * np.pi, self.n_rays, endpoint=False)
        self.ray_dirs = np.stack([np.cos(ang), np.sin(ang)], axis=1)

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, 2).astype(np.float32)
        self.vel = np.zeros(2, dtype=np.float32)
        self.goal = self.rng.uniform(-1, 1, 2).astype(np.float32)
        self.obstacle = self.rng.uniform(-1, 1, 2).astype(np.float32)
        self.t = 0
        self.prev_scan = self._scan()
        return self._obs()

    def _scan(self):
        d = self.ray_dirs
        with np.errstate(divide="ignore", invalid="ignore"):
            tw = np.where(d > 0, (1.2 - self.pos) / d, (-1.2 - self.pos) / d)
        dist = np.min(np.where(np.isfinite(tw), tw, np.inf), axis=1)
        rel = self.obstacle - self.pos
        b = d @ rel
        disc = b ** 2 - (rel @ rel - self.obstacle_radius ** 2)
        hit = (disc > 0) & (b > 0)
        t_obs = np.where(hit, b - np.sqrt(np.abs(disc)), np.inf)
        return np.minimum(dist, t_obs).clip(0, 3.0) / 3.0

    def _obs(self):
        scan = self._scan()
        obs = np.concatenate([self.pos, self.vel, self.goal - self.pos,
                              self.obstacle - self.pos, scan, self.prev_scan])
        self.prev_scan = scan
        return obs.astype(np.float32)

    def step(self, action):
        self.vel = 0.8 * self.vel + 0.05 * self._moves[action]
        self.pos = np.clip(self.pos + self.vel, -1.2, 1.2)
        self.obstacle += 0.01 * np.array([math.cos(self.t / 10), math.sin(self.t / 10)], dtype=np.float32)
        self.t += 1
        d_goal = float(np.linalg.norm(self.goal - self.pos))
        d_obs = float(np.linalg.norm(self.obstacle - self.pos))
        reward = -d_goal - (1.0 if d_obs < self.obstacle_radius else 0.0)
        done = d_goal < 0.1
        if done:
            reward += 10.0
        truncated = self.t >= self.max_steps
        return self._obs(), reward, done, truncated


class ReplayBuffer:
    def __init__(self, capacity, obs_dim, preallocate=False):
        self.capacity = capacity
        self.preallocate = preallocate
        self.size = 0
        self.ptr = 0
        if preallocate:
            self.obs = torch.zeros(capacity, obs_dim)
            self.next_obs = torch.zeros(capacity, obs_dim)
            self.act = torch.zeros(capacity, dtype=torch.long)
            self.rew = torch.zeros(capacity)
            self.done = torch.zeros(capacity)
        else:
            self.obs = torch.empty(0, obs_dim)
            self.next_obs = torch.empty(0, obs_dim)
            self.act = torch.empty(0, dtype=torch.long)
            self.rew = torch.empty(0)
            self.done = torch.empty(0)

    def push(self, obs, act, rew, next_obs, done):
        obs, next_obs = torch.from_numpy(obs), torch.from_numpy(next_obs)
        if self.preallocate:
            i = self.ptr
            self.obs[i], self.next_obs[i] = obs, next_obs
            self.act[i], self.rew[i], self.done[i] = act, rew, float(done)
            self.ptr = (self.ptr + 1) % self.capacity
        else:
            c = self.capacity
            self.obs = torch.cat([self.obs, obs[None]])[-c:]  # PLANTED
            self.next_obs = torch.cat([self.next_obs, next_obs[None]])[-c:]
            self.act = torch.cat([self.act, torch.tensor([act])])[-c:]
            self.rew = torch.cat([self.rew, torch.tensor([rew])])[-c:]
            self.done = torch.cat([self.done, torch.tensor([float(done)])])[-c:]
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size):
        idx = torch.randint(0, self.size, (batch_size,))
        return self.obs[idx], self.act[idx], self.rew[idx], self.next_obs[idx], self.done[idx]

    def __len__(self):
        return self.size


class QNet(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_actions))

    def forward(self, x):
        return self.net(x)


class DQNAgent:
    def __init__(self, env, capacity=100_000, batch_size=64, gamma=0.97, lr=1e-3,
                 train_every=4, target_sync=500, preallocate=False):
        self.env = env
        self.q = QNet(env.obs_dim, env.n_actions)
        self.target = copy.deepcopy(self.q)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=lr)
        self.buffer = ReplayBuffer(capacity, env.obs_dim, preallocate)
        self.batch_size, self.gamma = batch_size, gamma
        self.train_every, self.target_sync = train_every, target_sync
        self.steps = 0

    def epsilon(self):
        return max(0.05, 1.0 - self.steps / 5_500)

    @torch.no_grad()
    def act(self, obs):
        if random.random() < self.epsilon():
            return random.randrange(self.env.n_actions)
        return int(self.q(torch.from_numpy(obs)[None]).argmax(dim=1))

    def update(self):
        obs, act, rew, next_obs, done = self.buffer.sample(self.batch_size)
        q = self.q(obs).gather(1, act[:, None]).squeeze(1)
        with torch.no_grad():
            target = rew + self.gamma * (1 - done) * self.target(next_obs).max(dim=1).values
        loss = F.smooth_l1_loss(q, target)
        self.opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), 10.0)
        self.opt.step()
        return loss.item()

    def train(self, total_steps, warmup=1000):
        obs = self.env.reset()
        ep_return, returns, losses = 0.0, [], []
        while self.steps < total_steps:
            a = self.act(obs)
            next_obs, r, done, trunc = self.env.step(a)
            self.buffer.push(obs, a, r, next_obs, done)
            ep_return += r
            obs = next_obs
            self.steps += 1
            if done or trunc:
                returns.append(ep_return)
                ep_return, obs = 0.0, self.env.reset()
            if self.steps > warmup and self.steps % self.train_every == 0:
                losses.append(self.update())
            if self.steps % self.target_sync == 0:
                self.target.load_state_dict(self.q.state_dict())
            if self.steps % 2000 == 0:
                recent = np.mean(returns[-20:]) if returns else float("nan")
                print(f"step {self.steps:6d} eps {self.epsilon():.2f} "
                      f"return(20) {recent:8.2f} loss {np.mean(losses[-200:]):.4f} "
                      f"buffer {len(self.buffer)}")
        return returns


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=7_000)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    agent = DQNAgent(ReachEnv(seed=0), preallocate=args.fixed)
    returns = agent.train(args.steps)
    print(f"episodes {len(returns)}  final mean return {np.mean(returns[-50:]):.2f}")


if __name__ == "__main__":
    main()
