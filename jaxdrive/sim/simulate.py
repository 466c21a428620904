"""NAVSIM's simulation loop: reference -> 40 tracker + bicycle steps via `jax.lax.scan`, vmapped over proposals.

Device functions, jittable, in the dtype of their inputs. Feed coordinates re-centred on the ego (the host entry
point `jaxdrive.sim.simulate_trajectories` does this); in float32 the error against NAVSIM's float64 stays within
~1e-4 m after re-centring (spec/tracker-json.md §5).
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxdrive.sim import constants as C
from jaxdrive.sim.bicycle import propagate
from jaxdrive.sim.interpolate import reference_states
from jaxdrive.sim.lqr import Command, Profiles, fit_profiles, track_step
from jaxdrive.sim.times import DEFAULT_KNOT_OFFSETS_US, DEFAULT_QUERY_OFFSETS_US


class Trace(NamedTuple):
    """Tracker intermediates of one proposal (NAVSIM's values, for debugging and parity checks)."""

    profiles: Profiles
    commands: Command
    """Per step k = 0..39 (leading axis 40)."""


def track_reference(
    initial_state: Float[Array, "11"], reference_poses: Float[Array, "41 3"]
) -> tuple[Float[Array, "41 11"], Trace]:
    """Track a 41-pose reference from the initial state (`PDMSimulator.simulate_proposals` for one row).

    Args:
      initial_state: state 0 (`StateIndex` layout, rear axle) [SI units, rad].
      reference_poses: reference (x, y, heading) at 0, 0.1, ..., 4.0 s [m, m, rad], same frame as the state.

    Returns:
      (states [41, 11] with states[0] = initial_state, the tracker's trace).
    """
    profiles = fit_profiles(reference_poses)

    def step(current, inputs):
        k, reference_pose = inputs
        command = track_step(k, current, reference_pose, profiles)
        following = propagate(current, command.accel, command.steering_rate)
        return following, (following, command)

    _, (states, commands) = jax.lax.scan(
        step, initial_state, (jnp.arange(C.NUM_STEPS), reference_poses[: C.NUM_STEPS])
    )
    return jnp.concatenate([initial_state[None], states], axis=0), Trace(profiles, commands)


def simulate_one(
    initial_state: Float[Array, "11"],
    poses: Float[Array, "8 3"],
    knot_offsets_us: Float[Array, "9"],
    query_offsets_us: Float[Array, "41"],
) -> Float[Array, "41 11"]:
    """Submitted poses (initial rear-axle frame) -> simulated states [41, 11], in the initial state's frame."""
    reference = reference_states(initial_state, poses, knot_offsets_us, query_offsets_us)
    return track_reference(initial_state, reference[:, :3])[0]


def simulate_local(
    initial_states: Float[Array, "*b 11"],
    poses: Float[Array, "*b 8 3"],
    knot_offsets_us: Float[Array, "*#b 9"] | None = None,
    query_offsets_us: Float[Array, "*#b 41"] | None = None,
) -> Float[Array, "*b 41 11"]:
    """Batched simulation on re-centred arrays; jittable, for use inside the scoring pipeline's jit over [B, K].

    Args:
      initial_states: initial states (`StateIndex` layout, rear axle), x and y re-centred near 0 [SI units, rad].
      poses: submitted (x, y, heading) at 0.5, ..., 4.0 s in each initial rear-axle frame [m, m, rad].
      knot_offsets_us, query_offsets_us: µs grids from `times.knot_and_query_offsets_us`, broadcastable to the
        batch; default: the exact grid (t0 a whole second).

    Returns:
      Simulated states in the same frame and dtype as `initial_states`; row 0 is the initial state.
    """
    batch = initial_states.shape[:-1]
    dtype = initial_states.dtype
    if knot_offsets_us is None:
        knot_offsets_us = DEFAULT_KNOT_OFFSETS_US
    if query_offsets_us is None:
        query_offsets_us = DEFAULT_QUERY_OFFSETS_US
    knots = jnp.broadcast_to(jnp.asarray(knot_offsets_us, dtype), batch + (C.NUM_KNOTS,))
    queries = jnp.broadcast_to(jnp.asarray(query_offsets_us, dtype), batch + (C.NUM_STATES,))
    flat = jax.vmap(simulate_one)(
        initial_states.reshape(-1, C.NUM_STATE_FIELDS),
        poses.reshape(-1, C.NUM_SUBMITTED_POSES, 3).astype(dtype),
        knots.reshape(-1, C.NUM_KNOTS),
        queries.reshape(-1, C.NUM_STATES),
    )
    return flat.reshape(batch + (C.NUM_STATES, C.NUM_STATE_FIELDS))
