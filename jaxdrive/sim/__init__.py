"""NAVSIM's trajectory simulation step in JAX: interpolation to 0.1 s, batch LQR tracker, kinematic bicycle.

`simulate_trajectories` is the host entry point (numpy float64, global frame); `simulate_local` is the jittable
device function on re-centred arrays for use inside the scoring jit. Spec: shared/spec/tracker-json.md.
"""
from jaxdrive.sim.host import simulate_trajectories
from jaxdrive.sim.simulate import simulate_local, track_reference
from jaxdrive.sim.times import knot_and_query_offsets_us

__all__ = ["simulate_trajectories", "simulate_local", "track_reference", "knot_and_query_offsets_us"]
