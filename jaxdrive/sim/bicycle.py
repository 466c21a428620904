"""NAVSIM's kinematic bicycle model, one step (`BatchKinematicBicycleModel.propagate_state`, spec §3.8).

First-order lags on acceleration and steering, then explicit Euler with the old speed, heading and steering.
No acceleration or steering-rate limits and no speed floor; only the steering angle is clipped.
"""
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxdrive.sim import constants as C
from jaxdrive.sim import state as S
from jaxdrive.sim.angles import principal_value


def propagate(
    current: Float[Array, "11"], accel_cmd: Float[Array, ""], steering_rate_cmd: Float[Array, ""]
) -> Float[Array, "11"]:
    """The next state after `constants.MOTION_MODEL_DT` seconds.

    Args:
      current: state k (`StateIndex` layout, rear axle) [SI units, rad].
      accel_cmd: commanded acceleration [m/s²].
      steering_rate_cmd: commanded steering rate [rad/s].

    Returns:
      State k+1; every field overwritten. The stored steering rate is the lagged, unclipped rate; the yaw rate uses
      the new speed and the clipped new steering angle.
    """
    h = C.MOTION_MODEL_DT
    heading, speed = current[S.HEADING], current[S.VELOCITY_X]
    accel_prev, steering = current[S.ACCELERATION_X], current[S.STEERING_ANGLE]

    accel = h / (h + C.ACCEL_TIME_CONSTANT) * (accel_cmd - accel_prev) + accel_prev
    steering_ideal = h * steering_rate_cmd + steering
    steering_lag = h / (h + C.STEERING_ANGLE_TIME_CONSTANT) * (steering_ideal - steering) + steering
    steering_rate = (steering_lag - steering) / h

    new_speed = speed + accel * h
    new_steering = jnp.clip(steering + steering_rate * h, -C.MAX_STEERING_ANGLE, C.MAX_STEERING_ANGLE)
    yaw_rate = new_speed * jnp.tan(new_steering) / C.WHEEL_BASE
    zero = jnp.zeros((), current.dtype)
    return jnp.stack(
        [
            current[S.X] + speed * jnp.cos(heading) * h,
            current[S.Y] + speed * jnp.sin(heading) * h,
            principal_value(heading + (speed * jnp.tan(steering) / C.WHEEL_BASE) * h),
            new_speed,
            zero,
            accel,
            zero,
            new_steering,
            steering_rate,
            yaw_rate,
            (yaw_rate - current[S.ANGULAR_VELOCITY]) / h,
        ]
    )
