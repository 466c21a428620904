"""NAVSIM's batch LQR tracker for one proposal: profile fits and the per-step controller.

Mirrors `pdm_planner/simulation/batch_lqr.py` and `batch_lqr_utils.py` (spec/tracker-json.md §3.6-3.7),
including NAVSIM's quirks: the speed fit's regulariser is a ridge on the accelerations (a banded "difference"
matrix that overwrites its own superdiagonal), the reference pose is the current index, and the lateral rollout
uses the commanded, not the lagged, acceleration.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.sim import constants as C
from jaxdrive.sim import state as S
from jaxdrive.sim.angles import wrap_atan2

_HI = jax.lax.Precision.HIGHEST


class Profiles(NamedTuple):
    """Fitted profiles of one reference (§3.6): speeds [m/s], accelerations [m/s²], curvatures [1/m] and rates."""

    velocity: Float[Array, "40"]
    acceleration: Float[Array, "39"]
    curvature: Float[Array, "40"]
    curvature_rate: Float[Array, "39"]


class Command(NamedTuple):
    """Tracker output at one step, before the motion model's lags, with the values that produced it."""

    accel: Float[Array, ""]
    """Commanded longitudinal acceleration [m/s²]."""
    steering_rate: Float[Array, ""]
    """Commanded steering rate [rad/s]."""
    stopping: Bool[Array, ""]
    """Whether the stopping controller was used."""
    reference_velocity: Float[Array, ""]
    lateral_state: Float[Array, "3"]
    """(lateral error [m], heading error [rad], steering angle [rad]) before the horizon rollout."""


def banded_difference_matrix(num_rows: int) -> np.ndarray:
    """NAVSIM's `_make_banded_difference_matrix`, bug included: −I (n × n+1) plus +1 at (n−1, n).

    The +1 superdiagonal is written first and then overwritten by the −1 diagonal everywhere but the last row,
    so this is not a difference matrix (navsim issues #52, #136). Static; built with numpy.
    """
    m = np.zeros((num_rows, num_rows + 1))
    m[:, 1:] = np.eye(num_rows)
    m[:, :-1] = -np.eye(num_rows)
    return m


def _integrator_design(num: int, dtype) -> Float[Array, "n n"]:
    """Row k: [dt, dt², ..., dt² (k times), 0, ...]: maps [initial value, rates] to a value at step k (× dt)."""
    dt = C.TRACKER_DT
    cols = np.arange(num)
    base = np.where(cols[None, :] == 0, dt, np.where(cols[None, :] <= np.arange(num)[:, None], dt * dt, 0.0))
    return jnp.asarray(base, dtype)


def _solve_regularised(design: Array, target: Array, regulariser: Array) -> Array:
    """argmin ‖A z − y‖² + zᵀ W z via the normal equations (NAVSIM uses pinv; a solve agrees to ~1e-12)."""
    normal = jnp.matmul(design.T, design, precision=_HI) + regulariser
    return jnp.linalg.solve(normal, jnp.matmul(design.T, target, precision=_HI))


def _integrate(initial: Array, rates: Array) -> Array:
    """[initial, initial + rate_0·dt, ...]: the cumulative profile of length len(rates) + 1."""
    steps = jnp.cumsum(rates * C.TRACKER_DT)
    return initial + jnp.concatenate([jnp.zeros((1,), steps.dtype), steps])


def fit_profiles(reference_poses: Float[Array, "41 3"]) -> Profiles:
    """Speed and curvature profiles fitted to the reference poses (x, y, heading) [m, m, rad]."""
    dtype = reference_poses.dtype
    n = C.NUM_STEPS
    dxy = jnp.diff(reference_poses[:, :2], axis=0)
    dtheta = wrap_atan2(jnp.diff(reference_poses[:, 2]))
    heading = reference_poses[:-1, 2]
    base = _integrator_design(n, dtype)

    # Speed fit: dxy_k ≈ (cos θ_k, sin θ_k)·(dt·v0 + dt²·Σ_{j<k} a_j); rows interleave (x_k, y_k).
    direction = jnp.stack([jnp.cos(heading), jnp.sin(heading)], axis=-1)
    speed_design = (direction[:, :, None] * base[:, None, :]).reshape(2 * n, n)
    band = np.concatenate([np.zeros((n - 2, 1)), banded_difference_matrix(n - 2)], axis=1)
    speed_reg = jnp.asarray(C.JERK_PENALTY * band.T @ band, dtype)
    z = _solve_regularised(speed_design, dxy.reshape(2 * n), speed_reg)
    velocity = _integrate(z[0], z[1:])

    # Curvature fit: Δθ_k ≈ V_k·dt·κ0 + V_k·dt²·Σ_{j<k} κ̇_j.
    curv_design = velocity[:, None] * base
    curv_reg = jnp.diag(
        jnp.asarray([C.INITIAL_CURVATURE_PENALTY] + [C.CURVATURE_RATE_PENALTY] * (n - 1), dtype)
    )
    w = _solve_regularised(curv_design, dtheta, curv_reg)
    return Profiles(velocity, z[1:], _integrate(w[0], w[1:]), w[1:])


