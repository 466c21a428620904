"""Submitted poses -> the tracker's 41-state reference, with nuPlan's `InterpolatedTrajectory` semantics.

Written for one proposal (vmap for batches); runs in the dtype of its inputs. For float32, feed coordinates
re-centred on the ego (spec/tracker-json.md §5).
"""
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxdrive.sim import constants as C
from jaxdrive.sim import state as S
from jaxdrive.sim.angles import principal_value, unwrap

def relative_to_absolute(origin: Float[Array, "3"], poses: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
    """nuPlan's `relative_to_absolute_poses`: SE(2) product M(origin) @ M(pose).

    Args:
      origin: (x, y, heading) of the frame [m, m, rad].
      poses: (x, y, heading) in that frame [m, m, rad].

    Returns:
      (x, y, heading) in the origin's parent frame; heading = atan2(R10, R00) of the product, in (−π, π].
    """
    c0, s0 = jnp.cos(origin[2]), jnp.sin(origin[2])
    px, py, ph = poses[:, 0], poses[:, 1], poses[:, 2]
    c1, s1 = jnp.cos(ph), jnp.sin(ph)
    x = c0 * px - s0 * py + origin[0]
    y = s0 * px + c0 * py + origin[1]
    heading = jnp.arctan2(s0 * c1 + c0 * s1, c0 * c1 - s0 * s1)
    return jnp.stack([x, y, heading], axis=-1)


def interp_linear(
    knot_times: Float[Array, "m"], values: Float[Array, "m f"], query_times: Float[Array, "q"]
) -> Float[Array, "q f"]:
    """scipy `interp1d(kind='linear')`: a query on knot i >= 1 uses the segment on its left.

    Args:
      knot_times: increasing knot times (any unit; µs offsets here).
      values: values at the knots.
      query_times: times within [knot_times[0], knot_times[-1]].
    """
    left = jnp.searchsorted(knot_times, query_times, side="left", method="compare_all")
    hi = jnp.clip(left, 1, knot_times.shape[0] - 1)
    lo = hi - 1
    t_lo, t_hi = knot_times[lo][:, None], knot_times[hi][:, None]
    y_lo, y_hi = values[lo], values[hi]
    slope = (y_hi - y_lo) / (t_hi - t_lo)
    return slope * (query_times[:, None] - t_lo) + y_lo


def reference_states(
    initial_state: Float[Array, "11"],
    poses: Float[Array, "8 3"],
    knot_offsets_us: Float[Array, "9"],
    query_offsets_us: Float[Array, "41"],
) -> Float[Array, "41 11"]:
    """NAVSIM's tracker reference: knots (initial state + absolute poses) resampled at the query times.

    Args:
      initial_state: ego state at the rear axle, `StateIndex` layout [SI units, rad].
      poses: submitted (x, y, heading) in the initial rear-axle frame [m, m, rad].
      knot_offsets_us: knot times minus t0 [µs] (`times.knot_and_query_offsets_us`).
      query_offsets_us: query times minus t0 [µs].

    Returns:
      [41, 11] states: interpolated pose (heading unwrapped, interpolated, then wrapped into [−π, π)), the fields
      velocity x ... steering angle (3-7) ramping from their initial values to 0 at the first pose (the absolute
      poses carry zeros there), and 0 in the steering-rate, yaw-rate and yaw-acceleration fields (8-10).
    """
    dtype = initial_state.dtype
    knots = jnp.concatenate([initial_state[None, :3], relative_to_absolute(initial_state[:3], poses)], axis=0)
    ramped = initial_state[None, S.VELOCITY_X : S.STEERING_ANGLE + 1]
    ramp = jnp.concatenate([ramped, jnp.zeros((C.NUM_SUBMITTED_POSES, ramped.shape[1]), dtype)])
    linear = interp_linear(knot_offsets_us, jnp.concatenate([knots[:, :2], ramp], axis=1), query_offsets_us)
    heading = interp_linear(knot_offsets_us, unwrap(knots[:, 2])[:, None], query_offsets_us)
    zeros = jnp.zeros((query_offsets_us.shape[0], C.NUM_STATE_FIELDS - S.STEERING_ANGLE - 1), dtype)
    return jnp.concatenate([linear[:, :2], principal_value(heading), linear[:, 2:], zeros], axis=1)
