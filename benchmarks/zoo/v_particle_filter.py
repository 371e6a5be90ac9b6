"""Bootstrap particle filter for multi-target tracking with range-bearing sensors.

Each target follows a coordinated-turn (CT) model with a mean-reverting turn rate;
two fixed sensors report range and bearing to every detected target.  Targets are
tracked by independent bootstrap filters that share one batched (K, N, 5) particle
tensor, so predict / update / resample run for all targets at once.

    python v_particle_filter.py --steps 500 --particles 768 --targets 24
"""
import argparse
import logging
import math
import time

import torch

log = logging.getLogger("pf")

# state layout
PX, PY, SPEED, HEADING, TURN = range(5)
STATE_DIM = 5
TWO_PI = 2.0 * math.pi


def wrap_angle(a):
    return torch.remainder(a + math.pi, TWO_PI) - math.pi


def coordinated_turn(x, dt, turn_tau):
    """Propagate CT states x[..., 5] by dt (noise free). Handles the omega -> 0 limit."""
    px, py, v, h, w = x.unbind(-1)
    wdt = w * dt
    small = wdt.abs() < 1e-4
    safe_w = torch.where(small, torch.ones_like(w), w)
    sin_h, cos_h = torch.sin(h), torch.cos(h)
    sin_h2, cos_h2 = torch.sin(h + wdt), torch.cos(h + wdt)
    dx = torch.where(small, v * dt * cos_h, v / safe_w * (sin_h2 - sin_h))
    dy = torch.where(small, v * dt * sin_h, v / safe_w * (cos_h - cos_h2))
    w_next = w * math.exp(-dt / turn_tau)
    return torch.stack((px + dx, py + dy, v, wrap_angle(h + wdt), w_next), dim=-1)


def range_bearing(pos, sensors):
    """pos: (..., 2), sensors: (S, 2) -> ranges and bearings, each (..., S)."""
    d = pos.unsqueeze(-2) - sensors
    rng = torch.sqrt(d[..., 0] ** 2 + d[..., 1] ** 2)
    brg = torch.atan2(d[..., 1], d[..., 0])
    return rng, brg


class Simulator:
    """Ground-truth trajectories and noisy detections for K manoeuvring targets."""

    def __init__(self, n_targets, sensors, dt, cfg, seed):
        self.gen = torch.Generator().manual_seed(seed)
        self.sensors, self.dt, self.cfg = sensors, dt, cfg
        g = self.gen
        k = n_targets
        r0 = 800.0 + 1200.0 * torch.rand(k, generator=g)
        a0 = TWO_PI * torch.rand(k, generator=g)
        self.x = torch.stack((
            r0 * torch.cos(a0), r0 * torch.sin(a0),
            8.0 + 10.0 * torch.rand(k, generator=g),          # speed m/s
            wrap_angle(a0 + math.pi + 0.6 * torch.randn(k, generator=g)),
            0.02 * torch.randn(k, generator=g),                # turn rate rad/s
        ), dim=-1)

    def initial_guess(self):
        noise = torch.tensor([40.0, 40.0, 3.0, 0.3, 0.02])
        return self.x + noise * torch.randn(self.x.shape, generator=self.gen)

    def step(self):
        c, g = self.cfg, self.gen
        x = coordinated_turn(self.x, self.dt, c.turn_tau)
        k = x.shape[0]
        x[:, SPEED] = (x[:, SPEED] + c.q_speed * math.sqrt(self.dt) * torch.randn(k, generator=g)).clamp(min=1.0)
        x[:, TURN] += c.q_turn * math.sqrt(self.dt) * torch.randn(k, generator=g)
        self.x = x
        rng, brg = range_bearing(x[:, :2], self.sensors)
        rng = rng + c.sigma_range * torch.randn(rng.shape, generator=g)
        brg = wrap_angle(brg + c.sigma_bearing * torch.randn(brg.shape, generator=g))
        detected = torch.rand(k, generator=g) < c.p_detect
        return x.clone(), rng, brg, detected