def _lateral_steering_rate(
    lateral_state: Float[Array, "3"],
    speed: Float[Array, ""],
    accel: Float[Array, ""],
    curvature_window: Float[Array, "10"],
) -> Float[Array, ""]:
    """One-step lateral LQR over the horizon, linearised about the speed rollout with the commanded acceleration."""
    dt = C.TRACKER_DT
    dtype = lateral_state.dtype
    speeds = speed + jnp.concatenate(
        [jnp.zeros((1,), dtype), jnp.cumsum(jnp.full((C.TRACKING_HORIZON - 1,), accel * dt))]
    )

    zero = jnp.zeros((), dtype)

    def step(carry, inputs):
        phi, gamma, offset = carry
        v, kappa = inputs

        def transition(m):
            """M @ m with M = [[1, v·dt, 0], [0, 1, v·dt/L], [0, 0, 1]], written out row by row."""
            return jnp.stack([m[0] + v * dt * m[1], m[1] + v * dt / C.WHEEL_BASE * m[2], m[2]])

        gamma = transition(gamma) + jnp.stack([zero, zero, zero + dt])
        offset = transition(offset) + jnp.stack([zero, -v * kappa * dt, zero])
        return (transition(phi), gamma, offset), None

    init = (jnp.eye(3, dtype=dtype), jnp.zeros((3,), dtype), jnp.zeros((3,), dtype))
    (phi, gamma, offset), _ = jax.lax.scan(step, init, (speeds, curvature_window))
    err = jnp.matmul(phi, lateral_state, precision=_HI) + offset
    err = jnp.concatenate([err[:1], wrap_atan2(err[1:])])
    q = jnp.asarray(C.Q_LATERAL, dtype)
    return -jnp.sum(gamma * q * err) / (jnp.sum(gamma * q * gamma) + C.R_LATERAL)


def track_step(
    step: Int[Array, ""],
    current: Float[Array, "11"],
    reference_pose: Float[Array, "3"],
    profiles: Profiles,
) -> Command:
    """Commands at step k from the current state and the reference pose of the same index k.

    Args:
      step: k in 0..39.
      current: simulated state k (`StateIndex` layout).
      reference_pose: reference (x, y, heading) at index k [m, m, rad].
      profiles: the reference's fitted profiles.
    """
    last = C.NUM_STEPS - 1
    x, y, heading = current[S.X], current[S.Y], current[S.HEADING]
    speed, steering = current[S.VELOCITY_X], current[S.STEERING_ANGLE]
    x_r, y_r, heading_r = reference_pose[0], reference_pose[1], reference_pose[2]
    lateral_error = -(x - x_r) * jnp.sin(heading_r) + (y - y_r) * jnp.cos(heading_r)
    lateral_state = jnp.stack([lateral_error, wrap_atan2(heading - heading_r), steering])

    reference_velocity = profiles.velocity[jnp.minimum(step + C.TRACKING_HORIZON, last)]
    window = profiles.curvature[jnp.minimum(step + jnp.arange(C.TRACKING_HORIZON), last)]

    stopping = (reference_velocity <= C.STOPPING_VELOCITY) & (speed <= C.STOPPING_VELOCITY)
    b = C.TRACKING_HORIZON * C.TRACKER_DT
    lqr_accel = (-1.0 / (b * C.Q_LONGITUDINAL * b + C.R_LONGITUDINAL)) * b * C.Q_LONGITUDINAL * (
        speed - reference_velocity
    )
    stop_accel = -C.STOPPING_PROPORTIONAL_GAIN * (speed - reference_velocity)
    accel = jnp.where(stopping, stop_accel, lqr_accel)
    steering_rate = jnp.where(stopping, 0.0, _lateral_steering_rate(lateral_state, speed, accel, window))
    return Command(accel, steering_rate, stopping, reference_velocity, lateral_state)
