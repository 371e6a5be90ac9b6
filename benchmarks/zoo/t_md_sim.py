"""Lennard-Jones fluid, NVT molecular dynamics in reduced units.

Velocity-Verlet integration, cell-list construction of a Verlet neighbour
list (cutoff + skin), periodic boundaries with the minimum-image convention
and a Berendsen thermostat.  Thermodynamic diagnostics are printed every
``--log-every`` steps and a summary with time averages at the end.

    python t_md_sim.py --cells 8 --density 0.8442 --temperature 1.0
"""
import argparse
import math
import time
from dataclasses import dataclass

import torch

FIXED = False


@dataclass
class State:
    pos: torch.Tensor        # (N, 3), wrapped into [0, box)
    vel: torch.Tensor        # (N, 3)
    force: torch.Tensor      # (N, 3)
    box: float
    t: float = 0.0
    step: int = 0


@dataclass
class NeighborList:
    i: torch.Tensor          # (P,) first particle of each pair, i < j
    j: torch.Tensor          # (P,)
    ref_pos: torch.Tensor    # positions at the time of the build
    n_builds: int = 0


def fcc_lattice(n_cells: int, density: float, dtype=torch.float32):
    """4 * n_cells**3 particles on an fcc lattice filling a cubic box."""
    n = 4 * n_cells ** 3
    box = (n / density) ** (1.0 / 3.0)
    a = box / n_cells
    basis = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.5, 0.0],
                          [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]], dtype=dtype)
    g = torch.arange(n_cells, dtype=dtype)
    cells = torch.stack(torch.meshgrid(g, g, g, indexing="ij"), dim=-1).reshape(-1, 3)
    pos = (cells[:, None, :] + basis[None, :, :]).reshape(-1, 3) * a
    return pos, box


def minimum_image(dr: torch.Tensor, box: float) -> torch.Tensor:
    return dr - box * torch.round(dr / box)


def wrap(pos: torch.Tensor, box: float) -> torch.Tensor:
    return torch.remainder(pos, box)


def maxwell_boltzmann(n: int, temperature: float, gen: torch.Generator, dtype=torch.float32):
    v = torch.randn(n, 3, generator=gen, dtype=dtype) * math.sqrt(temperature)
    v -= v.mean(dim=0, keepdim=True)            # zero total momentum
    t_now = (v * v).sum() / (3 * n - 3)
    return v * torch.sqrt(temperature / t_now)


_OFFSETS = torch.stack(torch.meshgrid(*(torch.arange(-1, 2),) * 3, indexing="ij"),
                       dim=-1).reshape(-1, 3)


