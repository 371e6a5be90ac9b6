"""Domain-randomised CartPole swarm trained with a small advantage actor-critic (A2C) agent.

N_ENVS cart-pole environments are simulated as torch tensors on the GPU; every environment has
its own pole mass, pole length and motor strength (domain randomisation). One actor-critic MLP
acts in all environments at once and, every ROLLOUT environment steps, does one A2C update
(n-step bootstrapped returns, entropy bonus, gradient clipping, Adam). At the end it prints the
mean return of finished episodes, a parameter checksum and the elapsed time.

Planted problem: CartPoleSwarm.step applies the physics integrator one environment at a time in a
Python loop. Each iteration runs ~30 elementwise ops on 0-d tensors, so every environment step
launches thousands of tiny kernels and the program is bound by per-op CPU/launch overhead while the
GPU idles. With --fixed the same integrator is called once on the whole [n_envs, 4] state batch
(it indexes with [..., k], so it works for one environment or for all of them): ~30 launches per
step, and bit-for-bit the same numbers.
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

N_ENVS = 128
ROLLOUT = 8
UPDATES = 48 if DEVICE == "cuda" else 20
GAMMA = 0.99
LR = 7e-4

GRAVITY = 9.8
MASS_CART = 1.0
TAU = 0.02
X_LIMIT = 2.4
THETA_LIMIT = 12 * 2 * math.pi / 360
MAX_EPISODE_STEPS = 200
OBS_SCALE = (1.0 / 2.4, 1.0 / 3.0, 1.0 / 0.21, 1.0 / 3.0)


def integrate(s, force, p):
    """One Euler step of cart-pole dynamics. s [..., 4], force [...] in {-1, 1}, p [..., 3]."""
    x, x_dot, th, th_dot = s[..., 0], s[..., 1], s[..., 2], s[..., 3]
    mass_pole, length, force_mag = p[..., 0], p[..., 1], p[..., 2]
    total_mass = MASS_CART + mass_pole
    pole_ml = mass_pole * length
    f = force * force_mag
    cos_t, sin_t = torch.cos(th), torch.sin(th)
    temp = (f + pole_ml * th_dot * th_dot * sin_t) / total_mass
    th_acc = (GRAVITY * sin_t - cos_t * temp) / (
        length * (4.0 / 3.0 - mass_pole * cos_t * cos_t / total_mass))
    x_acc = temp - pole_ml * th_acc * cos_t / total_mass
    return torch.stack([x + TAU * x_dot, x_dot + TAU * x_acc,
                        th + TAU * th_dot, th_dot + TAU * th_acc], dim=-1)


class CartPoleSwarm:
    def __init__(self, n_envs, seed=0):
        self.n_envs = n_envs
        self.gen = torch.Generator(device=DEVICE)
        self.gen.manual_seed(seed)
        lo = torch.tensor([0.05, 0.3, 7.0], device=DEVICE)
        hi = torch.tensor([0.2, 0.8, 13.0], device=DEVICE)
        self.params = lo + (hi - lo) * torch.rand(n_envs, 3, generator=self.gen, device=DEVICE)
        self.obs_scale = torch.tensor(OBS_SCALE, device=DEVICE)
        self.state = self._initial_states()
        self.t = torch.zeros(n_envs, device=DEVICE)
        self.ep_return = torch.zeros(n_envs, device=DEVICE)
        self.finished_return_sum = torch.zeros((), device=DEVICE)
        self.finished_count = torch.zeros((), device=DEVICE)

    def _initial_states(self):
        return (torch.rand(self.n_envs, 4, generator=self.gen, device=DEVICE) - 0.5) * 0.1

    def observe(self):
        return self.state * self.obs_scale

    def step(self, action):
        force = action.float() * 2.0 - 1.0
        if FIXED:
            self.state = integrate(self.state, force, self.params)
        else:
            for i in range(self.n_envs):  # PLANTED: per-environment Python loop, ~30 tiny kernel launches per env per step
                self.state[i] = integrate(self.state[i], force[i], self.params[i])
        self.t += 1
        x, th = self.state[:, 0], self.state[:, 2]
        failed = (x.abs() > X_LIMIT) | (th.abs() > THETA_LIMIT)
        done = failed | (self.t >= MAX_EPISODE_STEPS)
        reward = 1.0 - failed.float()
        self.ep_return += reward
        self.finished_return_sum += (self.ep_return * done).sum()
        self.finished_count += done.sum()
        fresh = self._initial_states()
        self.state = torch.where(done[:, None], fresh, self.state)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        self.ep_return = torch.where(done, torch.zeros_like(self.ep_return), self.ep_return)
        return self.observe(), reward, done


class ActorCritic(nn.Module):
    def __init__(self, obs_dim=4, n_actions=2, hidden=128):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.trunk(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def sample_actions(logits, gen):
    u = torch.rand(logits.shape, generator=gen, device=logits.device)
    return (logits - torch.log(-torch.log(u.clamp(1e-10, 1.0 - 1e-7)))).argmax(dim=-1)


def nstep_returns(rewards, dones, last_value, gamma):
    ret = last_value
    out = []
    for t in reversed(range(rewards.shape[0])):
        ret = rewards[t] + gamma * ret * (1.0 - dones[t].float())
        out.append(ret)
    return torch.stack(out[::-1])


def a2c_update(agent, opt, obs, actions, rewards, dones, last_obs):
    with torch.no_grad():
        _, last_value = agent(last_obs)
    returns = nstep_returns(rewards, dones, last_value, GAMMA)
    logits, values = agent(obs.flatten(0, 1))
    values = values.view_as(returns)
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(1, actions.flatten().unsqueeze(1)).view_as(returns)
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    adv = returns - values.detach()
    loss = -(logp * adv).mean() + 0.5 * F.mse_loss(values, returns) - 0.01 * entropy
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
    opt.step()
    return loss.detach()


def param_checksum(module):
    return sum(p.detach().double().abs().sum() for p in module.parameters()).item()


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def main():
    torch.manual_seed(0)
    env = CartPoleSwarm(N_ENVS, seed=1)
    agent = ActorCritic().to(DEVICE)
    opt = torch.optim.Adam(agent.parameters(), lr=LR)
    act_gen = torch.Generator(device=DEVICE)
    act_gen.manual_seed(2)

    sync()
    t0 = time.perf_counter()
    obs = env.observe()
    loss_sum = torch.zeros((), device=DEVICE)
    for update in range(UPDATES):
        buf_obs, buf_act, buf_rew, buf_done = [], [], [], []
        for _ in range(ROLLOUT):
            with torch.no_grad():
                logits, _ = agent(obs)
            action = sample_actions(logits, act_gen)
            next_obs, reward, done = env.step(action)
            buf_obs.append(obs)
            buf_act.append(action)
            buf_rew.append(reward)
            buf_done.append(done)
            obs = next_obs
        loss_sum += a2c_update(agent, opt, torch.stack(buf_obs), torch.stack(buf_act),
                               torch.stack(buf_rew), torch.stack(buf_done), obs)
        if (update + 1) % 16 == 0:
            n = env.finished_count.item()
            mean_ret = env.finished_return_sum.item() / max(n, 1.0)
            print(f"update {update + 1}: episodes {int(n)}, mean return {mean_ret:.2f}")
    sync()
    elapsed = time.perf_counter() - t0

    n = env.finished_count.item()
    print(f"env steps {UPDATES * ROLLOUT * N_ENVS}, episodes {int(n)}, "
          f"mean return {env.finished_return_sum.item() / max(n, 1.0):.4f}")
    print(f"loss sum {loss_sum.item():.6f}  param checksum {param_checksum(agent):.6f}")
    print(f"elapsed {elapsed:.2f} s")


if __name__ == "__main__":
    main()
