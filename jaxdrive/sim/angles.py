"""Angle wrapping and unwrapping exactly as NAVSIM / nuPlan / numpy do it."""
import jax.numpy as jnp
from jaxtyping import Array, Float


def principal_value(angle: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """nuPlan's `principal_value`: (a + π) mod 2π − π, in [−π, π) [rad]."""
    return jnp.mod(angle + jnp.pi, 2 * jnp.pi) - jnp.pi


def wrap_atan2(angle: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """atan2(sin a, cos a), in (−π, π] [rad]; NAVSIM's wrap for heading differences and errors."""
    return jnp.arctan2(jnp.sin(angle), jnp.cos(angle))


def unwrap(angles: Float[Array, "n"]) -> Float[Array, "n"]:
    """`np.unwrap(angles)` with the default discontinuity π and period 2π [rad]."""
    d = jnp.diff(angles)
    dd = jnp.mod(d + jnp.pi, 2 * jnp.pi) - jnp.pi
    dd = jnp.where((dd == -jnp.pi) & (d > 0), jnp.pi, dd)
    correction = jnp.where(jnp.abs(d) < jnp.pi, 0.0, dd - d)
    return jnp.concatenate([angles[:1], angles[1:] + jnp.cumsum(correction)])