def build_neighbor_list(pos: torch.Tensor, box: float, r_list: float) -> tuple:
    """Half neighbour list (i < j, r < r_list) from a periodic cell list."""
    n = pos.shape[0]
    nc = int(box // r_list)
    if nc < 3:
        raise ValueError(f"box {box:.2f} too small for r_list {r_list:.2f}")
    cell = torch.floor(pos * (nc / box)).long().clamp_(0, nc - 1)
    cid = (cell[:, 0] * nc + cell[:, 1]) * nc + cell[:, 2]

    # bucket particles into a padded (n_cells, max_occupancy) table
    order = torch.argsort(cid, stable=True)
    counts = torch.bincount(cid, minlength=nc ** 3)
    starts = torch.cumsum(counts, 0) - counts
    sorted_cid = cid[order]
    slot = torch.arange(n) - starts[sorted_cid]
    table = torch.full((nc ** 3, int(counts.max())), -1, dtype=torch.long)
    table[sorted_cid, slot] = order

    # candidates: all particles in the 27 surrounding cells
    nbr = (cell[:, None, :] + _OFFSETS[None, :, :]) % nc
    nbr_id = (nbr[..., 0] * nc + nbr[..., 1]) * nc + nbr[..., 2]
    cand = table[nbr_id].reshape(n, -1)
    owner = torch.arange(n)[:, None].expand_as(cand)
    upper = cand > owner                       # drops padding (-1) and double counting
    ii, jj = owner[upper], cand[upper]

    dr = minimum_image(pos[jj] - pos[ii], box)
    keep = (dr * dr).sum(dim=1) < r_list * r_list
    ii, jj = ii[keep], jj[keep]
    # canonical (i, j) order: contiguous gathers and reproducible force sums
    perm = torch.argsort(ii * n + jj)
    return ii[perm], jj[perm]


def needs_rebuild(pos: torch.Tensor, nlist: NeighborList, box: float, skin: float) -> bool:
    disp = pos - nlist.ref_pos  # PLANTED
    if FIXED:
        disp = minimum_image(disp, box)
    max_disp = torch.sqrt((disp * disp).sum(dim=1).max())
    return bool(max_disp > 0.5 * skin)


def lj_forces(pos: torch.Tensor, box: float, nlist: NeighborList, rc: float):
    """Truncated-and-shifted LJ (epsilon = sigma = 1). Returns forces, PE, virial."""
    dr = minimum_image(pos[nlist.i] - pos[nlist.j], box)
    r2 = (dr * dr).sum(dim=1)
    inside = r2 < rc * rc
    inv_r2 = torch.where(inside, 1.0 / r2, torch.zeros_like(r2))
    inv_r6 = inv_r2 ** 3
    f_over_r = 24.0 * (2.0 * inv_r6 * inv_r6 - inv_r6) * inv_r2
    fij = f_over_r[:, None] * dr
    force = torch.zeros_like(pos)
    force.index_add_(0, nlist.i, fij)
    force.index_add_(0, nlist.j, -fij)

    e_shift = 4.0 * (rc ** -12 - rc ** -6)
    pair_e = torch.where(inside, 4.0 * (inv_r6 * inv_r6 - inv_r6) - e_shift,
                         torch.zeros_like(r2))
    virial = (f_over_r * r2).sum(dtype=torch.float64)
    return force, pair_e.sum(dtype=torch.float64), virial


def kinetic_energy(vel: torch.Tensor) -> torch.Tensor:
    return 0.5 * (vel * vel).sum(dtype=torch.float64)


def instantaneous_temperature(vel: torch.Tensor) -> torch.Tensor:
    n = vel.shape[0]
    return 2.0 * kinetic_energy(vel) / (3 * n - 3)


def berendsen_scale(vel, target_t, dt, tau):
    t_now = instantaneous_temperature(vel)
    lam = torch.sqrt(1.0 + dt / tau * (target_t / t_now - 1.0))
    return vel * lam.clamp(0.8, 1.25)


def velocity_verlet_step(state: State, nlist: NeighborList, args):
    dt = args.dt
    state.vel = state.vel + 0.5 * dt * state.force
    state.pos = wrap(state.pos + dt * state.vel, state.box)

    if needs_rebuild(state.pos, nlist, state.box, args.skin):
        nlist.i, nlist.j = build_neighbor_list(state.pos, state.box, args.rc + args.skin)
        nlist.ref_pos = state.pos.clone()
        nlist.n_builds += 1

    state.force, pe, virial = lj_forces(state.pos, state.box, nlist, args.rc)
    state.vel = state.vel + 0.5 * dt * state.force
    if args.tau_t > 0:
        state.vel = berendsen_scale(state.vel, args.temperature, dt, args.tau_t)
    state.t += dt
    state.step += 1
    return pe, virial


def thermo(state: State, pe: torch.Tensor, virial: torch.Tensor) -> dict:
    n = state.pos.shape[0]
    vol = state.box ** 3
    ke = kinetic_energy(state.vel)
    temp = instantaneous_temperature(state.vel)
    pressure = (n * temp + virial / 3.0) / vol
    return {"t": state.t, "step": state.step, "ke": ke.item() / n, "pe": pe.item() / n,
            "etot": (ke + pe).item() / n, "temp": temp.item(), "press": pressure.item()}


def parse_args():
    p = argparse.ArgumentParser(description="LJ fluid NVT molecular dynamics")
    p.add_argument("--cells", type=int, default=7, help="fcc unit cells per box edge")
    p.add_argument("--density", type=float, default=0.8442)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--dt", type=float, default=0.005)
    p.add_argument("--t-end", type=float, default=2.0)
    p.add_argument("--rc", type=float, default=2.5)
    p.add_argument("--skin", type=float, default=0.4)
    p.add_argument("--tau-t", type=float, default=0.1, help="Berendsen coupling time")
    p.add_argument("--equil", type=float, default=0.5, help="time excluded from averages")
    p.add_argument("--log-every", type=int, default=40)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


def main():
    global FIXED
    args = parse_args()
    FIXED = args.fixed
    gen = torch.Generator().manual_seed(args.seed)

    pos, box = fcc_lattice(args.cells, args.density)
    n = pos.shape[0]
    vel = maxwell_boltzmann(n, args.temperature, gen)
    print(f"LJ fluid: N={n}  rho={args.density}  box={box:.3f}  T*={args.temperature}  "
          f"rc={args.rc}  skin={args.skin}  dt={args.dt}  t_end={args.t_end}")

    pos = wrap(pos, box)
    ii, jj = build_neighbor_list(pos, box, args.rc + args.skin)
    nlist = NeighborList(ii, jj, pos.clone(), n_builds=1)
    force, pe, virial = lj_forces(pos, box, nlist, args.rc)
    state = State(pos=pos, vel=vel, force=force, box=box)

    sums = {"pe": 0.0, "temp": 0.0, "press": 0.0, "etot": 0.0}
    n_samples = 0
    t0 = time.perf_counter()
    print(f"{'step':>7} {'t':>7} {'KE/N':>9} {'PE/N':>9} {'E/N':>9} {'T':>7} {'P':>8}")
    while state.t < args.t_end - 1e-9:
        pe, virial = velocity_verlet_step(state, nlist, args)
        if state.step % args.log_every == 0:
            d = thermo(state, pe, virial)
            print(f"{d['step']:7d} {d['t']:7.3f} {d['ke']:9.4f} {d['pe']:9.4f} "
                  f"{d['etot']:9.4f} {d['temp']:7.4f} {d['press']:8.4f}")
            if state.t > args.equil:
                for k in sums:
                    sums[k] += d[k]
                n_samples += 1
    elapsed = time.perf_counter() - t0

    msd_proxy = (state.vel * state.vel).sum(dim=1).mean().item()
    print(f"\nfinished {state.step} steps (t={state.t:.3f}) in {elapsed:.1f} s, "
          f"{state.step / elapsed:.1f} steps/s")
    if n_samples:
        print(f"averages over {n_samples} samples after t={args.equil}: "
              f"<PE/N>={sums['pe'] / n_samples:.4f}  <T>={sums['temp'] / n_samples:.4f}  "
              f"<P>={sums['press'] / n_samples:.4f}  <E/N>={sums['etot'] / n_samples:.4f}")
    print(f"final <v^2>={msd_proxy:.4f}  |P_total|={state.vel.sum(dim=0).norm().item():.2e}")


if __name__ == "__main__":
    main()
