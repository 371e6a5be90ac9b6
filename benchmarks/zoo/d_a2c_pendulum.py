"""Advantage actor-critic on a batch of torch-simulated pendulums.

The environment is fully vectorised: N pendulums are stepped at once with
semi-implicit Euler. The agent collects fixed-length rollouts, estimates
advantages with GAE and performs one A2C update per rollout.
"""
import argparse
import math
import time

import torch
import torch.nn as nn


class PendulumBatch:
    """N independent pendulums, discrete torque actions."""

    def __init__(self, n_envs, max_steps=200, seed=0):
        self.n = n_envs
        self.max_steps = max_steps
        self.g = torch.Generator().manual_seed(seed)
        self.torques = torch.linspace(-2.0, 2.0, 5)
        self.dt, self.m, self.l, self.grav = 0.05, 1.0, 1.0, 10.0
        self.theta = torch.zeros(n_envs)
        self.omega = torch.zeros(n_envs)
        self.t = torch.zeros(n_envs, dtype=torch.long)
        self.reset_idx(torch.ones(n_envs, dtype=torch.bool))

    def reset_idx(self, mask):
        k = int(mask.sum())
        if k == 0:
            return
        self.theta[mask] = (torch.rand(k, generator=self.g) * 2 - 1) * math.pi
        self.omega[mask] = torch.rand(k, generator=self.g) * 2 - 1
        self.t[mask] = 0

    def obs(self):
        return torch.stack([self.theta.cos(), self.theta.sin(), self.omega / 8.0], dim=1)

    def step(self, action):
        u = self.torques[action]
        th_norm = ((self.theta + math.pi) % (2 * math.pi)) - math.pi
        cost = th_norm ** 2 + 0.1 * self.omega ** 2 + 0.001 * u ** 2
        acc = 3 * self.grav / (2 * self.l) * self.theta.sin() + 3.0 / (self.m * self.l ** 2) * u
        self.omega = (self.omega + acc * self.dt).clamp(-8.0, 8.0)
        self.theta = self.theta + self.omega * self.dt
        self.t += 1
        done = self.t >= self.max_steps
        self.reset_idx(done)
        return self.obs(), -cost / 10.0, done.float()


class ActorCritic(nn.Module):
    def __init__(self, obs_dim=3, n_actions=5, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(),
                                  nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.body(x)
        return self.pi(h), self.v(h).squeeze(-1)


def compute_gae(rewards, values, dones, last_value, gamma, lam, fixed=False):
    """rewards/values/dones: [T, N]; returns advantages and returns, [T, N]."""
    T, N = rewards.shape
    adv = torch.zeros(T, N)
    gae = torch.zeros(N)
    next_value = last_value
    for t in reversed(range(T)):
        nonterminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        if fixed:
            gae = delta + gamma * lam * nonterminal * gae
        else:
            gae = torch.stack([delta[i] + gamma * lam * nonterminal[i] * gae[i] for i in range(N)])  # PLANTED
        adv[t] = gae
        next_value = values[t]
    return adv, adv + values


def collect_rollout(env, model, obs, horizon):
    obs_buf, act_buf, rew_buf, done_buf, val_buf = [], [], [], [], []
    with torch.no_grad():
        for _ in range(horizon):
            logits, value = model(obs)
            action = torch.distributions.Categorical(logits=logits).sample()
            next_obs, reward, done = env.step(action)
            obs_buf.append(obs)
            act_buf.append(action)
            rew_buf.append(reward)
            done_buf.append(done)
            val_buf.append(value)
            obs = next_obs
        _, last_value = model(obs)
    batch = dict(obs=torch.stack(obs_buf), act=torch.stack(act_buf),
                 rew=torch.stack(rew_buf), done=torch.stack(done_buf),
                 val=torch.stack(val_buf), last_val=last_value)
    return batch, obs


def a2c_update(model, opt, batch, adv, ret, ent_coef=0.01, vf_coef=0.5):
    T, N = batch["act"].shape
    logits, values = model(batch["obs"].reshape(T * N, -1))
    dist = torch.distributions.Categorical(logits=logits)
    logp = dist.log_prob(batch["act"].reshape(-1))
    adv = adv.reshape(-1)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = -(logp * adv).mean()
    v_loss = (values - ret.reshape(-1)).pow(2).mean()
    loss = pg_loss + vf_coef * v_loss - ent_coef * dist.entropy().mean()
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    return loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--n-envs", type=int, default=2048)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--updates", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)

    env = PendulumBatch(args.n_envs)
    model = ActorCritic()
    opt = torch.optim.Adam(model.parameters(), lr=7e-4)
    obs = env.obs()
    t0 = time.perf_counter()
    recent = []
    for upd in range(1, args.updates + 1):
        batch, obs = collect_rollout(env, model, obs, args.horizon)
        adv, ret = compute_gae(batch["rew"], batch["val"], batch["done"],
                               batch["last_val"], gamma=0.99, lam=0.95, fixed=args.fixed)
        loss = a2c_update(model, opt, batch, adv, ret)
        recent.append(batch["rew"].mean().item())
        if upd % 2 == 0:
            print(f"update {upd:4d}  loss {loss:+.4f}  mean reward {sum(recent) / len(recent):+.4f}")
            recent.clear()
    print(f"done in {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()
