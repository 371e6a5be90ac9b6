"""DQN on a small corridor-navigation task with a hand-written environment.

The agent sees a one-hot encoding of its own cell and of the goal cell plus a
few noisy "sensor" readings; it learns to walk to the goal.  Transitions go into
a replay buffer stored as packed float rows.
"""
import argparse
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CorridorEnv:
    ACTIONS = (-1, 0, 1)

    def __init__(self, length=24, n_sensors=16, max_steps=80, seed=0):
        self.length = length
        self.n_sensors = n_sensors
        self.max_steps = max_steps
        self.rng = np.random.default_rng(seed)
        self.obs_dim = 2 * length + n_sensors

    def _obs(self):
        obs = np.zeros(self.obs_dim, dtype=np.float32)
        obs[self.pos] = 1.0
        obs[self.length + self.goal] = 1.0
        dist = (self.goal - self.pos) / self.length
        obs[2 * self.length:] = dist + 0.05 * self.rng.standard_normal(self.n_sensors)
        return obs

    def reset(self):
        self.pos = int(self.rng.integers(self.length))
        self.goal = int(self.rng.integers(self.length))
        self.t = 0
        return self._obs()

    def step(self, action):
        self.pos = min(max(self.pos + self.ACTIONS[action], 0), self.length - 1)
        self.t += 1
        reached = self.pos == self.goal
        reward = 1.0 if reached else -0.01
        done = reached or self.t >= self.max_steps
        return self._obs(), reward, done


class ReplayBuffer:
    """Rows are [obs | next_obs | action | reward | done]."""

    def __init__(self, capacity, obs_dim, preallocate=False):
        self.capacity = capacity
        self.obs_dim = obs_dim
        self.preallocate = preallocate
        self.size = 0
        width = 2 * obs_dim + 3
        self.rows = torch.zeros(capacity, width) if preallocate else torch.empty(0, width)

    def push(self, obs, action, reward, next_obs, done):
        row = torch.cat([torch.from_numpy(obs), torch.from_numpy(next_obs),
                         torch.tensor([action, reward, float(done)])])
        if self.preallocate:
            self.rows[self.size] = row
        else:
            self.rows = torch.cat([self.rows, row.unsqueeze(0)])  # PLANTED
        self.size += 1

    def sample(self, batch_size, gen):
        idx = torch.randint(0, self.size, (batch_size,), generator=gen)
        batch = self.rows[idx]
        d = self.obs_dim
        return (batch[:, :d], batch[:, 2 * d].long(), batch[:, 2 * d + 1],
                batch[:, d:2 * d], batch[:, 2 * d + 2])


def q_network(obs_dim, n_actions, hidden=64):
    return nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, n_actions))


def transitions(env, policy, total_steps, eps_schedule, rng):
    """Generator stepping the environment with an epsilon-greedy policy."""
    obs = env.reset()
    episode_return = 0.0
    for step in range(total_steps):
        if rng.random() < eps_schedule(step):
            action = int(rng.integers(len(env.ACTIONS)))
        else:
            with torch.no_grad():
                action = int(policy(torch.from_numpy(obs)).argmax())
        next_obs, reward, done = env.step(action)
        episode_return += reward
        yield step, obs, action, reward, next_obs, done, (episode_return if done else None)
        if done:
            obs, episode_return = env.reset(), 0.0
        else:
            obs = next_obs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--steps", type=int, default=12000)
    args = parser.parse_args()

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    env = CorridorEnv(seed=1)
    policy = q_network(env.obs_dim, len(env.ACTIONS))
    target = copy.deepcopy(policy)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    buffer = ReplayBuffer(args.steps, env.obs_dim, preallocate=args.fixed)
    gamma, batch_size, warmup, train_every, sync_every = 0.98, 64, 500, 4, 500
    eps = lambda s: max(0.05, 1.0 - s / (0.6 * args.steps))

    returns, losses = [], []
    for step, obs, action, reward, next_obs, done, ep_ret in transitions(env, policy, args.steps, eps, rng):
        buffer.push(obs, action, reward, next_obs, done)
        if ep_ret is not None:
            returns.append(ep_ret)
        if step >= warmup and step % train_every == 0:
            s, a, r, s2, d = buffer.sample(batch_size, gen)
            with torch.no_grad():
                target_q = r + gamma * (1 - d) * target(s2).max(dim=1).values
            q = policy(s).gather(1, a.unsqueeze(1)).squeeze(1)
            loss = F.smooth_l1_loss(q, target_q)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        if step % sync_every == 0:
            target.load_state_dict(policy.state_dict())

    print(f"episodes {len(returns)}  mean return (last 50) {np.mean(returns[-50:]):.4f}")
    print(f"mean loss (last 500 updates) {np.mean(losses[-500:]):.6f}")


if __name__ == "__main__":
    main()
