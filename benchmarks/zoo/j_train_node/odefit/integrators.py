import torch


def rk4_step(func, t, y, dt):
    k1 = func(t, y)
    k2 = func(t + 0.5 * dt, y + 0.5 * dt * k1)
    k3 = func(t + 0.5 * dt, y + 0.5 * dt * k2)
    k4 = func(t + dt, y + dt * k3)
    return y + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def odeint_rk4(func, y0, t_grid, fixed=False):
    """Integrate dy/dt = func(t, y) on t_grid; returns (len(t_grid), *y0.shape)."""
    y = y0
    if fixed:
        states = [y0]
        for i in range(len(t_grid) - 1):
            dt = t_grid[i + 1] - t_grid[i]
            y = rk4_step(func, t_grid[i], y, dt)
            states.append(y)
        return torch.stack(states, dim=0)
    trajectory = y0.unsqueeze(0)
    for i in range(len(t_grid) - 1):
        dt = t_grid[i + 1] - t_grid[i]
        y = rk4_step(func, t_grid[i], y, dt)
        trajectory = torch.cat([trajectory, y.unsqueeze(0)], dim=0)  # PLANTED
    return trajectory
