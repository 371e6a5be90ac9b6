"""Small neural-ODE toolkit: learned vector fields and fixed-step integrators."""
from .dynamics import LatentODE, VectorField, damped_pendulum
from .integrators import rk4_step, odeint_rk4

__all__ = ["LatentODE", "VectorField", "damped_pendulum", "rk4_step", "odeint_rk4"]
