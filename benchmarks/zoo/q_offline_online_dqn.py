"""Offline-to-online DQN on a synthetic 2-D navigation task.

The replay buffer is seeded with a large batch of logged (behaviour-policy)
transitions, then the agent keeps training online while it collects new
episodes. Everything is written as plain functions around a numpy replay
buffer; only the Q-network is a class.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OBS_DIM = 48
N_ACTIONS = 5          # stay, up, down, left, right
N_SENSORS = OBS_DIM - 6
FIXED = False
MOVES = np.array([[0, 0], [0, 1], [0, -1], [-1, 0], [1, 0]], dtype=np.float32) * 0.05


class QNet(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden=128):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, n_actions),
        )

    def forward(self, x):
        return self.net(x)


# --------------------------------------------------------------------------- env
def make_env(rng):
    beacons = rng.uniform(-1, 1, size=(N_SENSORS, 2)).astype(np.float32)
    return {"beacons": beacons, "pos": None, "vel": None, "goal": None, "t": 0}


def observe(env):
    d = env["beacons"] - env["pos"]
    sensors = np.exp(-4.0 * (d * d).sum(1))
    return np.concatenate([env["pos"], env["vel"], env["goal"] - env["pos"], sensors]).astype(np.float32)


def env_reset(env, rng):
    env["pos"] = rng.uniform(-1, 1, 2).astype(np.float32)
    env["vel"] = np.zeros(2, np.float32)
    env["goal"] = rng.uniform(-1, 1, 2).astype(np.float32)
    env["t"] = 0
    return observe(env)


def env_step(env, action):
    env["vel"] = 0.8 * env["vel"] + MOVES[action]
    env["pos"] = np.clip(env["pos"] + env["vel"], -1, 1)
    env["t"] += 1
    dist = float(np.linalg.norm(env["goal"] - env["pos"]))
    reached = dist < 0.1
    reward = -dist + (10.0 if reached else 0.0)
    done = reached or env["t"] >= 200
    return observe(env), reward, done


# ----------------------------------------------------------------------- buffer
def make_buffer(capacity):
    return {
        "obs": np.zeros((capacity, OBS_DIM), np.float32),
        "act": np.zeros(capacity, np.int64),
        "rew": np.zeros(capacity, np.float32),
        "next_obs": np.zeros((capacity, OBS_DIM), np.float32),
        "done": np.zeros(capacity, np.float32),
        "size": 0, "ptr": 0, "capacity": capacity,
    }


def add_transition(buf, o, a, r, o2, d):
    i = buf["ptr"]
    buf["obs"][i], buf["act"][i], buf["rew"][i] = o, a, r
    buf["next_obs"][i], buf["done"][i] = o2, d
    buf["ptr"] = (i + 1) % buf["capacity"]
    buf["size"] = min(buf["size"] + 1, buf["capacity"])


def load_logged_transitions(buf, n, rng):
    """Synthesise a logged dataset from a noisy behaviour policy (vectorised)."""
    pos = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    vel = rng.normal(0, 0.05, (n, 2)).astype(np.float32)
    goal = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    beacons = rng.uniform(-1, 1, (N_SENSORS, 2)).astype(np.float32)
    act = rng.integers(0, N_ACTIONS, n)
    vel2 = 0.8 * vel + MOVES[act]
    pos2 = np.clip(pos + vel2, -1, 1)

    def obs_of(p, v):
        d = beacons[None] - p[:, None]
        s = np.exp(-4.0 * (d * d).sum(-1))
        return np.concatenate([p, v, goal - p, s], 1).astype(np.float32)

    dist = np.linalg.norm(goal - pos2, axis=1)
    done = (dist < 0.1).astype(np.float32)
    buf["obs"][:n] = obs_of(pos, vel)
    buf["next_obs"][:n] = obs_of(pos2, vel2)
    buf["act"][:n] = act
    buf["rew"][:n] = -dist + 10.0 * done
    buf["done"][:n] = done
    buf["size"] = buf["ptr"] = n


def gather_column(buf, key, idx):
    if FIXED:
        return torch.from_numpy(buf[key][idx])
    n = buf["size"]
    return torch.tensor(buf[key][:n])[idx]  # PLANTED


def sample_batch(buf, batch_size, rng):
    idx = rng.integers(0, buf["size"], size=batch_size)
    return {k: gather_column(buf, k, idx) for k in ("obs", "act", "rew", "next_obs", "done")}


# ---------------------------------------------------------------------- agent
def select_action(qnet, obs, eps, rng):
    if rng.random() < eps:
        return int(rng.integers(N_ACTIONS))
    with torch.no_grad():
        q = qnet(torch.from_numpy(obs).unsqueeze(0))
    return int(q.argmax(1))


def dqn_update(qnet, target, opt, batch, gamma):
    q = qnet(batch["obs"]).gather(1, batch["act"].unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        # Double DQN target
        a2 = qnet(batch["next_obs"]).argmax(1, keepdim=True)
        q2 = target(batch["next_obs"]).gather(1, a2).squeeze(1)
        y = batch["rew"] + gamma * (1.0 - batch["done"]) * q2
    loss = F.smooth_l1_loss(q, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(qnet.parameters(), 10.0)
    opt.step()
    return loss.detach()


def soft_update(target, source, tau):
    with torch.no_grad():
        for pt, ps in zip(target.parameters(), source.parameters()):
            pt.lerp_(ps, tau)


def run_episode(env, qnet, target, opt, buf, rng, eps, cfg):
    obs = env_reset(env, rng)
    ep_ret, losses, done = 0.0, [], False
    while not done:
        a = select_action(qnet, obs, eps, rng)
        obs2, r, done = env_step(env, a)
        add_transition(buf, obs, a, r, obs2, float(done))
        ep_ret += r
        obs = obs2
        if env["t"] % cfg["update_every"] == 0:
            batch = sample_batch(buf, cfg["batch_size"], rng)
            losses.append(dqn_update(qnet, target, opt, batch, cfg["gamma"]))
            soft_update(target, qnet, cfg["tau"])
    mean_loss = torch.stack(losses).mean().item() if losses else float("nan")
    return ep_ret, mean_loss


def evaluate(env, qnet, rng, n_episodes=5):
    rets = []
    for _ in range(n_episodes):
        obs, done, ret = env_reset(env, rng), False, 0.0
        while not done:
            a = select_action(qnet, obs, 0.0, rng)
            obs, r, done = env_step(env, a)
            ret += r
        rets.append(ret)
    return float(np.mean(rets))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--logged", type=int, default=150_000)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    global FIXED
    FIXED = args.fixed
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg = {"batch_size": 128, "gamma": 0.97, "tau": 0.01, "update_every": 2}

    env = make_env(rng)
    buf = make_buffer(capacity=300_000)
    load_logged_transitions(buf, args.logged, rng)

    qnet = QNet(OBS_DIM, N_ACTIONS)
    target = QNet(OBS_DIM, N_ACTIONS)
    target.load_state_dict(qnet.state_dict())
    opt = torch.optim.Adam(qnet.parameters(), lr=3e-4)

    t0 = time.perf_counter()
    for ep in range(args.episodes):
        eps = max(0.05, 0.5 * (1 - ep / args.episodes))
        ret, loss = run_episode(env, qnet, target, opt, buf, rng, eps, cfg)
        if ep % 5 == 0 or ep == args.episodes - 1:
            print(f"ep {ep:3d}  return {ret:8.2f}  loss {loss:.4f}  buffer {buf['size']}")
    score = evaluate(env, qnet, rng)
    checksum = sum(p.double().sum().item() for p in qnet.parameters())
    print(f"eval return {score:.3f}  param checksum {checksum:.6f}  "
          f"train time {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