class ParticleFilter:
    """K independent bootstrap filters on a (K, N, 5) particle tensor."""

    def __init__(self, n_targets, n_particles, sensors, dt, cfg, seed, ess_frac=0.5):
        self.K, self.N = n_targets, n_particles
        self.sensors, self.dt, self.cfg = sensors, dt, cfg
        self.ess_threshold = ess_frac * n_particles
        self.gen = torch.Generator().manual_seed(seed)
        self.particles = torch.empty(n_targets, n_particles, STATE_DIM)
        self.log_w = torch.full((n_targets, n_particles), -math.log(n_particles))
        self.t = 0
        self.n_resamples = torch.zeros(n_targets, dtype=torch.long)
        self.trace = True        # per-target debug lines (visible with --verbose)

    def initialize(self, guess):
        spread = torch.tensor([60.0, 60.0, 4.0, 0.4, 0.03])
        eps = torch.randn(self.K, self.N, STATE_DIM, generator=self.gen)
        self.particles = guess.unsqueeze(1) + spread * eps
        self.particles[..., SPEED].clamp_(min=1.0)
        self.particles[..., HEADING] = wrap_angle(self.particles[..., HEADING])

    def predict(self):
        c = self.cfg
        x = coordinated_turn(self.particles, self.dt, c.turn_tau)
        eps = torch.randn(self.K, self.N, 3, generator=self.gen)
        sq = math.sqrt(self.dt)
        x[..., SPEED] = (x[..., SPEED] + c.q_speed * sq * eps[..., 0]).clamp(min=1.0)
        x[..., TURN] += c.q_turn * sq * eps[..., 1]
        # roughening: a little heading and position jitter keeps the cloud from
        # collapsing onto a few velocity hypotheses after resampling
        x[..., HEADING] = wrap_angle(x[..., HEADING] + c.q_heading * sq * eps[..., 2])
        x[..., :2] += c.q_pos * torch.randn(self.K, self.N, 2, generator=self.gen)
        self.particles = x
        self.t += 1

    def update(self, z_range, z_bearing, detected):
        c = self.cfg
        rng, brg = range_bearing(self.particles[..., :2], self.sensors)       # (K, N, S)
        r_res = (rng - z_range.unsqueeze(1)) / c.sigma_range
        b_res = wrap_angle(brg - z_bearing.unsqueeze(1)) / c.sigma_bearing
        ll = -0.5 * (r_res ** 2 + b_res ** 2).sum(-1)                        # (K, N)
        ll = torch.where(detected.unsqueeze(1), ll, torch.zeros_like(ll))
        log_w = self.log_w + ll
        self.log_w = log_w - torch.logsumexp(log_w, dim=1, keepdim=True)

    def effective_sample_size(self):
        return 1.0 / torch.exp(2.0 * self.log_w).sum(1)

    def estimate(self):
        w = torch.exp(self.log_w).unsqueeze(-1)                               # (K, N, 1)
        p = self.particles
        lin = (w * p[..., [PX, PY, SPEED, TURN]]).sum(1)
        h = p[..., HEADING]
        heading = torch.atan2((w[..., 0] * torch.sin(h)).sum(1), (w[..., 0] * torch.cos(h)).sum(1))
        mean = torch.stack((lin[:, 0], lin[:, 1], lin[:, 2], heading, lin[:, 3]), dim=-1)
        pos_var = (w * (p[..., :2] - mean[:, None, :2]) ** 2).sum(1)
        return mean, pos_var.sqrt()

    def resample(self, ess):
        """Systematic resampling for the targets whose ESS dropped below threshold."""
        need = ess < self.ess_threshold
        if not bool(need.any()):
            return
        cdf = torch.cumsum(torch.exp(self.log_w), dim=1)
        cdf[:, -1] = 1.0
        u0 = torch.rand(self.K, 1, generator=self.gen)
        u = (u0 + torch.arange(self.N)) / self.N
        idx = torch.searchsorted(cdf, u).clamp_(max=self.N - 1)
        keep = torch.arange(self.N).expand(self.K, self.N)
        idx = torch.where(need.unsqueeze(1), idx, keep)
        self.particles = torch.gather(self.particles, 1, idx.unsqueeze(-1).expand(-1, -1, STATE_DIM))
        uniform = torch.full_like(self.log_w, -math.log(self.N))
        self.log_w = torch.where(need.unsqueeze(1), uniform, self.log_w)
        self.n_resamples += need.long()

    def step(self, z_range, z_bearing, detected):
        self.predict()
        self.update(z_range, z_bearing, detected)
        mean, pos_std = self.estimate()
        ess = self.effective_sample_size()
        if self.trace:
            for k in range(self.K):
                log.debug(f"t={self.t} target {k}: det={bool(detected[k])} range={z_range[k]} "  # PLANTED
                          f"bearing={z_bearing[k]} ess={ess[k]:.0f} mean={mean[k]} pos_std={pos_std[k]}")
        self.resample(ess)
        return mean, pos_std, ess


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--particles", type=int, default=768)
    p.add_argument("--targets", type=int, default=24)
    p.add_argument("--dt", type=float, default=0.5)
    p.add_argument("--sigma-range", type=float, default=15.0)
    p.add_argument("--sigma-bearing", type=float, default=0.02)
    p.add_argument("--q-speed", type=float, default=0.5)
    p.add_argument("--q-turn", type=float, default=0.006)
    p.add_argument("--q-heading", type=float, default=0.05)
    p.add_argument("--q-pos", type=float, default=2.0)
    p.add_argument("--turn-tau", type=float, default=60.0)
    p.add_argument("--p-detect", type=float, default=0.9)
    p.add_argument("--burn-in", type=int, default=50, help="steps excluded from RMSE")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads; the per-step tensors are small, run seeds in parallel instead")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


def main():
    args = parse_args()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    sensors = torch.tensor([[0.0, 0.0], [1500.0, -400.0]])

    sim = Simulator(args.targets, sensors, args.dt, args, seed=args.seed)
    pf = ParticleFilter(args.targets, args.particles, sensors, args.dt, args, seed=args.seed + 1)
    pf.trace = args.verbose if args.fixed else True
    pf.initialize(sim.initial_guess())

    sq_pos = torch.zeros(args.targets, dtype=torch.float64)
    sq_vel = torch.zeros(args.targets, dtype=torch.float64)
    std_sum = torch.zeros(args.targets, dtype=torch.float64)
    ess_sum = torch.zeros(args.targets, dtype=torch.float64)
    n_eval = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for t in range(args.steps):
            truth, z_r, z_b, det = sim.step()
            mean, pos_std, ess = pf.step(z_r, z_b, det)
            if t < args.burn_in:
                continue
            err = mean[:, :2] - truth[:, :2]
            v_est = mean[:, SPEED:SPEED + 1] * torch.stack((torch.cos(mean[:, HEADING]), torch.sin(mean[:, HEADING])), -1)
            v_true = truth[:, SPEED:SPEED + 1] * torch.stack((torch.cos(truth[:, HEADING]), torch.sin(truth[:, HEADING])), -1)
            sq_pos += (err ** 2).sum(-1).double()
            sq_vel += ((v_est - v_true) ** 2).sum(-1).double()
            std_sum += pos_std.norm(dim=-1).double()
            ess_sum += ess.double()
            n_eval += 1
            if (t + 1) % 100 == 0:
                log.info("step %d/%d  mean pos RMSE so far %.2f m", t + 1, args.steps,
                         (sq_pos / n_eval).sqrt().mean().item())
    elapsed = time.perf_counter() - t0

    rmse_pos = (sq_pos / n_eval).sqrt()
    rmse_vel = (sq_vel / n_eval).sqrt()
    print(f"{args.targets} targets, {args.particles} particles, {args.steps} steps "
          f"({elapsed:.2f} s, {1e3 * elapsed / args.steps:.2f} ms/step)")
    print("target  pos_RMSE[m]  vel_RMSE[m/s]  mean_pos_std[m]  mean_ESS  resamples")
    for k in range(args.targets):
        print(f"{k:6d}  {rmse_pos[k].item():11.3f}  {rmse_vel[k].item():13.3f}  "
              f"{(std_sum[k] / n_eval).item():15.3f}  {(ess_sum[k] / n_eval).item():8.1f}  "
              f"{pf.n_resamples[k].item():9d}")
    print(f"overall position RMSE {rmse_pos.pow(2).mean().sqrt().item():.3f} m, "
          f"velocity RMSE {rmse_vel.pow(2).mean().sqrt().item():.3f} m/s")


if __name__ == "__main__":
    main()
